"""The IR's one exception, in its own module so that the recognisers graph.py uses (composites) can raise and catch it
without importing graph.py back."""


class ConstantUnavailable(Exception):
    """A constant exists but its data cannot be read (e.g. its external data file is missing)."""
