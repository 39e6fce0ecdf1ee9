"""Object-detection post-processing: AXIS_ALIGNED_BBOX_TRANSFORM, BOX_WITH_NMS_LIMIT,
GENERATE_PROPOSALS, DETECTION_POSTPROCESSING and HEATMAP_MAX_KEYPOINT.

Boxes are (x1, y1, x2, y2) corners (DETECTION_POSTPROCESSING: (y1, x1, y2, x2) out of
(ctr_y, ctr_x, h, w) anchors). Quantized models carry boxes as TENSOR_QUANT16_ASYMM with scale
0.125 and zero point 0 (GENERATE_PROPOSALS' anchors: TENSOR_QUANT16_SYMM, scale 0.125).

As in NNAPI's CPU implementation, everything is computed in float32: float16 and quantized
inputs are converted to float32 first (quantized: ``(q - zero_point) * scale``) and results
converted back (quantized: ``round(v / scale + zero_point)``, saturated). Non-maximum
suppression follows that implementation step by step, including the order in which candidates
are visited, so ties between equal scores resolve the same way.

AOSP and TFLite
---------------
TFLite has no builtin kernels for these (its DETECTION_POSTPROCESS is a float custom
operator); AOSP's arithmetic in both conventions.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import Arg, Call, OperationCode, OperationRegistration, Signature, T, check, register
from nnapi_ref.ops.common import QUANT_RANGE
from nnapi_ref.types import DTYPES

_F32 = np.float32
QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
QUANT_BOX = T.TENSOR_QUANT16_ASYMM


# ----------------------------------------------------------------------------------------------
# shared helpers

def to_f32(arg: Arg) -> np.ndarray:
    """An input tensor's real values as float32, computed as the CPU implementation does."""
    v = arg.value
    if arg.type in QUANT_RANGE:
        return (v.astype(np.int32) - arg.zero_point).astype(_F32) * _F32(arg.scale)
    return v.astype(_F32)


def from_f32(values: np.ndarray, out: Arg) -> np.ndarray:
    """float32 results in an output's element type (quantized: round half away, saturate)."""
    if out.type in QUANT_RANGE:
        t = (np.asarray(values, _F32) / _F32(out.scale) + _F32(out.zero_point)).astype(_F32).astype(np.float64)
        r = np.sign(t) * np.floor(np.abs(t) + 0.5)
        lo, hi = QUANT_RANGE[out.type]
        return np.clip(r, lo, hi).astype(DTYPES[out.type])
    return np.asarray(values).astype(DTYPES[out.type])


def scalar_f32(arg: Arg) -> np.float32:
    return _F32(arg.value.astype(_F32))


def check_box_quant(name: str, what: str, arg: Arg) -> None:
    if arg.type in (T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM):
        check(arg.scale == 0.125 and arg.zero_point == 0,
              f"{name}: {what} of type {arg.type.name} must have scale 0.125 and zero point 0, "
              f"got {arg.scale} and {arg.zero_point}")


def iou_one_to_many(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Intersection over union of one (x1, y1, x2, y2) box with many, in float32."""
    with np.errstate(divide="ignore", invalid="ignore"):
        area1 = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        area2 = (box[2] - box[0]) * (box[3] - box[1])
        x1 = np.maximum(boxes[:, 0], box[0])
        x2 = np.minimum(boxes[:, 2], box[2])
        y1 = np.maximum(boxes[:, 1], box[1])
        y2 = np.minimum(boxes[:, 3], box[3])
        w = np.maximum(x2 - x1, _F32(0))
        h = np.maximum(y2 - y1, _F32(0))
        inter = w * h
        union = area1 + area2 - inter
        return (inter / union).astype(_F32)


def nms_single_class(scores: np.ndarray, boxes_of, candidates, max_detections: int, discard) -> list[int]:
    """NMS over ``candidates`` (indices into ``scores``), visiting them as NNAPI's CPU
    implementation does: repeatedly move the first highest-scoring candidate to the front, then
    test every later one against it; a discarded candidate is swapped with the last live one, so
    the holes left by discarded candidates fill, left to right, with the survivors nearest the end.

    ``discard(kept, others)`` returns a boolean mask over ``others`` (it may update ``scores``).
    Returns the kept indices, best first. ``max_detections`` < 0 means no limit."""
    sel = np.asarray(candidates, np.int64)
    start, end = 0, len(sel)
    limit = end if max_detections < 0 else max_detections
    while start < end and start < limit:
        best = start + int(np.argmax(scores[sel[start:end]]))  # first maximum, like std::max_element
        sel[start], sel[best] = sel[best], sel[start]
        if end - start > 1:
            seg = sel[start + 1:end]
            drop = np.asarray(discard(int(sel[start]), seg), bool)
            k = int((~drop).sum())
            holes = np.nonzero(drop[:k])[0]
            if len(holes):
                fillers = (np.nonzero(~drop[k:])[0] + k)[::-1]
                seg = seg.copy()
                seg[holes] = sel[start + 1 + fillers]
                sel[start + 1:start + 1 + k] = seg[:k]
            end = start + 1 + k
        start += 1
    return sel[:start].tolist()


def hard_discard(scores, boxes_of, iou_threshold):
    def discard(kept, others):
        iou = iou_one_to_many(boxes_of(kept), boxes_of(np.asarray(others)))
        return iou >= iou_threshold
    return discard


def sort_by_score(indices: list[int], scores: np.ndarray) -> list[int]:
    """Descending score, equal scores keeping their order."""
    if not indices:
        return []
    order = np.argsort(-scores[np.asarray(indices)], kind="stable")
    return [indices[k] for k in order]


def bbox_transform(rois: np.ndarray, deltas: np.ndarray, image_hw: np.ndarray) -> np.ndarray:
    """Apply (dx, dy, dw, dh) deltas to (x1, y1, x2, y2) boxes and clip to [0, width] x [0, height].
    ``rois`` [n, 4], ``deltas`` [n, k, 4], ``image_hw`` [n, 2]; float32 throughout."""
    w = rois[:, 2] - rois[:, 0]
    h = rois[:, 3] - rois[:, 1]
    cx = (rois[:, 0] + rois[:, 2]) / _F32(2)
    cy = (rois[:, 1] + rois[:, 3]) / _F32(2)
    w, h, cx, cy = (v[:, None] for v in (w, h, cx, cy))
    with np.errstate(over="ignore"):
        nw = np.exp(deltas[..., 2]) * w
        nh = np.exp(deltas[..., 3]) * h
    nx = cx + deltas[..., 0] * w
    ny = cy + deltas[..., 1] * h
    half = _F32(2)
    x1, y1, x2, y2 = nx - nw / half, ny - nh / half, nx + nw / half, ny + nh / half
    img_h = image_hw[:, 0][:, None]
    img_w = image_hw[:, 1][:, None]
    zero = _F32(0)
    out = np.stack([np.minimum(np.maximum(x1, zero), img_w), np.minimum(np.maximum(y1, zero), img_h),
                    np.minimum(np.maximum(x2, zero), img_w), np.minimum(np.maximum(y2, zero), img_h)], axis=-1)
    return out.astype(_F32)


# ----------------------------------------------------------------------------------------------

@register
class AxisAlignedBboxTransform(OperationRegistration):
    code = OperationCode.AXIS_ALIGNED_BBOX_TRANSFORM
    zero_sized_inputs = None
    accuracy = "relaxed"
    signatures = [
        Signature(29, [T.TENSOR_FLOAT32, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_FLOAT32], [T.TENSOR_FLOAT32]),
        Signature(29, [T.TENSOR_FLOAT16, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_FLOAT16], [T.TENSOR_FLOAT16]),
        Signature(29, [QUANT_BOX, T.TENSOR_QUANT8_ASYMM, T.TENSOR_INT32, QUANT_BOX], [QUANT_BOX]),
        Signature(30, [QUANT_BOX, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_INT32, QUANT_BOX], [QUANT_BOX]),
    ]

    def infer(self, call: Call):
        rois, deltas, batches, info = call.ins
        n = self.name
        check(rois.rank == 2, f"{n}: ROI tensor must have rank 2, got {rois.rank}")
        check(deltas.rank == 2, f"{n}: delta tensor must have rank 2, got {deltas.rank}")
        check(batches.rank == 1, f"{n}: batch index tensor must have rank 1, got {batches.rank}")
        check(info.rank == 2, f"{n}: image info tensor must have rank 2, got {info.rank}")
        num_rois = rois.shape[0]
        check(rois.shape[1] == 4, f"{n}: ROI tensor must have shape [num_rois, 4], got {list(rois.shape)}")
        check(deltas.shape[1] > 0 and deltas.shape[1] % 4 == 0,
              f"{n}: delta tensor's second dimension must be a positive multiple of 4, got {deltas.shape[1]}")
        check(deltas.shape[0] == num_rois, f"{n}: delta tensor has {deltas.shape[0]} rows, expected {num_rois}")
        check(batches.shape[0] == num_rois, f"{n}: batch index tensor has {batches.shape[0]} entries, expected {num_rois}")
        check(info.shape[0] > 0 and info.shape[1] == 2,
              f"{n}: image info tensor must have shape [num_batches > 0, 2], got {list(info.shape)}")
        if rois.type == QUANT_BOX:
            check_box_quant(n, "the ROI tensor", rois)
            check_box_quant(n, "the image info tensor", info)
            check_box_quant(n, "the output", call.outs[0])
        return [(num_rois, deltas.shape[1])]

    def execute(self, call: Call):
        rois, deltas, batches, info = call.ins
        boxes = to_f32(rois)
        d = to_f32(deltas).reshape(len(boxes), -1, 4)
        hw = to_f32(info)
        idx = batches.value.astype(np.int64)
        num_batches = hw.shape[0]
        for r in range(len(boxes)):
            check(0 <= idx[r] < num_batches, f"{self.name}: ROI {r} has batch index {idx[r]}, outside [0, {num_batches})")
            check(boxes[r, 0] <= boxes[r, 2] and boxes[r, 1] <= boxes[r, 3],
                  f"{self.name}: ROI {r} {boxes[r].tolist()} has x2 < x1 or y2 < y1")
        out = bbox_transform(boxes, d, hw[idx])
        return [from_f32(out.reshape(len(boxes), -1), call.outs[0])]


# ----------------------------------------------------------------------------------------------

def _box_nms_signatures() -> list[Signature]:
    sigs = []
    for level, t, box, f in [(29, T.TENSOR_FLOAT32, T.TENSOR_FLOAT32, T.FLOAT32),
                             (29, T.TENSOR_FLOAT16, T.TENSOR_FLOAT16, T.FLOAT16),
                             (29, T.TENSOR_QUANT8_ASYMM, QUANT_BOX, T.FLOAT32),
                             (30, T.TENSOR_QUANT8_ASYMM_SIGNED, QUANT_BOX, T.FLOAT32)]:
        sigs.append(Signature(level, [t, box, T.TENSOR_INT32, f, T.INT32, T.INT32, f, f, f],
                              [t, box, T.TENSOR_INT32, T.TENSOR_INT32]))
    return sigs


@register
class BoxWithNmsLimit(OperationRegistration):
    code = OperationCode.BOX_WITH_NMS_LIMIT
    zero_sized_inputs = None
    parameters = {3: "score threshold", 4: "max detections", 5: "NMS kernel", 6: "IoU threshold", 7: "sigma",
                  8: "NMS score threshold"}
    accuracy = "relaxed"
    choices = {5: {0: "hard NMS", 1: "linear NMS", 2: "gaussian NMS"}}
    signatures = _box_nms_signatures()

    def infer(self, call: Call):
        scores, rois, batches = call.ins[:3]
        n = self.name
        check(scores.rank == 2, f"{n}: score tensor must have rank 2, got {scores.rank}")
        check(rois.rank == 2, f"{n}: ROI tensor must have rank 2, got {rois.rank}")
        check(batches.rank == 1, f"{n}: batch index tensor must have rank 1, got {batches.rank}")
        num_rois, num_classes = scores.shape
        check(num_classes > 1, f"{n}: there must be more than one class (class 0 is background), got {num_classes}")
        check(rois.shape[0] == num_rois and rois.shape[1] == 4 * num_classes,
              f"{n}: ROI tensor must have shape [{num_rois}, {4 * num_classes}], got {list(rois.shape)}")
        check(batches.shape[0] == num_rois, f"{n}: batch index tensor has {batches.shape[0]} entries, expected {num_rois}")
        if scores.type in QUANT8:
            check_box_quant(n, "the ROI tensor", rois)
            check_box_quant(n, "the output ROI tensor", call.outs[1])
        kernel = call.ins[5].scalar()
        check(kernel in (0, 1, 2), f"{n}: NMS kernel must be 0 (hard), 1 (linear) or 2 (gaussian), got {kernel}")
        return [None, None, None, None]

    def execute(self, call: Call):
        scores_arg, rois_arg, batches_arg = call.ins[:3]
        score_threshold = scalar_f32(call.ins[3])
        max_detections = int(call.ins[4].scalar())
        kernel = int(call.ins[5].scalar())
        iou_threshold = scalar_f32(call.ins[6])
        sigma = scalar_f32(call.ins[7])
        nms_score_threshold = scalar_f32(call.ins[8])
        scores = to_f32(scores_arg).copy()
        boxes = to_f32(rois_arg)
        num_rois, num_classes = scores.shape
        batch_ids = batches_arg.value
        flat_scores = scores.reshape(-1)

        # boxes of one batch are grouped together: split into runs of equal batch index
        runs = []
        for i in range(num_rois):
            if runs and batch_ids[i] == batch_ids[runs[-1][0]]:
                runs[-1][1] += 1
            else:
                runs.append([i, 1])

        def kernel_fn(iou):
            if kernel == 0:
                return np.where(iou < iou_threshold, _F32(1), _F32(0)).astype(_F32)
            if kernel == 1:
                return np.where(iou < iou_threshold, _F32(1), _F32(1) - iou).astype(_F32)
            return np.exp(_F32(-1) * iou * iou / sigma).astype(_F32)

        per_class = boxes.reshape(num_rois, num_classes, 4)[:, 1:]
        bad = np.argwhere((per_class[..., 0] > per_class[..., 2]) | (per_class[..., 1] > per_class[..., 3]))
        if len(bad):
            r, c = int(bad[0][0]), int(bad[0][1]) + 1
            check(False, f"{self.name}: box {r} of class {c} {per_class[r, c - 1].tolist()} has x2 < x1 or y2 < y1")

        selected: list[int] = []
        for first, count in runs:
            run_boxes = boxes[first:first + count].reshape(count * num_classes, 4)
            base = first * num_classes

            def boxes_of(ind, run_boxes=run_boxes, base=base):
                return run_boxes[np.asarray(ind) - base]

            def discard(kept, others, boxes_of=boxes_of):
                others = np.asarray(others)
                iou = iou_one_to_many(boxes_of(kept), boxes_of(others))
                flat_scores[others] = (flat_scores[others] * kernel_fn(iou)).astype(_F32)
                return flat_scores[others] < nms_score_threshold

            result: list[int] = []
            for c in range(1, num_classes):
                ids = base + np.arange(count) * num_classes + c
                cand = ids[flat_scores[ids] > score_threshold].tolist()
                result += nms_single_class(flat_scores, boxes_of, cand, max_detections, discard)
            result = sort_by_score(result, flat_scores)
            if 0 <= max_detections < len(result):
                result = result[:max_detections]
            # regroup by class, best score first within a class
            result = sorted(sort_by_score(result, flat_scores), key=lambda k: k % num_classes)
            selected += result

        sel = np.asarray(selected, np.int64)
        rows, cls = sel // num_classes, sel % num_classes
        out_scores = from_f32(flat_scores[sel], call.outs[0])
        raw_rois = rois_arg.value.reshape(num_rois, num_classes, 4)
        out_rois = raw_rois[rows, cls].reshape(len(sel), 4).astype(DTYPES[call.outs[1].type])
        run_of_row = np.zeros(num_rois, np.int32)
        for first, count in runs:
            run_of_row[first:first + count] = batch_ids[first]
        return [out_scores, out_rois, cls.astype(np.int32), run_of_row[rows].astype(np.int32)]


# ----------------------------------------------------------------------------------------------

def _proposal_signatures() -> list[Signature]:
    sigs = []
    for level, t, anchors, info, box, f in [
            (29, T.TENSOR_FLOAT32, T.TENSOR_FLOAT32, T.TENSOR_FLOAT32, T.TENSOR_FLOAT32, T.FLOAT32),
            (29, T.TENSOR_FLOAT16, T.TENSOR_FLOAT16, T.TENSOR_FLOAT16, T.TENSOR_FLOAT16, T.FLOAT16),
            (29, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT16_SYMM, QUANT_BOX, QUANT_BOX, T.FLOAT32),
            (30, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT16_SYMM, QUANT_BOX, QUANT_BOX, T.FLOAT32)]:
        sigs.append(Signature(level, [t, t, anchors, info, f, f, T.INT32, T.INT32, f, f, T.BOOL],
                              [t, box, T.TENSOR_INT32]))
    return sigs


@register
class GenerateProposals(OperationRegistration):
    code = OperationCode.GENERATE_PROPOSALS
    parameters = {4: "height stride", 5: "width stride", 6: "pre-NMS top N", 7: "post-NMS top N", 8: "IoU threshold",
                  9: "min size", 10: "layout"}
    accuracy = "relaxed"
    choices = {10: {False: "NHWC", True: "NCHW"}}
    signatures = _proposal_signatures()

    def infer(self, call: Call):
        scores, deltas, anchors, info = call.ins[:4]
        n = self.name
        nchw = bool(call.ins[10].scalar())
        check(scores.rank == 4, f"{n}: score tensor must have rank 4, got {scores.rank}")
        check(deltas.rank == 4, f"{n}: delta tensor must have rank 4, got {deltas.rank}")
        check(anchors.rank == 2, f"{n}: anchor tensor must have rank 2, got {anchors.rank}")
        check(info.rank == 2, f"{n}: image info tensor must have rank 2, got {info.rank}")
        if nchw:
            b, a, h, w = scores.shape
            db, da, dh, dw = deltas.shape
        else:
            b, h, w, a = scores.shape
            db, dh, dw, da = deltas.shape
        check((db, dh, dw, da) == (b, h, w, 4 * a),
              f"{n}: delta tensor shape {list(deltas.shape)} does not match score tensor shape "
              f"{list(scores.shape)} (4 deltas per anchor)")
        check(tuple(info.shape) == (b, 2), f"{n}: image info tensor must have shape [{b}, 2], got {list(info.shape)}")
        check(tuple(anchors.shape) == (a, 4), f"{n}: anchor tensor must have shape [{a}, 4], got {list(anchors.shape)}")
        hs, ws = float(call.ins[4].scalar()), float(call.ins[5].scalar())
        check(hs > 0 and ws > 0, f"{n}: height and width strides must be positive, got {hs} and {ws}")
        if scores.type in QUANT8:
            check_box_quant(n, "the anchor tensor", anchors)
            check_box_quant(n, "the image info tensor", info)
            check_box_quant(n, "the output ROI tensor", call.outs[1])
        return [None, None, None]

    def execute(self, call: Call):
        scores_arg, deltas_arg, anchors_arg, info_arg = call.ins[:4]
        h_stride, w_stride = scalar_f32(call.ins[4]), scalar_f32(call.ins[5])
        pre_nms, post_nms = int(call.ins[6].scalar()), int(call.ins[7].scalar())
        iou_threshold, min_size = scalar_f32(call.ins[8]), scalar_f32(call.ins[9])
        nchw = bool(call.ins[10].scalar())
        scores = to_f32(scores_arg)
        deltas = to_f32(deltas_arg)
        if nchw:
            scores = scores.transpose(0, 2, 3, 1)
            deltas = deltas.transpose(0, 2, 3, 1)
        anchors = to_f32(anchors_arg)
        info = to_f32(info_arg)
        nb, height, width, na = scores.shape
        hh = (np.arange(height, dtype=_F32) * h_stride).astype(_F32)
        ww = (np.arange(width, dtype=_F32) * w_stride).astype(_F32)
        shift = np.zeros((height, width, 1, 4), _F32)
        shift[..., 0] = ww[None, :, None]
        shift[..., 2] = ww[None, :, None]
        shift[..., 1] = hh[:, None, None]
        shift[..., 3] = hh[:, None, None]
        base_rois = (anchors[None, None] + shift).reshape(-1, 4).astype(_F32)
        size = base_rois.shape[0]
        out_scores, out_rois, out_batches = [], [], []
        for b in range(nb):
            sc = scores[b].reshape(-1)
            boxes = bbox_transform(base_rois, deltas[b].reshape(size, 1, 4),
                                   np.broadcast_to(info[b], (size, 2)))[:, 0]
            select = list(range(size))
            if 0 < pre_nms < size:
                select = sort_by_score(select, sc)[:pre_nms]
            # drop boxes smaller than min_size or centred outside the image
            bw = boxes[:, 2] - boxes[:, 0]
            bh = boxes[:, 3] - boxes[:, 1]
            xc = boxes[:, 0] + bw / _F32(2)
            yc = boxes[:, 1] + bh / _F32(2)
            ok = (bw > min_size) & (bh > min_size) & (xc < info[b, 1]) & (yc < info[b, 0])
            select = np.asarray(select, np.int64)
            select = select[ok[select]].tolist()
            kept = nms_single_class(sc, lambda ind, boxes=boxes: boxes[np.asarray(ind)], select, post_nms,
                                    hard_discard(sc, lambda ind, boxes=boxes: boxes[np.asarray(ind)], iou_threshold))
            out_scores.append(sc[kept])
            out_rois.append(boxes[kept].reshape(-1, 4))
            out_batches.append(np.full(len(kept), b, np.int32))
        return [from_f32(np.concatenate(out_scores), call.outs[0]),
                from_f32(np.concatenate(out_rois).reshape(-1, 4), call.outs[1]),
                np.concatenate(out_batches).astype(np.int32)]


# ----------------------------------------------------------------------------------------------

@register
class DetectionPostprocessing(OperationRegistration):
    code = OperationCode.DETECTION_POSTPROCESSING
    parameters = {3: "y scale", 4: "x scale", 5: "height scale", 6: "width scale", 7: "NMS", 8: "max detections",
                  9: "max classes per detection", 10: "detections per class", 11: "score threshold",
                  12: "IoU threshold", 13: "background class"}
    accuracy = "relaxed"
    choices = {7: {False: "fast NMS", True: "regular NMS"},
               13: {False: "background not in labels", True: "background in labels"}}
    signatures = [
        Signature(29, [t, t, t, f, f, f, f, T.BOOL, T.INT32, T.INT32, T.INT32, f, f, T.BOOL],
                  [t, t, T.TENSOR_INT32, T.TENSOR_INT32])
        for t, f in [(T.TENSOR_FLOAT32, T.FLOAT32), (T.TENSOR_FLOAT16, T.FLOAT16)]
    ]

    def infer(self, call: Call):
        scores, deltas, anchors = call.ins[:3]
        n = self.name
        check(scores.rank == 3, f"{n}: score tensor must have rank 3, got {scores.rank}")
        check(deltas.rank == 3, f"{n}: delta tensor must have rank 3, got {deltas.rank}")
        check(anchors.rank == 2, f"{n}: anchor tensor must have rank 2, got {anchors.rank}")
        nb, na, nc = scores.shape
        check(deltas.shape[0] == nb and deltas.shape[1] == na,
              f"{n}: delta tensor shape {list(deltas.shape)} does not match score tensor shape {list(scores.shape)}")
        check(tuple(anchors.shape) == (na, 4), f"{n}: anchor tensor must have shape [{na}, 4], got {list(anchors.shape)}")
        for k, what in [(3, "scale_y"), (4, "scale_x"), (5, "scale_h"), (6, "scale_w")]:
            check(float(call.ins[k].scalar()) > 0, f"{n}: {what} must be positive, got {call.ins[k].scalar()}")
        check(float(call.ins[11].scalar()) >= 0, f"{n}: score threshold must be >= 0, got {call.ins[11].scalar()}")
        check(float(call.ins[12].scalar()) >= 0, f"{n}: IoU threshold must be >= 0, got {call.ins[12].scalar()}")
        check(nc > 1, f"{n}: there must be more than one class (class 0 is background), got {nc}")
        check(deltas.shape[2] >= 4, f"{n}: box encodings must have length >= 4, got {deltas.shape[2]}")
        max_det = int(call.ins[8].scalar())
        check(max_det > 0, f"{n}: maximum number of detections must be positive, got {max_det}")
        out_count = max_det
        if bool(call.ins[7].scalar()):
            per_class = int(call.ins[10].scalar())
            check(per_class > 0, f"{n}: maximum detections per class must be positive, got {per_class}")
        else:
            per_det = int(call.ins[9].scalar())
            check(per_det > 0, f"{n}: maximum classes per detection must be positive, got {per_det}")
            out_count *= per_det
        return [(nb, out_count), (nb, out_count, 4), (nb, out_count), (nb,)]

    def execute(self, call: Call):
        shapes = self.infer(call)
        scores_all = to_f32(call.ins[0])
        deltas_all = to_f32(call.ins[1])
        anchors = to_f32(call.ins[2])
        sy, sx, sh, sw = (scalar_f32(call.ins[k]) for k in (3, 4, 5, 6))
        regular = bool(call.ins[7].scalar())
        max_det = int(call.ins[8].scalar())
        max_cls_per_det = int(call.ins[9].scalar())
        max_det_per_class = int(call.ins[10].scalar())
        score_threshold, iou_threshold = scalar_f32(call.ins[11]), scalar_f32(call.ins[12])
        bg_in_label = bool(call.ins[13].scalar())
        nb, na, nc = scores_all.shape
        out_count = shapes[0][1]
        out_scores = np.zeros((nb, out_count), _F32)
        out_rois = np.zeros((nb, out_count, 4), _F32)
        out_cls = np.zeros((nb, out_count), np.int32)
        out_num = np.zeros(nb, np.int32)
        label_shift = 0 if bg_in_label else 1
        for b in range(nb):
            d = deltas_all[b]
            with np.errstate(over="ignore"):
                yc = anchors[:, 0] + anchors[:, 2] * d[:, 0] / sy
                xc = anchors[:, 1] + anchors[:, 3] * d[:, 1] / sx
                hh = anchors[:, 2] * np.exp(d[:, 2] / sh) * _F32(0.5)
                wh = anchors[:, 3] * np.exp(d[:, 3] / sw) * _F32(0.5)
            # (y1, x1, y2, x2): IoU is symmetric in the axes, so the corner helpers apply as is
            boxes = np.stack([yc - hh, xc - wh, yc + hh, xc + wh], axis=1).astype(_F32)
            flat = scores_all[b].reshape(-1)
            if regular:
                def boxes_of(ind):
                    return boxes[np.asarray(ind) // nc]
                selected: list[int] = []
                for c in range(1, nc):
                    ids = np.arange(na) * nc + c
                    cand = ids[flat[ids] > score_threshold].tolist()
                    selected += nms_single_class(flat, boxes_of, cand, max_det_per_class,
                                                 hard_discard(flat, boxes_of, iou_threshold))
                selected = sort_by_score(selected, flat)[:max_det]
                k = len(selected)
                sel = np.asarray(selected, np.int64)
                out_scores[b, :k] = flat[sel]
                out_rois[b, :k] = boxes[sel // nc]
                out_cls[b, :k] = sel % nc - label_shift
                out_num[b] = k
            else:
                n_out_cls = min(nc - 1, max_cls_per_det)
                per_anchor = scores_all[b][:, 1:]
                max_scores = per_anchor.max(axis=1)

                def boxes_of(ind):
                    return boxes[np.asarray(ind)]
                cand = np.nonzero(max_scores > score_threshold)[0].tolist()
                kept = nms_single_class(max_scores, boxes_of, cand, max_det,
                                        hard_discard(max_scores, boxes_of, iou_threshold))
                pos = 0
                for a in kept:
                    order = np.argsort(-per_anchor[a], kind="stable")[:n_out_cls]
                    out_scores[b, pos:pos + n_out_cls] = per_anchor[a, order]
                    out_rois[b, pos:pos + n_out_cls] = boxes[a]
                    out_cls[b, pos:pos + n_out_cls] = order + 1 - label_shift
                    pos += n_out_cls
                out_num[b] = len(kept) * n_out_cls
        return [from_f32(out_scores, call.outs[0]), from_f32(out_rois, call.outs[1]), out_cls, out_num]


# ----------------------------------------------------------------------------------------------

@register
class HeatmapMaxKeypoint(OperationRegistration):
    code = OperationCode.HEATMAP_MAX_KEYPOINT
    parameters = {2: "layout"}
    accuracy = "relaxed"
    signatures = [
        Signature(29, [T.TENSOR_FLOAT32, T.TENSOR_FLOAT32, T.BOOL], [T.TENSOR_FLOAT32, T.TENSOR_FLOAT32]),
        Signature(29, [T.TENSOR_FLOAT16, T.TENSOR_FLOAT16, T.BOOL], [T.TENSOR_FLOAT16, T.TENSOR_FLOAT16]),
        Signature(29, [T.TENSOR_QUANT8_ASYMM, QUANT_BOX, T.BOOL], [T.TENSOR_QUANT8_ASYMM, QUANT_BOX]),
        Signature(30, [T.TENSOR_QUANT8_ASYMM_SIGNED, QUANT_BOX, T.BOOL], [T.TENSOR_QUANT8_ASYMM_SIGNED, QUANT_BOX]),
    ]

    def infer(self, call: Call):
        heatmap, boxes = call.ins[:2]
        n = self.name
        nchw = bool(call.ins[2].scalar())
        check(heatmap.rank == 4, f"{n}: heatmap tensor must have rank 4, got {heatmap.rank}")
        check(boxes.rank == 2, f"{n}: box tensor must have rank 2, got {boxes.rank}")
        num_boxes = heatmap.shape[0]
        size = heatmap.shape[2]
        other = heatmap.shape[3] if nchw else heatmap.shape[1]
        keypoints = heatmap.shape[1] if nchw else heatmap.shape[3]
        check(other == size, f"{n}: heatmaps must be square, got {list(heatmap.shape)}")
        check(size >= 2, f"{n}: heatmap size must be at least 2, got {size}")
        check(tuple(boxes.shape) == (num_boxes, 4),
              f"{n}: box tensor must have shape [{num_boxes}, 4], got {list(boxes.shape)}")
        if heatmap.type in QUANT8:
            check_box_quant(n, "the box tensor", boxes)
            check_box_quant(n, "the output keypoint tensor", call.outs[1])
        return [(num_boxes, keypoints), (num_boxes, keypoints, 2)]

    def execute(self, call: Call):
        heat = to_f32(call.ins[0])
        if bool(call.ins[2].scalar()):
            heat = heat.transpose(0, 2, 3, 1)
        boxes = to_f32(call.ins[1])
        nbox, size, _, nk = heat.shape
        for i in range(nbox):
            check(boxes[i, 0] <= boxes[i, 2] and boxes[i, 1] <= boxes[i, 3],
                  f"{self.name}: box {i} {boxes[i].tolist()} has x2 < x1 or y2 < y1")
        tol = _F32(1e-3) if call.ins[0].type == T.TENSOR_FLOAT16 else _F32(1e-5)
        flat = heat.reshape(nbox, size * size, nk)
        # The first maximum above a running best that starts at -FLT_MAX with index 0: NaN,
        # -inf and -FLT_MAX never replace it (a map of nothing else keeps index 0, score -FLT_MAX).
        lowest = _F32(np.finfo(_F32).min)
        candidates = np.where(flat > lowest, flat, _F32(-np.inf))
        arg = np.argmax(candidates, axis=1)                 # first maximum  [nbox, nk]
        max_score = np.maximum(np.take_along_axis(candidates, arg[:, None, :], axis=1)[:, 0, :], lowest)
        mh, mw = arg // size, arg % size

        def mirror(v):
            return np.where(v < 0, 1, np.where(v >= size, size - 2, v))

        bi = np.arange(nbox)[:, None]
        ki = np.arange(nk)[None, :]
        g = [[heat[bi, mirror(mh + dh), mirror(mw + dw), ki] for dw in (-1, 0, 1)] for dh in (-1, 0, 1)]
        two, half = _F32(2), _F32(0.5)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            b0 = -(g[1][2] - g[1][0]) / two
            b1 = -(g[2][1] - g[0][1]) / two
            a00 = g[1][0] - two * g[1][1] + g[1][2]
            a01 = (g[2][2] - g[2][0] - g[0][2] + g[0][0]) / _F32(4)
            a11 = g[0][1] - two * g[1][1] + g[2][1]
            cp1 = a00 * a11
            det = cp1 - a01 * a01
            solvable = ~(np.abs(det) < tol + tol * cp1)
            d0 = np.where(solvable, (a11 * b0 - a01 * b1) / det, _F32(0)).astype(_F32)
            d1 = np.where(solvable, (a00 * b1 - a01 * b0) / det, _F32(0)).astype(_F32)
            big = (np.abs(d0) > _F32(1.5)) | (np.abs(d1) > _F32(1.5))
            scale = (_F32(1.5) / np.maximum(np.abs(d0), np.abs(d1))).astype(_F32)
            d0 = np.where(big, d0 * scale, d0).astype(_F32)
            d1 = np.where(big, d1 * scale, d1).astype(_F32)
            refined = g[1][1] - b0 * d0 - b1 * d1 + ((a00 * d0 + a01 * d1) * d0 + (a01 * d0 + a11 * d1) * d1) / two
            score = np.where(solvable, refined, max_score).astype(_F32)
        x1, y1 = boxes[:, 0:1], boxes[:, 1:2]
        rw, rh = boxes[:, 2:3] - x1, boxes[:, 3:4] - y1
        fs = _F32(size)
        wpos = (mw.astype(_F32) + d0 + half) / fs
        hpos = (mh.astype(_F32) + d1 + half) / fs
        keypoints = np.stack([wpos * rw + x1, hpos * rh + y1], axis=-1).astype(_F32)
        return [from_f32(score, call.outs[0]), from_f32(keypoints, call.outs[1])]
