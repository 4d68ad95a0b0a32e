"""The errors a user's mistake raises. The CLI prints each as one line starting with "error:" and exits with
`exit_code`; anything else is a bug and keeps its traceback."""

from __future__ import annotations


class UserError(Exception):
    """A problem with what the user gave (files, flags, a run directory); the message says what and how to fix it."""

    exit_code = 1


class UsageError(UserError, ValueError):
    """Flags that do not fit together or lie outside their range (exit 2, as argparse)."""

    exit_code = 2


class DataError(UserError, ValueError):
    """Bad input to the data pipeline: unreadable, inconsistent or unusable text, trees or prepared data."""


class CheckpointError(UserError, RuntimeError):
    """A checkpoint or run directory that cannot be used."""
