"""The remote-driver client: an :class:`nnapi_ref.hal.Device` whose driver runs in another process.

The driver is untrusted. Whatever its process does (exits, is killed by a signal, writes a
malformed, oversized or unexpected reply, or does not answer a call within its time budget) the
call ends in a :class:`HalError` with DEAD_OBJECT whose message says what happened (the exit code
or signal and the driver's last stderr lines, or the call that hung), the process is killed, and
an :class:`Incident` is recorded in the device's :class:`IncidentLog` for the test reports. The next device-level call (supported
operations, prepare, allocate) starts a fresh process; objects of the dead one keep failing with
DEAD_OBJECT.

Time budgets and the shared-memory folder are a :class:`RemoteSettings`, given to
:func:`start_process` or :func:`attach_socket` (nnts's entry points make it from
``NNTS_CALL_TIMEOUT``, ``NNTS_PREPARE_TIMEOUT`` and ``NNTS_SHM_DIR``), as is the log the device
records its incidents in (a runner gives every device it loads one log, and reads it per test).
"""
from __future__ import annotations

import collections
import itertools
import os
import queue
import select
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from nnapi_ref import hal, trace, vlog
from nnapi_ref.hal import ErrorStatus, HalError
from nnapi_ref.remote import close_between_writes, shm, wire
from nnapi_ref.remote.wire import EncodeError, Msg, ProtocolError, Reader, Writer

DEFAULT_CALL_TIMEOUT_S = 60.0
DEFAULT_PREPARE_TIMEOUT_S = 120.0
STDERR_LINES = 40
STDERR_LINE_CHARS = 400


@dataclass(frozen=True)
class RemoteSettings:
    """How a client treats its driver: seconds per call, seconds to start and prepare (under
    pytest-timeout's 300), and the folder of its shared-memory regions."""
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    prepare_timeout_s: float = DEFAULT_PREPARE_TIMEOUT_S
    shm_dir: str = shm.DEFAULT_DIR


def _clip(line: bytes) -> str:
    text = line.decode("utf-8", "replace").rstrip()
    return text if len(text) <= STDERR_LINE_CHARS else f"...{text[-STDERR_LINE_CHARS:]}"

# The replies each request may get (besides ERROR).
_REPLIES = {
    Msg.HELLO: Msg.DEVICE_INFO, Msg.GET_SUPPORTED_OPERATIONS: Msg.SUPPORTED, Msg.PREPARE_MODEL: Msg.PREPARED,
    Msg.PREPARE_MODEL_FROM_CACHE: Msg.PREPARED, Msg.EXECUTE_SYNC: Msg.EXECUTED, Msg.EXECUTE_ASYNC: Msg.LAUNCHED,
    Msg.EXECUTE_FENCED: Msg.FENCED_DONE, Msg.CONFIGURE_BURST: Msg.BURST, Msg.BURST_EXECUTE: Msg.EXECUTED,
    Msg.BURST_RELEASE_MEMORY: Msg.OK, Msg.ALLOCATE: Msg.BUFFER, Msg.BUFFER_COPY_TO: Msg.OK,
    Msg.BUFFER_COPY_FROM: Msg.OK, Msg.TRACE_START: Msg.TRACE_CLOCK, Msg.TRACE_COLLECT: Msg.TRACE_SPANS,
}
_SLOW = frozenset({Msg.HELLO, Msg.PREPARE_MODEL, Msg.PREPARE_MODEL_FROM_CACHE})


# ---------------------------------------------------------------------------------------------
# Incidents: what the test reports classify as CRASH or HANG
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Incident:
    kind: str      # "crash" (the process died or broke the protocol) or "hang"
    driver: str    # the driver string
    message: str


class IncidentLog:
    """The incidents of the devices given this log, oldest first. Whoever loads the devices owns
    it: a runner marks where a test begins and reads what the test's drivers did after."""

    def __init__(self):
        self._incidents: list[Incident] = []
        self._lock = threading.Lock()  # recorded by reader and timer threads

    def record(self, incident: Incident) -> None:
        with self._lock:
            self._incidents.append(incident)

    def mark(self) -> int:
        """Where the next incident will be: ``since(mark)`` returns it and the later ones."""
        with self._lock:
            return len(self._incidents)

    def since(self, mark: int = 0) -> list[Incident]:
        with self._lock:
            return self._incidents[mark:]


# ---------------------------------------------------------------------------------------------
# Transports
# ---------------------------------------------------------------------------------------------

def _command_argv(command: str) -> list[str]:
    """``nnts ...`` runs this very installation (``python -m nnts``), on PATH or not."""
    argv = shlex.split(command)
    if not argv:
        raise HalError(ErrorStatus.DEVICE_UNAVAILABLE, "remote: no command given")
    if argv[0] == "nnts":
        argv = [sys.executable, "-m", "nnts"] + argv[1:]
    return argv


class ProcessTransport:
    """A driver process started by the client, spoken to over its stdin and stdout."""

    def __init__(self, command: str):
        self.command = command
        try:
            self.proc = subprocess.Popen(_command_argv(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, bufsize=0, start_new_session=True)
        except OSError as e:
            raise HalError(ErrorStatus.DEVICE_UNAVAILABLE, f"cannot start {command!r}: {e}") from None
        self._stdin_lock = threading.Lock()
        # The drain thread reads a descriptor of its own: reading the Popen's by number, it could
        # outlive that descriptor (closed when the transport is collected) and read whatever pipe
        # took the number next, such as the next driver process's replies.
        self._stderr_fd = os.dup(self.proc.stderr.fileno())
        self._stderr = collections.deque(maxlen=STDERR_LINES)
        self._stderr_done = threading.Thread(target=self._drain_stderr, daemon=True, name="nnts-remote-stderr")
        self._stderr_done.start()

    def _drain_stderr(self) -> None:
        """Keep the last STDERR_LINES lines, each cut to STDERR_LINE_CHARS, read in large chunks
        (a driver writing one 20 MB line costs a few hundred reads, not twenty million)."""
        fd = self._stderr_fd
        partial = b""
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            *lines, partial = (partial + chunk).split(b"\n")
            for line in lines[-STDERR_LINES:]:
                self._stderr.append(_clip(line))
            partial = partial[-4 * STDERR_LINE_CHARS:]  # a line's tail is what says why
        os.close(fd)
        if partial:
            self._stderr.append(_clip(partial))

    def send(self, data: bytes) -> None:
        with self._stdin_lock:
            self.proc.stdin.write(data)

    def fileno(self) -> int:
        return self.proc.stdout.fileno()

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes of replies, as they come; b"" at the end of the stream."""
        return self.proc.stdout.read(n)

    def end_input(self) -> None:
        """No more requests: the driver sees the end of its input."""
        close_between_writes(self._stdin_lock, self.proc.stdin.close)

    def kill(self) -> None:
        """Kill the driver's process group and close the request pipe (once no write is in it).
        The reply pipe is left to the reader thread, which closes it when it stops (close_reader):
        closed here, its number could go to the next driver's pipe while the reader is between a
        check and its read, and the old reader would take the next driver's replies (a start hung
        for 120 s, under load)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        close_between_writes(self._stdin_lock, self.proc.stdin.close)

    def close_reader(self) -> None:
        """The reply pipe's read end, closed by the reader thread as it stops."""
        try:
            self.proc.stdout.close()
        except OSError:
            pass

    def death(self) -> str:
        """How the process ended, and what it said last on stderr."""
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        self._stderr_done.join(timeout=1)
        if code is None:
            how = "did not exit"
        elif code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name} ({-code})"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        lines = list(self._stderr)  # a traceback or a faulthandler dump: one line each, as written
        tail = lines[0] if len(lines) == 1 else "".join(f"\n    {line}" for line in lines)
        return f"process {self.proc.pid} ({self.command}) {how}" + (f"; last stderr: {tail}" if tail else "")


class SocketTransport:
    """A driver server that is already running, on a Unix socket."""

    def __init__(self, path: str):
        self.command = f"socket:{path}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(path)
        except OSError as e:
            self.sock.close()
            raise HalError(ErrorStatus.DEVICE_UNAVAILABLE, f"cannot connect to {path}: {e}") from None
        self._send_lock = threading.Lock()

    def send(self, data: bytes) -> None:
        with self._send_lock:
            self.sock.sendall(data)

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes of replies, as they come; b"" at the end of the stream."""
        return self.sock.recv(n)

    def end_input(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def kill(self) -> None:
        """Shut the connection down: the reader sees its end, a write fails. The socket is closed
        by the reader thread as it stops (close_reader), as ProcessTransport's reply pipe is."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close_reader(self) -> None:
        close_between_writes(self._send_lock, self.sock.close)

    def death(self) -> str:
        return f"the connection to {self.command} was closed"


# ---------------------------------------------------------------------------------------------
# The connection: calls, replies, death
# ---------------------------------------------------------------------------------------------

class _Waiter:
    """A call waiting for its reply. ``done`` is a bare lock, held until the reply (or the
    connection's death) releases it: cheaper than an Event, which builds a Condition per call."""
    __slots__ = ("request", "done", "reply", "error")

    def __init__(self, request: Msg):
        self.request = request
        self.done = threading.Lock()
        self.done.acquire()
        self.reply: tuple[int, bytes] | None = None
        self.error: HalError | None = None


class _Answers:
    """The last ``kept`` answers by key, oldest dropped first; safe to share between threads."""

    def __init__(self, kept: int):
        self._kept = kept
        self._answers: dict = {}
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            return self._answers.get(key)

    def put(self, key, answer) -> None:
        with self._lock:
            self._answers[key] = answer
            if len(self._answers) > self._kept:
                del self._answers[next(iter(self._answers))]


@dataclass
class _Staging:
    """What one call uses: the regions it names, the shared arrays it borrowed (from the arena, or
    made for large constants), and (caller's array, shared array) pairs to copy back after it."""

    regions: list
    borrowed: list
    made: list
    copy_back: list


@dataclass
class _Pending:
    """A call of :meth:`RemoteDevice.check_models` sent, its reply to come: a prepare, or a
    query of a model of ``operations`` operations (``whole``: its encoding, or None)."""

    prepare: bool
    whole: bytes | None = None
    operations: int = 0


class _AsyncExecution:
    def __init__(self, callback: hal.ExecutionCallback, staging: _Staging, owner):
        self.callback, self.staging, self.owner = callback, staging, owner
        self.timer: threading.Timer


class Connection:
    """One driver process (or server connection) and the calls in flight to it.

    Replies are read by the calling thread itself while no other thread reads (a call costs no
    hand-over between threads); a call that finds another thread reading waits for that thread
    to deliver its reply. A thread done reading while calls or asynchronous executions are still
    in flight passes the reading to the connection's reader thread, which reads until nothing is
    in flight. While nothing is in flight, nothing reads: a device-level call first checks that
    the driver has not gone away meanwhile (:meth:`check_idle`)."""

    SUPPORTED_ANSWERS_KEPT = 16

    def __init__(self, transport, driver: str, settings: RemoteSettings, incidents: IncidentLog):
        self.transport = transport
        self.driver = driver
        self.settings = settings
        self.incidents = incidents
        self.call_timeout_s = settings.call_timeout_s
        self.prepare_timeout_s = settings.prepare_timeout_s
        self.dead: str | None = None
        self._stopped = threading.Event()  # set once ``dead`` holds the final reason
        self.arena = shm.StagingArena(settings.shm_dir)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._pending: dict[int, _Waiter] = {}
        self._async: dict[int, _AsyncExecution] = {}
        self._reading = False  # a thread holds the reading of replies (under _lock)
        self._reader_closed = False
        self._reader_turn = False  # the reading was passed to the reader thread (under _lock)
        self._read_wanted = threading.Semaphore(0)  # the reader thread's turn to read
        self._received = bytearray()  # read, not yet taken as frames (by the reading thread only)
        self._poll = select.poll()
        self._poll.register(transport.fileno(), select.POLLIN)
        self._sent_regions: set[int] = set()
        self.supported_answers = _Answers(self.SUPPORTED_ANSWERS_KEPT)  # model encoding -> the driver's flags
        self._removed_regions: list[int] = []
        self._released: list[int] = []
        # Completions of asynchronous executions run the caller's callback on a thread of their own:
        # a callback that calls the driver again must not wait on the thread that reads its reply.
        self._completions: queue.SimpleQueue = queue.SimpleQueue()
        self._trace_offset_ns: int | None = None  # server clock + this = ours, once tracing is started
        self._trace_state = "hello"  # then "off", "starting", "on" or "unsupported"
        self.version = wire.OLDEST_VERSION  # settled at HELLO
        self._trace_generation = -1  # the trace.generation it was started for
        self._reader = threading.Thread(target=self._read_replies, daemon=True, name="nnts-remote-reader")
        self._reader.start()
        threading.Thread(target=self._complete, daemon=True, name="nnts-remote-callbacks").start()
        r = self._hello()
        self.info = self.decode(wire.read_device_info, r)
        self.decode(Reader.end, r)
        self._trace_state = "off"

    def _hello(self) -> Reader:
        """HELLO with the newest version; a server that refuses it (DEVICE_UNAVAILABLE: an older
        server) is asked again with each older version. ``self.version`` is the one settled on."""
        for version in range(wire.VERSION, wire.OLDEST_VERSION - 1, -1):
            w = Writer()
            w.parts.append(wire.MAGIC)
            w.u32(version)
            try:
                r = self.call(Msg.HELLO, w, "start")
            except HalError as e:
                if e.status != ErrorStatus.DEVICE_UNAVAILABLE or version == wire.OLDEST_VERSION:
                    raise
                continue
            replied = r.u32()
            if replied != version:
                self.fail("crash", f"the server speaks protocol version {replied}, the client "
                                   f"{wire.OLDEST_VERSION} to {wire.VERSION} (asked for {version})")
                raise HalError(ErrorStatus.DEAD_OBJECT, self.dead)
            self.version = version
            return r

    # -- sending -------------------------------------------------------------------------------
    def _region_frames(self, regions) -> list[bytes]:
        frames = []
        for region in regions:
            if region.id not in self._sent_regions:
                self._sent_regions.add(region.id)
                weakref.finalize(region, self._removed_regions.append, region.id)
                w = Writer()
                w.u64(region.id)
                w.u64(region.size)
                w.str(region.path)
                frames.append(w.finish(Msg.REGION_ADD, 0))
        while self._removed_regions:
            region_id = self._removed_regions.pop()
            self._sent_regions.discard(region_id)
            w = Writer()
            w.u64(region_id)
            frames.append(w.finish(Msg.REGION_REMOVE, 0))
        while self._released:
            w = Writer()
            w.u64(self._released.pop())
            frames.append(w.finish(Msg.RELEASE, 0))
        return frames

    def _send(self, frame: bytes, regions) -> None:
        with self._send_lock:
            data = b"".join(self._region_frames(regions) + [frame])
            try:
                self.transport.send(data)
            except (OSError, ValueError):  # ValueError: the request pipe was closed by a kill
                pass  # the reader sees the end of the stream and says why

    def release(self, handle: int) -> None:
        """Drop a server object (sent with the next call: a finalizer must not block)."""
        self._released.append(handle)

    def dead_error(self) -> HalError:
        # Another thread may be in fail(), between marking the connection dead and recording
        # why (it waits for the process to exit): wait for the real reason, not the placeholder.
        self._stopped.wait(10)
        return HalError(ErrorStatus.DEAD_OBJECT, self.dead or "")

    def call(self, msg: Msg, w: Writer, what: str, regions=(),
             async_execution: _AsyncExecution | None = None) -> Reader:
        """Send one request and wait for its reply; return a Reader over the reply's body."""
        if trace.on:
            if self._trace_state == "off" or (self._trace_state == "on" and
                                              self._trace_generation != trace.generation):
                self._start_trace()
            if msg in wire.IPC_PHASES:
                t0 = trace.now()
                try:
                    return self._call(msg, w, what, regions, async_execution)
                finally:
                    trace.end(t0, wire.IPC_PHASES[msg], "ipc", msg.name)
        return self._call(msg, w, what, regions, async_execution)

    def _call(self, msg: Msg, w: Writer, what: str, regions, async_execution) -> Reader:
        call_id, waiter = self._register(msg, async_execution)
        self._send(w.finish(msg, call_id), regions)
        return self._answer(waiter, what)

    TOGETHER_BYTES = 1 << 15  # requests sent in one write at most: always within a pipe's buffer

    def calls_together(self, calls: Sequence[tuple[Msg, Writer, str, list]]) -> list[Reader | HalError]:
        """Several requests (message, body, what for a hang's message, regions), sent together and
        answered in their order: the reply to each, or the HalError it came to. One round trip for
        up to TOGETHER_BYTES of requests instead of one each; the server reads them as calls in
        flight together, which the protocol allows. Under tracing (spans are per call) they go one
        by one."""
        results: list[Reader | HalError] = []
        if trace.on:
            for msg, w, what, regions in calls:
                try:
                    results.append(self.call(msg, w, what, regions))
                except HalError as e:
                    results.append(e)
            return results
        batch, size = [], 0
        for call in calls:
            call_size = wire.HEADER.size + sum(len(p) for p in call[1].parts)
            if batch and size + call_size > self.TOGETHER_BYTES:
                results += self._batch(batch)
                batch, size = [], 0
            batch.append(call)
            size += call_size
        return results + self._batch(batch)

    def _batch(self, calls) -> list[Reader | HalError]:
        """Send ``calls`` in one write, then take their replies in order."""
        waiters, frames, regions = [], [], []
        for msg, w, what, call_regions in calls:
            try:
                call_id, waiter = self._register(msg)
            except HalError as e:
                waiters.append((e, what))
                continue
            waiters.append((waiter, what))
            frames.append(w.finish(msg, call_id))
            regions.extend(call_regions)
        if frames:
            self._send(b"".join(frames), regions)
        self._wait([(waiter, what) for waiter, what in waiters if not isinstance(waiter, HalError)])
        results: list[Reader | HalError] = []
        for waiter, _ in waiters:
            try:
                results.append(waiter if isinstance(waiter, HalError) else self._reply(waiter))
            except HalError as e:
                results.append(e)
        return results

    def _register(self, msg: Msg, async_execution: _AsyncExecution | None = None) -> tuple[int, _Waiter]:
        """A call id and the waiter for its reply, registered before the connection dies, or
        refused (DEAD_OBJECT): never stranded."""
        call_id = next(self._ids)
        waiter = _Waiter(msg)
        with self._lock:
            dead = bool(self.dead)
            if not dead:
                self._pending[call_id] = waiter
                if async_execution is not None:
                    self._async[call_id] = async_execution
        if dead:
            raise self.dead_error()
        return call_id, waiter

    def _answer(self, waiter: _Waiter, what: str) -> Reader:
        self._wait([(waiter, what)])
        return self._reply(waiter)

    def _wait(self, waiters: list[tuple[_Waiter, str]]) -> None:
        """Wait for the replies to sent calls, in order, each within its own time from when it is
        waited for, reading them (and delivering other threads' replies) unless another thread
        reads; a call not answered in time is a hang, which kills the driver and ends them all."""
        if not waiters:
            return
        if self._take_reading():
            try:
                for waiter, what in waiters:
                    timeout_s = self.prepare_timeout_s if waiter.request in _SLOW else self.call_timeout_s
                    answered = self._read_until(waiter, time.monotonic() + timeout_s)
                    if not answered:
                        self._hung(what, timeout_s)
                        break
            finally:
                self._leave_reading()
            return
        for waiter, what in waiters:
            timeout_s = self.prepare_timeout_s if waiter.request in _SLOW else self.call_timeout_s
            if not waiter.done.acquire(timeout=timeout_s):
                self._hung(what, timeout_s)
                break

    def _reply(self, waiter: _Waiter) -> Reader:
        """A Reader over an answered call's reply, or the HalError it came to."""
        if waiter.error is not None:
            raise waiter.error
        reply, body = waiter.reply
        r = Reader(body)
        if reply == Msg.ERROR:
            raise self.decode(wire.read_error, r)
        return r

    def _hung(self, what: str, timeout_s: float) -> None:
        self.fail("hang", f"HANG: {self.driver} did not return from {what} within {timeout_s:g} s; "
                          f"its process was killed")

    # -- the server's trace spans ----------------------------------------------------------------
    def _start_trace(self) -> None:
        """Ask the server to record its spans and align its clock with ours; a server without
        tracing answers ERROR and is left alone. A server clock read between our readings before
        and after the round trip is ours (CLOCK_MONOTONIC of the same machine): offset 0; else the
        midpoint of the fastest of a few round trips (NTP's estimate, off by at most half of it)."""
        self._trace_state = "starting"
        best = None
        for _ in range(3):
            before = time.monotonic_ns()
            try:
                r = self._call(Msg.TRACE_START, Writer(), "trace start", (), None)
                server_clock = self.decode(Reader.i64, r)
                self.decode(Reader.end, r)
            except HalError:
                self._trace_state = "unsupported"
                return
            after = time.monotonic_ns()
            if before <= server_clock <= after:
                best = (0, 0)
                break
            if best is None or after - before < best[0]:
                best = (after - before, (before + after) // 2 - server_clock)
        self._trace_offset_ns = best[1]
        self._trace_state, self._trace_generation = "on", trace.generation
        trace.add_collector(self.collect_trace)

    def collect_trace(self) -> bool:
        """Fetch the server's spans into this process's trace; False once the server is gone."""
        if self.dead:
            return False
        try:
            more = True
            while more:
                r = self._call(Msg.TRACE_COLLECT, Writer(), "trace collect", (), None)
                pid, name, threads, spans, more = self.decode(wire.read_spans, r)
                self.decode(Reader.end, r)
                trace.add_foreign(pid, name, spans, threads, self._trace_offset_ns)
                more = more and bool(spans)  # a server promising more and sending nothing is not asked again
        except HalError:
            return not self.dead
        return True

    def decode(self, read, r: Reader):
        """Decode a reply with ``read``; a malformed reply kills the connection."""
        try:
            return read(r)
        except ProtocolError as e:
            self.fail("crash", f"CRASH: {self.driver} sent a malformed reply ({e}); its process was killed")
            raise self.dead_error() from None

    # -- receiving -----------------------------------------------------------------------------
    def _take_reading(self) -> bool:
        """Become the thread that reads replies, if none is (and the connection lives)."""
        with self._lock:
            if self._reading or self.dead:
                return False
            self._reading = True
            return True

    def _leave_reading(self) -> None:
        """Stop reading: the reader thread carries on while anything is in flight; the reply
        stream of a dead connection is closed now, by the one thread that could be reading it
        (see ProcessTransport.kill)."""
        with self._lock:
            if not self.dead and (self._pending or self._async):
                self._reader_turn = True
                self._read_wanted.release()
                return
            self._reading = False
            close = self.dead is not None and not self._reader_closed
            self._reader_closed |= close
        if close:
            self.transport.close_reader()

    def _read_until(self, waiter: _Waiter | None, deadline: float | None) -> bool:
        """Read and deliver replies until ``waiter`` has its answer (None: until nothing is in
        flight) or the connection dies; False if ``deadline`` (time.monotonic) passed first."""
        try:
            while True:
                if waiter is None:
                    with self._lock:
                        if not (self._pending or self._async) or self.dead:
                            return True
                elif waiter.reply is not None or waiter.error is not None:
                    return True
                frame = self._read_frame(deadline)
                if frame is False:
                    return False
                if frame is None:
                    self.fail("crash", None)
                else:
                    self._deliver(*frame)
        except ProtocolError as e:
            self.fail("crash", f"CRASH: {self.driver} broke the protocol ({e}); its process was killed")
        except (OSError, ValueError):
            self.fail("crash", None)
        return True

    def _read_frame(self, deadline: float | None):
        """(type, call id, body) of the next reply; None at the end of the stream, False when
        ``deadline`` passed first."""
        buffer = self._received
        need = wire.HEADER.size
        while True:
            if len(buffer) >= need:
                length, msg, call_id = wire.HEADER.unpack_from(buffer)
                if not 12 <= length <= 12 + wire.MAX_REPLY:
                    raise ProtocolError(f"reply length {length} out of range")
                need = length + 4
                if len(buffer) >= need:
                    body = bytes(buffer[wire.HEADER.size:need])
                    del buffer[:need]
                    return msg, call_id, body
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._poll.poll(max(remaining * 1000, 1)):
                    return False
            chunk = self.transport.read(max(need - len(buffer), 1 << 16))
            if not chunk:
                return None
            buffer += chunk

    def _read_replies(self) -> None:
        """The reader thread: reads whenever a caller passes the reading on, until the end."""
        while True:
            self._read_wanted.acquire()
            with self._lock:
                turn, self._reader_turn = self._reader_turn, False
            if turn:
                try:
                    self._read_until(None, None)
                finally:
                    self._leave_reading()
            if self.dead:
                return

    def _stop_reading(self) -> None:
        """The connection is dead: close the reply stream unless a thread reads it (that thread
        closes it as it stops), and end the reader thread."""
        with self._lock:
            close = not self._reading and not self._reader_closed
            self._reader_closed |= close
        if close:
            self.transport.close_reader()
        self._read_wanted.release()

    def check_idle(self) -> None:
        """Between calls nothing reads the replies: a driver that exited (or wrote something
        nobody asked for) is found here, before the next call is sent to it."""
        if not self._take_reading():
            return
        try:
            with self._lock:  # no call registers between the look and the read: its reply is its own
                if self._pending or self._async or self._received or not self._poll.poll(0):
                    return
                unasked = self.transport.read(1 << 16)  # readable: does not block
            if unasked:
                self.fail("crash", f"CRASH: {self.driver} sent a reply to no call; its process was killed")
            else:
                self.fail("crash", None)
        except (OSError, ValueError):
            self.fail("crash", None)
        finally:
            self._leave_reading()

    def _deliver(self, msg: int, call_id: int, body: bytes) -> None:
        if msg == Msg.EXECUTION_DONE:
            with self._lock:
                execution = self._async.pop(call_id, None)
                if call_id in self._pending:
                    raise ProtocolError(f"EXECUTION_DONE for call {call_id} before it was launched")
            if execution is None:
                raise ProtocolError(f"EXECUTION_DONE for call {call_id}, which is no running execution")
            r = Reader(body)
            status = r.i32()
            if status not in ErrorStatus._value2member_map_:
                raise ProtocolError(f"unknown execution status {status}")
            message, shapes, timing = r.str(), wire.read_output_shapes(r), wire.read_timing(r)
            r.end()
            self._completions.put((execution, ErrorStatus(status), shapes, timing, message))
            return
        with self._lock:
            waiter = self._pending.get(call_id)
            if waiter is None:
                raise ProtocolError(f"reply {msg} to call {call_id}, which is not in flight")
            if msg != Msg.ERROR and msg != _REPLIES[waiter.request]:
                raise ProtocolError(f"reply {msg} to a {waiter.request.name} call")
            del self._pending[call_id]
            if msg == Msg.ERROR:
                self._async.pop(call_id, None)
        waiter.reply = (msg, body)
        waiter.done.release()

    def fail(self, kind: str, message: str | None) -> None:
        """The driver is gone: kill it, record why, fail every call in flight."""
        with self._lock:
            if self.dead:
                return
            self.dead = f"{self.driver}: the driver process is being stopped"
            pending, self._pending = self._pending, {}
            executions, self._async = self._async, {}
        self.transport.kill()
        self._stop_reading()
        death = self.transport.death()
        if message is None:
            message = f"CRASH: {self.driver}: the driver {death}"
            if pending or executions:
                calls = {w.request.name for w in pending.values()} | ({"EXECUTE_ASYNC"} if executions else set())
                message += f" (calls in flight: {', '.join(sorted(calls))})"
        else:
            message += f" ({death})"
        self.dead = message
        self._stopped.set()
        self.incidents.record(Incident(kind, self.driver, message))
        if vlog.on["manager"]:
            vlog.info("Manager", "%s: driver died: %s", self.driver, message)
        error = self.dead_error()
        for waiter in pending.values():
            waiter.error = error
            waiter.done.release()
        for call_id, execution in executions.items():
            if call_id not in pending:  # launched; a launch still in flight fails in its caller
                self._completions.put((execution, ErrorStatus.DEAD_OBJECT, [], hal.NO_TIMING, message))

        self._completions.put(None)  # the last: ends the callback thread

    def _complete(self) -> None:
        while (completion := self._completions.get()) is not None:
            _finish_async(*completion)

    def close(self) -> None:
        """Stop the driver process, as the client's own decision (not an incident)."""
        if self._trace_state == "on":
            self.collect_trace()
        with self._lock:
            if self.dead:
                return
            self.dead = "closed by the client"
        self._stopped.set()
        self.transport.kill()
        self._stop_reading()
        self._completions.put(None)

    # -- shared memory for one call ------------------------------------------------------------
    def stage(self) -> _Staging:
        return _Staging([], [], [], [])

    def region_ref(self, staging: _Staging, array: np.ndarray, copy_in: bool, copy_back: bool):
        """A region reference for ``array``'s bytes: the array itself when it lives in shared
        memory, else a staging region (filled from it, and copied back after the call)."""
        found = shm.find(array)
        if found is not None:
            region, offset = found
            staging.regions.append(region)
            return region.id, offset, array.nbytes
        _, region = borrowed = self.arena.take(array.nbytes)
        staging.regions.append(region)
        staging.borrowed.append(borrowed)
        if copy_in:
            shm.write(region, array)
        if copy_back and array.flags.writeable:
            staging.copy_back.append((array, region))
        return region.id, 0, array.nbytes

    def unstage(self, staging: _Staging) -> None:
        """After a call: check that the driver left every region it was given whole (a cut one is
        restored and fails the driver, as a crash), then copy the outputs back."""
        cut = [r for r in dict.fromkeys(staging.regions) if not shm.intact(r)]
        try:
            if not cut:
                for array, region in staging.copy_back:
                    shm.read_into(region, array)
        except shm.TruncatedRegion as e:
            cut.append(e.region)
        for borrowed in staging.borrowed:
            self.arena.give_back(borrowed)
        if cut:
            self.fail("crash", f"CRASH: {self.driver} cut shared memory it was given ({cut[0].path}, "
                               f"{cut[0].size} bytes); its process was killed")
            raise self.dead_error()


def _finish_async(execution: _AsyncExecution, status, shapes, timing, message) -> None:
    execution.timer.cancel()
    try:
        execution.owner.connection.unstage(execution.staging)
    except HalError as e:
        status, shapes, timing, message = e.status, [], hal.NO_TIMING, e.message
    execution.callback.notify(status, shapes, timing, message)


def _as_bytes(buffer) -> np.ndarray:
    if isinstance(buffer, np.ndarray):
        return buffer.reshape(-1).view(np.uint8)
    return np.frombuffer(buffer, np.uint8)


def _invalid(e: EncodeError) -> HalError:
    return HalError(ErrorStatus.INVALID_ARGUMENT, f"cannot be sent to the driver: {e}")


# ---------------------------------------------------------------------------------------------
# The HAL objects
# ---------------------------------------------------------------------------------------------

class RemoteDevice(hal.Device):
    """A driver in another process. ``connect()`` returns a new transport to it; the deaths and
    hangs of its processes go to ``incidents`` (a log of its own when none is given)."""

    def __init__(self, connect, driver: str, settings: RemoteSettings = RemoteSettings(),
                 incidents: IncidentLog | None = None):
        self._connect = connect
        self.driver = driver
        self.settings = settings
        self.incidents = IncidentLog() if incidents is None else incidents
        self._lock = threading.Lock()
        self._encoded: list[tuple] = []  # (model, its encoding, the regions and arrays it uses)
        self.connection: Connection | None = None
        self.restarts = -1
        self.info = self.live().info

    def new_transport(self):
        """A transport of its own to the driver (a new process for ``remote:``, a new connection
        for ``socket:``), beside the device's connection: to speak raw frames on it."""
        return self._connect()

    def live(self) -> Connection:
        """The connection to the driver, started anew if the last one died."""
        with self._lock:
            if self.connection is not None and not self.connection.dead:
                self.connection.check_idle()
            if self.connection is None or self.connection.dead:
                self._encoded = []  # a dead driver may have cut or written the regions of its models
                self.connection = Connection(self._connect(), self.driver, self.settings, self.incidents)
                self.restarts += 1
                if vlog.on["manager"]:
                    vlog.info("Manager", "%s: driver %s%s", self.driver, "started" if self.restarts == 0 else
                              "restarted", f" (restart {self.restarts})" if self.restarts else "")
            return self.connection

    def close(self) -> None:
        """Stop the driver process (the suite's end; a later call starts a new one)."""
        with self._lock, trace.span("termination", "ipc", "close driver"):
            if self.connection is not None:
                self.connection.close()

    # -- device information, from the HELLO reply ----------------------------------------------
    def get_name(self) -> str:
        return self.info["name"]

    def get_version_string(self) -> str:
        return self.info["version"]

    def get_type(self):
        return self.info["type"]

    def get_feature_level(self) -> int:
        return self.info["feature_level"]

    def get_capabilities(self) -> hal.Capabilities:
        return self.info["capabilities"]

    def get_supported_extensions(self) -> list[hal.Extension]:
        return self.info["extensions"]

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return self.info["cache_files"]

    # -- models --------------------------------------------------------------------------------
    MODELS_KEPT = 8

    def _write_model(self, w: Writer, model: hal.Model, staging: _Staging) -> bytes | None:
        """The model's encoding; returned too where it is the whole model (no constant in shared
        memory, whose bytes could change). The runtime hands one model object to the
        supported-operations query and to prepare: the last few encodings are kept by identity (a
        caller must not change a model it has handed over; the HAL's contract, which the reference
        relies on too)."""
        with self._lock:
            for known, encoded, regions, made in self._encoded:
                if known is model:
                    w.parts.append(encoded)
                    staging.regions.extend(regions)
                    staging.made.extend(made)  # alive while the call is, whatever becomes of the entry
                    return None if regions else encoded
        part = Writer()
        entry_staging = _Staging([], [], [], [])
        self._encode_model(part, model, entry_staging)
        encoded = b"".join(part.parts)
        with self._lock:
            self._encoded = [(model, encoded, entry_staging.regions, entry_staging.made)] + \
                self._encoded[:self.MODELS_KEPT - 1]
        w.parts.append(encoded)
        staging.regions.extend(entry_staging.regions)
        staging.made.extend(entry_staging.made)
        return None if entry_staging.regions else encoded

    def _encode_model(self, w: Writer, model: hal.Model, staging: _Staging) -> None:
        def place(raw: np.ndarray):
            found = shm.find(raw)
            if found is None:
                shared = shm.allocate(raw.nbytes, self.settings.shm_dir)
                found = shm.find(shared)
                shm.write(found[0], raw)
                staging.made.append(shared)
            region, offset = found
            staging.regions.append(region)
            return region.id, offset, raw.nbytes
        try:
            wire.write_model(w, model, place)
        except EncodeError as e:
            raise _invalid(e) from None
        except (AttributeError, TypeError, ValueError) as e:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"malformed model: {type(e).__name__}: {e}") from None

    def get_supported_operations(self, model: hal.Model) -> list[bool]:
        """The driver's answer, asked once per driver process and model: a model sent byte for byte
        as one already asked about (all its constants in the message) gets the answer the driver
        gave then, without a round trip. The runtime asks twice per compilation (for
        getSupportedOperationsForDevices and again when it partitions) and the suite builds the same
        model once per variant; NNAPI's runtime asks its driver each time, but a finished model's
        supported operations are a property of the driver instance and the model's bytes. Only
        answers of the right length are kept: an error, or flags not one per operation, is asked
        again each time, so the runtime sees such a driver as it would in process."""
        connection = self.live()
        request = self._supported_request(connection, model)
        if isinstance(request, list):
            return request
        w, staging, whole = request
        r = connection.call(Msg.GET_SUPPORTED_OPERATIONS, w, "get_supported_operations", staging.regions)
        return self._supported_answer(connection, r, whole, len(model.main.operations))

    def _supported_request(self, connection: Connection, model: hal.Model):
        """The answer kept for ``model``, or (body, staging, the model's whole encoding or None)."""
        staging = connection.stage()
        w = Writer()
        whole = self._write_model(w, model, staging)
        if whole is not None:
            known = connection.supported_answers.get(whole)
            if known is not None:
                return list(known)
        return w, staging, whole

    @staticmethod
    def _supported_answer(connection: Connection, r: Reader, whole: bytes | None, operations: int) -> list[bool]:
        def read(r: Reader) -> list[bool]:
            n = r.count(1)
            flags = bytes(r.raw(n))
            r.end()
            if any(b > 1 for b in flags):
                raise ProtocolError("supported-operation flag other than 0 or 1")
            return [bool(b) for b in flags]
        answer = connection.decode(read, r)
        if whole is not None and len(answer) == operations:
            connection.supported_answers.put(whole, tuple(answer))
        return answer

    def prepare_model_with_config(self, model, preference, priority, deadline_ns, model_cache, data_cache, token,
                                  hints):
        return self.prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token, hints)

    def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token,
                      hints=hal.NO_HINTS):
        connection = self.live()
        try:
            with _CacheFiles(model_cache, data_cache, connection.settings.shm_dir) as files:
                w, staging = self._prepare_request(connection, model, preference, priority, deadline_ns, files, token,
                                                   hints)
                r = connection.call(Msg.PREPARE_MODEL, w, "prepare_model", staging.regions)
        except EncodeError as e:
            raise _invalid(e) from None
        return RemotePreparedModel(self, connection, connection.decode(_read_handle, r))

    def _prepare_request(self, connection: Connection, model, preference, priority, deadline_ns, files: _CacheFiles,
                         token, hints) -> tuple[Writer, _Staging]:
        staging = connection.stage()
        w = Writer()
        self._write_model(w, model, staging)
        w.i32(preference)
        w.i32(priority)
        w.optional_i64(_relative(deadline_ns))
        files.write(w)
        w.optional_bytes(token)
        if connection.version >= wire.HINTS_VERSION:  # older servers: hints dropped, as a driver may
            wire.write_hints(w, hints)
        return w, staging

    TOGETHER_CALLS = 64  # calls sent together at most: their models' shared memory lives until the replies

    def check_models(self, calls: Iterable[tuple]) -> list:
        """Several queries and compilations of models, sent together (one round trip for up to
        TOGETHER_CALLS: :meth:`Connection.calls_together`) and answered in order, for tests that
        make many independent calls (VTS's invalid models). Each call is ``(model,)`` for
        get_supported_operations or ``(model, preference, priority)`` for prepare_model (no
        deadline, cache or hints); each result is the method's value or the HalError it raised.
        The driver is sent the same calls in the same order, as calls in flight together.
        ``calls`` is taken once, each model encoded as it comes (a generator's models need not
        all live)."""
        try:
            connection = self.live()
        except HalError as e:
            return [e for _ in calls]
        no_files = _CacheFiles((), (), connection.settings.shm_dir)
        results: list = []
        batch: list[tuple[int, tuple, _Staging]] = []  # (result's index, request, its staging), to be sent

        def send_batch() -> None:
            replies = connection.calls_together([request for _, request, _ in batch])
            for (i, _, _), reply in zip(batch, replies):
                results[i] = self._checked(connection, results[i], reply)
            batch.clear()
        for model, *settings in calls:
            try:
                if settings:
                    w, staging = self._prepare_request(connection, model, *settings, None, no_files, None,
                                                       hal.NO_HINTS)
                    request = (Msg.PREPARE_MODEL, w, "prepare_model", staging.regions)
                    pending = _Pending(True)
                else:
                    asked = self._supported_request(connection, model)
                    if isinstance(asked, list):
                        results.append(asked)
                        continue
                    w, staging, whole = asked
                    request = (Msg.GET_SUPPORTED_OPERATIONS, w, "get_supported_operations", staging.regions)
                    pending = _Pending(False, whole, len(model.main.operations))
            except EncodeError as e:
                results.append(_invalid(e))
                continue
            except HalError as e:
                results.append(e)
                continue
            batch.append((len(results), request, staging))
            results.append(pending)
            if len(batch) >= self.TOGETHER_CALLS:
                send_batch()
        if batch:
            send_batch()
        for result in results:
            if isinstance(result, HalError):  # without frames, which hold the requests of a batch
                result.__traceback__ = result.__context__ = result.__cause__ = None
        return results

    def _checked(self, connection: Connection, pending: _Pending, reply: Reader | HalError):
        """A call of :meth:`check_models` answered: its value, or the HalError it came to."""
        try:
            if isinstance(reply, HalError):
                return reply
            if pending.prepare:
                return RemotePreparedModel(self, connection, connection.decode(_read_handle, reply))
            return self._supported_answer(connection, reply, pending.whole, pending.operations)
        except HalError as e:
            return e

    def prepare_model_from_cache(self, deadline_ns, model_cache, data_cache, token):
        connection = self.live()
        w = Writer()
        try:
            w.optional_i64(_relative(deadline_ns))
            with _CacheFiles(model_cache, data_cache, connection.settings.shm_dir) as files:
                files.write(w)
                w.optional_bytes(token)
                r = connection.call(Msg.PREPARE_MODEL_FROM_CACHE, w, "prepare_model_from_cache")
        except EncodeError as e:
            raise _invalid(e) from None
        return RemotePreparedModel(self, connection, connection.decode(_read_handle, r))

    def allocate(self, desc, prepared_models, input_roles, output_roles):
        connection = self.live()
        w = Writer()
        try:
            w.u32_list(desc.dimensions)
            w.u32(len(prepared_models))
            for p in prepared_models:
                w.u64(p.handle if isinstance(p, RemotePreparedModel) and p.connection is connection else 0)
            for roles in (input_roles, output_roles):
                w.u32(len(roles))
                for role in roles:
                    w.u32(role.model_index)
                    w.u32(role.io_index)
                    w.f32(role.probability)
        except EncodeError as e:
            raise _invalid(e) from None
        r = connection.call(Msg.ALLOCATE, w, "allocate")
        handle, token = connection.decode(lambda r: (r.u64(), r.u64()), r)
        return RemoteBuffer(connection, handle), token


def _read_handle(r: Reader) -> int:
    handle = r.u64()
    r.end()
    return handle


def _relative(deadline_ns: int | None) -> int | None:
    return None if deadline_ns is None else deadline_ns - time.monotonic_ns()


class _CacheFiles:
    """Cache files as paths the driver process opens itself. A file object without a path on
    disk is staged through a temporary file, copied back after the call."""

    def __init__(self, model_cache: Sequence, data_cache: Sequence, folder: str):
        self.groups = [list(model_cache or ()), list(data_cache or ())]
        self.folder = folder
        self.staged: list[tuple[object, str]] = []

    def __enter__(self):
        return self

    def write(self, w: Writer) -> None:
        for group in self.groups:
            w.u32(len(group))
            for f in group:
                path = getattr(f, "name", None)
                writable = bool(getattr(f, "writable", lambda: False)())
                if not (isinstance(path, str) and os.path.isfile(path)):
                    path = self._stage(f)
                elif writable:
                    f.flush()
                w.str(os.path.abspath(path))
                w.u8(writable)

    def _stage(self, f) -> str:
        try:
            f.seek(0)
            data = f.read()
        except (AttributeError, OSError, ValueError) as e:
            raise EncodeError(f"a cache file that cannot be read ({e})") from None
        handle, path = tempfile.mkstemp(prefix="nnts-cache-", dir=self.folder)
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        self.staged.append((f, path))
        return path

    def __exit__(self, *exc):
        for f, path in self.staged:
            try:
                if getattr(f, "writable", lambda: False)():
                    with open(path, "rb") as staged:
                        f.seek(0)
                        f.truncate()
                        f.write(staged.read())
            except (OSError, ValueError):
                pass
            finally:
                os.unlink(path)


class RemotePreparedModel(hal.PreparedModel):
    def __init__(self, device: RemoteDevice, connection: Connection, handle: int):
        self.device = device
        self.connection = connection
        self.handle = handle
        weakref.finalize(self, connection.release, handle)

    def _request(self, w: Writer, request: hal.Request, staging: _Staging) -> None:
        c = self.connection
        try:
            for args, is_output in ((request.inputs, False), (request.outputs, True)):
                w.u32(len(args))
                for arg in args:
                    ref = None
                    if arg.lifetime == hal.ArgumentLifetime.POINTER and arg.pointer is not None:
                        ref = c.region_ref(staging, _as_bytes(arg.pointer), True, is_output)
                    wire.write_argument(w, arg, ref)
            w.u32(len(request.pools))
            for pool in request.pools:
                hardware_buffer = isinstance(pool, hal.SharedMemory) and pool.kind in (hal.HARDWARE_BUFFER,
                                                                                      hal.HARDWARE_BUFFER_BLOB)
                if hardware_buffer and c.version >= wire.HARDWARE_BUFFER_POOL_VERSION:
                    w.u8(wire.POOL_HARDWARE_BUFFER)
                    wire.write_region_ref(w, c.region_ref(staging, pool.buffer, True, True))
                    wire.write_hardware_buffer_description(w, pool.description)
                elif hardware_buffer and pool.kind == hal.HARDWARE_BUFFER:
                    c.unstage(staging)
                    raise HalError(ErrorStatus.GENERAL_FAILURE, f"protocol version {c.version} carries no hardware "
                                                                "buffer of an image format (the server is older)")
                elif isinstance(pool, hal.SharedMemory):
                    w.u8(wire.POOL_REGION)
                    wire.write_region_ref(w, c.region_ref(staging, pool.buffer, True, True))
                elif isinstance(pool, (int, np.integer)) and not isinstance(pool, bool) and pool >= 0:
                    w.u8(wire.POOL_DEVICE_BUFFER)
                    w.u64(int(pool))
                else:
                    raise EncodeError(f"request pool {pool!r} is neither shared memory nor a device memory token")
        except EncodeError as e:
            c.unstage(staging)
            raise _invalid(e) from None

    def _execution(self, w: Writer, request, measure, deadline_ns, loop_timeout_ns, staging,
                   hints=hal.NO_HINTS) -> None:
        w.u64(self.handle)
        self._request(w, request, staging)
        wire.write_execution_options(w, measure, _relative(deadline_ns), max(int(loop_timeout_ns), 0))
        if self.connection.version >= wire.HINTS_VERSION:
            wire.write_hints(w, hints)

    def _call(self, msg: Msg, w: Writer, what: str, staging: _Staging, read):
        c = self.connection
        try:
            return c.decode(read, c.call(msg, w, what, staging.regions))
        finally:
            t0 = trace.now() if trace.on else 0
            c.unstage(staging)
            if t0:
                trace.end(t0, "results", "ipc", "copy outputs back")

    def execute_synchronously_with_config(self, request, measure, deadline_ns, loop_timeout_ns, hints):
        return self.execute_synchronously(request, measure, deadline_ns, loop_timeout_ns, hints)

    def execute_with_config(self, request, measure, deadline_ns, loop_timeout_ns, callback, hints):
        self.execute(request, measure, deadline_ns, loop_timeout_ns, callback, hints)

    def execute_fenced_with_config(self, request, wait_for, measure, deadline_ns, loop_timeout_ns,
                                   timeout_after_fence_ns, hints):
        return self.execute_fenced(request, wait_for, measure, deadline_ns, loop_timeout_ns, timeout_after_fence_ns,
                                   hints)

    def execute_synchronously(self, request, measure, deadline_ns, loop_timeout_ns, hints=hal.NO_HINTS):
        t0 = trace.now() if trace.on else 0
        staging = self.connection.stage()
        w = Writer()
        self._execution(w, request, measure, deadline_ns, loop_timeout_ns, staging, hints)
        if t0:
            trace.end(t0, "io", "ipc", "stage request")
        return self._call(Msg.EXECUTE_SYNC, w, "execute_synchronously", staging, _read_executed)

    def execute(self, request, measure, deadline_ns, loop_timeout_ns, callback, hints=hal.NO_HINTS):
        c = self.connection
        staging = c.stage()
        w = Writer()
        self._execution(w, request, measure, deadline_ns, loop_timeout_ns, staging, hints)
        execution = _AsyncExecution(callback, staging, self)
        # The budget runs from the launch: the execution may finish before the launch call returns.
        execution.timer = threading.Timer(c.call_timeout_s, c.fail, (
            "hang", f"HANG: {c.driver} did not finish an asynchronous execution within {c.call_timeout_s:g} s; "
                    f"its process was killed"))
        execution.timer.daemon = True
        execution.timer.start()
        try:
            r = c.call(Msg.EXECUTE_ASYNC, w, "execute", staging.regions, async_execution=execution)
            c.decode(Reader.end, r)
        except HalError:
            execution.timer.cancel()
            c.unstage(staging)
            raise

    def execute_fenced(self, request, wait_for, measure, deadline_ns, loop_timeout_ns, timeout_after_fence_ns,
                       hints=hal.NO_HINTS):
        staging = self.connection.stage()
        w = Writer()
        self._execution(w, request, measure, deadline_ns, loop_timeout_ns, staging, hints)
        w.u32(len(wait_for))
        for fence in wait_for:
            if fence is None:
                w.i32(-1)
            else:
                remaining = None if deadline_ns is None else max(0.0, (deadline_ns - time.monotonic_ns()) / 1e9)
                w.i32(int(fence.status) if fence.wait(remaining) else -2)
        w.optional_i64(timeout_after_fence_ns)

        def read(r: Reader):
            status = r.i32()
            if status not in ErrorStatus._value2member_map_:
                raise ProtocolError(f"unknown fenced execution status {status}")
            launched, fenced = wire.read_timing(r), wire.read_timing(r)
            r.end()
            callback = hal.FencedExecutionCallback()
            callback.finish(ErrorStatus(status), launched, fenced)
            return hal.SyncFence.signalled(ErrorStatus(status)), callback
        return self._call(Msg.EXECUTE_FENCED, w, "execute_fenced", staging, read)

    def configure_execution_burst(self):
        w = Writer()
        w.u64(self.handle)
        r = self.connection.call(Msg.CONFIGURE_BURST, w, "configure_execution_burst")
        return RemoteBurst(self, self.connection.decode(_read_handle, r))


def _read_executed(r: Reader) -> hal.ExecutionResult:
    shapes, timing = wire.read_output_shapes(r), wire.read_timing(r)
    r.end()
    return hal.ExecutionResult(shapes, timing)


class RemoteBurst(hal.IBurst):
    def __init__(self, prepared: RemotePreparedModel, handle: int):
        self.prepared = prepared  # a burst keeps its prepared model alive, as in the HAL
        self.handle = handle
        weakref.finalize(self, prepared.connection.release, handle)

    def execute_with_config(self, request, memory_identifier_tokens, measure, deadline_ns, loop_timeout_ns, hints):
        return self.execute(request, memory_identifier_tokens, measure, deadline_ns, loop_timeout_ns, hints)

    def execute(self, request, memory_identifier_tokens, measure, deadline_ns, loop_timeout_ns, hints=hal.NO_HINTS):
        prepared = self.prepared
        staging = prepared.connection.stage()
        w = Writer()
        w.u64(self.handle)
        prepared._request(w, request, staging)
        wire.write_execution_options(w, measure, _relative(deadline_ns), max(int(loop_timeout_ns), 0))
        if prepared.connection.version >= wire.HINTS_VERSION:
            wire.write_hints(w, hints)
        w.u32(len(memory_identifier_tokens))
        for token in memory_identifier_tokens:
            w.i64(int(token))
        return prepared._call(Msg.BURST_EXECUTE, w, "burst execute", staging, _read_executed)

    def release_memory_resource(self, memory_identifier_token: int) -> None:
        w = Writer()
        w.u64(self.handle)
        w.i64(int(memory_identifier_token))
        c = self.prepared.connection
        c.decode(Reader.end, c.call(Msg.BURST_RELEASE_MEMORY, w, "release_memory_resource"))


class RemoteBuffer(hal.Buffer):
    def __init__(self, connection: Connection, handle: int):
        self.connection = connection
        self.handle = handle
        weakref.finalize(self, connection.release, handle)

    def _copy(self, msg: Msg, memory: hal.SharedMemory, what: str, dims=None) -> None:
        c = self.connection
        if not isinstance(memory, hal.SharedMemory):
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{what}: not a shared memory")
        staging = c.stage()
        w = Writer()
        w.u64(self.handle)
        wire.write_region_ref(w, c.region_ref(staging, memory.buffer, True, msg == Msg.BUFFER_COPY_TO))
        try:
            if dims is not None:
                w.u32_list(dims)
        except EncodeError as e:
            c.unstage(staging)
            raise _invalid(e) from None
        try:
            c.decode(Reader.end, c.call(msg, w, what, staging.regions))
        finally:
            c.unstage(staging)

    def copy_to(self, destination: hal.SharedMemory) -> None:
        self._copy(Msg.BUFFER_COPY_TO, destination, "copy_to")

    def copy_from(self, source: hal.SharedMemory, dimensions) -> None:
        self._copy(Msg.BUFFER_COPY_FROM, source, "copy_from", tuple(dimensions))


# ---------------------------------------------------------------------------------------------
# Driver strings
# ---------------------------------------------------------------------------------------------

def start_process(command: str, settings: RemoteSettings = RemoteSettings(),
                  incidents: IncidentLog | None = None) -> RemoteDevice:
    """``remote:COMMAND``: start COMMAND and speak to it on its stdin and stdout."""
    shm.remove_stale_files(settings.shm_dir)
    return RemoteDevice(lambda: ProcessTransport(command), f"remote:{command}", settings, incidents)


def attach_socket(path: str, settings: RemoteSettings = RemoteSettings(),
                  incidents: IncidentLog | None = None) -> RemoteDevice:
    """``socket:PATH``: attach to a server already listening on a Unix socket."""
    return RemoteDevice(lambda: SocketTransport(path), f"socket:{path}", settings, incidents)
