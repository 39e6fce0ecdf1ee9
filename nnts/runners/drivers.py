"""Driver selection: how every entry point (``--driver``) names the drivers to use.

A driver string is one of

* ``reference``: the built-in ``nnapi-reference`` CPU driver;
* ``onnxruntime``: NNAPI on ONNX Runtime's CPU provider (the ``onnxruntime`` extra);
* ``tflite``, ``tflite-ref``: NNAPI on TensorFlow Lite's interpreter, default (XNNPACK) or
  reference kernels (the ``tflite`` extra: ``ai-edge-litert``);
* ``module.path:factory``: a Python object implementing :class:`nnapi_ref.hal.Device`: a
  Device instance, a Device subclass, or a callable returning a Device;
* ``remote:COMMAND``: a driver in its own process: COMMAND is started and spoken to over its
  stdin and stdout with the protocol of ``docs/remote-protocol.md`` (``remote:nnts serve
  reference`` serves the reference; ``nnts`` means this installation);
* ``socket:PATH``: a driver server already listening on the Unix socket PATH
  (``nnts serve DRIVER --socket PATH``).

Several drivers at once (for partitioning) are separated by commas. ``isolate=True`` runs every
in-process driver string through ``nnts serve`` in a process of its own. ``module.path`` resolves
against the current folder first, as ``python -m`` does, wherever a driver is named. What the
environment configures (a remote driver's time budgets, ONNX Runtime's threads, partitioning)
comes in a :class:`nnts.runners.settings.Settings`, read by the entry point. A remote driver records
its crashes and hangs in the :class:`IncidentLog` it is loaded with, which the runner reads per test.
"""
from __future__ import annotations

import importlib
import os
import shlex
import sys

from nnapi_ref import trace, vlog
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.errors import HostResourceError, NnapiError
from nnapi_ref.hal import Device, HalError
from nnapi_ref.remote import shm
from nnapi_ref.remote.client import IncidentLog, attach_socket, start_process
from nnapi_ref.runtime import get_devices, set_drivers
from nnapi_ref.types import ResultCode
from nnts.runners.settings import Settings

FORMS = "reference, onnxruntime, tflite, tflite-ref, module.path:factory, remote:COMMAND or socket:PATH"


def load_driver(spec: str, isolate: bool = False, settings: Settings = Settings(),
                incidents: IncidentLog | None = None) -> Device:
    spec = spec.strip()
    if not spec:
        raise NnapiError(ResultCode.BAD_DATA, f"no driver given (one of {FORMS})")
    if isolate and not spec.startswith(("remote:", "socket:")):
        spec = f"remote:nnts serve {shlex.quote(spec)}"
    if spec.startswith(("remote:", "socket:")):
        return _load_remote(spec, settings, incidents)
    if spec in ("reference", "nnapi-reference"):
        return ReferenceDevice()
    if spec == "onnxruntime":
        from nnts.adapters.onnxruntime import OnnxRuntimeDevice  # an extra (onnxruntime): loaded when named
        return OnnxRuntimeDevice(settings.ort_threads)
    if spec in ("tflite", "tflite-ref"):
        from nnts.adapters.tflite import TfliteDevice  # an extra (ai-edge-litert): loaded when named
        return TfliteDevice("default" if spec == "tflite" else "reference")
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise NnapiError(ResultCode.BAD_DATA, f"driver {spec!r}: unknown driver (one of {FORMS})")
    _current_folder_importable()
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # ImportError, or the module's own failure on import (a SyntaxError, ...)
        raise NnapiError(ResultCode.UNAVAILABLE_DEVICE,
                         f"driver {spec!r}: cannot import {module_name}: {type(e).__name__}: {e}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise NnapiError(ResultCode.UNAVAILABLE_DEVICE, f"driver {spec!r}: {module_name} has no {attr}")
        obj = getattr(obj, part)
    try:
        driver = obj if isinstance(obj, Device) else obj() if callable(obj) else obj
    except Exception as e:  # the vendor's factory failed: the driver is not available, one line says why
        raise NnapiError(ResultCode.UNAVAILABLE_DEVICE,
                         f"driver {spec!r}: {attr}() raised {type(e).__name__}: {e}") from None
    if not isinstance(driver, Device):
        raise NnapiError(ResultCode.UNAVAILABLE_DEVICE,
                         f"driver {spec!r}: {attr} gave a {type(driver).__name__}, not an nnapi_ref.hal.Device")
    return driver


def _current_folder_importable() -> None:
    """``module.path`` names a module of the current folder first, as ``python -m`` does (a console
    script such as ``nnts`` has its own folder, not the current one, on ``sys.path``)."""
    here = os.getcwd()
    if not any(os.path.abspath(p or ".") == here for p in sys.path):
        sys.path.insert(0, here)


def _load_remote(spec: str, settings: Settings, incidents: IncidentLog | None) -> Device:
    kind, _, target = spec.partition(":")
    if not target.strip():
        raise NnapiError(ResultCode.BAD_DATA, f"driver {spec!r}: expected {kind}:{'COMMAND' if kind == 'remote' else 'PATH'}")
    if kind == "remote":
        try:
            shlex.split(target)
        except ValueError as e:  # remote:"unbalanced
            raise NnapiError(ResultCode.BAD_DATA, f"driver {spec!r}: the command does not parse: {e}") from None
    _check_shared_memory(spec, settings.shm_dir)
    try:
        return (start_process if kind == "remote" else attach_socket)(target, settings.remote, incidents)
    except HalError as e:
        raise NnapiError(ResultCode.UNAVAILABLE_DEVICE, f"driver {spec!r}: {e.message}") from None


def load_drivers(specs: str | list[str], isolate: bool = False, settings: Settings = Settings(),
                 incidents: IncidentLog | None = None) -> list[Device]:
    """Drivers from a comma-separated string or a list of driver strings."""
    if isinstance(specs, str):
        specs = [s for s in specs.split(",") if s.strip()]
    if not specs:
        raise NnapiError(ResultCode.BAD_DATA, f"no driver given (one of {FORMS})")
    with trace.span("initialization", "runtime", "load drivers"):
        drivers = [load_driver(s, isolate, settings, incidents) for s in specs]
    if vlog.on["manager"]:
        vlog.info("Manager", "drivers loaded: %s", ", ".join(f"{s.strip()} ({d.get_name()})"
                                                           for s, d in zip(specs, drivers)))
    return drivers


class LoadedDrivers:
    """Drivers kept loaded by a run of many files in one process, so that a remote driver is one
    process per worker, not one per file; every driver it loads records in its ``incidents``."""

    def __init__(self):
        self.incidents = IncidentLog()
        self._drivers: dict[tuple, list[Device]] = {}

    def get(self, spec: str, isolate: bool, settings: Settings) -> list[Device]:
        key = (spec, isolate, settings)
        if key not in self._drivers:
            self._drivers[key] = load_drivers(spec, isolate, settings, self.incidents)
        return self._drivers[key]


def runtime_devices(spec: str, isolate: bool = False, settings: Settings = Settings(),
                    loaded: LoadedDrivers | None = None):
    """The runtime's devices for a driver string, partitioned as ``settings`` says; the drivers
    are ``loaded``'s (loaded there the first time), or loaded afresh without it."""
    drivers = loaded.get(spec, isolate, settings) if loaded is not None else load_drivers(spec, isolate, settings)
    set_drivers(drivers, settings.partitioning, settings.shm_dir)
    return get_devices()


def _check_shared_memory(spec: str, folder: str) -> None:
    """The shared memory a remote driver's data travels in, tried before any test: a full or
    missing folder is one line here, not an error in every test."""
    shm.remove_stale_files(folder)  # (what processes gone left there is no one's room)
    try:
        shm.allocate(1 << 16, folder)  # a staging region's size; released at once
    except (HostResourceError, OSError) as e:
        reason = e if isinstance(e, HostResourceError) else f"{folder}: {e.strerror}"
        raise NnapiError(ResultCode.OUT_OF_MEMORY if isinstance(e, HostResourceError) else ResultCode.BAD_DATA,
                         f"driver {spec!r}: no shared memory for its data: {reason} (NNTS_SHM_DIR names "
                         f"another folder)") from None
