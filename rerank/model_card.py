"""A trained model's ``card.json``: what it was trained on, how, and which on-disk format it is.

Every model directory Trawl writes (LightGBM ranker, cross-encoder) carries one card,
stamped with a format name and version so a loader refuses a directory of another
kind or of an older layout with a clear error instead of scoring nonsense. Model
directories are built with :func:`core.atomic.staging_dir` so a reader sees the old
model or the new one, never half of one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.atomic import write_text
from core.errors import ModelLoadError

__all__ = ["CARD_FILE", "CardFormat", "read_card", "write_card"]

CARD_FILE = "card.json"


@dataclass(frozen=True, slots=True)
class CardFormat:
    """The kind of model directory a card describes, and its layout version."""

    name: str
    version: int


def read_card(directory: Path, kind: CardFormat) -> dict[str, Any]:
    """The card of ``directory``; :class:`ModelLoadError` when it is not JSON or not ``kind``."""
    directory = Path(directory)
    try:
        card: dict[str, Any] = json.loads((directory / CARD_FILE).read_text())
    except json.JSONDecodeError as exc:
        raise ModelLoadError(str(directory), f"{CARD_FILE} is not JSON: {exc}") from exc
    if card.get("format") != kind.name or card.get("format_version") != kind.version:
        raise ModelLoadError(
            str(directory),
            f"card format {card.get('format')!r} v{card.get('format_version')}, "
            f"expected {kind.name!r} v{kind.version}",
        )
    return card


def write_card(directory: Path, card: Mapping[str, Any], kind: CardFormat) -> dict[str, Any]:
    """Write ``card`` stamped with ``kind`` into ``directory``; returns what was written."""
    full = dict(card)
    full.update(format=kind.name, format_version=kind.version)
    write_text(Path(directory) / CARD_FILE, json.dumps(full, indent=2, sort_keys=True) + "\n")
    return full
