"""Fault drill: issue 51's battery, end to end against real Trawl processes, N tries each.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/fault_drill.py [--tries 3] [--only hnsw,gc]

Each drill breaks one thing for real, in a fresh folder per try: index files garbled or
truncated under a running `trawl serve` and before a publish, two writers on one index root
or crawl directory, a SIGKILLed crawl, retention after several builds, a publish killed
between its two writes, a forged IndexNow proof, an over-long URL, a private seed, a
PostgreSQL restart under two crawl workers, a full disk under a crawl. Everything runs on
loopback (sites, servers, PostgreSQL); nothing leaves the machine. The table of tries and
outcomes is printed and written to bench/results/fault-drill.md (--no-record: printed only).
A drill that cannot run here (no root to mount a tmpfs, no PostgreSQL binaries) is listed
with the test that covers it. Exit status 1 when any try failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.faults import api_drills, crawl_drills, index_drills  # noqa: E402
from bench.faults.harness import Drill, Outcome, Result, markdown_table  # noqa: E402
from bench.results_file import record_run  # noqa: E402

RESULTS = REPO / "bench" / "results" / "fault-drill.md"
INTRO = """# Fault drill

`bench/fault_drill.py` runs issue 51's battery end to end against real Trawl processes
(`trawl serve`, `trawl index`, `trawl crawl`, a throwaway PostgreSQL, a small tmpfs), each
drill N times in a fresh folder, and counts what happened. A try passes when Trawl did what
the Expected column says; the Outcomes column says what it did, in words that repeat from
try to try. Everything stays on loopback.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/fault_drill.py --tries 3
"""


def _try(drill: Drill, folder: Path) -> Outcome:
    folder.mkdir(parents=True)
    try:
        return drill.run(folder)
    except Exception as exc:  # a drill that broke is a failed try, with its reason, not a stop
        (folder / "drill-error.txt").write_text(traceback.format_exc())
        return Outcome(False, f"drill error: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")


def run_all(drills: list[Drill], tries: int, work: Path) -> list[Result]:
    results = []
    for index, drill in enumerate(drills):
        result = Result(drill)
        result.skipped = drill.unavailable()
        if result.skipped is None:
            for n in range(tries):
                started = time.monotonic()
                outcome = _try(drill, work / f"drill-{index:02d}" / f"try-{n + 1}")
                result.outcomes.append(outcome)
                mark = "ok  " if outcome.ok else "FAIL"
                took = time.monotonic() - started
                print(f"{mark} {drill.name} #{n + 1} ({took:.0f} s): {outcome.said}", flush=True)
        else:
            print(f"skip {drill.name}: {result.skipped}", flush=True)
        results.append(result)
    return results


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() or "unknown commit"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tries", type=int, default=3, help="tries per drill (default 3)")
    parser.add_argument("--only", default="", help="comma-separated words: run drills whose name has one")
    parser.add_argument("--work-dir", type=Path, help="where the tries' folders go (default: temporary)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, damaged indexes)")
    parser.add_argument("--no-record", action="store_true", help=f"print only; do not write {RESULTS.name}")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="trawl-fault-drill-"))
    work.mkdir(parents=True, exist_ok=True)
    drills = [*index_drills.drills(work), *crawl_drills.drills(), *api_drills.drills()]
    if args.only:
        words = [w.strip().lower() for w in args.only.split(",") if w.strip()]
        drills = [d for d in drills if any(w in d.name.lower() for w in words)]
    started = time.monotonic()
    load = os.getloadavg()
    results = run_all(drills, args.tries, work)
    minutes = (time.monotonic() - started) / 60
    table = markdown_table(results)
    failed = [r for r in results if any(not o.ok for o in r.outcomes)]
    summary = (
        f"{sum(len(r.outcomes) for r in results)} tries of {len(results)} drills in {minutes:.0f} min, "
        f"{len(failed)} drill(s) with a failed try; load average {load[0]:.1f} at the start on "
        f"{os.cpu_count()} cores" + (f"; work folder {work} (kept)" if args.keep or args.work_dir else "")
    )
    print(f"\n{table}\n\n{summary}")
    if not args.no_record:
        title = f"{dt.date.today().isoformat()}, {_commit()}, `--tries {args.tries}`" + (
            f" `--only {args.only}`" if args.only else ""
        )
        record_run(RESULTS, title, f"{table}\n\n{summary}\n", intro=INTRO)
        print(f"written to {RESULTS.relative_to(REPO)}")
    if not args.keep and args.work_dir is None:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
