"""Driver selection: how every entry point (``--driver``) names the drivers to use.

A driver string is one of

* ``reference``: the built-in ``nnapi-reference`` CPU driver;
* ``module.path:factory``: a Python object implementing :class:`nnapi_ref.hal.Device`: a
  Device instance, a Device subclass, or a callable returning a Device;
* ``remote:...``: reserved for drivers running in another process.

Several drivers at once (for partitioning) are separated by commas.
"""
from __future__ import annotations

import importlib

from ..errors import NnapiError
from ..hal import Device
from ..types import ResultCode


def load_driver(spec: str) -> Device:
    spec = spec.strip()
    if spec in ("reference", "nnapi-reference"):
        from .reference import ReferenceDevice
        return ReferenceDevice()
    if spec.startswith("remote:"):
        raise NnapiError(ResultCode.UNAVAILABLE_DEVICE, f"driver {spec!r}: out-of-process drivers are not available yet")
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise NnapiError(ResultCode.BAD_DATA, f"driver {spec!r}: expected 'reference' or 'module.path:factory'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise NnapiError(ResultCode.UNAVAILABLE_DEVICE, f"driver {spec!r}: cannot import {module_name}: {e}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise NnapiError(ResultCode.UNAVAILABLE_DEVICE, f"driver {spec!r}: {module_name} has no {attr}")
        obj = getattr(obj, part)
    driver = obj if isinstance(obj, Device) else obj() if callable(obj) else obj
    if not isinstance(driver, Device):
        raise NnapiError(ResultCode.UNAVAILABLE_DEVICE,
                         f"driver {spec!r}: {attr} gave a {type(driver).__name__}, not an nnapi_ref.hal.Device")
    return driver


def load_drivers(specs: str | list[str]) -> list[Device]:
    """Drivers from a comma-separated string or a list of driver strings."""
    if isinstance(specs, str):
        specs = [s for s in specs.split(",") if s.strip()]
    return [load_driver(s) for s in specs]
