"""Results files keep every run: the new one goes first, the one it replaces moves under History."""

from __future__ import annotations

import re
from pathlib import Path

LATEST = "## Latest run"
HISTORY = "## History"


def _demoted(section: str) -> str:
    """A former latest run as a History entry: every heading one level deeper."""
    section = section.replace(f"{LATEST}: ", "## ", 1)
    return re.sub(r"^(#{2,5}) ", r"#\1 ", section, flags=re.M)


def record_run(path: Path, title: str, body: str, *, intro: str = "") -> None:
    """Write ``body`` as the latest run of ``path``, keeping the file's intro and earlier runs."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if LATEST in old:
        head, rest = old.split(LATEST, 1)
        latest, _, history = (LATEST + rest).partition(HISTORY)
    else:
        head, latest, history = (old or intro), "", ""
    runs = [_demoted(latest).strip()] if latest.strip() else []
    if history.strip():
        runs.append(history.strip())
    text = f"{head.rstrip()}\n\n{LATEST}: {title}\n\n{body.strip()}\n"
    if runs:
        text += f"\n{HISTORY}\n\n" + "\n\n".join(runs) + "\n"
    path.write_text(text, encoding="utf-8")
