"""LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM, BIDIRECTIONAL_SEQUENCE_LSTM."""
import math

import numpy as np
import pytest

from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.generators.builders import omitted, output, run_operation, scalar, tensor

from .support import assert_bad_data

F32, F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
RNG = np.random.default_rng(11)
CELL = ["i2i", "i2f", "i2c", "i2o", "r2i", "r2f", "r2c", "r2o", "c2i", "c2f", "c2o",
        "bi", "bf", "bc", "bo", "proj", "proj_b"]
LN = ["ln_i", "ln_f", "ln_c", "ln_o"]


def make_params(n_input, n_cell, n_output=None, cifg=False, peephole=False, projection=False,
                proj_bias=False, layer_norm=False):
    n_output = n_output or n_cell
    u = lambda *shape: RNG.uniform(-0.6, 0.6, shape)
    p = {}
    for g in "ifco":
        p["i2" + g] = u(n_cell, n_input)
        p["r2" + g] = u(n_cell, n_output)
        p["b" + g] = u(n_cell)
        p["c2" + g] = u(n_cell) if peephole and g != "c" else None
        p["ln_" + g] = RNG.uniform(0.5, 1.5, n_cell) if layer_norm else None
    p.pop("c2c")
    if cifg:
        p.update(i2i=None, r2i=None, bi=None, c2i=None, ln_i=None)
    p["proj"] = u(n_output, n_cell) if projection else None
    p["proj_b"] = u(n_output) if projection and proj_bias else None
    return p


def cell_operands(p, t=F32):
    return [tensor(t, p[k]) if p.get(k) is not None else omitted(t) for k in CELL]


def ln_operands(p, t=F32):
    return [tensor(t, p[k]) if p.get(k) is not None else omitted(t) for k in LN]


def clip_type(t):
    return T.FLOAT32 if t == F32 else T.FLOAT16


def lstm_step(x, h, c, p, act=4, cell_clip=0.0, proj_clip=0.0, t=F32, layer_norm_inputs=True):
    ins = ([tensor(t, x)] + cell_operands(p, t) + [tensor(t, h), tensor(t, c), scalar(T.INT32, act),
                                                   scalar(clip_type(t), cell_clip), scalar(clip_type(t), proj_clip)])
    if layer_norm_inputs:
        ins += ln_operands(p, t)
    return run_operation(Op.LSTM, ins, [output(t) for _ in range(4)])


def uni_lstm(x, h, c, p, time_major=True, act=4, cell_clip=0.0, proj_clip=0.0, t=F32, state=False):
    ins = ([tensor(t, x)] + cell_operands(p, t) + [tensor(t, h), tensor(t, c), scalar(T.INT32, act),
                                                   scalar(clip_type(t), cell_clip), scalar(clip_type(t), proj_clip),
                                                   scalar(T.BOOL, time_major)] + ln_operands(p, t))
    return run_operation(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, [output(t) for _ in range(3 if state else 1)])


def sig(v):
    return 1.0 / (1.0 + math.exp(-v))


def textbook_step(x, h, c, p, cell_clip=0.0, proj_clip=0.0):
    """Per-unit scalar formulas for one batch row (lists in, lists out), tanh activation."""
    n_cell = len(p["bf"])

    def z(g, u):
        v = sum(p["i2" + g][u][k] * x[k] for k in range(len(x)))
        v += sum(p["r2" + g][u][k] * h[k] for k in range(len(h)))
        return v

    def normalized(g, values):
        if p["ln_f"] is None:
            return [v + p["b" + g][u] for u, v in enumerate(values)]
        mean = sum(values) / n_cell
        var = sum((v - mean) ** 2 for v in values) / n_cell
        return [(v - mean) / math.sqrt(var + 1e-8) * p["ln_" + g][u] + p["b" + g][u] for u, v in enumerate(values)]

    def peep(g, u, state):
        return p["c2" + g][u] * state[u] if p.get("c2" + g) is not None else 0.0

    cifg = p["i2i"] is None
    f = [sig(v) for v in normalized("f", [z("f", u) + peep("f", u, c) for u in range(n_cell)])]
    if cifg:
        i = [1.0 - fu for fu in f]
    else:
        i = [sig(v) for v in normalized("i", [z("i", u) + peep("i", u, c) for u in range(n_cell)])]
    g = [math.tanh(v) for v in normalized("c", [z("c", u) for u in range(n_cell)])]
    c_new = [f[u] * c[u] + i[u] * g[u] for u in range(n_cell)]
    if cell_clip > 0:
        c_new = [min(max(v, -cell_clip), cell_clip) for v in c_new]
    o = [sig(v) for v in normalized("o", [z("o", u) + peep("o", u, c_new) for u in range(n_cell)])]
    m = [o[u] * math.tanh(c_new[u]) for u in range(n_cell)]
    if p["proj"] is None:
        return m, c_new
    out = []
    for r in range(len(p["proj"])):
        v = sum(p["proj"][r][u] * m[u] for u in range(n_cell)) + (p["proj_b"][r] if p["proj_b"] is not None else 0)
        out.append(min(max(v, -proj_clip), proj_clip) if proj_clip > 0 else v)
    return out, c_new


def test_one_unit_by_hand():
    # all weights 0 except input-to-cell 1, biases 0: i = f = o = 0.5, g = tanh(x)
    p = {k: None for k in CELL + LN}
    for g in "ifco":
        p["i2" + g], p["r2" + g], p["b" + g] = [[0.0]], [[0.0]], [0.0]
    p["i2c"] = [[1.0]]
    _, h, c, out = lstm_step([[0.5]], [[0.0]], [[0.2]], p, layer_norm_inputs=False)
    c_exp = 0.5 * 0.2 + 0.5 * math.tanh(0.5)
    assert c[0, 0] == pytest.approx(c_exp, abs=1e-6)
    assert out[0, 0] == pytest.approx(0.5 * math.tanh(c_exp), abs=1e-6)
    assert h[0, 0] == pytest.approx(out[0, 0])


CONFIGS = {
    "plain": dict(),
    "cifg": dict(cifg=True),
    "peephole": dict(peephole=True),
    "cifg_peephole": dict(cifg=True, peephole=True),
    "projection": dict(projection=True, n_output=3),
    "projection_bias_clip": dict(projection=True, proj_bias=True, n_output=3, proj_clip=0.3, cell_clip=0.4),
    "layer_norm": dict(layer_norm=True, peephole=True),
    "layer_norm_cifg_projection": dict(layer_norm=True, cifg=True, projection=True, n_output=1),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_step_matches_textbook(name):
    cfg = dict(CONFIGS[name])
    clips = dict(cell_clip=cfg.pop("cell_clip", 0.0), proj_clip=cfg.pop("proj_clip", 0.0))
    n_input, n_cell, batch = 3, 2, 2
    p = make_params(n_input, n_cell, **cfg)
    n_output = cfg.get("n_output", n_cell)
    x = RNG.uniform(-1, 1, (batch, n_input))
    h = RNG.uniform(-1, 1, (batch, n_output))
    c = RNG.uniform(-1, 1, (batch, n_cell))
    scratch, h_out, c_out, out = lstm_step(x, h, c, p, **clips)
    assert scratch.shape == (batch, n_cell * (3 if cfg.get("cifg") else 4))
    lists = {k: (v.tolist() if v is not None else None) for k, v in p.items()}
    for b in range(batch):
        exp_out, exp_c = textbook_step(x[b].tolist(), h[b].tolist(), c[b].tolist(), lists, **clips)
        np.testing.assert_allclose(out[b], exp_out, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(h_out[b], exp_out, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(c_out[b], exp_c, rtol=1e-5, atol=1e-6)


def test_sequence_equals_chained_steps_and_batch_major():
    steps, batch, n_input, n_cell = 4, 2, 3, 2
    p = make_params(n_input, n_cell, peephole=True, projection=True, n_output=3, layer_norm=True)
    x = RNG.uniform(-1, 1, (steps, batch, n_input))
    h0, c0 = RNG.uniform(-1, 1, (batch, 3)), RNG.uniform(-1, 1, (batch, n_cell))
    seq, h_last, c_last = uni_lstm(x, h0, c0, p, cell_clip=0.8, state=True)
    h, c = h0, c0
    for t in range(steps):
        _, h, c, out = lstm_step(x[t], h, c, p, cell_clip=0.8)
        np.testing.assert_allclose(seq[t], out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h_last, h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c_last, c, rtol=1e-5, atol=1e-6)
    bm, = uni_lstm(x.transpose(1, 0, 2), h0, c0, p, time_major=False, cell_clip=0.8)
    np.testing.assert_allclose(bm, seq.transpose(1, 0, 2), rtol=1e-6)


def test_float16_step():
    p = make_params(2, 2)
    p16 = {k: (v.astype(np.float16) if v is not None else None) for k, v in p.items()}
    x, h, c = (RNG.uniform(-1, 1, (1, 2)).astype(np.float16) for _ in range(3))
    res16 = lstm_step(x, h, c, p16, t=F16)
    res32 = lstm_step(x, h, c, p16)
    for a, b in zip(res16[1:], res32[1:]):
        assert a.dtype == np.float16
        np.testing.assert_allclose(a.astype(np.float32), b, atol=5e-3, rtol=5e-3)


@pytest.mark.parametrize("projection", [False, True])
def test_torch_lstm(projection):
    torch = pytest.importorskip("torch")
    steps, batch, n_input, n_cell = 5, 3, 4, 3
    n_output = 2 if projection else n_cell
    p = make_params(n_input, n_cell, n_output=n_output, projection=projection)
    p = {k: (v.astype(np.float32) if v is not None else None) for k, v in p.items()}
    x = RNG.uniform(-1, 1, (steps, batch, n_input)).astype(np.float32)
    h0 = RNG.uniform(-1, 1, (batch, n_output)).astype(np.float32)
    c0 = RNG.uniform(-1, 1, (batch, n_cell)).astype(np.float32)
    net = torch.nn.LSTM(n_input, n_cell, proj_size=n_output if projection else 0)
    with torch.no_grad():  # torch's gate order: input, forget, cell (g), output
        net.weight_ih_l0.copy_(torch.from_numpy(np.concatenate([p["i2" + g] for g in "ifco"])))
        net.weight_hh_l0.copy_(torch.from_numpy(np.concatenate([p["r2" + g] for g in "ifco"])))
        net.bias_ih_l0.copy_(torch.from_numpy(np.concatenate([p["b" + g] for g in "ifco"])))
        net.bias_hh_l0.zero_()
        if projection:
            net.weight_hr_l0.copy_(torch.from_numpy(p["proj"]))
        expected, (h_n, c_n) = net(torch.from_numpy(x), (torch.from_numpy(h0)[None], torch.from_numpy(c0)[None]))
    got, h_last, c_last = uni_lstm(x, h0, c0, p, state=True)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h_last, h_n[0].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c_last, c_n[0].numpy(), rtol=1e-5, atol=1e-6)


def bidi_lstm(x, fw, bw, states, merge=False, time_major=True, aux=None, fw_aux=None, bw_aux=None, n_out=2):
    def aux_ops(w):
        return [tensor(F32, w[g]) if w is not None and w.get(g) is not None else omitted(F32) for g in "ifco"]

    ins = ([tensor(F32, x)] + cell_operands(fw) + cell_operands(bw) + [tensor(F32, s) for s in states]
           + [tensor(F32, aux) if aux is not None else omitted(F32)] + aux_ops(fw_aux) + aux_ops(bw_aux)
           + [scalar(T.INT32, 4), scalar(T.FLOAT32, 0.0), scalar(T.FLOAT32, 0.0), scalar(T.BOOL, merge),
              scalar(T.BOOL, time_major)] + ln_operands(fw) + ln_operands(bw))
    return run_operation(Op.BIDIRECTIONAL_SEQUENCE_LSTM, ins, [output(F32) for _ in range(n_out)])


def test_bidirectional_is_forward_plus_reversed_forward():
    steps, batch, n_input = 3, 2, 3
    fw, bw = make_params(n_input, 2, peephole=True), make_params(n_input, 3, cifg=True)
    x = RNG.uniform(-1, 1, (steps, batch, n_input))
    states = [RNG.uniform(-1, 1, (batch, n)) for n in (2, 2, 3, 3)]
    fw_out, bw_out, fw_h, fw_c, bw_h, bw_c = bidi_lstm(x, fw, bw, states, n_out=6)
    e_fw, e_fw_h, e_fw_c = uni_lstm(x, states[0], states[1], fw, state=True)
    e_bw, e_bw_h, e_bw_c = uni_lstm(x[::-1], states[2], states[3], bw, state=True)
    for got, exp in ((fw_out, e_fw), (bw_out, e_bw[::-1]), (fw_h, e_fw_h), (fw_c, e_fw_c), (bw_h, e_bw_h),
                     (bw_c, e_bw_c)):
        np.testing.assert_allclose(got, exp, rtol=1e-6, atol=1e-7)
    merged, = bidi_lstm(x.transpose(1, 0, 2), fw, bw, states, merge=True, time_major=False, n_out=1)
    np.testing.assert_allclose(merged, np.concatenate([e_fw, e_bw[::-1]], axis=2).transpose(1, 0, 2), rtol=1e-6)


def test_bidirectional_cross_linking_equals_concatenated_input():
    steps, batch, n_input, n_aux = 2, 1, 2, 3
    fw, bw = make_params(n_input, 2), make_params(n_input, 2)
    fw_aux = {g: RNG.uniform(-1, 1, (2, n_aux)) for g in "ifco"}
    bw_aux = {g: RNG.uniform(-1, 1, (2, n_aux)) for g in "ifco"}
    x, aux = RNG.uniform(-1, 1, (steps, batch, n_input)), RNG.uniform(-1, 1, (steps, batch, n_aux))
    zeros = [np.zeros((batch, 2))] * 4
    fw_out, bw_out = bidi_lstm(x, fw, bw, zeros, aux=aux, fw_aux=fw_aux, bw_aux=bw_aux)
    xa = np.concatenate([x, aux], axis=2)
    fw_cat = dict(fw, **{"i2" + g: np.concatenate([fw["i2" + g], fw_aux[g]], axis=1) for g in "ifco"})
    bw_cat = dict(bw, **{"i2" + g: np.concatenate([bw["i2" + g], bw_aux[g]], axis=1) for g in "ifco"})
    e_fw, = uni_lstm(xa, zeros[0], zeros[1], fw_cat)
    e_bw, = uni_lstm(xa[::-1], zeros[2], zeros[3], bw_cat)
    np.testing.assert_allclose(fw_out, e_fw, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bw_out, e_bw[::-1], rtol=1e-5, atol=1e-6)


def test_validation():
    p = make_params(3, 2)
    x, h, c = np.zeros((1, 3)), np.zeros((1, 2)), np.zeros((1, 2))
    assert_bad_data(lambda: lstm_step(x, h, c, p, act=5))                       # activation code
    assert_bad_data(lambda: lstm_step(x, h, c, p, cell_clip=-1.0))              # negative clip
    assert_bad_data(lambda: lstm_step(np.zeros((1, 4)), h, c, p))                # input size
    assert_bad_data(lambda: lstm_step(x, h, np.zeros((1, 3)), p))                # cell state size
    assert_bad_data(lambda: lstm_step(x, h, c, dict(p, r2i=None)))               # half of the CIFG weights
    assert_bad_data(lambda: lstm_step(x, h, c, dict(p, c2f=np.zeros(2))))        # peephole not all present
    assert_bad_data(lambda: lstm_step(x, h, c, dict(p, proj_b=np.zeros(2))))     # projection bias alone
    assert_bad_data(lambda: lstm_step(x, h, c, dict(p, ln_f=np.ones(2))))        # partial layer norm
    assert_bad_data(lambda: lstm_step(x, h, c, dict(p, r2f=np.zeros((2, 3)))))   # recurrent weights shape
    assert_bad_data(lambda: uni_lstm(x, h, c, p))                                # sequence input rank
