"""What every drill uses: the real ``trawl`` command in a child process, a ``trawl serve`` on
loopback, a drill's record of one try, and the table of all tries."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
EVAL = REPO.parent / "shared" / "data" / "eval"
DEADLINE_S = 300.0
"""How long a drill waits for a condition (a server up, a check to notice) before it calls
the try failed: generous, the machine is shared."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """One try: did Trawl do what the drill expects, and what it did, in words that repeat
    from try to try (no pids, ports or timings), so the table can count them."""

    ok: bool
    said: str


@dataclass(frozen=True, slots=True)
class Drill:
    name: str
    expected: str
    run: Callable[[Path], Outcome]
    """One try in a fresh folder of its own."""
    unavailable: Callable[[], str | None] = lambda: None
    """Why this drill cannot run here (then the table says so and names the test that covers it)."""
    covered_by: str = ""


@dataclass(slots=True)
class Result:
    drill: Drill
    outcomes: list[Outcome] = field(default_factory=list)
    skipped: str | None = None

    def row(self) -> list[str]:
        name, expected = self.drill.name, self.drill.expected
        if self.skipped is not None:
            return [name, "0", expected, f"not run: {self.skipped}", f"covered by {self.drill.covered_by}"]
        counts = Counter(o.said for o in self.outcomes)
        said = "<br>".join(f"{n}× {text}" for text, n in counts.most_common())
        passed = sum(o.ok for o in self.outcomes)
        verdict = "pass" if passed == len(self.outcomes) else f"**FAIL** ({passed}/{len(self.outcomes)} pass)"
        return [name, str(len(self.outcomes)), expected, said, verdict]


def markdown_table(results: list[Result]) -> str:
    rows = [["Drill", "Tries", "Expected", "Outcomes (count × what happened)", "Result"]]
    rows += [[cell.replace("|", "\\|") for cell in r.row()] for r in results]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return "\n".join(lines)


def env(**extra: str) -> dict[str, str]:
    """The environment of every ``trawl`` the drill starts: offline, wide error lines."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "COLUMNS": "250", **extra}


def trawl_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli.main", *args]


def trawl(
    *args: str, settings: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """``trawl ARGS`` as a user runs it, to the end (``settings``: TRAWL_… variables)."""
    return subprocess.run(
        trawl_argv(*args),
        cwd=REPO,
        env=env(**(settings or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def trawl_started(*args: str, log: Path, **extra: str) -> subprocess.Popen[str]:
    """``trawl ARGS`` left running, its output in ``log`` (a pipe nobody reads could stall it)."""
    with log.open("w") as out:
        return subprocess.Popen(
            trawl_argv(*args), cwd=REPO, env=env(**extra), stdout=out, stderr=subprocess.STDOUT, text=True
        )


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def one_line_error(done: subprocess.CompletedProcess[str]) -> bool:
    """A failure that ends in ``error: …`` without a traceback (decision 57)."""
    return "Traceback" not in done.stderr and last_line(done.stderr).startswith("error: ")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.05)


def stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL if it does not end (only the drill's own children)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass(slots=True)
class Service:
    """A running ``trawl serve`` and a client for it."""

    proc: subprocess.Popen[str]
    port: int
    client: httpx.Client

    def healthz(self) -> dict[str, Any]:
        """The health answer; ``{"status": "unreachable"}`` once the server is gone."""
        try:
            return dict(self.client.get("/healthz").json())
        except httpx.TransportError:
            return {"status": "unreachable"}

    def search(self, q: str, **params: Any) -> httpx.Response:
        return self.client.get("/v1/search", params={"q": q, **params})

    def answered(self, q: str, **params: Any) -> dict[str, Any] | None:
        """A search's body when it answered 200; None for any other status or no answer."""
        try:
            r = self.search(q, **params)
        except httpx.TransportError:
            return None
        return dict(r.json()) if r.status_code == 200 else None


@contextmanager
def served(index: Path, log: Path, **settings: str) -> Iterator[Service]:
    """``trawl serve --index INDEX`` on a free loopback port (rate limit off), until it answers
    ``/healthz``; stopped on exit. Its output goes to ``log`` (a pipe nobody reads would stall
    it); ``settings``: more TRAWL_… variables."""
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            trawl_argv("serve", "--index", str(index), "--host", "127.0.0.1", "--port", str(port)),
            cwd=REPO,
            env=env(TRAWL_API__RATE_LIMIT_PER_S="0", TRAWL_SEARCH__SPELLING="false", **settings),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"trawl serve exited {proc.returncode}: {last_line(log.read_text())}")
        try:
            return client.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(up, "trawl serve to answer /healthz")
        yield Service(proc, port, client)
    finally:
        client.close()
        stop(proc)
