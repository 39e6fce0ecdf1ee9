"""Memory domains (memory from descriptors, copies) and compilation caching."""
import numpy as np
import pytest

from nnapi_ref import (Compilation, Execution, Memory, MemoryDesc, Model, NnapiError, OperandCode as T, OperandType,
                       OperationCode, ResultCode, get_devices, using_drivers)
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.drivers.variants import SubsetDevice

F4 = OperandType(T.TENSOR_FLOAT32, [4])


def doubling_model():
    """out = x + x."""
    model = Model()
    x, fuse, out = model.add_operand(F4), model.add_operand(OperandType(T.INT32)), model.add_operand(F4)
    model.set_operand_value(fuse, np.int32(0))
    model.add_operation(OperationCode.ADD, [x, x, fuse], [out])
    model.identify_inputs_and_outputs([x], [out])
    model.finish()
    return model


def compile_single(model=None):
    compilation = Compilation(model or doubling_model(), get_devices()[:1])
    compilation.finish()
    return compilation


def code_of(call, *args):
    with pytest.raises(NnapiError) as e:
        call(*args)
    return e.value.code


def device_memory(compilation, inputs=(0,), outputs=(0,)):
    desc = MemoryDesc()
    for i in inputs:
        desc.add_input_role(compilation, i)
    for i in outputs:
        desc.add_output_role(compilation, i)
    desc.finish()
    return Memory.from_desc(desc)


def test_device_memory_chains_executions_without_copies_to_the_host():
    compilation = compile_single()
    memory = device_memory(compilation)
    assert memory.buffer is not None  # allocated by the driver, in its memory domain
    first = Execution(compilation)
    first.set_input(0, np.array([1, 2, 3, 4], np.float32))
    first.set_output_from_memory(0, memory, 0, 0)
    first.compute()
    second = Execution(compilation)
    second.set_input_from_memory(0, memory, 0, 0)
    out = np.zeros(4, np.float32)
    second.set_output(0, out)
    second.compute()
    np.testing.assert_array_equal(out, [4, 8, 12, 16])
    host = Memory.from_buffer(np.zeros(4, np.float32))
    Memory.copy(memory, host)
    np.testing.assert_array_equal(host.shared.buffer.view(np.float32), [2, 4, 6, 8])


def test_uninitialized_device_memory_cannot_be_read():
    compilation = compile_single()
    memory = device_memory(compilation)
    execution = Execution(compilation)
    execution.set_input_from_memory(0, memory, 0, 0)
    execution.set_output(0, np.zeros(4, np.float32))
    assert code_of(execution.compute) == ResultCode.OP_FAILED
    assert code_of(Memory.copy, memory, Memory.from_buffer(np.zeros(4, np.float32))) == ResultCode.BAD_DATA


def test_copy_into_device_memory_then_use_it():
    compilation = compile_single()
    memory = device_memory(compilation)
    Memory.copy(Memory.from_buffer(np.array([5, 6, 7, 8], np.float32)), memory)
    execution = Execution(compilation)
    execution.set_input_from_memory(0, memory, 0, 0)
    out = np.zeros(4, np.float32)
    execution.set_output(0, out)
    execution.compute()
    np.testing.assert_array_equal(out, [10, 12, 14, 16])


def test_copy_of_the_wrong_size_is_rejected():
    memory = device_memory(compile_single())
    assert code_of(Memory.copy, Memory.from_buffer(np.zeros(3, np.float32)), memory) == ResultCode.BAD_DATA
    a, b = Memory.from_buffer(np.zeros(3, np.float32)), Memory.from_buffer(np.zeros(4, np.float32))
    assert code_of(Memory.copy, a, b) == ResultCode.BAD_DATA


def test_memory_descriptor_misuse():
    compilation = compile_single()
    desc = MemoryDesc()
    assert code_of(desc.add_input_role, compilation, 3) == ResultCode.BAD_DATA
    assert code_of(desc.add_input_role, compilation, 0, 0.0) == ResultCode.BAD_DATA
    assert code_of(desc.finish) == ResultCode.BAD_DATA  # no roles
    desc.add_input_role(compilation, 0)
    assert code_of(desc.add_input_role, compilation, 0) == ResultCode.BAD_DATA  # twice
    assert code_of(desc.set_dimensions, [5]) == ResultCode.BAD_DATA  # conflicts with [4]
    desc.finish()
    assert code_of(desc.finish) == ResultCode.BAD_STATE
    assert code_of(desc.add_output_role, compilation, 0) == ResultCode.BAD_STATE


def test_device_memory_only_in_its_roles():
    compilation = compile_single()
    memory = device_memory(compilation, inputs=(0,), outputs=())
    execution = Execution(compilation)
    assert code_of(execution.set_output_from_memory, 0, memory, 0, 0) == ResultCode.BAD_DATA
    other = compile_single()
    assert code_of(Execution(other).set_input_from_memory, 0, memory, 0, 0) == ResultCode.BAD_DATA


def test_device_memory_cannot_hold_constants():
    memory = device_memory(compile_single())
    model = Model()
    k = model.add_operand(F4)
    assert code_of(model.set_operand_value_from_memory, k, memory, 0, 16) == ResultCode.BAD_DATA


# -- caching ----------------------------------------------------------------------------------------

def test_compilation_is_saved_and_reloaded_from_the_cache(tmp_path):
    token = bytes(range(32))
    first = Compilation(doubling_model(), get_devices()[:1])
    first.set_caching(str(tmp_path), token)
    first.finish()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and all(p.stat().st_size > 0 for p in tmp_path.iterdir())

    class Counting(ReferenceDevice):
        loaded = prepared = 0

        def prepare_model_from_cache(self, *args):
            Counting.loaded += 1
            return super().prepare_model_from_cache(*args)

        def prepare_model(self, *args):
            Counting.prepared += 1
            return super().prepare_model(*args)

    with using_drivers([Counting()]) as devices:
        second = Compilation(doubling_model(), devices)
        second.set_caching(str(tmp_path), token)
        second.finish()
        # The reload prepares the cached model once (inside prepare_model_from_cache).
        assert Counting.loaded == 1
        execution = Execution(second)
        execution.set_input(0, np.array([1, 1, 2, 3], np.float32))
        out = np.zeros(4, np.float32)
        execution.set_output(0, out)
        execution.compute()
        np.testing.assert_array_equal(out, [2, 2, 4, 6])


def test_corrupted_cache_falls_back_to_compiling(tmp_path):
    token = b"\x07" * 32
    first = Compilation(doubling_model(), get_devices()[:1])
    first.set_caching(str(tmp_path), token)
    first.finish()
    model_file = next(p for p in tmp_path.iterdir() if ".model" in p.name)
    blob = bytearray(model_file.read_bytes())
    blob[-5] ^= 0x01  # one bit
    model_file.write_bytes(bytes(blob))
    from nnapi_ref.drivers.cache import load_from_cache
    from nnapi_ref.hal import HalError
    with open(model_file, "rb") as m, open(next(p for p in tmp_path.iterdir() if ".data" in p.name), "rb") as d:
        with pytest.raises(HalError):
            load_from_cache([m], [d], token, (1, 1))
    second = Compilation(doubling_model(), get_devices()[:1])
    second.set_caching(str(tmp_path), token)
    second.finish()  # recompiles from the model instead of failing
    execution = Execution(second)
    execution.set_input(0, np.ones(4, np.float32))
    out = np.zeros(4, np.float32)
    execution.set_output(0, out)
    execution.compute()
    np.testing.assert_array_equal(out, [2, 2, 2, 2])


def test_cache_under_another_token_is_not_used(tmp_path):
    from nnapi_ref.drivers.cache import load_from_cache, save_to_cache
    from nnapi_ref.hal import HalError
    model = doubling_model().hal_model
    with open(tmp_path / "m", "w+b") as m, open(tmp_path / "d", "w+b") as d:
        save_to_cache(model, [m], [d], b"a" * 32, (1, 1))
        with pytest.raises(HalError):
            load_from_cache([m], [d], b"b" * 32, (1, 1))
        with pytest.raises(HalError):
            load_from_cache([m], [], b"a" * 32, (1, 1))  # wrong number of files
        reloaded = load_from_cache([m], [d], b"a" * 32, (1, 1))
    assert len(reloaded.main.operations) == 1 and reloaded.main.operations[0].type == OperationCode.ADD


def test_device_memory_allocated_by_another_driver():
    with using_drivers([ReferenceDevice(), SubsetDevice("adder", [OperationCode.ADD], 0.5)]):
        compilation = Compilation(doubling_model())
        compilation.finish()
        memory = device_memory(compilation)
        execution = Execution(compilation)
        execution.set_input(0, np.array([1, 2, 3, 4], np.float32))
        execution.set_output_from_memory(0, memory, 0, 0)
        execution.compute()
        host = Memory.from_buffer(np.zeros(4, np.float32))
        Memory.copy(memory, host)
        np.testing.assert_array_equal(host.shared.buffer.view(np.float32), [2, 4, 6, 8])


def test_freeing_a_memory_releases_its_burst_token_in_the_driver():
    """Memory.close (ANeuralNetworksMemory_free) tells every burst that used the memory to release
    its token (IBurst::releaseMemoryResource), so a long-lived burst's driver cache does not grow
    with every memory; a later memory gets a new token, never the freed one."""
    from nnapi_ref import Burst
    from nnapi_ref.drivers.variants import TokenCachingDevice
    with using_drivers([TokenCachingDevice()]) as devices:
        compilation = Compilation(doubling_model(), devices)
        compilation.finish()
        burst = Burst(compilation)

        def run(memory, value):
            memory.shared.buffer.view(np.float32)[:] = value
            execution = Execution(compilation)
            execution.set_input_from_memory(0, memory, 0, 16)
            out = np.zeros(4, np.float32)
            execution.set_output(0, out)
            execution.burst_compute(burst)
            np.testing.assert_array_equal(out, 2 * np.float32(value))

        first, second = Memory.create_shared(16), Memory.create_shared(16)
        run(first, 1)
        run(second, 2)
        (_, driver_burst), = burst.hal_bursts.values()
        tokens = set(driver_burst.mapped)
        assert len(tokens) == 2  # one per memory (the output is a pointer argument, not a pool)
        first.close()
        assert len(driver_burst.mapped) == 1 and tokens > set(driver_burst.mapped)
        third = Memory.create_shared(16)
        run(third, 3)
        assert set(driver_burst.mapped) - tokens  # a token never given before
        run(second, 4)  # the memories still in use keep their tokens and mappings
        assert len(driver_burst.mapped) == 2
