"""The MLTS crash and stress tests (``nnts stress``): each test runs against the driver in a process
of its own and ends passed, failed, hung or crashed (:mod:`nnts.formats.results`) with a message,
shown and written in MLTS's words, SUCCESS, FAILURE, HANG or CRASH (``VERDICT``).

=================================  ==============================================================
``parallel_one_compilation``       1, 2, 4 and 8 client threads executing one compilation of
                                   the ADD-MUL-ADD chain (every execution mode in turn)
``parallel_several_compilations``  1, 2, 4 and 8 threads, each compiling its own chain (of its
                                   own shape) concurrently, then executing it
``client_killed_during_compilation`` a client process compiling a 300-operation model on a
                                   socket server is SIGKILLed inside a compilation; then a new
                                   client must compile and execute correctly (a driver that
                                   speaks only stdio: each client starts its own driver process,
                                   which must exit within ``DRIVER_EXIT_S`` of its client's death)
``client_killed_during_execution`` the same, the client killed inside a 4 MiB-tensor execution
``multi_process_random_kills``     3 client processes infer on one socket server, one of them
                                   SIGKILLed (and replaced) at random every 0.3-0.8 s
``repeated_load_unload``           compile, execute and release models with 512 KiB of
                                   constants: the driver's VmRSS, after the first quarter of
                                   the run, may grow by ``LOAD_UNLOAD_BUDGET_MIB`` (8 MiB)
``memory_mapped_model``            constants of the model from ``Memory.from_fd`` (a file) and
                                   ``Memory.create_shared``, at offsets, in several compilations
``random_graphs``                  the suite's random graphs (same generator, seeds and support:
                                   ``nnts support``), the in-process reference as oracle (AOSP
                                   RandomGraphTest criteria); a failure is shrunk and saved under
                                   ``--reproducers`` with its replay command
``degradation_under_load``         4 client processes on one driver process (mlts/stress_load.py):
                                   FAILURE when their executions per second in all fall below half
                                   of one client's alone (alternating phases), or when the driver
                                   runs one execution at a time (no short execution of a client
                                   ends inside a long one of another)
``memory_soak``                    two threads executing for the duration: the driver's VmRSS,
                                   after the first quarter, may grow by ``SOAK_BUDGET_MIB`` (8 MiB)
``resource_soak``                  each execution path in turn (sync, async, fenced, burst,
                                   device memory), at least ``RESOURCE_EXECUTIONS`` (2,000)
                                   executions each and a fifth of the duration: the driver
                                   process's fds, threads, mapped regions and VmRSS may not grow
                                   with them (``nnts.runners.resources``); a leak is named by
                                   path and resource
=================================  ==============================================================

Every result is checked against numpy (or, for random graphs, the in-process reference), never
against the driver under test. A driver process that dies or breaks the protocol makes the test
CRASH, a call that does not return within the call budget (``--call-timeout``) makes it HANG,
whatever the test made of the error (``nnts.formats.results.driver_died``); anything else that
goes wrong is a FAILURE. The JSON (``--json``) is a list of results: ``name``, ``status``,
``verdict`` (the status in MLTS's words), ``message``, ``seconds``, ``metrics``.
``--duration`` is the time of each of the six timed tests (load/unload, multi-process, random
graphs, degradation, the two soaks): the whole set takes about six times it plus 5-10 s.

The client side of the multi-client tests runs in processes of its own: ``python -m nnts.mlts.stress
client ROLE DRIVER SEED`` prints one JSON line per event (``driver`` with the driver's pid,
``start``/``end`` of a call, ``ok`` per verified execution, ``error`` with its kind) until it is
killed, or ``error`` with the message and the driver incidents it saw (``[kind, message]``, judged
by the test); the ``load`` role takes commands on its standard input (``stress_load.client_load``).
"""
from __future__ import annotations

import gc
import itertools
import json
import mmap
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Callable

import numpy as np

from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.errors import NnapiError
from nnapi_ref.hal import HalError
from nnapi_ref.remote.client import IncidentLog
from nnapi_ref.runtime import Burst, Execution, Memory, MemoryDesc
from nnapi_ref.runtime.devices import Device
from nnapi_ref.types import ResultCode
from nnts.formats import junit
from nnts.formats.files import write_atomic
from nnts.formats.results import driver_died
from nnts.generators.builders import chain, chain_model, compute_in_mode
from nnts.generators.families import FAMILIES
from nnts.mlts.stress_load import client_load, degradation_under_load
from nnts.mlts.stress_run import (DRIVER_EXIT_S, VERDICT, Client, Failure, Result, Run, Target, affine_model,
                                  check_close, compile_for, driver_pid, execute, long_model, parallel, parse_target,
                                  rss_mib, run_chain)
from nnts.runners import resources
from nnts.runners.differential import run_case
from nnts.runners.drivers import load_driver
from nnts.runners.settings import Settings, entry_point
from nnts.runners.support import learn

DEFAULT_DURATION_S = 3.0
DEFAULT_REPRODUCERS = os.path.join("out", "reproducers")  # in the current folder, as the suite's

THREADS = (1, 2, 4, 8)
EXECUTIONS_PER_THREAD = 12
MODES = ("sync", "async", "burst", "fenced")
KILLS = 3                          # clients killed in each early-termination test
COMPILE_OPERATIONS = 300           # the model a killed client compiles: ~15 ms on the reference
EXECUTE_DIMS = (1024, 1024)        # the tensors a killed client executes on: 4 MiB each
CLIENT_PROCESSES = 3
KILL_INTERVAL_S = (0.3, 0.8)
MIN_KILLS = 3
WARMUP_FRACTION = 0.25             # memory is measured from the end of the first quarter
LOAD_UNLOAD_BUDGET_MIB = 8.0
LOAD_UNLOAD_WARMUP, LOAD_UNLOAD_MEASURED = 32, 64      # cycles, at least
SOAK_BUDGET_MIB = 8.0
SOAK_WARMUP, SOAK_MEASURED = 500, 1000                 # executions, at least
RESOURCE_PATHS = ("sync", "async", "fenced", "burst", "device memory")
RESOURCE_WARMUP, RESOURCE_EXECUTIONS = 100, 2000       # executions per path, at least
CONSTANT_ELEMENTS = 64 * 1024      # each of a loaded model's two constants: 256 KiB
MIN_RANDOM_GRAPHS = 4


# ---------------------------------------------------------------------------------------------
# The tests: each returns its message on SUCCESS and raises Failure otherwise
# ---------------------------------------------------------------------------------------------

def parallel_one_compilation(run: Run) -> str:
    compilation = compile_for(Device(run.device()), chain_model((8, 8), (8, 8)))
    for threads in THREADS:
        def work(i: int) -> None:
            rng = np.random.default_rng([threads, i])
            for k in range(EXECUTIONS_PER_THREAD):
                run_chain(compilation, rng, (8, 8), MODES[(i + k) % len(MODES)])
        parallel(threads, work)
    run.metrics["executions"] = sum(THREADS) * EXECUTIONS_PER_THREAD
    return (f"{'/'.join(map(str, THREADS))} threads on one compilation, {EXECUTIONS_PER_THREAD} executions each "
            f"(sync, async, burst, fenced in turn): all match numpy")


def parallel_several_compilations(run: Run) -> str:
    device = Device(run.device())
    for threads in THREADS:
        def work(i: int) -> None:
            shape = (i + 1, 8)  # a model of its own per thread
            compilation = compile_for(device, chain_model(shape, shape))
            rng = np.random.default_rng([threads, i])
            for k in range(EXECUTIONS_PER_THREAD):
                run_chain(compilation, rng, shape, MODES[(i + k) % len(MODES)])
        parallel(threads, work)
    run.metrics["compilations"] = sum(THREADS)
    run.metrics["executions"] = sum(THREADS) * EXECUTIONS_PER_THREAD
    return (f"{'/'.join(map(str, THREADS))} threads, each compiling and executing a model of its own "
            f"{EXECUTIONS_PER_THREAD} times, concurrently: all match numpy")


def _kill_during_calls(run: Run, role: str, what: str) -> str:
    """SIGKILL ``KILLS`` clients of the driver inside a call (``role``'s loop), each time at a
    random point of it; after each, a new client must be served correctly."""
    driver = run.shared_driver()
    rng = np.random.default_rng(0)
    inside, call_ms = 0, []
    for k in range(KILLS):
        client = run.client(role, driver, k)
        durations = []
        while len(durations) < 2:  # learn how long one call takes from two of them
            start = client.next()
            end = client.next()
            durations.append(end["t"] - start["t"])
        client.next()  # the start of the third call, the one it is killed in
        time.sleep(rng.uniform(0.1, 0.6) * min(durations))
        after = run.kill(client)
        inside += not any(e["event"] == "end" for e in after)
        call_ms.append(1000 * min(durations))
        run.check_new_client(driver, k)
    run.metrics.update(kills=KILLS, killed_inside_call=inside, call_ms=round(float(np.median(call_ms)), 1))
    return (f"{KILLS} client processes SIGKILLed during {what} ({inside} inside the call, which takes "
            f"~{np.median(call_ms):.0f} ms){_exits(run)}; after each, a new client compiled and executed "
            "correctly")


def _exits(run: Run) -> str:
    return f", each one's driver process exited within {DRIVER_EXIT_S:g} s" if run.per_client_drivers else ""


def client_killed_during_compilation(run: Run) -> str:
    return _kill_during_calls(run, "compile", f"compilation of a {COMPILE_OPERATIONS}-operation model")


def client_killed_during_execution(run: Run) -> str:
    return _kill_during_calls(run, "execute", f"execution on {EXECUTE_DIMS[0]}x{EXECUTE_DIMS[1]} tensors")


def _inferring(run: Run, clients: list[Client]) -> list[int]:
    """The clients that have verified an execution (a client is killed while it infers, not while
    it starts), waiting for one as long as a client may be silent."""
    deadline = time.monotonic() + run.wait_s
    while True:
        for client in clients:
            client.check()
        run.check_server()
        ready = [i for i, client in enumerate(clients) if client.oks]
        if ready:
            return ready
        if time.monotonic() > deadline:
            run.incident("hang", f"HANG: no client completed an execution within {run.wait_s:g} s")
            raise Failure("no client made progress")
        time.sleep(0.02)


def multi_process_random_kills(run: Run) -> str:
    driver = run.shared_driver()
    rng = np.random.default_rng(0)
    seeds = itertools.count()
    clients = [run.client("infer", driver, next(seeds)) for _ in range(CLIENT_PROCESSES)]
    verified, kills = 0, 0
    end = time.monotonic() + run.duration
    while time.monotonic() < end or kills < MIN_KILLS:
        time.sleep(rng.uniform(*KILL_INTERVAL_S))
        victim = int(rng.choice(_inferring(run, clients)))
        run.kill(clients[victim])
        verified += clients[victim].oks
        kills += 1
        clients[victim] = run.client("infer", driver, next(seeds))
    for client in clients:
        run.kill(client)
        verified += client.oks
    run.check_new_client(driver, next(seeds))
    run.metrics.update(clients=CLIENT_PROCESSES, kills=kills, verified_executions=verified)
    return (f"{CLIENT_PROCESSES} client processes, {kills} SIGKILLed at random while inferring and replaced"
            f"{_exits(run)}, {verified} executions verified against numpy; a new client was then served correctly")


class MemoryWatch:
    """The driver's VmRSS after a warm-up (the first ``WARMUP_FRACTION`` of the run, and at least
    ``warmup`` cycles): a driver's memory must level off, so growth beyond ``budget`` MiB after it
    is a FAILURE. The run lasts its duration and at least ``measured`` cycles after the warm-up,
    so that a slow machine does not hide a leak."""

    def __init__(self, pid: int, budget_mib: float, duration: float, warmup: int, measured: int, metrics: dict):
        self.pid, self.budget, self.warmup, self.measured, self.metrics = pid, budget_mib, warmup, measured, metrics
        self.start = rss_mib(pid)
        now = time.monotonic()
        self.warm_at, self.end = now + WARMUP_FRACTION * duration, now + duration
        self.baseline: float | None = None
        self.base_count = 0
        self.peak_growth = 0.0

    def sample(self, count: int, what: str) -> None:
        """Measure after ``count`` cycles: FAILURE beyond the budget."""
        rss = rss_mib(self.pid)
        if self.baseline is None:
            if time.monotonic() >= self.warm_at and count >= self.warmup:
                self.baseline, self.base_count = rss, count
            return
        self.peak_growth = max(self.peak_growth, rss - self.baseline)
        self.metrics.update(rss_start_mib=round(self.start, 1), rss_baseline_mib=round(self.baseline, 1),
                            rss_end_mib=round(rss, 1), growth_mib=round(rss - self.baseline, 2),
                            budget_mib=self.budget, measured=count - self.base_count)
        if rss - self.baseline > self.budget:
            raise Failure(f"driver memory grew {rss - self.baseline:.1f} MiB ({self.baseline:.1f} -> {rss:.1f} MiB "
                          f"VmRSS) in {count - self.base_count} {what} after the warm-up: beyond the budget of "
                          f"{self.budget:g} MiB")

    def finished(self, count: int) -> bool:
        return (time.monotonic() >= self.end and self.baseline is not None
                and count - self.base_count >= self.measured)

    def summary(self) -> str:
        return (f"driver VmRSS {self.start:.1f} MiB at the start, {self.baseline:.1f} after the warm-up, growth "
                f"after it at most {self.peak_growth:.2f} MiB (budget {self.budget:g} MiB)")


def repeated_load_unload(run: Run) -> str:
    remote = run.device()
    device = Device(remote)
    watch = MemoryWatch(driver_pid(remote), LOAD_UNLOAD_BUDGET_MIB, run.duration, LOAD_UNLOAD_WARMUP,
                        LOAD_UNLOAD_MEASURED, run.metrics)
    rng = np.random.default_rng(0)
    n = CONSTANT_ELEMENTS
    cycles = 0
    while not watch.finished(cycles):
        w, c, x = (rng.uniform(-2, 2, n).astype(np.float32) for _ in range(3))
        compilation = compile_for(device, affine_model(n, (w, c)))
        check_close(f"load {cycles}", x * w + c, execute(compilation, [x], (n,)))
        del compilation  # unloaded: the driver is told with the next call
        cycles += 1
        if cycles % 8 == 0:
            gc.collect()
            watch.sample(cycles, "load/unload cycles")
    run.metrics["cycles"] = cycles
    return f"{cycles} models (512 KiB of constants each) compiled, executed, released; {watch.summary()}"


def memory_mapped_model(run: Run) -> str:
    device = Device(run.device())
    rng = np.random.default_rng(0)
    n, page = 4096, 4096
    w, c = (rng.uniform(-2, 2, n).astype(np.float32) for _ in range(2))
    offsets = (page, 2 * page + n * 4)  # w, c: at page offsets, away from the start of the mapping
    size = offsets[1] + n * 4
    checked = 0
    with tempfile.TemporaryFile(dir=run.folder()) as f:
        f.truncate(size)
        for array, offset in zip((w, c), offsets):
            f.seek(offset)
            f.write(array.tobytes())
        f.flush()
        memories = {"Memory.from_fd": Memory.from_fd(size, mmap.PROT_READ, f.fileno(), 0),
                    "Memory.create_shared": Memory.create_shared(size)}
    shared = memories["Memory.create_shared"].shared.buffer
    for array, offset in zip((w, c), offsets):
        shared[offset:offset + n * 4] = array.view(np.uint8)
    for name, memory in memories.items():
        compilations = [compile_for(device, affine_model(n, tuple((memory, o) for o in offsets))) for _ in range(3)]
        for i, compilation in enumerate(compilations):
            x = rng.uniform(-2, 2, n).astype(np.float32)
            check_close(f"{name}, compilation {i}", x * w + c, execute(compilation, [x], (n,), MODES[i]))
            checked += 1
    run.metrics["executions"] = checked
    return ("constants at page offsets of a file mapped with Memory.from_fd and of Memory.create_shared, "
            f"3 compilations of each: {checked} executions match numpy")


def random_graphs(run: Run) -> str:
    """The suite's random graphs (``cts/test_random_graph.py``): the same generator, seeds and
    support (:mod:`nnts.runners.support`, asked of the driver and cached by its identity), so
    seed S here is the suite's seed S; a failure is shrunk and saved with its replay command."""
    driver = run.device()
    device, reference = [Device(driver)], [Device(ReferenceDevice())]
    support = learn([driver], cache_dir=run.settings.cache_dir)
    if not support.operations():
        raise Failure(f"the driver supports none of the {len(FAMILIES)} operations of the random-graph "
                      "generator (probed with one-operation models: nnts support)")
    counts = {"pass": 0, "skip": 0}
    operations = 0
    seed = 0
    end = time.monotonic() + run.duration
    while time.monotonic() < end or seed < MIN_RANDOM_GRAPHS:
        result = run_case(seed, device, reference, support.level, run.reproducers,
                          run.target.serve or run.target.remote, support=support)
        if result.status == "fail":
            raise Failure(result.message)
        counts[result.status] += 1
        operations += len(result.graph.operations) if result.status == "pass" else 0
        seed += 1
    run.metrics.update(graphs=seed, passed=counts["pass"], skipped=counts["skip"], operations=operations,
                       supported_operations=len(support.operations()), supported_types=len(support.types()))
    return (f"{seed} random graphs (seeds 0-{seed - 1}, the suite's) drawn from the driver's support "
            f"({support.summary()}): {counts['pass']} compiled, executed and matched the reference "
            f"({operations} operations), {counts['skip']} skipped as unsupported")


def memory_soak(run: Run) -> str:
    remote = run.device()
    device = Device(remote)
    watch = MemoryWatch(driver_pid(remote), SOAK_BUDGET_MIB, run.duration, SOAK_WARMUP, SOAK_MEASURED, run.metrics)
    compilation = compile_for(device, chain_model((16, 16), (16, 16)))
    stop = threading.Event()
    counts = [0, 0]

    def work(i: int) -> None:
        rng = np.random.default_rng(i)
        try:
            while not stop.is_set():
                run_chain(compilation, rng, (16, 16), ("sync", "burst")[i])
                counts[i] += 1
        finally:
            stop.set()
    start = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(work, i) for i in range(2)]
        try:
            while not stop.wait(0.1) and not watch.finished(sum(counts)):
                watch.sample(sum(counts), "executions")
        finally:
            stop.set()
        for future in futures:
            future.result()
    watch.sample(sum(counts), "executions")
    run.metrics["executions"] = sum(counts)
    return (f"{sum(counts)} executions in {time.monotonic() - start:.1f} s (sync and burst, verified); "
            f"{watch.summary()}")


def _path_execution(compilation, path: str, x: np.ndarray, y: np.ndarray, out: np.ndarray):
    """A reusable execution of a chain compilation for ``path`` (device memory: input 0 and the
    output in memories from descriptors) and a function running it once."""
    execution = Execution(compilation)
    execution.set_reusable(True)
    execution.set_input(1, y)
    if path == "device memory":
        memories = []
        for is_input in (True, False):
            desc = MemoryDesc()
            (desc.add_input_role if is_input else desc.add_output_role)(compilation, 0)
            desc.finish()
            memories.append(Memory.from_desc(desc))
        Memory.copy(Memory.from_buffer(x.copy()), memories[0])
        execution.set_input_from_memory(0, memories[0], 0, 0)
        execution.set_output_from_memory(0, memories[1], 0, 0)

        def run() -> None:
            execution.compute()
            Memory.copy(memories[1], Memory.from_buffer(out))
        return run
    execution.set_input(0, x)
    execution.set_output(0, out)
    if path == "burst":
        burst = Burst(compilation)
        return lambda: execution.burst_compute(burst)
    return lambda: compute_in_mode(execution, path)


def resource_soak(run: Run) -> str:
    remote = run.device()
    pid = driver_pid(remote)
    compilation = compile_for(Device(remote), chain_model())
    x, y = (np.random.default_rng(seed).uniform(0.5, 1.5, (2, 2)).astype(np.float32) for seed in (1, 2))
    done = []
    for path in RESOURCE_PATHS:
        out = np.zeros((2, 2), np.float32)
        execute_once = _path_execution(compilation, path, x, y, out)
        for _ in range(RESOURCE_WARMUP):
            execute_once()
        before = resources.sample(pid)
        count, end = 0, time.monotonic() + run.duration / len(RESOURCE_PATHS)
        while count < RESOURCE_EXECUTIONS or time.monotonic() < end:
            out[:] = 0
            execute_once()
            count += 1
        check_close(f"{path} execution {count}", chain(x, y), out)
        after = resources.sample(pid)
        leaks = resources.leaks(before, after, count, f"{path} execution")
        if leaks:
            raise Failure("; ".join(leaks))
        key = path.replace(" ", "_")
        run.metrics[f"{key}_executions"] = count
        for name, short in zip(resources.RESOURCES, ("fds", "threads", "maps", "rss_kib")):
            run.metrics[f"{key}_{short}_growth"] = after[name] - before[name]
        done.append(f"{count:,} {path}")
    return (f"executions per path ({', '.join(done)}, verified): the driver process's fds, threads, mapped "
            "regions and VmRSS did not grow with them")


TESTS: dict[str, Callable[[Run], str]] = {f.__name__: f for f in (
    parallel_one_compilation, parallel_several_compilations, client_killed_during_compilation,
    client_killed_during_execution, multi_process_random_kills, repeated_load_unload, memory_mapped_model,
    random_graphs, degradation_under_load, memory_soak, resource_soak)}


# ---------------------------------------------------------------------------------------------
# Running and reporting
# ---------------------------------------------------------------------------------------------

def run_test(name: str, target: Target, duration: float, call_timeout: float | None,
             settings: Settings = Settings(), reproducers: str | None = None) -> Result:
    """One test, every way it can end turned into a verdict: a crash or hang seen anywhere (the
    test's remote driver connections, the socket server, the client processes) decides it."""
    run = Run(target, duration, call_timeout, settings, reproducers or DEFAULT_REPRODUCERS)
    start = time.monotonic()
    status = "passed"
    try:
        message = TESTS[name](run)
    except Failure as e:
        status, message = "failed", str(e)
    except (NnapiError, HalError) as e:
        status, message = "failed", f"{type(e).__name__}: {e}"
    except Exception as e:  # a bug of the driver surfacing oddly, or of this test: still a verdict
        status, message = "failed", f"unexpected {type(e).__name__}: {e}"
    finally:
        try:  # a lost connection may be the server dying: give it time to be seen dead
            run.check_server(wait_s=2.0 if any(i.kind == "crash" for i in run.driver_incidents.since() + run.incidents) else 0)
        except Failure:
            pass
        run.close()
    found = run.incidents + run.driver_incidents.since()
    if found:
        status = driver_died(found)
        message = found[0].message + (f" (and {len(found) - 1} more)" if len(found) > 1 else "") + (
            f"\n{message}" if "\nreproducer: " in message else "")  # a random graph's, shrunk, with its replay
    return Result(name, status, message, round(time.monotonic() - start, 2), run.metrics)


def run_tests(driver: str, names: list[str] | None = None, duration: float = DEFAULT_DURATION_S,
              call_timeout: float | None = None, progress: Callable | None = None,
              settings: Settings = Settings(), reproducers: str | None = None) -> list[Result]:
    """The tests ``names`` (default: all) against ``driver``; ``progress(i, total, name, result)``
    is called before each test (result None) and after it."""
    target = parse_target(driver)
    names = list(names or TESTS)
    unknown = [n for n in names if n not in TESTS]
    if unknown:
        raise NnapiError(ResultCode.BAD_DATA, f"unknown stress test(s) {', '.join(unknown)}; known: {', '.join(TESTS)}")
    results = []
    for i, name in enumerate(names):
        if progress:
            progress(i, len(names), name, None)
        results.append(run_test(name, target, duration, call_timeout, settings, reproducers))
        if progress:
            progress(i, len(names), name, results[-1])
    return results


def write_json(path: str, results: list[Result]) -> None:
    write_atomic(path, json.dumps([dict(asdict(r), verdict=r.verdict) for r in results], indent=1))


def write_junit(path: str, results: list[Result]) -> None:
    junit.write(path, "nnts-stress", [junit.Case("mlts.stress", r.name, r.status, f"{r.verdict}: {r.message}",
                                                 r.seconds) for r in results])


def console_progress(stream=None) -> Callable:
    """A progress reporter (on standard output by default): on a terminal one line rewritten in
    place while a test runs, then its verdict; elsewhere one line per test."""
    stream = stream or sys.stdout
    tty = stream.isatty()

    def report(i: int, total: int, name: str, result: Result | None) -> None:
        head = f"[{i + 1}/{total}] {name}"
        if result is None:
            if tty:
                stream.write(f"\r\033[K{head} ...")
                stream.flush()
            return
        stream.write(("\r\033[K" if tty else "") + f"{head}: {result.verdict} ({result.seconds:.1f} s) "
                     f"{result.message}\n")
        stream.flush()
    return report


def main(driver: str, tests: str | None, duration: float | None, call_timeout: float | None,
         json_path: str | None, junit_path: str | None, settings: Settings = Settings(),
         reproducers: str | None = None) -> int:
    """``nnts stress``: run, report, write the files; 0 only when every test ends SUCCESS."""
    start = time.monotonic()
    names = [n.strip() for n in tests.split(",") if n.strip()] if tests else None
    results = run_tests(driver, names, duration or DEFAULT_DURATION_S, call_timeout, console_progress(), settings,
                        reproducers)
    if json_path:
        write_json(json_path, results)
    if junit_path:
        write_junit(junit_path, results)
    counts = {s: sum(r.status == s for r in results) for s in VERDICT}
    print(", ".join(f"{n} {VERDICT[s]}" for s, n in counts.items() if n) + f" of {len(results)} stress tests "
          f"in {time.monotonic() - start:.1f} s")
    return 0 if counts["passed"] == len(results) else 1


# ---------------------------------------------------------------------------------------------
# The client processes of the socket tests
# ---------------------------------------------------------------------------------------------

def _emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, "t": time.monotonic(), **fields}), flush=True)


def _client_compile(device: Device, rng: np.random.Generator) -> None:
    model = long_model(COMPILE_OPERATIONS)
    while True:
        _emit("start")
        compile_for(device, model)
        _emit("end")


def _client_execute(device: Device, rng: np.random.Generator) -> None:
    compilation = compile_for(device, chain_model(EXECUTE_DIMS, EXECUTE_DIMS))
    while True:
        _emit("start")
        run_chain(compilation, rng, EXECUTE_DIMS)
        _emit("end")


def _client_infer(device: Device, rng: np.random.Generator) -> None:
    compilation = compile_for(device, chain_model((8, 8), (8, 8)))
    for k in itertools.count():
        run_chain(compilation, rng, (8, 8), MODES[k % len(MODES)])
        _emit("ok")


CLIENT_ROLES = {"compile": _client_compile, "execute": _client_execute, "infer": _client_infer, "load": client_load}


def client_main(role: str, driver: str, seed: int, settings: Settings = Settings()) -> int:
    """Run ``role`` on ``driver`` (a ``socket:`` server or a stdio driver of its own) until
    killed; an error ends it with an ``error`` event carrying the driver incidents it saw, which
    the test takes over."""
    incidents = IncidentLog()
    try:
        device = load_driver(driver, settings=settings, incidents=incidents)
        _emit("driver", pid=driver_pid(device))
        CLIENT_ROLES[role](Device(device), np.random.default_rng(seed))
    except Exception as e:
        found = incidents.since()
        _emit("error", incidents=[[i.kind, i.message] for i in found],
              message=found[0].message if found else f"{type(e).__name__}: {e}")
    return 1


if __name__ == "__main__":
    if sys.argv[1:2] != ["client"] or len(sys.argv) != 5:
        sys.exit("usage: python -m nnts.mlts.stress client ROLE DRIVER SEED (nnts stress runs the tests)")
    # The client's entry point: its settings (NNTS_CALL_TIMEOUT from Run.env, ...) from its environment.
    sys.exit(client_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), entry_point(os.environ)))
