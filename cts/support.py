"""What the CTS tests share: a compilation of a model the driver must support whole."""
from __future__ import annotations

import pytest

from nnapi_ref import Compilation, Model, OperationCode


def compiled(model: Model, devices, cache: tuple | None = None) -> Compilation:
    """model compiled for devices (with caching set to cache's (folder, token) when given); the test
    is skipped as unsupported, naming the operations, when the devices do not support it whole."""
    flags = model.get_supported_operations_for_devices(devices)
    if not all(flags):
        operations = model.hal_model.main.operations
        pytest.skip("unsupported: " + ", ".join(sorted({OperationCode(op.type).name
                                                        for op, ok in zip(operations, flags) if not ok})))
    compilation = Compilation(model, devices)
    if cache is not None:
        compilation.set_caching(*cache)
    compilation.finish()
    return compilation
