"""Flags renamed in this release: the old spelling still works, with a warning, until the next."""

from __future__ import annotations

import sys
from typing import TypeVar

T = TypeVar("T")


def renamed_flag(old: str, new: str, old_value: T | None, new_value: T | None) -> T | None:
    """The value given under ``new``, or under ``old`` with a deprecation message on stderr."""
    if old_value is None:
        return new_value
    if new_value is not None:
        sys.exit(f"error: {old} is the old name of {new}; give only {new}.")
    print(f"warning: {old} is deprecated and goes away in the next release; use {new}.", file=sys.stderr)
    return old_value
