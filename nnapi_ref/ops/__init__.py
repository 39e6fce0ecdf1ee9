"""The operation registry: every module in this package declares one operation family.

Modules are discovered, so adding a family means adding a file here and nothing else.
"""
from __future__ import annotations

import importlib
import pkgutil

from nnapi_ref.ops.base import REGISTRY, OperationRegistration

_NOT_FAMILIES = {"base", "common", "fixedpoint", "requantization"}  # shared arithmetic, no operations
_loaded = False


def load_all() -> dict:
    """Import every operation family once; return the registry (OperationCode -> OperationRegistration)."""
    global _loaded
    if not _loaded:
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            if info.name not in _NOT_FAMILIES:
                importlib.import_module(f"{__name__}.{info.name}")
        _loaded = True
    return REGISTRY


def get(code) -> OperationRegistration | None:
    return load_all().get(code)
