"""Dense layers: FULLY_CONNECTED, BATCH_MATMUL.

Both are one BLAS matmul. Quantized operands are zero-point corrected and multiplied in float64,
which is exact for these integer ranges, then requantized with NNAPI's fixed-point multiplier
(float32(input_scale * weights_scale) / output_scale).

AOSP and TFLite
---------------
FULLY_CONNECTED: AOSP requantizes in fixed point (two roundings) with the float32 scale
product; TFLite's reference kernel (reference_integer_ops::FullyConnected given the float
scales) has no fixed point: ``round(acc * (double(s_in) * double(s_w) / double(s_out)))`` in
double, one rounding (measured; the ``tflite`` convention computes that). BATCH_MATMUL:
identical: both form the multiplier with GetQuantizedConvolutionMultipler from the float32 scale
product and run TFLite's reference BatchMatMul (measured at accumulators where a double product
would differ).
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops import requantization
from nnapi_ref.ops.base import Call, OperationCode, OperationRegistration, Signature, T, check, register
from nnapi_ref.ops.common import activation_range_quant, check_fuse_code
from nnapi_ref.ops.conv_fast_paths import prepare_quant, quant_fast_ok, requant_block, requant_params
from nnapi_ref.ops.conv_quantization import (QUANT8, check_quant_conv, finish_quant, float_activation, float_dtype,
                                             output_multipliers, quant_magnitudes, requantize)
from nnapi_ref.ops.requantization import product_multipliers, wrap_int32
from nnapi_ref.types import DTYPES

F32, F16, Q8, S8, I32, BOOL, TI32 = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM,
                                    T.TENSOR_QUANT8_ASYMM_SIGNED, T.INT32, T.BOOL, T.TENSOR_INT32)


# Float weight matrices with at least this many elements are multiplied in float32.
LARGE_WEIGHTS = 1 << 18


@register
class FullyConnected(OperationRegistration):
    code = OperationCode.FULLY_CONNECTED
    zero_sized_inputs = None
    accuracy = "relaxed"
    fused_activation = 3
    signatures = [
        Signature(27, [F32, F32, F32, I32], [F32]),
        Signature(27, [Q8, Q8, TI32, I32], [Q8]),
        Signature(29, [F16, F16, F16, I32], [F16]),
        Signature(30, [S8, S8, TI32, I32], [S8]),
    ]

    def infer(self, call: Call):
        inp, wts, bias, fuse = call.ins
        out = call.outs[0]
        name = self.name
        check(2 <= inp.rank <= 4, f"{name}: input rank must be 2..4, got {inp.rank}")
        check(wts.rank == 2, f"{name}: weights must be 2-D, got rank {wts.rank}")
        check(bias.rank == 1, f"{name}: bias must be 1-D, got rank {bias.rank}")
        num_units, input_size = wts.shape
        check(num_units > 0 and input_size > 0, f"{name}: weights dimensions must be > 0, got {wts.shape}")
        n_elements = int(np.prod(inp.shape))
        check(n_elements % input_size == 0,
              f"{name}: input of {n_elements} elements is not a whole number of rows of {input_size}")
        check(bias.shape[0] == num_units, f"{name}: bias has {bias.shape[0]} elements for {num_units} units")
        check_fuse_code(fuse.scalar())
        check_quant_conv(name, inp, wts, bias, out, 0, num_units)
        return [(n_elements // input_size, num_units)]

    def execute(self, call: Call):
        inp, wts, bias, fuse = call.ins
        out = call.outs[0]
        num_units, input_size = wts.shape
        fuse = fuse.scalar()
        if inp.type in QUANT8 and requantization.convention() == "tflite":
            return [_fully_connected_tflite(inp, wts, bias, out, fuse, input_size)]
        if inp.type in QUANT8:
            fast = _fully_connected_fast(call, num_units, input_size, fuse)
            if fast is not None:
                return [fast]
            mx, mw = quant_magnitudes(inp, wts)
            bound = float(input_size) * mx * mw
            dtype = np.float32 if bound < 2.0 ** 24 else np.float64
            x = inp.value.reshape(-1, input_size).astype(dtype)
            if inp.zero_point:
                x -= inp.zero_point

            def corrected_weights():
                w = wts.value.astype(dtype)
                if wts.zero_point:
                    w -= wts.zero_point
                return np.ascontiguousarray(w.T)
            acc = x @ call.derived(("corrected_weights", np.dtype(dtype).str), (1,), corrected_weights)
            mult, shift = output_multipliers(inp, wts, out, num_units)
            return [finish_quant(acc, bias.value, mult, shift, out, fuse, bound)]
        # float64 for small problems (free there); large weight matrices stay in float32, as
        # converting them would cost more than the product (NNAPI's CPU path sums in float32 too).
        dtype = float_dtype(inp.value.size * num_units) if wts.value.size < LARGE_WEIGHTS else np.float32
        x = inp.value.reshape(-1, input_size).astype(dtype, copy=False)
        wmat = call.derived(("weights", np.dtype(dtype).str), (1,),
                            lambda: np.ascontiguousarray(wts.value.astype(dtype).T))
        acc = (x @ wmat).astype(np.float32, copy=False)
        acc += call.derived(("bias",), (2,), lambda: bias.value.astype(np.float32))
        return [float_activation(acc, fuse, out)]


def _fully_connected_tflite(inp, wts, bias, out, fuse: int, input_size: int) -> np.ndarray:
    """Quantized FULLY_CONNECTED as TFLite's reference kernel computes it: the exact int32
    accumulator requantized in double floating point (:func:`requantization.tflite_float_requantize`)."""
    x = inp.value.reshape(-1, input_size).astype(np.float64) - inp.zero_point
    w = wts.value.astype(np.float64) - wts.zero_point
    acc = wrap_int32((x @ w.T).astype(np.int64) + bias.value.astype(np.int64))  # exact: |x @ w.T| < 2**53
    q = requantization.tflite_float_requantize(acc, inp.scale, wts.scale, out.scale) + out.zero_point
    lo, hi = activation_range_quant(fuse, out)
    return np.clip(q, lo, hi).astype(DTYPES[out.type])


def _fully_connected_fast(call: Call, num_units: int, input_size: int, fuse: int):
    """Quantized FULLY_CONNECTED through the prepared path of the convolutions (weights
    corrected and transposed once, input zero point folded into the bias), or None."""
    inp, wts = call.ins[0], call.ins[1]

    def compute():
        wi = wts.value.astype(np.int64)
        if wts.zero_point:
            wi -= wts.zero_point
        return prepare_quant(call, np.ascontiguousarray(wi.T), wi.sum(axis=1), num_units, fuse, input_size)
    prep = call.derived(("quant",), (1, 2, 3), compute)
    if not quant_fast_ok(prep, inp, input_size, False):
        return None
    x = inp.value.reshape(-1, input_size)
    out = np.empty((x.shape[0], num_units), np.uint8)
    acc = np.matmul(x.astype(np.float32), prep.weights)
    requant_block(acc, requant_params(prep), prep, out)
    return out.view(np.int8) if prep.signed else out


@register
class BatchMatmul(OperationRegistration):
    code = OperationCode.BATCH_MATMUL
    parameters = {2: "adjoint x", 3: "adjoint y"}
    accuracy = "relaxed"
    signatures = [Signature(1000006, [t, t, BOOL, BOOL], [t]) for t in (F32, F16, TI32, S8)]

    def infer(self, call: Call):
        lhs, rhs, adj_x, adj_y = call.ins
        name = self.name
        check(lhs.rank == rhs.rank, f"{name}: input ranks differ ({lhs.rank} and {rhs.rank})")
        check(2 <= lhs.rank <= 4, f"{name}: input rank must be 2..4, got {lhs.rank}")
        ax, ay = bool(adj_x.scalar()), bool(adj_y.scalar())
        m, k = (lhs.shape[-1], lhs.shape[-2]) if ax else (lhs.shape[-2], lhs.shape[-1])
        k2, n = (rhs.shape[-1], rhs.shape[-2]) if ay else (rhs.shape[-2], rhs.shape[-1])
        check(min(lhs.shape[-2:]) > 0 and min(rhs.shape[-2:]) > 0,
              f"{name}: matrix dimensions must be > 0, got {lhs.shape} and {rhs.shape}")
        check(k == k2, f"{name}: cannot multiply {lhs.shape} (adj_x={ax}) by {rhs.shape} (adj_y={ay})")
        # NeuralNetworksTypes.h: both inputs "have the same batch size"; no broadcasting.
        check(lhs.shape[:-2] == rhs.shape[:-2],
              f"{name}: batch dimensions differ ({list(lhs.shape[:-2])} and {list(rhs.shape[:-2])})")
        batch = lhs.shape[:-2]
        if lhs.type == S8:
            out = call.outs[0]
            check(out.scale > 0, f"{name}: output scale must be > 0")
        return [tuple(batch) + (m, n)]

    def execute(self, call: Call):
        lhs, rhs, adj_x, adj_y = call.ins
        out = call.outs[0]
        a, b = lhs.value, rhs.value
        if adj_x.scalar():
            a = np.swapaxes(a, -1, -2)
        if adj_y.scalar():
            b = np.swapaxes(b, -1, -2)
        if lhs.type == S8:
            x = a.astype(np.float64) - lhs.zero_point
            y = b.astype(np.float64) - rhs.zero_point
            acc = wrap_int32(np.matmul(x, y).astype(np.int64))
            mult, shift = product_multipliers(lhs.scale, rhs.scale, out.scale,
                                              tflite=requantization.FLOAT32_PRODUCT)
            q = requantize(acc, mult, shift) + out.zero_point
            return [np.clip(q, -128, 127).astype(np.int8)]
        if lhs.type == TI32:
            return [np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32)]
        if lhs.type == F16:
            return [np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)]
        dtype = float_dtype(a.size * b.shape[-1])
        return [np.matmul(a.astype(dtype), b.astype(dtype)).astype(np.float32)]
