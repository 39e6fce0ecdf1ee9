"""CTS: every documented way to misuse the NNAPI programming model returns the NDK's result code.

After AOSP's TestValidation: wrong operand and operation indexes, types and sizes; calls out of
lifecycle order (changing a finished model or compilation, compiling an unfinished model,
executing an unfinished compilation, computing an execution twice); compilation settings
(preference, priority, timeouts, cache tokens); execution bindings (lengths, conflicting types,
memory regions); bursts, memory descriptors and events. Compilations are made for the devices
under test (``Compilation(model, devices)``), so no CPU fallback stands in for them, and every
misuse is checked again after it: the object must still work for its correct use.
"""
from __future__ import annotations

import mmap
import os
import tempfile
import threading

import numpy as np
import pytest

from nnapi_ref import (AHardwareBuffer, Burst, Compilation, Event, Execution, FeatureLevel, HardwareBufferDesc,
                       HardwareBufferFormat, Memory, MemoryDesc, Model, NnapiError, OperandCode as T, OperandType,
                       OperationCode, ResultCode, get_default_loop_timeout, get_maximum_loop_timeout,
                       get_runtime_feature_level, hal)
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.runtime.devices import Device
from nnapi_ref.runtime.memory import PROT_READ, PROT_WRITE
from nnts.generators.builders import add_model

UNEXPECTED_NULL, BAD_DATA, BAD_STATE = ResultCode.UNEXPECTED_NULL, ResultCode.BAD_DATA, ResultCode.BAD_STATE
F2 = OperandType(T.TENSOR_FLOAT32, [2])
I32 = OperandType(T.INT32)
A = np.array([1.5, -2.0], np.float32)
B = np.array([0.25, 4.0], np.float32)
SUM = np.array([1.75, 2.0], np.float32)  # A + B, by hand


def code_of(call, *args, **kwargs) -> ResultCode:
    """The result code ``call`` fails with; it must fail, and say why."""
    with pytest.raises(NnapiError) as e:
        call(*args, **kwargs)
    assert e.value.message, "an NnapiError must name what is wrong"
    return e.value.code


@pytest.fixture
def one_device(devices):
    """The first device under test, as a one-device list (timing and timeouts need one)."""
    model = add_model()
    if not all(model.get_supported_operations_for_devices(devices[:1])):
        pytest.skip(f"{devices[0].name} does not support ADD on TENSOR_FLOAT32")
    return devices[:1]


@pytest.fixture
def targets(devices):
    """The devices under test, all of them; skips if they can't run ADD on TENSOR_FLOAT32."""
    if not all(add_model().get_supported_operations_for_devices(devices)):
        pytest.skip("the drivers under test do not support ADD on TENSOR_FLOAT32")
    return devices


def compiled(devices, model: Model | None = None) -> Compilation:
    compilation = Compilation(model or add_model(), devices)
    compilation.finish()
    return compilation


def bound(compilation: Compilation, out: np.ndarray | None = None) -> Execution:
    execution = Execution(compilation)
    execution.set_input(0, A.copy())
    execution.set_input(1, B.copy())
    execution.set_output(0, np.zeros(2, np.float32) if out is None else out)
    return execution


def run_ok(compilation: Compilation) -> None:
    """The compilation still computes A + B correctly."""
    out = np.zeros(2, np.float32)
    bound(compilation, out).compute()
    np.testing.assert_array_equal(out, SUM)


def add_with_constant_in(memory: Memory, offset: int) -> Model:
    """out = a + b, with b (8 bytes) read from ``memory`` at ``offset``."""
    model = Model()
    a, b, fuse, out = model.add_operand(F2), model.add_operand(F2), model.add_operand(I32), model.add_operand(F2)
    model.set_operand_value_from_memory(b, memory, offset, 8)
    model.set_operand_value(fuse, np.int32(0))
    model.add_operation(OperationCode.ADD, [a, b, fuse], [out])
    model.identify_inputs_and_outputs([a], [out])
    model.finish()
    return model


def other_device() -> Device:
    """A device not under test, only to make a device list of two (never executed)."""
    return Device(ReferenceDevice("nnts-cts-other-device"))


# ---------------------------------------------------------------------------------------------
# Model building
# ---------------------------------------------------------------------------------------------

def test_add_operand_rejects_invalid_types():
    model = Model()
    assert code_of(model.add_operand, None) == UNEXPECTED_NULL
    assert code_of(model.add_operand, OperandType(12345)) == BAD_DATA              # no such type
    assert code_of(model.add_operand, OperandType(T.INT32, [2])) == BAD_DATA       # scalar with dimensions
    assert code_of(model.add_operand, OperandType(T.FLOAT32, [1])) == BAD_DATA
    assert code_of(model.add_operand, OperandType(T.TENSOR_FLOAT32, [2], 0.5)) == BAD_DATA  # scale on a float
    assert code_of(model.add_operand, OperandType(T.TENSOR_FLOAT32, [2], 0.0, 3)) == BAD_DATA
    assert code_of(model.add_operand, OperandType(T.TENSOR_QUANT8_ASYMM, [2], 0.0, 0)) == BAD_DATA  # scale 0
    assert code_of(model.add_operand, OperandType(T.TENSOR_QUANT8_ASYMM, [2], -1.0, 0)) == BAD_DATA
    assert code_of(model.add_operand, OperandType(T.TENSOR_QUANT8_ASYMM, [2], 0.5, 256)) == BAD_DATA
    assert code_of(model.add_operand, OperandType(T.TENSOR_QUANT8_ASYMM, [2], 0.5, -1)) == BAD_DATA
    assert code_of(model.add_operand, OperandType(T.TENSOR_QUANT8_ASYMM_SIGNED, [2], 0.5, 128)) == BAD_DATA
    assert code_of(model.add_operand, OperandType(T.TENSOR_QUANT16_SYMM, [2], 0.5, 1)) == BAD_DATA
    assert model.operand_count == 0  # nothing was added by the failed calls
    assert model.add_operand(OperandType(T.TENSOR_QUANT8_ASYMM, [2], 0.5, 255)) == 0


def test_set_operand_value_misuse():
    model = Model()
    t = model.add_operand(F2)
    scalar = model.add_operand(I32)
    unknown = model.add_operand(OperandType(T.TENSOR_FLOAT32, [0]))
    assert code_of(model.set_operand_value, 3, np.zeros(2, np.float32)) == BAD_DATA     # no operand 3
    assert code_of(model.set_operand_value, -1, np.zeros(2, np.float32)) == BAD_DATA
    assert code_of(model.set_operand_value, t, np.zeros(3, np.float32)) == BAD_DATA      # 12 bytes for 8
    assert code_of(model.set_operand_value, t, np.zeros(1, np.float32)) == BAD_DATA
    assert code_of(model.set_operand_value, t, bytearray(7)) == BAD_DATA
    assert code_of(model.set_operand_value, scalar, np.zeros(2, np.int32)) == BAD_DATA
    assert code_of(model.set_operand_value, unknown, np.zeros(2, np.float32)) == BAD_DATA  # size unknown
    model.set_operand_value(t, np.zeros(2, np.float32))
    model.set_operand_value(scalar, np.int32(1))


def test_set_operand_value_from_memory_misuse():
    model = Model()
    t = model.add_operand(F2)
    memory = Memory.from_buffer(np.zeros(4, np.float32))  # 16 bytes
    assert code_of(model.set_operand_value_from_memory, t, None, 0, 8) == UNEXPECTED_NULL
    assert code_of(model.set_operand_value_from_memory, 9, memory, 0, 8) == BAD_DATA
    assert code_of(model.set_operand_value_from_memory, t, memory, 0, 4) == BAD_DATA     # wrong length
    assert code_of(model.set_operand_value_from_memory, t, memory, 12, 8) == BAD_DATA    # past the end
    assert code_of(model.set_operand_value_from_memory, t, memory, 16, 8) == BAD_DATA
    model.set_operand_value_from_memory(t, memory, 8, 8)


def test_per_channel_quant_params_misuse():
    model = Model()
    q = model.add_operand(OperandType(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, [3, 2]))
    f = model.add_operand(F2)
    call = model.set_operand_symm_per_channel_quant_params
    assert code_of(call, q, None, 0) == UNEXPECTED_NULL
    assert code_of(call, 7, [1.0, 1.0, 1.0], 0) == BAD_DATA
    assert code_of(call, q, [1.0, 1.0], 0) == BAD_DATA        # 2 scales for 3 channels
    assert code_of(call, q, [1.0, 1.0, 1.0], 1) == BAD_DATA   # dimension 1 has 2 channels
    assert code_of(call, q, [1.0, 1.0, 1.0], 2) == BAD_DATA   # no dimension 2
    assert code_of(call, q, [1.0, 0.0, 1.0], 0) == BAD_DATA   # scale 0
    assert code_of(call, f, [1.0, 1.0], 0) == BAD_DATA        # not a per-channel operand
    call(q, [1.0, 0.5, 0.25], 0)


def test_set_operand_value_from_model_misuse():
    model = Model()
    ref = model.add_operand(OperandType(T.MODEL))
    t = model.add_operand(F2)
    assert code_of(model.set_operand_value_from_model, ref, None) == UNEXPECTED_NULL
    assert code_of(model.set_operand_value_from_model, ref, add_model(finish=False)) == BAD_DATA  # unfinished
    assert code_of(model.set_operand_value_from_model, t, add_model()) == BAD_DATA   # not a MODEL operand
    assert code_of(model.set_operand_value_from_model, 5, add_model()) == BAD_DATA
    assert code_of(model.set_operand_value, ref, np.zeros(1, np.int32)) == BAD_DATA  # MODEL needs a model
    model.set_operand_value_from_model(ref, add_model())


def test_add_operation_misuse():
    model = Model()
    a, b, fuse, out = model.add_operand(F2), model.add_operand(F2), model.add_operand(I32), model.add_operand(F2)
    model.set_operand_value(fuse, np.int32(0))
    assert code_of(model.add_operation, OperationCode.ADD, None, [out]) == UNEXPECTED_NULL
    assert code_of(model.add_operation, OperationCode.ADD, [a, b, fuse], None) == UNEXPECTED_NULL
    assert code_of(model.add_operation, 9999, [a, b, fuse], [out]) == BAD_DATA            # no such operation
    assert code_of(model.add_operation, -1, [a, b, fuse], [out]) == BAD_DATA
    assert code_of(model.add_operation, OperationCode.ADD, [a, b, 4], [out]) == BAD_DATA  # no operand 4
    assert code_of(model.add_operation, OperationCode.ADD, [a, b, fuse], [17]) == BAD_DATA
    wrong = model.add_operand(OperandType(T.TENSOR_INT32, [2]))
    assert code_of(model.add_operation, OperationCode.ADD, [a, b, fuse], [wrong]) == BAD_DATA  # type mismatch
    assert code_of(model.add_operation, OperationCode.ADD, [a, wrong, fuse], [out]) == BAD_DATA
    assert code_of(model.add_operation, OperationCode.ADD, [a, b], [out]) == BAD_DATA         # too few inputs
    assert code_of(model.add_operation, OperationCode.ADD, [a, b, fuse], [fuse]) == BAD_DATA  # constant output
    model.add_operation(OperationCode.ADD, [a, b, fuse], [out])


def test_identify_inputs_and_outputs_misuse():
    model = add_model(finish=False)
    call = model.identify_inputs_and_outputs
    assert code_of(call, None, [3]) == UNEXPECTED_NULL
    assert code_of(call, [0, 1], None) == UNEXPECTED_NULL
    assert code_of(call, [0, 9], [3]) == BAD_DATA     # no operand 9
    assert code_of(call, [0, 1], [4]) == BAD_DATA
    assert code_of(call, [0, 2], [3]) == BAD_DATA     # operand 2 is a constant
    assert code_of(call, [0, 0, 1], [3]) == BAD_DATA  # listed twice
    assert code_of(call, [0, 1, 3], [3]) == BAD_DATA  # both input and output
    call([0, 1], [3])
    model.finish()


def test_finish_rejects_invalid_graphs():
    model = Model()
    assert code_of(model.finish) == BAD_DATA  # inputs and outputs never identified

    model = add_model(finish=False)
    model.add_operation(OperationCode.ADD, [0, 1, 2], [3])  # operand 3 written twice
    assert code_of(model.finish) == BAD_DATA

    model = Model()  # temporary t is read but never written
    a, t, fuse, out = model.add_operand(F2), model.add_operand(F2), model.add_operand(I32), model.add_operand(F2)
    model.set_operand_value(fuse, np.int32(0))
    model.add_operation(OperationCode.ADD, [a, t, fuse], [out])
    model.identify_inputs_and_outputs([a], [out])
    assert code_of(model.finish) == BAD_DATA

    model = Model()  # x and y feed each other
    a, x, y, fuse = model.add_operand(F2), model.add_operand(F2), model.add_operand(F2), model.add_operand(I32)
    model.set_operand_value(fuse, np.int32(0))
    model.add_operation(OperationCode.ADD, [a, y, fuse], [x])
    model.add_operation(OperationCode.ADD, [a, x, fuse], [y])
    model.identify_inputs_and_outputs([a], [y])
    assert code_of(model.finish) == BAD_DATA

    model = Model()  # fused activation code 7 does not exist
    a, b, fuse, out = model.add_operand(F2), model.add_operand(F2), model.add_operand(I32), model.add_operand(F2)
    model.set_operand_value(fuse, np.int32(7))
    model.add_operation(OperationCode.ADD, [a, b, fuse], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    with pytest.raises(NnapiError) as e:
        model.finish()
        Compilation(model).finish()  # a runtime may defer the operand-value check to compilation
    assert e.value.code == BAD_DATA


def test_finished_model_cannot_change():
    model = add_model()
    assert code_of(model.add_operand, F2) == BAD_STATE
    assert code_of(model.set_operand_value, 2, np.int32(1)) == BAD_STATE
    assert code_of(model.add_operation, OperationCode.ADD, [0, 1, 2], [3]) == BAD_STATE
    assert code_of(model.identify_inputs_and_outputs, [0, 1], [3]) == BAD_STATE
    assert code_of(model.relax_computation_float32_to_float16, True) == BAD_STATE
    assert code_of(model.set_operand_value_from_memory, 0, Memory.from_buffer(np.zeros(2, np.float32)), 0, 8) \
        == BAD_STATE
    assert code_of(model.finish) == BAD_STATE


def test_get_supported_operations_for_devices(devices):
    assert code_of(add_model().get_supported_operations_for_devices, None) == UNEXPECTED_NULL
    assert code_of(add_model(finish=False).get_supported_operations_for_devices, devices) == BAD_STATE
    assert code_of(add_model().get_supported_operations_for_devices, []) == BAD_DATA
    flags = add_model().get_supported_operations_for_devices(devices)
    assert len(flags) == 1 and all(isinstance(f, bool) for f in flags)
    for device in devices:  # one flag per operation, for each device on its own
        assert len(add_model().get_supported_operations_for_devices([device])) == 1


# ---------------------------------------------------------------------------------------------
# Compilation
# ---------------------------------------------------------------------------------------------

def test_compilation_creation_misuse(devices):
    assert code_of(Compilation, None, devices) == UNEXPECTED_NULL
    assert code_of(Compilation, add_model(finish=False), devices) == BAD_STATE  # unfinished model
    assert code_of(Compilation, add_model(), []) == BAD_DATA
    assert code_of(Compilation, add_model(), [devices[0], devices[0]]) == BAD_DATA  # listed twice


@pytest.mark.parametrize("preference", [-1, 3, 100])
def test_set_preference_rejects_unknown_values(targets, preference):
    compilation = Compilation(add_model(), targets)
    assert code_of(compilation.set_preference, preference) == BAD_DATA
    for valid in (0, 1, 2):
        compilation.set_preference(valid)
    compilation.finish()
    run_ok(compilation)


@pytest.mark.parametrize("priority", [0, 1, 89, 91, 99, 101, 109, 111, -100])
def test_set_priority_accepts_only_low_medium_high(targets, priority):
    compilation = Compilation(add_model(), targets)
    assert code_of(compilation.set_priority, priority) == BAD_DATA


@pytest.mark.parametrize("priority", [90, 100, 110])
def test_every_priority_compiles_and_runs(targets, priority):
    compilation = Compilation(add_model(), targets)
    compilation.set_priority(priority)
    compilation.finish()
    run_ok(compilation)


def test_set_timeout_needs_a_compilation_for_one_device(one_device):
    model = add_model()
    assert code_of(Compilation(model).set_timeout, 1_000_000_000) == BAD_DATA  # no explicit device list
    assert code_of(Compilation(model, one_device + [other_device()]).set_timeout, 1_000_000_000) == BAD_DATA
    compilation = Compilation(model, one_device)
    compilation.set_timeout(0)  # 0: no timeout
    compilation.set_timeout(10_000_000_000)
    compilation.finish()
    run_ok(compilation)


@pytest.mark.parametrize("length", [0, 1, 31, 33, 64])
def test_set_caching_needs_a_32_byte_token(targets, tmp_path, length):
    compilation = Compilation(add_model(), targets)
    assert code_of(compilation.set_caching, str(tmp_path), bytes(length)) == BAD_DATA


def test_set_caching_misuse_and_use(targets, tmp_path):
    compilation = Compilation(add_model(), targets)
    assert code_of(compilation.set_caching, None, bytes(32)) == UNEXPECTED_NULL
    assert code_of(compilation.set_caching, str(tmp_path), None) == UNEXPECTED_NULL
    compilation.set_caching(str(tmp_path), bytes(range(32)))
    compilation.finish()
    run_ok(compilation)
    again = Compilation(add_model(), targets)  # the same token: a cache hit, if the driver caches
    again.set_caching(str(tmp_path), bytes(range(32)))
    again.finish()
    run_ok(again)


def test_finished_compilation_cannot_change(one_device, tmp_path):
    compilation = compiled(one_device)
    assert code_of(compilation.set_preference, 1) == BAD_STATE
    assert code_of(compilation.set_priority, 110) == BAD_STATE
    assert code_of(compilation.set_timeout, 1000) == BAD_STATE
    assert code_of(compilation.set_caching, str(tmp_path), bytes(32)) == BAD_STATE
    assert code_of(compilation.finish) == BAD_STATE
    run_ok(compilation)


def test_compilation_for_devices_without_an_operation_fails(targets):
    """An explicit device list gets no CPU fallback: an operation none supports is BAD_DATA
    (after AOSP's TestCompliance / createForDevices)."""
    model = Model()
    x = model.add_operand(OperandType(T.TENSOR_FLOAT32, [2]))
    out = model.add_operand(OperandType(T.TENSOR_FLOAT32, [2]))
    model.add_operation(OperationCode.FLOOR, [x], [out])
    model.identify_inputs_and_outputs([x], [out])
    model.finish()
    supported = model.get_supported_operations_for_devices(targets)
    if all(supported):
        compiled(targets, model)  # supported: it must compile
    else:
        assert code_of(compiled, targets, model) == BAD_DATA


# ---------------------------------------------------------------------------------------------
# Execution
# ---------------------------------------------------------------------------------------------

def test_execution_creation_misuse(targets):
    assert code_of(Execution, None) == UNEXPECTED_NULL
    assert code_of(Execution, Compilation(add_model(), targets)) == BAD_STATE  # unfinished compilation


def test_set_input_and_output_indexes_and_lengths(targets):
    execution = Execution(compiled(targets))
    assert code_of(execution.set_input, 2, A.copy()) == BAD_DATA          # 2 inputs
    assert code_of(execution.set_input, -1, A.copy()) == BAD_DATA
    assert code_of(execution.set_output, 1, np.zeros(2, np.float32)) == BAD_DATA  # 1 output
    assert code_of(execution.set_input, 0, np.zeros(3, np.float32)) == BAD_DATA  # 12 bytes for 8
    assert code_of(execution.set_input, 0, np.zeros(1, np.float32)) == BAD_DATA
    assert code_of(execution.set_input, 0, bytearray(7)) == BAD_DATA
    assert code_of(execution.set_output, 0, np.zeros(3, np.float32)) == BAD_DATA
    assert code_of(execution.set_output, 0, np.zeros(1, np.float32)) == BAD_DATA
    assert code_of(execution.set_output, 0, bytes(8)) == BAD_DATA        # read-only output buffer
    readonly = np.zeros(2, np.float32)
    readonly.flags.writeable = False
    assert code_of(execution.set_output, 0, readonly) == BAD_DATA
    assert code_of(execution.compute) == BAD_DATA  # nothing bound yet
    execution.set_input(0, A.copy())
    execution.set_input(1, B.copy())
    assert code_of(execution.compute) == BAD_DATA  # output not bound
    out = np.zeros(2, np.float32)
    execution.set_output(0, out)
    execution.compute()
    np.testing.assert_array_equal(out, SUM)


def test_set_input_with_a_conflicting_type(targets):
    execution = Execution(compiled(targets))
    for type_ in (OperandType(T.TENSOR_INT32, [2]),              # another type
                  OperandType(T.TENSOR_FLOAT32, [3]),            # other dimensions
                  OperandType(T.TENSOR_FLOAT32, [2, 1]),         # another rank
                  OperandType(T.TENSOR_FLOAT32, [2], 0.5),       # a scale
                  OperandType(T.TENSOR_QUANT8_ASYMM, [8], 0.5, 0)):
        assert code_of(execution.set_input, 0, A.copy(), type_) == BAD_DATA, type_
        assert code_of(execution.set_output, 0, np.zeros(2, np.float32), type_) == BAD_DATA, type_
    execution.set_input(0, A.copy(), OperandType(T.TENSOR_FLOAT32, [2]))  # the same type is fine


def test_dimensions_given_at_execution_must_match_the_buffer(targets):
    model_in = Model()  # a model with an input of unknown size
    x, y, fuse, out = (model_in.add_operand(OperandType(T.TENSOR_FLOAT32, [0])), model_in.add_operand(F2),
                       model_in.add_operand(I32), model_in.add_operand(OperandType(T.TENSOR_FLOAT32, [0])))
    model_in.set_operand_value(fuse, np.int32(0))
    model_in.add_operation(OperationCode.ADD, [x, y, fuse], [out])
    model_in.identify_inputs_and_outputs([x, y], [out])
    model_in.finish()
    execution = Execution(compiled(targets, model_in))
    assert code_of(execution.set_input, 0, np.zeros(3, np.float32), OperandType(T.TENSOR_FLOAT32, [2])) == BAD_DATA
    assert code_of(execution.set_input, 0, A.copy(), OperandType(T.TENSOR_FLOAT32, [2, 2])) == BAD_DATA
    execution.set_input(0, A.copy(), OperandType(T.TENSOR_FLOAT32, [2]))
    execution.set_input(1, B.copy())
    out = np.zeros(2, np.float32)
    execution.set_output(0, out)
    execution.compute()
    np.testing.assert_array_equal(out, SUM)
    assert execution.get_output_operand_dimensions(0) == (2,)


def test_set_input_and_output_from_memory_misuse(targets):
    execution = Execution(compiled(targets))
    pool = np.zeros(6, np.float32)  # 24 bytes
    memory = Memory.from_buffer(pool)
    assert code_of(execution.set_input_from_memory, 0, None, 0, 8) == UNEXPECTED_NULL
    assert code_of(execution.set_input_from_memory, 2, memory, 0, 8) == BAD_DATA
    assert code_of(execution.set_input_from_memory, 0, memory, 0, 4) == BAD_DATA    # wrong length
    assert code_of(execution.set_input_from_memory, 0, memory, 20, 8) == BAD_DATA   # past the end
    assert code_of(execution.set_input_from_memory, 0, memory, 24, 8) == BAD_DATA
    assert code_of(execution.set_output_from_memory, 0, memory, 0, 12) == BAD_DATA
    assert code_of(execution.set_output_from_memory, 0, memory, 20, 8) == BAD_DATA
    assert code_of(execution.set_input_from_memory, 0, memory, 0, 8, OperandType(T.TENSOR_INT32, [2])) == BAD_DATA
    pool[:2], pool[2:4] = A, B
    execution.set_input_from_memory(0, memory, 0, 8)
    execution.set_input_from_memory(1, memory, 8, 8)
    execution.set_output_from_memory(0, memory, 16, 8)
    execution.compute()
    np.testing.assert_array_equal(pool[4:], SUM)


def test_executions_are_single_use(targets):
    execution = bound(compiled(targets))
    assert code_of(execution.get_output_operand_dimensions, 0) == BAD_STATE  # not computed yet
    assert code_of(execution.get_output_operand_rank, 0) == BAD_STATE
    execution.compute()
    assert code_of(execution.compute) == BAD_STATE
    assert code_of(execution.start_compute) == BAD_STATE
    assert code_of(execution.start_compute_with_dependencies, []) == BAD_STATE
    assert code_of(execution.burst_compute, Burst(execution.compilation)) == BAD_STATE
    assert code_of(execution.set_input, 0, A.copy()) == BAD_STATE
    assert code_of(execution.set_output, 0, np.zeros(2, np.float32)) == BAD_STATE
    assert code_of(execution.set_input_from_memory, 0, Memory.from_buffer(np.zeros(2, np.float32)), 0, 8) \
        == BAD_STATE
    assert code_of(execution.set_loop_timeout, 1000) == BAD_STATE
    assert code_of(execution.set_reusable, True) == BAD_STATE
    assert code_of(execution.get_output_operand_dimensions, 1) == BAD_DATA  # index out of range
    assert execution.get_output_operand_dimensions(0) == (2,)
    assert execution.get_output_operand_rank(0) == 1


@pytest.mark.parametrize("mode", ["async", "fenced"])
def test_execution_is_single_use_after_an_asynchronous_start(targets, mode):
    execution = bound(compiled(targets))
    event = execution.start_compute() if mode == "async" else execution.start_compute_with_dependencies([])
    event.wait()
    assert code_of(execution.compute) == BAD_STATE
    assert code_of(execution.start_compute) == BAD_STATE
    event.wait()  # waiting again is fine


def test_reusable_execution_computes_again(targets):
    out = np.zeros(2, np.float32)
    execution = bound(compiled(targets), out)
    execution.set_reusable(True)
    execution.compute()
    np.testing.assert_array_equal(out, SUM)
    out[:] = 0
    execution.set_input(0, B.copy())  # rebinding between computations is allowed
    execution.start_compute().wait()
    np.testing.assert_array_equal(out, B + B)
    execution.compute()
    np.testing.assert_array_equal(out, B + B)


def test_timing_and_timeouts_need_a_compilation_for_one_device(targets, one_device):
    for compilation in (compiled(None), compiled(one_device + [other_device()], add_model())):
        execution = bound(compilation)
        assert code_of(execution.set_measure_timing, True) == BAD_DATA
        assert code_of(execution.set_timeout, 1_000_000_000) == BAD_DATA
        assert code_of(execution.start_compute_with_dependencies, [], 1_000_000_000) == BAD_DATA
    execution = bound(compiled(one_device))
    execution.set_measure_timing(True)
    execution.set_timeout(10_000_000_000)
    execution.set_loop_timeout(10_000_000_000)
    execution.compute()
    execution = bound(compiled(one_device))
    execution.compute()
    assert code_of(execution.set_measure_timing, True) == BAD_STATE
    assert code_of(execution.set_timeout, 1000) == BAD_STATE


def test_get_duration_misuse(one_device):
    execution = bound(compiled(one_device))
    execution.set_measure_timing(True)
    assert code_of(execution.get_duration, 0) == BAD_STATE  # not computed yet
    execution.compute()
    for code in (-1, 4, 99):
        assert code_of(execution.get_duration, code) == BAD_DATA
    unmeasured = bound(compiled(one_device))
    unmeasured.compute()
    for code in range(4):  # timing was not requested
        assert code_of(unmeasured.get_duration, code) == BAD_STATE


# ---------------------------------------------------------------------------------------------
# Bursts
# ---------------------------------------------------------------------------------------------

def test_burst_misuse(targets):
    compilation = compiled(targets)
    assert code_of(Burst, None) == UNEXPECTED_NULL
    assert code_of(Burst, Compilation(add_model(), targets)) == BAD_STATE  # unfinished compilation
    assert code_of(bound(compilation).burst_compute, None) == UNEXPECTED_NULL
    other = Burst(compiled(targets))  # a burst of another compilation of the same model
    assert code_of(bound(compilation).burst_compute, other) == BAD_DATA
    burst = Burst(compilation)
    for k in range(3):  # one burst serves many executions in turn
        out = np.zeros(2, np.float32)
        execution = Execution(compilation)
        execution.set_input(0, A + k)
        execution.set_input(1, B.copy())
        execution.set_output(0, out)
        execution.burst_compute(burst)
        np.testing.assert_array_equal(out, SUM + k)


# ---------------------------------------------------------------------------------------------
# Memory, memory descriptors
# ---------------------------------------------------------------------------------------------

def test_memory_from_fd_misuse():
    with tempfile.TemporaryFile() as f:
        f.write(bytes(2 * mmap.ALLOCATIONGRANULARITY))
        f.flush()
        fd = f.fileno()
        assert code_of(Memory.from_fd, 0, PROT_READ, fd, 0) == BAD_DATA                  # size 0
        assert code_of(Memory.from_fd, 16, 0, fd, 0) == BAD_DATA                         # no protection
        assert code_of(Memory.from_fd, 16, PROT_READ | 0x40, fd, 0) == BAD_DATA          # unknown flag
        assert code_of(Memory.from_fd, 16, PROT_READ, fd, 3) == BAD_DATA                 # unaligned offset
        assert code_of(Memory.from_fd, 16, PROT_READ, fd, -mmap.ALLOCATIONGRANULARITY) == BAD_DATA
        assert code_of(Memory.from_fd, 16, PROT_READ, 987654, 0) == ResultCode.UNMAPPABLE  # not a file
        Memory.from_fd(16, PROT_READ | PROT_WRITE, fd, mmap.ALLOCATIONGRANULARITY)
    assert code_of(Memory.from_buffer, None) == UNEXPECTED_NULL
    assert code_of(Memory.create_shared, 0) == BAD_DATA


def test_memory_desc_misuse(targets):
    compilation = compiled(targets)
    desc = MemoryDesc()
    assert code_of(desc.add_input_role, None, 0) == UNEXPECTED_NULL
    assert code_of(desc.add_input_role, Compilation(add_model(), targets), 0) == BAD_STATE  # unfinished
    assert code_of(desc.add_input_role, compilation, 2) == BAD_DATA      # 2 inputs
    assert code_of(desc.add_output_role, compilation, 1) == BAD_DATA     # 1 output
    assert code_of(desc.add_input_role, compilation, 0, 0.0) == BAD_DATA  # frequency in (0, 1]
    assert code_of(desc.add_input_role, compilation, 0, 1.5) == BAD_DATA
    assert code_of(desc.add_input_role, compilation, 0, -0.5) == BAD_DATA
    assert code_of(desc.finish) == BAD_DATA                              # no roles
    desc.add_input_role(compilation, 0)
    assert code_of(desc.add_input_role, compilation, 0) == BAD_DATA      # the same role twice
    assert code_of(desc.set_dimensions, None) == UNEXPECTED_NULL
    assert code_of(desc.set_dimensions, [3]) == BAD_DATA                 # the role says [2]
    assert code_of(desc.set_dimensions, [2, 1]) == BAD_DATA
    quant = Model()  # a role with another operand type
    q = OperandType(T.TENSOR_QUANT8_ASYMM, [2], 0.5, 0)
    x, y, fuse, out = quant.add_operand(q), quant.add_operand(q), quant.add_operand(I32), quant.add_operand(q)
    quant.set_operand_value(fuse, np.int32(0))
    quant.add_operation(OperationCode.ADD, [x, y, fuse], [out])
    quant.identify_inputs_and_outputs([x, y], [out])
    quant.finish()
    if all(quant.get_supported_operations_for_devices(targets)):
        assert code_of(desc.add_input_role, compiled(targets, quant), 0) == BAD_DATA
    desc.set_dimensions([2])
    desc.finish()
    assert code_of(desc.finish) == BAD_STATE
    assert code_of(desc.add_output_role, compilation, 0) == BAD_STATE
    assert code_of(desc.set_dimensions, [2]) == BAD_STATE
    assert code_of(Memory.from_desc, None) == UNEXPECTED_NULL
    unfinished = MemoryDesc()
    unfinished.add_input_role(compilation, 0)
    assert code_of(Memory.from_desc, unfinished) == BAD_STATE


def test_memory_from_desc_used_outside_its_roles(targets):
    compilation = compiled(targets)
    desc = MemoryDesc()
    desc.add_input_role(compilation, 0)
    desc.add_output_role(compilation, 0)
    desc.finish()
    memory = Memory.from_desc(desc)
    execution = Execution(compilation)
    assert code_of(execution.set_input_from_memory, 1, memory, 0, 0) == BAD_DATA  # input 1 has no role
    assert code_of(execution.set_input_from_memory, 0, memory, 0, 8) == BAD_DATA  # offset/length must be 0
    assert code_of(execution.set_input_from_memory, 0, memory, 4, 0) == BAD_DATA
    other = compiled(targets)
    assert code_of(Execution(other).set_input_from_memory, 0, memory, 0, 0) == BAD_DATA  # another compilation
    model = Model()  # a memory from a descriptor can't hold a constant
    k = model.add_operand(F2)
    assert code_of(model.set_operand_value_from_memory, k, memory, 0, 8) == BAD_DATA
    # Uninitialized: reading it fails; copying from it fails.
    execution.set_input_from_memory(0, memory, 0, 0)
    execution.set_input(1, B.copy())
    execution.set_output(0, np.zeros(2, np.float32))
    assert code_of(execution.compute) == ResultCode.OP_FAILED
    assert code_of(Memory.copy, memory, Memory.from_buffer(np.zeros(2, np.float32))) == BAD_DATA
    # Initialized by a copy, it serves as the input and then as the output of an execution.
    Memory.copy(Memory.from_buffer(A.copy()), memory)
    execution = Execution(compilation)
    execution.set_input_from_memory(0, memory, 0, 0)
    execution.set_input(1, B.copy())
    execution.set_output_from_memory(0, memory, 0, 0)
    execution.compute()
    host = np.zeros(2, np.float32)
    Memory.copy(memory, Memory.from_buffer(host))
    np.testing.assert_array_equal(host, SUM)


def test_memory_copy_misuse():
    small, large = Memory.from_buffer(np.zeros(2, np.float32)), Memory.from_buffer(np.zeros(3, np.float32))
    assert code_of(Memory.copy, None, small) == UNEXPECTED_NULL
    assert code_of(Memory.copy, small, None) == UNEXPECTED_NULL
    assert code_of(Memory.copy, small, large) == BAD_DATA  # sizes differ
    source = np.array([3.0, 4.0], np.float32)
    target = np.zeros(2, np.float32)
    Memory.copy(Memory.from_buffer(source), Memory.from_buffer(target))
    np.testing.assert_array_equal(target, source)


# ---------------------------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------------------------

def test_event_misuse(targets):
    assert code_of(Event.from_sync_fence, None) == UNEXPECTED_NULL
    event = bound(compiled(targets)).start_compute()
    event.wait()
    assert code_of(event.get_sync_fence) == BAD_DATA  # not made from a sync fence
    fence = hal.SyncFence.signalled()
    assert Event.from_sync_fence(fence).get_sync_fence() is fence
    assert code_of(bound(compiled(targets)).start_compute_with_dependencies, None) == UNEXPECTED_NULL


def test_event_of_a_failed_execution_reports_the_failure(targets):
    execution = Execution(compiled(targets))
    execution.set_input(0, A.copy())
    execution.set_input(1, B.copy())
    execution.set_output(0, np.zeros(2, np.float32))
    failed = Event.from_sync_fence(hal.SyncFence.signalled(hal.ErrorStatus.GENERAL_FAILURE))
    assert code_of(failed.wait) == ResultCode.OP_FAILED
    with pytest.raises(NnapiError) as e:  # a dependency that failed fails the execution
        execution.start_compute_with_dependencies([failed]).wait()
    assert e.value.code == ResultCode.OP_FAILED


def test_fenced_execution_needs_fully_specified_outputs(targets):
    execution = bound(compiled(targets, add_model(output_dims=(0,))))
    assert code_of(execution.start_compute_with_dependencies, []) == BAD_DATA
    execution.compute()  # the same execution still runs unfenced
    assert execution.get_output_operand_dimensions(0) == (2,)


def test_fenced_execution_after_a_sync_fence_event(targets):
    """An execution started after a fence runs once the fence is signalled."""
    fence = hal.SyncFence()
    out = np.zeros(2, np.float32)
    execution = bound(compiled(targets), out)
    threading.Timer(0.05, fence.signal).start()
    execution.start_compute_with_dependencies([Event.from_sync_fence(fence)]).wait()
    assert fence.is_signalled()
    np.testing.assert_array_equal(out, SUM)


def test_fd_memory_as_operand_value_and_io(targets):
    """Memory mapped from a file: a constant read from it, and inputs and outputs placed in it."""
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(B.tobytes() + bytes(mmap.ALLOCATIONGRANULARITY - 8))
        path = f.name
    try:
        fd = os.open(path, os.O_RDWR)
        try:
            memory = Memory.from_fd(16, PROT_READ | PROT_WRITE, fd, 0)
        finally:
            os.close(fd)
        execution = Execution(compiled(targets, add_with_constant_in(memory, 0)))
        execution.set_input(0, A.copy())
        execution.set_output_from_memory(0, memory, 8, 8)
        execution.compute()
        np.testing.assert_array_equal(memory.shared.buffer[8:16].view(np.float32), SUM)
        memory.close()
    finally:
        os.unlink(path)


# ---------------------------------------------------------------------------------------------
# Padding, alignment and the runtime's constants
# ---------------------------------------------------------------------------------------------

def test_preferred_memory_alignment_and_padding(targets):
    unfinished = Compilation(add_model(), targets)
    assert code_of(unfinished.get_preferred_memory_alignment_for_input, 0) == BAD_STATE
    assert code_of(unfinished.get_preferred_memory_padding_for_output, 0) == BAD_STATE
    compilation = compiled(targets)
    for getter, count in ((compilation.get_preferred_memory_alignment_for_input, 2),
                          (compilation.get_preferred_memory_padding_for_input, 2),
                          (compilation.get_preferred_memory_alignment_for_output, 1),
                          (compilation.get_preferred_memory_padding_for_output, 1)):
        assert code_of(getter, count) == BAD_DATA
        assert code_of(getter, -1) == BAD_DATA
        for index in range(count):
            value = getter(index)
            assert value >= 1 and value & (value - 1) == 0, f"{getter.__name__}({index}) = {value}: not a power of 2"


def test_padded_buffers_only_once_padding_is_enabled(targets):
    compilation = compiled(targets)
    padded_a = np.concatenate([A, np.float32([7.0, 9.0])])  # 16 bytes for an 8-byte input
    plain = Execution(compilation)
    assert code_of(plain.set_input, 0, padded_a) == BAD_DATA
    execution = Execution(compilation)
    execution.enable_input_and_output_padding(True)
    assert code_of(execution.set_input, 0, A[:1].copy()) == BAD_DATA  # shorter than the raw size still fails
    execution.set_input(0, padded_a)
    pool = np.zeros(8, np.float32)
    pool[:2] = B
    memory = Memory.from_buffer(pool)
    execution.set_input_from_memory(1, memory, 0, 16)  # 8 bytes of data, 8 of padding
    assert code_of(execution.set_output_from_memory, 0, memory, 24, 16) == BAD_DATA  # padding past the memory
    execution.set_output_from_memory(0, memory, 16, 16)
    execution.compute()
    np.testing.assert_array_equal(pool[4:6], SUM)
    assert code_of(execution.enable_input_and_output_padding, False) == BAD_STATE  # inputs are set


def test_padding_is_a_choice_made_before_binding(targets):
    execution = Execution(compiled(targets))
    execution.enable_input_and_output_padding(True)
    execution.enable_input_and_output_padding(False)  # changed back before anything is set
    assert code_of(execution.set_output, 0, np.zeros(4, np.float32)) == BAD_DATA
    execution.set_input(0, A.copy())
    assert code_of(execution.enable_input_and_output_padding, True) == BAD_STATE


def test_loop_timeouts_and_the_runtime_feature_level():
    assert get_default_loop_timeout() == 2_000_000_000   # NeuralNetworks.h: 2 seconds
    assert get_maximum_loop_timeout() == 15_000_000_000  # NeuralNetworks.h: 15 seconds
    assert get_runtime_feature_level() >= FeatureLevel.LEVEL_5  # the calls above are feature level 5's


# ---------------------------------------------------------------------------------------------
# Hardware buffers
# ---------------------------------------------------------------------------------------------

def test_hardware_buffer_allocation_rules():
    assert code_of(AHardwareBuffer.allocate, None) == UNEXPECTED_NULL
    assert code_of(AHardwareBuffer.allocate, HardwareBufferDesc(0)) == BAD_DATA
    assert code_of(AHardwareBuffer.allocate, HardwareBufferDesc(16, height=2)) == BAD_DATA  # a BLOB is one row
    assert code_of(AHardwareBuffer.allocate, HardwareBufferDesc(16, format=0x7777)) == BAD_DATA
    image = AHardwareBuffer.allocate(HardwareBufferDesc(2, 3, 1, HardwareBufferFormat.R8G8B8A8_UNORM))
    assert image.describe().stride == 2 and image.data.nbytes == 2 * 3 * 4
    assert code_of(Memory.from_ahardware_buffer, None) == UNEXPECTED_NULL
    assert code_of(Memory.from_ahardware_buffer, np.zeros(4, np.uint8)) == BAD_DATA


def test_blob_hardware_buffer_as_constant_input_and_output(targets):
    """A BLOB hardware buffer is used as any shared memory: a constant, an input and an output
    at offsets inside it."""
    buffer = AHardwareBuffer.allocate(HardwareBufferDesc(3 * 64))
    memory = Memory.from_ahardware_buffer(buffer)
    buffer.data[64:72] = B.view(np.uint8)
    buffer.data[0:8] = A.view(np.uint8)
    execution = Execution(compiled(targets, add_with_constant_in(memory, 64)))
    assert code_of(execution.set_input_from_memory, 0, memory, 0, 0) == BAD_DATA  # a BLOB needs its length
    assert code_of(execution.set_output_from_memory, 0, memory, 188, 8) == BAD_DATA  # past its end
    execution.set_input_from_memory(0, memory, 0, 8)
    execution.set_output_from_memory(0, memory, 128, 8)
    execution.compute()
    np.testing.assert_array_equal(buffer.data[128:136].view(np.float32), SUM)


def test_image_hardware_buffer_only_whole_and_only_for_inputs_and_outputs(targets):
    """A hardware buffer of an image format: never a constant, only a whole input or output, and
    an execution that runs only where a device consumes it: it computes the right result or fails
    with OP_FAILED, never anything else (no CPU fallback reads it)."""
    image = AHardwareBuffer.allocate(HardwareBufferDesc(2, 1, 1, HardwareBufferFormat.R8G8B8A8_UNORM))  # 8 bytes
    memory = Memory.from_ahardware_buffer(image)
    model = Model()
    a = model.add_operand(F2)
    assert code_of(model.set_operand_value_from_memory, a, memory, 0, 8) == BAD_DATA
    execution = Execution(compiled(targets))
    assert code_of(execution.set_input_from_memory, 0, memory, 0, 8) == BAD_DATA
    assert code_of(execution.set_output_from_memory, 0, memory, 0, 8) == BAD_DATA
    image.data[:] = A.view(np.uint8)
    execution.set_input_from_memory(0, memory, 0, 0)
    execution.set_input(1, B.copy())
    out = np.zeros(2, np.float32)
    execution.set_output(0, out)
    try:
        execution.compute()
    except NnapiError as e:
        assert e.code == ResultCode.OP_FAILED, f"an unconsumable hardware buffer fails with OP_FAILED, got {e}"
        return
    np.testing.assert_array_equal(out, SUM)


def test_extension_attributes_a_driver_does_not_know_are_ignored(targets):
    """ANeuralNetworksCompilation/Execution_addExtensionAttribute: the driver must validate the
    data and ignore what it does not understand, so hints of an unknown extension change nothing.
    The calls' own rules: one device only, each attribute once, not once finished or computing."""
    for device in targets:
        compilation = Compilation(add_model(), [device])
        compilation.add_extension_attribute("com.example.nnts.unknown_hints", 1, b"\xff" * 5)
        assert code_of(compilation.add_extension_attribute, "com.example.nnts.unknown_hints", 1, b"") == BAD_DATA
        compilation.finish()
        assert code_of(compilation.add_extension_attribute, "com.example.nnts.unknown_hints", 2, b"") == BAD_STATE
        execution = bound(compilation)
        execution.add_extension_attribute("com.example.nnts.unknown_hints", 2, b"")
        execution.add_extension_attribute("com.example.nnts.unknown_hints", 3, b"\x00")
        out = np.zeros(2, np.float32)
        execution.set_output(0, out)
        execution.compute()
        np.testing.assert_array_equal(out, SUM)
    if len(targets) > 1:
        assert code_of(Compilation(add_model(), targets).add_extension_attribute, "com.example.nnts.unknown_hints",
                       1, b"") == BAD_DATA
