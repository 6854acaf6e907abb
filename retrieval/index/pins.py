"""Which generations some process has open, told to the writer that removes old ones.

A process that opens a generation under an index root holds a shared ``flock`` on
``ROOT/pins/<generation>`` until it closes it; a serving process keeps the views that
live cursors name open (``retrieval.index.generation``), so a pin lasts exactly as long
as those cursors can be followed. ``trawl index gc`` removes a generation only while it
holds the same file exclusively, which fails as long as any reader holds it. The kernel
drops a dead reader's lock: no expiry to tune, no refresh thread, nothing to clean up.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from core.errors import ManifestError
from retrieval.index import layout

__all__ = ["Pin", "pinned_files", "unpinned"]

logger = logging.getLogger(__name__)


class Pin:
    """A reader's hold on one generation directory; :meth:`release` when it is closed."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd

    @classmethod
    def hold(cls, gen_dir: Path) -> Pin:
        """Pin ``gen_dir`` (a no-op for an index directory outside a root: nothing removes it).

        Raises ``ManifestError`` when a gc is removing it right now.
        """
        gen_dir = Path(gen_dir)
        root = layout.store_root(gen_dir)
        if root == gen_dir:
            return cls(None)
        path = layout.pin_file(root, gen_dir.name)
        try:
            path.parent.mkdir(exist_ok=True)
            fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError as exc:  # a read-only index root: nobody can remove anything from it
            logger.debug("generation %s not pinned: %s", gen_dir.name, exc)
            return cls(None)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ManifestError(
                f"Generation {gen_dir.name} is being removed by `trawl index gc`; see `trawl index list`."
            ) from None
        return cls(fd)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing drops the flock


@contextlib.contextmanager
def unpinned(root: Path, generation: str) -> Iterator[bool]:
    """Hold ``generation``'s pin file exclusively if no process has the generation open.

    Inside, True: nobody can open it until the block ends (remove it now; the pin file
    goes with it); False: some process has it open, leave it.
    """
    path = layout.pin_file(root, generation)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def pinned_files(root: Path) -> list[Path]:
    """Every pin file of ``root`` (some may name generations already gone)."""
    folder = layout.pin_file(root, "x").parent
    return sorted(folder.iterdir()) if folder.is_dir() else []
