"""Rearranging elements between dimensions: TRANSPOSE, DEPTH_TO_SPACE, SPACE_TO_DEPTH,
BATCH_TO_SPACE_ND, SPACE_TO_BATCH_ND, CHANNEL_SHUFFLE.

The 4-D operations take an optional NCHW layout flag (from feature level 3): they are computed in
NHWC, converting NCHW tensors on the way in and out. Each rearrangement is one reshape, one axis
permutation and one reshape.

AOSP and TFLite
---------------
All of them move stored values and keep the quantization: identical.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import Call, OperationCode, OperationRegistration, Signature, T, check, register, signatures
from nnapi_ref.ops.padding import pad_constant
from nnapi_ref.ops.shapes import QUANT8, check_same_quant, int_vector
from nnapi_ref.types import ResultCode

LEGACY = (T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM)


def layout_signatures(first_level: int, params) -> list[Signature]:
    """FLOAT32/QUANT8_ASYMM from ``first_level`` without the layout flag, with it from level 29;
    FLOAT16 from 29 and QUANT8_ASYMM_SIGNED from 30, flag optional."""
    inputs = [None, *params]
    sigs = signatures(first_level, LEGACY, inputs, [None])
    sigs += signatures(29, LEGACY + (T.TENSOR_FLOAT16,), inputs + [T.BOOL], [None], optional=1)
    sigs += signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), inputs + [T.BOOL], [None], optional=1)
    return sigs


def is_nchw(call: Call, k: int) -> bool:
    return len(call.ins) > k and bool(call.ins[k].scalar())


def nhwc_shape(shape, nchw: bool) -> tuple:
    return (shape[0], shape[2], shape[3], shape[1]) if nchw else tuple(shape)


def from_nhwc_shape(shape, nchw: bool) -> tuple:
    return (shape[0], shape[3], shape[1], shape[2]) if nchw else tuple(shape)


class _Layout4D(OperationRegistration):
    """A 4-D operation whose input ``layout_input`` is the optional NCHW flag."""

    layout_input: int

    def nhwc_out_shape(self, call: Call, shape: tuple) -> tuple:
        raise NotImplementedError

    def rearrange(self, call: Call, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def infer(self, call: Call):
        x = call.ins[0]
        check(x.rank == 4, f"{self.name}: input must have rank 4, got {x.rank}")
        check_same_quant(self.name, x, call.outs[0])
        nchw = is_nchw(call, self.layout_input)
        return [from_nhwc_shape(self.nhwc_out_shape(call, nhwc_shape(x.shape, nchw)), nchw)]

    def execute(self, call: Call):
        nchw = is_nchw(call, self.layout_input)
        x = call.ins[0].value
        if nchw:
            x = x.transpose(0, 2, 3, 1)
        out = self.rearrange(call, x)
        if nchw:
            out = out.transpose(0, 3, 1, 2)
        return [np.ascontiguousarray(out)]


@register
class DepthToSpace(_Layout4D):
    code = OperationCode.DEPTH_TO_SPACE
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = {1: "block size", 2: "layout"}
    accuracy = "strict"
    signatures = layout_signatures(27, [T.INT32])
    layout_input = 2

    def nhwc_out_shape(self, call, shape):
        b, h, w, c = shape
        bs = call.ins[1].scalar()
        check(bs >= 1, f"DEPTH_TO_SPACE: block_size {bs} must be >= 1")
        check(c % (bs * bs) == 0, f"DEPTH_TO_SPACE: depth {c} is not divisible by block_size^2 = {bs * bs}")
        return (b, h * bs, w * bs, c // (bs * bs))

    def rearrange(self, call, x):
        b, h, w, c = x.shape
        bs = call.ins[1].scalar()
        oc = c // (bs * bs)
        # input channel (i * bs + j) * oc + k goes to output pixel (h * bs + i, w * bs + j), channel k.
        return x.reshape(b, h, w, bs, bs, oc).transpose(0, 1, 3, 2, 4, 5).reshape(b, h * bs, w * bs, oc)


@register
class SpaceToDepth(_Layout4D):
    code = OperationCode.SPACE_TO_DEPTH
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = {1: "block size", 2: "layout"}
    accuracy = "strict"
    signatures = layout_signatures(27, [T.INT32])
    layout_input = 2

    def nhwc_out_shape(self, call, shape):
        b, h, w, c = shape
        bs = call.ins[1].scalar()
        check(bs >= 1, f"SPACE_TO_DEPTH: block_size {bs} must be >= 1")
        check(h % bs == 0 and w % bs == 0,
              f"SPACE_TO_DEPTH: height {h} and width {w} must be divisible by block_size {bs}")
        return (b, h // bs, w // bs, c * bs * bs)

    def rearrange(self, call, x):
        b, h, w, c = x.shape
        bs = call.ins[1].scalar()
        return (x.reshape(b, h // bs, bs, w // bs, bs, c).transpose(0, 1, 3, 2, 4, 5)
                .reshape(b, h // bs, w // bs, c * bs * bs))


def block_shape(name: str, arg) -> tuple[int, int]:
    block = int_vector(name, arg, "block_shape", 2)
    check(all(v >= 1 for v in block), f"{name}: block sizes {block} must be >= 1")
    return block[0], block[1]


@register
class BatchToSpaceND(_Layout4D):
    code = OperationCode.BATCH_TO_SPACE_ND
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = {1: "block shape", 2: "layout"}
    accuracy = "strict"
    signatures = layout_signatures(28, [T.TENSOR_INT32])
    layout_input = 2

    def nhwc_out_shape(self, call, shape):
        b, h, w, c = shape
        bh, bw = block_shape("BATCH_TO_SPACE_ND", call.ins[1])
        check(b % (bh * bw) == 0, f"BATCH_TO_SPACE_ND: batch {b} is not divisible by the block size product {bh * bw}")
        return (b // (bh * bw), h * bh, w * bw, c)

    def rearrange(self, call, x):
        b, h, w, c = x.shape
        bh, bw = block_shape("BATCH_TO_SPACE_ND", call.ins[1])
        ob = b // (bh * bw)
        # input batch (i * bw + j) * ob + n holds output pixels (y * bh + i, x * bw + j) of batch n.
        return x.reshape(bh, bw, ob, h, w, c).transpose(2, 3, 0, 4, 1, 5).reshape(ob, h * bh, w * bw, c)


@register
class SpaceToBatchND(_Layout4D):
    code = OperationCode.SPACE_TO_BATCH_ND
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = {1: "block shape", 2: "paddings", 3: "layout"}
    accuracy = "strict"
    signatures = layout_signatures(28, [T.TENSOR_INT32, T.TENSOR_INT32])
    layout_input = 3

    def _paddings(self, call):
        arg = call.ins[2]
        check(arg.rank == 2 and tuple(arg.shape) == (2, 2),
              f"SPACE_TO_BATCH_ND: paddings must have shape [2, 2], got {list(arg.shape)}")
        pads = np.asarray(arg.value).reshape(2, 2)
        check(bool((pads >= 0).all()), f"SPACE_TO_BATCH_ND: paddings {pads.tolist()} must be non-negative")
        return [(int(a), int(b)) for a, b in pads]

    def nhwc_out_shape(self, call, shape):
        b, h, w, c = shape
        bh, bw = block_shape("SPACE_TO_BATCH_ND", call.ins[1])
        (top, bottom), (left, right) = self._paddings(call)
        ph, pw = top + h + bottom, left + w + right
        check(ph % bh == 0 and pw % bw == 0, f"SPACE_TO_BATCH_ND: padded size {ph}x{pw} is not divisible "
              f"by the block shape {bh}x{bw}")
        return (b * bh * bw, ph // bh, pw // bw, c)

    def rearrange(self, call, x):
        bh, bw = block_shape("SPACE_TO_BATCH_ND", call.ins[1])
        pads = [(0, 0), *self._paddings(call), (0, 0)]
        arg = call.ins[0]
        x = pad_constant(x, pads, arg.zero_point if arg.type in QUANT8 else 0)
        b, h, w, c = x.shape
        return (x.reshape(b, h // bh, bh, w // bw, bw, c).transpose(2, 4, 0, 1, 3, 5)
                .reshape(b * bh * bw, h // bh, w // bw, c))


@register
class Transpose(OperationRegistration):
    code = OperationCode.TRANSPOSE
    zero_sized_inputs = None
    parameters = {1: "permutation"}
    accuracy = "strict"
    signatures = (signatures(28, LEGACY, [None, T.TENSOR_INT32], [None], omittable=[1])
                  + signatures(29, (T.TENSOR_FLOAT16,), [None, T.TENSOR_INT32], [None], omittable=[1])
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), [None, T.TENSOR_INT32], [None], omittable=[1]))

    def _perm(self, call):
        x, perm_arg = call.ins
        if perm_arg.omitted:
            return list(range(x.rank - 1, -1, -1))
        perm = int_vector("TRANSPOSE", perm_arg, "perm", x.rank)
        check(sorted(perm) == list(range(x.rank)), f"TRANSPOSE: {perm} is not a permutation of 0..{x.rank - 1}")
        return perm

    def infer(self, call: Call):
        x = call.ins[0]
        check(x.rank <= 4, f"TRANSPOSE: input rank {x.rank} exceeds 4")
        check_same_quant("TRANSPOSE", x, call.outs[0])
        return [tuple(x.shape[p] for p in self._perm(call))]

    def execute(self, call: Call):
        return [np.ascontiguousarray(call.ins[0].value.transpose(self._perm(call)))]


@register
class ChannelShuffle(OperationRegistration):
    code = OperationCode.CHANNEL_SHUFFLE
    parameters = {1: "groups", 2: "axis"}
    accuracy = "strict"
    signatures = (signatures(29, LEGACY + (T.TENSOR_FLOAT16,), [None, T.INT32, T.INT32], [None])
                  + signatures(30, (T.TENSOR_QUANT8_ASYMM_SIGNED,), [None, T.INT32, T.INT32], [None]))

    def _params(self, call):
        x = call.ins[0]
        rank = x.rank
        check(1 <= rank <= 4, f"CHANNEL_SHUFFLE: input rank {rank} must be in [1, 4]")
        groups = call.ins[1].scalar()
        axis = call.ins[2].scalar()
        check(-rank <= axis < rank, f"CHANNEL_SHUFFLE: axis {axis} out of range [{-rank}, {rank})")
        axis %= rank
        check(groups >= 1, f"CHANNEL_SHUFFLE: num_groups {groups} must be positive")
        check(x.shape[axis] % groups == 0,
              f"CHANNEL_SHUFFLE: {x.shape[axis]} channels are not divisible by num_groups {groups}")
        return groups, axis

    def infer(self, call: Call):
        check_same_quant("CHANNEL_SHUFFLE", call.ins[0], call.outs[0])
        self._params(call)
        return [tuple(call.ins[0].shape)]

    def execute(self, call: Call):
        groups, axis = self._params(call)
        x = call.ins[0].value
        shape = x.shape
        # output channel k * groups + g = input channel g * group_size + k: a [groups, group_size] transpose.
        split = x.reshape(shape[:axis] + (groups, shape[axis] // groups) + shape[axis + 1:])
        return [np.ascontiguousarray(np.swapaxes(split, axis, axis + 1)).reshape(shape)]
