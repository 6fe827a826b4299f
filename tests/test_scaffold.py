"""The new-rule scaffold writes a rule that registers, lints and reports, a test file that passes against it, a pass
skeleton that registers, and refuses to overwrite or to take a malformed code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from netlint.scaffold import main, scaffold

# Imports the scaffolded rule and pass in a fresh interpreter (the test process's registries stay as they are), then
# runs the scaffolded test function against them.
RUN = """
import importlib.util, sys
from pathlib import Path
root = Path(sys.argv[1])
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
load("netlint.rules.zz901_sigmoid_after_conv", root / "rules" / "zz901_sigmoid_after_conv.py")
load("netlint.fixes.sigmoid_to_relu", root / "netlint" / "fixes" / "sigmoid_to_relu.py")
from netlint.fixes.registry import find_pass
from netlint.rule import all_rules
assert all_rules()["ZZ901"].fix.name == "sigmoid-to-relu" and find_pass("sigmoid-to-relu") is not None
tests = load("scaffolded_test", root / "tests" / "rules" / "test_zz901_sigmoid_after_conv.py")
tests.test_reported(tests.onnx_model)
print(all_rules()["ZZ901"].summary())
"""


def test_scaffolded_rule_registers_and_reports(tmp_path: Path) -> None:
    written = scaffold(tmp_path, "ZZ901", "sigmoid-after-conv", "Sigmoid", "fusion", "sigmoid-to-relu")
    assert sorted(path.relative_to(tmp_path).as_posix() for path in written) == [
        "netlint/fixes/sigmoid_to_relu.py",
        "rules/zz901_sigmoid_after_conv.py",
        "tests/rules/test_zz901_sigmoid_after_conv.py",
    ]
    done = subprocess.run([sys.executable, "-c", RUN, str(tmp_path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "One line saying what is wrong (the README table and `netlint rule ZZ901` show it)."


def test_scaffold_refuses_to_overwrite_and_bad_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["FU909", "thing", "--op", "Relu", "--root", str(tmp_path)]
    assert main(args) == 0
    before = (tmp_path / "rules" / "fu909_thing.py").read_text()
    assert main(args) == 2
    assert "exists" in capsys.readouterr().err
    assert (tmp_path / "rules" / "fu909_thing.py").read_text() == before
    assert main(["fu909", "thing", "--op", "Relu", "--root", str(tmp_path)]) == 2
    assert main(["FU908", "Thing", "--op", "Relu", "--root", str(tmp_path)]) == 2


def test_netlint_new_rule_is_the_scaffold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from netlint.cli import main as cli_main

    args = ["new-rule", "ZZ902", "relu-after-conv", "--op", "Relu", "--root", str(tmp_path)]
    assert cli_main(args) == 0
    assert (tmp_path / "rules" / "zz902_relu_after_conv.py").is_file()
    assert "wrote" in capsys.readouterr().out
    assert cli_main(args) == 2  # the files exist now: refused, one line
    assert "exists" in capsys.readouterr().err
