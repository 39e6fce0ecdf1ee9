"""The remote-driver server: serves any :class:`nnapi_ref.hal.Device` over the protocol of
``docs/remote-protocol.md`` (``nnts serve DRIVER``, on stdin/stdout or a Unix socket).

Messages are read and decoded in order, by one thread at a time: the thread that reads a request
runs the driver call itself and then reads on, so a call costs no hand-over between threads. A
call still running after ``Session.PASS_READING_AFTER_S`` passes the reading on to another thread
(leader/follower, the hand-over made by a watchdog thread, off the path of short calls), so that
concurrent executions from several client threads reach the driver concurrently, as they would
through a HAL service. A malformed message gets an ERROR
reply (INVALID_ARGUMENT) naming what is wrong; a frame longer than the protocol allows ends the
connection.
"""
from __future__ import annotations

import itertools
import mmap
import os
import socket
import stat
import struct
import sys
import tempfile
import threading
import time

import numpy as np

from nnapi_ref import hal, trace
from nnapi_ref.hal import ErrorStatus, HalError
from nnapi_ref.remote import close_between_writes, wire
from nnapi_ref.remote.wire import Msg, ProtocolError, Reader, Writer


def _deadline(relative_ns: int | None) -> int | None:
    return None if relative_ns is None else time.monotonic_ns() + relative_ns


def _fence(state: int) -> hal.SyncFence | None:
    if state == -1:
        return None
    if state == -2:
        return hal.SyncFence()  # never signalled
    try:
        return hal.SyncFence.signalled(ErrorStatus(state))
    except ValueError:
        raise ProtocolError(f"unknown fence state {state}") from None


class Session:
    """One client's state: its regions and the objects the driver returned to it."""

    MODELS_KEPT = 8
    PASS_READING_AFTER_S = 0.005  # a call running this long lets another thread read the next request

    def __init__(self, device: hal.Device, read, write, workers: int = 16):
        self.device = device
        self._read = read       # read(n) -> bytes, fewer only at end of stream
        self._write_raw = write
        self._write_lock = threading.Lock()
        self._regions: dict[int, np.ndarray | str] = {}
        self._objects: dict[int, object] = {}
        self._handles = itertools.count(1)
        self._models: dict[bytes, hal.Model] = {}  # the last models received, oldest first
        self._models_lock = threading.Lock()
        self._workers = workers
        self._reading = threading.Lock()  # held by the one thread reading the stream, through its call
        self._closed = False
        self._watch = threading.Condition()  # guards _running, _watch_asleep and _started
        self._running: list | None = None    # [start, passed on] of the call of the reading thread
        self._watch_asleep = False
        self._started = 0  # calls started so far (under _watch)
        self._trace_lock = threading.Lock()
        self._unsent_spans: list[tuple] = []  # taken from the trace, not yet sent (a reply holds a bounded batch)
        self._threads: dict[int, str] = {}
        self.version = wire.VERSION  # the protocol version settled at HELLO: the client's

    # -- transport ---------------------------------------------------------------------------
    def _send(self, w: Writer, msg: Msg, call_id: int) -> None:
        frame = w.finish(msg, call_id)
        with self._write_lock:
            try:
                self._write_raw(frame)
            except OSError:
                pass  # the client is gone (killed mid-call, say): its reply goes nowhere

    def when_no_reply_is_written(self, close) -> None:
        """Run ``close`` (the connection's) once no reply is being written: a call still running
        then writes its reply into a closed socket, never into the next client's connection."""
        close_between_writes(self._write_lock, close)

    def _send_error(self, call_id: int, error: HalError) -> None:
        w = Writer()
        wire.write_error(w, error)
        self._send(w, Msg.ERROR, call_id)

    def serve(self) -> None:
        """Serve until the client goes away (threads still inside the driver are left to it)."""
        for _ in range(self._workers - 1):
            threading.Thread(target=self._serve_requests, daemon=True, name="nnts-serve").start()
        if self._workers > 1:
            threading.Thread(target=self._watch_calls, daemon=True, name="nnts-serve-watch").start()
        self._serve_requests()
        self._objects.clear()
        self._regions.clear()

    def _serve_requests(self) -> None:
        """Take turns reading: read and decode a request, run the call, read on, until the
        watchdog passed the reading to another thread during a call (then queue for it again)."""
        while True:
            self._reading.acquire()
            while True:
                if self._closed:
                    self._reading.release()
                    return
                try:
                    request = self._next_request()
                except (BrokenPipeError, ConnectionResetError):
                    request = None
                if request is None:
                    self._closed = True
                    self._reading.release()
                    with self._watch:
                        self._watch.notify()
                    return
                if request[0] is None:
                    continue
                running = [time.monotonic(), False]
                with self._watch:
                    self._running = running
                    self._started += 1
                    if self._watch_asleep:
                        self._watch.notify()
                try:
                    self._run(*request)
                finally:
                    with self._watch:
                        if self._running is running:
                            self._running = None
                if running[1]:
                    break

    def _watch_calls(self) -> None:
        """Pass the reading on from a call still running PASS_READING_AFTER_S after it started (by
        releasing the reading lock for it). The watchdog sleeps until the running call's own
        deadline; finding no call running then, it looks again one PASS_READING_AFTER_S later if
        calls came meanwhile (a call starting in that time is let be, and found at its look), else it
        sleeps until a call starts (the call that starts wakes it). So a stream of short calls wakes
        it once per PASS_READING_AFTER_S at most, and an idle connection never."""
        looked_at = -1  # self._started when the watchdog last found no call running
        with self._watch:
            while not self._closed:
                running = self._running
                if running is None:
                    if self._started != looked_at:
                        looked_at = self._started
                        self._watch.wait(self.PASS_READING_AFTER_S)
                        continue
                    self._watch_asleep = True
                    self._watch.wait()
                    self._watch_asleep = False
                    continue
                left = running[0] + self.PASS_READING_AFTER_S - time.monotonic()
                if left > 0:
                    self._watch.wait(left)
                    continue
                running[1] = True
                self._running = None
                self._reading.release()

    def _next_request(self):
        """(work, call id) for the next request (work None when nothing is to be run), or None at
        the end of the stream."""
        header = self._read(wire.HEADER.size)
        if len(header) < wire.HEADER.size:
            return None
        length, msg, call_id = wire.HEADER.unpack(header)
        if not 12 <= length <= 12 + wire.MAX_FRAME:
            print(f"nnts serve: frame length {length} out of range; closing the connection", file=sys.stderr)
            return None
        body = self._read(length - 12)
        if len(body) < length - 12:
            return None
        handler = self._HANDLERS.get(msg)
        try:
            if handler is None:
                raise ProtocolError(f"unknown message type {msg}")
            r = Reader(body)
            work = handler(self, r)
            r.end()
        except ProtocolError as e:
            if msg not in wire.NO_REPLY:
                self._send_error(call_id, HalError(ErrorStatus.INVALID_ARGUMENT, f"malformed message: {e}"))
            return None, call_id, msg
        return work, call_id, msg

    def _run(self, work, call_id: int, msg: int) -> None:
        t0 = trace.now() if trace.on else 0
        try:
            reply, w = work(call_id)
        except HalError as e:
            reply, w = Msg.ERROR, Writer()
            wire.write_error(w, e)
        except Exception as e:  # the driver's own failure: reported, never fatal to the server
            reply, w = Msg.ERROR, Writer()
            wire.write_error(w, HalError(ErrorStatus.GENERAL_FAILURE, f"driver raised {type(e).__name__}: {e}"))
        if t0 and msg in wire.IPC_PHASES:  # recorded before the reply: the client may collect right after it
            trace.end(t0, wire.IPC_PHASES[msg], "ipc", f"serve {Msg(msg).name}")
        if reply is not None:
            self._send(w, reply, call_id)

    # -- regions and objects -------------------------------------------------------------------
    def region_bytes(self, ref: tuple[int, int, int]) -> np.ndarray:
        region_id, offset, length = ref
        region = self._regions.get(region_id)
        if region is None:
            raise ProtocolError(f"unknown region {region_id}")
        if isinstance(region, str):
            raise ProtocolError(f"region {region_id} could not be mapped: {region}")
        if offset + length > region.nbytes:
            raise ProtocolError(f"[{offset}, {offset + length}) outside region {region_id} of {region.nbytes} bytes")
        return region[offset:offset + length]

    def _read_model(self, r: Reader) -> hal.Model:
        """The model of a request. A model sent again byte for byte (the runtime asks for the
        supported operations, then prepares) is the same object, as it is in process, so that a
        driver's per-model work (the reference's validation) is not done again. Models with
        constants in shared memory are always new: the bytes there may have changed."""
        with self._models_lock:
            for key, known in self._models.items():  # encodings are prefix-free: a match is the model
                if r.body[r.pos:r.pos + len(key)] == key:
                    r.pos += len(key)
                    return known
        start = r.pos
        in_regions = []

        def region_bytes(ref):
            in_regions.append(ref)
            return self.region_bytes(ref)
        model = wire.read_model(r, region_bytes)
        if in_regions:
            return model
        with self._models_lock:
            self._models[bytes(r.body[start:r.pos])] = model
            if len(self._models) > self.MODELS_KEPT:
                del self._models[next(iter(self._models))]
        return model

    def _object(self, handle: int, kind: type, what: str):
        obj = self._objects.get(handle)
        if not isinstance(obj, kind):
            raise ProtocolError(f"{what} handle {handle} is unknown")
        return obj

    def _new_handle(self, obj) -> int:
        handle = next(self._handles)
        self._objects[handle] = obj
        return handle

    # -- handlers: decode in order, return the work to run -------------------------------------
    def _region_add(self, r: Reader):
        region_id, size, path = r.u64(), r.u64(), r.str()
        try:
            fd = os.open(path, os.O_RDWR)
            try:
                mapped = mmap.mmap(fd, max(size, 1))
            finally:
                os.close(fd)
            self._regions[region_id] = np.frombuffer(mapped, np.uint8, count=size)
        except (OSError, ValueError, OverflowError) as e:
            self._regions[region_id] = f"{path}: {e}"

    def _region_remove(self, r: Reader):
        self._regions.pop(r.u64(), None)

    def _release(self, r: Reader):
        self._objects.pop(r.u64(), None)

    def _hello(self, r: Reader):
        magic, version = bytes(r.raw(4)), r.u32()
        if magic != wire.MAGIC:
            raise ProtocolError(f"HELLO with magic {magic!r}")
        if wire.OLDEST_VERSION <= version <= wire.VERSION:
            self.version = version

        def work(_):
            if not wire.OLDEST_VERSION <= version <= wire.VERSION:
                raise HalError(ErrorStatus.DEVICE_UNAVAILABLE,
                               f"protocol version {version} not supported (this server speaks {wire.OLDEST_VERSION} "
                               f"to {wire.VERSION}; version 2 added vendor extensions)")
            w = Writer()
            w.u32(version)
            wire.write_device_info(w, self.device)
            return Msg.DEVICE_INFO, w
        return work

    def _supported(self, r: Reader):
        model = self._read_model(r)

        def work(_):
            flags = self.device.get_supported_operations(model)
            w = Writer()
            w.u32(len(flags))
            w.parts.append(bytes(bool(f) for f in flags))
            return Msg.SUPPORTED, w
        return work

    def _cache_files(self, r: Reader) -> list[tuple[str, bool]]:
        return [(r.str(), r.bool()) for _ in range(r.count(5))]

    @staticmethod
    def _open_all(files: list[tuple[str, bool]]):
        opened = []
        try:
            for path, writable in files:
                opened.append(open(path, "r+b" if writable else "rb"))
        except OSError as e:
            for f in opened:
                f.close()
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"cannot open cache file: {e}") from None
        return opened

    def _prepared_reply(self, prepared):
        if not isinstance(prepared, hal.PreparedModel):
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"the driver returned a {type(prepared).__name__}")
        w = Writer()
        w.u64(self._new_handle(prepared))
        return Msg.PREPARED, w

    def _prepare(self, r: Reader):
        model = self._read_model(r)
        preference, priority, deadline = r.i32(), r.i32(), r.optional_i64()
        model_files, data_files = self._cache_files(r), self._cache_files(r)
        token = r.optional_bytes()
        hints = wire.read_hints(r) if self.version >= wire.HINTS_VERSION else hal.NO_HINTS

        def work(_):
            files = self._open_all(model_files + data_files)
            try:
                args = (model, preference, priority, _deadline(deadline), files[:len(model_files)],
                        files[len(model_files):], token)
                prepared = (self.device.prepare_model_with_config(*args, hints) if hints.hints else
                            self.device.prepare_model(*args))
            finally:
                for f in files:
                    f.close()
            return self._prepared_reply(prepared)
        return work

    def _prepare_from_cache(self, r: Reader):
        deadline = r.optional_i64()
        model_files, data_files = self._cache_files(r), self._cache_files(r)
        token = r.optional_bytes()

        def work(_):
            files = self._open_all(model_files + data_files)
            try:
                prepared = self.device.prepare_model_from_cache(_deadline(deadline), files[:len(model_files)],
                                                                files[len(model_files):], token)
            finally:
                for f in files:
                    f.close()
            return self._prepared_reply(prepared)
        return work

    def _execution_args(self, r: Reader):
        request = wire.read_request(r, self.region_bytes, self.version)
        return request, r.bool(), r.optional_i64(), r.u64()

    def _hints(self, r: Reader) -> hal.Hints:
        """An execution's hints (after its loop timeout), from the version that carries them."""
        return wire.read_hints(r) if self.version >= wire.HINTS_VERSION else hal.NO_HINTS

    @staticmethod
    def _executed(result: hal.ExecutionResult):
        w = Writer()
        wire.write_output_shapes(w, result.output_shapes)
        wire.write_timing(w, result.timing)
        return Msg.EXECUTED, w

    def _execute_sync(self, r: Reader):
        prepared = self._object(r.u64(), hal.PreparedModel, "prepared model")
        request, measure, deadline, loop_timeout = self._execution_args(r)
        hints = self._hints(r)
        if hints.hints:
            return lambda _: self._executed(prepared.execute_synchronously_with_config(
                request, measure, _deadline(deadline), loop_timeout, hints))
        return lambda _: self._executed(prepared.execute_synchronously(request, measure, _deadline(deadline),
                                                                        loop_timeout))

    def _execute_async(self, r: Reader):
        prepared = self._object(r.u64(), hal.PreparedModel, "prepared model")
        request, measure, deadline, loop_timeout = self._execution_args(r)
        hints = self._hints(r)

        def work(call_id):
            launched = threading.Event()
            launch_failed = []

            def on_finish(cb: hal.ExecutionCallback) -> None:
                launched.wait()
                if launch_failed:
                    return  # a driver notifying after refusing the launch: nothing to report to
                w = Writer()
                w.i32(int(cb.status))
                w.str(cb.message)
                wire.write_output_shapes(w, cb.output_shapes)
                wire.write_timing(w, cb.timing)
                self._send(w, Msg.EXECUTION_DONE, call_id)
            try:
                args = (request, measure, _deadline(deadline), loop_timeout, hal.ExecutionCallback(on_finish))
                if hints.hints:
                    prepared.execute_with_config(*args, hints)
                else:
                    prepared.execute(*args)
            except BaseException:
                launch_failed.append(True)
                raise
            finally:
                if not launch_failed:
                    self._send(Writer(), Msg.LAUNCHED, call_id)
                launched.set()
            return None, None
        return work

    def _execute_fenced(self, r: Reader):
        prepared = self._object(r.u64(), hal.PreparedModel, "prepared model")
        request, measure, deadline, loop_timeout = self._execution_args(r)
        hints = self._hints(r)
        fences = [_fence(r.i32()) for _ in range(r.count(4))]
        after_fence = r.optional_i64()

        def work(_):
            args = (request, fences, measure, _deadline(deadline), loop_timeout, after_fence)
            fence, callback = (prepared.execute_fenced_with_config(*args, hints) if hints.hints else
                               prepared.execute_fenced(*args))
            fence.wait()
            launched, fenced, status = callback.get_execution_info()
            w = Writer()
            w.i32(int(status))
            wire.write_timing(w, launched)
            wire.write_timing(w, fenced)
            return Msg.FENCED_DONE, w
        return work

    def _configure_burst(self, r: Reader):
        prepared = self._object(r.u64(), hal.PreparedModel, "prepared model")

        def work(_):
            w = Writer()
            w.u64(self._new_handle(prepared.configure_execution_burst()))
            return Msg.BURST, w
        return work

    def _burst_execute(self, r: Reader):
        burst = self._object(r.u64(), hal.IBurst, "burst")
        request, measure, deadline, loop_timeout = self._execution_args(r)
        hints = self._hints(r)
        tokens = [r.i64() for _ in range(r.count(8))]
        if hints.hints:
            return lambda _: self._executed(burst.execute_with_config(request, tokens, measure, _deadline(deadline),
                                                                      loop_timeout, hints))
        return lambda _: self._executed(burst.execute(request, tokens, measure, _deadline(deadline), loop_timeout))

    def _burst_release(self, r: Reader):
        burst = self._object(r.u64(), hal.IBurst, "burst")
        token = r.i64()

        def work(_):
            burst.release_memory_resource(token)
            return Msg.OK, Writer()
        return work

    def _allocate(self, r: Reader):
        dims = r.u32_list()
        # A handle this session does not know stands for a prepared model of another driver.
        prepared = [self._objects.get(h) if isinstance(self._objects.get(h), hal.PreparedModel)
                    else hal.PreparedModel() for h in (r.u64() for _ in range(r.count(8)))]
        roles = [[hal.BufferRole(r.u32(), r.u32(), r.f32()) for _ in range(r.count(12))] for _ in range(2)]

        def work(_):
            buffer, token = self.device.allocate(hal.BufferDesc(dims), prepared, roles[0], roles[1])
            w = Writer()
            w.u64(self._new_handle(buffer))
            w.u64(token)
            return Msg.BUFFER, w
        return work

    def _copy_to(self, r: Reader):
        buffer = self._object(r.u64(), hal.Buffer, "buffer")
        destination = hal.SharedMemory(self.region_bytes(wire.read_region_ref(r)))

        def work(_):
            buffer.copy_to(destination)
            return Msg.OK, Writer()
        return work

    def _copy_from(self, r: Reader):
        buffer = self._object(r.u64(), hal.Buffer, "buffer")
        source = hal.SharedMemory(self.region_bytes(wire.read_region_ref(r)))
        dims = r.u32_list()

        def work(_):
            buffer.copy_from(source, dims)
            return Msg.OK, Writer()
        return work

    def _trace_start(self, r: Reader):
        def work(_):
            trace.start()
            w = Writer()
            w.i64(time.monotonic_ns())
            return Msg.TRACE_CLOCK, w
        return work

    def _trace_collect(self, r: Reader):
        def work(_):
            with self._trace_lock:
                if not self._unsent_spans:
                    spans, threads = trace.take()
                    self._unsent_spans = [s[:6] for s in spans]
                    self._threads.update(threads)
                batch = self._unsent_spans[:wire.MAX_SPANS_PER_REPLY]
                del self._unsent_spans[:wire.MAX_SPANS_PER_REPLY]
                w = Writer()
                wire.write_spans(w, os.getpid(), f"nnts serve {self.device.get_name()}", self._threads, batch,
                                 bool(self._unsent_spans))
            return Msg.TRACE_SPANS, w
        return work

    _HANDLERS = {
        Msg.HELLO: _hello, Msg.GET_SUPPORTED_OPERATIONS: _supported, Msg.PREPARE_MODEL: _prepare,
        Msg.PREPARE_MODEL_FROM_CACHE: _prepare_from_cache, Msg.EXECUTE_SYNC: _execute_sync,
        Msg.EXECUTE_ASYNC: _execute_async, Msg.EXECUTE_FENCED: _execute_fenced,
        Msg.CONFIGURE_BURST: _configure_burst, Msg.BURST_EXECUTE: _burst_execute,
        Msg.BURST_RELEASE_MEMORY: _burst_release, Msg.ALLOCATE: _allocate, Msg.BUFFER_COPY_TO: _copy_to,
        Msg.BUFFER_COPY_FROM: _copy_from, Msg.REGION_ADD: _region_add, Msg.REGION_REMOVE: _region_remove,
        Msg.RELEASE: _release, Msg.TRACE_START: _trace_start, Msg.TRACE_COLLECT: _trace_collect,
    }


READ_AHEAD = 1 << 16  # bytes asked of the stream at once


def _fd_reader(fd: int):
    """read(n) over ``fd``, reading ahead: a frame's header and body, and the frames a client
    sent in one write (a call after its releases), cost one system call, not one each. Only the
    thread holding the session's reading calls it."""
    ahead = bytearray()

    def read(n: int) -> bytes:
        if not ahead and n >= READ_AHEAD:  # a large body: read as it is, without copying it again
            parts, got = [], 0
            while got < n:
                chunk = os.read(fd, n - got)
                if not chunk:
                    break
                parts.append(chunk)
                got += len(chunk)
            return b"".join(parts)
        while len(ahead) < n:
            chunk = os.read(fd, max(n - len(ahead), READ_AHEAD))
            if not chunk:
                break
            ahead.extend(chunk)
        data = bytes(ahead[:n])
        del ahead[:n]
        return data
    return read


def _fd_writer(fd: int):
    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    return write


def serve_stdio(device: hal.Device) -> None:
    """Serve one client on stdin/stdout. Anything the driver prints goes to stderr, so that it
    cannot corrupt the protocol stream."""
    protocol_in, protocol_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    Session(device, _fd_reader(protocol_in), _fd_writer(protocol_out)).serve()


SOCKET_PATH_MAX = 107  # bytes of sockaddr_un.sun_path (108 on Linux) less the terminating NUL


def check_socket_path(path: str) -> None:
    """A path ``serve_socket`` can listen on: its folder exists, it fits in a socket address, and
    nothing but a socket (an earlier server's) is there; a ValueError naming the problem."""
    if not path:
        raise ValueError("--socket: an empty path")
    if len(os.fsencode(path)) > SOCKET_PATH_MAX:
        raise ValueError(f"--socket {path}: {len(os.fsencode(path))} bytes, over the {SOCKET_PATH_MAX}-byte "
                         "limit of a Unix socket path (use a shorter or relative path)")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"--socket {path}: the folder {folder} does not exist")
    if os.path.lexists(path) and not stat.S_ISSOCK(os.lstat(path).st_mode):
        raise ValueError(f"--socket {path}: exists and is not a socket (refusing to replace it)")


def _remove_stale_socket(path: str) -> None:
    """Remove a socket an earlier server of this user left at ``path`` (nobody accepts on it); a
    ValueError for a live socket or another user's, which are never touched."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise ValueError(f"--socket {path}: exists and is not a socket (refusing to replace it)")
    if st.st_uid != os.geteuid():
        raise ValueError(f"--socket {path}: a socket of another user (uid {st.st_uid}) is there (refusing to "
                         "replace it)")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        pass  # nobody listens: left behind
    except OSError as e:
        raise ValueError(f"--socket {path}: cannot tell whether the socket there is in use ({e.strerror})") from None
    else:
        raise ValueError(f"--socket {path}: a server is listening there (refusing to replace it)")
    finally:
        probe.close()
    os.unlink(path)


def _peer_uid(conn: socket.socket) -> int:
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid


def serve_socket(device: hal.Device, path: str, allow_other_users: bool = False) -> None:
    """Serve clients on a Unix socket, each in its own session, until interrupted.

    The protocol makes the server open the files a client names, so the socket is its owner's:
    mode 0600, and a client of another user (by its credentials, SO_PEERCRED) is refused unless
    ``allow_other_users`` (mode 0666, every local user a client); root is always let in. Only a
    socket this user left with nobody listening is replaced; the socket is made in a private
    folder and linked into place (nothing there is replaced), and at exit removed only if
    ``path`` is still the one this server made."""
    check_socket_path(path)
    _remove_stale_socket(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mode = 0o666 if allow_other_users else 0o600
    # Bound in a private folder and linked into place once listening: a client that sees the
    # socket can connect, and the socket has its mode before anyone can reach it.
    private = tempfile.mkdtemp(prefix=".nnts-serve-", dir=os.path.dirname(os.path.abspath(path)))
    staging = os.path.join(private, "s")
    if len(os.fsencode(staging)) > SOCKET_PATH_MAX:
        staging = os.path.relpath(staging)
    try:
        if len(os.fsencode(staging)) > SOCKET_PATH_MAX:  # no room for the folder's name: bound in place
            os.rmdir(private)
            staging = path
            mask = os.umask(0o177)
            try:
                listener.bind(path)  # fails if anything appeared there since
            finally:
                os.umask(mask)
        else:
            listener.bind(staging)
        os.chmod(staging, mode)
        listener.listen(16)
        if staging != path:
            try:
                os.link(staging, path)
            except FileExistsError:
                raise ValueError(f"--socket {path}: something appeared there as the server started (refusing to "
                                 "replace it)") from None
        made = os.lstat(path)
    except BaseException:
        listener.close()
        raise
    finally:
        if staging != path:
            if os.path.lexists(staging):
                os.unlink(staging)
            os.rmdir(private)
    print(f"nnts serve: listening on {path}", file=sys.stderr, flush=True)
    me = os.geteuid()
    try:
        while True:
            conn, _ = listener.accept()
            uid = _peer_uid(conn)
            if not allow_other_users and uid not in (me, 0):
                print(f"nnts serve: refused a client of uid {uid} (not this server's user; "
                      "--allow-other-users serves every local user)", file=sys.stderr, flush=True)
                conn.close()
                continue
            threading.Thread(target=_serve_connection, args=(device, conn), daemon=True).start()
    finally:
        listener.close()
        try:
            now = os.lstat(path)
            if (now.st_dev, now.st_ino) == (made.st_dev, made.st_ino):
                os.unlink(path)
        except OSError:
            pass


def _serve_connection(device: hal.Device, conn: socket.socket) -> None:
    session = Session(device, _fd_reader(conn.fileno()), conn.sendall)
    try:
        session.serve()
    finally:
        session.when_no_reply_is_written(conn.close)
