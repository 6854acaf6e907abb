"""``np.load`` for a process that loads arrays from several threads at once.

numpy parses a ``.npy`` header with ``ast.literal_eval``, and CPython 3.11's AST
constructor keeps its recursion depth in state shared by every thread (CPython issue
gh-106905): two threads building ASTs at once can fail with ``SystemError: AST
constructor recursion depth mismatch``. Seen as an HTTP 500 when a search thread reopened
a generation that the push follower had just updated. One lock around the header read
makes the loads of this process take turns; the data itself is mapped or read after it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

__all__ = ["load_array"]

_HEADER_LOCK = threading.Lock()


def load_array(path: Path | str, *, mmap_mode: Literal["r"] | None = None) -> NDArray[Any]:
    """``np.load(path, mmap_mode=…, allow_pickle=False)``, one thread at a time."""
    with _HEADER_LOCK:
        array: NDArray[Any] = np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
    return array
