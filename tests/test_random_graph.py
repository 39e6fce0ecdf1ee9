"""The random-graph generator (fuzz/), its comparison criteria and its shrinking: generated models
are valid and the reference computes them; generation is deterministic; the criteria accept and
reject what RandomGraphTest's figures say; a driver whose quant8 ADD is wrong in a way only a
chain of operations shows is caught and shrunk to at most three operations."""
from __future__ import annotations

import collections
import json

import numpy as np
import pytest
from hypothesis import given, settings

from nnapi_ref import ops, vectors
from nnapi_ref.drivers.broken import WrongAddQuant8Sparse
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.hal import ErrorStatus, HalError
from nnapi_ref.runtime import Device
from nnapi_ref.types import Lifetime, OperandCode, OperationCode
from nnts.generators.criteria import SMALL_GRAPH, compare_output
from nnts.generators.families import FAMILIES, NOT_COVERED, SINGLE_FAMILIES
from nnts.generators.graphs import (BOOL8, DATA_TYPES, F16, F32, MAX_LEVEL, Q8, Graph, dimension_cuts,
                                    with_dimension_cut, without_operation, without_output)
from nnts.generators.random_graphs import case_size, generate
from nnts.generators.strategies import models
from nnts.runners.differential import Failure, check, error_failure, run_case, same_failure
from nnts.runners.model_runner import build_model, run_test

REFERENCE = [Device(ReferenceDevice())]
SEEDS = range(150)


def agrees_with_reference(graph: Graph) -> None:
    """The graph is a valid model, and the reference driver computes the values the generator
    recorded for its outputs."""
    outcome = check(graph, REFERENCE, REFERENCE)
    assert outcome.status == "pass", (graph.seed, graph.operation_names, outcome.message)
    for k, value in zip(graph.outputs, outcome.expected):
        np.testing.assert_array_equal(value, graph.values[k])


@pytest.mark.parametrize("level", [27, 29, 30, MAX_LEVEL])
def test_generated_models_are_valid_and_run_on_the_reference(level):
    for seed in SEEDS:
        graph = generate(seed, case_size(seed), level=level)
        assert graph.operations and graph.min_level() <= level
        agrees_with_reference(graph)


def test_operation_families_cover_the_registry():
    """Every operation is drawn in random graphs, or only singly (SINGLE_FAMILIES: drawn by
    name, so random graphs of existing seeds stay as they were), or not covered, with a reason."""
    registry = set(ops.load_all())
    assert set(FAMILIES) | set(SINGLE_FAMILIES) | set(NOT_COVERED) == registry
    assert not set(FAMILIES) & set(NOT_COVERED) and not set(SINGLE_FAMILIES) & (set(FAMILIES) | set(NOT_COVERED))
    drawn = {code for seed in range(40) for code in generate(seed, case_size(seed)).operation_names}
    assert not drawn & {code.name for code in SINGLE_FAMILIES}


@pytest.mark.parametrize("code", sorted(FAMILIES), ids=lambda c: c.name)
def test_every_family_builds_valid_operations(code):
    """Each declaration yields its operation (on some seed) in a model the reference runs."""
    for seed in range(200):
        graph = generate(seed, 1, operations=[code])
        if graph.operation_names == [code.name]:
            agrees_with_reference(graph)
            return
    pytest.fail(f"no seed in 200 gave a {code.name} operation")


def test_graphs_have_the_features_the_issue_asks_for():
    seen = collections.Counter()
    for seed in SEEDS:
        graph = generate(seed, case_size(seed))
        uses = collections.Counter(k for op in graph.operations for k in set(op.inputs))
        produced = {k for op in graph.operations for k in op.outputs}
        seen["shared intermediate"] += any(uses[k] > 1 for k in produced)
        seen["unknown output dims"] += any(0 in graph.operands[k].dimensions or not graph.operands[k].dimensions
                                           for k in graph.outputs)
        seen["tensor constants"] += any(o.lifetime == Lifetime.CONSTANT_COPY and o.type in DATA_TYPES
                                        and o.type != OperandCode.TENSOR_INT32 for o in graph.operands)
        seen["relaxed"] += graph.relaxed
        seen.update(graph.operands[k].type.name for k in graph.outputs)
        assert _connected(graph), (seed, graph.operation_names)
    for feature in ["shared intermediate", "unknown output dims", "tensor constants", "relaxed"]:
        assert seen[feature] >= 5, seen
    for t in DATA_TYPES:
        assert seen[OperandCode(t).name] >= 5, seen


def _connected(graph: Graph) -> bool:
    """Every operation is linked to the first through shared non-constant operands."""
    reached, frontier = {0}, [0]
    while frontier:
        j = frontier.pop()
        mine = set(graph.operations[j].inputs + graph.operations[j].outputs)
        for i, op in enumerate(graph.operations):
            shared = mine & set(op.inputs + op.outputs)
            if i not in reached and any(graph.operands[k].lifetime != Lifetime.CONSTANT_COPY for k in shared):
                reached.add(i)
                frontier.append(i)
    return len(reached) == len(graph.operations)


def _json(graph: Graph) -> str:
    return json.dumps(vectors.test_to_json(graph.to_test("g")))


def test_generation_is_deterministic_and_smaller_sizes_give_prefixes():
    for seed in range(20):
        assert _json(generate(seed, 12)) == _json(generate(seed, 12))
        big, small = generate(seed, 12), generate(seed, 11)
        assert big.operation_names[:11] == small.operation_names


def test_options_limit_operations_and_types():
    allowed = {OperationCode.ADD, OperationCode.MUL, OperationCode.RELU}
    for seed in range(30):
        graph = generate(seed, 6, types=[Q8], operations=allowed)
        assert {OperationCode(op.type) for op in graph.operations} <= allowed
        assert {graph.operands[k].type for k in graph.inputs} <= {Q8}


@settings(max_examples=25, deadline=None)
@given(models(types=["TENSOR_FLOAT16"], max_operations=6))
def test_strategy_draws_valid_models(graph):
    assert 1 <= len(graph.operations) <= 6
    agrees_with_reference(graph)


# -- criteria (RandomGraphTest's figures, hand-computed cases) ------------------------------------

def test_quant8_criteria():
    crit = SMALL_GRAPH[Q8]
    e = np.full(20, 100, np.uint8)
    one = np.arange(9) == 0  # 9 elements: too few for bias and MSE
    assert compare_output(e[:9], e[:9] + np.uint8(12) * one, Q8, crit, "o") is None
    assert "1 of 9 elements beyond 12" in compare_output(e[:9], e[:9] + np.uint8(13) * one, Q8, crit, "o")
    assert "mean squared error 7.2" in compare_output(e, e + np.uint8(12) * (np.arange(20) == 0), Q8, crit, "o")
    off_by_2_every_2nd = e + np.uint8(2) * (np.arange(20) % 2 == 0)  # bias 1, MSE 2: within
    assert compare_output(e, off_by_2_every_2nd, Q8, crit, "o") is None
    off_by_2_all = e + np.uint8(2)  # bias 2, MSE 4
    assert "mean squared error 4" in compare_output(e, off_by_2_all, Q8, crit, "o")
    off_by_3_few = e + np.uint8(3) * (np.arange(20) < 2)  # bias 0.3, MSE 0.9
    assert compare_output(e, off_by_3_few, Q8, crit, "o") is None
    assert compare_output(e[:9], e[:9] + np.uint8(2), Q8, crit, "o") is None  # MSE 4, but only 9 elements


def test_float_criteria_skip_large_and_non_finite_expectations():
    crit = SMALL_GRAPH[F32]
    e = np.array([1.0, 2000.0, np.inf, np.nan], np.float32)
    assert compare_output(e, np.array([1.005, 0.0, 0.0, 0.0], np.float32), F32, crit, "o") is None
    assert compare_output(e, np.array([1.03, 2000.0, np.inf, np.nan], np.float32), F32, crit, "o") is not None
    # float16: elements beyond 1e2 are skipped; the tolerance is 1 + |expected|.
    h = np.array([0.5, 200.0], np.float16)
    assert compare_output(h, np.array([1.75, 0.0], np.float16), F16, SMALL_GRAPH[F16], "o") is None
    assert compare_output(h, np.array([2.25, 200.0], np.float16), F16, SMALL_GRAPH[F16], "o") is not None


def test_bool_criteria_allow_ten_percent():
    e = np.zeros(20, bool)
    assert compare_output(e, np.arange(20) < 2, BOOL8, None, "o") is None
    assert compare_output(e, np.arange(20) < 3, BOOL8, None, "o") is not None
    assert compare_output(e, np.zeros(21, bool), BOOL8, None, "o") is not None  # shape


# -- shrinking ---------------------------------------------------------------------------------

def test_removing_operations_and_outputs_keeps_models_valid():
    for seed in range(1, 40, 2):
        graph = generate(seed, case_size(seed))
        for j in range(len(graph.operations)):
            smaller = without_operation(graph, j)
            assert len(smaller.operations) == len(graph.operations) - 1
            agrees_with_reference(smaller)
        for i in range(len(graph.outputs)):
            smaller = without_output(graph, i)
            if smaller is not None:
                agrees_with_reference(smaller)


def input_elements(graph: Graph) -> int:
    return sum(graph.values[k].size for k in graph.inputs)


def test_cutting_dimensions_keeps_models_valid():
    """Each dimension cut the shrinker tries gives a valid model the reference computes as
    recorded, with fewer input elements, or is refused (None); most are possible."""
    made = refused = 0
    for seed in range(0, 40, 3):
        graph = generate(seed, 1 + seed % 4)
        for axis, size, new_size in dimension_cuts(graph):
            assert new_size < size
            smaller = with_dimension_cut(graph, axis, size, new_size)
            if smaller is None:
                refused += 1
                continue
            made += 1
            assert smaller.operation_names == graph.operation_names
            assert input_elements(smaller) < input_elements(graph)
            agrees_with_reference(smaller)
    assert made > refused > 0, (made, refused)


def test_dimension_cut_slices_broadcast_partners_together():
    """ADD of a [2, 3] and a [3] input: the last dimension (3) is cut in both, the first (2) in
    the first alone, and the values are the leading entries."""
    graph = generate(0, 1, operations=[OperationCode.ADD], types=[F32])
    a, b = graph.operations[0].inputs[:2]
    graph.values[a], graph.values[b] = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(3, np.float32)
    for k in (a, b):
        graph.operands[k].lifetime, graph.operands[k].value = Lifetime.TEMPORARY_VARIABLE, None
    graph.inputs = [a, b]
    out = graph.operations[0].outputs[0]
    graph.operands[out].dimensions = (2, 3)
    last = with_dimension_cut(graph, 0, 3, 1)
    assert last.values[a].tolist() == [[0], [3]] and last.values[b].tolist() == [1]
    assert last.values[out].tolist() == [[1], [4]] and last.operands[out].dimensions == (2, 1)
    first = with_dimension_cut(graph, 1, 2, 1)
    assert first.values[a].tolist() == [[0, 1, 2]] and first.values[b].tolist() == [1, 1, 1]
    agrees_with_reference(last)
    agrees_with_reference(first)


def test_chained_quant8_fault_is_caught_and_shrunk(tmp_path):
    """ADD off by 2 on every fourth element is inside the criteria for ADD alone; random graphs
    catch it where a later operation amplifies it, and shrink it to <= 3 operations with ADD."""
    driver = [Device(WrongAddQuant8Sparse())]
    for seed in range(40):
        alone = generate(seed, 1, types=[Q8], operations=[OperationCode.ADD])
        assert alone.operation_names == ["ADD"] and check(alone, driver, REFERENCE).status == "pass"
    spec = "nnapi_ref.drivers.broken:wrong_add_quant8_sparse"
    # Without RESHAPE, whose target shape is a constant no dimension cut goes through; and the
    # first case failing element by element (a failure by MSE alone needs 10 elements).
    operations = [code for code in FAMILIES if code != OperationCode.RESHAPE]
    for seed in range(600):
        result = run_case(seed, driver, REFERENCE, 30, tmp_path, spec, types=[Q8], operations=operations)
        if result.status == "fail" and "elements beyond" in result.message.split("shrunk to")[1]:
            break
    else:
        pytest.fail("no random graph caught the chained ADD fault")
    shrunk = result.shrunk
    assert "ADD" in shrunk.operation_names and len(shrunk.operations) <= 3, result.message
    # Element 0 of the ADD is always off: one element shows it, and dimension cuts get there.
    assert all(d == 1 for k in shrunk.inputs for d in shrunk.values[k].shape), result.message
    assert "on inputs [1" in result.message
    assert f"shrunk to {len(shrunk.operations)} operation" in result.message
    assert ", ".join(shrunk.operation_names) in result.message
    assert f"nnts vectors run {result.reproducer} --driver {spec}" in result.message
    (test,) = vectors.load_file(result.reproducer)
    doc = json.loads(result.reproducer.read_text())["tests"][0]
    assert len(doc["driver_outputs"]["outputs"]) == len(test.expected)
    assert run_test(test, REFERENCE).status == "pass"
    assert run_test(test, driver).status == "fail"
    assert build_model(test.model).finished


class AddFaultFailingSmallModels(WrongAddQuant8Sparse):
    """The chained ADD fault, and a model of one operation fails to prepare: shrinking that
    accepted any failure would end on one operation with a result code."""

    def prepare_model(self, model, *args, **kwargs):
        if len(model.main.operations) < 2:
            raise HalError(ErrorStatus.GENERAL_FAILURE, "too small to prepare")
        return super().prepare_model(model, *args, **kwargs)


def test_shrinking_keeps_the_failure_it_found(tmp_path):
    """A smaller model that fails differently (a result code where the original mismatched) is
    not a shrinking step; the reproducer records the original failure and the shrunk one, equal."""
    driver = [Device(AddFaultFailingSmallModels())]
    for seed in range(600):
        result = run_case(seed, driver, REFERENCE, 30, tmp_path, "test", types=[Q8])
        if result.status == "fail" and result.failure.kind == "mismatch":
            break
    else:
        pytest.fail("no random graph caught the chained ADD fault")
    assert len(result.shrunk.operations) >= 2, result.message
    outcome = check(result.shrunk, driver, REFERENCE)
    assert outcome.failure == result.failure and outcome.failure.kind == "mismatch"
    record = json.loads(result.reproducer.read_text())["tests"][0]["failure"]
    assert record["original"] == record["shrunk"] == str(result.failure)
    assert "values mismatch in an output of" in record["original"]
    one = without_operation(result.shrunk, 0) if len(result.shrunk.operations) == 2 else None
    if one is not None:  # the step the old shrinker took: a different failure
        smaller = check(one, driver, REFERENCE)
        assert smaller.status == "fail" and not same_failure(result.failure, smaller.failure)


def test_failures_compare_by_kind_operation_and_error_text():
    assert same_failure(Failure("mismatch", "MEAN", "values"), Failure("mismatch", "MEAN", "values"))
    assert not same_failure(Failure("mismatch", "MEAN", "values"), Failure("mismatch", "PRELU", "values"))
    assert not same_failure(Failure("mismatch", "MEAN", "values"), Failure("mismatch", "MEAN", "shape"))
    assert error_failure("OP_FAILED: node 3 (PRELU) failed") == error_failure("OP_FAILED: node 0 (PRELU) failed")
    assert error_failure("OP_FAILED: a") != error_failure("OP_FAILED: b")
    assert error_failure("CRASH: driver killed by signal 11").kind == "crash"
    assert not same_failure(None, None)


def test_reference_failure_is_a_reference_bug(tmp_path, monkeypatch):
    """An exception of the reference on a generated model is reported as a reference bug (its
    own message and reproducer name), before the driver under test is run."""
    def overflowing(self, *args):
        raise OverflowError("cannot convert float infinity to integer")
    broken_reference = type("BrokenReference", (ReferenceDevice,), {"prepare_model": overflowing})
    result = run_case(2, REFERENCE, [Device(broken_reference())], 30, tmp_path, "reference")
    assert result.status == "fail" and result.message.startswith("REFERENCE BUG: ")
    assert "OverflowError" in result.message and "not a finding against the driver under test" in result.message
    assert result.reproducer.name.startswith("reference_bug_2_")
    (test,) = vectors.load_file(result.reproducer)
    assert run_test(test, REFERENCE).status == "pass"
