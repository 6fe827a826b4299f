"""`python -m netlint` is the `netlint` command."""

import sys

from netlint.cli import main

sys.exit(main())
