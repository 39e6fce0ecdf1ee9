"""Convolutions: CONV_2D, DEPTHWISE_CONV_2D, GROUPED_CONV_2D, TRANSPOSE_CONV_2D.

Float convolutions are an im2col (a strided view of the padded input, copied once) followed by a
single BLAS matmul; a 1x1 stride-1 convolution is a plain matmul. Float16 is computed in float32
(as NNAPI's CPU implementation does); small problems are accumulated in float64, which costs
nothing there and keeps the result within float32 tolerance whatever the summation order.

Quantized convolutions accumulate exactly: the zero-point-corrected operands are small integers,
so a float64 BLAS product of them is exact (|sum| < 2**53), and is turned back into int64. The
accumulator plus bias (wrapped to int32 as the C implementation's int32 accumulator would) is
requantized with NNAPI's fixed-point multiplier (:mod:`.requantization`): real multiplier =
input_scale * filter_scale / output_scale, per output channel for per-channel quantized filters;
AOSP forms the product in float32 where TFLite forms it in double (the ``convention``). The
requantization is otherwise TFLite's: AOSP runs TFLite's kernels (optimized_ops::Conv and
DepthwiseConv for uint8, reference_integer_ops::ConvPerChannel / DepthwiseConvPerChannel for
int8 and per-channel filters), with the same MultiplyByQuantizedMultiplier.

Depthwise convolutions are one ``einsum`` over a strided view of the padded input's windows (see
:func:`depthwise_nhwc`).

The modules beside this one hold what the operations share: :mod:`.spatial` the spatial
parameters (padding schemes, output sizes, the layout flag; used by pooling too),
:mod:`.conv_quantization` the requantization and accumulator types (used by FULLY_CONNECTED too),
:mod:`.conv_fast_paths` the prepared CONV_2D and DEPTHWISE_CONV_2D paths.

AOSP and TFLite
---------------
The accumulation and the fixed-point requantization (MultiplyByQuantizedMultiplier, two
roundings) are the same; only the multiplier's derivation differs (:mod:`.requantization`).
AOSP multiplies the two float scales in float32 and divides in double for every convolution.
TFLite's int8 kernels, and any per-channel filter, use the per-channel multipliers of
PopulateConvolutionQuantizationParams, derived in double; its uint8 kernels with one filter
scale use the legacy scalar multiplier of GetQuantizedConvolutionMultipler, derived as AOSP's
(measured against TFLite for CONV_2D, DEPTHWISE_CONV_2D and TRANSPOSE_CONV_2D,
tests/test_diverge.py). GROUPED_CONV_2D has no TFLite kernel and takes the rule of the other
convolutions under the ``tflite`` convention.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import (Call, OperationCode, OperationRegistration, Signature, T, WindowInputs, check, register,
                                window_parameters)
from nnapi_ref.ops.common import check_fuse_code
from nnapi_ref.ops.conv_fast_paths import conv2d_fast, depthwise_fast
from nnapi_ref.ops.conv_quantization import accumulator_type, check_quant_conv, finish, operand_values, quant_magnitudes
from nnapi_ref.ops.spatial import (Spatial, from_nhwc, im2col, layout_shape, nhwc_dims, out_size, padded_window_input,
                                   parse_spatial, resolve_padding, same_padding, to_nhwc)
from nnapi_ref.types import PaddingCode, ResultCode

F32, F16, I32, BOOL = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.INT32, T.BOOL
Q8, S8, PC, TI32 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_INT32
QUANT8 = (Q8, S8)


# ---------------------------------------------------------------------------------------------
# Signatures
# ---------------------------------------------------------------------------------------------

def _typed(level, scalars, tail=(), optional=0, by_level=None):
    """Signatures for (input, filter, bias) type triples by level, followed by ``scalars``."""
    sigs = []
    for lvl, triples in by_level.items():
        for (a, f, b) in triples:
            sigs.append(Signature(max(lvl, level), [a, f, b, *scalars, *tail], [a], optional=optional))
    return sigs


def conv_signatures(n_explicit: int, n_implicit: int, optional_from_29: bool, min_level: int = 27,
                    implicit_head=None, always_tail=()):
    """Signatures of a convolution with ``n_explicit``/``n_implicit`` INT32 scalars."""
    base27 = [(F32, F32, F32), (Q8, Q8, TI32)]
    base29 = [(F16, F16, F16), (Q8, PC, TI32)]
    base30 = [(S8, S8, TI32), (S8, PC, TI32)]
    explicit = [I32] * n_explicit
    implicit = (implicit_head or []) + [I32] * (n_implicit - len(implicit_head or []))
    sigs = []
    opt_tail = [BOOL, I32, I32]  # layout, then both dilation factors or neither
    for scalars in (explicit, implicit):
        if optional_from_29:
            sigs += _typed(27, scalars, by_level={27: base27})
            sigs += _typed(29, scalars, opt_tail, (0, 2, 3), {27: base27, 29: base29})
            sigs += _typed(30, scalars, opt_tail, (0, 2, 3), {30: base30})
        else:
            sigs += _typed(min_level, scalars, always_tail, 0, {27: base27, 29: base29})
            sigs += _typed(30, scalars, always_tail, 0, {30: base30})
    return sigs


# ---------------------------------------------------------------------------------------------
# Operations
# ---------------------------------------------------------------------------------------------


def _check_tensor_ranks(name, inp, flt, bias):
    check(inp.rank == 4, f"{name}: input must be 4-D, got rank {inp.rank}")
    check(flt.rank == 4, f"{name}: filter must be 4-D, got rank {flt.rank}")
    check(bias.rank == 1, f"{name}: bias must be 1-D, got rank {bias.rank}")


def _check_padding_vs_filter(name, p: Spatial, kh, kw):
    eh = (kh - 1) * p.dilation_h + 1
    ew = (kw - 1) * p.dilation_w + 1
    left, right, top, bottom = p.pads
    check(left < ew and right < ew and top < eh and bottom < eh,
          f"{name}: paddings {list(p.pads)} must be smaller than the effective filter size "
          f"(width {ew}, height {eh})")


class _Conv(OperationRegistration):
    base = 3
    n_extra = 0
    dilation = True

    def params(self, call: Call) -> Spatial:
        return parse_spatial(call, self.name, self.base, self.n_extra, self.dilation)

    def geometry(self, call: Call):
        """Validate; return (params, (N, H, W, C), (KH, KW), (OH, OW), C_out). Remembered per
        input shape when every other input is a constant (the operand types, scales and zero
        points are fixed for the compiled operation); the result must not be modified."""
        return call.derived(("geometry", call.ins[0].shape), range(1, len(call.ins)), lambda: self._geometry(call))

    def _geometry(self, call: Call):
        inp, flt, bias, out = call.ins[0], call.ins[1], call.ins[2], call.outs[0]
        name = self.name
        _check_tensor_ranks(name, inp, flt, bias)
        p = self.params(call)
        n, h, w, c = nhwc_dims(inp.shape, p.nchw)
        kh, kw = flt.shape[1], flt.shape[2]
        check(h > 0 and w > 0 and c > 0, f"{name}: input height, width and depth must be > 0, got {inp.shape}")
        check(kh > 0 and kw > 0, f"{name}: filter height and width must be > 0, got {flt.shape}")
        c_out = self.check_channels(call, p, c)
        check(bias.shape[0] == c_out, f"{name}: bias has {bias.shape[0]} elements for {c_out} output channels")
        check_quant_conv(name, inp, flt, bias, out, self.channel_dim, c_out)
        resolve_padding(p, h, w, kh, kw)
        _check_padding_vs_filter(name, p, kh, kw)
        left, right, top, bottom = p.pads
        oh = out_size(h, kh, p.stride_h, p.dilation_h, top, bottom)
        ow = out_size(w, kw, p.stride_w, p.dilation_w, left, right)
        check(oh > 0 and ow > 0, f"{name}: output would be {oh}x{ow}: the filter does not fit the padded input")
        return p, (n, h, w, c), (kh, kw), (oh, ow), c_out

    def infer(self, call: Call):
        p, (n, _, _, _), _, (oh, ow), c_out = self.geometry(call)
        return [layout_shape(n, oh, ow, c_out, p.nchw)]


@register
class Conv2D(_Conv):
    code = OperationCode.CONV_2D
    zero_sized_inputs = None
    parameters = window_parameters(3)
    accuracy = "conv"
    window_inputs = (WindowInputs(7, 6, 7, 8), WindowInputs(10, 9, 10, 11))
    signatures = conv_signatures(7, 4, optional_from_29=True)
    channel_dim = 0

    def check_channels(self, call, p, c):
        flt = call.ins[1]
        check(flt.shape[3] == c, f"{self.name}: filter depth {flt.shape[3]} != input depth {c}")
        check(flt.shape[0] > 0, f"{self.name}: filter must have > 0 output channels")
        return flt.shape[0]

    def execute(self, call: Call):
        p, (n, h, w, c), (kh, kw), (oh, ow), c_out = self.geometry(call)
        fast = conv2d_fast(call, p, (n, h, w, c), (kh, kw), (oh, ow), c_out)
        if fast is not None:
            return [from_nhwc(fast, p.nchw)]
        dtype, bound = accumulator_type(call, kh * kw * c, n * oh * ow * c_out * kh * kw * c)
        x, wt = operand_values(call.ins[0], call.ins[1], dtype)
        x = to_nhwc(x, p.nchw)
        acc = conv2d_nhwc(x, wt, p, kh, kw, oh, ow)
        return [from_nhwc(finish(acc, call, p.fuse, c_out, bound), p.nchw)]


def conv2d_nhwc(x, wt, p: Spatial, kh, kw, oh, ow, groups: int = 1) -> np.ndarray:
    """Accumulator of a (grouped) convolution: x (N, H, W, C), wt (O, KH, KW, C / groups)."""
    n, h, w, c = x.shape
    c_out = wt.shape[0]
    left, _, top, _ = p.pads
    sh, sw, dh, dw = p.stride_h, p.stride_w, p.dilation_h, p.dilation_w
    if groups == 1 and kh == 1 and kw == 1 and sh == 1 and sw == 1 and left == 0 and top == 0 \
            and oh == h and ow == w:
        cols = x.reshape(n * h * w, c)
    else:
        need_h, need_w = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
        xp = padded_window_input(x, top, left, need_h, need_w)
        if kh == 1 and kw == 1:
            cols = xp[:, ::sh, ::sw, :][:, :oh, :ow, :]
        else:
            cols = im2col(xp, kh, kw, sh, sw, dh, dw, oh, ow)
        if groups > 1:
            cg = c // groups
            cols = cols.reshape(n * oh * ow, kh * kw, groups, cg).transpose(2, 0, 1, 3).reshape(groups, n * oh * ow,
                                                                                               kh * kw * cg)
            wg = wt.reshape(groups, c_out // groups, kh * kw * cg).transpose(0, 2, 1)
            acc = np.matmul(cols, wg)  # (G, M, O/G)
            return acc.transpose(1, 0, 2).reshape(n, oh, ow, c_out)
        cols = cols.reshape(n * oh * ow, kh * kw * c)
    acc = cols @ wt.reshape(c_out, -1).T
    return acc.reshape(n, oh, ow, c_out)


@register
class DepthwiseConv2D(_Conv):
    code = OperationCode.DEPTHWISE_CONV_2D
    zero_sized_inputs = None
    parameters = window_parameters(3, ("depth multiplier",))
    accuracy = "conv"
    window_inputs = (WindowInputs(8, 7, 8, 9, 6), WindowInputs(11, 10, 11, 12, 9))
    signatures = conv_signatures(8, 5, optional_from_29=True)
    n_extra = 1
    channel_dim = 3

    def check_channels(self, call, p, c):
        flt = call.ins[1]
        mult = int(p.extra[0])
        check(mult > 0, f"{self.name}: depth multiplier must be > 0, got {mult}")
        check(flt.shape[0] == 1, f"{self.name}: filter dimension 0 must be 1, got {flt.shape[0]}")
        check(flt.shape[3] == c * mult,
              f"{self.name}: filter depth {flt.shape[3]} != input depth {c} * depth multiplier {mult}")
        return flt.shape[3]

    def execute(self, call: Call):
        p, (n, h, w, c), (kh, kw), (oh, ow), c_out = self.geometry(call)
        fast = depthwise_fast(call, p, (n, h, w, c), (kh, kw), (oh, ow), c_out)
        if fast is not None:
            return [from_nhwc(fast, p.nchw)]
        inp = call.ins[0]
        quant = inp.type in QUANT8
        bound = None
        if quant:
            # Integer products summed exactly: in float32 while every partial sum is < 2**24.
            mx, mw = quant_magnitudes(inp, call.ins[1])
            bound = float(kh * kw) * mx * mw
            dtype = np.float32 if bound < 2.0 ** 24 else np.float64
        else:
            dtype = np.float32  # accumulated in float32, as NNAPI's CPU implementation does
        mult = c_out // c
        if quant:
            # Pad the 8-bit input with its zero point (0 once corrected), then convert once.
            x = to_nhwc(inp.value, p.nchw)
            if mult > 1:
                x = np.repeat(x, mult, axis=3)
            need_h = (oh - 1) * p.stride_h + (kh - 1) * p.dilation_h + 1
            need_w = (ow - 1) * p.stride_w + (kw - 1) * p.dilation_w + 1
            x = padded_window_input(x, p.pads[2], p.pads[0], need_h, need_w, inp.zero_point).astype(dtype)
            if inp.zero_point:
                x -= dtype(inp.zero_point)
            flt = call.ins[1]
            wt = flt.value.astype(dtype)
            if flt.type != PC and flt.zero_point:
                wt -= dtype(flt.zero_point)
            acc = depthwise_nhwc(x, wt[0], p, oh, ow, padded=True)
        else:
            x, wt = operand_values(inp, call.ins[1], dtype)
            x = to_nhwc(x, p.nchw)
            if mult > 1:
                x = np.repeat(x, mult, axis=3)
            acc = depthwise_nhwc(x, wt[0], p, oh, ow)
        return [from_nhwc(finish(acc, call, p.fuse, c_out, bound), p.nchw)]


def depthwise_nhwc(x, wt, p: Spatial, oh, ow, padded: bool = False):
    """Depthwise accumulator: per output position and channel, the sum over kernel taps of the
    padded input times the tap's weight, as one ``einsum`` over a strided view of the windows.

    With a horizontal stride of 1 the width and channel axes of a window row are flattened into
    one long axis (tap kx is then an offset of kx * dilation * C elements), with the weights tiled
    along it: einsum's inner loop runs over OW * C elements instead of C."""
    n, h, w, c = x.shape
    kh, kw = wt.shape[0], wt.shape[1]
    left, _, top, _ = p.pads
    sh, sw, dh, dw = p.stride_h, p.stride_w, p.dilation_h, p.dilation_w
    need_h, need_w = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    # ``padded``: x is already the padded input (window rows/cols from 0).
    xp = x[:, :need_h, :need_w, :] if padded else padded_window_input(x, top, left, need_h, need_w)
    if not xp.flags.c_contiguous:
        xp = np.ascontiguousarray(xp)
    s0, s1, s2, s3 = xp.strides
    if sw == 1:
        wins = np.lib.stride_tricks.as_strided(xp, (n, oh, kh, kw, ow * c), (s0, s1 * sh, s1 * dh, s2 * dw, s3),
                                               writeable=False)
        tiled = np.tile(wt, (1, 1, ow))  # (KH, KW, OW * C)
        acc = np.einsum("nyijk,ijk->nyk", wins, tiled)
        return acc.reshape(n, oh, ow, c)
    wins = np.lib.stride_tricks.as_strided(xp, (n, oh, ow, kh, kw, c), (s0, s1 * sh, s2 * sw, s1 * dh, s2 * dw, s3),
                                           writeable=False)
    return np.einsum("nyxijc,ijc->nyxc", wins, wt)


@register
class GroupedConv2D(_Conv):
    code = OperationCode.GROUPED_CONV_2D
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = window_parameters(3, ("groups",), dilation=False)
    accuracy = "conv"
    window_inputs = (WindowInputs(9, 7, 8), WindowInputs(12, 10, 11))
    signatures = conv_signatures(8, 5, optional_from_29=False, min_level=29, always_tail=(BOOL,))
    n_extra = 1
    dilation = False
    channel_dim = 0

    def check_channels(self, call, p, c):
        flt = call.ins[1]
        groups = int(p.extra[0])
        check(groups > 0, f"{self.name}: number of groups must be > 0, got {groups}")
        check(flt.shape[3] > 0 and flt.shape[3] * groups == c,
              f"{self.name}: filter depth {flt.shape[3]} * groups {groups} != input depth {c}")
        check(flt.shape[0] > 0 and flt.shape[0] % groups == 0,
              f"{self.name}: output depth {flt.shape[0]} is not a multiple of the number of groups {groups}")
        return flt.shape[0]

    def execute(self, call: Call):
        p, (n, h, w, c), (kh, kw), (oh, ow), c_out = self.geometry(call)
        groups = int(p.extra[0])
        dtype, bound = accumulator_type(call, kh * kw * c // groups, n * oh * ow * c_out * kh * kw * c // groups)
        x, wt = operand_values(call.ins[0], call.ins[1], dtype)
        x = to_nhwc(x, p.nchw)
        acc = conv2d_nhwc(x, wt, p, kh, kw, oh, ow, groups=groups)
        return [from_nhwc(finish(acc, call, p.fuse, c_out, bound), p.nchw)]


def _transpose_signatures():
    base = {29: [(F32, F32, F32), (F16, F16, F16), (Q8, Q8, TI32), (Q8, PC, TI32)],
            30: [(S8, S8, TI32), (S8, PC, TI32)]}
    sigs = []
    for lvl, triples in base.items():
        for (a, f, b) in triples:
            sigs.append(Signature(lvl, [a, f, b] + [I32] * 7 + [BOOL], [a]))
            sigs.append(Signature(lvl, [a, f, b, TI32] + [I32] * 4 + [BOOL], [a]))
    return sigs


@register
class TransposeConv2D(OperationRegistration):
    code = OperationCode.TRANSPOSE_CONV_2D
    zero_sized_inputs = None
    parameters = window_parameters(3, dilation=False, implicit_head={3: "output shape"})
    accuracy = "conv"
    window_inputs = (WindowInputs(9, 7, 8), WindowInputs(11, 9, 10))
    signatures = _transpose_signatures()

    def geometry(self, call: Call):
        ins = call.ins
        inp, flt, bias, out = ins[0], ins[1], ins[2], call.outs[0]
        name = self.name
        _check_tensor_ranks(name, inp, flt, bias)
        p = Spatial()
        if len(ins) == 11:
            p.explicit = True
            p.pads = tuple(int(ins[k].scalar()) for k in range(3, 7))
            p.stride_w, p.stride_h = int(ins[7].scalar()), int(ins[8].scalar())
            p.fuse = int(ins[9].scalar())
            p.nchw = bool(ins[10].scalar())
        else:
            shape_arg = ins[3]
            check(shape_arg.rank == 1 and shape_arg.shape[0] == 4,
                  f"{name}: output shape tensor must be 1-D with 4 elements, got shape {shape_arg.shape}")
            p.padding_code = int(ins[4].scalar())
            check(p.padding_code in (PaddingCode.SAME, PaddingCode.VALID),
                  f"{name}: implicit padding scheme {p.padding_code} is not SAME (1) or VALID (2)")
            p.stride_w, p.stride_h = int(ins[5].scalar()), int(ins[6].scalar())
            p.fuse = int(ins[7].scalar())
            p.nchw = bool(ins[8].scalar())
        check(p.stride_w > 0 and p.stride_h > 0, f"{name}: strides must be > 0, got width {p.stride_w} "
                                                 f"height {p.stride_h}")
        check_fuse_code(p.fuse)
        n, h, w, c = nhwc_dims(inp.shape, p.nchw)
        c_out, kh, kw = flt.shape[0], flt.shape[1], flt.shape[2]
        check(h > 0 and w > 0 and c > 0, f"{name}: input height, width and depth must be > 0, got {inp.shape}")
        check(c_out > 0 and kh > 0 and kw > 0, f"{name}: filter dimensions must be > 0, got {flt.shape}")
        check(flt.shape[3] == c, f"{name}: filter depth {flt.shape[3]} != input depth {c}")
        check(bias.shape[0] == c_out, f"{name}: bias has {bias.shape[0]} elements for {c_out} output channels")
        check_quant_conv(name, inp, flt, bias, out, 0, c_out)
        if not p.explicit:
            dims = [int(v) for v in ins[3].value.reshape(-1)]
            out_h, out_w = (dims[2], dims[3]) if p.nchw else (dims[1], dims[2])
            if p.padding_code == PaddingCode.SAME:
                left, right = same_padding(out_w, p.stride_w, 1, kw, transpose=True)
                top, bottom = same_padding(out_h, p.stride_h, 1, kh, transpose=True)
                p.pads = (left, right, top, bottom)
        left, right, top, bottom = p.pads
        # Right/bottom padding may be negative in the implicit form (tight fit of the last stride).
        check(left >= 0 and top >= 0 and (not p.explicit or (right >= 0 and bottom >= 0)),
              f"{name}: paddings must be >= 0, got {list(p.pads)}")
        oh = h * p.stride_h + kh - p.stride_h - top - bottom
        ow = w * p.stride_w + kw - p.stride_w - left - right
        check(oh > 0 and ow > 0, f"{name}: output would be {oh}x{ow}")
        return p, (n, h, w, c), (kh, kw), (oh, ow), c_out

    def infer(self, call: Call):
        p, (n, _, _, _), _, (oh, ow), c_out = self.geometry(call)
        return [layout_shape(n, oh, ow, c_out, p.nchw)]

    def execute(self, call: Call):
        p, (n, h, w, c), (kh, kw), (oh, ow), c_out = self.geometry(call)
        # Each output sums at most KH*KW*C products.
        dtype, bound = accumulator_type(call, kh * kw * c, n * h * w * c_out * kh * kw * c)
        x, wt = operand_values(call.ins[0], call.ins[1], dtype)
        x = to_nhwc(x, p.nchw)
        sh, sw = p.stride_h, p.stride_w
        left, _, top, _ = p.pads
        # Every input pixel times the whole filter: (N, H, W, KH, KW, O), one matmul.
        wmat = wt.transpose(3, 1, 2, 0).reshape(c, kh * kw * c_out)  # (C, KH*KW*O)
        cols = (x.reshape(n * h * w, c) @ wmat).reshape(n, h, w, kh, kw, c_out)
        full_h = max((h - 1) * sh + kh, top + oh)
        full_w = max((w - 1) * sw + kw, left + ow)
        full = np.zeros((n, full_h, full_w, c_out), cols.dtype)
        for ky in range(kh):
            for kx in range(kw):
                full[:, ky:ky + (h - 1) * sh + 1:sh, kx:kx + (w - 1) * sw + 1:sw, :] += cols[:, :, :, ky, kx, :]
        acc = full[:, top:top + oh, left:left + ow, :]
        return [from_nhwc(finish(acc, call, p.fuse, c_out, bound), p.nchw)]
