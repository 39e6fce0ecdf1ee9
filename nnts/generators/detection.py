"""Family declarations (:mod:`nnts.generators.families`) for the detection operations, generated so that
every decision they make is clear: BOX_WITH_NMS_LIMIT (hard, linear and gaussian NMS),
GENERATE_PROPOSALS (NHWC and NCHW) and DETECTION_POSTPROCESSING (regular and fast NMS, with and
without the background class in the labels).

Which boxes these operations keep, and in what order, hangs on comparisons: scores against the
score thresholds and against each other (selection order, top-k cuts), overlaps against the IoU
threshold, box sizes against the minimum size, box centres against the image's edge, and (soft
NMS) rescored scores against all of these. A driver computing in float16, or in fixed point,
rounds differently from the reference, so a comparison closer than its rounding would flip and
the case would fail a correct driver. Each draw therefore keeps every comparison clear:

* scores lie on a grid (``SCORE_STEP`` apart in float, six quantization steps in quant8), drawn
  without replacement, so no two tie; thresholds lie half-way between grid points;
* boxes come in clusters: boxes of one cluster overlap heavily, clusters lie in separate cells
  of the image (IoU exactly 0); deltas are small;
* then the operation's decisions are replayed in float64 (:func:`_greedy_nms`, the size and
  centre tests) and the draw is rejected (``Reject``) when any comparison is closer than its
  margin: ``score_margin`` for scores, ``IOU_MARGIN`` for overlaps, ``SIZE_MARGIN`` for sizes
  and centres. The replay only measures margins; the expected values are the reference's.

Sizes stay small in wide cases too (at most 40 scores; NMS compares boxes pairwise and a grid of
distinct scores has few points). HASHTABLE_LOOKUP (sorted unique keys, hits and misses) lives
here too: like the others, an operation whose inputs need a structure random tensors lack.

Declared ``single_only``: the single-operation tests draw them by name; the random-graph
generator (every existing seed) does not. Relaxed tier, HASHTABLE_LOOKUP strict (:mod:`nnts.generators.single`).
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.common import QUANT_RANGE
from nnapi_ref.types import DTYPES, OperandCode as T, OperationCode as Op
from nnts.generators.boxes import BOX_QUANT  # TENSOR_QUANT16_ASYMM / _SYMM boxes: scale 0.125, zero point 0
from nnts.generators.families import BOOL, INT32, declare, like, start_type
from nnts.generators.graphs import F16, I32, QUANT8, Builder, Out, Reject, Tensor

Q16A, Q16S = T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM
SCORE_STEP = 0.05         # float scores' grid
QUANT_SCORE_SCALE = 2.0 ** -6
QUANT_STEPS = 6           # quant8 scores' grid, in quantization steps
IOU_MARGIN = 0.05         # how far an overlap stays from the IoU threshold
SIZE_MARGIN = 0.25        # how far a box's size stays from the minimum size, its centre from the edge
CELL = 20.0               # clusters of boxes sit CELL apart (boxes at most 12 wide): no overlap between them


# -- shared helpers -------------------------------------------------------------------------------

def _tensor(b: Builder, type_: T, real: np.ndarray, quant: tuple = (0.0, 0)) -> Tensor:
    """A model input (or, sometimes, a constant) of ``type_`` holding ``real`` (quantized with
    ``quant`` for quantized types)."""
    scale, zero_point = quant
    if type_ in QUANT_RANGE:
        lo, hi = QUANT_RANGE[type_]
        value = np.clip(np.round(real / scale) + zero_point, lo, hi).astype(DTYPES[type_])
    else:
        value = np.asarray(real).astype(DTYPES[type_])
    return b.holding(type_, value, scale, zero_point)


def _grid(type_: T) -> tuple[float, tuple]:
    """The score grid's step and the scores' quantization for ``type_``."""
    if type_ in QUANT8:
        return QUANT_STEPS * QUANT_SCORE_SCALE, (QUANT_SCORE_SCALE, QUANT_RANGE[type_][0] + 2)
    return SCORE_STEP, (0.0, 0)


def score_margin(type_: T) -> float:
    """How far apart two scores, or a score and a threshold, must stay: 2.5 quantization steps in
    quant8 (a grid point is 6 steps from the next, 3 from a threshold), 0.02 in float."""
    return 2.5 * QUANT_SCORE_SCALE if type_ in QUANT8 else 0.02


def _scores(b: Builder, type_: T, shape: tuple) -> Tensor:
    """Scores of ``shape`` (at most 40 of them), all distinct grid points (1 .. 40 steps up)."""
    step, quant = _grid(type_)
    return _tensor(b, type_, step * (1 + b.rng.choice(40, int(np.prod(shape)), replace=False)).reshape(shape), quant)


def _threshold(b: Builder, x: Tensor, low: int, high: int) -> float:
    """A threshold half-way between grid points ``low`` and ``high`` (counted as in
    :func:`_scores`), as the scalar type stores it."""
    return _stored(x, _grid(x.type)[0] * (int(b.rng.integers(low, high)) + 1.5))


def _stored(x: Tensor, value: float) -> float:
    """``value`` as the scalar input of an operation on ``x`` holds it (FLOAT16 for float16)."""
    return float(np.float16(value)) if x.type == F16 else float(np.float32(value))


def _apart(values, threshold: float, margin: float, what: str) -> None:
    if np.any(np.abs(np.asarray(values, np.float64) - threshold) < margin):
        raise Reject(f"{what} within {margin} of its threshold {threshold}")


def _distinct(values, margin: float, what: str) -> None:
    gaps = np.diff(np.sort(np.asarray(values, np.float64)))
    if np.any(gaps < margin):
        raise Reject(f"two {what} within {margin} of each other")


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection over union of corner boxes ``a`` [n, 4] and ``b`` [m, 4] (either axis order,
    first corner then second), in float64: [n, m]."""
    lo = np.maximum(a[:, None, :2], b[None, :, :2])
    hi = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.maximum(hi - lo, 0.0), axis=-1)
    area = lambda boxes: np.prod(boxes[:, 2:] - boxes[:, :2], axis=-1)
    union = area(a)[:, None] + area(b)[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def _cluster_boxes(b: Builder, clusters: np.ndarray, spread: float) -> np.ndarray:
    """Corner boxes (x1, y1, x2, y2) on the 1/8 grid, one per entry of ``clusters``: the boxes of
    one cluster a base box (6-12 a side) jittered by up to ``spread`` per coordinate, clusters
    in cells CELL apart (at most four in a row)."""
    bases = {}
    boxes = np.zeros((len(clusters), 4))
    for i, c in enumerate(clusters):
        if c not in bases:
            x, y = CELL * (c % 4) + 2.0, CELL * (c // 4) + 2.0
            bases[c] = np.array([x, y, x + b.rng.uniform(6, 12), y + b.rng.uniform(6, 12)])
        boxes[i] = bases[c] + b.rng.uniform(-spread, spread, 4)
    return np.round(boxes * 8) / 8


def _greedy_nms(scores: np.ndarray, overlaps: np.ndarray, limit: int, factor, nms_threshold: float,
                margin: float) -> list[tuple[int, float]]:
    """NMS as NNAPI defines it, in float64, rejecting a draw whose decisions are not clear: pick
    the highest live score (clear of the next), rescore every other live candidate by
    ``factor(overlap)`` (which checks overlaps against the IoU threshold) and drop those below
    ``nms_threshold`` (clear of it); at most ``limit`` picks (< 0: no limit). Returns the kept
    candidates with their final scores, in the order picked."""
    live = dict(enumerate(float(s) for s in scores))
    kept = []
    while live and (limit < 0 or len(kept) < limit):
        order = sorted(live, key=live.get, reverse=True)
        if len(order) > 1 and live[order[0]] - live[order[1]] < margin:
            raise Reject("two live scores too close to order")
        best = order[0]
        kept.append((best, live.pop(best)))
        for i in list(live):
            live[i] *= factor(overlaps[best, i])
            _apart(live[i], nms_threshold, margin, "a rescored score")
            if live[i] < nms_threshold:
                del live[i]
    return kept


def _rescoring(kernel: int, iou_threshold: float, sigma: float = 1.0):
    """The factor NMS applies to a live score overlapping a kept box: hard (kernel 0: 0 at or
    above the IoU threshold), linear (1: 1 - IoU there) or gaussian (2: exp(-IoU**2 / sigma) at
    any overlap); rejects an overlap near the threshold where the kernel compares with it."""
    if kernel == 2:
        return lambda overlap: float(np.exp(-overlap * overlap / sigma))

    def factor(overlap):
        _apart(overlap, iou_threshold, IOU_MARGIN, "an overlap")
        return 1.0 if overlap < iou_threshold else (0.0 if kernel == 0 else 1.0 - overlap)
    return factor


# -- BOX_WITH_NMS_LIMIT ---------------------------------------------------------------------------

def _box_scores(b: Builder, code: Op) -> Tensor | None:
    """Scores [rois, classes] of a type BOX_WITH_NMS_LIMIT takes: 2-6 rois, 2-4 classes."""
    type_ = start_type(b, code)
    if type_ is None:
        return None
    return _scores(b, type_, (int(b.rng.integers(2, 7)), int(b.rng.integers(2, 5))))


@declare([Op.BOX_WITH_NMS_LIMIT], ranks=(2,), single_only=True, start=_box_scores,
         domain=lambda x: x.shape[1] >= 2)
def box_with_nms_limit(b: Builder, x: Tensor, code: Op) -> None:
    """Rows split into 1-2 batches; per batch and class, boxes in clusters (tight: IoU about 0.7
    and above, or loose), clusters apart (IoU 0). Scores on the grid, the score threshold and the
    NMS score threshold half-way between grid points; IoU threshold 0.3-0.7, sigma 0.2-1, max
    detections -1 (none) or 1-4; kernel hard, linear or gaussian. :func:`_greedy_nms` replays
    each class's NMS (soft rescoring included) and rejects a draw with a decision closer than its
    margin; the kept scores of a batch, ordered across classes and cut to max detections, are
    distinct by the margin too."""
    rois, classes = x.shape
    margin = score_margin(x.type)
    batches = np.sort(b.rng.integers(0, 2, rois)) if rois > 1 and b.chance(0.5) else np.zeros(rois, np.int64)
    boxes = np.zeros((rois, classes, 4))
    for batch in np.unique(batches):
        rows = np.nonzero(batches == batch)[0]
        for c in range(classes):
            clusters = b.rng.integers(0, max(1, len(rows) - 1), len(rows)) if len(rows) > 1 else np.zeros(1, int)
            boxes[rows, c] = _cluster_boxes(b, clusters, b.pick([0.25, 0.25, 2.0]))
    kernel = int(b.rng.integers(3))
    score_threshold = _threshold(b, x, -1, 10)
    nms_threshold = _threshold(b, x, 0, 12)
    iou_threshold = _stored(x, b.rng.uniform(0.3, 0.7))
    sigma = _stored(x, b.rng.uniform(0.2, 1.0))
    max_detections = -1 if b.chance(0.4) else int(b.rng.integers(1, 5))

    factor = _rescoring(kernel, iou_threshold, sigma)

    scores, total = x.real, 0
    for batch in np.unique(batches):
        rows = np.nonzero(batches == batch)[0]
        kept = []
        for c in range(1, classes):
            _apart(scores[rows, c], score_threshold, margin, "a score")
            candidates = rows[scores[rows, c] > score_threshold]
            if len(candidates):
                box = boxes[candidates, c]
                kept += [s for _, s in _greedy_nms(scores[candidates, c], iou(box, box), max_detections, factor,
                                                   nms_threshold, margin)]
        _distinct(kept, margin, "kept scores")
        total += len(kept)
    if total == 0:
        raise Reject("BOX_WITH_NMS_LIMIT: no box kept")
    quant = x.type in QUANT8
    rois_tensor = _tensor(b, Q16A if quant else x.type, boxes.reshape(rois, 4 * classes),
                          BOX_QUANT if quant else (0.0, 0))
    split = _tensor(b, I32, batches)
    scalars = [b.float_scalar(x, score_threshold), b.scalar(INT32, max_detections), b.scalar(INT32, kernel),
               b.float_scalar(x, iou_threshold), b.float_scalar(x, sigma), b.float_scalar(x, nms_threshold)]
    box_out = Out(Q16A, *BOX_QUANT) if quant else like(x)
    b.add(code, [x, rois_tensor, split] + scalars, [like(x), box_out, Out(I32), Out(I32)])


# -- GENERATE_PROPOSALS ---------------------------------------------------------------------------

STRIDE = 16.0  # strides 16-24; anchors at most 7 wide, decoded at most about 12: positions never meet
ANCHOR_SIDES = (3.0, 6.0, 7.0)


def _proposal_scores(b: Builder, code: Op) -> Tensor | None:
    """Scores of a type GENERATE_PROPOSALS takes, 4-D: 1-2 batches, then three dimensions of 1-3
    (height, width and anchors in NHWC, anchors, height and width in NCHW), at most 40 scores."""
    type_ = start_type(b, code)
    if type_ is None:
        return None
    shape = (int(b.rng.integers(1, 3)),) + tuple(int(d) for d in b.rng.integers(1, 4, 3))
    return _scores(b, type_, shape if np.prod(shape) <= 40 else (1,) + shape[1:])


@declare([Op.GENERATE_PROPOSALS], ranks=(4,), single_only=True, start=_proposal_scores)
def generate_proposals(b: Builder, x: Tensor, code: Op) -> None:
    """Anchors concentric at the middle of a STRIDE cell (strides 16-24 apart), sides from ANCHOR_SIDES (so two anchors
    overlap by IoU 0.25, 0.33, 0.73, or about 1), small deltas; the image's edges from 4 before to
    8 past the centres of the last row and column, so that their boxes are dropped (centre
    outside), clipped, or inside. Scores distinct
    on the grid (pre-NMS top-k and selection clear), IoU threshold 0.35-0.65. Every decoded box's
    width and height clear of the minimum size (0.5-4) and its centre clear of the image's edge by
    SIZE_MARGIN (or one of them clearly failing), every overlap between the boxes NMS compares
    clear of the IoU threshold."""
    n, nchw = x.shape[0], b.chance(0.5)
    a, h, w = (x.shape[1], x.shape[2], x.shape[3]) if nchw else (x.shape[3], x.shape[1], x.shape[2])
    quant = x.type in QUANT8
    sides = np.array([[b.pick(ANCHOR_SIDES), b.pick(ANCHOR_SIDES)] for _ in range(a)])
    centre = STRIDE / 2
    anchors = np.concatenate([centre - sides / 2, centre + sides / 2], axis=1)  # x1, y1, x2, y2
    delta_quant = (2.0 ** -7, 0 if x.type == T.TENSOR_QUANT8_ASYMM_SIGNED else 128) if quant else (0.0, 0)
    spread = np.array([0.2, 0.2, 0.3, 0.3])
    deltas = b.rng.uniform(-1, 1, (n, h, w, a, 4)) * spread
    deltas = (np.round(deltas / delta_quant[0]) * delta_quant[0] if quant
              else deltas.astype(DTYPES[x.type]).astype(np.float64))  # as stored
    h_stride, w_stride = (_stored(x, v) for v in np.round(b.rng.uniform(STRIDE, 1.5 * STRIDE, 2) * 8) / 8)
    last_centres = np.array([[(h - 1) * h_stride + centre, (w - 1) * w_stride + centre]])
    image = last_centres + b.rng.uniform(-4, 8, (n, 2))  # the last row and column: dropped, clipped or inside
    image = np.round(image * 8) / 8
    pre_nms = -1 if b.chance(0.4) else int(b.rng.integers(1, h * w * a + 1))
    post_nms = -1 if b.chance(0.4) else int(b.rng.integers(1, h * w * a + 1))
    iou_threshold = _stored(x, b.rng.uniform(0.35, 0.65))
    min_size = _stored(x, b.rng.uniform(0.5, 4.0))
    margin = score_margin(x.type)

    scores = x.real if not nchw else x.real.transpose(0, 2, 3, 1)  # [n, h, w, a]
    shifts = np.stack(np.meshgrid(np.arange(w) * w_stride, np.arange(h) * h_stride), -1)  # [h, w, (x, y)]
    base = anchors[None, None] + np.concatenate([shifts, shifts], -1)[:, :, None]  # [h, w, a, 4]
    total = 0
    for k in range(n):
        boxes = _decode_corners(base.reshape(-1, 4), deltas[k].reshape(-1, 4), image[k])
        order = np.argsort(-scores[k].reshape(-1))
        chosen = order[:pre_nms] if pre_nms > 0 else order
        width, height = boxes[chosen, 2] - boxes[chosen, 0], boxes[chosen, 3] - boxes[chosen, 1]
        centre_x, centre_y = boxes[chosen, 0] + width / 2, boxes[chosen, 1] + height / 2
        tests = np.stack([width - min_size, height - min_size, image[k, 1] - centre_x, image[k, 0] - centre_y])
        clear = np.abs(tests) >= SIZE_MARGIN  # a box stays when every test is > 0
        if not np.all(np.all(clear, axis=0) | np.any(clear & (tests < 0), axis=0)):
            raise Reject("a box's size or centre within SIZE_MARGIN of the minimum size or the image's edge")
        ok = np.all(tests > 0, axis=0)
        chosen = chosen[ok]
        kept = _greedy_nms(scores[k].reshape(-1)[chosen], iou(boxes[chosen], boxes[chosen]), post_nms,
                           _rescoring(0, iou_threshold), _grid(x.type)[0] / 2, margin)
        total += len(kept)
    if total == 0:
        raise Reject("GENERATE_PROPOSALS: no proposal kept")
    delta_shape = (n, 4 * a, h, w) if nchw else (n, h, w, 4 * a)
    delta_values = deltas.reshape(n, h, w, 4 * a)
    if nchw:
        delta_values = delta_values.transpose(0, 3, 1, 2)
    delta_tensor = _tensor(b, x.type, delta_values.reshape(delta_shape), delta_quant)
    anchor_tensor = _tensor(b, Q16S if quant else x.type, anchors, BOX_QUANT if quant else (0.0, 0))
    info_tensor = _tensor(b, Q16A if quant else x.type, image, BOX_QUANT if quant else (0.0, 0))
    scalars = [b.float_scalar(x, h_stride), b.float_scalar(x, w_stride), b.scalar(INT32, pre_nms),
               b.scalar(INT32, post_nms), b.float_scalar(x, iou_threshold), b.float_scalar(x, min_size),
               b.scalar(BOOL, nchw)]
    box_out = Out(Q16A, *BOX_QUANT) if quant else like(x)
    b.add(code, [x, delta_tensor, anchor_tensor, info_tensor] + scalars, [like(x), box_out, Out(I32)])


def _decode_corners(anchors: np.ndarray, deltas: np.ndarray, image_hw: np.ndarray) -> np.ndarray:
    """(dx, dy, dw, dh) deltas applied to corner boxes, clipped to the image, in float64."""
    w, h = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    cx, cy = anchors[:, 0] + w / 2, anchors[:, 1] + h / 2
    cx, cy = cx + deltas[:, 0] * w, cy + deltas[:, 1] * h
    w, h = w * np.exp(deltas[:, 2]), h * np.exp(deltas[:, 3])
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1)
    return np.clip(boxes, 0, np.array([image_hw[1], image_hw[0], image_hw[1], image_hw[0]]))


# -- DETECTION_POSTPROCESSING ---------------------------------------------------------------------

def _detection_scores(b: Builder, code: Op) -> Tensor | None:
    """Scores [batches, anchors, classes] of a type DETECTION_POSTPROCESSING takes: 1-2 batches,
    1-6 anchors, 2-4 classes (class 0 the background), at most 40 scores."""
    type_ = start_type(b, code)
    if type_ is None:
        return None
    shape = (int(b.rng.integers(1, 3)), int(b.rng.integers(1, 7)), int(b.rng.integers(2, 5)))
    return _scores(b, type_, shape if np.prod(shape) <= 40 else (1,) + shape[1:])


@declare([Op.DETECTION_POSTPROCESSING], ranks=(3,), single_only=True, start=_detection_scores,
         domain=lambda x: x.shape[2] >= 2)
def detection_postprocessing(b: Builder, x: Tensor, code: Op) -> None:
    """Anchors (centre y, centre x, height, width) in clusters, tight or loose, clusters apart;
    scale factors 1-10; deltas of 4 or 6 values (the extra ones ignored) moving a centre by at
    most 3% of the anchor's size and its sides by at most 10%. Regular NMS (per class, at most
    1-4 per class) or fast NMS (per anchor's best class, 1-3 classes per detection), max
    detections 1-5, the background class in the labels or not. Scores distinct on the grid, the
    score threshold half-way between grid points; :func:`_greedy_nms` replays the NMS each form
    runs and rejects a draw with an overlap near the IoU threshold (0.3-0.7)."""
    batches, count, classes = x.shape
    clusters = b.rng.integers(0, max(1, count - 1), count)
    corners = _cluster_boxes(b, clusters, b.pick([0.25, 0.25, 2.0]))  # x1, y1, x2, y2
    anchors = np.stack([(corners[:, 1] + corners[:, 3]) / 2, (corners[:, 0] + corners[:, 2]) / 2,
                        corners[:, 3] - corners[:, 1], corners[:, 2] - corners[:, 0]], -1)
    scales = np.array([_stored(x, v) for v in b.rng.uniform(1, 10, 4)])  # y, x, h, w
    length = b.pick([4, 6])
    deltas = np.zeros((batches, count, length))
    deltas[..., :4] = b.rng.uniform(-1, 1, (batches, count, 4)) * np.array([0.03, 0.03, 0.1, 0.1]) * scales
    deltas[..., 4:] = b.rng.uniform(-1, 1, (batches, count, length - 4))
    deltas, anchors = (v.astype(DTYPES[x.type]).astype(np.float64) for v in (deltas, anchors))  # as stored
    regular, background = b.chance(0.5), b.chance(0.5)
    max_detections, per_detection, per_class = (int(b.rng.integers(1, 6)), int(b.rng.integers(1, 4)),
                                                int(b.rng.integers(1, 5)))
    score_threshold = _threshold(b, x, -1, 10)
    iou_threshold = _stored(x, b.rng.uniform(0.3, 0.7))
    margin = score_margin(x.type)

    scores, total = x.real, 0
    for k in range(batches):
        d = deltas[k, :, :4] / scales
        centre_y, centre_x = anchors[:, 0] + anchors[:, 2] * d[:, 0], anchors[:, 1] + anchors[:, 3] * d[:, 1]
        half_h, half_w = anchors[:, 2] * np.exp(d[:, 2]) / 2, anchors[:, 3] * np.exp(d[:, 3]) / 2
        boxes = np.stack([centre_y - half_h, centre_x - half_w, centre_y + half_h, centre_x + half_w], -1)
        overlaps = iou(boxes, boxes)
        _apart(scores[k, :, 1:], score_threshold, margin, "a score")
        if regular:
            for c in range(1, classes):
                candidates = np.nonzero(scores[k, :, c] > score_threshold)[0]
                total += len(_greedy_nms(scores[k, candidates, c], overlaps[np.ix_(candidates, candidates)], per_class,
                                         _rescoring(0, iou_threshold), _grid(x.type)[0] / 2, margin))
        else:
            best = scores[k, :, 1:].max(axis=1)
            candidates = np.nonzero(best > score_threshold)[0]
            total += len(_greedy_nms(best[candidates], overlaps[np.ix_(candidates, candidates)], max_detections,
                                     _rescoring(0, iou_threshold), _grid(x.type)[0] / 2, margin))
    if total == 0:
        raise Reject("DETECTION_POSTPROCESSING: no detection")
    scalars = [b.float_scalar(x, v) for v in scales] + [
        b.scalar(BOOL, regular), b.scalar(INT32, max_detections), b.scalar(INT32, per_detection),
        b.scalar(INT32, per_class), b.float_scalar(x, score_threshold), b.float_scalar(x, iou_threshold),
        b.scalar(BOOL, background)]
    b.add(code, [x, _tensor(b, x.type, deltas), _tensor(b, x.type, anchors)] + scalars,
          [like(x), like(x), Out(I32), Out(I32)])


# -- HASHTABLE_LOOKUP -----------------------------------------------------------------------------

@declare([Op.HASHTABLE_LOOKUP], ranks=(2, 3, 4), position=2, single_only=True)
def hashtable_lookup(b: Builder, x: Tensor, code: Op) -> None:
    """Keys: one distinct integer per row of the values x, sorted ascending; lookups: 1-6 of
    those keys and of integers that are not keys (misses: zero rows, hit 0). The hits output in
    NNAPI's fixed quantization (scale 1, zero point 0)."""
    reach = 2 * x.shape[0] + 10
    keys = np.sort(b.rng.choice(np.arange(-reach, reach), x.shape[0], replace=False))
    misses = np.setdiff1d(np.arange(-reach - 5, reach + 5), keys)
    lookups = [int(b.pick(keys)) if b.chance(0.7) else int(b.pick(misses)) for _ in range(b.dim())]
    b.add(code, [_tensor(b, I32, np.array(lookups)), _tensor(b, I32, keys), x],
          [like(x), Out(T.TENSOR_QUANT8_ASYMM, 1.0, 0)])
