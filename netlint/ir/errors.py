"""The IR's exceptions, in their own module so that the recognisers graph.py uses (composites) can raise and catch
them without importing graph.py back."""


class ConstantUnavailable(Exception):
    """A constant exists but its data cannot be read (e.g. its external data file is missing)."""


class UnknownSize(Exception):
    """A count that needs a shape, a dtype or an input the graph does not give, with the reason (for the cost model,
    which names it UnknownCost, a coverage gap: never costed as zero)."""
