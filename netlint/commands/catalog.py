"""`netlint rules`, `netlint rule CODE` and `netlint targets`: what the installed rules and targets are."""

from __future__ import annotations

import sys

from netlint.errors import EXIT_CLEAN, UsageError


def run_rules(fmt: str) -> int:
    import json

    from netlint.rule import all_rules

    rules = all_rules()
    if fmt == "json":
        rows = [
            {
                "code": cls.code,
                "name": cls.name,
                "category": cls.category,
                "severity": cls.severity,
                "fix": {"name": cls.fix.name, "applicability": cls.fix.applicability} if cls.fix else None,
                "summary": cls.summary(),
            }
            for cls in rules.values()
        ]
        print(json.dumps(rows, indent=2))
        return EXIT_CLEAN
    table = [("code", "name", "category", "fix", "summary")]
    for cls in rules.values():
        fix = f"{cls.fix.name} ({cls.fix.applicability})" if cls.fix else "-"
        table.append((cls.code, cls.name, cls.category, fix, cls.summary()))
    widths = [max(len(row[column]) for row in table) for column in range(4)]
    for row in table:
        print(" ".join(f"{cell:<{width}}" for cell, width in zip(row[:4], widths, strict=True)), row[4])
    return EXIT_CLEAN


def run_rule(wanted: str) -> int:
    from netlint.docs import render_rule_doc
    from netlint.rule import all_rules

    for cls in all_rules().values():
        if wanted in (cls.code, cls.name) or wanted.upper() == cls.code:
            sys.stdout.write(render_rule_doc(cls))
            return EXIT_CLEAN
    raise UsageError(f"unknown rule '{wanted}' (`netlint rules` lists them)")


def run_targets() -> int:
    from netlint.targets import list_targets

    for target in list_targets():
        print(f"{target.name:<16} {target.description}")
        if target.precisions:
            shown = ", ".join(f"{p} (default)" if p == target.default_precision else p for p in target.precisions)
            print(f"{'':<16}   --precision: {shown}")
        if target.chips:
            shown = ", ".join(f"{c} (default)" if c == target.default_chip else c for c in target.chips)
            print(f"{'':<16}   --chip: {shown}")
        for source in target.sources:
            print(f"{'':<16}   source: {source}")
    return EXIT_CLEAN
