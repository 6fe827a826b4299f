"""The `netlint` subcommands, one module each (check, fix, cost, calibrate; catalog: rules, rule, targets), and what
they share (common.py). netlint.cli builds the parser and dispatches here; these modules never import the cli."""
