"""Where a served call's time goes: one synchronous execution of a 4-element ADD through the
remote-driver protocol, broken into its phases, beside a bare pipe round trip as the floor.

    python -m nnts.mlts.bench_remote_calls [--repeat N] [--native COMMAND ...]

Each execution is timed at the HAL (``PreparedModel.execute_synchronously`` with the caller's
arrays as POINTER arguments, as the runtime sends them) on CLOCK_MONOTONIC, which both processes
share, in phases:

* encode: the client stages the arguments and encodes the request;
* write: the request's write into the pipe;
* server wake-up: from the end of the write to the server's read returning the frame;
* dispatch: the server decodes the request and reaches the driver;
* driver: the driver's execution;
* reply: the server encodes and writes the reply;
* client wake-up: from the end of that write to the client's read returning the reply;
* hand-over: from that read to the calling thread holding the reply (0 when the caller reads);
* decode: the client decodes the reply and copies the outputs back.

For ``nnts serve reference`` the server's phases come from a timed copy of that server (this
module run with ``--timed-server``); for a native server (``--native ./example_driver``) they come
from the SDK's trace spans (``serve EXECUTE_SYNC`` and the driver's own ``execute`` span): dispatch
there ends where the worker starts the call, and the reply's write is in client wake-up. The
floors are a 16-byte round trip between this process and a child echoing it (``cat``, and a
Python loop of ``os.read``/``os.write``). Figures are medians in microseconds; "total" is the
median of whole calls (not the sum of the medians); "client CPU" and "server CPU" are the CPU
microseconds per call of each process (all threads, the native server's tracing included), and
"waits" the times per call its threads blocked (voluntary context switches): on a busy machine
the phases wait for a core, and a thread that waits costs a switch, whatever the load.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from nnapi_ref import hal
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.remote import client, server, wire
from nnapi_ref.remote.wire import Msg, Writer
from nnts.generators.builders import add_model

PHASES = ("encode", "write", "server wake-up", "dispatch", "driver", "reply", "client wake-up", "hand-over",
          "decode")
COUNTS = ("client CPU", "client waits", "server CPU", "server waits")
ECHO = "import os\nwhile True:\n    d = os.read(0, 65536)\n    if not d: break\n    os.write(1, d)\n"


def cpu_ns(pid: int) -> tuple[int, int]:
    """CPU nanoseconds the process ``pid`` has run and the times its threads waited (voluntary
    context switches), all its threads together."""
    total = switches = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
            with open(f"/proc/{pid}/task/{task}/status") as f:
                switches += next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
        except (OSError, StopIteration):
            pass  # a thread that ended
    return total, switches


def pipe_round_trip(argv: list[str], repeat: int) -> float:
    """Median microseconds of a 16-byte round trip through a child that echoes its stdin."""
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    w, r = child.stdin.fileno(), child.stdout.fileno()
    message, times = b"x" * 16, []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        os.write(w, message)
        got = 0
        while got < 16:
            got += len(os.read(r, 16 - got))
        times.append(time.perf_counter_ns() - start)
    child.stdin.close()
    child.wait()
    return statistics.median(times) / 1e3


# ---------------------------------------------------------------------------------------------
# The timed Python server: ``nnts serve reference`` recording when each EXECUTE_SYNC passes by
# ---------------------------------------------------------------------------------------------

def timed_server(path: str) -> None:
    """Serve the reference on stdin/stdout; at the end of the input, write per call (woken,
    driver start, driver end, replied) to ``path`` as JSON."""
    stamps: dict[int, list[int]] = {}
    current = [0]
    protocol_in, protocol_out = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    read_fd, write_fd = server._fd_reader(protocol_in), server._fd_writer(protocol_out)

    def read(n: int) -> bytes:
        data = read_fd(n)
        if n == wire.HEADER.size and len(data) == n:
            now = time.monotonic_ns()
            _, msg, call_id = wire.HEADER.unpack(data)
            if msg == Msg.EXECUTE_SYNC:
                current[0] = call_id
                stamps[call_id] = [now]
        return data

    def write(frame: bytes) -> None:
        write_fd(frame)
        call_id = wire.HEADER.unpack_from(frame)[2]
        if call_id in stamps:
            stamps[call_id].append(time.monotonic_ns())

    class TimedDevice(ReferenceDevice):
        def prepare_model(self, *args):
            prepared = super().prepare_model(*args)
            execute = prepared.execute_synchronously

            def timed(*a):
                entry = stamps[current[0]]
                entry.append(time.monotonic_ns())
                try:
                    return execute(*a)
                finally:
                    entry.append(time.monotonic_ns())
            prepared.execute_synchronously = timed
            return prepared

    server.Session(TimedDevice(), read, write).serve()
    with open(path, "w") as f:
        json.dump(stamps, f)


# ---------------------------------------------------------------------------------------------
# The client side
# ---------------------------------------------------------------------------------------------

class TimedClient:
    """A remote device whose connection records, per EXECUTE_SYNC call id: request written
    (start, end), reply read, reply in the caller's hands."""

    def __init__(self, command: str):
        self.device = client.start_process(command)
        self.connection = c = self.device.live()
        self.calls: dict[int, list[int]] = {}
        self.current: list[int] = []
        send, read, call = c.transport.send, c.transport.read, c._call

        def timed_send(data: bytes) -> None:
            start = time.monotonic_ns()
            send(data)
            end = time.monotonic_ns()
            _, msg, call_id = wire.HEADER.unpack_from(data, len(data) - self.last_frame)
            if msg == Msg.EXECUTE_SYNC:
                self.calls.setdefault(call_id, {}).update(start=start, end=end)

        def timed_read(n: int) -> bytes:
            data = read(n)  # the replies, as they come: a reply frame starts the chunk
            if len(data) >= wire.HEADER.size:
                now = time.monotonic_ns()
                _, msg, call_id = wire.HEADER.unpack_from(data)
                if msg == Msg.EXECUTED:
                    self.calls.setdefault(call_id, {})["read"] = now
            return data

        def timed_call(msg, w, *args):
            self.last_frame = wire.HEADER.size + sum(len(p) for p in w.parts)
            reply = call(msg, w, *args)
            if msg == Msg.EXECUTE_SYNC:
                self.current = self.calls[max(self.calls)]
                self.current["hand"] = time.monotonic_ns()
            return reply

        c.transport.send, c.transport.read, c._call = timed_send, timed_read, timed_call
        hal_model = add_model((4,), input_dims=(4,)).hal_model
        self.prepared = self.device.prepare_model(hal_model, 1, 100, None, [], [], None)

    def run(self, repeat: int) -> list[tuple[int, ...]]:
        """Per call: (start, request written start, end, reply read, in hand, end)."""
        a = np.arange(4, dtype=np.float32)
        out = np.zeros(4, np.float32)
        pointer = hal.ArgumentLifetime.POINTER
        request = hal.Request([hal.RequestArgument(pointer, 0, 0, 16, a), hal.RequestArgument(pointer, 0, 0, 16, a)],
                              [hal.RequestArgument(pointer, 0, 0, 16, out)], [])
        rows = []
        pid = self.connection.transport.proc.pid
        server0, client0 = cpu_ns(pid), cpu_ns(os.getpid())
        for _ in range(repeat):
            start = time.monotonic_ns()
            self.prepared.execute_synchronously(request, False, None, 2_000_000_000)
            end = time.monotonic_ns()
            rows.append((start, *(self.current[k] for k in ("start", "end", "read", "hand")), end))
        client1, server1 = cpu_ns(os.getpid()), cpu_ns(pid)
        self.cpu = [(b - a) / repeat / d for a, b, d in zip(client0 + server0, client1 + server1, (1e3, 1, 1e3, 1))]
        assert np.array_equal(out, a + a), "wrong result"
        return rows

    def server_spans(self) -> list[tuple[int, int, int, int]]:
        """(serve start, serve end, driver start, driver end) of each traced EXECUTE_SYNC."""
        serve, driver, more = [], [], True
        while more:
            r = self.connection._call(Msg.TRACE_COLLECT, Writer(), "trace collect", (), None)
            _, _, _, spans, more = wire.read_spans(r)
            for name, _, layer, start, duration, _ in spans:
                if name == "serve EXECUTE_SYNC":
                    serve.append((start, start + duration))
                elif layer == "driver" and "execute" in name.lower():
                    driver.append((start, start + duration))
        serve.sort()
        driver.sort()
        return [s + d for s, d in zip(serve, driver)]

    def close(self) -> None:
        self.device.close()


def breakdown(rows, server_rows, traced: bool) -> dict[str, float]:
    """Median microseconds of each phase and of the whole call."""
    phases: dict[str, list[float]] = {name: [] for name in PHASES + ("total",)}
    for (t0, t1, t2, t7, t8, t9), s in zip(rows, server_rows):
        if traced:  # (serve start, serve end, driver start, driver end): no read time, reply write in wake-up
            woken, replied, driver0, driver1 = s
            sent = min(t2, woken)
            values = (t1 - t0, sent - t1, math.nan, woken - sent, driver1 - driver0, replied - driver1, t7 - replied,
                      t8 - t7, t9 - t8)
        else:
            woken, driver0, driver1, replied = s
            sent = min(t2, woken)  # a server woken on the client's core may run before the write returns
            values = (t1 - t0, sent - t1, woken - sent, driver0 - woken, driver1 - driver0, replied - driver1,
                      t7 - replied, t8 - t7, t9 - t8)
        for name, value in zip(PHASES, values):
            phases[name].append(value / 1e3)
        phases["total"].append((t9 - t0) / 1e3)
    return {name: statistics.median(v) if v and not math.isnan(v[0]) else math.nan for name, v in phases.items()}


def with_cpu(times: dict[str, float], timed: TimedClient) -> dict[str, float]:
    return {**times, **dict(zip(COUNTS, timed.cpu))}


def python_server(repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="nnts-bench-") as folder:
        path = os.path.join(folder, "stamps.json")
        timed = TimedClient(f"{sys.executable} -m nnts.mlts.bench_remote_calls --timed-server {path}")
        timed.run(50)
        rows = timed.run(repeat)
        proc = timed.connection.transport.proc
        proc.stdin.close()  # the server writes its stamps at the end of its input
        proc.wait(30)
        timed.close()
        with open(path) as f:
            stamps = {int(k): v for k, v in json.load(f).items()}
    server_rows = [stamps[k] for k in sorted(stamps)][-repeat:]
    return with_cpu(breakdown(rows, server_rows, traced=False), timed)


def native_server(command: str, repeat: int) -> dict[str, float]:
    timed = TimedClient(command)
    timed.run(50)
    timed.connection._call(Msg.TRACE_START, Writer(), "trace start", (), None)
    rows = timed.run(repeat)
    server_rows = timed.server_spans()
    timed.close()
    if len(server_rows) != repeat:
        raise SystemExit(f"{command}: {len(server_rows)} traced executions for {repeat} calls (no SDK trace spans?)")
    return with_cpu(breakdown(rows, server_rows, traced=True), timed)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000, help="executions per server")
    parser.add_argument("--native", action="append", default=[], metavar="COMMAND",
                        help="a native (SDK) server to measure as well, e.g. ./example_driver")
    parser.add_argument("--timed-server", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.timed_server:
        return timed_server(args.timed_server)
    columns = {"nnts serve reference": python_server(args.repeat)}
    for command in args.native:
        columns[os.path.basename(command.split()[0])] = native_server(command, args.repeat)
    floors = {"cat": pipe_round_trip(["cat"], args.repeat),
              "python echo": pipe_round_trip([sys.executable, "-c", ECHO], args.repeat)}
    width = max(len(c) for c in columns) + 2
    print(f"{'microseconds (median)':22s}" + "".join(f"{c:>{width}s}" for c in columns))
    for name in PHASES + ("total", *COUNTS):
        print(f"{name:22s}" + "".join(f"{'-' if math.isnan(v) else f'{v:.1f}':>{width}s}"
                                      for v in (col[name] for col in columns.values())))
    for name, value in floors.items():
        print(f"pipe round trip, {name:12s} {value:.1f}")


if __name__ == "__main__":
    main()
