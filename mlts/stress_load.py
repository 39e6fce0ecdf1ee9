"""``degradation_under_load`` of ``nnts stress``: several client processes against one driver
process, as apps share a driver service. Two criteria, each robust to a machine other work loads:

* **Throughput**: executions per second of ``CONCURRENT_CLIENTS`` clients together against one
  client alone, measured in alternating phases (alone, together, alone, ...; ``ROUNDS`` of
  each) so that drift in the machine's load affects both alike; the median of the rounds'
  ratios must be at least ``MIN_THROUGHPUT_RATIO`` (0.5). Per-client latency (median, 95th
  percentile) of both phases goes into the metrics.
* **Concurrency** (count-based, not timed): one client runs a long execution (a
  ``LONG_OPERATIONS``-operation chain) ``PROBE_LONG`` times while the others run short ones,
  each client recording when its executions start and end. A driver that runs one execution at
  a time ends no short execution while it runs the long one: within each long execution there
  is a stretch as long as the long one's own work with no short execution ending, whatever the
  machine's load. A concurrent driver ends short ones all along. A long execution whose longest
  stretch without a short one ending is over ``MAX_QUIET_SHARE`` (0.3) of its time counts as
  serialized; more than half of them serialized is a FAILURE. (Ten runs each on a 2-core machine
  at load 9-12, at nice 19: the reference's stretches were 0.01-0.06 of a long execution, up to
  0.58 in single ones while other work took the CPU; a serializing driver's 0.93-1.0, down to
  0.43, the rest being its wait for the lock, when short ones do end. Verdicts: 10 SUCCESS, 10
  FAILURE; its throughput ratio, 0.58-5.1, would have let it pass.)

The clients are processes of their own (``python -m nnts.mlts.stress client load DRIVER SEED``),
each with its own connection to the driver's socket server, so that client-side work runs in
parallel as it does for separate apps. A driver that speaks only stdio cannot be shared by
processes: then one client process runs the clients as threads on one connection. Each client
timestamps its executions with the system-wide monotonic clock; every result is checked against
numpy.
"""
from __future__ import annotations

import json
import math
import os
import sys
import threading
import time

import numpy as np

from nnapi_ref.runtime.devices import Device
from nnts.generators.builders import chain, chain_model
from nnts.mlts import stress_run as stress

CONCURRENT_CLIENTS = 4
MIN_THROUGHPUT_RATIO = 0.5
ROUNDS = 3                         # together phases, each between two alone phases
MIN_PHASE_S = 0.15
WARMUP_S = 0.1
SHORT_SHAPE = (8, 8)
LONG_SHAPE = (512, 512)            # 1 MiB tensors: ~0.1 ms per operation on the reference
LONG_OPERATIONS = 2400             # ~0.2 s alone on the reference (an unloaded machine)
PROBE_LONG = 4                     # long executions while the other clients run short ones
MAX_QUIET_SHARE = 0.3              # a long execution with no short one ending for longer: serialized
MIN_OVERLAPPED_SHARE = 0.5         # of the long executions, at least this share not serialized


# ---------------------------------------------------------------------------------------------
# The client side (a process of its own)
# ---------------------------------------------------------------------------------------------

class _Lanes:
    """A client process's executing threads: each runs short or long executions in a loop,
    printing one ``exec`` event per verified execution, until told to stop."""

    def __init__(self, device: Device, rng: np.random.Generator):
        self.device, self.rng = device, rng
        self.incidents = device.driver.incidents  # the remote driver's (a client's driver always is)
        self.short: list = []
        self.long = None
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.print_lock = threading.Lock()
        self.seen = self.incidents.mark()

    def emit(self, event: str, **fields) -> None:
        line = json.dumps({"event": event, "t": time.monotonic(), **fields})
        with self.print_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def prepare(self, short: int, long: int) -> None:
        self.short = [stress.compile_for(self.device, chain_model(SHORT_SHAPE, SHORT_SHAPE)) for _ in range(short)]
        if long:
            self.long = stress.compile_for(self.device, stress.long_model(LONG_OPERATIONS, LONG_SHAPE))
        self.emit("ready")

    def start(self, short: int, long: int) -> None:
        self.stop.clear()
        self.threads = [threading.Thread(target=self._loop, args=("short", i), daemon=True) for i in range(short)]
        self.threads += [threading.Thread(target=self._loop, args=("long", 0), daemon=True) for _ in range(long)]
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()
        self.emit("idle")

    def _loop(self, kind: str, lane: int) -> None:
        rng = np.random.default_rng([int(self.rng.integers(1 << 31)), lane])
        try:
            while not self.stop.is_set():
                if kind == "short":
                    shape, compilation = SHORT_SHAPE, self.short[lane]
                    x, y = (rng.uniform(-2, 2, shape).astype(np.float32) for _ in range(2))
                    expected = chain(x, y)
                else:  # x (+ y, * y) ...: integer-valued x and y = 1 keep every step exact
                    shape, compilation = LONG_SHAPE, self.long
                    x = rng.integers(-100, 100, shape).astype(np.float32)
                    y = np.ones(shape, np.float32)
                    expected = x + (LONG_OPERATIONS + 1) // 2
                start = time.monotonic()  # the call alone: inputs made before, checked after
                out = stress.execute(compilation, [x, y], shape)
                end = time.monotonic()
                stress.check_close(f"{kind} execution", expected, out)
                self.emit("exec", kind=kind, lane=lane, start=start, end=end)
        except Exception as e:  # the process's verdict: reported as client_main reports one, then ended
            found = self.incidents.since(self.seen)
            self.emit("error", incidents=[[i.kind, i.message] for i in found],
                      message=found[0].message if found else f"{type(e).__name__}: {e}")
            os._exit(1)


def client_load(device: Device, rng: np.random.Generator) -> None:
    """The ``load`` client role: JSON commands on standard input, one a line: ``{"prepare":
    {"short": S, "long": L}}`` compiles S short chains (and the long one if L), then prints
    ``ready``; ``{"short": S, "long": L}`` starts S short lanes and L long ones; ``{"stop":
    true}`` stops them and prints ``idle``."""
    lanes = _Lanes(device, rng)
    for line in sys.stdin:
        command = json.loads(line)
        if "prepare" in command:
            lanes.prepare(**command["prepare"])
        elif command.get("stop"):
            lanes.finish()
        else:
            lanes.start(command.get("short", 0), command.get("long", 0))


# ---------------------------------------------------------------------------------------------
# The test side
# ---------------------------------------------------------------------------------------------

class _Clients:
    """The load clients of one test: ``CONCURRENT_CLIENTS`` processes of one lane each, or one
    process of ``CONCURRENT_CLIENTS`` lanes (a stdio driver); their ``exec`` events."""

    def __init__(self, run: stress.Run):
        self.run = run
        driver = run.shared_driver()
        self.threaded = run.per_client_drivers
        processes = 1 if self.threaded else CONCURRENT_CLIENTS
        self.procs = [run.client("load", driver, seed) for seed in range(processes)]
        for i, proc in enumerate(self.procs):
            proc.send({"prepare": {"short": CONCURRENT_CLIENTS if self.threaded else 1, "long": int(i == 0)}})
        for proc in self.procs:
            self._wait(proc, "ready", [])

    def _wait(self, proc: stress.Client, event: str, into: list) -> None:
        while (got := proc.next())["event"] != event:
            if got["event"] == "exec":
                into.append(dict(got, client=self.procs.index(proc)))

    def phase(self, short: int, long: int = 0, seconds: float | None = None, longs: int = 0) -> tuple[list, float, float]:
        """``short`` short lanes and ``long`` long ones (the long one on the first client), for
        ``seconds`` or until ``longs`` long executions have ended: (exec events, start, stop)."""
        if self.threaded:
            commands = [{"short": short, "long": long}]
        else:
            commands = [{"short": int(i < short) if not long else int(0 < i < short + 1), "long": int(i == 0 and long)}
                        for i in range(len(self.procs))]
        events: list[dict] = []
        start = time.monotonic()
        active = [p for p, c in zip(self.procs, commands) if c["short"] or c["long"]]
        for proc, command in zip(self.procs, commands):
            if command["short"] or command["long"]:
                proc.send(command)
        if seconds is not None:
            end = start + seconds
            while time.monotonic() < end:
                self._poll(active, events)
                time.sleep(min(0.02, max(0.0, end - time.monotonic())))
        else:
            deadline = time.monotonic() + self.run.wait_s
            while sum(e["kind"] == "long" for e in events) < longs:
                self._poll(active, events)
                if time.monotonic() > deadline:
                    self.run.incident("hang", f"HANG: {longs} long executions did not end within {self.run.wait_s:g} s")
                    raise stress.Failure("the long executions made no progress")
                time.sleep(0.01)
        stop = time.monotonic()
        for proc in active:
            proc.send({"stop": True})
        for proc in active:
            self._wait(proc, "idle", events)
        return events, start, stop

    def _poll(self, procs: list, into: list) -> None:
        self.run.check_server()
        for proc in procs:
            into.extend(dict(e, client=self.procs.index(proc)) for e in proc.check() if e["event"] == "exec")


def _throughput(events: list[dict], start: float, stop: float) -> tuple[float, list[dict]]:
    """Executions per second that started and ended within [start, stop]; those executions."""
    inside = [e for e in events if e["start"] >= start and e["end"] <= stop]
    return len(inside) / (stop - start), inside


def _latencies(events: list[dict]) -> list[float]:
    return [e["end"] - e["start"] for e in events]


def _per_client_ms(events: list[dict]) -> list[float]:
    """The median latency of each client (process and lane), in ms."""
    clients = sorted({(e["client"], e["lane"]) for e in events})
    return [_ms(_latencies([e for e in events if (e["client"], e["lane"]) == c]), 0.5) for c in clients]


def quiet_shares(events: list[dict]) -> list[float]:
    """For each long execution, the longest time within it in which no short execution of
    another client ended, as a share of its own time: the count-based evidence of concurrency.
    A driver running one execution at a time ends no other execution while it runs the long one
    (a share near 1); a concurrent driver ends short ones all along (a share near 0)."""
    shorts = [e["end"] for e in events if e["kind"] == "short"]
    shares = []
    for long in (e for e in events if e["kind"] == "long"):
        points = sorted([long["start"], long["end"]] + [t for t in shorts if long["start"] < t < long["end"]])
        shares.append(float(np.max(np.diff(points))) / (long["end"] - long["start"]))
    return shares


def _ms(seconds: list[float], q: float) -> float:
    return round(1000 * float(np.quantile(seconds, q)), 2) if seconds else 0.0


def degradation_under_load(run: stress.Run) -> str:
    clients = _Clients(run)
    n = CONCURRENT_CLIENTS
    span = max(MIN_PHASE_S, run.duration / (2 * ROUNDS + 1))
    clients.phase(n, seconds=WARMUP_S)
    alone, together, ratios = [], [], []
    executed = {"alone": [], "together": []}
    for r in range(ROUNDS + 1):
        rate, inside = _throughput(*clients.phase(1, seconds=span))
        alone.append(rate)
        executed["alone"] += inside
        if r < ROUNDS:
            rate, inside = _throughput(*clients.phase(n, seconds=span))
            together.append(rate)
            executed["together"] += inside
    for r in range(ROUNDS):
        single = (alone[r] + alone[r + 1]) / 2
        ratios.append(together[r] / single if single else 0.0)
    ratio = float(np.median(ratios))
    latency = {phase: _latencies(events) for phase, events in executed.items()}

    events, _, stop = clients.phase(n - 1, long=1, longs=PROBE_LONG)
    shares = quiet_shares([e for e in events if e["end"] <= stop])  # not the ones after the others stopped
    overlapped, longs = sum(share < MAX_QUIET_SHARE for share in shares), len(shares)
    long_ms = float(np.median([e["end"] - e["start"] for e in events if e["kind"] == "long"])) * 1000

    how = "client processes" if not clients.threaded else "client threads of one process (a stdio driver)"
    run.metrics.update(clients=n, processes=len(clients.procs), rounds=ROUNDS, phase_s=round(span, 3),
                       single_per_s=round(float(np.median(alone)), 1), concurrent_per_s=round(float(np.median(together)), 1),
                       per_client_per_s=round(float(np.median(together)) / n, 1),
                       ratios=[round(x, 3) for x in ratios], ratio=round(ratio, 3), min_ratio=MIN_THROUGHPUT_RATIO,
                       latency_alone_ms=_ms(latency["alone"], 0.5), latency_alone_p95_ms=_ms(latency["alone"], 0.95),
                       latency_together_ms=_ms(latency["together"], 0.5),
                       latency_together_p95_ms=_ms(latency["together"], 0.95),
                       latency_per_client_ms=_per_client_ms(executed["together"]),
                       long_ms=round(long_ms, 1), long_executions=longs, overlapped_longs=overlapped,
                       quiet_shares=[round(x, 3) for x in shares])
    figures = (f"{n} {how}: {np.median(together):.0f} executions/s in all, one alone {np.median(alone):.0f}/s "
               f"(median ratio of {ROUNDS} alternating rounds {ratio:.2f}); latency {run.metrics['latency_alone_ms']:g} ms "
               f"alone, {run.metrics['latency_together_ms']:g} ms together (p95 {run.metrics['latency_together_p95_ms']:g}; "
               f"per client {'/'.join(f'{x:g}' for x in run.metrics['latency_per_client_ms'])}); "
               f"short executions of other clients kept ending during {overlapped} of {longs} long executions "
               f"({LONG_OPERATIONS} operations, {long_ms:.0f} ms)")
    problems = []
    if overlapped < math.ceil(MIN_OVERLAPPED_SHARE * longs):
        problems.append("the driver serializes executions: no short execution of another client ended during "
                        f"over {MAX_QUIET_SHARE:g} of {longs - overlapped} of {longs} long executions")
    if ratio < MIN_THROUGHPUT_RATIO:
        problems.append(f"throughput collapses under concurrent load (ratio at least {MIN_THROUGHPUT_RATIO:g})")
    if problems:
        raise stress.Failure("; ".join(problems) + f": {figures}")
    return figures
