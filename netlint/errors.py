"""Errors that end in one clear line and exit code 2, never a traceback."""

from __future__ import annotations

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2


class NetlintError(Exception):
    """Base of every error netlint reports as one line."""


class ModelLoadError(NetlintError):
    """A model file cannot be read: the message names the reason (the caller adds the path)."""


class ConfigError(NetlintError):
    """A configuration file or option is invalid: the message names the file, the key and what was expected."""


class UsageError(NetlintError):
    """A command-line usage error (unknown rule selector, unknown target, ...)."""
