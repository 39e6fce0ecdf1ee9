"""``nnts vectors run``'s workers, contained: the test-vector files run in a pool of worker
processes, and a test that kills its worker (an in-process driver calling ``abort()``) or never
returns (a driver stuck in a loop) becomes a CRASH or HANG row of that test; the pool is started
again and every other test still runs and is reported.

Each task (one file, from one test on) writes a progress file as it goes: a ``plan`` line naming
the tests it will run, a ``start`` line before each test (with the worker's pid and the time) and a
``result`` line after it, so results already computed survive their worker, and the test a worker
died in is the one started and not finished. Ctrl-C keeps them too: the tests of a file that
completed are its rows, the one running and those not yet run are ``skipped`` rows saying so.

A worker's standard error goes to a file of its own, with faulthandler's dump of the crashing
thread's stack: a CRASH row ends with its last lines (what the driver said, where it died), and
the other workers' output is passed on to this process's standard error after them.
"""
from __future__ import annotations

import faulthandler
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

DEFAULT_TEST_BUDGET_S = 180.0  # a test's prepare (120 s) and its executions, on an in-process driver
STDERR_LINES = 40  # of a worker that died, in its CRASH row


def test_budget_s(call_timeout_s: float | None) -> float:
    """Seconds one test may take in a worker before it is declared hung: three call budgets when
    ``--call-timeout`` (or ``NNTS_CALL_TIMEOUT``) is given, else DEFAULT_TEST_BUDGET_S."""
    return 3 * call_timeout_s if call_timeout_s else DEFAULT_TEST_BUDGET_S


@dataclass
class Task:
    path: str
    start: int = 0                         # index of the first test to run
    results: list[dict] = field(default_factory=list)
    progress: str = ""


def _read_progress(path: str, plan: list | None = None) -> tuple[list[dict], dict | None]:
    """The results a task wrote, and the test it started and did not finish (or None); ``plan``
    receives the (index, name) of every test the task meant to run."""
    results, started = [], None
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return results, None
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:  # a line cut short by the worker's death
            continue
        if entry["kind"] == "plan":
            if plan is not None:
                plan += [tuple(t) for t in entry["tests"]]
        elif entry["kind"] == "start":
            started = entry
        else:
            results.append(entry["result"])
            started = None
    return results, started


_worker_state = None  # in a pool worker: what worker_state() made there, kept across its tasks


def _start_worker(worker_state, folder: str) -> None:
    """A pool worker's initializer. What a worker keeps from one task to the next (its loaded
    drivers) can only live in its process: the pool pickles each task's arguments anew. Its
    standard error goes to a file in ``folder`` (``_stderr_path``), faulthandler's dump too."""
    global _worker_state
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's "SIGTERM as Ctrl-C" is the parent's only
    log = os.open(_stderr_path(folder, os.getpid()), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 2)
    os.close(log)
    faulthandler.enable(file=2, all_threads=False)  # the descriptor: sys.stderr may be a stand-in (pytest)
    _worker_state = worker_state()


def _stderr_path(folder: str, pid: int) -> str:
    return os.path.join(folder, f"stderr-{pid}.txt")


def _stderr_tail(folder: str, pid: int) -> list[str]:
    """The last lines a worker wrote to its standard error; from faulthandler's dump, the lines
    before it (the driver's own) and the innermost frames (the driver's), not the pool's."""
    try:
        with open(_stderr_path(folder, pid), encoding="utf-8", errors="replace") as f:
            lines = [line.rstrip() for line in f.read().splitlines() if line.strip()]
    except OSError:
        return []
    dumps = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error")]
    start = max(0, dumps[-1] - STDERR_LINES // 4) if dumps else max(0, len(lines) - STDERR_LINES)
    return lines[start:start + STDERR_LINES]


def _pass_on_stderr(folder: str, skip: set[int]) -> None:
    """The standard error of the pool's workers, but those in ``skip`` (in their CRASH rows), to ours."""
    for name in sorted(os.listdir(folder)):
        if not name.startswith("stderr-"):
            continue
        path = os.path.join(folder, name)
        if int(name[len("stderr-"):-len(".txt")]) not in skip:
            with open(path, encoding="utf-8", errors="replace") as f:
                shutil.copyfileobj(f, sys.stderr)
            sys.stderr.flush()
        os.unlink(path)


def _run_in_worker(run_file, *args):
    return run_file(_worker_state, *args)


def run_contained(run_file, worker_state, job_args: tuple, files: list[str], jobs: int, report,
                  budget: float = DEFAULT_TEST_BUDGET_S) -> list[dict]:
    """Every test of ``files`` through ``run_file(state, path, start, progress, *job_args)`` in
    worker processes, ``state`` made by ``worker_state()`` once in each worker; ``report(results)``
    is called with each file's results as it completes. Returns all results, in file order; a
    worker's death or a test over ``budget`` seconds is a row of its own."""
    done: dict[str, list[dict]] = {}
    pending = [Task(p) for p in files]
    serial = False  # after a death we could not pin on one test: one worker until we can
    with tempfile.TemporaryDirectory(prefix="nnts-progress-") as folder:
        counter = 0
        while pending:
            workers = 1 if serial else max(1, min(jobs, len(pending)))
            pool = ProcessPoolExecutor(workers, initializer=_start_worker, initargs=(worker_state, folder))
            futures = {}
            for task in pending:
                counter += 1
                task.progress = os.path.join(folder, f"{counter}.jsonl")
                futures[pool.submit(_run_in_worker, run_file, task.path, task.start, task.progress, *job_args)] = task
            pending = []
            hung_pid = None
            broken = False
            processes = {}
            not_done = set(futures)
            try:
                while not_done:
                    finished, not_done = wait(not_done, timeout=0.5, return_when=FIRST_COMPLETED)
                    processes.update(getattr(pool, "_processes", None) or {})
                    for future in finished:
                        task = futures[future]
                        try:
                            part = task.results + future.result()
                        except BrokenProcessPool:
                            broken = True
                            continue
                        done[task.path] = part
                        report(part)
                    if broken:
                        break
                    if hung_pid is None:
                        hung_pid = _kill_hung(futures, not_done, budget)
            except KeyboardInterrupt:  # Ctrl-C: stop the workers, keep what each file completed
                _stop_workers(pool)
                for future, task in futures.items():
                    if task.path not in done and os.path.exists(task.progress):
                        done[task.path] = _interrupted_rows(task)
                        report(done[task.path])
                raise
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
            if not broken and hung_pid is None:
                _pass_on_stderr(folder, set())
                break
            # The pool is broken: keep what each unfinished task wrote, find the test that died.
            in_flight, outside = [], []
            for future, task in futures.items():
                if task.path in done:
                    continue
                results, started = _read_progress(task.progress)
                task.results += results
                task.start = started["index"] if started else task.start + len(results)
                if started:
                    in_flight.append((task, started))
                elif os.path.exists(task.progress):
                    outside.append(task)  # its worker had begun the file, between tests
                pending.append(task)
            culprits = _culprits(in_flight, processes, hung_pid)
            for task, started, verdict in culprits:
                tail = _stderr_tail(folder, started["pid"])
                task.results.append({"name": started["name"], "source": task.path, "status": verdict,
                                     "message": _death_message(verdict, started, processes, budget) + (
                                         "; last stderr:" + "".join(f"\n    {line}" for line in tail) if tail else "")})
                task.start = started["index"] + 1
            _pass_on_stderr(folder, {started["pid"] for _, started, _ in culprits})
            serial = not culprits and len(in_flight) + len(outside) > 1
            if not culprits and not serial:
                # Died outside any test (loading the file or the driver): a row for the file(s).
                blamed = outside or ([] if in_flight else list(pending))
                for task in blamed:
                    task.results.append({"name": os.path.basename(task.path), "source": task.path,
                                         "status": "crashed",
                                         "message": f"CRASH: the worker process died "
                                                    f"({_exitcode_text(processes.values())}) outside any test "
                                                    "of this file (loading it or the driver)"})
                    done[task.path] = task.results
                    report(task.results)
                pending = [t for t in pending if all(t is not b for b in blamed)]
    return [r for p in files for r in done.get(p, [])]


def _stop_workers(pool) -> None:
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            process.kill()
        except (OSError, ValueError):
            pass
        process.join(5)


def _interrupted_rows(task: Task) -> list[dict]:
    """A file cut short by Ctrl-C: the rows of its completed tests, then a ``skipped`` row for the test
    that was running and for each one not yet run."""
    plan: list = []
    results, started = _read_progress(task.progress, plan)
    rows = task.results + results
    finished = {r["name"] for r in rows}
    for index, name in plan:
        if name in finished:
            continue
        running = started is not None and started["index"] == index
        rows.append({"name": name, "source": task.path, "status": "skipped",
                     "message": "interrupted (Ctrl-C) while this test ran" if running
                     else "not run: the run was interrupted (Ctrl-C)"})
    return rows


def _kill_hung(futures, not_done, budget: float) -> int | None:
    """Kill the worker of a test that has run past ``budget``; its pid, or None."""
    now = time.time()
    for future in not_done:
        _, started = _read_progress(futures[future].progress)
        if started and now - started["t"] > budget:
            try:
                os.kill(started["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
            return started["pid"]
    return None


def _culprits(in_flight, processes, hung_pid) -> list[tuple]:
    """The in-flight tests to blame: the hung one we killed, else the one whose worker died of
    something other than the pool's own termination (SIGTERM), else the only one in flight."""
    if hung_pid is not None:
        return [(t, s, "hung") for t, s in in_flight if s["pid"] == hung_pid]
    died = []
    for task, started in in_flight:
        process = processes.get(started["pid"])
        code = process.exitcode if process is not None else None
        if code is not None and code != -signal.SIGTERM:
            died.append((task, started, "crashed"))
    if len(died) == 1:
        return died
    if len(in_flight) == 1:
        return [(*in_flight[0], "crashed")]
    return []


def _exitcode_text(processes) -> str:
    for process in processes:
        code = process.exitcode
        if code is not None and code != -signal.SIGTERM:
            return exit_text(code)
    return "no exit status"


def exit_text(code: int | None) -> str:
    """How a child process ended: its exit status or the signal that killed it."""
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _death_message(verdict: str, started: dict, processes, budget: float) -> str:
    if verdict == "hung":
        return (f"HANG: the test ran for more than {budget:g} s in its worker process (in-process driver; "
                "the per-test budget is 3 x --call-timeout, else 180 s); the worker was killed")
    process = processes.get(started["pid"])
    return (f"CRASH: the worker process running this test died "
            f"({exit_text(process.exitcode if process is not None else None)}; in-process driver, "
            "use --isolate for the driver's own exit status)")


class Progress:
    """The worker's side: one JSON line before and after each test, flushed at once."""

    def __init__(self, path: str):
        self._file = open(path, "a", encoding="utf-8")

    def plan(self, tests: list[tuple[int, str]]) -> None:
        self._write({"kind": "plan", "tests": tests})

    def start(self, index: int, name: str) -> None:
        self._write({"kind": "start", "index": index, "name": name, "pid": os.getpid(), "t": time.time()})

    def result(self, result: dict) -> None:
        self._write({"kind": "result", "result": result})

    def _write(self, entry: dict) -> None:
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
