"""What the CTS tests share: a compilation of a model the driver must support whole, and a random
case's verdict."""
from __future__ import annotations

import pytest

from nnapi_ref import Compilation, Model, OperationCode
from nnts.runners.differential import CaseResult


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


def conclude(result: CaseResult, message: str | None = None) -> None:
    """A random case's result as the test's verdict: skipped, an expected failure (a documented
    class of the driver, :mod:`nnts.runners.known_classes`) or a failure, each saying ``message``
    (the result's own unless given)."""
    message = result.message if message is None else message
    if result.status == "skip":
        pytest.skip(message)
    if result.status != "pass" and result.explained:
        pytest.xfail(f"{result.explained}: {message}")
    if result.status != "pass":
        pytest.fail(message, pytrace=False)
