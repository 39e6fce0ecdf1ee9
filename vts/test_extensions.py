"""VTS: a driver's vendor-extension support, straight through the driver interface.

Every driver: its getSupportedExtensions answer is well formed, and models using an extension it
does not support (or a prefix the model does not map) are rejected with INVALID_ARGUMENT, never
run as something else. A driver reporting the example extension ``org.nnts.example``
(docs/extensions.md) is checked further: malformed uses of it are rejected, and its operation's
results, computed by hand, come back on every execution path and through device memory. Those
tests skip, saying so, for drivers without it.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from nnapi_ref import hal
from nnapi_ref.drivers.example_extension import DEQUANTIZE64, EXTENSION_NAME, TENSOR_QUANT64_ASYMM, quant64_params
from nnapi_ref.extensions import encode, extension_problems
from nnapi_ref.hal import ErrorStatus, ExtensionNameAndPrefix, HalError, Lifetime, Operand, Operation, Subgraph
from nnapi_ref.types import OperandCode as T, OperationCode
from nnts.generators.builders import FLOAT32, ChainType
from nnts.vts.support import PATHS, make_io, prepare, run_path

pytestmark = pytest.mark.extension

UNSUPPORTED = "org.nnts.unsupported_extension"  # declared by no honest driver
PREFIX = 3  # any non-zero prefix: a model chooses its own
ZERO_POINT, SCALE = 2**40, 0.25
Q = np.array([2**40 + 3, 2**40 - 1, 2**40, 2**40 + 2**20], np.int64)
DEQUANTIZED = np.array([0.75, -0.25, 0.0, 262144.0], np.float32)  # (Q - 2**40) * 0.25, by hand


def dequantize_model(name: str = EXTENSION_NAME, prefix: int = PREFIX, mapped_prefix: int | None = None,
                     operation_type: int = DEQUANTIZE64, data: bytes | None = None, constant: np.ndarray | None = None,
                     output_type=T.TENSOR_FLOAT32, extra_input: bool = False) -> hal.Model:
    """DEQUANTIZE64 of a 4-element TENSOR_QUANT64_ASYMM (a model input, or ``constant``) as a driver
    receives it; the keyword arguments break it one way at a time."""
    q64 = encode(prefix, TENSOR_QUANT64_ASYMM)
    source = Operand(q64, (4,), extension_data=quant64_params(SCALE, ZERO_POINT) if data is None else data)
    if constant is not None:
        source.lifetime, source.value = Lifetime.CONSTANT_COPY, constant.reshape(-1).view(np.uint8).copy()
    else:
        source.lifetime = Lifetime.SUBGRAPH_INPUT
    output = Operand(output_type, (4,), lifetime=Lifetime.SUBGRAPH_OUTPUT)
    operands = [source, output]
    inputs = (0, 2) if extra_input else (0,)
    if extra_input:
        operands.append(Operand(T.INT32, (), lifetime=Lifetime.CONSTANT_COPY, value=np.array([1], np.int32)))
    main = Subgraph(operands, [Operation(encode(prefix, operation_type), inputs, (1,))],
                    () if constant is not None else (0,), (1,))
    mapped = prefix if mapped_prefix is None else mapped_prefix
    return hal.Model(main, extension_name_to_prefix=[ExtensionNameAndPrefix(name, mapped)])


def add_shaped_model(name: str, type_: ChainType = FLOAT32) -> hal.Model:
    """Operation 0 (ADD's code) of extension ``name`` on ADD's operands of ``type_``: only a driver
    that ignores the prefix takes it for ADD (an ADD the driver supports: ``type_`` is the driver's)."""
    def tensor(lifetime):
        return Operand(type_.code, (2,), type_.scale, type_.zero_point, lifetime=lifetime)

    operands = [tensor(Lifetime.SUBGRAPH_INPUT), tensor(Lifetime.SUBGRAPH_INPUT),
                Operand(T.INT32, (), lifetime=Lifetime.CONSTANT_COPY, value=np.array([0], np.int32)),
                tensor(Lifetime.SUBGRAPH_OUTPUT)]
    main = Subgraph(operands, [Operation(encode(PREFIX, int(OperationCode.ADD)), (0, 1, 2), (3,))], (0, 1), (3,))
    return hal.Model(main, extension_name_to_prefix=[ExtensionNameAndPrefix(name, PREFIX)])


def supports_example(driver) -> bool:
    return any(e.name == EXTENSION_NAME for e in driver.get_supported_extensions())


@pytest.fixture
def example_driver(drivers):
    for driver in drivers:
        if supports_example(driver):
            return driver
    pytest.skip(f"no driver under test reports the example extension {EXTENSION_NAME}")


def expect_invalid(driver, model: hal.Model, what: str) -> None:
    """prepare_model rejects ``model`` with INVALID_ARGUMENT; the supported-operations query
    rejects it too or reports its extension operation unsupported."""
    try:
        flags = driver.get_supported_operations(model)
    except HalError as e:
        assert e.status == ErrorStatus.INVALID_ARGUMENT, f"{what}: get_supported_operations gave {e.status.name}"
    else:
        assert not any(flags), f"{what}: get_supported_operations reports the operation supported"
    with pytest.raises(HalError) as e:
        prepare(driver, model)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT, f"{what}: prepare_model gave {e.value.status.name}"


def test_supported_extensions_well_formed(drivers):
    for driver in drivers:
        extensions = driver.get_supported_extensions()
        assert all(isinstance(e, hal.Extension) for e in extensions), f"{driver.get_name()}: {extensions!r}"
        assert all(isinstance(i, hal.ExtensionOperandTypeInformation) for e in extensions for i in e.operand_types)
        problems = extension_problems(extensions)
        assert not problems, f"{driver.get_name()}: " + "; ".join(problems)


def test_unknown_prefix_rejected(driver):
    expect_invalid(driver, dequantize_model(mapped_prefix=PREFIX + 1), "a type whose prefix the model does not map")


def test_unsupported_extension_operation_is_not_a_builtin(driver, chain_type):
    """A driver that ignores the prefix runs this as ADD (in a data type it supports ADD in)."""
    if any(e.name == UNSUPPORTED for e in driver.get_supported_extensions()):
        pytest.skip(f"the driver declares {UNSUPPORTED}")
    expect_invalid(driver, add_shaped_model(UNSUPPORTED, chain_type), f"operation 0 of {UNSUPPORTED} (not ADD)")


def test_unsupported_extension_rejected(driver):
    """A driver that accepts any extension name takes this for the example extension."""
    if any(e.name == UNSUPPORTED for e in driver.get_supported_extensions()):
        pytest.skip(f"the driver declares {UNSUPPORTED}")
    expect_invalid(driver, dequantize_model(name=UNSUPPORTED), f"a model of {UNSUPPORTED}")


@pytest.mark.parametrize("fault", ["constant of 3 values for 4", "constant of int32 values", "two inputs",
                                   "TENSOR_INT32 output", "operation type 1", "operand type 1",
                                   "extension data of 8 bytes", "no extension data", "zero scale"])
def test_malformed_use_rejected(example_driver, fault):
    q = Q.copy()
    model = {
        "constant of 3 values for 4": lambda: dequantize_model(constant=q[:3]),
        "constant of int32 values": lambda: dequantize_model(constant=q.astype(np.int32)),
        "two inputs": lambda: dequantize_model(extra_input=True),
        "TENSOR_INT32 output": lambda: dequantize_model(output_type=T.TENSOR_INT32),
        "operation type 1": lambda: dequantize_model(operation_type=1),
        "extension data of 8 bytes": lambda: dequantize_model(data=b"\0" * 8),
        "no extension data": lambda: _without_data(dequantize_model()),
        "zero scale": lambda: dequantize_model(data=quant64_params(0.0, 0)),
        "operand type 1": lambda: _retyped(dequantize_model(), encode(PREFIX, 1)),
    }[fault]()
    expect_invalid(example_driver, model, fault)


def _without_data(model: hal.Model) -> hal.Model:
    model.main.operands[0].extension_data = None
    return model


def _retyped(model: hal.Model, code: int) -> hal.Model:
    model.main.operands[0].type = code
    return model


def test_supported_and_constant_input(example_driver):
    model = dequantize_model(constant=Q)
    assert example_driver.get_supported_operations(model) == [True]
    prepared = prepare(example_driver, model)
    test = SimpleNamespace(model=model, inputs=[], expected=[DEQUANTIZED])
    io = make_io(test)
    outcome = run_path(prepared, io.request, "sync")
    assert outcome.status == ErrorStatus.NONE, outcome.message
    np.testing.assert_array_equal(io.outputs()[0], DEQUANTIZED)


@pytest.mark.parametrize("style", ["pool", "pointer"])
@pytest.mark.parametrize("path", PATHS)
def test_execution_paths(example_driver, path, style):
    model = dequantize_model()
    assert example_driver.get_supported_operations(model) == [True], "DEQUANTIZE64 reported unsupported"
    prepared = prepare(example_driver, model)
    test = SimpleNamespace(model=model, inputs=[Q], expected=[DEQUANTIZED])
    io = make_io(test, style)
    outcome = run_path(prepared, io.request, path)
    assert outcome.status == ErrorStatus.NONE, f"{path}: {outcome.status.name} {outcome.message}"
    np.testing.assert_array_equal(io.outputs()[0], DEQUANTIZED)


def test_device_memory(example_driver):
    """An extension operand as a driver-allocated memory (memory domains), when the driver has them."""
    model = dequantize_model()
    prepared = prepare(example_driver, model)
    try:
        buffer, token = example_driver.allocate(hal.BufferDesc((4,)), [prepared], [hal.BufferRole(0, 0)], [])
    except HalError as e:
        pytest.skip(f"allocate: {e.status.name} (memory domains are optional)")
    buffer.copy_from(hal.SharedMemory(Q.view(np.uint8).copy()), (4,))
    out = hal.SharedMemory(np.zeros(16, np.uint8))
    request = hal.Request([hal.RequestArgument(hal.ArgumentLifetime.POOL, 0)],
                          [hal.RequestArgument(hal.ArgumentLifetime.POOL, 1, 0, 16)], [token, out])
    outcome = run_path(prepared, request, "sync")
    assert outcome.status == ErrorStatus.NONE, outcome.message
    np.testing.assert_array_equal(out.buffer.view(np.float32), DEQUANTIZED)
    back = hal.SharedMemory(np.zeros(32, np.uint8))
    buffer.copy_to(back)
    np.testing.assert_array_equal(back.buffer.view(np.int64), Q)
