"""Family declarations (:mod:`nnts.generators.families`) for operations whose inputs need a structure random
tensors lack, generated valid: regions of interest inside the feature map with batch indices
(ROI_ALIGN, ROI_POOLING), heatmaps with one clear maximum and their boxes (HEATMAP_MAX_KEYPOINT),
and the operations at the ends of a graph: FILL (from a shape tensor of positive sizes) and RANK
(a scalar output, a model output nothing else consumes).
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.common import QUANT_RANGE
from nnapi_ref.types import DTYPES, OperandCode as T, OperationCode as Op
from nnts.generators.families import BOOL, INT32, declare, free, like, pick_form, primary_types, start_type
from nnts.generators.graphs import F16, I32, QUANT8, Builder, Out, Reject, Tensor

BOX_QUANT = (0.125, 0)  # TENSOR_QUANT16_ASYMM boxes: NNAPI fixes scale 0.125, zero point 0


def _box_tensor(b: Builder, x: Tensor, boxes: np.ndarray) -> int:
    """Box coordinates as a constant of the type the operation takes with ``x``: x's float type,
    or TENSOR_QUANT16_ASYMM (on the 1/8 grid) with a quant8 ``x``."""
    if x.type in QUANT8:
        return b.constant(T.TENSOR_QUANT16_ASYMM, np.round(boxes / BOX_QUANT[0]), *BOX_QUANT)
    return b.constant(x.type, boxes)


def _random_boxes(b: Builder, count: int, height: float, width: float, grid: bool) -> np.ndarray:
    """``count`` boxes (x1, y1, x2, y2) with 0 <= x1 <= x2 <= width, 0 <= y1 <= y2 <= height
    (on the 1/8 grid for quantized boxes)."""
    boxes = np.zeros((count, 4))
    for r in range(count):
        for lo, hi, size in ((0, 2, width), (1, 3, height)):
            a, c = sorted(b.rng.uniform(0, size, 2))
            boxes[r, lo], boxes[r, hi] = a, c
    return np.floor(boxes * 8) / 8 if grid else boxes


@declare([Op.ROI_ALIGN, Op.ROI_POOLING], ranks=(4,))
def roi(b: Builder, x: Tensor, code: Op) -> None:
    """1-3 regions inside the feature map scaled by the ratio (feature map size x ratio), each of
    a random batch, pooled to 1-3 x 1-3 bins; ROI_ALIGN with 0-2 sampling points per bin."""
    nchw = b.chance(0.5)
    n, h, w = (x.shape[0], x.shape[2], x.shape[3]) if nchw else x.shape[:3]
    ratio = b.pick([0.5, 1.0, 2.0])
    count = int(b.rng.integers(1, 4))
    boxes = _random_boxes(b, count, (h - 1) * ratio, (w - 1) * ratio, x.type in QUANT8)
    ins = [x, _box_tensor(b, x, boxes), b.ints(b.rng.integers(0, n, count)),
           b.scalar(INT32, int(b.rng.integers(1, 4))), b.scalar(INT32, int(b.rng.integers(1, 4))),
           b.float_scalar(x, ratio), b.float_scalar(x, ratio)]
    if code == Op.ROI_ALIGN:
        ins += [b.scalar(INT32, int(b.rng.integers(0, 3))), b.scalar(INT32, int(b.rng.integers(0, 3)))]
    b.add(code, ins + [b.scalar(BOOL, nchw)], [like(x)])


def _clear_maximum(x: Tensor, nchw: bool) -> bool:
    """Each heatmap's largest value stands clear of the second largest (no tie to break)."""
    v = x.real.transpose(0, 3, 1, 2) if not nchw else x.real.transpose(0, 1, 2, 3)
    flat = np.sort(v.reshape(v.shape[0], v.shape[1], -1), axis=-1)
    return bool(np.all(flat[..., -1] - flat[..., -2] >= 1e-2 * (1 + np.abs(flat[..., -1]))))


def _heatmaps(b: Builder, code: Op) -> Tensor | None:
    """Square NHWC heatmaps (1-3 of size 2-6, 1-4 keypoints) of a random type, each with one
    maximum a quarter above the rest: what a graph of HEATMAP_MAX_KEYPOINT alone starts from."""
    types = [t for t in (T.TENSOR_FLOAT32, F16) + QUANT8 if t in primary_types(code, b.level, 0)]
    if not types:
        return None  # below the operation's level
    type_ = b.pick(types)
    size = int(b.rng.integers(2, 7))
    shape = (int(b.rng.integers(1, 4)), size, size, int(b.rng.integers(1, 5)))
    scale, zero_point = b.quantization(type_) if type_ in QUANT8 else (0.0, 0)
    real = b.rng.uniform(-1.5, 1.0, shape)
    flat = real.reshape(shape[0], -1, shape[3])
    peaks = b.rng.integers(0, size * size, (shape[0], shape[3]))
    for n in range(shape[0]):
        flat[n, peaks[n], np.arange(shape[3])] = 1.5
    if type_ in QUANT8:
        lo, hi = QUANT_RANGE[type_]
        value = np.clip(np.round(real / scale) + zero_point, lo, hi).astype(DTYPES[type_])
    else:
        value = real.astype(DTYPES[type_])
    k = b._operand(type_, shape, scale, zero_point)
    b.inputs.append(k)
    b.values[k] = value
    return Tensor(k, type_, value, scale, zero_point)


@declare([Op.HEATMAP_MAX_KEYPOINT], ranks=(4,), domain=lambda x: x.shape[1] == x.shape[2] >= 2 or
         x.shape[2] == x.shape[3] >= 2, start=_heatmaps)
def heatmap_max_keypoint(b: Builder, x: Tensor, code: Op) -> None:
    """Square heatmaps (NHWC or NCHW, whichever x is square in) with a clear maximum each, one
    box per heatmap batch."""
    layouts = [nchw for nchw, (p, q) in ((False, x.shape[1:3]), (True, x.shape[2:4])) if p == q >= 2]
    nchw = b.pick(layouts)
    if not _clear_maximum(x, nchw):
        raise Reject("a heatmap's maximum is tied")
    boxes = _random_boxes(b, x.shape[0], 8.0, 8.0, x.type in QUANT8)
    keypoints = Out(T.TENSOR_QUANT16_ASYMM, *BOX_QUANT) if x.type in QUANT8 else like(x)
    b.add(code, [x, _box_tensor(b, x, boxes), b.scalar(BOOL, nchw)], [free(x), keypoints])


@declare([Op.RANK])
def rank(b: Builder, x: Tensor, code: Op) -> None:
    b.add(code, [x], [Out(T.INT32)])


def _shape_source(b: Builder, code: Op) -> Tensor:
    """A 1-D TENSOR_INT32 of 1-4 sizes in [1, 6]: a shape FILL can take."""
    return b.fresh(I32, (int(b.rng.integers(1, 5)),), low=0.6, high=6.4)


@declare([Op.FILL], ranks=(1,), domain=lambda x: x.value.size <= 4 and np.all((x.value >= 1) & (x.value <= 6)),
         start=_shape_source)
def fill(b: Builder, x: Tensor, code: Op) -> None:
    """A tensor of the shape x holds, every element one value of a form's output type."""
    target = pick_form(b, code, x).outputs[0]
    if target == I32:
        value = b.scalar(INT32, int(b.rng.integers(-5, 6)))
    else:
        value = b.scalar(T.FLOAT16 if target == F16 else T.FLOAT32, float(b.rng.uniform(-2, 2)))
    b.add(code, [x, value], [Out(target)])


def _deltas(b: Builder, code: Op) -> Tensor | None:
    """Box deltas of 1-4 regions for 1-3 classes, in [-1, 1]: a start for the box transform."""
    type_ = start_type(b, code, 1)
    if type_ is None:
        return None
    return b.fresh(type_, (int(b.rng.integers(1, 5)), 4 * int(b.rng.integers(1, 4))), low=-1.0, high=1.0)


@declare([Op.AXIS_ALIGNED_BBOX_TRANSFORM], ranks=(2,), position=1, start=_deltas,
         domain=lambda x: x.shape[1] % 4 == 0 and np.max(np.abs(x.real)) <= 2.5)
def axis_aligned_bbox_transform(b: Builder, x: Tensor, code: Op) -> None:
    """Deltas x applied to one well-formed box per row, each inside its batch's image (1-2
    images of 8-32 pixels a side; rows grouped by batch)."""
    quant = x.type in QUANT8
    images = b.rng.integers(8, 33, (int(b.rng.integers(1, 3)), 2)).astype(np.float64)  # height, width
    batches = np.sort(b.rng.integers(0, len(images), x.shape[0]))
    boxes = np.concatenate([_random_boxes(b, 1, images[i, 0], images[i, 1], quant) for i in batches])
    info = (b.constant(T.TENSOR_QUANT16_ASYMM, images / BOX_QUANT[0], *BOX_QUANT) if quant
            else b.constant(x.type, images))
    out = Out(T.TENSOR_QUANT16_ASYMM, *BOX_QUANT) if quant else like(x)
    b.add(code, [_box_tensor(b, x, boxes), x, b.ints(batches), info], [out])
