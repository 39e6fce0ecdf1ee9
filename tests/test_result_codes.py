"""Every result code the API returns, each from a call that returns it.

(INCOMPLETE is defined by the NDK but returned by no call.)
"""
import tempfile

import numpy as np
import pytest

from nnapi_ref import (Burst, Compilation, Execution, Memory, Model, NnapiError, OperandCode as T, OperandType,
                       OperationCode, ResultCode, using_drivers)
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.drivers.variants import FaultyDevice
from nnapi_ref.hal import ErrorStatus
from nnapi_ref.runtime.memory import PROT_READ
from nnts.generators.builders import add_model, counting_loop_model
from nnts.runners.drivers import load_driver

F2 = OperandType(T.TENSOR_FLOAT32, [2])


def compiled(model=None, devices=None):
    compilation = Compilation(model or add_model(), devices)
    compilation.finish()
    return compilation


def execution_with(compilation, out=None):
    execution = Execution(compilation)
    execution.set_input(0, np.array([1, 2], np.float32))
    execution.set_input(1, np.array([3, 4], np.float32))
    execution.set_output(0, np.zeros(2, np.float32) if out is None else out)
    return execution


def code_of(call, *args, **kwargs) -> ResultCode:
    with pytest.raises(NnapiError) as e:
        call(*args, **kwargs)
    assert e.value.message  # every failure names what is wrong
    return e.value.code


# -- UNEXPECTED_NULL --------------------------------------------------------------------------

def test_unexpected_null():
    model = Model()
    assert code_of(model.add_operand, None) == ResultCode.UNEXPECTED_NULL
    assert code_of(model.add_operation, OperationCode.ADD, None, [0]) == ResultCode.UNEXPECTED_NULL
    assert code_of(model.identify_inputs_and_outputs, None, []) == ResultCode.UNEXPECTED_NULL
    assert code_of(Compilation, None) == ResultCode.UNEXPECTED_NULL
    assert code_of(Execution, None) == ResultCode.UNEXPECTED_NULL
    assert code_of(Memory.from_buffer, None) == ResultCode.UNEXPECTED_NULL
    assert code_of(execution_with(compiled()).burst_compute, None) == ResultCode.UNEXPECTED_NULL


# -- BAD_DATA ---------------------------------------------------------------------------------

def test_bad_data_from_model_building():
    model = Model()
    assert code_of(model.add_operand, OperandType(99)) == ResultCode.BAD_DATA
    assert code_of(model.add_operand, OperandType(T.TENSOR_QUANT8_ASYMM, [2], 0.0, 0)) == ResultCode.BAD_DATA
    assert code_of(model.add_operand, OperandType(T.TENSOR_QUANT8_ASYMM, [2], 1.0, 300)) == ResultCode.BAD_DATA
    assert code_of(model.add_operand, OperandType(T.INT32, [2])) == ResultCode.BAD_DATA
    assert code_of(model.add_operand, OperandType(T.TENSOR_FLOAT32, [2], 0.5)) == ResultCode.BAD_DATA
    a = model.add_operand(F2)
    assert code_of(model.set_operand_value, 5, np.zeros(2, np.float32)) == ResultCode.BAD_DATA
    assert code_of(model.set_operand_value, a, np.zeros(3, np.float32)) == ResultCode.BAD_DATA
    assert code_of(model.add_operation, 999, [a], [a]) == ResultCode.BAD_DATA
    assert code_of(model.add_operation, OperationCode.ADD, [a, 7], [a]) == ResultCode.BAD_DATA
    fuse = model.add_operand(OperandType(T.INT32))
    wrong = model.add_operand(OperandType(T.TENSOR_INT32, [2]))
    assert code_of(model.add_operation, OperationCode.ADD, [a, a, fuse], [wrong]) == ResultCode.BAD_DATA
    unknown = model.add_operand(OperandType(T.TENSOR_FLOAT32, [0]))
    assert code_of(model.set_operand_value, unknown, np.zeros(2, np.float32)) == ResultCode.BAD_DATA
    q = model.add_operand(OperandType(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, [2, 2]))
    assert code_of(model.set_operand_symm_per_channel_quant_params, q, [1.0], 0) == ResultCode.BAD_DATA
    assert code_of(model.set_operand_symm_per_channel_quant_params, q, [1.0, 2.0], 2) == ResultCode.BAD_DATA


def test_bad_data_from_finish_graph_checks():
    model = add_model(finish=False)
    model.add_operation(OperationCode.ADD, [0, 1, 2], [3])  # operand 3 written twice
    assert code_of(model.finish) == ResultCode.BAD_DATA

    model = Model()  # an input that is never written: the graph can't run
    a, t, out = model.add_operand(F2), model.add_operand(F2), model.add_operand(F2)
    fuse = model.add_operand(OperandType(T.INT32))
    model.set_operand_value(fuse, np.int32(0))
    model.add_operation(OperationCode.ADD, [a, t, fuse], [out])
    model.identify_inputs_and_outputs([a], [out])
    with pytest.raises(NnapiError) as e:
        model.finish()
    assert e.value.code == ResultCode.BAD_DATA and "written by 0 operations" in e.value.message

    model = Model()  # a cycle
    a, x, y = model.add_operand(F2), model.add_operand(F2), model.add_operand(F2)
    fuse = model.add_operand(OperandType(T.INT32))
    model.set_operand_value(fuse, np.int32(0))
    model.add_operation(OperationCode.ADD, [a, y, fuse], [x])
    model.add_operation(OperationCode.ADD, [a, x, fuse], [y])
    model.identify_inputs_and_outputs([a], [y])
    with pytest.raises(NnapiError) as e:
        model.finish()
    assert e.value.code == ResultCode.BAD_DATA and "cycle" in e.value.message

    model = Model()  # shapes that can't broadcast, known at compilation time
    a, b = model.add_operand(OperandType(T.TENSOR_FLOAT32, [2])), model.add_operand(OperandType(T.TENSOR_FLOAT32, [3]))
    fuse, out = model.add_operand(OperandType(T.INT32)), model.add_operand(OperandType(T.TENSOR_FLOAT32, [0]))
    model.set_operand_value(fuse, np.int32(0))
    model.add_operation(OperationCode.ADD, [a, b, fuse], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    assert code_of(compiled, model) == ResultCode.BAD_DATA


def test_bad_data_from_compilation_and_execution_setup():
    model = add_model()
    compilation = Compilation(model)
    assert code_of(compilation.set_preference, 7) == ResultCode.BAD_DATA
    assert code_of(compilation.set_priority, 95) == ResultCode.BAD_DATA
    assert code_of(compilation.set_caching, "/tmp", b"short") == ResultCode.BAD_DATA
    assert code_of(compilation.set_timeout, 1000) == ResultCode.BAD_DATA  # not a single-device compilation
    assert code_of(Compilation, model, []) == ResultCode.BAD_DATA
    compilation.finish()
    execution = Execution(compilation)
    assert code_of(execution.set_input, 2, np.zeros(2, np.float32)) == ResultCode.BAD_DATA
    assert code_of(execution.set_input, 0, np.zeros(3, np.float32)) == ResultCode.BAD_DATA
    assert code_of(execution.set_input, 0, np.zeros(2, np.float32), OperandType(T.TENSOR_INT32, [2])) == \
        ResultCode.BAD_DATA
    assert code_of(execution.set_output, 0, np.zeros(2, np.float32).view(np.float32)[:1]) == ResultCode.BAD_DATA
    assert code_of(execution.set_timeout, 10) == ResultCode.BAD_DATA
    assert code_of(execution.compute) == ResultCode.BAD_DATA  # inputs not set
    other = compiled()
    assert code_of(execution_with(compilation).burst_compute, Burst(other)) == ResultCode.BAD_DATA


# -- BAD_STATE --------------------------------------------------------------------------------

def test_bad_state():
    model = add_model()
    assert code_of(model.add_operand, F2) == ResultCode.BAD_STATE
    assert code_of(model.finish) == ResultCode.BAD_STATE
    assert code_of(Compilation, add_model(finish=False)) == ResultCode.BAD_STATE
    compilation = Compilation(model)
    assert code_of(Execution, compilation) == ResultCode.BAD_STATE
    compilation.finish()
    assert code_of(compilation.finish) == ResultCode.BAD_STATE
    assert code_of(compilation.set_priority, 110) == ResultCode.BAD_STATE
    execution = execution_with(compilation)
    assert code_of(execution.get_output_operand_rank, 0) == ResultCode.BAD_STATE
    execution.compute()
    assert code_of(execution.compute) == ResultCode.BAD_STATE  # executions are single-use
    assert code_of(execution.set_input, 0, np.zeros(2, np.float32)) == ResultCode.BAD_STATE


def test_reusable_execution_computes_again():
    execution = execution_with(compiled())
    execution.set_reusable(True)
    execution.compute()
    execution.compute()
    assert execution.get_output_operand_dimensions(0) == (2,)


# -- OP_FAILED --------------------------------------------------------------------------------

def test_op_failed_when_an_operation_fails_at_execution():
    model = Model()  # shapes only known at execution time, then incompatible
    a, b = model.add_operand(OperandType(T.TENSOR_FLOAT32, [0])), model.add_operand(OperandType(T.TENSOR_FLOAT32, [0]))
    fuse, out = model.add_operand(OperandType(T.INT32)), model.add_operand(OperandType(T.TENSOR_FLOAT32, [0]))
    model.set_operand_value(fuse, np.int32(0))
    model.add_operation(OperationCode.ADD, [a, b, fuse], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    execution = Execution(compiled(model))
    execution.set_input(0, np.zeros(2, np.float32), OperandType(T.TENSOR_FLOAT32, [2]))
    execution.set_input(1, np.zeros(3, np.float32), OperandType(T.TENSOR_FLOAT32, [3]))
    execution.set_output(0, np.zeros(8, np.float32))
    assert code_of(execution.compute) == ResultCode.OP_FAILED


# -- UNMAPPABLE, OUT_OF_MEMORY --------------------------------------------------------------------

def test_unmappable():
    with tempfile.TemporaryFile() as f:
        f.write(b"x" * 16)
        f.flush()
        assert code_of(Memory.from_fd, 1 << 20, PROT_READ, f.fileno(), 0) == ResultCode.UNMAPPABLE
    assert code_of(Memory.from_fd, 16, PROT_READ, 12345, 0) == ResultCode.UNMAPPABLE


def test_out_of_memory():
    assert code_of(Memory.create_shared, 1 << 62) == ResultCode.OUT_OF_MEMORY


# -- OUTPUT_INSUFFICIENT_SIZE -------------------------------------------------------------------

def test_output_insufficient_size_then_dimensions_are_queryable():
    compilation = compiled(add_model(output_dims=(0,)))
    execution = execution_with(compilation, out=np.zeros(1, np.float32))
    assert code_of(execution.compute) == ResultCode.OUTPUT_INSUFFICIENT_SIZE
    assert code_of(execution.get_output_operand_dimensions, 0) == ResultCode.OUTPUT_INSUFFICIENT_SIZE
    execution = execution_with(compilation, out=np.zeros(2, np.float32))
    execution.compute()
    assert execution.get_output_operand_dimensions(0) == (2,)
    assert execution.get_output_operand_rank(0) == 1


# -- driver statuses -> result codes ------------------------------------------------------------

@pytest.mark.parametrize("status,code", [
    (ErrorStatus.DEVICE_UNAVAILABLE, ResultCode.UNAVAILABLE_DEVICE),
    (ErrorStatus.GENERAL_FAILURE, ResultCode.OP_FAILED),
    (ErrorStatus.MISSED_DEADLINE_PERSISTENT, ResultCode.MISSED_DEADLINE_PERSISTENT),
    (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ResultCode.MISSED_DEADLINE_TRANSIENT),
    (ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, ResultCode.RESOURCE_EXHAUSTED_TRANSIENT),
    (ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT, ResultCode.RESOURCE_EXHAUSTED_PERSISTENT),
    (ErrorStatus.DEAD_OBJECT, ResultCode.DEAD_OBJECT),
    (ErrorStatus.INVALID_ARGUMENT, ResultCode.BAD_DATA),
])
def test_driver_failures_reach_the_application_as_result_codes(status, code):
    with using_drivers([FaultyDevice("faulty", fail_execute=status)]) as devices:
        execution = execution_with(compiled(devices=devices))
        assert code_of(execution.compute) == code
    with using_drivers([FaultyDevice("faulty", fail_prepare=status)]) as devices:
        assert code_of(compiled, None, devices) == code


def test_unavailable_device_for_a_driver_that_cannot_be_loaded():
    assert code_of(load_driver, "no_such_module_xyz:factory") == ResultCode.UNAVAILABLE_DEVICE
    assert code_of(load_driver, "remote:somewhere") == ResultCode.UNAVAILABLE_DEVICE
    assert code_of(load_driver, "not a driver string") == ResultCode.BAD_DATA


def test_missed_deadline_persistent_for_an_execution_timeout_already_passed():
    with using_drivers([ReferenceDevice()]) as devices:
        execution = execution_with(compiled(devices=devices))
        execution.set_timeout(1)  # 1 ns: gone before the driver starts
        assert code_of(execution.compute) == ResultCode.MISSED_DEADLINE_PERSISTENT


def test_missed_deadline_transient_from_the_while_loop_timeout():
    execution = Execution(compiled(counting_loop_model(step=0.0, limit=1.0)))
    execution.set_input(0, np.zeros(1, np.float32))
    execution.set_output(0, np.zeros(1, np.float32))
    execution.set_loop_timeout(1_000_000)  # 1 ms
    assert code_of(execution.compute) == ResultCode.MISSED_DEADLINE_TRANSIENT
