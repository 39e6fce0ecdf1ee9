"""RNN, UNIDIRECTIONAL_SEQUENCE_RNN, BIDIRECTIONAL_SEQUENCE_RNN."""
import numpy as np
import pytest

from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.generators.builders import omitted, output, run_operation, scalar, tensor

from .support import assert_bad_data, assert_op_bad_data

F32, F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
RNG = np.random.default_rng(7)


def rnn_step(x, w, r, b, h, fuse, t=F32):
    return run_operation(Op.RNN, [tensor(t, x), tensor(t, w), tensor(t, r), tensor(t, b), tensor(t, h),
                                  scalar(T.INT32, fuse)], [output(t), output(t)])


def uni(x, w, r, b, h, fuse, time_major, t=F32, state=False):
    outs = [output(t)] + ([output(t)] if state else [])
    return run_operation(Op.UNIDIRECTIONAL_SEQUENCE_RNN,
                         [tensor(t, x), tensor(t, w), tensor(t, r), tensor(t, b), tensor(t, h),
                          scalar(T.INT32, fuse), scalar(T.INT32, int(time_major))], outs)


def cell(units, inputs):
    return (RNG.uniform(-0.5, 0.5, (units, inputs)), RNG.uniform(-0.5, 0.5, (units, units)),
            RNG.uniform(-0.2, 0.2, units))


def test_rnn_one_unit_by_hand():
    # h = relu(0.5*2 + 1*0.5 + 0.1) = 1.6
    state, out = rnn_step([[0.5]], [[2.0]], [[0.5]], [0.1], [[1.0]], 1)
    assert out[0, 0] == pytest.approx(1.6)
    assert state[0, 0] == pytest.approx(1.6)
    _, out = rnn_step([[0.5]], [[2.0]], [[0.5]], [0.1], [[1.0]], 2)  # RELU1 clips to 1
    assert out[0, 0] == pytest.approx(1.0)
    _, out = rnn_step([[-0.5]], [[2.0]], [[0.5]], [0.1], [[1.0]], 0)  # no activation: -1 + 0.5 + 0.1
    assert out[0, 0] == pytest.approx(-0.4)


def test_rnn_textbook_two_units():
    x, h = np.array([[1.0, -2.0, 0.5]]), np.array([[0.3, -0.7]])
    w, r, b = cell(2, 3)
    _, out = rnn_step(x, w, r, b, h, 3)
    for u in range(2):
        z = sum(x[0, i] * w[u, i] for i in range(3)) + sum(h[0, j] * r[u, j] for j in range(2)) + b[u]
        assert out[0, u] == pytest.approx(min(max(z, 0.0), 6.0), abs=1e-6)


def test_sequence_equals_chained_steps():
    steps, batch, inputs, units = 4, 2, 3, 5
    x = RNG.uniform(-1, 1, (steps, batch, inputs))
    w, r, b = cell(units, inputs)
    h0 = RNG.uniform(-1, 1, (batch, units))
    seq, h_last = uni(x, w, r, b, h0, 1, True, state=True)
    h = h0
    for t in range(steps):
        h, out = rnn_step(x[t], w, r, b, h, 1)
        np.testing.assert_allclose(seq[t], out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h_last, h, rtol=1e-5, atol=1e-6)
    batch_major, = uni(x.transpose(1, 0, 2), w, r, b, h0, 1, False)
    np.testing.assert_allclose(batch_major, seq.transpose(1, 0, 2), rtol=1e-6)


def test_sequence_float16():
    x = RNG.uniform(-1, 1, (3, 1, 2))
    w, r, b = cell(2, 2)
    h0 = np.zeros((1, 2))
    out16, = uni(x, w, r, b, h0, 0, True, t=F16)
    out32, = uni(x.astype(np.float16), w.astype(np.float16), r.astype(np.float16), b.astype(np.float16), h0, 0, True)
    assert out16.dtype == np.float16
    np.testing.assert_allclose(out16.astype(np.float32), out32, atol=5e-3, rtol=5e-3)


def test_torch_rnn_relu():
    torch = pytest.importorskip("torch")
    steps, batch, inputs, units = 5, 3, 4, 6
    x = RNG.uniform(-1, 1, (steps, batch, inputs)).astype(np.float32)
    w, r, b = (a.astype(np.float32) for a in cell(units, inputs))
    h0 = RNG.uniform(-1, 1, (batch, units)).astype(np.float32)
    net = torch.nn.RNN(inputs, units, nonlinearity="relu")
    with torch.no_grad():
        net.weight_ih_l0.copy_(torch.from_numpy(w))
        net.weight_hh_l0.copy_(torch.from_numpy(r))
        net.bias_ih_l0.copy_(torch.from_numpy(b))
        net.bias_hh_l0.zero_()
        expected, _ = net(torch.from_numpy(x), torch.from_numpy(h0)[None])
    got, = uni(x, w, r, b, h0, 1, True)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-6)


def bidi(x, fw, bw, h_fw, h_bw, time_major=True, merge=False, aux=None, aux_w=(None, None), state=False):
    ins = [tensor(F32, x), *(tensor(F32, a) for a in fw), tensor(F32, h_fw),
           *(tensor(F32, a) for a in bw), tensor(F32, h_bw),
           tensor(F32, aux) if aux is not None else omitted(F32),
           tensor(F32, aux_w[0]) if aux_w[0] is not None else omitted(F32),
           tensor(F32, aux_w[1]) if aux_w[1] is not None else omitted(F32),
           scalar(T.INT32, 0), scalar(T.BOOL, time_major), scalar(T.BOOL, merge)]
    n = (1 if merge else 2) + (2 if state else 0)
    return run_operation(Op.BIDIRECTIONAL_SEQUENCE_RNN, ins, [output(F32) for _ in range(n)])


def test_bidirectional_is_forward_plus_reversed_forward():
    steps, batch, inputs = 4, 2, 3
    x = RNG.uniform(-1, 1, (steps, batch, inputs))
    fw, bw = cell(3, inputs), cell(2, inputs)
    h_fw, h_bw = RNG.uniform(-1, 1, (batch, 3)), RNG.uniform(-1, 1, (batch, 2))
    fw_out, bw_out, fw_h, bw_h = bidi(x, fw, bw, h_fw, h_bw, state=True)
    exp_fw, exp_fw_h = uni(x, *fw, h_fw, 0, True, state=True)
    exp_bw, exp_bw_h = uni(x[::-1], *bw, h_bw, 0, True, state=True)
    np.testing.assert_allclose(fw_out, exp_fw, rtol=1e-6)
    np.testing.assert_allclose(bw_out, exp_bw[::-1], rtol=1e-6)
    np.testing.assert_allclose(fw_h, exp_fw_h, rtol=1e-6)
    np.testing.assert_allclose(bw_h, exp_bw_h, rtol=1e-6)
    merged, = bidi(x.transpose(1, 0, 2), fw, bw, h_fw, h_bw, time_major=False, merge=True)
    np.testing.assert_allclose(merged, np.concatenate([exp_fw, exp_bw[::-1]], axis=2).transpose(1, 0, 2), rtol=1e-6)


def test_bidirectional_aux_inputs():
    steps, batch, inputs, aux_size = 3, 1, 2, 3
    x = RNG.uniform(-1, 1, (steps, batch, inputs))
    aux = RNG.uniform(-1, 1, (steps, batch, aux_size))
    fw, bw = cell(2, inputs), cell(2, inputs)
    h0 = np.zeros((batch, 2))
    # parallel linking: the backward cell reads the auxiliary input
    bw_aux = cell(2, aux_size)
    _, bw_out = bidi(x, fw, bw_aux, h0, h0, aux=aux)
    exp_bw, = uni(aux[::-1], *bw_aux, h0, 0, True)
    np.testing.assert_allclose(bw_out, exp_bw[::-1], rtol=1e-6)
    # cross linking: aux weights add aux @ W_aux^T to the input term, i.e. a cell on [x, aux]
    fw_aux_w, bw_aux_w = RNG.uniform(-1, 1, (2, aux_size)), RNG.uniform(-1, 1, (2, aux_size))
    fw_out, bw_out = bidi(x, fw, bw, h0, h0, aux=aux, aux_w=(fw_aux_w, bw_aux_w))
    xa = np.concatenate([x, aux], axis=2)
    exp_fw, = uni(xa, np.concatenate([fw[0], fw_aux_w], axis=1), fw[1], fw[2], h0, 0, True)
    exp_bw, = uni(xa[::-1], np.concatenate([bw[0], bw_aux_w], axis=1), bw[1], bw[2], h0, 0, True)
    np.testing.assert_allclose(fw_out, exp_fw, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bw_out, exp_bw[::-1], rtol=1e-5, atol=1e-6)


def test_validation():
    w, r, b = cell(2, 3)
    x, h = np.zeros((1, 3)), np.zeros((1, 2))
    assert_bad_data(lambda: rnn_step(x, w, r, b, h, 5))                   # activation code
    assert_bad_data(lambda: rnn_step(np.zeros((1, 4)), w, r, b, h, 0))     # input size vs weights
    assert_bad_data(lambda: rnn_step(x, w, np.zeros((2, 3)), b, h, 0))     # recurrent weights not square
    assert_bad_data(lambda: rnn_step(x, w, r, np.zeros(3), h, 0))          # bias size
    assert_bad_data(lambda: rnn_step(x, w, r, b, np.zeros((2, 2)), 0))     # hidden state batch
    assert_bad_data(lambda: uni(np.zeros((2, 3)), w, r, b, h, 0, True))    # sequence input must be rank 3
    seq = np.zeros((2, 1, 3))
    # aux weights without an aux input
    assert_bad_data(lambda: bidi(seq, (w, r, b), (w, r, b), h, h, aux_w=(np.zeros((2, 3)), np.zeros((2, 3)))))
    # merged outputs take one output (plus states), not two
    assert_op_bad_data(Op.BIDIRECTIONAL_SEQUENCE_RNN,
                       [tensor(F32, seq), tensor(F32, w), tensor(F32, r), tensor(F32, b), tensor(F32, h),
                        tensor(F32, w), tensor(F32, r), tensor(F32, b), tensor(F32, h),
                        omitted(F32), omitted(F32), omitted(F32),
                        scalar(T.INT32, 0), scalar(T.BOOL, True), scalar(T.BOOL, True)],
                       [output(F32), output(F32)])
