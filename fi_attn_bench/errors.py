"""Errors that become exit code 2: bad input, found before any GPU work."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad command-line input: exit 2 before any GPU work."""


class NoMatchingCase(UsageError):
    """The filters leave no case of the preset (bench_all.py leaves such a script out)."""
