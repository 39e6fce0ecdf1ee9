"""VTS memory domains (AOSP's MemoryDomainTests): allocate with bad roles or descriptors, copies
of the wrong size or dimensions, reads of uninitialized memory, and device memory used with a
model or in a role it was not allocated for. Skipped when the driver does not allocate memory
(GENERAL_FAILURE on a valid request). Each test uses one or two small test models of the
corpus with TENSOR_FLOAT32 inputs and outputs of known shape (results of executions through
device memory are checked by ``test_generated.py``'s device-memory variant).
"""
from __future__ import annotations

import numpy as np
import pytest

from nnapi_ref import hal
from nnapi_ref.hal import BufferDesc, BufferRole, ErrorStatus, HalError
from nnapi_ref.types import OperandCode
from nnts.vts.support import clone_model, make_io, model_cases, operation_names, prepare, run_path

pytestmark = pytest.mark.vts


def _float_io(test, i_kind: str = "input"):
    main = test.model.main
    k = main.input_indexes[0] if i_kind == "input" else main.output_indexes[0]
    return main.operands[k]


def _suitable(test) -> bool:
    main = test.model.main
    if test.expect_failure or not main.input_indexes or test.inputs[0] is None:
        return False
    ops = [main.operands[main.input_indexes[0]], main.operands[main.output_indexes[0]]]
    return all(o.type == OperandCode.TENSOR_FLOAT32 and o.dimensions and 0 not in o.dimensions for o in ops)


class Prepared:
    def __init__(self, driver, case):
        self.case = case
        self.test = case.test
        self.model = clone_model(case.test.model)
        flags = driver.get_supported_operations(self.model)
        if not all(flags):
            pytest.skip(f"unsupported: {operation_names(self.model, flags)}")
        self.prepared = prepare(driver, self.model)
        main = self.model.main
        self.input = main.operands[main.input_indexes[0]]
        self.output = main.operands[main.output_indexes[0]]


@pytest.fixture(scope="module")
def models(driver, pytestconfig):
    """Two prepared models with float32 input 0 and output 0 of known shapes, the second of
    another input shape where one exists."""
    cases = [c for c in model_cases(pytestconfig) if _suitable(c.test)]
    if not cases:
        pytest.skip("no test model with a fully specified TENSOR_FLOAT32 input and output")
    first = Prepared(driver, cases[0])
    dims = tuple(first.input.dimensions)
    second_case = next((c for c in cases[1:] if tuple(_float_io(c.test).dimensions) != dims), cases[-1])
    second = Prepared(driver, second_case)
    try:
        driver.allocate(BufferDesc(), [first.prepared], [BufferRole(0, 0)], [])
    except HalError as e:
        if e.status == ErrorStatus.GENERAL_FAILURE:
            pytest.skip("the driver does not allocate device memory (GENERAL_FAILURE for a valid request)")
        raise
    return first, second


@pytest.fixture(autouse=True)
def _mark(request):
    request.node.nnts_op = "memory domains"
    request.node.nnts_dtype = "TENSOR_FLOAT32"


def _expect_invalid(call, what: str, status=ErrorStatus.INVALID_ARGUMENT):
    with pytest.raises(HalError) as info:
        call()
    assert info.value.status == status, f"{what}: {info.value.status.name}, expected {status.name}"


class ForeignPreparedModel(hal.PreparedModel):
    """A prepared model the driver under test did not make."""


def test_allocate_without_roles(driver, models):
    first, _ = models
    _expect_invalid(lambda: driver.allocate(BufferDesc(), [first.prepared], [], []), "allocate with no roles")


@pytest.mark.parametrize("role", [BufferRole(1, 0), BufferRole(-1, 0), BufferRole(0, 99), BufferRole(0, -1)],
                         ids=["model-index-past-end", "negative-model-index", "io-index-past-end", "negative-io-index"])
@pytest.mark.parametrize("kind", ["input", "output"])
def test_allocate_out_of_range_role(kind, role, driver, models):
    first, _ = models
    roles = ([role], []) if kind == "input" else ([], [role])
    _expect_invalid(lambda: driver.allocate(BufferDesc(), [first.prepared], *roles), f"{kind} role {role}")


@pytest.mark.parametrize("probability", [0.0, -0.5, 1.5])
def test_allocate_bad_probability(probability, driver, models):
    first, _ = models
    _expect_invalid(lambda: driver.allocate(BufferDesc(), [first.prepared], [BufferRole(0, 0, probability)], []),
                    f"role with probability {probability}")


def test_allocate_duplicate_role(driver, models):
    first, _ = models
    _expect_invalid(lambda: driver.allocate(BufferDesc(), [first.prepared], [BufferRole(0, 0), BufferRole(0, 0)],
                                            []), "the same role twice")


def test_allocate_foreign_prepared_model(driver, models):
    _expect_invalid(lambda: driver.allocate(BufferDesc(), [ForeignPreparedModel()], [BufferRole(0, 0)], []),
                    "a prepared model of another driver")


def test_allocate_roles_of_different_types(driver, pytestconfig, models):
    first, _ = models
    other = next((c for c in model_cases(pytestconfig) if not c.test.expect_failure and c.test.model.main.input_indexes
                  and _float_io(c.test).type not in (OperandCode.TENSOR_FLOAT32,)
                  and _float_io(c.test).type not in (OperandCode.FLOAT32, OperandCode.INT32, OperandCode.BOOL,
                                                     OperandCode.UINT32, OperandCode.FLOAT16)), None)
    if other is None:
        pytest.skip("no test model with a non-float32 tensor input")
    other = Prepared(driver, other)
    _expect_invalid(lambda: driver.allocate(BufferDesc(), [first.prepared, other.prepared],
                                            [BufferRole(0, 0), BufferRole(1, 0)], []),
                    f"roles of {OperandCode(first.input.type).name} and {OperandCode(other.input.type).name}")


def test_allocate_incompatible_dimensions(driver, models):
    first, second = models
    a, b = tuple(first.input.dimensions), tuple(second.input.dimensions)
    if a == b:
        pytest.skip("no second model with another input shape")
    _expect_invalid(lambda: driver.allocate(BufferDesc(), [first.prepared, second.prepared],
                                            [BufferRole(0, 0), BufferRole(1, 0)], []),
                    f"roles of dimensions {list(a)} and {list(b)}")


def test_allocate_descriptor_conflicts_with_role(driver, models):
    first, _ = models
    dims = tuple(first.input.dimensions)
    for bad in [dims + (1,), (dims[0] + 1,) + dims[1:]]:
        _expect_invalid(lambda: driver.allocate(BufferDesc(bad), [first.prepared], [BufferRole(0, 0)], []),
                        f"descriptor dimensions {list(bad)} for a role of {list(dims)}")


def _allocate_input(driver, prepared: Prepared):
    buffer, token = driver.allocate(BufferDesc(), [prepared.prepared], [BufferRole(0, 0)], [])
    assert token > 0, f"allocate returned token {token}"
    return buffer, token


def _input_bytes(prepared: Prepared) -> np.ndarray:
    return np.ascontiguousarray(prepared.test.inputs[0]).reshape(-1).view(np.uint8).copy()


def test_copy_to_uninitialized(driver, models):
    first, _ = models
    buffer, _ = _allocate_input(driver, first)
    _expect_invalid(lambda: buffer.copy_to(hal.SharedMemory(np.zeros(_input_bytes(first).nbytes, np.uint8))),
                    "copy_to from uninitialized memory", ErrorStatus.GENERAL_FAILURE)


def test_copy_wrong_sizes(driver, models):
    first, _ = models
    buffer, _ = _allocate_input(driver, first)
    data = _input_bytes(first)
    dims = tuple(first.input.dimensions)
    for n in (data.nbytes - 1, data.nbytes + 1):
        _expect_invalid(lambda: buffer.copy_from(hal.SharedMemory(np.zeros(n, np.uint8)), dims),
                        f"copy_from {n} bytes into {data.nbytes}")
    buffer.copy_from(hal.SharedMemory(data.copy()), dims)
    for n in (data.nbytes - 1, data.nbytes + 1):
        _expect_invalid(lambda: buffer.copy_to(hal.SharedMemory(np.zeros(n, np.uint8))),
                        f"copy_to {n} bytes from {data.nbytes}")
    out = hal.SharedMemory(np.zeros(data.nbytes, np.uint8))
    buffer.copy_to(out)
    assert np.array_equal(out.buffer, data), "copy_to did not give back what copy_from put in"


def test_copy_from_wrong_dimensions(driver, models):
    first, _ = models
    buffer, _ = _allocate_input(driver, first)
    data = _input_bytes(first)
    dims = tuple(first.input.dimensions)
    for bad in [dims + (1,), (dims[0] + 1,) + dims[1:], (0,) * len(dims)]:
        _expect_invalid(lambda: buffer.copy_from(hal.SharedMemory(data.copy()), bad),
                        f"copy_from with dimensions {list(bad)} into memory of {list(dims)}")


def _request_with_input_memory(prepared: Prepared, token: int):
    io = make_io(prepared.test, "pool")
    io.request.pools.append(token)
    io.request.inputs[0] = hal.RequestArgument(hal.ArgumentLifetime.POOL, len(io.request.pools) - 1)
    return io


@pytest.mark.parametrize("path", ["sync", "burst", "fenced"])
def test_execute_with_uninitialized_input(path, driver, models):
    first, _ = models
    _, token = _allocate_input(driver, first)
    outcome = run_path(first.prepared, _request_with_input_memory(first, token).request, path)
    assert outcome.status == ErrorStatus.GENERAL_FAILURE, \
        f"an uninitialized device memory as input: {outcome.status.name}, expected GENERAL_FAILURE"


@pytest.mark.parametrize("path", ["sync", "burst", "fenced"])
def test_memory_used_with_another_model(path, driver, models):
    first, second = models
    buffer, token = _allocate_input(driver, first)
    buffer.copy_from(hal.SharedMemory(_input_bytes(first)), tuple(first.input.dimensions))
    outcome = run_path(second.prepared, _request_with_input_memory(second, token).request, path)
    assert outcome.status == ErrorStatus.INVALID_ARGUMENT, \
        f"device memory allocated for another prepared model: {outcome.status.name}, expected INVALID_ARGUMENT"


@pytest.mark.parametrize("path", ["sync", "burst", "fenced"])
def test_memory_used_in_another_role(path, driver, models):
    first, _ = models
    buffer, token = _allocate_input(driver, first)
    buffer.copy_from(hal.SharedMemory(_input_bytes(first)), tuple(first.input.dimensions))
    io = make_io(first.test, "pool")
    io.request.pools.append(token)
    io.request.outputs[0] = hal.RequestArgument(hal.ArgumentLifetime.POOL, len(io.request.pools) - 1)
    outcome = run_path(first.prepared, io.request, path)
    assert outcome.status == ErrorStatus.INVALID_ARGUMENT, \
        f"an input's device memory used as an output: {outcome.status.name}, expected INVALID_ARGUMENT"


def test_execute_with_initialized_input(driver, models):
    """The control: the same request with the memory initialized succeeds."""
    first, _ = models
    buffer, token = _allocate_input(driver, first)
    buffer.copy_from(hal.SharedMemory(_input_bytes(first)), tuple(first.input.dimensions))
    outcome = run_path(first.prepared, _request_with_input_memory(first, token).request, "sync")
    assert outcome.status == ErrorStatus.NONE, f"{outcome.status.name} {outcome.message}"
