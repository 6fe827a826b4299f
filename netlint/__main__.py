"""`python -m netlint` is the `netlint` command."""

from netlint.cli import run

run()
