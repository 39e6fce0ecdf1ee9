"""Time to first failure: how soon ``pytest cts vts -n 2 -x`` stops against each of the project's
broken drivers (``nnapi_ref.drivers.broken``), in breadth-first order and in collection order,
and which faults ``--quick`` catches.

    python -m nnts.mlts.bench_suite [--drivers a,b] [--orders breadth,collection] [--quick]
                                    [--support npu13|quant8_only|float32_level27]
                                    [--timeout S] [--workers N] [--json FILE] [-- PYTEST ARGS]

``--support`` restricts each broken driver to a partial driver's support
(``nnapi_ref.drivers.partial``: its fault stays where the support reaches it).

Each run is a fresh pytest in the repository root (the suite's collection is part of what a
driver engineer waits for). The seconds to the first failure are taken when the first failing
test's report arrives (this module is loaded into the run with ``-p`` to note it), from the
start of the process, and as CPU seconds of the run's processes (its xdist workers included)
until then, which a shared machine's load does not stretch; a run that finds nothing within
``--timeout`` counts as its length (wall and CPU), marked ``>``. ``--quick`` adds a ``--quick`` run per driver (its run time, and whether it
caught the fault). Prints one line per run, then the median and maximum per order; ``--json``
writes every run. CPU heavy (a full pass of a driver that no test catches takes minutes):
``--drivers`` picks a few.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from nnapi_ref.drivers.broken import ALL
from nnapi_ref.drivers.partial import SUPPORTS

FIRST_FAILURE_ENV = "NNTS_FIRST_FAILURE_FILE"
POLL_S = 0.2
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
ROOT = Path(__file__).resolve().parents[1]  # a clone: cts/ and vts/ beside mlts/
SUITE = ["cts", "vts"] if (ROOT / "cts").is_dir() else ["--pyargs", "nnts.cts", "nnts.vts"]


def pytest_configure(config):
    """The run under measurement's entry point: the file ``run_once`` names in its environment."""
    path = os.environ.get(FIRST_FAILURE_ENV)
    if path:
        config.pluginmanager.register(FirstFailure(path), "nnts-first-failure")


class FirstFailure:
    """The time of the first failing report, written once to ``path`` (the xdist controller and
    the workers each see it; the earliest wins)."""

    def __init__(self, path: str):
        self.path = path

    def pytest_runtest_logreport(self, report):
        if not report.failed:
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps({"time": time.time(), "test": report.nodeid}))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _processes() -> dict[int, tuple[int, float]]:
    """{pid: (parent pid, CPU seconds so far)} from Linux's /proc (empty elsewhere)."""
    table = {}
    for entry in Path("/proc").iterdir() if Path("/proc/self/stat").exists() else []:
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            table[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS)
    return table


def _descendants(root: int, table: dict[int, tuple[int, float]]) -> list[int]:
    found, todo = [], [root]
    while todo:
        children = [pid for pid, (parent, _) in table.items() if parent == todo[-1]]
        todo.pop()
        found += children
        todo += children
    return found


def _tree_cpu(root: int) -> float:
    """CPU seconds of a process and its descendants (the xdist workers) so far."""
    table = _processes()
    return sum(table[pid][1] for pid in [root] + _descendants(root, table) if pid in table)


def _stop(process) -> None:
    """Ends a run past its timeout, and the xdist workers it started (by their ids)."""
    children = _descendants(process.pid, _processes())
    process.kill()
    process.wait()
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_once(driver: str, order: str | None, quick: bool, timeout: float, workers: int, extra: list[str],
             stream=sys.stdout, runner: list[str] | None = None) -> dict:
    """One ``pytest cts vts`` run against ``driver`` (``runner``: another command line running the
    suites, as ``nnts test``): seconds to its first failure (None: none within the timeout or the
    whole run), the failing test, the run's own seconds and exit code."""
    with tempfile.TemporaryDirectory(prefix="nnts-bench-suite-") as tmp:
        marker = Path(tmp) / "first-failure.json"
        command = [*(runner or [sys.executable, "-m", "pytest", *SUITE]), "-q", "-p", "no:cacheprovider",
                   "-p", "nnts.mlts.bench_suite", "-n", str(workers), "-x", f"--driver={driver}",
                   "--reproducers", str(Path(tmp) / "reproducers"), *extra]
        if order:
            command.append(f"--order={order}")
        if quick:
            command.append("--quick")
        env = dict(os.environ, **{FIRST_FAILURE_ENV: str(marker)})
        env.pop("NNTS_DRIVER", None)
        start, cpu_start = time.time(), _children_cpu()
        process = subprocess.Popen(command, cwd=ROOT if SUITE[0] == "cts" else None, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        output: list[str] = []
        reader = threading.Thread(target=lambda: output.extend(process.stdout), daemon=True)
        reader.start()
        cpu_at_failure = tree_cpu = None
        while process.poll() is None and time.time() - start < timeout:
            tree_cpu = _tree_cpu(process.pid)
            if cpu_at_failure is None and marker.exists():
                cpu_at_failure = tree_cpu
            time.sleep(POLL_S)
        if process.poll() is None:  # its killed workers' CPU is not in RUSAGE_CHILDREN: the last poll's
            _stop(process)
            code, tail = None, [f"stopped after {timeout:.0f} s"]
            wall, cpu = time.time() - start, tree_cpu or 0.0
        else:
            reader.join(10)
            code, tail = process.returncode, "".join(output).strip().splitlines()[-1:] or [""]
            wall, cpu = time.time() - start, _children_cpu() - cpu_start
        first = json.loads(marker.read_text()) if marker.exists() else None
        if first and cpu_at_failure is None:  # failed and ended between two polls
            cpu_at_failure = cpu
    row = {"driver": driver, "order": order or "default", "quick": quick, "exit_code": code,
           "seconds_to_first_failure": round(first["time"] - start, 2) if first else None,
           "cpu_seconds_to_first_failure": round(cpu_at_failure, 2) if first else None,
           "first_failure": first["test"] if first else None, "run_seconds": round(wall, 2),
           "run_cpu_seconds": round(cpu, 2),
           "timed_out": code is None, "summary": tail[0]}
    shown = (f"{row['seconds_to_first_failure']:7.1f} s ({cpu_at_failure:5.1f} s CPU)" if first
             else f">{wall:6.0f} s {'':14s}")
    print(f"{driver.rsplit(':', 1)[-1]:26s} {row['order']:10s}{' quick' if quick else '':6s} {shown} "
          f"(run {wall:5.0f} s, {cpu:5.0f} s CPU)  "
          f"{row['first_failure'] or row['summary']}", file=stream, flush=True)
    return row


def summarize(rows: list[dict], timeout: float) -> dict:
    """Median and maximum seconds (wall, and CPU) to first failure per order, a run without a
    failure counting as its length (wall at most the timeout); quick runs: the drivers caught and
    missed."""
    out = {}
    for order in dict.fromkeys(r["order"] for r in rows if not r["quick"]):
        runs = [r for r in rows if r["order"] == order and not r["quick"]]
        wall = [r["seconds_to_first_failure"] if r["seconds_to_first_failure"] is not None
                else min(r["run_seconds"], timeout) for r in runs]
        cpu = [r["cpu_seconds_to_first_failure"] if r["cpu_seconds_to_first_failure"] is not None
               else r["run_cpu_seconds"] for r in runs]
        out[order] = {"runs": len(runs), "median_s": round(statistics.median(wall), 1), "max_s": round(max(wall), 1),
                      "median_cpu_s": round(statistics.median(cpu), 1), "max_cpu_s": round(max(cpu), 1),
                      "not_caught": [r["driver"] for r in runs if r["seconds_to_first_failure"] is None]}
    quick = [r for r in rows if r["quick"]]
    if quick:
        caught = [r["driver"] for r in quick if r["seconds_to_first_failure"] is not None]
        out["quick"] = {"runs": len(quick), "caught": caught,
                        "missed": [r["driver"] for r in quick if r["driver"] not in caught],
                        "max_run_s": round(max(r["run_seconds"] for r in quick), 1),
                        "max_run_cpu_s": round(max(r["run_cpu_seconds"] for r in quick), 1)}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drivers", default=",".join(ALL),
                        help="broken drivers (names in nnapi_ref.drivers.broken; default: all)")
    parser.add_argument("--orders", default="breadth,collection",
                        help="orders to time, comma-separated (breadth, collection; empty: none)")
    parser.add_argument("--quick", action="store_true", help="also a --quick run per driver")
    parser.add_argument("--timeout", type=float, default=600, help="seconds one run may take (default 600)")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (-n; default 2)")
    parser.add_argument("--support", choices=sorted(SUPPORTS),
                        help="each broken driver restricted to this partial support (nnapi_ref.drivers.partial)")
    parser.add_argument("--json", help="write every run and the summary to this file")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    drivers = [d for d in args.drivers.split(",") if d]
    unknown = [d for d in drivers if d not in ALL]
    if unknown:
        print(f"bench_suite: unknown broken driver(s) {', '.join(unknown)} (known: {', '.join(ALL)})",
              file=sys.stderr)
        return 2
    orders = [o for o in args.orders.split(",") if o]
    if any(o not in ("breadth", "collection") for o in orders) or args.timeout <= 0 or args.workers < 0:
        print("bench_suite: --orders takes breadth and/or collection; --timeout and --workers must be positive",
              file=sys.stderr)
        return 2
    rows = []
    for driver in drivers:
        spec = f"nnapi_ref.drivers.partial:{args.support}__{driver}" if args.support else \
            f"nnapi_ref.drivers.broken:{driver}"
        for order in orders:
            rows.append(run_once(spec, order, False, args.timeout, args.workers, args.pytest_args))
        if args.quick:
            rows.append(run_once(spec, None, True, args.timeout, args.workers, args.pytest_args))
    for row in rows:
        row["driver"] = row["driver"].rsplit(":", 1)[-1].split("__")[-1]
    summary = summarize(rows, args.timeout)
    for order, s in summary.items():
        if order == "quick":
            print(f"quick: caught {len(s['caught'])} of {s['runs']} (missed: {', '.join(s['missed']) or 'none'}); "
                  f"longest run {s['max_run_s']} s ({s['max_run_cpu_s']} s CPU)")
        else:
            print(f"{order}: median {s['median_s']} s, max {s['max_s']} s to the first failure (CPU: median "
                  f"{s['median_cpu_s']} s, max {s['max_cpu_s']} s) over {s['runs']} "
                  f"drivers{' (not caught: ' + ', '.join(s['not_caught']) + ')' if s['not_caught'] else ''}")
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"schema": "nnts-bench-suite/1", "timeout_s": args.timeout,
                                   "workers": args.workers, "runs": rows, "summary": summary}, indent=1) + "\n")
        tmp.replace(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
