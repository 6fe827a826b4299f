"""Configuration: where it is found, what each key does, how flags combine with it, and its errors."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from netlint.cli import main
from netlint.config import FileConfig, Overrides, find_config, read_config_file, settings_for, validate
from netlint.errors import ConfigError
from netlint.testing import GraphBuilder

FACENET = "facenet_mtcnn_pnet.onnx"


def prelu_model(path: Path, name: str = "prelu") -> Path:
    """One FU004 (warning on every target: the slopes are all 0, so it is exactly Relu)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    b.output(b.prelu(x, [0.0, 0.0], name=name))
    return b.save(path)


def three_rule_model(path: Path) -> Path:
    """One finding each of FU001 (without a target: an info summary), FU004 and FU006 (warnings)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    y = b.conv(x, 2, name="block/conv_a")
    b.output(b.relu(y, name="block/relu_a"), b.add(y, x, name="block/add_a"))
    b.output(b.prelu(x, [0.0, 0.0], name="head/prelu_b"))
    b.output(b.batchnorm(b.conv(x, 2, name="head/conv_c"), name="head/bn_c"))
    return b.save(path)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def check(run_cli, tmp_path):
    """`netlint check --format json ...` from a working folder that holds no configuration."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()

    def run(*args, **kw):
        kw.setdefault("cwd", cwd)
        result = run_cli("check", "--format", "json", *args, **kw)
        assert "Traceback" not in result.stdout + result.stderr
        return result

    return run


@pytest.fixture
def in_process(tmp_path, monkeypatch, capsys):
    """The same as `check`, through `netlint.cli.main` in this process: fast, for the larger matrices."""
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    monkeypatch.chdir(cwd)

    def run(*args):
        find_config.cache_clear()
        code = main(["check", "--format", "json", *map(str, args)])
        out, err = capsys.readouterr()
        find_config.cache_clear()
        return subprocess.CompletedProcess(["netlint", *args], code, out, err)

    return run


def findings(result) -> list[tuple[str, str, str]]:
    """(model file name, code, severity) of every finding."""
    document = json.loads(result.stdout)
    return [(Path(m["path"]).name, f["code"], f["severity"]) for m in document["models"] for f in m["findings"]]


def codes(result) -> list[str]:
    return sorted(code for _, code, _ in findings(result))


def one_error_line(result) -> str:
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("netlint: error: ")
    return lines[0]


# --- finding the configuration ---------------------------------------------------------------------------------------
def test_pyproject_found_walking_up_from_the_model(check, tmp_path):
    write(tmp_path / "repo" / "pyproject.toml", '[project]\nname = "x"\n\n[tool.netlint]\nignore = ["FU004"]\n')
    model = prelu_model(tmp_path / "repo" / "models" / "deep" / "m.onnx")
    result = check(model)
    assert result.returncode == 0, result.stderr
    assert codes(result) == []


def test_configuration_of_the_working_folder_does_not_apply_to_models_elsewhere(check, tmp_path):
    write(tmp_path / "cwd" / "netlint.toml", 'ignore = ["FU004"]\n')
    model = prelu_model(tmp_path / "elsewhere" / "m.onnx")
    assert codes(check(model)) == ["FU004"]


def test_netlint_toml_wins_over_pyproject_in_the_same_folder(check, tmp_path):
    write(tmp_path / "repo" / "pyproject.toml", '[tool.netlint]\nseverity = { FU004 = "warning" }\n')
    write(tmp_path / "repo" / "netlint.toml", 'severity = { FU004 = "error" }\n')
    model = prelu_model(tmp_path / "repo" / "m.onnx")
    assert findings(check(model)) == [("m.onnx", "FU004", "error")]


def test_nearer_configuration_wins(check, tmp_path):
    write(tmp_path / "repo" / "netlint.toml", 'ignore = ["FU004"]\n')
    write(tmp_path / "repo" / "sub" / "pyproject.toml", '[tool.netlint]\nseverity = { FU004 = "error" }\n')
    model = prelu_model(tmp_path / "repo" / "sub" / "m.onnx")
    # the nearer file wins whole: its settings are not merged with the farther one's
    assert findings(check(model)) == [("m.onnx", "FU004", "error")]


def test_pyproject_without_tool_netlint_is_passed_over(check, tmp_path):
    write(tmp_path / "repo" / "netlint.toml", 'ignore = ["FU004"]\n')
    write(
        tmp_path / "repo" / "sub" / "pyproject.toml", '[project]\nname = "unrelated"\n\n[tool.ruff]\nline-length = 1\n'
    )
    model = prelu_model(tmp_path / "repo" / "sub" / "m.onnx")
    result = check(model)
    assert result.returncode == 0
    assert codes(result) == []


def test_models_in_folders_with_different_configurations_get_their_own(check, tmp_path):
    write(tmp_path / "a" / "netlint.toml", 'severity = { FU004 = "error" }\n')
    write(tmp_path / "b" / "pyproject.toml", '[tool.netlint]\nignore = ["FU004"]\n')
    write(tmp_path / "c" / "netlint.toml", 'target = "own.toml"\n')
    write(tmp_path / "c" / "own.toml", '[target]\nname = "c-board"\ndescription = "c"\n')
    prelu_model(tmp_path / "a" / "ma.onnx")
    prelu_model(tmp_path / "b" / "mb.onnx")
    prelu_model(tmp_path / "c" / "mc.onnx")
    prelu_model(tmp_path / "d" / "md.onnx")  # no configuration: defaults
    result = check(tmp_path / "a", tmp_path / "b", tmp_path / "c", tmp_path / "d")
    assert result.returncode == 1, result.stderr
    assert findings(result) == [
        ("ma.onnx", "FU004", "error"),
        ("mc.onnx", "FU004", "warning"),
        ("md.onnx", "FU004", "warning"),
    ]
    targets = {Path(m["path"]).name: m["target"] for m in json.loads(result.stdout)["models"]}
    assert targets == {"ma.onnx": "generic", "mb.onnx": "generic", "mc.onnx": "c-board", "md.onnx": "generic"}


def test_find_config_in_process(tmp_path):
    write(tmp_path / "netlint.toml", 'ignore = ["FU004"]\n')
    write(tmp_path / "x" / "pyproject.toml", "[project]\nname = 'x'\n")
    write(tmp_path / "x" / "y" / "pyproject.toml", "[tool.netlint]\nselect = ['FU001']\n")
    (tmp_path / "x" / "y" / "z").mkdir()
    find_config.cache_clear()
    try:
        assert find_config(tmp_path / "x") == FileConfig(tmp_path / "netlint.toml", {"ignore": ["FU004"]})
        assert find_config(tmp_path / "x" / "y" / "z") == FileConfig(
            tmp_path / "x" / "y" / "pyproject.toml", {"select": ["FU001"]}
        )
    finally:
        find_config.cache_clear()


# --- what each key does ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("", ["FU001", "FU004", "FU006"]),
        ('select = ["FU001"]\n', ["FU001"]),
        ('select = ["prelu-as-relu", "FU006"]\n', ["FU004", "FU006"]),
        ('select = ["FU001"]\nextend-select = ["FU004"]\n', ["FU001", "FU004"]),
        ('ignore = ["FU00"]\n', []),
        ('ignore = ["batchnorm-after-conv"]\n', ["FU001", "FU004"]),
        ('select = ["FU004"]\nignore = ["FU004"]\n', []),
        ('per-node-ignores = { "head/*" = ["FU"] }\n', ["FU001"]),
        # "block/*" matches nodes but suppresses nothing there: NL100 (unused-suppression) says so
        (
            'per-node-ignores = { "head/prelu_b" = ["prelu-as-relu"], "block/*" = ["FU006"] }\n',
            ["FU001", "FU006", "NL100"],
        ),
        ('per-node-ignores = { "*conv_a" = ["FU001"] }\n', ["FU004", "FU006"]),
    ],
)
def test_selection_keys(in_process, tmp_path, config, expected):
    write(tmp_path / "repo" / "netlint.toml", config)
    model = three_rule_model(tmp_path / "repo" / "m.onnx")
    result = in_process(model)
    assert codes(result) == expected
    assert result.returncode == (1 if set(expected) - {"FU001"} else 0)  # FU001 is an info summary without a target


def test_per_node_ignores_on_a_real_model(check, tmp_path, data_dir):
    shutil.copy(data_dir / FACENET, tmp_path / FACENET)
    write(
        tmp_path / "pyproject.toml",
        '[tool.netlint]\ntarget = "qualcomm-htp"\nselect = ["FU003", "FU004"]\n'
        'per-node-ignores = { "/prelu1/*" = ["FU004"], "/conv3/*" = ["FU"] }\n',
    )
    nodes = [f["nodes"][0] for f in json.loads(check(tmp_path / FACENET).stdout)["models"][0]["findings"]]
    assert nodes == ["/conv1/Conv", "/conv2/Conv", "/prelu2/PRelu", "/prelu3/PRelu"]


def test_severity_override_shows_in_text_output(run_cli, tmp_path, data_dir):
    shutil.copy(data_dir / FACENET, tmp_path / FACENET)
    write(tmp_path / "netlint.toml", 'target = "qualcomm-htp"\nselect = ["FU004"]\nseverity = { FU004 = "error" }\n')
    result = run_cli("check", FACENET)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert sum(" FU004 [error] " in line for line in lines) == 3
    assert " [info] " not in result.stdout
    assert lines[-1] == "Found 3 findings (3 error) in 1 model for qualcomm-htp (a8, chip 8450)."


def test_severity_by_prefix_and_name(check, tmp_path):
    write(tmp_path / "netlint.toml", 'severity = { FU = "info", batchnorm-after-conv = "error" }\n')
    model = three_rule_model(tmp_path / "m.onnx")
    assert sorted(findings(check(model))) == [
        ("m.onnx", "FU001", "info"),
        ("m.onnx", "FU004", "info"),
        ("m.onnx", "FU006", "error"),
    ]


def test_target_by_name_and_by_path_relative_to_the_configuration(check, tmp_path):
    write(tmp_path / "repo" / "targets" / "board.toml", '[target]\nname = "board"\ndescription = "ours"\n')
    write(tmp_path / "repo" / "pyproject.toml", '[tool.netlint]\ntarget = "targets/board.toml"\n')
    write(tmp_path / "other" / "netlint.toml", 'target = "generic"\n')
    prelu_model(tmp_path / "repo" / "models" / "m.onnx")
    prelu_model(tmp_path / "other" / "n.onnx")
    # run from a folder that is neither: the path is the configuration file's, not the working folder's
    result = check(tmp_path / "repo" / "models" / "m.onnx", tmp_path / "other" / "n.onnx")
    assert result.returncode == 1, result.stderr  # the exact-Relu PRelu is a warning on any target
    assert [m["target"] for m in json.loads(result.stdout)["models"]] == ["board", "generic"]


def test_unknown_target_in_configuration_exits_2(check, tmp_path):
    write(tmp_path / "netlint.toml", 'target = "nope"\n')
    line = one_error_line(check(prelu_model(tmp_path / "m.onnx")))
    assert str(tmp_path / "netlint.toml") in line
    assert "'target'" in line
    assert "'nope'" in line


def test_missing_target_file_in_configuration_exits_2_naming_file_and_key(check, tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.netlint]\ntarget = "gone.toml"\n')
    line = one_error_line(check(prelu_model(tmp_path / "m.onnx")))
    assert str(tmp_path / "pyproject.toml") in line
    assert "'target'" in line
    assert "gone.toml" in line


# --- flags over the file ---------------------------------------------------------------------------------------------
def test_select_flag_replaces_the_configured_select(check, tmp_path):
    write(tmp_path / "netlint.toml", 'select = ["FU006"]\n')
    model = three_rule_model(tmp_path / "m.onnx")
    assert codes(check(model, "--select", "FU004")) == ["FU004"]
    assert codes(check(model)) == ["FU006"]


def test_select_flag_means_only_these_rules_even_with_a_configured_extend_select(in_process, tmp_path):
    write(tmp_path / "netlint.toml", 'select = ["FU001"]\nextend-select = ["FU006"]\n')
    model = three_rule_model(tmp_path / "m.onnx")
    assert codes(in_process(model)) == ["FU001", "FU006"]
    assert codes(in_process(model, "--select", "FU004")) == ["FU004"]
    assert codes(in_process(model, "--select", "FU004", "--extend-select", "FU001")) == ["FU001", "FU004"]


def test_extend_select_flag_adds_to_the_configured_select(check, tmp_path):
    write(tmp_path / "netlint.toml", 'select = ["FU006"]\n')
    model = three_rule_model(tmp_path / "m.onnx")
    assert codes(check(model, "--extend-select", "FU001")) == ["FU001", "FU006"]


def test_ignore_flag_adds_to_the_configured_ignore(check, tmp_path):
    write(tmp_path / "netlint.toml", 'ignore = ["FU001"]\n')
    model = three_rule_model(tmp_path / "m.onnx")
    assert codes(check(model, "--ignore", "FU006")) == ["FU004"]


def test_configured_ignore_beats_select_flag(check, tmp_path):
    write(tmp_path / "netlint.toml", 'ignore = ["FU004"]\n')
    model = three_rule_model(tmp_path / "m.onnx")
    result = check(model, "--select", "FU004")
    assert codes(result) == []
    assert result.returncode == 0


def test_target_flag_overrides_the_configured_target(check, tmp_path):
    write(tmp_path / "netlint.toml", 'target = "nope"\n')
    write(tmp_path / "cwd" / "mine.toml", '[target]\nname = "mine"\ndescription = "flag"\n')
    result = check(prelu_model(tmp_path / "m.onnx"), "--target", "mine.toml")
    assert result.returncode == 1, result.stderr  # the exact-Relu PRelu is a warning on any target
    assert json.loads(result.stdout)["models"][0]["target"] == "mine"


def test_precision_and_chip_from_configuration_and_flags(check, tmp_path):
    write(tmp_path / "netlint.toml", 'target = "qualcomm-htp"\nprecision = "a16"\nchip = "8550"\n')
    model = prelu_model(tmp_path / "m.onnx")

    def selection(*flags: str) -> tuple[str, str | None, str | None]:
        entry = json.loads(check(model, *flags).stdout)["models"][0]
        return entry["target"], entry["precision"], entry["chip"]

    assert selection() == ("qualcomm-htp", "a16", "8550")
    assert selection("--precision", "fp16") == ("qualcomm-htp", "fp16", "8550")
    assert selection("--chip", "8650") == ("qualcomm-htp", "a16", "8650")
    # a target named on the command line starts from its own defaults, not the file's precision for another target
    assert selection("--target", "ti-tda4vm") == ("ti-tda4vm", "int8", None)
    assert selection("--target", "ti-tda4vm", "--precision", "int16") == ("ti-tda4vm", "int16", None)


def test_unknown_precision_flag_exits_2_listing_the_known_ones(check, tmp_path):
    result = check(prelu_model(tmp_path / "m.onnx"), "--target", "qualcomm-htp", "--precision", "int8")
    line = one_error_line(result)
    assert "no precision 'int8' (a8, a16, fp16)" in line


def test_config_flag_replaces_the_search(check, tmp_path):
    write(tmp_path / "repo" / "netlint.toml", 'ignore = ["FU004"]\n')
    explicit = write(tmp_path / "elsewhere" / "strict.toml", 'severity = { FU004 = "error" }\n')
    model = prelu_model(tmp_path / "repo" / "m.onnx")
    assert findings(check(model, "--config", explicit)) == [("m.onnx", "FU004", "error")]


def test_config_flag_reads_tool_netlint_of_a_pyproject(check, tmp_path):
    explicit = write(tmp_path / "elsewhere" / "pyproject.toml", '[tool.netlint]\nseverity = { FU004 = "warning" }\n')
    model = prelu_model(tmp_path / "repo" / "m.onnx")
    assert findings(check(model, "--config", explicit)) == [("m.onnx", "FU004", "warning")]


def test_config_flag_with_missing_file_exits_2(check, tmp_path):
    line = one_error_line(check(prelu_model(tmp_path / "m.onnx"), "--config", tmp_path / "missing.toml"))
    assert "missing.toml" in line


def test_isolated_ignores_every_configuration_file(check, tmp_path):
    write(tmp_path / "repo" / "netlint.toml", 'ignore = ["FU004"]\n')
    write(tmp_path / "netlint.toml", "this is [not toml\n")  # not even read
    model = prelu_model(tmp_path / "repo" / "m.onnx")
    result = check(model, "--isolated")
    assert result.returncode == 1, result.stderr
    assert findings(result) == [("m.onnx", "FU004", "warning")]


# --- errors ----------------------------------------------------------------------------------------------------------
CONFIG_ERRORS = [
    ("select = [\n", None),  # malformed TOML
    ('selct = ["FU001"]\n', "selct"),
    ('select = "FU001"\n', "select"),
    ("ignore = [1]\n", "ignore"),
    ('extend-select = ["FU999"]\n', "extend-select"),
    ('select = ["FU999"]\n', "select"),
    ('ignore = ["no-such-rule"]\n', "ignore"),
    ('severity = { FU004 = "fatal" }\n', "severity"),
    ('severity = { FU999 = "error" }\n', "severity"),
    ('severity = "error"\n', "severity"),
    ('per-node-ignores = ["x"]\n', "per-node-ignores"),
    ('per-node-ignores = { "x" = "FU001" }\n', "per-node-ignores"),
    ('per-node-ignores = { "x" = ["FU999"] }\n', "per-node-ignores"),
    ("target = 3\n", "target"),
    ("precision = 16\n", "precision"),
    ('chip = ["8550"]\n', "chip"),
]
# valid types, but names the configured target does not declare: found when the target is loaded for a model
SELECTION_ERRORS = [
    ('precision = "a4"\n', "precision"),
    ('target = "qualcomm-htp"\nchip = "8250"\n', "chip"),
]


@pytest.mark.parametrize(("config", "key"), CONFIG_ERRORS + SELECTION_ERRORS)
def test_configuration_errors_exit_2_naming_file_and_key(in_process, tmp_path, config, key):
    path = write(tmp_path / "repo" / "netlint.toml", config)
    line = one_error_line(in_process(prelu_model(tmp_path / "repo" / "m.onnx")))
    assert str(path) in line
    assert f"'{key}" in line if key is not None else "invalid TOML" in line


@pytest.mark.parametrize(("config", "key"), CONFIG_ERRORS)
def test_pyproject_errors_name_file_table_and_key(tmp_path, config, key):
    """The same errors in pyproject.toml (in-process: the CLI path is the one above)."""
    path = write(tmp_path / "pyproject.toml", "[tool.netlint]\n" + config)
    find_config.cache_clear()
    try:
        with pytest.raises(ConfigError) as raised:
            find_config(tmp_path)
    finally:
        find_config.cache_clear()
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    if key is None:
        assert "invalid TOML" in message
    else:
        assert message.startswith(f"{path} [tool.netlint]: ")
        assert f"'{key}" in message


def test_pyproject_error_exits_2_with_one_line(check, tmp_path):
    path = write(tmp_path / "pyproject.toml", '[tool.netlint]\nselect = "FU001"\n')
    line = one_error_line(check(prelu_model(tmp_path / "m.onnx")))
    assert f"{path} [tool.netlint]: 'select' must be a list of strings" in line


def test_configuration_error_with_config_flag_names_the_file(check, tmp_path):
    path = write(tmp_path / "custom.toml", 'selct = ["FU001"]\n')
    line = one_error_line(check(prelu_model(tmp_path / "m.onnx"), "--config", path))
    assert str(path) in line and "'selct'" in line


def test_validate_and_read_in_process(tmp_path):
    assert validate({"select": ["FU001"], "severity": {"FU004": "error"}}, "x") == {
        "select": ["FU001"],
        "severity": {"FU004": "error"},
    }
    with pytest.raises(ConfigError, match=r"^where: unknown key 'selct'"):
        validate({"selct": []}, "where")
    path = write(tmp_path / "pyproject.toml", '[tool.netlint]\nselect = ["FU001"]\n')
    assert read_config_file(path) == FileConfig(path, {"select": ["FU001"]})
    assert read_config_file(write(tmp_path / "a" / "pyproject.toml", "[project]\n")).values == {}


def test_settings_for_merges_file_and_flags():
    config = FileConfig(None, {"select": ["FU006"], "ignore": ["FU001"], "severity": {"FU006": "error"}})
    settings = settings_for(config, Overrides(select=["FU001", "FU004"], ignore=["FU006"]))
    assert [rule.code for rule in settings.rules] == ["FU004"]
    assert settings.severity == {"FU006": "error"}
    assert settings.target.name == "generic"
    settings = settings_for(FileConfig(None, {"per-node-ignores": {"a/*": ["FU"]}}), Overrides())
    assert settings.ignored("a/b", "FU004")
    assert not settings.ignored("b/a", "FU004")


def test_hostile_configuration_key_is_reported_safely(check, tmp_path):
    write(tmp_path / "netlint.toml", '"\\u001b[2Jevil\\nkey" = 1\n')
    line = one_error_line(check(prelu_model(tmp_path / "m.onnx")))
    assert "\x1b" not in line
    assert "unknown key" in line
    assert "evil" in line


# --- rule options ----------------------------------------------------------------------------------------------------
def test_rule_option_changes_what_a_rule_reports(check, tmp_path):
    """FU004's atol: slopes of 1e-4 are 'varying' (info on qualcomm-htp 8450, where PRelu does not fuse) by default,
    exactly Relu (warning) with atol = 1e-3."""
    b = GraphBuilder()
    x = b.input("x", [1, 2, 4, 4])
    b.output(b.prelu(b.conv(x, 2, name="c"), [1e-4, -1e-4], name="p"))
    model = b.save(tmp_path / "m.onnx")

    def severities() -> list[str]:
        found = json.loads(check(model, "--target", "qualcomm-htp", "--select", "FU004").stdout)
        return [f["severity"] for f in found["models"][0]["findings"]]

    assert severities() == ["info"]
    write(tmp_path / "netlint.toml", "rule-options = { prelu-as-relu = { atol = 1e-3 } }\n")
    assert severities() == ["warning"]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            "rule-options = { FU004 = { tol = 1 } }\n",
            "'rule-options.FU004.tol': FU004 has no such option (its options: atol)",
        ),
        ('rule-options = { FU004 = { atol = "x" } }\n', "'rule-options.FU004.atol' must be float"),
        ("rule-options = { FU004 = { atol = true } }\n", "'rule-options.FU004.atol' must be float"),
        ("rule-options = { FU999 = { atol = 1 } }\n", "'rule-options.FU999': not a rule code or name"),
        ("rule-options = { FU004 = 3 }\n", "'rule-options.FU004' must be a table"),
        ("rule-options = 3\n", "'rule-options' must be"),
    ],
)
def test_rule_option_errors_name_the_key(tmp_path, config, expected):
    path = write(tmp_path / "netlint.toml", config)
    with pytest.raises(ConfigError) as raised:
        read_config_file(path)
    assert expected in str(raised.value) and str(path) in str(raised.value)
