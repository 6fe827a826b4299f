"""Third-party rule packs (`netlint.rules` entry points): found when installed, gone when removed, and looked up
without importlib.metadata when no distribution declares one (netlint.rule._packs_possible). Each case runs in a
fresh interpreter: the packs are loaded once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

PACK = '''
from netlint.ir import Graph
from netlint.rule import Rule, register


@register
class PackRule(Rule):
    """A rule from a third-party pack."""

    code = "XPK901"
    name = "pack-rule"
    category = "fusion"

    def scan(self, graph: Graph, ctx):
        return iter(())
'''

PROBE = (
    "import json, sys\n"
    "from netlint.rule import all_rules\n"
    "print(json.dumps({'pack': 'XPK901' in all_rules(), 'metadata': 'importlib.metadata' in sys.modules}))\n"
)


def install(site: Path, group: str = "netlint.rules") -> Path:
    """A distribution in `site` (a folder on sys.path) whose entry point in `group` is the module xpack."""
    (site / "xpack.py").write_text(PACK, encoding="utf-8")
    info = site / "xpack-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: xpack\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[{group}]\nxpack = xpack\n", encoding="utf-8")
    return info


def probe(*path: Path) -> dict[str, bool]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path))}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.fixture
def site(tmp_path: Path) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    return folder


def test_an_installed_pack_is_loaded_and_a_removed_one_is_not(site):
    info = install(site)
    assert probe(site)["pack"]
    (info / "entry_points.txt").unlink()
    (info / "METADATA").unlink()
    info.rmdir()
    assert probe(site) == {"pack": False, "metadata": False}


def test_without_packs_importlib_metadata_is_not_imported(site):
    assert probe(site) == {"pack": False, "metadata": False}


def test_entry_points_of_other_groups_load_nothing(site):
    install(site, group="console_scripts")
    assert probe(site) == {"pack": False, "metadata": False}


def test_a_pack_in_an_egg_info_folder_is_loaded(site):
    info = install(site)
    info.rename(site / "xpack-1.0-py3.11.egg-info")
    assert probe(site)["pack"]


def test_a_pack_inside_a_zip_on_sys_path_is_loaded(site, tmp_path):
    install(site)
    archive = tmp_path / "packs.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for file in site.rglob("*"):
            if file.is_file():
                out.write(file, file.relative_to(site).as_posix())
    assert probe(archive)["pack"]
