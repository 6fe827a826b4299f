"""Configuration: `[tool.netlint]` in pyproject.toml or the top level of netlint.toml, found by walking up from each
model's folder (netlint.toml wins in the same folder), then command-line flags on top.

Nothing is silently ignored: an unknown key, a wrong type, an unknown rule selector or severity is a ConfigError that
names the file, the key and what was expected.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from netlint.errors import ConfigError, UsageError
from netlint.rule import SEVERITIES, Rule, Severity, all_rules
from netlint.targets import Target, load_target

# key -> (expected type description, validator)
_LIST_OF_STR = "a list of strings"
KEYS: dict[str, str] = {
    "target": "a string (a target name or a path to a .toml target file)",
    "precision": "a string (one of the target's precisions, e.g. 'a16'; `netlint targets` lists them)",
    "chip": "a string (one of the target's chips, e.g. '8550')",
    "select": _LIST_OF_STR,
    "extend-select": _LIST_OF_STR,
    "ignore": _LIST_OF_STR,
    "per-node-ignores": "a table of node-id glob = list of rule selectors",
    "severity": "a table of rule selector = 'error' | 'warning' | 'info'",
    "rule-options": "a table of rule code or name = table of option = value (`netlint rule CODE` lists them)",
    "cache-dir": "a string (the content cache's folder, relative to this file; read from the configuration of the "
    "working directory)",
    "exclude": "a list of patterns (files and folders not searched; replaces the default: venv, site-packages, "
    "node_modules, __pypackages__)",
    "extend-exclude": "a list of patterns (files and folders not searched, in addition to `exclude`)",
    "respect-gitignore": "a boolean (leave out what git ignores: .gitignore, .git/info/exclude; default true)",
    "force-exclude": "a boolean (apply `exclude` and .gitignore to files passed by name too; default false)",
    "per-file-ignores": "a table of file pattern = list of rule selectors",
    "fail-on-missing-weights": "a boolean (a model whose external data file is missing is an error; default false)",
}
# The keys of file selection and of the run (not of one model's linting): read from the configuration of the working
# directory (or --config), like cache-dir.
SELECTION_KEYS = ("exclude", "extend-exclude", "respect-gitignore", "force-exclude")


@dataclass
class FileConfig:
    """The validated contents of one configuration file."""

    path: Path | None = None
    values: dict[str, Any] = field(default_factory=dict)


@dataclass
class Settings:
    """Everything the engine needs to lint one model."""

    rules: list[type[Rule]]
    target: Target
    per_node_ignores: list[tuple[str, frozenset[str]]] = field(default_factory=list)
    severity: dict[str, Severity] = field(default_factory=dict)
    config_path: Path | None = None
    rule_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    fingerprints: bool = False  # compute structural fingerprints (baselines, SARIF, GitLab): not free on big graphs
    page_data: bool = False  # attach what the HTML page shows (pictures, op counts, cost breakdown): HTML only
    keep_slower_fixes: bool = False  # `netlint fix` applies fixes the cost model predicts to slow the target down
    skip_lfs_pointers: bool = False  # a Git LFS pointer is a skipped model (a note), not a load error
    fail_on_missing_weights: bool = False  # a missing external data file is the model's error, not a note

    def ignored(self, node_id: str, code: str) -> bool:
        return any(code in codes and fnmatch.fnmatchcase(node_id, glob) for glob, codes in self.per_node_ignores)


def resolve_selector(selector: str, where: str) -> set[str]:
    """Rule codes for a selector: ALL, a code (FU001), a code prefix (FU, FU00) or a rule name (prelu-as-relu)."""
    rules = all_rules()
    if selector == "ALL":
        return set(rules)
    by_name = {cls.name: code for code, cls in rules.items()}
    if selector in by_name:
        return {by_name[selector]}
    matched = {code for code in rules if code.startswith(selector)} if selector[:1].isupper() else set()
    if not matched:
        raise ConfigError(
            f"{where}: unknown rule selector '{selector}' (use a code like FU001, a prefix like FU, "
            f"a name like multi-consumer-conv, or ALL; `netlint rules` lists them)"
        )
    return matched


def _check_list(value: Any, key: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: '{key}' must be {_LIST_OF_STR}, got {_describe(value)}")
    return value


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:80]


def validate(values: dict[str, Any], where: str) -> dict[str, Any]:
    """Check keys and types of a configuration table; `where` names the file (or the flag) in errors."""
    for key, value in values.items():
        if key not in KEYS:
            raise ConfigError(f"{where}: unknown key '{key}' (known keys: {', '.join(KEYS)})")
        if key in ("target", "precision", "chip", "cache-dir") and not isinstance(value, str):
            raise ConfigError(f"{where}: '{key}' must be {KEYS[key]}, got {_describe(value)}")
        if key in ("respect-gitignore", "force-exclude", "fail-on-missing-weights") and not isinstance(value, bool):
            raise ConfigError(f"{where}: '{key}' must be {KEYS[key]}, got {_describe(value)}")
        if key in ("exclude", "extend-exclude"):
            _check_list(value, key, where)
        if key in ("select", "extend-select", "ignore"):
            for selector in _check_list(value, key, where):
                resolve_selector(selector, f"{where}: '{key}'")
        if key in ("per-node-ignores", "per-file-ignores", "severity"):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: '{key}' must be {KEYS[key]}, got {_describe(value)}")
            for sub_key, sub_value in value.items():
                if key in ("per-node-ignores", "per-file-ignores"):
                    for selector in _check_list(sub_value, f"{key}.{sub_key}", where):
                        resolve_selector(selector, f"{where}: '{key}.{sub_key}'")
                else:
                    resolve_selector(sub_key, f"{where}: '{key}'")
                    if sub_value not in SEVERITIES:
                        raise ConfigError(
                            f"{where}: '{key}.{sub_key}' must be one of {', '.join(SEVERITIES)}, "
                            f"got {_describe(sub_value)}"
                        )
        if key == "rule-options":
            _rule_options(value, where)
    return values


def _rule_options(value: Any, where: str) -> dict[str, dict[str, Any]]:
    """Validate `rule-options` and key it by rule code: each rule's table may hold only that rule's options, each
    of the option's type."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: 'rule-options' must be {KEYS['rule-options']}, got {_describe(value)}")
    rules = all_rules()
    by_name = {cls.name: code for code, cls in rules.items()}
    resolved: dict[str, dict[str, Any]] = {}
    for selector, table in value.items():
        code = selector if selector in rules else by_name.get(selector)
        if code is None:
            raise ConfigError(f"{where}: 'rule-options.{selector}': not a rule code or name (`netlint rules`)")
        rule = rules[code]
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: 'rule-options.{selector}' must be a table, got {_describe(table)}")
        for option, setting in table.items():
            key = f"rule-options.{selector}.{option}"
            if option not in rule.options:
                known = ", ".join(rule.options) or "none"
                raise ConfigError(f"{where}: '{key}': {code} has no such option (its options: {known})")
            expected = type(rule.options[option].default)
            accepted = (int, float) if expected is float else (expected,)
            if isinstance(setting, bool) != (expected is bool) or not isinstance(setting, accepted):
                raise ConfigError(f"{where}: '{key}' must be {expected.__name__}, got {_describe(setting)}")
        resolved[code] = dict(table)
    return resolved


def read_config_file(path: Path) -> FileConfig:
    """Read netlint.toml (top-level keys) or pyproject.toml ([tool.netlint])."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    values = document
    if path.name == "pyproject.toml":
        tool = document.get("tool", {})
        values = tool.get("netlint", {}) if isinstance(tool, dict) else {}
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: [tool.netlint] must be a table")
    return FileConfig(path, validate(values, _table_name(path)))


@lru_cache(maxsize=256)
def find_config(folder: Path) -> FileConfig:
    """The configuration that applies to models in `folder`: the nearest netlint.toml, or pyproject.toml with a
    [tool.netlint] table, walking up; none found means defaults."""
    for directory in (folder, *folder.parents):
        candidate = directory / "netlint.toml"
        if candidate.is_file():
            return read_config_file(candidate)
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            found = read_config_file(candidate)
            if _has_netlint_table(candidate):
                return found
    return FileConfig()


def _has_netlint_table(path: Path) -> bool:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False
    tool = document.get("tool")
    return isinstance(tool, dict) and "netlint" in tool


@dataclass
class Overrides:
    """Command-line flags; None means 'not given' so the file's value stands."""

    target: str | None = None
    precision: str | None = None
    chip: str | None = None
    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)


def settings_for(file_config: FileConfig, overrides: Overrides) -> Settings:
    """Merge a file's configuration with the flags: --select replaces `select` and `extend-select` (only these rules,
    as its help says), --extend-select and --ignore add; an ignored rule stays off even where it is also selected."""
    values = file_config.values
    where = str(file_config.path) if file_config.path else "defaults"
    if overrides.select is not None:
        select = overrides.select
    else:
        select = [*values.get("select", ["ALL"]), *values.get("extend-select", [])]
    codes: set[str] = set()
    for selector in [*select, *overrides.extend_select]:
        codes |= resolve_selector(selector, "--select" if selector in (overrides.select or []) else where)
    for selector in [*values.get("ignore", []), *overrides.ignore]:
        codes -= resolve_selector(selector, "--ignore" if selector in overrides.ignore else where)
    rules = all_rules()
    per_node = [
        (glob, frozenset(code for sel in selectors for code in resolve_selector(sel, where)))
        for glob, selectors in values.get("per-node-ignores", {}).items()
    ]
    severity: dict[str, Severity] = {}
    for selector, level in values.get("severity", {}).items():
        for code in resolve_selector(selector, where):
            severity[code] = level
    if overrides.target is not None:  # a target named on the command line does not inherit the file's precision/chip
        target = load_target(overrides.target, overrides.precision, overrides.chip)
    else:
        target = _configured_target(values.get("target"), file_config.path)
        target = _select(target, overrides.precision or values.get("precision"), overrides, "precision", file_config)
        target = _select(target, overrides.chip or values.get("chip"), overrides, "chip", file_config)
    options = _rule_options(values.get("rule-options", {}), where)
    settings = Settings([rules[code] for code in sorted(codes)], target, per_node, severity, file_config.path, options)
    settings.fail_on_missing_weights = bool(values.get("fail-on-missing-weights", False))
    return settings


def per_file_ignored(file_config: FileConfig, path: Path) -> frozenset[str]:
    """The rule codes `per-file-ignores` of `file_config` turns off for the model at `path` (patterns relative to
    the configuration's folder, matched as netlint.selection matches `exclude`)."""
    table = file_config.values.get("per-file-ignores")
    if not table or file_config.path is None:
        return frozenset()
    from netlint.selection import matching_pattern

    where = _table_name(file_config.path)
    codes: set[str] = set()
    for pattern, selectors in table.items():
        if matching_pattern([pattern], path, file_config.path.parent):
            for selector in selectors:
                codes |= resolve_selector(selector, f"{where}: 'per-file-ignores.{pattern}'")
    return frozenset(codes)


def _select(target: Target, wanted: str | None, overrides: Overrides, key: str, config: FileConfig) -> Target:
    """Choose a precision or chip on a configured target; an unknown one names the file's key unless it is a flag."""
    if wanted is None:
        return target
    try:
        return target.select(wanted, None) if key == "precision" else target.select(target.precision, wanted)
    except UsageError as exc:
        if getattr(overrides, key) is not None or config.path is None:
            raise
        raise ConfigError(f"{_table_name(config.path)}: '{key}': {exc}") from None


def _configured_target(name_or_path: str | None, config_path: Path | None) -> Target:
    """A configuration file's `target`: a path in it is relative to that file's folder, not the working folder, and
    a target that cannot be loaded is an error naming the file and the key."""
    if name_or_path is None or config_path is None:
        return load_target(name_or_path)
    if name_or_path.endswith(".toml"):
        name_or_path = str(config_path.parent / name_or_path)
    try:
        return load_target(name_or_path)
    except UsageError as exc:
        raise ConfigError(f"{_table_name(config_path)}: 'target': {exc}") from None


def _table_name(path: Path) -> str:
    """How errors name a configuration file: pyproject.toml's netlint settings live in its [tool.netlint] table."""
    return f"{path} [tool.netlint]" if path.name == "pyproject.toml" else str(path)
