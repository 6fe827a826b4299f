"""The version and the published name, in a module of their own: the modules that stamp them on outputs (reports, the
cache) import this, not the package's facade (netlint/__init__.py, whose lint_path and lint_bytes load the engine)."""

__version__ = "0.1.0"
# The name on the package index (`pip install netlint-nn`): "netlint" there is an unrelated project. The command and
# the import name stay `netlint`.
DISTRIBUTION = "netlint-nn"
HOMEPAGE = "https://pypi.org/project/netlint-nn/"
