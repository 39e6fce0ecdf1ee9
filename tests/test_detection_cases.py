"""Detection operations and HASHTABLE_LOOKUP in the single-operation random tests
(nnts/generators/detection.py): every form and every NMS variant is drawn, the cases pass on the reference,
their decisions are clear (inputs moved by a rounding's worth keep the same boxes; a driver
computing relaxed models in float16 passes), and two drivers wrong only in one detection
operation, which the AOSP vectors and the random graphs let pass, are caught: BOX_WITH_NMS_LIMIT
without its batch-wide limit, GENERATE_PROPOSALS clipping to the last pixel."""
from __future__ import annotations

import collections

import numpy as np
import pytest

from nnapi_ref.drivers import broken
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.runtime import Device
from nnapi_ref.types import Lifetime, OperationCode as Op
from nnts.generators import coverage, single
from nnts.generators.detection import iou
from nnts.generators.families import FAMILIES, NOT_COVERED
from nnts.generators.graphs import F16, F32, MAX_LEVEL
from nnts.generators.random_graphs import generate
from nnts.runners import differential
from nnts.runners.differential import run

REFERENCE = [Device(ReferenceDevice())]
DETECTION = (Op.BOX_WITH_NMS_LIMIT, Op.GENERATE_PROPOSALS, Op.DETECTION_POSTPROCESSING)
NEW = DETECTION + (Op.HASHTABLE_LOOKUP,)


def test_only_the_incomparable_operations_stay_out():
    assert set(NOT_COVERED) == {Op.LSH_PROJECTION, Op.RANDOM_MULTINOMIAL}
    assert set(NEW) <= set(single.operations()) and not set(NEW) & set(FAMILIES)  # random graphs unchanged
    assert all(single.tier(code, 30) is single.RELAXED for code in DETECTION)
    assert single.tier(Op.HASHTABLE_LOOKUP, 30) is single.STRICT


def _scalar(graph, position: int):
    operand = graph.operands[graph.operations[0].inputs[position]]
    return operand.value.item()


# Limits each operation's draws must show on and off: (name, input position); -1 is no limit.
LIMITS = {Op.BOX_WITH_NMS_LIMIT: [("max detections", 4)],
          Op.GENERATE_PROPOSALS: [("pre-NMS count", 6), ("post-NMS count", 7)]}


@pytest.mark.parametrize("code", NEW, ids=lambda c: c.name)
def test_every_form_and_variant_is_drawn(code):
    """Over 60 draws: every form of the registry (each operand type, at its level), the value
    features coverage names (each NMS kernel, both layouts, both NMS forms and label conventions
    of DETECTION_POSTPROCESSING), limits on and off."""
    drawn, limited = coverage.Coverage(), collections.defaultdict(set)
    for seed in range(60):
        graph = generate(seed, 1, operations=[code])
        assert graph.operation_names == [code.name]
        drawn.add(graph)
        for name, position in LIMITS.get(code, []):
            limited[name].add(_scalar(graph, position) < 0)
    assert not drawn.missing_forms(code), [str(f) for f in drawn.missing_forms(code)]
    assert not drawn.missing_features(code), drawn.missing_features(code)
    assert all(limited[name] == {True, False} for name, _ in LIMITS.get(code, [])), dict(limited)


def test_coverage_report_lists_the_forms(capsys):
    """The coverage report of the single-operation cases lists the new operations' forms: over
    20 x 104 seeds at the highest level (20 cases of each) every one is drawn; ``--single`` on the command line."""
    drawn = coverage.measure_single(20 * len(single.operations()), levels=(MAX_LEVEL,))
    out = coverage.report(drawn, codes=list(NEW))
    for code, forms in ((Op.BOX_WITH_NMS_LIMIT, 4), (Op.GENERATE_PROPOSALS, 4), (Op.DETECTION_POSTPROCESSING, 2),
                        (Op.HASHTABLE_LOOKUP, 3)):
        assert f"{code.name}: {forms}/{forms} forms" in out, out
    assert "never drawn" not in out and "gaussian NMS x" in out and "NCHW x" in out and "fast NMS x" in out
    assert coverage.main(["--single", "--seeds", "2", "--operation", "box_with_nms_limit"]) == 0
    assert capsys.readouterr().out.startswith("10 graphs\nBOX_WITH_NMS_LIMIT: ")


def _seeds(code: Op, count: int) -> list[int]:
    index, n = single.operations().index(code), len(single.operations())
    return [index + k * n for k in range(count)]


@pytest.mark.parametrize("code", NEW, ids=lambda c: c.name)
def test_cases_pass_on_the_reference(code, tmp_path):
    """Every case draws a valid operation (no skip) and passes, at the highest level and at 29."""
    for level in (MAX_LEVEL, 29):
        for seed in _seeds(code, 25):
            result = differential.run_single(seed, REFERENCE, REFERENCE, level, tmp_path, "reference")
            assert result.status == "pass", (seed, level, result.message)


def _nudged(graph, rng):
    """The test model of ``graph`` with each float input and float constant of its operation
    moved by a relative 2e-3 (more than float16 rounding; quantized data as it is)."""
    test = graph.to_test("nudged")
    for i, k in enumerate(graph.inputs):
        if test.inputs[i].dtype.kind == "f":
            test.inputs[i] = (test.inputs[i] * (1 + rng.uniform(-2e-3, 2e-3, test.inputs[i].shape))).astype(
                test.inputs[i].dtype)
    for operand in test.model.main.operands:
        if operand.lifetime == Lifetime.CONSTANT_COPY and operand.type in (F32, F16):
            operand.value = (operand.value * (1 + rng.uniform(-2e-3, 2e-3, operand.value.shape))).astype(
                operand.value.dtype)
    return test


@pytest.mark.parametrize("code", DETECTION, ids=lambda c: c.name)
def test_decisions_are_clear_of_rounding(code):
    """Float cases run on inputs moved by 2e-3 of themselves (what float16 rounding or a
    different order of operations could do, and more) keep the same boxes: the same output
    shapes, classes and batches, the scores and boxes within 2%."""
    rng, checked = np.random.default_rng(0), 0
    for seed in _seeds(code, 40):
        graph = single.generate_case(seed, MAX_LEVEL)
        if graph.operands[graph.operations[0].inputs[0]].type not in (F32, F16):
            continue
        expected = [graph.values[k] for k in graph.outputs]
        for attempt in range(3):
            actual = run(REFERENCE, _nudged(graph, rng))
            for e, a in zip(expected, actual):
                assert e.shape == a.shape, (seed, e.shape, a.shape)
                if e.dtype.kind == "i":
                    assert np.array_equal(e, a), seed
                else:
                    assert np.allclose(a, e, rtol=2e-2, atol=2e-2), seed
        checked += 1
    assert checked >= 15


def test_a_driver_computing_relaxed_models_in_float16_passes(tmp_path):
    """Relaxed cases (float32 computed at float16 precision, as NNAPI allows) keep every decision."""
    driver, relaxed = [Device(broken.Float16Arithmetic())], 0
    for code in DETECTION:
        for seed in _seeds(code, 60):
            if single.generate_case(seed, MAX_LEVEL).relaxed:
                relaxed += 1
                result = differential.run_single(seed, driver, REFERENCE, MAX_LEVEL, tmp_path, "float16")
                assert result.status == "pass", result.message
    assert relaxed >= 20


def _nms_as_documented(scores, boxes, batches, score_threshold, limit, kernel, iou_threshold, sigma,
                       nms_threshold):
    """BOX_WITH_NMS_LIMIT as NeuralNetworksTypes.h describes it, written here independently of the
    reference: per batch and class (1 on), candidates above the score threshold; repeatedly keep
    the best, rescore the others by the kernel of their IoU with it and drop those below the NMS
    score threshold, at most ``limit`` per class; the batch's best ``limit`` over all classes,
    grouped by class, best first. Returns (score, box, class, batch) rows."""
    rows_out = []
    for batch in np.unique(batches):
        kept = []
        for c in range(1, scores.shape[1]):
            live = {r: scores[r, c] for r in np.nonzero(batches == batch)[0] if scores[r, c] > score_threshold}
            picked = 0
            while live and (limit < 0 or picked < limit):
                best = max(live, key=live.get)
                kept.append((live.pop(best), c, best))
                picked += 1
                for r in list(live):
                    o = iou(boxes[best, c][None], boxes[r, c][None])[0, 0]
                    live[r] *= (np.exp(-o * o / sigma) if kernel == 2 else 1.0 if o < iou_threshold
                                else 0.0 if kernel == 0 else 1.0 - o)
                    if live[r] < nms_threshold:
                        del live[r]
        kept = sorted(kept, key=lambda k: -k[0])[:limit if limit >= 0 else None]
        rows_out += [(s, boxes[r, c], c, batch) for s, c, r in sorted(kept, key=lambda k: (k[1], -k[0]))]
    return rows_out


def test_box_with_nms_limit_keeps_what_the_documentation_says():
    """The reference's BOX_WITH_NMS_LIMIT outputs on 40 generated cases (every kernel and type)
    are the boxes a plain transcription of NNAPI's description keeps, in its order."""
    for seed in _seeds(Op.BOX_WITH_NMS_LIMIT, 40):
        graph = single.generate_case(seed, MAX_LEVEL)
        op = graph.operations[0]
        value = lambda k: graph.values.get(k, graph.operands[k].value)
        real = lambda k: ((value(k).astype(np.float64) - graph.operands[k].zero_point) * graph.operands[k].scale
                          if graph.operands[k].scale else value(k).astype(np.float64))
        scores, boxes, batches = real(op.inputs[0]), real(op.inputs[1]), value(op.inputs[2])
        boxes = boxes.reshape(len(scores), -1, 4)
        scalars = [value(k).item() for k in op.inputs[3:]]
        expected = _nms_as_documented(scores, boxes, batches, *scalars)
        out_scores, out_boxes, out_classes, out_batches = (real(k) for k in op.outputs)
        assert len(out_scores) == len(expected), seed
        quant_step = graph.operands[op.outputs[0]].scale
        for (s, box, c, batch), a, b, cls, bt in zip(expected, out_scores, out_boxes, out_classes, out_batches):
            assert (cls, bt) == (c, batch) and np.array_equal(b, box), seed
            assert abs(a - s) <= max(quant_step, 1e-3 * abs(s)), (seed, a, s)


def test_iou_of_corner_boxes():
    boxes = np.array([[0, 0, 2, 2], [1, 1, 3, 3], [5, 5, 6, 6]], float)
    assert np.allclose(iou(boxes, boxes), [[1, 1 / 7, 0], [1 / 7, 1, 0], [0, 0, 1]])


def test_nms_limit_on_classes_only_is_caught(tmp_path):
    """BOX_WITH_NMS_LIMIT keeping max detections per class but not per batch: the AOSP vectors
    (cts/test_generated.py, 36 BOX_WITH_NMS_LIMIT tests) pass on it and the random graphs never
    draw the operation; one of the first 40 single-operation cases fails, with the output shape
    as the tell, and every case of the other operations passes on it."""
    driver = [Device(broken.NmsLimitPerClass())]
    failed = None
    for seed in _seeds(Op.BOX_WITH_NMS_LIMIT, 40):
        result = differential.run_single(seed, driver, REFERENCE, MAX_LEVEL, tmp_path, "broken")
        if result.status == "fail":
            failed = result
            break
    assert failed is not None and "shape" in failed.message
    assert Op.BOX_WITH_NMS_LIMIT not in FAMILIES
    for code in (Op.GENERATE_PROPOSALS, Op.DETECTION_POSTPROCESSING, Op.ROI_ALIGN, Op.ADD):
        for seed in _seeds(code, 3):
            assert differential.run_single(seed, driver, REFERENCE, MAX_LEVEL, tmp_path, "broken").status == "pass"


def test_proposals_clipped_to_the_last_pixel_are_caught(tmp_path):
    """GENERATE_PROPOSALS clipping to [0, width - 1] x [0, height - 1] (Detectron's convention):
    the AOSP vectors (36 GENERATE_PROPOSALS tests) pass on it; among the first 40 cases, those
    whose image edge clips or drops a box fail (float32 cases: a pixel is within the quant8 and
    float16 tolerances unless a box is dropped)."""
    driver = [Device(broken.ProposalsClipLastPixel())]
    statuses = [differential.run_single(seed, driver, REFERENCE, MAX_LEVEL, tmp_path, "broken").status
                for seed in _seeds(Op.GENERATE_PROPOSALS, 40)]
    assert statuses.count("fail") >= 4 and set(statuses) == {"pass", "fail"}
    for seed in _seeds(Op.BOX_WITH_NMS_LIMIT, 3):
        assert differential.run_single(seed, driver, REFERENCE, MAX_LEVEL, tmp_path, "broken").status == "pass"


@pytest.mark.parametrize("level", (27, 28))
def test_operations_above_the_drivers_level_are_skipped(level, tmp_path):
    """A driver of feature level 27 or 28: every operation's case is drawn or skipped as having
    no form at the level (POW, AXIS_ALIGNED_BBOX_TRANSFORM, HEATMAP_MAX_KEYPOINT and the detection
    operations start from a type of their own, none below level 29: their starts raised
    ValueError)."""
    statuses = collections.Counter()
    for seed in range(len(single.operations())):
        result = differential.run_single(seed, REFERENCE, REFERENCE, level, tmp_path, "reference")
        statuses[result.status] += 1
        code = single.case_operation(seed)
        if code in (Op.POW, Op.AXIS_ALIGNED_BBOX_TRANSFORM, Op.HEATMAP_MAX_KEYPOINT) + DETECTION:
            assert result.status == "skip" and "no valid operation" in result.message
    assert set(statuses) == {"pass", "skip"} and statuses["pass"] >= 25
