"""Making model-provided text safe to print on a terminal (cheap to import: the CLI needs it before anything else)."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # C0/C1 controls, bidi overrides


def safe(text: str) -> str:
    """Model-provided strings may hold terminal escape sequences: show control characters escaped, never raw."""
    if text.isprintable():  # the common case, without the regex: every character _CONTROL matches is unprintable
        return text
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
