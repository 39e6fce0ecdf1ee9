"""Quantized LSTM cells: QUANTIZED_16BIT_LSTM (feature level 3) and QUANTIZED_LSTM (level 4).

Both follow NNAPI's CPU implementation bit for bit: 8-bit matmuls accumulated in 32 bits and
rescaled with TFLite's MultiplyByQuantizedMultiplier, gates evaluated with gemmlowp's 16-bit
fixed-point logistic and tanh, the cell state kept in 16-bit fixed point. The fixed-point
primitives below work elementwise on int64 arrays holding int16 or int32 values (``bits``) and
reproduce the C++ wrap-around and saturation of each step; SaturatingRoundingDoublingHighMul,
RoundingDivideByPOT, MultiplyByQuantizedMultiplier and the wrap-around are the shared ones of
:mod:`.common`.

AOSP and TFLite
---------------
QUANTIZED_16BIT_LSTM: AOSP's QuantizedLSTM runs TFLite's uint8 basic LSTM cell
(LstmCell), so identical to TFLite's 8x8->16 basic LSTM kernel (read, not measured: the
importer does not produce it). QUANTIZED_LSTM: TFLite's integer LSTM (lstm_eval's 8x8->16
path) is organised differently (gate biases outside layer normalization, see nnts/formats/tflite/recurrent.py);
no TFLite convention is defined for it, AOSP's arithmetic in both.
"""
from __future__ import annotations

import math

import numpy as np

from nnapi_ref.ops.base import Call, OperationCode, OperationRegistration, Signature, T, check, register
from nnapi_ref.ops.common import wrap
from nnapi_ref.ops.fixedpoint import rounding_half_sum
from nnapi_ref.ops.requantization import (multiply_by_quantized_multiplier as mbqm, quantize_multiplier,  # (a, b, bits)
                                          rounding_divide_by_pot as rdbpot,
                                          saturating_rounding_doubling_high_mul as srdhm)
from nnapi_ref.ops.rnn import check_rank, check_shape, present
from nnapi_ref.types import ResultCode

# ----------------------------------------------------------------------------- fixed point


def srmpot(x, exponent: int, bits: int):
    """gemmlowp SaturatingRoundingMultiplyByPOT: saturating left shift or rounding right shift."""
    x = np.asarray(x, np.int64)
    if exponent == 0:
        return x
    if exponent < 0:
        return rdbpot(x, -exponent)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    threshold = (1 << (bits - 1 - exponent)) - 1
    result = wrap(x << exponent, bits)
    return np.where(x > threshold, hi, np.where(x < -threshold, lo, result))


def rescale(x, src_int_bits: int, dst_int_bits: int, bits: int):
    return srmpot(x, src_int_bits - dst_int_bits, bits)


def constant(raw32: int, bits: int) -> int:
    """gemmlowp's fixed-point constant initializer: an int32 raw value, rounded to ``bits``."""
    return int(rdbpot(raw32, 32 - bits))


def one(int_bits: int, bits: int) -> int:
    return (1 << (bits - 1)) - 1 if int_bits == 0 else 1 << (bits - 1 - int_bits)


def add_saturating_if_16(a, b, bits: int):
    s = np.asarray(a, np.int64) + np.asarray(b, np.int64)
    return np.clip(s, -32768, 32767) if bits == 16 else wrap(s, bits)


def exp_on_interval_between_negative_one_quarter_and_0_excl(a, bits: int):
    frac = bits - 1
    constant_term = constant(1895147668, bits)
    one_third = constant(715827883, bits)
    x = wrap(a + (1 << (frac - 3)), bits)
    x2 = srdhm(x, x, bits)
    x3 = srdhm(x2, x, bits)
    x4 = srdhm(x2, x2, bits)
    x4_over_4 = srmpot(x4, -2, bits)
    poly = srmpot(wrap(srdhm(wrap(x4_over_4 + x3, bits), one_third, bits) + x2, bits), -1, bits)
    return add_saturating_if_16(constant_term, srdhm(constant_term, wrap(x + poly, bits), bits), bits)


EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
              (3, 720401), (4, 242))


def exp_on_negative_values(a, int_bits: int, bits: int):
    """exp(a) for a <= 0 (a with ``int_bits`` integer bits); result with 0 integer bits."""
    a = np.asarray(a, np.int64)
    frac = bits - 1 - int_bits
    one_quarter = 1 << (frac - 2)
    a_mod = wrap((a & (one_quarter - 1)) - one_quarter, bits)
    result = exp_on_interval_between_negative_one_quarter_and_0_excl(rescale(a_mod, int_bits, 0, bits), bits)
    remainder = wrap(a_mod - a, bits)
    for exponent, multiplier in EXP_BARREL:
        if int_bits > exponent:
            bit = 1 << (frac + exponent)
            result = np.where(remainder & bit, srdhm(result, constant(multiplier, bits), bits), result)
    if int_bits > 5:
        clamp = constant(-(1 << (36 - int_bits)), bits)
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, one(0, bits), result)


def _newton_reciprocal(a, bits: int):
    """The Newton-Raphson iteration shared by 1/(1+x) and (1-x)/(1+x): x ~ 1/half_denominator (F2)."""
    half_denominator = rounding_half_sum(a, one(0, bits))
    x = wrap(constant(1515870810, bits) + srdhm(half_denominator, constant(-1010580540, bits), bits), bits)
    one_f2 = one(2, bits)
    for _ in range(3):
        one_minus = wrap(one_f2 - srdhm(half_denominator, x, bits), bits)
        x = wrap(x + rescale(srdhm(x, one_minus, bits), 4, 2, bits), bits)
    return x


def one_over_one_plus_x_for_x_in_0_1(a, bits: int):
    return rescale(_newton_reciprocal(a, bits), 1, 0, bits)


def one_minus_x_over_one_plus_x_for_x_in_0_1(a, bits: int):
    return rescale(wrap(_newton_reciprocal(a, bits) - one(2, bits), bits), 2, 0, bits)


def fixed_tanh(a, int_bits: int, bits: int = 16):
    """gemmlowp tanh: input with ``int_bits`` integer bits, output with 0."""
    a = np.asarray(a, np.int64)
    negative = a < 0
    n = np.where(negative, a, wrap(-a, bits))
    t = one_minus_x_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(n, int_bits + 1, bits), bits)
    return np.where(a == 0, 0, np.where(negative, wrap(-t, bits), t))


def fixed_logistic(a, int_bits: int, bits: int = 16):
    """gemmlowp logistic: input with ``int_bits`` integer bits, output with 0."""
    a = np.asarray(a, np.int64)
    positive = a > 0
    abs_input = np.where(positive, a, wrap(-a, bits))
    if_positive = one_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(wrap(-abs_input, bits), int_bits, bits),
                                                   bits)
    if_negative = wrap(one(0, bits) - if_positive, bits)
    return np.where(a == 0, constant(1 << 30, bits), np.where(positive, if_positive, if_negative))


def checked_log2(x: float) -> int | None:
    """NNAPI's CheckedLog2: log2(x) when x is (nearly) a power of two, else None."""
    x_log2 = np.float32(math.log(np.float32(x))) * np.float32(1.0 / math.log(2.0))
    rounded = float(np.sign(x_log2) * np.floor(abs(x_log2) + 0.5))
    return int(rounded) if abs(float(x_log2) - rounded) < 1e-3 else None


def inv_sqrt_multiplier(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TFLite GetInvSqrtQuantizedMultiplierExp(values, reverse_shift=-1), per element."""
    values = np.asarray(values, np.int64)
    small = values <= 1
    v = np.where(small, 1 << 28, values)
    shift = np.full(v.shape, 11, np.int64)
    while True:
        big = v >= (1 << 29)
        if not big.any():
            break
        v = np.where(big, v // 4, v)
        shift = shift + big
    _, bit_length = np.frexp(v.astype(np.float64))
    max_left_shift_bits = 32 - bit_length.astype(np.int64) - 1
    pairs = max_left_shift_bits // 2 - 1
    shift = shift - pairs
    v = v << (2 * pairs)
    half_input = srmpot(v >> 1, -1, 32)
    half_three = (1 << 28) + (1 << 27)
    x = np.full(v.shape, 1 << 28, np.int64)
    for _ in range(5):
        x3 = rescale(srdhm(srdhm(x, x, 32), x, 32), 9, 3, 32)
        x = rescale(wrap(srdhm(half_three, x, 32) - srdhm(half_input, x3, 32), 32), 6, 3, 32)
    x = srdhm(x, 1518500250, 32)
    negative = shift < 0
    x = np.where(negative, wrap(x << np.where(negative, -shift, 0), 32), x)
    shift = np.where(negative, 0, shift)
    return np.where(small, (1 << 31) - 1, x), np.where(small, 0, -shift)


# ----------------------------------------------------------------------------- QUANTIZED_16BIT_LSTM

Q8, Q16, I32 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT16_SYMM, T.TENSOR_INT32


@register
class Quantized16BitLstm(OperationRegistration):
    """Inputs: 0 input [batch, input] (scale 1/128, zero point 128); 1-4 input-to-{input, forget,
    cell, output} weights; 5-8 recurrent-to-* weights (all sharing scale and zero point); 9-12
    {input, forget, cell, output} gate biases (int32, scale = weights scale / 128); 13 previous
    cell state (int16, scale 2**-11); 14 previous output. Outputs: cell state, output."""

    code = OperationCode.QUANTIZED_16BIT_LSTM
    zero_sized_inputs = ResultCode.BAD_DATA
    accuracy = "relaxed"
    signatures = [Signature(29, [Q8] * 9 + [I32] * 4 + [Q16, Q8], [Q16, Q8])]

    def infer(self, call: Call):
        ins = call.ins
        x, prev_cell, prev_out = ins[0], ins[13], ins[14]
        for k, arg in enumerate(ins):
            check(present(arg), f"input {k} is required")
        check_rank(x, 2, "input")
        batch, input_size = x.shape
        check(x.scale == 1.0 / 128 and x.zero_point == 128, "input must have scale 1/128 and zero point 128")
        check_rank(prev_out, 2, "previous output")
        check(prev_out.shape[0] == batch, f"previous output batch {prev_out.shape[0]} differs from the input's {batch}")
        check(prev_out.scale == 1.0 / 128 and prev_out.zero_point == 128,
              "previous output must have scale 1/128 and zero point 128")
        output_size = prev_out.shape[1]
        w0 = ins[1]
        check(w0.scale != 0, "weights scale must not be 0")
        for k in range(1, 9):
            check_shape(ins[k], (output_size, input_size if k <= 4 else output_size), f"weights input {k}")
            check(ins[k].scale == w0.scale and ins[k].zero_point == w0.zero_point,
                  f"weights input {k} must share the quantization of the input-to-input weights")
        b0 = ins[9]
        check(np.float32(b0.scale) == np.float32(np.float32(w0.scale) / 128.0) and b0.zero_point == 0,
              "biases must have scale = weights scale / 128 and zero point 0")
        for k in range(9, 13):
            check_shape(ins[k], (output_size,), f"bias input {k}")
            check(ins[k].scale == b0.scale and ins[k].zero_point == 0, f"bias input {k} quantization differs")
        check_shape(prev_cell, (batch, output_size), "previous cell state")
        check(prev_cell.zero_point == 0, "cell state zero point must be 0")
        log2 = checked_log2(prev_cell.scale) if prev_cell.scale > 0 else None
        check(log2 is not None and log2 + 15 == 4, "cell state scale must be 2**-11 (4 integer bits)")
        return [(batch, output_size), (batch, output_size)]

    def execute(self, call: Call):
        ins = call.ins
        # NNAPI's CPU implementation multiplies the concatenation [input, previous output] by
        # the per-gate weights concatenated as [recurrent-to-gate, input-to-gate] (columns), so
        # unless input_size == output_size the input meets the first recurrent columns. The
        # expected results of NNAPI's own tests depend on this pairing; it is reproduced here.
        xh = np.concatenate([ins[0].value, ins[14].value], axis=1).astype(np.int64) - 128
        wzp = ins[1].zero_point
        multiplier, shift = quantize_multiplier(4096.0 * float(np.float32(ins[9].scale)))
        # gate order of the fixed-point cell: input, cell (modulation), forget, output
        pre = []
        for gate in (0, 2, 1, 3):
            weights = np.concatenate([ins[5 + gate].value, ins[1 + gate].value], axis=1).astype(np.int64) - wzp
            acc = wrap(ins[9 + gate].value.astype(np.int64) + xh @ weights.T, 32)
            pre.append(np.clip(mbqm(acc, multiplier, shift), -32768, 32767))
        input_gate = fixed_logistic(pre[0], 3)
        modulation = fixed_tanh(pre[1], 3)
        forget_gate = fixed_logistic(pre[2], 3)
        output_gate = fixed_logistic(pre[3], 3)
        prev_cell = ins[13].value.astype(np.int64)
        new_cell = np.clip(rescale(srdhm(input_gate, modulation, 16), 0, 4, 16) + srdhm(forget_gate, prev_cell, 16),
                           -32768, 32767)
        activ = srdhm(output_gate, fixed_tanh(rescale(new_cell, 4, 3, 16), 3), 16)
        out = np.clip(rdbpot(activ, 8), -128, 127) + 128
        return [new_cell.astype(np.int16), out.astype(np.uint8)]


# ----------------------------------------------------------------------------- QUANTIZED_LSTM

Q8S, Q8AS = T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


def _f32(x) -> np.float32:
    return np.float32(x)


def _multiplier(real) -> tuple[int, int]:
    return quantize_multiplier(float(np.float32(real)))


def _matmul_accumulate(x, zp_bias, weights, multiplier, shift, output, lo, hi):
    """NNAPI's MatrixBatchVectorMultiplyAccumulate: output = clamp(output + rescale(bias + x W^T))."""
    acc = wrap(zp_bias + x @ weights.T, 32)
    return np.clip(mbqm(acc, multiplier, shift) + output, lo, hi)


def _layer_norm(x, weights, bias, scale_a, scale_b, variance_limit):
    """NNAPI's integer ApplyLayerNorm over the last axis of int16 values."""
    n = x.shape[-1]
    total = x.sum(axis=-1, keepdims=True)
    total_sq = (x * x).sum(axis=-1, keepdims=True)
    mean = trunc_div(total * 1024, n)
    variance = total_sq * ((1 << 20) // n) - mean * mean
    variance2 = trunc_div(variance, 1 << 20)
    variance2 = np.where(variance2 < 1, variance_limit, variance2)
    inv_a, inv_b = inv_sqrt_multiplier(variance2)
    rescaled = mbqm(wrap(1024 * x - mean, 32), inv_a, inv_b)
    val3 = wrap(wrap(rescaled * weights, 32) + bias, 32)
    val4 = trunc_div(np.where(val3 > 0, val3 + 512, val3 - 512), 1024)
    return np.clip(mbqm(val4, scale_a, scale_b + 12), -32768, 32767)


def trunc_div(a, d: int):
    a = np.asarray(a, np.int64)
    q = np.abs(a) // d
    return np.where(a < 0, -q, q)


@register
class QuantizedLstm(OperationRegistration):
    """Inputs: 0 input (int8 asymm); 1-8 input-to-* and recurrent-to-* weights (int8 symm);
    9-11 peephole weights (int16); 12-15 gate biases (int32); 16 projection weights; 17 projection
    bias; 18 previous output (int8 asymm); 19 previous cell state (int16); 20-23 layer norm weights
    (int16); 24 cell clip; 25 projection clip; 26-29 input/forget/cell/output intermediate scales;
    30 hidden state zero point; 31 hidden state scale. Outputs: output state, cell state, output."""

    code = OperationCode.QUANTIZED_LSTM
    parameters = {24: "cell clip", 25: "projection clip", 26: "input gate scale", 27: "forget gate scale",
                  28: "cell gate scale", 29: "output gate scale", 30: "hidden state zero point",
                  31: "hidden state scale"}
    accuracy = "relaxed"
    signatures = [Signature(30, [Q8AS] + [Q8S] * 8 + [Q16] * 3 + [I32] * 4 + [Q8S, I32, Q8AS, Q16] + [Q16] * 4
                            + [T.FLOAT32] * 6 + [T.INT32, T.FLOAT32], [Q8AS, Q16, Q8AS],
                            # Optional: CIFG, peephole, projection and layer norm tensors.
                            omittable=[1, 5, 9, 10, 11, 12, 16, 17, 20, 21, 22, 23])]

    def infer(self, call: Call):
        ins = call.ins
        for k in (0, 2, 3, 4, 6, 7, 8, 13, 14, 15, 18, 19):
            check(present(ins[k]), f"required input {k} is omitted")
        x = ins[0]
        check_rank(x, 2, "input")
        batch, input_size = x.shape
        check_rank(ins[4], 2, "input-to-output weights")
        units = ins[4].shape[0]
        check_rank(ins[8], 2, "recurrent-to-output weights")
        output_size = ins[8].shape[1]
        for k in range(1, 9):
            if present(ins[k]):
                check_shape(ins[k], (units, input_size if k <= 4 else output_size), f"weights input {k}")
        cifg = not present(ins[1])
        check(present(ins[5]) != cifg, "input-to-input and recurrent-to-input weights must be both present or omitted")
        for k in (9, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23):
            if present(ins[k]):
                check_shape(ins[k], (units,), f"input {k}")
        peephole = present(ins[11])
        check(present(ins[10]) == peephole and (present(ins[9]) == peephole or (cifg and not present(ins[9]))),
              "peephole weights must be all present or all omitted (cell-to-input omitted with CIFG)")
        check(present(ins[12]) != cifg, "the input gate bias must be present exactly when CIFG is not used")
        if present(ins[16]):
            check_shape(ins[16], (output_size, units), "projection weights")
        else:
            check(output_size == units, f"without projection the output size {output_size} must equal the "
                                        f"number of units {units}")
        if present(ins[17]):
            check_shape(ins[17], (output_size,), "projection bias")
        check_shape(ins[18], (batch, output_size), "previous output")
        check_shape(ins[19], (batch, units), "previous cell state")
        ln = [present(ins[k]) for k in range(20, 24)]
        if cifg:
            check(not ln[0], "input layer norm weights are present while CIFG is used")
            check(all(ln[1:]) or not any(ln[1:]), "layer norm weights must be all present or all omitted")
        else:
            check(all(ln) or not any(ln), "layer norm weights must be all present or all omitted")
        check(ins[24].scalar() >= 0 and ins[25].scalar() >= 0, "clip thresholds must not be negative")
        log2 = checked_log2(ins[19].scale) if ins[19].scale > 0 else None
        check(log2 is not None and log2 <= -9, "cell state scale must be a power of two, at most 2**-9")
        return [(batch, output_size), (batch, units), (batch, output_size)]

    def execute(self, call: Call):
        ins = call.ins
        x_arg, h_arg, c_arg = ins[0], ins[18], ins[19]
        x = x_arg.value.astype(np.int64)
        h_prev = h_arg.value.astype(np.int64)
        c_prev = c_arg.value.astype(np.int64)
        batch, units = c_prev.shape
        cell_shift = checked_log2(c_arg.scale)
        cifg = not present(ins[1])
        cell_clip, proj_clip = ins[24].scalar(), ins[25].scalar()
        intermediate = [_f32(ins[k].scalar()) for k in range(26, 30)]
        hidden_zp, hidden_scale = ins[30].scalar(), _f32(ins[31].scalar())

        def w(k):
            return ins[k].value.astype(np.int64) if present(ins[k]) else None

        def gate(index, ln_index, bias_index, peephole_index, cell_for_peephole):
            """Pre-activation of one gate in int16 (input weights ins[1+index], recurrent ins[5+index])."""
            scale = intermediate[index]
            wx, wh = ins[1 + index], ins[5 + index]
            m_x = _multiplier(_f32(wx.scale) * _f32(x_arg.scale) / scale)
            m_h = _multiplier(_f32(wh.scale) * _f32(h_arg.scale) / scale)
            out = np.zeros((batch, units), np.int64)
            out = _matmul_accumulate(x, -x_arg.zero_point * w(1 + index).sum(axis=1), w(1 + index), *m_x, out,
                                     -32768, 32767)
            out = _matmul_accumulate(h_prev, -h_arg.zero_point * w(5 + index).sum(axis=1), w(5 + index), *m_h, out,
                                     -32768, 32767)
            if peephole_index is not None and present(ins[peephole_index]):
                pw = ins[peephole_index]
                m_c = _multiplier(np.float32(2.0 ** cell_shift * float(_f32(pw.scale)) / float(scale)))
                prod = mbqm(w(peephole_index) * cell_for_peephole, *m_c)
                out = np.clip(prod + out, -32768, 32767)
            if present(ins[ln_index]):
                ln = ins[ln_index]
                ln_a, ln_b = _multiplier(_f32(ln.scale))
                limit = min(1, int(np.float32(10000) * _f32(ln.scale)))
                out = _layer_norm(out, w(ln_index), ins[bias_index].value.astype(np.int64), ln_a, ln_b, limit)
            return out

        forget = fixed_logistic(gate(1, 21, 13, 10, c_prev), 3)
        modulation = fixed_tanh(gate(2, 22, 14, None, None), 3)
        if cifg:
            input_gate = 32767 - forget
        else:
            input_gate = fixed_logistic(gate(0, 20, 12, 9, c_prev), 3)
        c = np.clip(wrap(rdbpot(forget * c_prev, 15), 16) + wrap(rdbpot(input_gate * modulation, 30 + cell_shift), 16),
                    -32768, 32767)
        if cell_clip > 0:
            q_clip = int(min(max(np.float32(cell_clip) / _f32(c_arg.scale), -32768.0), 32767.0))
            c = np.clip(c, -q_clip, q_clip)
        output_gate = fixed_logistic(gate(3, 23, 15, 11, c), 3)
        hidden_a, hidden_b = _multiplier(np.float32(2.0 ** -15 / float(hidden_scale) * 2.0 ** -15))
        tanh_c = fixed_tanh(c, cell_shift + 15)
        hidden = np.clip(mbqm(output_gate * tanh_c, hidden_a, hidden_b) - hidden_zp, -128, 127)
        if present(ins[16]):
            pw = ins[16]
            proj_a, proj_b = _multiplier(_f32(pw.scale) * hidden_scale / _f32(h_arg.scale))
            bias = hidden_zp * w(16).sum(axis=1)
            if present(ins[17]):
                bias = bias + ins[17].value.astype(np.int64)
            # the output buffer starts at 0; the output zero point is added to it
            out = _matmul_accumulate(hidden, bias, w(16), proj_a, proj_b, h_arg.zero_point, -128, 127)
            if proj_clip > 0:
                q_clip = int(min(max(np.float32(proj_clip) / _f32(pw.scale), -128.0), 127.0))
                out = np.clip(out, -q_clip, q_clip)
        else:
            out = hidden
        out = out.astype(np.int8)
        return [out, c.astype(np.int16), out.copy()]
