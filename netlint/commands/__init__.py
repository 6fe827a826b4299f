"""The `netlint` subcommands that are more than a few lines, one module each (fix, cost, calibrate), and what they
share (common.py). netlint.cli parses the command line and dispatches here; these modules never import the cli."""
