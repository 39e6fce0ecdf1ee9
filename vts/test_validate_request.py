"""VTS request validation (AOSP's ValidateRequest and ValidateBurst): a valid request for a
prepared test model is made invalid (an input or output removed, a bad pool index, an offset or
length outside its pool, an input one byte short, dimensions that conflict with the model, a
POINTER argument without a buffer) and every execution path must reject it with
INVALID_ARGUMENT: synchronous, callback, burst and fenced, each from the call itself (for the
callback path, at launch, as AOSP's VTS requires). The mutations of pools run again with the
pools BLOB hardware buffers, on the synchronous path.

Models: the first ``NNTS_VTS_SUBSET`` models of each test-vector file (see ``vts/__init__.py``).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterator

import pytest

from nnapi_ref import hal
from nnapi_ref.hal import ArgumentLifetime, ErrorStatus, HalError, Request
from nnapi_ref.types import SCALAR_TYPES
from nnts.runners import ordering
from nnts.vts.support import (PATHS, case_marks, clone_model, first_per_file, has_unspecified_output, make_io,
                              mark_node, model_cases, prepare_or_skip, run_path)


def _replace_arg(request: Request, which: str, i: int, **changes) -> None:
    args = getattr(request, which)
    args[i] = dataclasses.replace(args[i], **changes)


def request_mutations(test) -> Iterator[tuple[str, Callable[[Request], None]]]:
    main = test.model.main
    n_in, n_out = len(main.input_indexes), len(main.output_indexes)
    for i in range(n_in):
        yield f"input {i} removed", lambda r, i=i: r.inputs.pop(i)
    for i in range(n_out):
        yield f"output {i} removed", lambda r, i=i: r.outputs.pop(i)
    fed = [i for i, v in enumerate(test.inputs) if v is not None]
    targets = ([("inputs", fed[0])] if fed else []) + [("outputs", 0)]
    for which, i in targets:
        what = f"{which[:-1]} {i}"
        yield f"{what}: pool index past the pools", lambda r, w=which, i=i: _replace_arg(r, w, i, pool_index=len(r.pools))
        yield f"{what}: negative pool index", lambda r, w=which, i=i: _replace_arg(r, w, i, pool_index=-1)
        yield f"{what}: offset past the pool's end", lambda r, w=which, i=i: _replace_arg(
            r, w, i, offset=r.pools[getattr(r, w)[i].pool_index].size)
        yield f"{what}: negative offset", lambda r, w=which, i=i: _replace_arg(r, w, i, offset=-1)
        yield f"{what}: length past the pool's end", lambda r, w=which, i=i: _replace_arg(
            r, w, i, length=r.pools[getattr(r, w)[i].pool_index].size + 1)
        yield f"{what}: POINTER without a buffer", lambda r, w=which, i=i: _replace_arg(
            r, w, i, lifetime=ArgumentLifetime.POINTER, pointer=None)
    if fed:
        i = fed[0]
        yield f"input {i}: one byte short", lambda r, i=i: _replace_arg(r, "inputs", i, length=r.inputs[i].length - 1)
        operand = main.operands[main.input_indexes[i]]
        dims = tuple(test.inputs[i].shape)
        if operand.type not in SCALAR_TYPES and dims:
            yield f"input {i}: dimensions of another rank", lambda r, i=i, d=dims: _replace_arg(
                r, "inputs", i, dimensions=d + (1,))
            wrong = (dims[0] + 1,) + dims[1:]
            yield f"input {i}: dimensions {list(wrong)} for an operand of {list(dims)}", \
                lambda r, i=i, d=wrong: _replace_arg(r, "inputs", i, dimensions=d)
        elif operand.type in SCALAR_TYPES:
            yield f"input {i}: dimensions for a scalar", lambda r, i=i: _replace_arg(r, "inputs", i, dimensions=(1,))
    out = main.operands[main.output_indexes[0]]
    if out.type not in SCALAR_TYPES and out.dimensions and 0 not in out.dimensions:
        yield "output 0: dimensions of another rank", lambda r, d=tuple(out.dimensions): _replace_arg(
            r, "outputs", 0, dimensions=d + (1,))


def pytest_generate_tests(metafunc):
    if "request_case" not in metafunc.fixturenames:
        return
    cases = [c for c in model_cases(metafunc.config) if not c.test.expect_failure]
    params = []
    for c in first_per_file(cases, metafunc.config.nnts_vts.subset):
        params.append(pytest.param(c, id=f"{c.operation}-{c.dtype}-{c.test.name}", marks=case_marks(c)))
    metafunc.parametrize("request_case", ordering.first_pass_params(metafunc, params))


def _rejection_problem(prepared, request: Request, path: str) -> str | None:
    if path in ("sync", "fenced", "async"):
        try:
            if path == "sync":
                prepared.execute_synchronously(request, False, None, 2_000_000_000)
            elif path == "async":
                callback = hal.ExecutionCallback()
                prepared.execute(request, False, None, 2_000_000_000, callback)
                callback.wait(60)
                return f"accepted at launch (the callback then reported {ErrorStatus(callback.status).name})"
            else:
                fence, _ = prepared.execute_fenced(request, [], False, None, 2_000_000_000, None)
                fence.wait(60)
            return "accepted"
        except HalError as e:
            return None if e.status == ErrorStatus.INVALID_ARGUMENT else f"failed with {e.status.name}"
        except Exception as e:
            return f"raised {type(e).__name__}: {e} (not a HalError)"
    try:
        outcome = run_path(prepared, request, path)
    except Exception as e:
        return f"raised {type(e).__name__}: {e} (not a HalError)"
    if outcome.status == ErrorStatus.NONE:
        return "accepted"
    return None if outcome.status == ErrorStatus.INVALID_ARGUMENT else f"failed with {outcome.status.name}"


def test_validate_request(request_case, driver, request):
    case = request_case
    mark_node(request, case)
    test = case.test
    model = clone_model(test.model)
    prepared = prepare_or_skip(driver, test, model)
    problems = []
    count = 0
    for path in PATHS:
        for description, mutate in request_mutations(test):
            io = make_io(test, "pool")
            mutate(io.request)
            count += 1
            problem = _rejection_problem(prepared, io.request, path)
            if problem:
                problems.append(f"{path}: {description}: {problem}")
        if path == "fenced" and has_unspecified_output(model):
            continue  # fenced executions need fully specified outputs: nothing to run
        # The request before mutation is valid: the driver must not reject everything.
        outcome = run_path(prepared, make_io(test, "pool").request, path)
        assert outcome.status == ErrorStatus.NONE, \
            f"{path}: the unmutated request failed: {outcome.status.name} {outcome.message}"
    for description, mutate in request_mutations(test):
        if "pool" in description or "offset" in description or "length" in description:
            io = make_io(test, "hardware_buffer")
            mutate(io.request)
            count += 1
            problem = _rejection_problem(prepared, io.request, "sync")
            if problem:
                problems.append(f"sync, hardware-buffer pools: {description}: {problem}")
    assert not problems, (f"{len(problems)} of {count} invalid requests not rejected with INVALID_ARGUMENT:\n  "
                          + "\n  ".join(problems[:10]))


def test_burst_memory_tokens(driver, request):
    """A burst execution needs one memory identifier token per pool (AOSP's ValidateBurst)."""
    cases = [c for c in model_cases(request.config) if not c.test.expect_failure]
    case = cases[0]
    mark_node(request, case)
    prepared = prepare_or_skip(driver, case.test, clone_model(case.test.model))
    burst = prepared.configure_execution_burst()
    io = make_io(case.test, "pool")
    with pytest.raises(HalError) as info:
        burst.execute(io.request, [0], False, None, 2_000_000_000)  # two pools, one token
    assert info.value.status == ErrorStatus.INVALID_ARGUMENT
    result = burst.execute(io.request, [0, 1], False, None, 2_000_000_000)
    assert result is not None
