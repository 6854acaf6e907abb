"""Help screens: a flag shows no type placeholder.

Typer's rich help prints the value type beside every option, and for a flag that
is ``<bool>`` although a flag takes no value (``--json``, not ``--json true``).
Options that take a value keep their type (``<int>``, ``<path>``).
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperOption

__all__ = ["hide_flag_types"]

_display_type_rich = TyperOption.display_type_rich


def _type_unless_flag(self: TyperOption, ctx: Any) -> str | None:
    return None if self.is_flag else _display_type_rich(self, ctx)


def hide_flag_types() -> None:
    """Install the rule (idempotent; called once when the ``trawl`` app is built)."""
    TyperOption.display_type_rich = _type_unless_flag  # type: ignore[method-assign]
