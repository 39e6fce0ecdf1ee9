"""VTS generated tests: every test model of CTS (``cts/corpus`` and ``--vectors``) prepared and
executed straight through the driver interface, as AOSP's GeneratedTestHarness does: one test per
model, running the variants below in turn (``nnts.runners.variants``).

Every model runs the synchronous path (arguments in shared memory pools). The first
``NNTS_VTS_SUBSET`` models of each test-vector file (default 1, ``all`` for every one) also run:

* ``async`` (callback; POINTER arguments), ``burst``, ``fenced`` (a second execution waits for
  the first one's fence), all with timing measured;
* ``dynamic``: outputs' dimensions zeroed in a copy of the model (not for IF/WHILE/RANK or scalar
  outputs); ``dynamic-fenced``: the same through execute_fenced, which must reject it with
  INVALID_ARGUMENT (fenced executions need fully specified outputs);
* ``insufficient``: the dynamic model with output 0 one byte short: OUTPUT_INSUFFICIENT_SIZE, with
  output shapes for every output and only output 0 marked insufficient;
* ``device-memory``: inputs and outputs in driver-allocated memory (memory domains);
* ``hardware-buffer``: the synchronous path with its pools BLOB hardware buffers (AOSP's VTS runs
  ashmem, BLOB AHardwareBuffer and device memory).

A model the driver does not fully support (get_supported_operations) and fails to prepare is
skipped as unsupported. Models that must fail have to fail in prepare or execution, with a
HalError (anything else escaping the driver fails the test).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from nnapi_ref import hal
from nnapi_ref.hal import ErrorStatus, HalError
from nnts.runners import ordering, variants
from nnts.runners.model_runner import check_outputs
from nnts.vts.support import (EXPECT_FAILURE_LOOP_TIMEOUT_NS, PATHS, case_marks, clone_model, dynamic_model,
                              first_per_file, has_dynamic_variant, has_unspecified_output, make_io, mark_node,
                              model_cases, prepare, prepare_or_skip, run_path, timing_problems)

SUBSET_VARIANTS = ("async", "burst", "fenced", "dynamic", "dynamic-fenced", "insufficient", "device-memory",
                   "hardware-buffer")
FAILING_VARIANTS = PATHS  # models that must fail: each execution path


@dataclass
class VtsCase:
    base: object   # the CTS case (test model, operation, data type, file)
    variants: tuple[str, ...]

    @property
    def test(self):
        return self.base.test

    @property
    def operation(self) -> str:
        return self.base.operation

    @property
    def dtype(self) -> str:
        return self.base.dtype

    @property
    def id(self) -> str:
        return f"{self.operation}-{self.dtype}-{self.test.name}"


def _variants(case, in_subset: bool) -> list[str]:
    test = case.test
    if test.expect_failure:
        return list(FAILING_VARIANTS) if in_subset else ["sync"]
    if not in_subset:
        return ["sync"]
    out = ["sync"]
    for v in SUBSET_VARIANTS:
        if v in ("dynamic", "dynamic-fenced", "insufficient") and not has_dynamic_variant(test):
            continue
        out.append(v)
    return out


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    cases = model_cases(metafunc.config)
    subset = {id(c) for c in first_per_file(cases, metafunc.config.nnts_vts.subset)}
    params = []
    for c in cases:
        chosen = variants.selected(metafunc.config, tuple(_variants(c, id(c) in subset)))
        if chosen:
            case = VtsCase(c, chosen)
            params.append(pytest.param(case, id=case.id, marks=case_marks(c)))
    metafunc.parametrize("case", ordering.first_pass_params(metafunc, params))


def _check_results(test, io, outcome, n_outputs: int, dynamic: bool) -> None:
    if outcome.status != ErrorStatus.NONE:
        pytest.fail(f"execution failed: {outcome.status.name} {outcome.message}")
    problems = []
    shapes = outcome.shapes
    if dynamic and len(shapes) != n_outputs:
        problems.append(f"{len(shapes)} output shapes for {n_outputs} outputs with unspecified dimensions")
    elif len(shapes) not in (0, n_outputs):
        problems.append(f"{len(shapes)} output shapes for {n_outputs} outputs (must be none or one per output)")
    for i, s in enumerate(shapes):
        if not s.is_sufficient:
            problems.append(f"output {i} reported insufficient after a successful execution")
    if problems:
        pytest.fail("; ".join(problems))
    dims = [tuple(s.dimensions) for s in shapes] if len(shapes) == n_outputs else \
        [tuple(d) for d in test.output_dims]
    problems = check_outputs(test, io.outputs(), dims)
    if problems:
        pytest.fail("; ".join(problems))


def _expect_failure(driver, test, variant: str) -> None:
    """A model that must fail: a HalError from the support query, prepare, or the execution."""
    model = clone_model(test.model)
    try:
        driver.get_supported_operations(model)
        prepared = prepare(driver, model)
    except HalError:
        return
    assert prepared is not None, "prepare_model returned no prepared model and raised nothing"
    io = make_io(test, "pointer" if variant == "async" else "pool")
    outcome = run_path(prepared, io.request, variant, loop_timeout_ns=EXPECT_FAILURE_LOOP_TIMEOUT_NS)
    if outcome.status == ErrorStatus.NONE:
        pytest.fail("the model must fail, but preparing and executing it succeeded")


def _device_memory_io(driver, prepared, test):
    """Inputs and outputs in driver-allocated memory where the driver allocates it (AOSP's
    MEMORY_DOMAIN tests); None if it allocates none."""
    io = make_io(test, "pool")
    request = io.request
    allocated = 0
    readers = list(io.readers)
    for i, value in enumerate(test.inputs):
        if value is None:
            continue
        try:
            buffer, token = driver.allocate(hal.BufferDesc(), [prepared], [hal.BufferRole(0, i)], [])
        except HalError as e:
            if e.status == ErrorStatus.GENERAL_FAILURE:
                continue
            raise
        assert token > 0, f"allocate returned token {token}; tokens are positive"
        v = np.ascontiguousarray(value)
        buffer.copy_from(hal.SharedMemory(v.reshape(-1).view(np.uint8).copy()), v.shape)
        request.pools.append(token)
        request.inputs[i] = hal.RequestArgument(hal.ArgumentLifetime.POOL, len(request.pools) - 1)
        allocated += 1
    for i, expected in enumerate(test.expected):
        try:
            buffer, token = driver.allocate(hal.BufferDesc(), [prepared], [], [hal.BufferRole(0, i)])
        except HalError as e:
            if e.status == ErrorStatus.GENERAL_FAILURE:
                continue
            raise
        assert token > 0, f"allocate returned token {token}; tokens are positive"
        request.pools.append(token)
        request.outputs[i] = hal.RequestArgument(hal.ArgumentLifetime.POOL, len(request.pools) - 1)
        nbytes = expected.nbytes
        dtype = expected.dtype

        def read(buffer=buffer, nbytes=nbytes, dtype=dtype):
            if nbytes == 0:
                return np.zeros(0, dtype)
            memory = hal.SharedMemory(np.zeros(nbytes, np.uint8))
            buffer.copy_to(memory)
            return memory.buffer.view(dtype)
        readers[i] = read
        allocated += 1
    io.readers = readers
    return io if allocated else None


def test_generated(case: VtsCase, driver, request):
    mark_node(request, case)
    variants.run_all(request, case, case.base.path, lambda variant: _run_variant(driver, case.test, variant))


def _run_variant(driver, test, variant: str) -> None:
    if test.expect_failure:
        _expect_failure(driver, test, variant)
        return
    n_outputs = len(test.model.main.output_indexes)
    dynamic = variant in ("dynamic", "dynamic-fenced", "insufficient")
    model = dynamic_model(test.model) if dynamic else clone_model(test.model)
    prepared = prepare_or_skip(driver, test, model)

    if variant == "insufficient":
        if test.expected[0].nbytes <= 1:
            pytest.skip("output 0 has at most one byte: it cannot be made one byte short")
        io = make_io(test, "pool", shrink_output=0)
        outcome = run_path(prepared, io.request, "sync")
        if outcome.status == ErrorStatus.GENERAL_FAILURE:
            pytest.skip("the driver cannot execute this model with unspecified outputs (GENERAL_FAILURE)")
        assert outcome.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, \
            f"output 0 one byte short: expected OUTPUT_INSUFFICIENT_SIZE, got {outcome.status.name} {outcome.message}"
        assert len(outcome.shapes) == n_outputs, \
            f"OUTPUT_INSUFFICIENT_SIZE came with {len(outcome.shapes)} output shapes for {n_outputs} outputs"
        for i, s in enumerate(outcome.shapes):
            assert s.is_sufficient == (i != 0), f"output {i}: is_sufficient {s.is_sufficient}, expected {i != 0}"
            golden = tuple(test.output_dims[i])
            actual = tuple(s.dimensions)
            assert len(actual) == len(golden), f"output {i}: rank {len(actual)} reported, expected {len(golden)}"
            wrong = [j for j, (a, g) in enumerate(zip(actual, golden)) if a != 0 and a != g]
            assert not wrong, f"output {i}: dimensions {list(actual)} reported, expected {list(golden)}"
        return

    if variant == "dynamic-fenced" or (variant == "fenced" and has_unspecified_output(model)):
        io = make_io(test, "pool")
        outcome = run_path(prepared, io.request, "fenced")
        assert outcome.status == ErrorStatus.INVALID_ARGUMENT, \
            f"execute_fenced with unspecified output dimensions must fail with INVALID_ARGUMENT, got " \
            f"{outcome.status.name}"
        return

    if variant == "device-memory":
        io = _device_memory_io(driver, prepared, test)
        if io is None:
            pytest.skip("the driver allocates no device memory for this model's inputs and outputs")
        path, measure = "sync", False
    elif variant == "hardware-buffer":
        io = make_io(test, "hardware_buffer")
        path, measure = "sync", False
    else:
        path = "sync" if variant in ("sync", "dynamic") else variant
        measure = variant != "sync"
        io = make_io(test, "pointer" if path == "async" else "pool")
    outcome = run_path(prepared, io.request, path, measure=measure)
    if dynamic and outcome.status == ErrorStatus.GENERAL_FAILURE:
        # AOSP: a driver may fail a model it cannot run with unspecified output shapes.
        pytest.skip("the driver cannot execute this model with unspecified outputs (GENERAL_FAILURE)")
    problems = timing_problems(outcome, measure) if outcome.status == ErrorStatus.NONE else []
    if problems:
        pytest.fail("; ".join(problems))
    _check_results(test, io, outcome, n_outputs, dynamic)
