"""VTS quality of service (AOSP's QualityOfServiceTests): every priority (LOW, MEDIUM, HIGH) is
accepted; compilations and executions with a deadline of now, in the past, short (1 ms) or none.
AOSP's rule: with a deadline that is already due or short, a driver may either complete (then
with correct results) or report MISSED_DEADLINE_TRANSIENT / MISSED_DEADLINE_PERSISTENT; without a
deadline it must complete. Model: the first fully supported test model of the corpus.

Loop timeouts (AOSP's INFINITE_LOOP_TIMEOUT test kind): a WHILE loop that never ends, executed
with a 1 ms loop timeout on every path, must fail with MISSED_DEADLINE_* (not any error, and not
after the 2 s default); a loop that ends computes its result under the default timeout.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from nnapi_ref.hal import ArgumentLifetime, ErrorStatus, HalError, Request, RequestArgument, SharedMemory
from nnapi_ref.types import PreferenceCode, PriorityCode
from nnts.generators.builders import counting_loop_model
from nnts.runners.model_runner import check_outputs
from nnts.vts.support import PATHS, clone_model, make_io, mark_node, model_cases, prepare, run_path

pytestmark = pytest.mark.vts
MISSED = (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)
DEADLINES = ("now", "past", "short", "unlimited")


def deadline(kind: str) -> int | None:
    now = time.monotonic_ns()
    return {"now": now, "past": now - 1_000_000_000, "short": now + 1_000_000, "unlimited": None}[kind]


@pytest.fixture(scope="module")
def case(driver, pytestconfig):
    for c in model_cases(pytestconfig):
        if c.test.expect_failure or (c.test.min_feature_level or 0) > driver.get_feature_level():
            continue
        if all(driver.get_supported_operations(clone_model(c.test.model))):
            return c
    pytest.skip("the driver fully supports no test model")


@pytest.fixture(autouse=True)
def _mark(request, case):
    mark_node(request, case)


def _results_ok(test, io, outcome) -> list[str]:
    dims = [tuple(s.dimensions) for s in outcome.shapes] if outcome.shapes else [tuple(d) for d in test.output_dims]
    return check_outputs(test, io.outputs(), dims)


@pytest.mark.parametrize("priority", [PriorityCode.LOW, PriorityCode.MEDIUM, PriorityCode.HIGH],
                         ids=["LOW", "MEDIUM", "HIGH"])
@pytest.mark.parametrize("preference", list(PreferenceCode), ids=[p.name for p in PreferenceCode])
def test_prepare_with_priority(priority, preference, case, driver):
    prepared = prepare(driver, clone_model(case.test.model), preference, priority)
    assert prepared is not None
    io = make_io(case.test)
    outcome = run_path(prepared, io.request, "sync")
    assert outcome.status == ErrorStatus.NONE, f"{outcome.status.name} {outcome.message}"
    assert not _results_ok(case.test, io, outcome)


@pytest.mark.parametrize("kind", DEADLINES)
def test_prepare_with_deadline(kind, case, driver):
    try:
        prepared = prepare(driver, clone_model(case.test.model), deadline_ns=deadline(kind))
    except HalError as e:
        assert kind != "unlimited", f"prepare without a deadline failed: {e}"
        assert e.status in MISSED, f"prepare with a deadline {kind}: {e.status.name}, expected success or " \
                                   f"MISSED_DEADLINE_*"
        return
    assert prepared is not None, "prepare_model returned no prepared model and raised nothing"
    io = make_io(case.test)
    outcome = run_path(prepared, io.request, "sync")
    assert outcome.status == ErrorStatus.NONE and not _results_ok(case.test, io, outcome)


@pytest.mark.parametrize("kind", DEADLINES)
@pytest.mark.parametrize("path", PATHS)
def test_execute_with_deadline(path, kind, case, driver):
    prepared = prepare(driver, clone_model(case.test.model))
    io = make_io(case.test, "pointer" if path == "async" else "pool")
    outcome = run_path(prepared, io.request, path, deadline_ns=deadline(kind))
    if outcome.status in MISSED and kind != "unlimited":
        return
    assert outcome.status == ErrorStatus.NONE, \
        f"{path} execution with a deadline {kind}: {outcome.status.name} {outcome.message}, expected success" + \
        ("" if kind == "unlimited" else " or MISSED_DEADLINE_*")
    problems = _results_ok(case.test, io, outcome)
    assert not problems, "; ".join(problems)


@pytest.mark.parametrize("kind", ["now", "past"])
def test_prepare_from_cache_with_deadline(kind, case, driver, tmp_path):
    n_model, n_data = driver.get_number_of_cache_files_needed()
    if n_model == 0 and n_data == 0:
        pytest.skip("the driver needs no cache files")
    files = [open(tmp_path / f"cache{i}", "w+b") for i in range(n_model + n_data)]
    try:
        token = bytes(range(32))
        prepare(driver, clone_model(case.test.model), model_cache=files[:n_model], data_cache=files[n_model:],
                token=token)
        try:
            prepared = driver.prepare_model_from_cache(deadline(kind), files[:n_model], files[n_model:], token)
        except HalError as e:
            assert e.status in MISSED or e.status == ErrorStatus.GENERAL_FAILURE, \
                f"prepare_model_from_cache with a deadline {kind}: {e.status.name}"
            return
        io = make_io(case.test)
        outcome = run_path(prepared, io.request, "sync")
        assert outcome.status == ErrorStatus.NONE and not _results_ok(case.test, io, outcome)
    finally:
        for f in files:
            f.close()


# -- loop timeouts -------------------------------------------------------------------------------

def _loop_request(start: float) -> tuple[Request, SharedMemory]:
    """Input ``start`` and the output of a counting loop model, float32 [1] each, in one pool."""
    pool = SharedMemory(np.zeros(8, np.uint8))
    pool.buffer[:4] = np.frombuffer(np.float32(start).tobytes(), np.uint8)
    return Request([RequestArgument(ArgumentLifetime.POOL, 0, 0, 4)], [RequestArgument(ArgumentLifetime.POOL, 0, 4, 4)],
                   [pool]), pool


def _prepared_loop(driver, step: float):
    model = counting_loop_model(step).hal_model
    if not all(driver.get_supported_operations(model)):
        pytest.skip("the driver does not support WHILE (with LESS and ADD on float32)")
    return prepare(driver, model)


@pytest.mark.parametrize("path", PATHS)
def test_infinite_loop_hits_the_loop_timeout(path, driver, request):
    request.node.nnts_op, request.node.nnts_dtype = "WHILE", "TENSOR_FLOAT32"
    prepared = _prepared_loop(driver, 0.0)
    loop_request, _ = _loop_request(0.0)
    start = time.monotonic()
    outcome = run_path(prepared, loop_request, path, loop_timeout_ns=1_000_000)
    elapsed = time.monotonic() - start
    assert outcome.status in MISSED, f"{path}: an infinite WHILE loop with a 1 ms loop timeout gave " \
                                     f"{outcome.status.name} {outcome.message}, expected MISSED_DEADLINE_*"
    assert elapsed < 1.5, f"{path}: a 1 ms loop timeout fired after {elapsed:.2f} s"


@pytest.mark.parametrize("path", PATHS)
def test_finite_loop_completes(path, driver, request):
    request.node.nnts_op, request.node.nnts_dtype = "WHILE", "TENSOR_FLOAT32"
    prepared = _prepared_loop(driver, 1.0)
    loop_request, pool = _loop_request(0.0)
    outcome = run_path(prepared, loop_request, path)
    assert outcome.status == ErrorStatus.NONE, f"{path}: {outcome.status.name} {outcome.message}"
    assert pool.buffer[4:8].view(np.float32)[0] == 5.0, "WHILE (i < 5) { i += 1 } from 0 must give 5"
