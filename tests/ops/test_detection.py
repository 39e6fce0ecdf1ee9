"""AXIS_ALIGNED_BBOX_TRANSFORM, BOX_WITH_NMS_LIMIT, GENERATE_PROPOSALS, DETECTION_POSTPROCESSING,
HEATMAP_MAX_KEYPOINT: hand-computed cases and validation."""
import math

import numpy as np
import pytest

from nnapi_ref.errors import NnapiError
from nnapi_ref.types import OperandCode as T, OperationCode as O, ResultCode
from nnts.generators.builders import output, run_operation, scalar, tensor

F32, I32, Q16 = T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT16_ASYMM


def error_code(fn, *args, **kwargs):
    with pytest.raises(NnapiError) as e:
        fn(*args, **kwargs)
    return e.value.code


# ---------------------------------------------------------------------------------------------- bbox transform

def bbox(rois, deltas, batches, info, t=F32, delta_t=None, delta_scale=0.0, delta_zp=0, box_scale=0.0):
    delta_t = delta_t or t
    ins = [tensor(t, rois, box_scale), tensor(delta_t, deltas, delta_scale, delta_zp), tensor(I32, batches),
           tensor(t, info, box_scale)]
    return run_operation(O.AXIS_ALIGNED_BBOX_TRANSFORM, ins, [output(t, None, box_scale)])[0]


def test_bbox_transform_by_hand():
    # box (10,10)-(20,30): w 10, h 20, centre (15, 20). Deltas (0.1, 0.2, ln 2, 0):
    # centre (15 + 1, 20 + 4), size (20, 20) -> (6, 14)-(26, 34). Class 2 has zero deltas.
    rois = [[10, 10, 20, 30]]
    deltas = [[0.1, 0.2, math.log(2), 0, 0, 0, 0, 0]]
    out = bbox(rois, deltas, [0], [[100, 100]])
    np.testing.assert_allclose(out, [[6, 14, 26, 34, 10, 10, 20, 30]], rtol=1e-5)
    # clipped to an image of height 30, width 25
    out = bbox(rois, deltas, [0], [[30, 25]])
    np.testing.assert_allclose(out, [[6, 14, 25, 30, 10, 10, 20, 30]], rtol=1e-5)


def test_bbox_transform_picks_image_by_batch():
    out = bbox([[0, 0, 50, 50], [0, 0, 50, 50]], np.zeros((2, 4)), [1, 0], [[40, 40], [20, 30]])
    np.testing.assert_allclose(out, [[0, 0, 30, 20], [0, 0, 40, 40]])


@pytest.mark.parametrize("delta_t, zp", [(T.TENSOR_QUANT8_ASYMM, 128), (T.TENSOR_QUANT8_ASYMM_SIGNED, 0)])
def test_bbox_transform_quantized(delta_t, zp):
    # boxes in units of 1/8; deltas 0.1 and 0.2 at scale 0.1
    rois = np.array([[10, 10, 20, 30]], np.uint16) * 8
    deltas = np.array([[1, 2, 0, 0]]) + zp
    out = bbox(rois, deltas, [0], np.array([[100, 100]], np.uint16) * 8, t=Q16, delta_t=delta_t,
               delta_scale=0.1, delta_zp=zp, box_scale=0.125)
    assert out.dtype == np.uint16
    np.testing.assert_allclose(out, np.array([[11, 14, 21, 34]]) * 8, atol=1)


def test_bbox_transform_validation():
    ok = ([[0, 0, 1, 1]], [[0, 0, 0, 0]], [0], [[10, 10]])
    assert error_code(bbox, ok[0], [[0, 0, 0]], *ok[2:]) == ResultCode.BAD_DATA          # deltas not 4k
    assert error_code(bbox, ok[0], ok[1], [0, 0], ok[3]) == ResultCode.BAD_DATA          # batches per ROI
    assert error_code(bbox, ok[0], ok[1], ok[2], [[10, 10, 1]]) == ResultCode.BAD_DATA   # image info [n, 2]
    assert error_code(bbox, [[0, 0, 1]], [[0, 0, 0]], *ok[2:]) == ResultCode.BAD_DATA    # ROIs [n, 4]
    assert error_code(bbox, np.array([[0, 0, 8, 8]], np.uint16), [[0, 0, 0, 0]], [0],
                      np.array([[80, 80]], np.uint16), t=Q16, delta_t=T.TENSOR_QUANT8_ASYMM, delta_scale=0.1,
                      box_scale=0.25) == ResultCode.BAD_DATA                             # scale must be 0.125
    assert error_code(bbox, [[2, 0, 1, 1]], *ok[1:]) == ResultCode.OP_FAILED              # x2 < x1
    assert error_code(bbox, ok[0], ok[1], [1], ok[3]) == ResultCode.OP_FAILED             # no batch 1


# ---------------------------------------------------------------------------------------------- BOX_WITH_NMS_LIMIT

A, B, C = [0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]
IOU_AB = 81 / 119            # intersection 9 x 9, union 100 + 100 - 81


def nms(scores, boxes, batches, score_thr=0.3, max_det=-1, kernel=0, iou=0.5, sigma=0.5, nms_thr=0.1,
        t=F32, box_t=None, scale=0.0, zp=0, box_scale=0.0):
    box_t = box_t or t
    f = T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32
    ins = [tensor(t, scores, scale, zp), tensor(box_t, boxes, box_scale), tensor(I32, batches),
           scalar(f, score_thr), scalar(T.INT32, max_det), scalar(T.INT32, kernel), scalar(f, iou),
           scalar(f, sigma), scalar(f, nms_thr)]
    outs = [output(t, None, scale, zp), output(box_t, None, box_scale), output(I32), output(I32)]
    return run_operation(O.BOX_WITH_NMS_LIMIT, ins, outs)


def three_boxes(sa=0.9, sb=0.8, sc=0.7):
    scores = [[0.0, sa], [0.0, sb], [0.0, sc]]
    boxes = [[0, 0, 0, 0] + A, [0, 0, 0, 0] + B, [0, 0, 0, 0] + C]
    return scores, boxes, [0, 0, 0]


def test_hard_nms_three_boxes_by_hand():
    s, b, cls, bat = nms(*three_boxes())          # IoU(A, B) = 0.68 >= 0.5: B is suppressed
    np.testing.assert_allclose(s, [0.9, 0.7])
    np.testing.assert_array_equal(b, [A, C])
    np.testing.assert_array_equal(cls, [1, 1])
    np.testing.assert_array_equal(bat, [0, 0])
    s, b, _, _ = nms(*three_boxes(), iou=0.7)     # 0.68 < 0.7: all kept, by score
    np.testing.assert_array_equal(b, [A, B, C])


def test_linear_and_gaussian_nms_by_hand():
    s, b, _, _ = nms(*three_boxes(), kernel=1, nms_thr=0.1)
    np.testing.assert_allclose(s, [0.9, 0.7, 0.8 * (1 - IOU_AB)], rtol=1e-5)
    np.testing.assert_array_equal(b, [A, C, B])
    s, b, _, _ = nms(*three_boxes(), kernel=1, nms_thr=0.3)   # 0.255 < 0.3: dropped
    np.testing.assert_array_equal(b, [A, C])
    s, b, _, _ = nms(*three_boxes(), kernel=2, sigma=0.5, nms_thr=0.1)
    gauss = 0.8 * math.exp(-IOU_AB ** 2 / 0.5)
    np.testing.assert_allclose(s, [0.9, 0.7, gauss], rtol=1e-5)


def test_nms_score_threshold_and_max_detections():
    s, b, _, _ = nms(*three_boxes(), score_thr=0.75)   # C (0.7) is not a candidate
    np.testing.assert_array_equal(b, [A])
    s, b, _, _ = nms(*three_boxes(), iou=0.9, max_det=2)
    np.testing.assert_allclose(s, [0.9, 0.8])


def test_nms_outputs_grouped_by_class():
    scores = [[0.0, 0.6, 0.95], [0.0, 0.7, 0.1]]
    boxes = [A + A + A, C + C + C]
    s, b, cls, _ = nms(scores, boxes, [0, 0])
    np.testing.assert_allclose(s, [0.7, 0.6, 0.95])
    np.testing.assert_array_equal(cls, [1, 1, 2])
    np.testing.assert_array_equal(b, [C, A, A])
    s, _, cls, _ = nms(scores, boxes, [0, 0], max_det=2)   # best two overall, then by class
    np.testing.assert_allclose(s, [0.7, 0.95])
    np.testing.assert_array_equal(cls, [1, 2])


def test_nms_batches_are_independent():
    scores = [[0, 0.9], [0, 0.8], [0, 0.5]]
    boxes = [[0] * 4 + A, [0] * 4 + B, [0] * 4 + B]
    s, b, _, bat = nms(scores, boxes, [0, 0, 1])
    np.testing.assert_allclose(s, [0.9, 0.5])
    np.testing.assert_array_equal(bat, [0, 1])


def test_nms_may_keep_nothing():
    s, b, cls, bat = nms(*three_boxes(), score_thr=0.95)
    assert s.shape == (0,) and b.shape == (0, 4) and cls.shape == (0,) and bat.shape == (0,)


def test_nms_quantized():
    scores = np.array([[0, 90], [0, 80], [0, 70]], np.uint8)       # scale 0.01
    boxes = np.array(three_boxes()[1], np.uint16) * 8
    s, b, cls, _ = nms(scores, boxes, [0, 0, 0], t=T.TENSOR_QUANT8_ASYMM, box_t=Q16, scale=0.01, box_scale=0.125)
    np.testing.assert_array_equal(s, [90, 70])
    np.testing.assert_array_equal(b, np.array([A, C]) * 8)
    s, _, _, _ = nms(scores.astype(np.int8) - 50, boxes, [0, 0, 0], t=T.TENSOR_QUANT8_ASYMM_SIGNED, box_t=Q16,
                     scale=0.01, zp=-50, box_scale=0.125)
    np.testing.assert_array_equal(s, [40, 20])


def test_nms_validation():
    s, b, bat = three_boxes()
    assert error_code(nms, s, b, bat, kernel=3) == ResultCode.BAD_DATA                   # unknown kernel
    assert error_code(nms, [[0.1], [0.2], [0.3]], [A, B, C], bat) == ResultCode.BAD_DATA  # one class only
    assert error_code(nms, s, [A, B, C], bat) == ResultCode.BAD_DATA                     # boxes not [n, 4 * classes]
    assert error_code(nms, s, b, [0, 0]) == ResultCode.BAD_DATA                          # batches per box


# ---------------------------------------------------------------------------------------------- GENERATE_PROPOSALS

def proposals(scores, deltas, anchors, info, h_stride=1.0, w_stride=1.0, pre=-1, post=-1, iou=0.5,
              min_size=0.0, nchw=False):
    ins = [tensor(F32, scores), tensor(F32, deltas), tensor(F32, anchors), tensor(F32, info),
           scalar(T.FLOAT32, h_stride), scalar(T.FLOAT32, w_stride), scalar(T.INT32, pre), scalar(T.INT32, post),
           scalar(T.FLOAT32, iou), scalar(T.FLOAT32, min_size), scalar(T.BOOL, nchw)]
    return run_operation(O.GENERATE_PROPOSALS, ins, [output(F32), output(F32), output(I32)])


def test_proposals_nms_by_hand():
    scores = np.array([0.8, 0.9], np.float32).reshape(1, 1, 1, 2)
    deltas = np.zeros((1, 1, 1, 8), np.float32)
    s, r, b = proposals(scores, deltas, [A, B], [[100, 100]])    # IoU(A, B) = 0.68: A suppressed by B
    np.testing.assert_allclose(s, [0.9])
    np.testing.assert_array_equal(r, [B])
    np.testing.assert_array_equal(b, [0])
    s, r, _ = proposals(scores, deltas, [A, B], [[100, 100]], iou=0.9)
    np.testing.assert_array_equal(r, [B, A])
    s, r, b = proposals(scores, deltas, [A, B], [[100, 100]], min_size=10.0)   # widths 10 are not > 10
    assert s.shape == (0,) and r.shape == (0, 4) and b.shape == (0,)


def test_proposals_anchor_shifts_and_pre_nms():
    # a 2x2 map, one 4x4 anchor, stride 8: anchors move by (8 * w, 8 * h)
    scores = np.array([0.1, 0.2, 0.3, 0.4], np.float32).reshape(1, 2, 2, 1)
    deltas = np.zeros((1, 2, 2, 4), np.float32)
    s, r, _ = proposals(scores, deltas, [[0, 0, 4, 4]], [[100, 100]], h_stride=8.0, w_stride=8.0)
    np.testing.assert_allclose(s, [0.4, 0.3, 0.2, 0.1])
    np.testing.assert_array_equal(r, [[8, 8, 12, 12], [0, 8, 4, 12], [8, 0, 12, 4], [0, 0, 4, 4]])
    s, _, _ = proposals(scores, deltas, [[0, 0, 4, 4]], [[100, 100]], h_stride=8.0, w_stride=8.0, pre=2)
    np.testing.assert_allclose(s, [0.4, 0.3])
    s, _, _ = proposals(scores, deltas, [[0, 0, 4, 4]], [[100, 100]], h_stride=8.0, w_stride=8.0, post=3)
    np.testing.assert_allclose(s, [0.4, 0.3, 0.2])
    nchw = proposals(scores.transpose(0, 3, 1, 2), deltas.transpose(0, 3, 1, 2), [[0, 0, 4, 4]], [[100, 100]],
                     h_stride=8.0, w_stride=8.0, nchw=True)
    np.testing.assert_array_equal(nchw[1], r)


def test_proposals_validation():
    scores = np.zeros((1, 1, 1, 2), np.float32)
    assert error_code(proposals, scores, np.zeros((1, 1, 1, 4)), [A, B], [[9, 9]]) == ResultCode.BAD_DATA
    assert error_code(proposals, scores, np.zeros((1, 1, 1, 8)), [A], [[9, 9]]) == ResultCode.BAD_DATA
    assert error_code(proposals, scores, np.zeros((1, 1, 1, 8)), [A, B], [[9, 9, 9]]) == ResultCode.BAD_DATA
    assert error_code(proposals, scores, np.zeros((1, 1, 1, 8)), [A, B], [[9, 9]],
                      h_stride=0.0) == ResultCode.BAD_DATA


# ---------------------------------------------------------------------------------------------- DETECTION_POSTPROCESSING

ANCHORS = [[5, 5, 10, 10], [50, 50, 10, 10]]           # (ctr_y, ctr_x, h, w)
DP_SCORES = [[[0, 0.9, 0.2], [0, 0.3, 0.8]]]


def postprocess(scores, deltas, anchors, scales=(10.0, 10.0, 5.0, 5.0), regular=False, max_det=2,
                max_cls=1, per_class=1, score_thr=0.1, iou=0.5, bg_in_label=False):
    ins = [tensor(F32, scores), tensor(F32, deltas), tensor(F32, anchors)]
    ins += [scalar(T.FLOAT32, v) for v in scales]
    ins += [scalar(T.BOOL, regular), scalar(T.INT32, max_det), scalar(T.INT32, max_cls),
            scalar(T.INT32, per_class), scalar(T.FLOAT32, score_thr), scalar(T.FLOAT32, iou),
            scalar(T.BOOL, bg_in_label)]
    return run_operation(O.DETECTION_POSTPROCESSING, ins, [output(F32), output(F32), output(I32), output(I32)])


def test_postprocess_fast_nms_by_hand():
    s, r, c, n = postprocess(DP_SCORES, np.zeros((1, 2, 4)), ANCHORS)
    np.testing.assert_allclose(s, [[0.9, 0.8]])
    np.testing.assert_allclose(r, [[[0, 0, 10, 10], [45, 45, 55, 55]]])    # (y1, x1, y2, x2)
    np.testing.assert_array_equal(c, [[0, 1]])                              # background not a label
    np.testing.assert_array_equal(n, [2])


def test_postprocess_decodes_deltas_by_hand():
    # centre y 5 + h(10) * dy(10) / scale_y(10) = 15; h = 10 * exp(5 ln 2 / scale_h(5)) = 20
    deltas = np.array([[[10, 0, 5 * math.log(2), 0], [0, 0, 0, 0]]], np.float32)
    _, r, _, _ = postprocess(DP_SCORES, deltas, ANCHORS)
    np.testing.assert_allclose(r[0, 0], [5, 0, 25, 10], rtol=1e-5, atol=1e-5)


def test_postprocess_regular_nms_and_labels():
    s, r, c, n = postprocess(DP_SCORES, np.zeros((1, 2, 4)), ANCHORS, regular=True, max_det=3, per_class=1,
                             bg_in_label=True)
    np.testing.assert_allclose(s, [[0.9, 0.8, 0]])
    np.testing.assert_array_equal(c, [[1, 2, 0]])
    np.testing.assert_array_equal(n, [2])


def test_postprocess_validation():
    z = np.zeros((1, 2, 4))
    assert error_code(postprocess, DP_SCORES, z, ANCHORS, max_det=0) == ResultCode.BAD_DATA
    assert error_code(postprocess, DP_SCORES, z, ANCHORS, scales=(0.0, 1.0, 1.0, 1.0)) == ResultCode.BAD_DATA
    assert error_code(postprocess, DP_SCORES, z, ANCHORS, max_cls=0) == ResultCode.BAD_DATA
    assert error_code(postprocess, DP_SCORES, z, ANCHORS, regular=True, per_class=0) == ResultCode.BAD_DATA
    assert error_code(postprocess, DP_SCORES, np.zeros((1, 2, 3)), ANCHORS) == ResultCode.BAD_DATA
    assert error_code(postprocess, [[[0.1], [0.2]]], z, ANCHORS) == ResultCode.BAD_DATA  # one class


# ---------------------------------------------------------------------------------------------- HEATMAP_MAX_KEYPOINT

def heatmap(maps, boxes, nchw=False, t=F32, box_t=None, scale=0.0, zp=0, box_scale=0.0, out_scale=None):
    box_t = box_t or t
    ins = [tensor(t, maps, scale, zp), tensor(box_t, boxes, box_scale), scalar(T.BOOL, nchw)]
    outs = [output(t, None, scale if out_scale is None else out_scale, zp), output(box_t, None, box_scale)]
    return run_operation(O.HEATMAP_MAX_KEYPOINT, ins, outs)


def quadratic(size, x0, y0):
    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    return -((x - x0) ** 2 + (y - y0) ** 2)


def test_heatmap_subpixel_peak_by_hand():
    # a quadratic peak at (x, y) = (1.25, 2): the 3x3 Taylor fit is exact, so the keypoint is the
    # peak; heatmap cell k covers [k, k + 1) of size/width of the box, whose centre is k + 0.5
    maps = quadratic(4, 1.25, 2.0).reshape(1, 4, 4, 1)
    s, k = heatmap(maps, [[0, 0, 8, 4]])
    np.testing.assert_allclose(s, [[0.0]], atol=1e-5)
    np.testing.assert_allclose(k, [[[(1.25 + 0.5) / 4 * 8, (2 + 0.5) / 4 * 4]]], rtol=1e-5)


def test_heatmap_corner_peak_is_mirrored():
    maps = quadratic(3, 0.0, 0.0)
    both = np.stack([maps, maps * 2], axis=-1)[None]        # 2 keypoints
    s, k = heatmap(both, [[10, 20, 13, 26]])
    np.testing.assert_allclose(s, [[0, 0]], atol=1e-6)
    np.testing.assert_allclose(k[0], [[10 + 0.5, 20 + 1], [10 + 0.5, 20 + 1]], rtol=1e-6)
    nchw = heatmap(both.transpose(0, 3, 1, 2), [[10, 20, 13, 26]], nchw=True)
    np.testing.assert_allclose(nchw[1], k)


def test_heatmap_flat_map_keeps_the_first_maximum():
    s, k = heatmap(np.full((1, 2, 2, 1), 3.0, np.float32), [[0, 0, 2, 2]])
    np.testing.assert_allclose(s, [[3.0]])
    np.testing.assert_allclose(k, [[[0.5, 0.5]]])


def test_heatmap_skips_nan():
    """AOSP (HeatmapMaxKeypoint.cpp) keeps the first value above a running best that starts at
    -FLT_MAX: a NaN (here the first cell and one more) is never the maximum. The peak of
    -((x - 2)^2 + (y - 1)^2) is at (2, 1), its 3x3 fit exact: score 0, keypoint at the cell's centre."""
    maps = quadratic(4, 2.0, 1.0)
    maps[0, 0] = maps[3, 0] = np.nan
    s, k = heatmap(maps.reshape(1, 4, 4, 1), [[0, 0, 4, 4]])
    np.testing.assert_allclose(s, [[0.0]], atol=1e-6)
    np.testing.assert_allclose(k, [[[2.5, 1.5]]], rtol=1e-6)


def test_heatmap_quantized():
    maps = np.full((1, 2, 2, 1), 50, np.uint8)
    s, k = heatmap(maps, np.array([[0, 0, 16, 16]], np.uint16), t=T.TENSOR_QUANT8_ASYMM, box_t=Q16, scale=0.1,
                   box_scale=0.125)
    np.testing.assert_array_equal(s, [[50]])
    np.testing.assert_array_equal(k, [[[4, 4]]])             # (0.5, 0.5) in units of 1/8


def test_heatmap_validation():
    maps = np.zeros((1, 3, 3, 1), np.float32)
    assert error_code(heatmap, np.zeros((1, 3, 4, 1)), [[0, 0, 1, 1]]) == ResultCode.BAD_DATA   # not square
    assert error_code(heatmap, np.zeros((1, 1, 1, 1)), [[0, 0, 1, 1]]) == ResultCode.BAD_DATA   # size < 2
    assert error_code(heatmap, maps, [[0, 0, 1, 1], [0, 0, 1, 1]]) == ResultCode.BAD_DATA        # boxes per map
    assert error_code(heatmap, maps, [[0, 0, 1]]) == ResultCode.BAD_DATA                          # [n, 4]
    assert error_code(heatmap, maps, [[1, 0, 0, 1]]) == ResultCode.OP_FAILED                      # x2 < x1
