"""The stress tests' machinery (:mod:`nnts.mlts.stress`): the driver under test in a process of its
own (a ``Target``), the client processes that load it, and a test's ``Run`` with its verdict in
MLTS's words."""
from __future__ import annotations

import dataclasses
import json
import os
import queue
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from nnapi_ref.errors import NnapiError
from nnapi_ref.remote import shm
from nnapi_ref.remote.client import Incident, IncidentLog, RemoteDevice, SocketTransport
from nnapi_ref.runtime import Compilation, Execution, Model, OperandType
from nnapi_ref.runtime.devices import Device
from nnapi_ref.tolerance import compare
from nnapi_ref.types import OperandCode, OperationCode, ResultCode
from nnts.generators.builders import chain, chain_model
from nnts.runners.drivers import load_driver
from nnts.runners.model_runner import compute_in_mode
from nnts.runners.settings import Settings

SUCCESS, FAILURE, HANG, CRASH = "SUCCESS", "FAILURE", "HANG", "CRASH"
VERDICT = {"passed": SUCCESS, "failed": FAILURE, "hung": HANG, "crashed": CRASH}  # MLTS's words for the statuses
DRIVER_EXIT_S = 5.0                # a stdio driver must exit this soon after its client is killed


class Failure(Exception):
    """The driver did something wrong (or could not be tested): the test's verdict is FAILURE."""


@dataclass
class Result:
    name: str
    status: str        # passed, failed, hung or crashed
    message: str
    seconds: float
    metrics: dict = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return VERDICT[self.status]


# ---------------------------------------------------------------------------------------------
# The driver under test
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """How the tests reach the driver: ``remote`` starts one process per client (or attaches to a
    server); ``serve`` is the in-process spec ``nnts serve SPEC --socket`` puts on a socket for the
    multi-client tests; ``socket`` is a server already running."""

    remote: str
    serve: str | None = None
    socket: str | None = None


def parse_target(spec: str) -> Target:
    """The driver string as the stress tests use it: an in-process driver is served by ``nnts
    serve`` in a process of its own, always."""
    spec = spec.strip()
    if "," in spec:
        raise NnapiError(ResultCode.BAD_DATA, f"nnts stress tests one driver at a time, not {spec!r}")
    if spec.startswith("socket:"):
        return Target(spec, socket=spec[len("socket:"):])
    if spec.startswith("remote:"):
        argv = shlex.split(spec[len("remote:"):])
        served = argv[2] if len(argv) == 3 and argv[:2] == ["nnts", "serve"] else None
        return Target(spec, serve=served)
    return Target(f"remote:nnts serve {shlex.quote(spec)}", serve=spec)


def driver_pid(device: RemoteDevice) -> int:
    """The pid of the process serving ``device`` (for a socket, the server's, from the kernel)."""
    transport = device.live().transport
    if isinstance(transport, SocketTransport):
        creds = transport.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", creds)[0]
    return transport.proc.pid


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie has ended: an orphan may wait for a reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


def rss_mib(pid: int) -> float:
    """The resident memory of process ``pid`` (VmRSS), in MiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    raise Failure(f"cannot read the memory of driver process {pid}: it is gone")


# ---------------------------------------------------------------------------------------------
# Models, executions and their checks
# ---------------------------------------------------------------------------------------------

def compile_for(device: Device, model: Model) -> Compilation:
    compilation = Compilation(model, [device])
    compilation.finish()
    return compilation


def execute(compilation: Compilation, inputs: list[np.ndarray], out_shape, mode: str = "sync") -> np.ndarray:
    """One execution of ``compilation`` on ``inputs``; returns its float32 output."""
    execution = Execution(compilation)
    for i, value in enumerate(inputs):
        execution.set_input(i, value)
    out = np.zeros(out_shape, np.float32)
    execution.set_output(0, out)
    compute_in_mode(execution, mode)
    return out


def check_close(what: str, expected: np.ndarray, actual: np.ndarray) -> None:
    """FAILURE unless ``actual`` is within NNAPI's float32 tolerance of ``expected``."""
    result = compare(expected, actual, OperandCode.TENSOR_FLOAT32, what=what)
    if not result.ok:
        raise Failure(result.message)


def run_chain(compilation: Compilation, rng: np.random.Generator, shape, mode: str = "sync") -> None:
    """Execute the chain on random inputs and check it against numpy."""
    a, b = (rng.uniform(-2, 2, shape).astype(np.float32) for _ in range(2))
    check_close(f"chain {list(shape)} ({mode})", chain(a, b), execute(compilation, [a, b], shape, mode))


def affine_model(n: int, constants: tuple | None = None) -> Model:
    """out = x * w + c on float32 [n] (MUL then ADD); ``w`` and ``c`` are constants given as
    arrays, or as (memory, offset) pairs."""
    model = Model()
    t = OperandType(OperandCode.TENSOR_FLOAT32, [n])
    x, w, c, p, out = (model.add_operand(t) for _ in range(5))
    fuse = model.add_operand(OperandType(OperandCode.INT32))
    model.set_operand_value(fuse, np.int32(0))
    for operand, value in zip((w, c), constants):
        if isinstance(value, np.ndarray):
            model.set_operand_value(operand, value)
        else:
            memory, offset = value
            model.set_operand_value_from_memory(operand, memory, offset, n * 4)
    model.add_operation(OperationCode.MUL, [x, w, fuse], [p])
    model.add_operation(OperationCode.ADD, [p, c, fuse], [out])
    model.identify_inputs_and_outputs([x], [out])
    model.finish()
    return model


def long_model(operations: int, shape=(4, 4)) -> Model:
    """x ADD y MUL y ADD y ... (``operations`` of them): a model that takes a while to prepare."""
    model = Model()
    t = OperandType(OperandCode.TENSOR_FLOAT32, shape)
    x, y = model.add_operand(t), model.add_operand(t)
    fuse = model.add_operand(OperandType(OperandCode.INT32))
    model.set_operand_value(fuse, np.int32(0))
    current = x
    for i in range(operations):
        out = model.add_operand(t)
        model.add_operation(OperationCode.MUL if i % 2 else OperationCode.ADD, [current, y, fuse], [out])
        current = out
    model.identify_inputs_and_outputs([x, y], [current])
    model.finish()
    return model


def parallel(count: int, work: Callable[[int], None]) -> None:
    """``work(i)`` for i in range(count) on as many threads; the first error is raised."""
    with ThreadPoolExecutor(count) as pool:
        for future in [pool.submit(work, i) for i in range(count)]:
            future.result()


# ---------------------------------------------------------------------------------------------
# One test's resources
# ---------------------------------------------------------------------------------------------

class Client:
    """A client process (``python -m nnts.mlts.stress client``) and the events it printed."""

    def __init__(self, run: "Run", role: str, driver: str, seed: int):
        self.run = run
        self.stderr = open(os.path.join(run.folder(), f"client-{role}-{seed}.stderr"), "w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "nnts.mlts.stress", "client", role, driver, str(seed)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=run.env(),
                                     text=True)
        self.events: queue.Queue = queue.Queue()
        self.oks = 0
        self.driver_pid: int | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.events.put(json.loads(line))
        self.events.put(None)

    def _take(self, event: dict | None) -> dict:
        if event is None:
            code = self.proc.wait()
            self.stderr.seek(0)
            tail = " | ".join(self.stderr.read().strip().splitlines()[-5:])
            raise Failure(f"client process {self.proc.pid} exited with {code} without a reason: {tail}")
        if event["event"] == "error":
            for kind, message in event["incidents"]:
                self.run.incident(kind, message)
            raise Failure(f"client process {self.proc.pid}: {event['message']}")
        self.oks += event["event"] == "ok"
        if event["event"] == "driver":
            self.driver_pid = event["pid"]
        return event

    def next(self) -> dict:
        """The next event; an error the client reported (or its exit) becomes the test's."""
        while True:
            try:
                event = self.events.get(timeout=self.run.wait_s)
            except queue.Empty:
                self.run.incident("hang", f"HANG: client process {self.proc.pid} made no progress within "
                                          f"{self.run.wait_s:g} s")
                raise Failure("a client made no progress") from None
            if self._take(event)["event"] != "driver":
                return event

    def check(self) -> list[dict]:
        """Take the events printed so far, without waiting, and return them: an error (or an exit)
        raises."""
        taken = []
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return taken
            taken.append(self._take(event))

    def send(self, command: dict) -> None:
        """A command to a client that reads them (the ``load`` role), one JSON line."""
        try:
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
        except OSError:
            self.next()  # the client has exited: its error (or its exit) is the test's

    def kill(self) -> list[dict]:
        """SIGKILL the client; returns the events it printed before it died."""
        self.proc.kill()
        self.proc.wait()
        events = []
        while (event := self.events.get(timeout=10)) is not None:
            events.append(self._take(event))
        return events


class Run:
    """What one test starts (driver processes, a socket server, client processes), stopped at its
    end; its metrics; the crashes and hangs seen outside this process, and those its driver
    connections recorded (``driver_incidents``)."""

    def __init__(self, target: Target, duration: float, call_timeout: float | None, settings: Settings = Settings(),
                 reproducers: str = ""):
        self.target = target
        self.reproducers = reproducers or self.folder()  # where a failing random graph is saved
        self.duration = duration
        self.call_timeout = call_timeout
        self.settings = dataclasses.replace(settings, call_timeout_s=call_timeout) if call_timeout else settings
        self.wait_s = (call_timeout or 60.0) + 30.0  # a client silent longer than its own budget: hung
        self.metrics: dict = {}
        self.incidents: list[Incident] = []
        self.driver_incidents = IncidentLog()
        self._devices: list[RemoteDevice] = []
        self._clients: list[Client] = []
        self._server: subprocess.Popen | None = None
        self._folder: str | None = None

    def folder(self) -> str:
        if self._folder is None:
            self._folder = tempfile.mkdtemp(prefix="nnts-stress-")
        return self._folder

    def env(self) -> dict:
        env = dict(os.environ)
        if self.call_timeout:
            env["NNTS_CALL_TIMEOUT"] = str(self.call_timeout)
        return env

    def incident(self, kind: str, message: str) -> None:
        self.incidents.append(Incident(kind, self.target.remote, message))

    def device(self, spec: str | None = None) -> RemoteDevice:
        """A new connection to the driver (a new driver process for ``remote:``)."""
        try:
            device = load_driver(spec or self.target.remote, settings=self.settings, incidents=self.driver_incidents)
        except NnapiError as e:
            raise Failure(f"the driver did not start: {e}") from None
        self._devices.append(device)
        return device

    @property
    def per_client_drivers(self) -> bool:
        """A driver that speaks only stdio (a native ``remote:COMMAND``) cannot be shared: each
        client process of the multi-client tests starts a driver process of its own."""
        return self.target.socket is None and self.target.serve is None

    def shared_driver(self) -> str:
        """The driver string the client processes of a multi-client test load: a socket server of
        the driver (started for this test), or the stdio driver itself, one process per client."""
        if self.per_client_drivers:
            return self.target.remote
        if self.target.socket:
            return f"socket:{self.target.socket}"
        path = os.path.join(self.folder(), "driver.sock")
        self._server_stderr = open(os.path.join(self.folder(), "server.stderr"), "w+")
        self._server = subprocess.Popen([sys.executable, "-m", "nnts", "serve", self.target.serve,
                                         "--socket", path], stdout=subprocess.DEVNULL, stderr=self._server_stderr,
                                        start_new_session=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(path):
            self.check_server()
            if time.monotonic() > deadline:
                raise Failure(f"the driver server did not listen on {path} within 60 s")
            time.sleep(0.02)
        return f"socket:{path}"

    def check_server(self, wait_s: float = 0.0) -> None:
        """CRASH when the socket server has died (or dies within ``wait_s``)."""
        if self._server is None:
            if self.target.socket:
                try:
                    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                        s.connect(self.target.socket)
                except OSError as e:
                    self.incident("crash", f"CRASH: the driver server at {self.target.socket} is gone ({e})")
                    raise Failure("the driver server is gone") from None
            return
        try:
            code = self._server.wait(wait_s)
        except subprocess.TimeoutExpired:
            return
        self._server_stderr.seek(0)
        tail = " | ".join(self._server_stderr.read().strip().splitlines()[-5:])
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        # First: the server's death says more than its clients' lost connections.
        self.incidents.insert(0, Incident("crash", self.target.remote, f"CRASH: the driver server "
                              f"({self.target.serve}) {how}" + (f"; last stderr: {tail}" if tail else "")))
        raise Failure("the driver server died")

    def client(self, role: str, driver: str, seed: int) -> Client:
        client = Client(self, role, driver, seed)
        self._clients.append(client)
        return client

    def kill(self, client: Client) -> list[dict]:
        """SIGKILL ``client``; with a driver process of its own, that driver must then exit (on
        the end of its input) within ``DRIVER_EXIT_S``: one that lives on is a FAILURE (and is
        killed), as every client a real runtime loses would leave one behind."""
        events = client.kill()
        pid = client.driver_pid
        if self.per_client_drivers and pid is not None:
            deadline = time.monotonic() + DRIVER_EXIT_S
            while process_alive(pid):
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    raise Failure(f"driver process {pid} still ran {DRIVER_EXIT_S:g} s after its client "
                                  f"(process {client.proc.pid}) was killed: a driver must exit when its "
                                  "connection ends")
                time.sleep(0.02)
        return events

    def check_new_client(self, driver: str, seed: int) -> None:
        """A client arriving after the others must be served correctly (compile and execute)."""
        self.check_server()
        device = self.device(driver)
        run_chain(compile_for(Device(device), chain_model()), np.random.default_rng(seed), (2, 2))
        device.close()

    def close(self) -> None:
        for client in self._clients:
            client.proc.kill()
            client.proc.wait()
            client.stderr.close()
            try:
                client.proc.stdin.close()  # its commands (the load role); nothing is left unwritten
            except OSError:
                pass
            if self.per_client_drivers and client.driver_pid and process_alive(client.driver_pid):
                os.kill(client.driver_pid, signal.SIGKILL)  # the test has ended: no orphan left behind
        if self._clients:
            shm.remove_stale_files(self.settings.shm_dir)  # the staging regions of the clients killed
        for device in self._devices:
            device.close()
        if self._server is not None:
            self._server.kill()
            self._server.wait()
            self._server_stderr.close()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
