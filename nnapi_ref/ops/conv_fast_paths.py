"""Prepared fast paths of CONV_2D and DEPTHWISE_CONV_2D (and quantized FULLY_CONNECTED): weights
prepared once per compiled operation, outputs computed by blocks of rows."""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import Call, T
from nnapi_ref.ops.common import FLOAT_ACTIVATION_RANGE, QUANT_RANGE, activation_range_quant
from nnapi_ref.ops.conv_quantization import (FLOAT32_EXACT, PC, QUANT8, apply_affine, float_dtype, output_multipliers,
                                             requant_affine, requant_table)
from nnapi_ref.ops.spatial import Spatial, im2col, padded_window_input, to_nhwc
from nnapi_ref.types import DTYPES, FuseCode

F32 = T.TENSOR_FLOAT32


# Weights are prepared once per compiled operation (Call.derived: filters as the matmul wants
# them, zero-point corrected, bias folded with the input zero point, requantization parameters),
# and the output is computed by blocks of output rows: each block's accumulator is still in the
# cache while the epilogue (bias, activation, requantization, cast) makes its passes over it.
#
# Quantized fast path: the input is used as is (not zero-point corrected) and its zero point is
# folded into the bias, exactly: sum((x - zx) * w') + bias = sum(x * w') + (bias - zx * sum(w'))
# with w' the corrected filter, padding with zx (i.e. 0 once corrected). Both sides are the same
# integer; the raw accumulator sum(x * w') is exact in float32 while bound_raw < 2**24, and the
# float32 affine requantization (proven exact for the folded bias by requant_affine) finishes.
# Anything else (no proof, larger accumulators) takes the general path.

# Float32 elements of one block (accumulator + input columns). Small blocks (L2-sized) measured
# slower on the shared 2-core machine (per-block overhead, contested cache): blocks only bound the
# temporaries of large inputs.
BLOCK_ELEMENTS = 1 << 21


def _row_blocks(rows: int, row_elements: int):
    step = max(1, BLOCK_ELEMENTS // max(1, row_elements))
    return [(r, min(r + step, rows)) for r in range(0, rows, step)]


class _QuantPrep:
    """Prepared quantized weights and requantization of one convolution (see above)."""

    __slots__ = ("weights", "mw", "bias_eff", "max_bias", "affine", "affine_limit", "table", "max_offset",
                 "signed")


def prepare_quant(call: Call, weights_int: np.ndarray, wsum: np.ndarray, n_channels: int, fuse: int,
                  reduction: int, matrix_dtype=np.float32) -> _QuantPrep:
    """``weights_int``: zero-point corrected int64 filter in the layout the kernel uses;
    ``wsum``: its per-output-channel sums; ``reduction``: products per output element."""
    inp, flt, bias, out = call.ins[0], call.ins[1], call.ins[2], call.outs[0]
    prep = _QuantPrep()
    prep.mw = int(np.abs(weights_int).max(initial=0))
    prep.weights = weights_int.astype(matrix_dtype)
    b = bias.value.astype(np.int64)
    prep.bias_eff = b - np.int64(inp.zero_point) * wsum.astype(np.int64)
    prep.max_bias = float(np.abs(b).max(initial=0))
    # The raw accumulator sum(x * w') over any input of this type (padding included) is bounded by:
    qmin, qmax = QUANT_RANGE[inp.type]
    prep.affine_limit = min(FLOAT32_EXACT, reduction * max(abs(qmin), abs(qmax)) * prep.mw)
    mult, shift = output_multipliers(inp, flt, out, n_channels)
    lo, hi = activation_range_quant(fuse, out)
    dtype = DTYPES[out.type]
    mult = np.broadcast_to(mult, (n_channels,)) if mult.size > 1 else mult.reshape(1)
    shift = np.broadcast_to(shift, (n_channels,)) if shift.size > 1 else shift.reshape(1)
    prep.affine = requant_affine(np.ascontiguousarray(mult).tobytes(), np.ascontiguousarray(shift).tobytes(),
                                  int(out.zero_point), int(lo), int(hi), np.dtype(dtype).str, prep.bias_eff.tobytes(),
                                  prep.affine_limit)
    prep.signed = dtype == np.int8
    prep.table, prep.max_offset = None, 0.0
    if prep.affine is None:
        lut = requant_table(np.ascontiguousarray(mult).tobytes(), np.ascontiguousarray(shift).tobytes(),
                             int(out.zero_point), int(lo), int(hi), np.dtype(dtype).str)
        if lut is not None:
            table, a_lo, stride, span = lut
            per_channel = len(a_lo) > 1
            base = np.arange(n_channels, dtype=np.int64) * stride if per_channel else np.zeros(1, np.int64)
            # Index of accumulator value a (folded bias included) in channel c: a + offset[c].
            offset = np.broadcast_to(prep.bias_eff - a_lo + base, (n_channels,))
            prep.max_offset = float(np.abs(offset).max(initial=0))
            if per_channel:
                low, high = base.astype(np.float32), (base + span).astype(np.float32)
            else:  # scalar bounds: np.clip is several times faster with them
                low, high = np.float32(0), np.float32(span[0])
            prep.table = (table.view(np.uint8), offset.astype(np.float32), low, high)
    return prep


def quant_fast_ok(prep: _QuantPrep, inp, reduction: int, padded: bool) -> bool:
    """Whether the folded float32 path is exact for this input (bounds from its values)."""
    if prep.affine is None and prep.table is None:
        return False
    x = inp.value
    if x.size == 0:
        return False
    xmin, xmax = int(x.min()), int(x.max())
    zx = inp.zero_point
    raw = max(abs(xmin), abs(xmax), abs(zx) if padded else 0)
    corrected = max(abs(xmax - zx), abs(xmin - zx))
    bound = float(reduction) * raw * prep.mw
    if float(reduction) * corrected * prep.mw + prep.max_bias >= 2.0 ** 31:
        return False
    if prep.affine is not None:
        return bound <= prep.affine_limit
    return bound + prep.max_offset < 2.0 ** 24


def requant_params(prep: _QuantPrep):
    """The per-channel arrays of the block requantization (affine, else table)."""
    if prep.affine is not None:
        r, c, *rest = prep.affine
        r = np.broadcast_to(r, c.shape)
        if np.all(r == r[0]):
            r = r[0]  # one multiplier (per-tensor filter): a scalar multiplies faster
        return [r, c, *rest]
    _, offset, base, top = prep.table
    return [offset, base, top]


def requant_block(acc: np.ndarray, params, prep: _QuantPrep, out_block: np.ndarray) -> None:
    """Requantization of one block of exact raw accumulators (in place in ``acc``) into
    ``out_block`` (uint8 storage). Affine: multiply, add, clip, cast (int8 outputs are computed
    offset by 128 and flipped back with ^ 0x80). Table: index, clip, look up."""
    if prep.affine is not None:
        apply_affine(acc, params, out_block)
        if prep.signed:
            np.bitwise_xor(out_block, np.uint8(0x80), out=out_block)
        return
    offset, base, top = params
    acc += offset
    np.clip(acc, base, top, out=acc)
    prep.table[0].take(acc.astype(np.intp), out=out_block)


def _float_block(acc: np.ndarray, bias, lo, hi, fuse: int) -> None:
    acc += bias
    if fuse != FuseCode.NONE:
        np.clip(acc, lo, hi, out=acc)


def conv2d_fast(call: Call, p: Spatial, dims, kernel, out_hw, c_out):
    """CONV_2D through the prepared path (NHWC result), or None when it does not apply."""
    inp, flt = call.ins[0], call.ins[1]
    n, h, w, c = dims
    kh, kw = kernel
    oh, ow = out_hw
    K = kh * kw * c
    quant = inp.type in QUANT8
    if quant:
        def compute():
            wi = flt.value.reshape(c_out, K).astype(np.int64)
            if flt.type != PC and flt.zero_point:
                wi -= flt.zero_point
            return prepare_quant(call, np.ascontiguousarray(wi.T), wi.sum(axis=1), c_out, p.fuse, K)
        prep = call.derived(("conv_quant",), range(1, len(call.ins)), compute)
        padded = any(p.pads)
        if not quant_fast_ok(prep, inp, K, padded):
            return None
        wmat = prep.weights
    elif inp.type == F32 and float_dtype(n * oh * ow * c_out * K) == np.float32:
        wmat = call.derived(("conv_f32",), (1,),
                            lambda: np.ascontiguousarray(flt.value.reshape(c_out, K).T.astype(np.float32)))
        lo, hi = FLOAT_ACTIVATION_RANGE[FuseCode(p.fuse)]
    else:
        return None
    x = to_nhwc(inp.value, p.nchw)
    left, _, top, _ = p.pads
    sh, sw, dh, dw = p.stride_h, p.stride_w, p.dilation_h, p.dilation_w
    if kh == 1 and kw == 1 and sh == 1 and sw == 1 and left == 0 and top == 0 and oh == h and ow == w:
        win = x.reshape(n, oh, ow, 1, 1, c)
    else:
        need_h, need_w = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
        xp = padded_window_input(x, top, left, need_h, need_w, inp.zero_point if quant else 0)
        win = im2col(xp, kh, kw, sh, sw, dh, dw, oh, ow)
    # Epilogues run on output rows of OW * C_out elements, with the per-channel parameters tiled
    # to match: numpy's inner loops are then long (1.3x faster than per-channel broadcasting).
    if quant:
        out = np.empty((n, oh, ow, c_out), np.uint8)
        params = call.derived(("conv_params", ow), range(1, len(call.ins)),
                              lambda: [np.tile(a, ow) if np.ndim(a) else a for a in requant_params(prep)])
    else:
        out = np.empty((n, oh, ow, c_out), np.float32)
        bias = call.derived(("bias_f32", ow), (2,), lambda: np.tile(call.ins[2].value.astype(np.float32), ow))
    for b in range(n):
        for y0, y1 in _row_blocks(oh, ow * (K + c_out)):
            cols = win[b, y0:y1].reshape(-1, K)
            ob = out[b, y0:y1].reshape(y1 - y0, ow * c_out)
            if quant:
                requant_block(np.matmul(cols.astype(np.float32), wmat).reshape(ob.shape), params, prep, ob)
            else:
                np.matmul(cols, wmat, out=ob.reshape(-1, c_out))
                _float_block(ob, bias, lo, hi, p.fuse)
    if quant and prep.signed:
        out = out.view(np.int8)
    return out


def _phase_rows(x: np.ndarray, r0: int, r1: int, top: int, left: int, sw: int, phases: int, width: int, fill,
                dtype) -> np.ndarray:
    """Padded rows r0..r1 of the NHWC input converted to ``dtype``, their columns split by phase
    modulo the horizontal stride: ``buf[:, r, ph, j] = padded[:, r0 + r, j * sw + ph]`` for
    ``width`` columns j per phase, ``fill`` outside the input. With one phase, the padded rows."""
    n, h, w, c = x.shape
    buf = np.empty((n, r1 - r0, phases, width, c), dtype)
    i0, i1 = max(r0 - top, 0), min(r1 - top, h)
    b0, b1 = max(i0 + top - r0, 0), max(i1 + top - r0, 0)
    if i1 <= i0:
        buf[...] = fill
        return buf
    buf[:, :b0] = fill
    buf[:, b1:] = fill
    for ph in range(phases):
        # Phase columns j whose input column j * sw + ph - left is inside the input.
        j0 = min(width, max(0, -((ph - left) // sw)))
        j1 = max(j0, min(width, (w - 1 - ph + left) // sw + 1))
        dst = buf[:, b0:b1, ph]
        if j1 > j0:
            first = j0 * sw + ph - left
            dst[:, :, j0:j1] = x[:, i0:i1, first:first + (j1 - j0 - 1) * sw + 1:sw]
        dst[:, :, :j0] = fill
        dst[:, :, j1:] = fill
    return buf


def _tap_layout(kw: int, sw: int, dw: int):
    """Where kernel column j reads in :func:`_phase_rows`'s layout, for a flattened einsum:
    (phases, taps per phase M, column step, [(phase, m) for each j]); tap (phase, m) of output
    column x reads phase column x + m * step. Needs sw == 1 or dw == 1."""
    if sw == 1:
        return 1, kw, dw, [(0, j) for j in range(kw)]
    return min(sw, kw), -(-kw // sw), 1, [(j % sw, j // sw) for j in range(kw)]


def _tap_grid(wt: np.ndarray, taps, phases: int, m: int, ow: int) -> np.ndarray:
    """(KH, KW, C) weights as the (KH, phases, M, OW * C) grid the flattened einsum multiplies
    by, tiled along the output row; zero at (phase, m) pairs no kernel column maps to."""
    kh, _, c = wt.shape
    grid = np.zeros((kh, phases, m, c), wt.dtype)
    for j, (ph, k) in enumerate(taps):
        grid[:, ph, k] = wt[:, j]
    return np.tile(grid, (1, 1, 1, ow))


def depthwise_fast(call: Call, p: Spatial, dims, kernel, out_hw, c_out):
    """DEPTHWISE_CONV_2D through the prepared path (NHWC result), or None when it does not apply.

    One einsum per block of output rows, with the width and channel axes of an output row
    flattened into one long axis (OW * C elements: einsum's inner loop) and the weights tiled
    along it. For a horizontal stride > 1 the padded input columns are first split by phase
    (column modulo stride), so that the columns one kernel tap reads for consecutive outputs are
    again adjacent: a stride-2 3-wide kernel becomes a 2-phase x 2-tap grid with one zero weight.
    (Horizontal stride and dilation both > 1 take the general path.)"""
    inp, flt = call.ins[0], call.ins[1]
    n, h, w, c = dims
    kh, kw = kernel
    oh, ow = out_hw
    sh, sw, dh, dw = p.stride_h, p.stride_w, p.dilation_h, p.dilation_w
    if sw > 1 and dw > 1:
        return None
    phases, m, step, taps = _tap_layout(kw, sw, dw)
    quant = inp.type in QUANT8
    if quant:
        def compute():
            wi = flt.value[0].astype(np.int64)  # (KH, KW, C_out)
            if flt.type != PC and flt.zero_point:
                wi -= flt.zero_point
            return prepare_quant(call, wi, wi.sum(axis=(0, 1)), c_out, p.fuse, kh * kw)
        prep = call.derived(("dw_quant",), range(1, len(call.ins)), compute)
        if not quant_fast_ok(prep, inp, kh * kw, any(p.pads)):
            return None
        grid, params = call.derived(("dw_grid", ow), range(1, len(call.ins)),
                                    lambda: (_tap_grid(prep.weights, taps, phases, m, ow),
                                             [np.tile(a, ow) if np.ndim(a) else a for a in requant_params(prep)]))
        fill = inp.zero_point
    elif inp.type == F32:
        lo, hi = FLOAT_ACTIVATION_RANGE[FuseCode(p.fuse)]
        grid, bias = call.derived(("dw_f32", ow), (1, 2),
                                  lambda: (_tap_grid(flt.value[0].astype(np.float32), taps, phases, m, ow),
                                           np.tile(call.ins[2].value.astype(np.float32), ow)))
        fill = 0
    else:
        return None
    x = to_nhwc(inp.value, p.nchw)
    mult = c_out // c
    if mult > 1:
        x = np.repeat(x, mult, axis=3)
    left, _, top, _ = p.pads
    width = ow + (m - 1) * step  # phase columns read by a row of outputs
    out = np.empty((n, oh, ow, c_out), np.uint8 if quant else np.float32)
    row_elements = n * (ow * c_out * 2 + sh * phases * width * c_out)
    for y0, y1 in _row_blocks(oh, row_elements):
        rows = y1 - y0
        r0, r1 = y0 * sh, (y1 - 1) * sh + (kh - 1) * dh + 1
        xb = _phase_rows(x, r0, r1, top, left, sw, phases, width, fill, np.float32)
        s0, s1, s2, s3, s4 = xb.strides
        wins = np.lib.stride_tricks.as_strided(xb, (n, rows, kh, phases, m, ow * c_out),
                                               (s0, s1 * sh, s1 * dh, s2, s3 * step, s4), writeable=False)
        ob = out[:, y0:y1].reshape(n, rows, ow * c_out)
        if quant:
            requant_block(np.einsum("nyipmk,ipmk->nyk", wins, grid), params, prep, ob)
        else:
            np.einsum("nyipmk,ipmk->nyk", wins, grid, out=ob)
            _float_block(ob, bias, lo, hi, p.fuse)
    if quant and prep.signed:
        out = out.view(np.int8)
    return out


