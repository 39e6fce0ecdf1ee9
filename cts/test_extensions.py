"""CTS: vendor extensions through the NDK's calls (NeuralNetworksExtensions.h).

The calls' result codes need only some device under test declaring an extension; the rest needs a
driver supporting the project's example extension ``org.nnts.example`` (docs/extensions.md; run
with ``--driver reference,nnapi_ref.drivers.example_extension:make_device``) and is skipped,
saying so, without one. Results are checked against values computed by hand.
"""
from __future__ import annotations

import numpy as np
import pytest

from nnapi_ref import (Burst, Compilation, Execution, Memory, MemoryDesc, Model, NnapiError, OperandCode as T,
                       OperandType, OperationCode, ResultCode)
from nnapi_ref.drivers.example_extension import DEQUANTIZE64, EXTENSION_NAME, TENSOR_QUANT64_ASYMM, quant64_params
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.extensions import EXTENSION_TYPE_BITS
from nnapi_ref.runtime.devices import Device

pytestmark = pytest.mark.extension

BAD_DATA, UNEXPECTED_NULL, BAD_STATE = ResultCode.BAD_DATA, ResultCode.UNEXPECTED_NULL, ResultCode.BAD_STATE

# Hand-computed: q - zero point exactly (values past 2**32 and 2**53 - 1 apart), times 0.25.
ZERO_POINT = 2**40
SCALE = 0.25
Q = np.array([2**40 + 3, 2**40 - 1, 2**40, 2**40 + 2**20], np.int64)
DEQUANTIZED = np.array([0.75, -0.25, 0.0, 262144.0], np.float32)
PLUS_ONE = np.array([1.75, 0.75, 1.0, 262145.0], np.float32)  # DEQUANTIZED + 1


def code_of(call, *args) -> ResultCode:
    with pytest.raises(NnapiError) as e:
        call(*args)
    assert e.value.message, "an NnapiError must name what is wrong"
    return e.value.code


def example_device(devices) -> Device:
    for device in devices:
        if device.get_extension_support(EXTENSION_NAME):
            return device
    pytest.skip(f"no driver under test reports the example extension {EXTENSION_NAME}")


def any_declared(devices) -> tuple[str, int]:
    """(name, operand type) of an extension operand type some device under test declares."""
    for device in devices:
        for extension in device.extensions:
            if extension.operand_types:
                return extension.name, extension.operand_types[0].type
    pytest.skip("no driver under test declares an extension operand type")


def dequantize_model(with_add: bool) -> Model:
    """DEQUANTIZE64 of the input (zero point 2**40, scale 0.25), then ADD 1 if ``with_add``."""
    model = Model()
    q64 = model.get_extension_operand_type(EXTENSION_NAME, TENSOR_QUANT64_ASYMM)
    source = model.add_operand(q64, [4])
    model.set_operand_extension_data(source, quant64_params(SCALE, ZERO_POINT))
    dequantized = model.add_operand(T.TENSOR_FLOAT32, [4])
    model.add_operation(model.get_extension_operation_type(EXTENSION_NAME, DEQUANTIZE64), [source], [dequantized])
    output = dequantized
    if with_add:
        one = model.add_operand(T.TENSOR_FLOAT32, [4])
        model.set_operand_value(one, np.ones(4, np.float32))
        activation = model.add_operand(T.INT32)
        model.set_operand_value(activation, 0)
        output = model.add_operand(T.TENSOR_FLOAT32, [4])
        model.add_operation(OperationCode.ADD, [dequantized, one, activation], [output])
    model.identify_inputs_and_outputs([source], [output])
    model.finish()
    return model


def test_get_extension_support(devices):
    for device in devices:
        declared = {e.name for e in device.extensions}
        assert device.get_extension_support("org.nnts.no_such_extension") is False
        for name in declared:
            assert device.get_extension_support(name) is True, f"{device.name}: {name}"
        assert code_of(device.get_extension_support, None) == UNEXPECTED_NULL


def test_type_codes_encode_a_prefix_per_extension(devices):
    model = Model()
    a = model.get_extension_operand_type("com.example.first", 7)
    b = model.get_extension_operand_type("com.example.second", 7)
    assert a >> EXTENSION_TYPE_BITS != 0 and b >> EXTENSION_TYPE_BITS != 0, "prefixes must be non-zero"
    assert a & 0xFFFF == 7 and b & 0xFFFF == 7
    assert a >> EXTENSION_TYPE_BITS != b >> EXTENSION_TYPE_BITS, "two extensions share a prefix"
    assert model.get_extension_operation_type("com.example.first", 3) == (a >> EXTENSION_TYPE_BITS) << 16 | 3
    assert model.get_extension_operand_type("com.example.first", 0xFFFF) & 0xFFFF == 0xFFFF


def test_type_code_calls_result_codes(devices):
    model = Model()
    for call in (model.get_extension_operand_type, model.get_extension_operation_type):
        assert code_of(call, None, 0) == UNEXPECTED_NULL
        assert code_of(call, "", 0) == BAD_DATA
        assert code_of(call, "no_dot", 0) == BAD_DATA
        assert code_of(call, "com.example.ext", 0x10000) == BAD_DATA
        assert code_of(call, "com.example.ext", -1) == BAD_DATA
    finished = Model()
    x = finished.add_operand(T.TENSOR_FLOAT32, [1])
    y = finished.add_operand(T.TENSOR_FLOAT32, [1])
    finished.add_operation(OperationCode.FLOOR, [x], [y])
    finished.identify_inputs_and_outputs([x], [y])
    finished.finish()
    assert code_of(finished.get_extension_operand_type, "com.example.ext", 0) == BAD_STATE
    assert code_of(finished.set_operand_extension_data, 0, b"x") == BAD_STATE


def test_operands_and_operations_need_an_assigned_prefix(devices):
    model = Model()
    unassigned = (5 << EXTENSION_TYPE_BITS) | 0
    assert code_of(model.add_operand, OperandType(unassigned, [2])) == BAD_DATA
    x = model.add_operand(T.TENSOR_FLOAT32, [2])
    y = model.add_operand(T.TENSOR_FLOAT32, [2])
    assert code_of(model.add_operation, unassigned, [x], [y]) == BAD_DATA
    undeclared = model.get_extension_operand_type("org.nnts.no_such_extension", 0)
    assert code_of(model.add_operand, OperandType(undeclared, [2])) == BAD_DATA
    # An extension operation needs no declaration: only its driver knows its operands.
    model.add_operation(model.get_extension_operation_type("org.nnts.no_such_extension", 0), [x], [y])


def test_extension_operand_rules(devices):
    name, type_within = any_declared(devices)
    model = Model()
    code = model.get_extension_operand_type(name, type_within)
    assert code_of(model.add_operand, OperandType(code, [2], scale=0.5)) == BAD_DATA
    assert code_of(model.add_operand, OperandType(code, [2], zero_point=1)) == BAD_DATA
    plain = model.add_operand(T.TENSOR_FLOAT32, [2])
    assert code_of(model.set_operand_extension_data, plain, b"abc") == BAD_DATA
    assert code_of(model.set_operand_extension_data, 99, b"abc") == BAD_DATA


def test_constant_size_is_the_declared_byte_size(devices):
    device = example_device(devices)
    model = Model()
    q64 = model.get_extension_operand_type(EXTENSION_NAME, TENSOR_QUANT64_ASYMM)
    k = model.add_operand(q64, [3])
    assert code_of(model.set_operand_value, k, np.zeros(3, np.int32)) == BAD_DATA  # 12 bytes, 24 needed
    model.set_operand_value(k, np.arange(3, dtype=np.int64))
    model.set_operand_extension_data(k, quant64_params(1.0, 0))
    assert device is not None


def test_placement_on_the_supporting_device(devices):
    device = example_device(devices)
    reference = Device(ReferenceDevice("cts-reference"))
    model = dequantize_model(with_add=True)
    compilation = Compilation(model, [device, reference])
    compilation.finish()
    for step in compilation.plan.steps:
        operations = step.operations if step.operations is not None else range(len(model.hal_model.main.operations))
        for j in operations:
            if model.hal_model.main.operations[j].type >> EXTENSION_TYPE_BITS:
                assert step.device is device, f"the extension operation ran on {step.device.name}"
    execution = Execution(compilation)
    execution.set_input(0, Q)
    out = np.zeros(4, np.float32)
    execution.set_output(0, out)
    execution.compute()
    np.testing.assert_array_equal(out, PLUS_ONE)


def test_compilation_fails_when_no_device_supports_the_extension(devices):
    example_device(devices)
    model = dequantize_model(with_add=True)
    reference = Device(ReferenceDevice("cts-reference"))
    assert code_of(Compilation(model, [reference]).finish) == BAD_DATA
    without = [d for d in devices if not d.get_extension_support(EXTENSION_NAME)]
    if without:
        assert code_of(Compilation(model, without).finish) == BAD_DATA


@pytest.mark.parametrize("mode", ["sync", "async", "burst", "fenced", "memory"])
def test_results_by_hand(devices, mode):
    device = example_device(devices)
    model = dequantize_model(with_add=False)
    compilation = Compilation(model, [device])
    compilation.finish()
    execution = Execution(compilation)
    out = np.zeros(4, np.float32)
    execution.set_output(0, out)
    if mode == "memory":
        desc = MemoryDesc()
        desc.add_input_role(compilation, 0)
        desc.finish()
        memory = Memory.from_desc(desc)
        Memory.copy(Memory.from_buffer(Q.copy()), memory)
        execution.set_input_from_memory(0, memory, 0, 0)
    else:
        execution.set_input(0, Q)
    if mode in ("sync", "memory"):
        execution.compute()
    elif mode == "async":
        execution.start_compute().wait()
    elif mode == "burst":
        execution.burst_compute(Burst(compilation))
    else:
        execution.start_compute_with_dependencies([]).wait()
    np.testing.assert_array_equal(out, DEQUANTIZED)


RANKED_DIFFS = [3, -1, 0, 2**20, 7, -2**30]  # q - zero point; times 0.25: by hand below
RANKED_EXPECTED = np.array([0.75, -0.25, 0.0, 262144.0, 1.75, -268435456.0], np.float32)


@pytest.mark.parametrize("shape", [(2, 3), (6,), (3, 2), (1, 2, 3), (2, 1, 3, 1)],  # rank 2 first: --quick runs it
                         ids=lambda s: "x".join(map(str, s)))
def test_results_by_hand_in_several_ranks(devices, shape):
    """DEQUANTIZE64 of six values laid out in tensors of rank 1 to 4 (row-major, as NNAPI lays
    out every tensor): element for element the same results, in the same places."""
    device = example_device(devices)
    model = Model()
    source = model.add_operand(model.get_extension_operand_type(EXTENSION_NAME, TENSOR_QUANT64_ASYMM), list(shape))
    model.set_operand_extension_data(source, quant64_params(SCALE, ZERO_POINT))
    target = model.add_operand(T.TENSOR_FLOAT32, list(shape))
    model.add_operation(model.get_extension_operation_type(EXTENSION_NAME, DEQUANTIZE64), [source], [target])
    model.identify_inputs_and_outputs([source], [target])
    model.finish()
    compilation = Compilation(model, [device])
    compilation.finish()
    execution = Execution(compilation)
    execution.set_input(0, np.array([ZERO_POINT + d for d in RANKED_DIFFS], np.int64).reshape(shape))
    out = np.zeros(shape, np.float32)
    execution.set_output(0, out)
    execution.compute()
    wrong = np.flatnonzero(out.reshape(-1) != RANKED_EXPECTED)
    assert not wrong.size, f"TENSOR_QUANT64_ASYMM of shape {list(shape)}: {wrong.size} of 6 elements wrong, first " \
                           f"at {[int(i) for i in np.unravel_index(wrong[0], shape)]}: expected {RANKED_EXPECTED[wrong[0]]:g}, " \
                           f"got {out.reshape(-1)[wrong[0]]:g} (not read in row-major order?)"
