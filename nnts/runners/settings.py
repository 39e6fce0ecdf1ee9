"""What the environment configures, read once by an entry point and passed down as arguments.

Only entry points read the environment (the ``nnts`` command, the pytest plugin's
``pytest_configure``, and the processes nnts starts for itself: ``python -m nnts.fuzz.engine``, the
fuzzers' scripts, the stress clients); they call :meth:`Settings.from_environment` with
``os.environ``, so the library below them runs the same whatever its process inherited. README's
"Environment variables" lists every variable.
"""
from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, MutableMapping

from nnapi_ref import budget, trace, vlog
from nnapi_ref.remote import shm
from nnapi_ref.remote.client import DEFAULT_CALL_TIMEOUT_S, DEFAULT_PREPARE_TIMEOUT_S, RemoteSettings
from nnapi_ref.runtime.devices import Partitioning


def _default_cache_dir() -> Path:
    return Path(os.path.expanduser("~")) / ".cache" / "nnts"


@dataclass(frozen=True)
class Settings:
    """nnts's configuration; each field's default is what an unset variable means."""
    driver: str = "reference"                                    # NNTS_DRIVER
    call_timeout_s: float | None = None                          # NNTS_CALL_TIMEOUT (None: not given)
    prepare_timeout_s: float = DEFAULT_PREPARE_TIMEOUT_S         # NNTS_PREPARE_TIMEOUT
    shm_dir: str = shm.DEFAULT_DIR                               # NNTS_SHM_DIR
    partitioning: Partitioning = Partitioning.WITH_FALLBACK      # NNTS_PARTITION
    ort_threads: int = 1                                         # NNTS_ORT_THREADS
    cache_dir: Path | None = field(default_factory=_default_cache_dir)  # NNTS_CACHE_DIR (None: no cache)
    trace: str | None = None                                     # NNTS_TRACE, this process's file
    vlog: str = ""                                               # NNTS_VLOG
    memory_budget: int = budget.DEFAULT_BYTES                    # NNTS_MEMORY_BUDGET (2G, 512M, bytes)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Settings:
        """The settings ``environ`` gives (``os.environ`` at an entry point); ValueError for a
        number that does not parse."""
        cache = environ.get("NNTS_CACHE_DIR")
        if cache is None:
            base = environ.get("XDG_CACHE_HOME")
            cache_dir = Path(base) / "nnts" if base else _default_cache_dir()
        else:
            cache_dir = Path(cache) if cache else None
        return cls(driver=environ.get("NNTS_DRIVER", cls.driver),
                   call_timeout_s=_number(environ, "NNTS_CALL_TIMEOUT", float, None),
                   prepare_timeout_s=_number(environ, "NNTS_PREPARE_TIMEOUT", float, DEFAULT_PREPARE_TIMEOUT_S),
                   shm_dir=environ.get("NNTS_SHM_DIR") or shm.DEFAULT_DIR,
                   partitioning=Partitioning(_number(environ, "NNTS_PARTITION", int, Partitioning.WITH_FALLBACK)),
                   ort_threads=_number(environ, "NNTS_ORT_THREADS", int, cls.ort_threads),
                   cache_dir=cache_dir,
                   trace=_trace_path(environ),
                   vlog=environ.get("NNTS_VLOG", ""),
                   memory_budget=_memory_budget(environ))

    @property
    def remote(self) -> RemoteSettings:
        """What a remote driver's client takes of these."""
        return RemoteSettings(self.call_timeout_s or DEFAULT_CALL_TIMEOUT_S, self.prepare_timeout_s, self.shm_dir)

    def start(self, environ: MutableMapping[str, str]) -> None:
        """Switch on this process's verbose logs and trace (both process-wide, as NNAPI's
        properties are). The trace's owner is written to ``environ`` (``os.environ``), so that
        the processes this one starts write their own file beside it rather than over it. The
        memory budget is the process's too (:mod:`nnapi_ref.budget`)."""
        budget.set_limit(self.memory_budget)
        if self.vlog:
            try:
                vlog.configure(self.vlog)
            except ValueError as e:
                logging.getLogger("nnts").warning("NNTS_VLOG ignored: %s", e)
        if self.trace:
            environ.setdefault("NNTS_TRACE_OWNER", str(os.getpid()))
            try:
                trace.start(self.trace)
            except ValueError as e:
                print(f"nnts: NNTS_TRACE ignored: {e}", file=sys.stderr)


def entry_point(environ: MutableMapping[str, str]) -> Settings:
    """An entry point's settings: read from ``environ`` (``os.environ``) and switched on."""
    settings = Settings.from_environment(environ)
    settings.start(environ)
    return settings


def _number(environ: Mapping[str, str], name: str, kind, default):
    """The number ``environ[name]`` holds (``default`` when unset or empty); ValueError naming it."""
    value = environ.get(name)
    if not value:
        return default
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected {'a number' if kind is float else 'an integer'}") from None


def _memory_budget(environ: Mapping[str, str]) -> int:
    value = environ.get("NNTS_MEMORY_BUDGET")
    if not value:
        return budget.DEFAULT_BYTES
    try:
        return budget.parse(value)
    except ValueError as e:
        raise ValueError(f"NNTS_MEMORY_BUDGET: {e}") from None


def _trace_path(environ: Mapping[str, str]) -> str | None:
    """NNTS_TRACE for this process: a process started by the trace's owner (which inherits the
    variables) writes PATH.PID.json beside it instead of overwriting the owner's file."""
    path, owner = environ.get("NNTS_TRACE"), environ.get("NNTS_TRACE_OWNER")
    if not path or not owner or owner == str(os.getpid()):
        return path or None
    root, ext = os.path.splitext(path)
    return f"{root}.{os.getpid()}{ext or '.json'}"
