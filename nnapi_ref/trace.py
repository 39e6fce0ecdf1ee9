"""Trace events of NNAPI's phases and layers, in the Chrome trace-event JSON format.

NNAPI's runtime emits a systrace section for every phase of a model's life in every layer
(AOSP's ``NNTRACE_*``: a name prefixed with a tag such as ``[NN_LR_PE]``, layer runtime, phase
execution). nnts does the same: the runtime, the remote-driver client (IPC), the remote server
process, the reference driver and its CPU executor record spans, written as "X" (complete)
events that Perfetto's UI and ``chrome://tracing`` load, one track per process and thread.

Switched on by :func:`start` (nnts's entry points call it for ``NNTS_TRACE=PATH``); the file is written
atomically at exit, by :func:`flush` and by :func:`stop`. Off, a span costs a module-level flag
check: hot paths write ``t0 = trace.now() if trace.on else 0`` and ``if t0: trace.end(...)``;
cold paths and applications use the context managers :func:`span` and :func:`section`.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import tempfile
import threading
import time

# AOSP's NNTRACE tags: phase and layer codes of a section name "[NN_<layer>_<phase>]name".
PHASES = {"initialization": "PI", "preparation": "PP", "compilation": "PC", "execution": "PE", "io": "PIO",
          "compute": "PCO", "results": "PR", "termination": "PT", "unspecified": "PU"}
LAYERS = {"application": "LA", "runtime": "LR", "ipc": "LI", "driver": "LD", "cpu": "LC", "other": "LO",
          "utility": "LU"}
PHASE_OF_CODE = {code: phase for phase, code in PHASES.items()}
LAYER_OF_CODE = {code: layer for layer, code in LAYERS.items()}

on = False                 # the one flag every guarded call site reads
now = time.monotonic_ns    # the clock of every span (CLOCK_MONOTONIC: one per machine)
_path: str | None = None
_lock = threading.Lock()
_events: list[tuple] = []  # (name, phase, layer, start ns, duration ns, tid, args)
_foreign: list[dict] = []  # finished trace events of other processes (remote servers)
_threads: dict[int, str] = {}
_processes: dict[int, str] = {}
_collectors: list = []     # callables fetching other processes' spans before a write
_atexit_registered = False
_origin = 0                # the trace's time zero (ns): timestamps are written relative to it
generation = 0             # incremented by reset(): a remote connection restarts its server's tracing


def tag(phase: str, layer: str) -> str:
    """AOSP's section-name prefix for ``phase`` and ``layer``, e.g. ``[NN_LR_PE]``."""
    return f"[NN_{LAYERS[layer]}_{PHASES[phase]}]"


def start(path: str | None = None) -> None:
    """Start recording; ``path`` is where :func:`flush` and the exit write the trace (None: keep
    the spans in memory for :func:`take`, as a remote server does)."""
    global on, _path, _atexit_registered, _origin
    if path is not None:
        problem = _unwritable(path)
        if problem:
            raise ValueError(f"trace path {path}: {problem}")
    with _lock:
        if not on:
            _origin = now()
        _path = path if path is not None else _path
        on = True
        if _path is not None and not _atexit_registered:
            atexit.register(_write_at_exit)
            _atexit_registered = True


def stop() -> str | None:
    """Stop recording and write the trace; return its path (None when kept in memory)."""
    global on
    path = flush()
    on = False
    return path


def path() -> str | None:
    return _path


def origin() -> int:
    """The trace's time zero (a :func:`now` reading): written timestamps are µs after it."""
    return _origin


def _unwritable(path: str) -> str | None:
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        return "is a directory"
    if not os.path.isdir(folder):
        return f"folder {folder} does not exist"
    if not os.access(folder, os.W_OK):
        return f"folder {folder} is not writable"
    return None


def end(t0: int, phase: str, layer: str, name: str, args: dict | None = None) -> None:
    """Record a span that began at ``t0`` (a :func:`now` reading) and ends now."""
    t1 = now()
    tid = threading.get_native_id()
    if tid not in _threads:
        _threads[tid] = threading.current_thread().name
    _events.append((name, phase, layer, t0, t1 - t0, tid, args))  # list.append is atomic


def record(t0: int, t1: int, phase: str, layer: str, name: str) -> None:
    """Record a span from ``t0`` to ``t1`` (:func:`now` readings taken by the caller)."""
    tid = threading.get_native_id()
    if tid not in _threads:
        _threads[tid] = threading.current_thread().name
    _events.append((name, phase, layer, t0, t1 - t0, tid, None))


class _Span:
    __slots__ = ("phase", "layer", "name", "args", "t0")

    def __init__(self, phase: str, layer: str, name: str, args: dict | None):
        self.phase, self.layer, self.name, self.args = phase, layer, name, args

    def __enter__(self):
        self.t0 = now()
        return self

    def __exit__(self, *exc):
        end(self.t0, self.phase, self.layer, self.name, self.args)
        return False


class _Off:
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_OFF = _Off()


def span(phase: str, layer: str, name: str, args: dict | None = None):
    """A context manager recording one span while tracing is on (nothing otherwise)."""
    return _Span(phase, layer, name, args) if on else _OFF


def section(name: str, layer: str = "application", phase: str = "execution"):
    """An application's own span, as ``Trace.beginSection("[NN_LA_PE]name")`` in NNAPI's guide:
    ``with trace.section("runInference"): ...``. A name already carrying an ``[NN_..]`` tag
    takes its phase and layer from the tag."""
    if name.startswith("[NN_") and "]" in name:
        parsed = parse_tag(name)
        if parsed is not None:
            phase, layer, name = parsed
    if phase not in PHASES or layer not in LAYERS:
        raise ValueError(f"unknown phase {phase!r} or layer {layer!r} (phases: {', '.join(PHASES)}; "
                         f"layers: {', '.join(LAYERS)})")
    return span(phase, layer, name)


def parse_tag(name: str) -> tuple[str, str, str] | None:
    """(phase, layer, rest of the name) of a name starting with an ``[NN_Lx_Px]`` tag, else None."""
    if not name.startswith("[NN_") or "]" not in name:
        return None
    inside, rest = name[4:].split("]", 1)
    layer_code, _, phase_code = inside.partition("_")
    if layer_code not in LAYER_OF_CODE or phase_code not in PHASE_OF_CODE:
        return None
    return PHASE_OF_CODE[phase_code], LAYER_OF_CODE[layer_code], rest


# -- other processes --------------------------------------------------------------------------

def add_collector(collect) -> None:
    """``collect()`` is called before each write to fetch another process's spans (a remote
    connection); it is dropped after it returns False (its process is gone)."""
    with _lock:
        _collectors.append(collect)


def take() -> tuple[list[tuple], dict[int, str]]:
    """Hand over the spans recorded so far and the names of their threads (a remote server's
    reply to the client's collect)."""
    with _lock:  # copy then delete what was copied: a span appended meanwhile stays for the next take
        events = _events[:]
        del _events[:len(events)]
        return events, dict(_threads)


def add_foreign(pid: int, process_name: str, spans, threads: dict[int, str], offset_ns: int) -> None:
    """Spans of process ``pid`` whose clock reads ``offset_ns`` less than ours."""
    with _lock:
        _processes[pid] = process_name
        for tid, name in threads.items():
            _foreign.append(_metadata("thread_name", pid, tid, name))
        for name, phase, layer, t0, duration, tid in spans:
            _foreign.append(_event(name, phase, layer, t0 + offset_ns, duration, pid, tid, None))


# -- writing ----------------------------------------------------------------------------------

def _event(name, phase, layer, t0, duration, pid, tid, args) -> dict:
    event = {"name": tag(phase, layer) + name if phase in PHASES and layer in LAYERS else name,
             "cat": f"{layer},{phase}", "ph": "X", "ts": (t0 - _origin) / 1000, "dur": duration / 1000,
             "pid": pid, "tid": tid}
    if args:
        event["args"] = args
    return event


def _metadata(kind: str, pid: int, tid: int, name: str) -> dict:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def events() -> list[dict]:
    """Everything recorded so far (this process's and collected ones) as trace events."""
    for collect in list(_collectors):
        try:
            alive = collect()
        except Exception:  # a collector of a dead process: its spans are lost, the trace is not
            alive = False
        if alive is False:
            with _lock:
                if collect in _collectors:
                    _collectors.remove(collect)
    pid = os.getpid()
    with _lock:
        out = [_metadata("process_name", pid, 0, _process_name())]
        out += [_metadata("process_name", p, 0, name) for p, name in _processes.items()]
        out += [_metadata("thread_name", pid, tid, name) for tid, name in _threads.items()]
        out += _foreign
        out += [_event(n, ph, la, t0, d, pid, tid, a) for n, ph, la, t0, d, tid, a in list(_events)]
    return out


def _process_name() -> str:
    return "nnts " + " ".join(os.path.basename(a) for a in sys.argv[:2]) if sys.argv and sys.argv[0] else "nnts"


def flush() -> str | None:
    """Write the trace to its path (atomically: a temporary file renamed over it); return it."""
    if _path is None:
        return None
    document = {"traceEvents": events(), "displayTimeUnit": "ms",
                "otherData": {"producer": "nnts", "clock": "CLOCK_MONOTONIC", "origin_ns": _origin}}
    folder = os.path.dirname(os.path.abspath(_path))
    fd, tmp = tempfile.mkstemp(prefix=".trace-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(document, f, separators=(",", ":"))
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # a trace is an output like any other, not a private file
        os.replace(tmp, _path)
    except BaseException:
        os.unlink(tmp)
        raise
    return _path


def reset() -> None:
    """Drop everything recorded (tests; a new trace in the same process)."""
    global on, _path, generation
    with _lock:
        on, _path = False, None
        generation += 1
        _events.clear()
        _foreign.clear()
        _threads.clear()
        _processes.clear()
        _collectors.clear()


def _write_at_exit() -> None:
    if on and _path is not None:
        try:
            flush()
        except OSError as e:
            print(f"nnts: cannot write the trace {_path}: {e}", file=sys.stderr)

