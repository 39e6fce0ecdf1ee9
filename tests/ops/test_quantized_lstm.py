"""QUANTIZED_16BIT_LSTM, QUANTIZED_LSTM and their fixed-point gate functions."""
import math

import numpy as np
import pytest

from nnapi_ref.errors import NnapiError
from nnapi_ref.ops.quantized_lstm import fixed_logistic, fixed_tanh, inv_sqrt_multiplier
from nnapi_ref.types import OperandCode as T, OperationCode as Op, ResultCode
from nnts.generators.builders import Operand, omitted, output, run_operation, scalar, tensor

Q8, Q16, I32 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT16_SYMM, T.TENSOR_INT32
Q8S, Q8AS = T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
RNG = np.random.default_rng(5)
sigmoid = np.vectorize(lambda v: 1.0 / (1.0 + math.exp(-v)))


# ----------------------------------------------------------------------------- fixed point

@pytest.mark.parametrize("int_bits", [0, 3, 4, 6])
def test_fixed_point_gates_track_the_real_functions(int_bits):
    raw = np.arange(-32768, 32768, 37, dtype=np.int64)
    real = raw / 2.0 ** (15 - int_bits)
    np.testing.assert_allclose(fixed_tanh(raw, int_bits) / 32768.0, np.tanh(real), atol=1e-3)
    if int_bits == 3:
        np.testing.assert_allclose(fixed_logistic(raw, 3) / 32768.0, sigmoid(real), atol=1e-3)
    assert fixed_tanh(np.array([0]), int_bits)[0] == 0


def test_inv_sqrt_multiplier():
    values = np.array([2, 3, 100, 12345, 1 << 20, (1 << 30) + 7])
    mult, shift = inv_sqrt_multiplier(values)
    approx = mult * 2.0 ** (shift.astype(float) - 31)
    np.testing.assert_allclose(approx, 1 / np.sqrt(values), rtol=1e-5)


# ----------------------------------------------------------------------------- QUANTIZED_16BIT_LSTM

W_SCALE, W_ZP = 0.02, 120


def q16lstm(x, h, c, weights, biases, input_scale=1 / 128):
    """weights: 8 uint8 arrays (input-to-{i,f,c,o}, recurrent-to-{i,f,c,o}); biases: 4 int32 arrays."""
    ins = ([tensor(Q8, x, input_scale, 128)] + [tensor(Q8, w, W_SCALE, W_ZP) for w in weights]
           + [tensor(I32, b, np.float32(W_SCALE) / 128, 0) for b in biases]
           + [tensor(Q16, c, 1 / 2048, 0), tensor(Q8, h, 1 / 128, 128)])
    return run_operation(Op.QUANTIZED_16BIT_LSTM, ins, [output(Q16, scale=1 / 2048), output(Q8, scale=1 / 128,
                                                                                           zero_point=128)])


def test_16bit_zero_weights_by_hand():
    # real weights and biases 0: every gate sees 0, so i = f = o = 1/2 and g = tanh(0) = 0;
    # c = c_prev / 2 = 0.5 (1024 at scale 2**-11), output = tanh(0.5) / 2 = 0.2311 -> 128 + 29.6
    n_in, n_out = 2, 3
    weights = [np.full((n_out, n_in), W_ZP)] * 4 + [np.full((n_out, n_out), W_ZP)] * 4
    cell, out = q16lstm(np.full((1, n_in), 200), np.full((1, n_out), 17), np.full((1, n_out), 2048),
                        weights, [np.zeros(n_out, np.int32)] * 4)
    np.testing.assert_array_equal(cell, [[1024] * n_out])
    assert np.all(np.abs(out.astype(int) - 158) <= 1)


def test_16bit_matches_float_reference():
    # each gate's input and recurrent weights share one constant per row, so the result does not
    # depend on how the input and the previous output are laid against the weight columns
    batch, n_in, n_out = 2, 3, 3
    rows = [RNG.integers(70, 170, n_out) for _ in range(4)]
    weights = [np.repeat(rows[k % 4][:, None], n_in if k < 4 else n_out, axis=1) for k in range(8)]
    biases = [RNG.integers(-3000, 3000, n_out).astype(np.int32) for _ in range(4)]
    x = RNG.integers(60, 200, (batch, n_in))
    h = RNG.integers(60, 200, (batch, n_out))
    c = RNG.integers(-4000, 4000, (batch, n_out))
    cell, out = q16lstm(x, h, c, weights, biases)

    xr, hr, cr = (x - 128) / 128, (h - 128) / 128, c / 2048
    wr = [(w - W_ZP) * W_SCALE for w in weights]
    br = [b * np.float32(W_SCALE) / 128 for b in biases]
    z = [xr @ wr[g].T + hr @ wr[4 + g].T + br[g] for g in range(4)]
    c_exp = sigmoid(z[1]) * cr + sigmoid(z[0]) * np.tanh(z[2])
    out_exp = sigmoid(z[3]) * np.tanh(c_exp)
    assert np.max(np.abs(cell - c_exp * 2048)) <= 4
    assert np.max(np.abs(out.astype(int) - (out_exp * 128 + 128))) <= 1.5


def test_16bit_validation():
    n = 2
    weights = [np.full((n, n), W_ZP)] * 8
    biases = [np.zeros(n, np.int32)] * 4
    with pytest.raises(NnapiError) as e:
        q16lstm(np.zeros((1, n)), np.zeros((1, n)), np.zeros((1, n)), weights, biases, input_scale=1 / 64)
    assert e.value.code == ResultCode.BAD_DATA
    with pytest.raises(NnapiError) as e:
        q16lstm(np.zeros((1, n)), np.zeros((1, n)), np.zeros((1, n)), weights[:4] + [np.full((n, 3), W_ZP)] * 4,
                biases)
    assert e.value.code == ResultCode.BAD_DATA


# ----------------------------------------------------------------------------- QUANTIZED_LSTM

def omitted_quant(type_):
    return Operand(type_, None, scale=1.0, dims=(0,), omitted=True)


def qlstm(x, h, c, w, ln, biases, x_zp=0, cell_shape=None, intermediate=2.0 ** -12, hidden_scale=2.0 ** -7):
    """No CIFG, no peephole, no projection, layer normalization on."""
    ins = ([tensor(Q8AS, x, 1 / 64, x_zp)] + [tensor(Q8S, wk, 0.01, 0) for wk in w] + [omitted_quant(Q16)] * 3
           + [tensor(I32, b) for b in biases] + [omitted_quant(Q8S), omitted(I32)]
           + [tensor(Q8AS, h, hidden_scale, 0), tensor(Q16, c, 2.0 ** -11, 0)]
           + [tensor(Q16, l, 2.0 ** -13, 0) for l in ln]
           + [scalar(T.FLOAT32, 0.0), scalar(T.FLOAT32, 0.0)] + [scalar(T.FLOAT32, intermediate)] * 4
           + [scalar(T.INT32, 0), scalar(T.FLOAT32, hidden_scale)])
    return run_operation(Op.QUANTIZED_LSTM, ins, [output(Q8AS, scale=hidden_scale), output(Q16, scale=2.0 ** -11),
                                                  output(Q8AS, scale=hidden_scale)])


def test_qlstm_layer_norm_matches_float_reference():
    batch, n_in, units = 2, 3, 4
    w = [RNG.integers(-100, 100, (units, n_in if k < 4 else units)) for k in range(8)]
    ln = [RNG.integers(4000, 12000, units) for _ in range(4)]
    biases = [RNG.integers(-400000, 400000, units).astype(np.int32) for _ in range(4)]
    x = RNG.integers(-100, 100, (batch, n_in))
    h = RNG.integers(-100, 100, (batch, units))
    c = RNG.integers(-3000, 3000, (batch, units))
    out_state, cell, out = qlstm(x, h, c, w, ln, biases, x_zp=3)

    xr, hr, cr = (x - 3) / 64, h * 2.0 ** -7, c * 2.0 ** -11
    pre = []
    for g in range(4):
        z = xr @ (w[g] * 0.01).T + hr @ (w[4 + g] * 0.01).T
        norm = (z - z.mean(axis=1, keepdims=True)) / z.std(axis=1, keepdims=True)
        pre.append(norm * ln[g] * 2.0 ** -13 + biases[g] * 2.0 ** -13 / 1024)
    c_exp = sigmoid(pre[1]) * cr + sigmoid(pre[0]) * np.tanh(pre[2])
    hidden = sigmoid(pre[3]) * np.tanh(c_exp)
    assert np.max(np.abs(cell - c_exp * 2048)) <= 8
    assert np.max(np.abs(out - hidden * 128)) <= 2
    np.testing.assert_array_equal(out_state, out)


def test_qlstm_validation():
    units = 4
    w = [np.zeros((units, 3 if k < 4 else units), np.int8) for k in range(8)]
    ln = [np.ones(units)] * 4
    biases = [np.zeros(units, np.int32)] * 4
    with pytest.raises(NnapiError) as e:  # cell state batch differs from the input's
        qlstm(np.zeros((2, 3)), np.zeros((2, units)), np.zeros((1, units)), w, ln, biases)
    assert e.value.code == ResultCode.BAD_DATA
    with pytest.raises(NnapiError) as e:  # wrong recurrent weights shape
        qlstm(np.zeros((1, 3)), np.zeros((1, units)), np.zeros((1, units)), w[:4] + [np.zeros((units, 3))] * 4,
              ln, biases)
    assert e.value.code == ResultCode.BAD_DATA
