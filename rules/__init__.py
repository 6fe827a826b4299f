"""netlint's built-in rule pack: one module per rule, `<code>_<name>.py`; importing a module registers its rule.

In the wheel this folder is the package `netlint.rules` (see pyproject.toml), so there is no top-level `rules` module.
"""
