"""Single-operation random tests (nnts/generators/single.py, cts/test_random_operation.py): every operation
has AOSP's tier, cases pass on the reference, a share is wide, and the broken drivers that the
graph tests and the corpus let pass are caught: a fault in DEPTHWISE_CONV_2D's rare form (dilation
and depth multiplier above 1 together), a fault on large tensors only, and relaxed float32 below
float16 precision (while a driver computing relaxed models in float16 passes)."""
from __future__ import annotations

import math

import numpy as np

from nnapi_ref import ops
from nnapi_ref.drivers import broken
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.runtime import Device
from nnapi_ref.types import OperationCode as Op
from nnts.generators import coverage, single
from nnts.generators.coverage import features
from nnts.generators.families import FAMILIES, SINGLE_FAMILIES
from nnts.generators.graphs import F16, F32, MAX_LEVEL
from nnts.generators.random_graphs import generate
from nnts.runners import differential
from nnts.runners.differential import run

REFERENCE = [Device(ReferenceDevice())]
COUNT = len(single.operations())


def test_every_operation_has_aosps_tier():
    assert {code for code, op in ops.load_all().items() if op.accuracy} == set(FAMILIES) | set(SINGLE_FAMILIES)
    assert single.tier(Op.ADD, 30) is single.MEDIUM and single.tier(Op.RESHAPE, 30) is single.STRICT
    assert single.tier(Op.LOGISTIC, 30) is single.RELAXED and single.tier(Op.DEPTHWISE_CONV_2D, 30) is single.CONV
    assert single.tier(Op.DIV, 29) is single.RELAXED and single.tier(Op.DIV, 30) is single.MEDIUM
    assert single.STRICT[F32].mse == 1e-10 and single.CONV[F32].atol == 2e-2 and single.MEDIUM[F16].bias == 1e-3


def test_cases_pass_on_the_reference(tmp_path):
    for seed in range(0, 2 * COUNT, 3):
        result = differential.run_single(seed, REFERENCE, REFERENCE, MAX_LEVEL, tmp_path, "reference")
        assert result.status in ("pass", "skip"), result.message


def test_a_share_of_cases_is_wide():
    """One case in four (per operation) starts from dimensions up to 1000: some reach 100,000
    elements and more; the others stay below 6**4."""
    wide = [s for s in range(4 * COUNT) if single.is_wide(s)]
    assert len(wide) == COUNT
    sizes = [max(math.prod(v.shape) for v in single.generate_case(s, MAX_LEVEL).values.values())
             for s in wide[:40]]
    assert max(sizes) >= 100_000 and sum(n > 4096 for n in sizes) >= 10
    narrow = [max(math.prod(v.shape) for v in single.generate_case(s, MAX_LEVEL).values.values()) for s in range(20)]
    assert max(narrow) < 6 ** 5


def caught(driver, seeds, level=MAX_LEVEL, tmp=None):
    """The first seed whose case fails on ``driver``, or None."""
    for seed in seeds:
        if differential.run_single(seed, [Device(driver)], REFERENCE, level, tmp, "broken").status == "fail":
            return seed
    return None


def test_fault_in_the_rare_depthwise_form_is_caught(tmp_path):
    """Within the first 40 DEPTHWISE_CONV_2D cases, one with dilation and a depth multiplier
    above 1 fails on the broken driver; the cases without that combination pass."""
    index = single.operations().index(Op.DEPTHWISE_CONV_2D)
    seeds = [index + k * COUNT for k in range(40)]
    seed = caught(broken.DilatedDepthwiseMultiplier(), seeds, tmp=tmp_path)
    assert seed is not None
    graph = single.generate_case(seed, MAX_LEVEL)
    assert "depth multiplier > 1 with dilation > 1" in features(graph.operations[0], graph.operands)
    for other in seeds[:seeds.index(seed)]:
        graph = single.generate_case(other, MAX_LEVEL)
        assert "depth multiplier > 1 with dilation > 1" not in features(graph.operations[0], graph.operands)


def test_fault_on_large_tensors_is_caught_by_wide_cases(tmp_path):
    driver = broken.WrongOnLargeTensors()
    narrow = [s for s in range(2 * COUNT) if not single.is_wide(s)]
    assert caught(driver, narrow[::4], tmp=tmp_path) is None
    assert caught(driver, [s for s in range(4 * COUNT) if single.is_wide(s)], tmp=tmp_path) is not None


def test_relaxed_float32_below_float16_precision_is_caught(tmp_path):
    """Among relaxed cases of strict and medium operations, bfloat16 results fail and float16
    results (what relaxed computation allows) pass."""
    relaxed = []
    for seed in range(6 * COUNT):
        code = single.case_operation(seed)
        if ops.get(code).accuracy in ("strict", "medium") and not single.is_wide(seed):
            graph = single.generate_case(seed, MAX_LEVEL)
            if graph.relaxed:
                relaxed.append(seed)
    assert len(relaxed) >= 20
    assert caught(broken.Float16Arithmetic(), relaxed, tmp=tmp_path) is None
    assert caught(broken.RelaxedBfloat16(), relaxed, tmp=tmp_path) is not None


def test_single_only_operations_draw_every_form_and_optional_part():
    """The recurrent operations and IF: LSTM's 23- and 27-input forms, the sequence forms with and
    without final states, and each optional part present and omitted (CIFG, peephole,
    projection, layer normalization, the auxiliary input) over 60 draws of each."""
    for code in sorted(SINGLE_FAMILIES):
        drawn = coverage.Coverage()
        for seed in range(60):
            drawn.add(generate(seed, 2, operations=[code]))
        assert not drawn.missing_forms(code), (code.name, [str(f) for f in drawn.missing_forms(code)])
        assert not drawn.missing_features(code), (code.name, drawn.missing_features(code))


def test_lstms_scratch_buffer_is_the_drivers_own():
    """NNAPI leaves LSTM's scratch buffer to the driver: the output is declared ignored and not
    compared; the three others are."""
    first = single.operations().index(Op.LSTM)
    graph = next(g for g in (single.generate_case(s, MAX_LEVEL) for s in range(first, 40 * COUNT, COUNT))
                 if g.operations)
    scratch = graph.operations[0].outputs[0]
    assert graph.ignored == {scratch}
    assert graph.to_test("lstm").ignored == [k == scratch for k in graph.outputs]


def test_if_runs_the_branch_its_condition_names():
    """IF's branches are a random graph and the same graph with its outputs negated: the cases
    pass on the reference, and the other condition changes the outputs (a driver taking the wrong
    branch fails)."""
    flipped = 0
    for seed in range(12):
        graph = generate(seed, 1, operations=[Op.IF])
        assert graph.operation_names == ["IF"] and len(graph.referenced) == 2
        test = graph.to_test("if")
        expected = run(REFERENCE, test)
        assert all(np.array_equal(e, graph.values[k]) for e, k in zip(expected, graph.outputs))
        condition = graph.operations[0].inputs[0]
        if condition in graph.inputs:
            test.inputs[graph.inputs.index(condition)] = ~test.inputs[graph.inputs.index(condition)]
            assert any(not np.array_equal(e, a) for e, a in zip(expected, run(REFERENCE, test)))
            flipped += 1
    assert flipped >= 4


def test_while_runs_its_body_as_often_as_its_condition_says():
    """WHILE: a counter from 0 against a limit of 0-4, the state through TANH or LOGISTIC each
    time: the reference's outputs are the state after exactly that many steps (computed here in
    numpy) and the limit; every limit is drawn."""
    limits = set()
    for seed in range(30):
        graph = generate(seed, 1, operations=[Op.WHILE])
        condition, body = graph.referenced
        limit = int(condition.operands[2].value[0])
        limits.add(limit)
        state = graph.values[graph.operations[0].inputs[2]].astype(np.float64)  # an input or a constant
        step = np.tanh if body.operations[1].type == Op.TANH else (lambda v: 1 / (1 + np.exp(-v)))
        for _ in range(limit):
            state = step(state + body.operands[2].value)
        outputs = run(REFERENCE, graph.to_test("while"))
        assert np.allclose(outputs[0], state, atol=1e-5)
        assert len(outputs) == 1 or outputs[1].tolist() == [limit]
    assert limits == set(range(5))
