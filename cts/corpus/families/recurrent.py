"""Recurrent networks: RNN, SVDF, the sequence RNNs, the LSTM family and the quantized LSTMs."""
from __future__ import annotations

import numpy as np

from .common import (ACT, F32, I32, NONE, Q8S, Q16S, QA, QS, C, I, O, T, bsc, family, fsc, i32, model, rnd, tname,
                     variants)


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def gen_rnn():
    family("rnn")
    rng = np.random.default_rng(13)
    # RNN: h' = act(x W^T + h R^T + b); outputs (hidden_state_out, output) are both h'
    for code, rel in variants("RNN"):
        t = T(code)
        x, h = rnd((2, 3), -1, 1, 0.25, rng), rnd((2, 2), -1, 1, 0.25, rng)
        w, r, b = rnd((2, 3), -1, 1, 0.25, rng), rnd((2, 2), -1, 1, 0.25, rng), rnd((2,), -1, 1, 0.25, rng)
        for act, fn in ((1, ACT[1]), (2, ACT[2])):
            y = fn(x @ w.T + h @ r.T + b)
            model(f"rnn_{tname(code, rel)}_act{act}", "RNN",
                  [I(t, x), C(t, w), C(t, r), C(t, b), I(t, h), i32(act)], [O(t, y), O(t, y)], relaxed=rel,
                  types=[code])

    def run_rnn(xs, w, r, b, h, act, reverse=False):
        outs = [None] * len(xs)
        order = range(len(xs) - 1, -1, -1) if reverse else range(len(xs))
        for k in order:
            h = act(xs[k] @ w.T + h @ r.T + b)
            outs[k] = h
        return np.stack(outs), h
    # UNIDIRECTIONAL_SEQUENCE_RNN: time-major [time, batch, input] or batch-major
    for code, rel in variants("UNIDIRECTIONAL_SEQUENCE_RNN"):
        t = T(code)
        xs = rnd((3, 2, 2), -1, 1, 0.25, rng)  # time 3, batch 2
        h0 = rnd((2, 2), -1, 1, 0.25, rng)
        w, r, b = rnd((2, 2), -1, 1, 0.25, rng), rnd((2, 2), -1, 1, 0.25, rng), rnd((2,), -1, 1, 0.25, rng)
        ys, _ = run_rnn(xs, w, r, b, h0, ACT[2])
        model(f"unidirectional_sequence_rnn_{tname(code, rel)}_time_major", "UNIDIRECTIONAL_SEQUENCE_RNN",
              [I(t, xs), C(t, w), C(t, r), C(t, b), I(t, h0), i32(2), i32(1)], [O(t, ys)], relaxed=rel, types=[code])
        model(f"unidirectional_sequence_rnn_{tname(code, rel)}_batch_major", "UNIDIRECTIONAL_SEQUENCE_RNN",
              [I(t, xs.transpose(1, 0, 2)), C(t, w), C(t, r), C(t, b), I(t, h0), i32(1), i32(0)],
              [O(t, run_rnn(xs, w, r, b, h0, ACT[1])[0].transpose(1, 0, 2))], relaxed=rel, types=[code])
    # UNIDIRECTIONAL_SEQUENCE_RNN with the final hidden state output (feature level 4)
    xs = rnd((2, 1, 2), -1, 1, 0.25, rng)
    h0 = rnd((1, 2), -1, 1, 0.25, rng)
    w, r, b = rnd((2, 2), -1, 1, 0.25, rng), rnd((2, 2), -1, 1, 0.25, rng), rnd((2,), -1, 1, 0.25, rng)
    ys, hn = run_rnn(xs, w, r, b, h0, ACT[2])
    model("unidirectional_sequence_rnn_float32_state_output", "UNIDIRECTIONAL_SEQUENCE_RNN",
          [I(T(F32), xs), C(T(F32), w), C(T(F32), r), C(T(F32), b), I(T(F32), h0), i32(2), i32(1)],
          [O(T(F32), ys), O(T(F32), hn)], level=30)
    # BIDIRECTIONAL_SEQUENCE_RNN: forward and backward passes, separate or merged outputs
    for code, rel in variants("BIDIRECTIONAL_SEQUENCE_RNN"):
        t = T(code)
        xs = rnd((3, 1, 2), -1, 1, 0.25, rng)
        p = [rnd(s, -1, 1, 0.25, rng) for s in ((2, 2), (2, 2), (2,), (1, 2), (3, 2), (3, 3), (3,), (1, 3))]
        fw, _ = run_rnn(xs, p[0], p[1], p[2], p[3], ACT[2])
        bw, _ = run_rnn(xs, p[4], p[5], p[6], p[7], ACT[2], reverse=True)
        ins = [I(t, xs), C(t, p[0]), C(t, p[1]), C(t, p[2]), I(t, p[3]), C(t, p[4]), C(t, p[5]), C(t, p[6]),
               I(t, p[7]), NONE(code), NONE(code), NONE(code), i32(2), bsc(True)]
        model(f"bidirectional_sequence_rnn_{tname(code, rel)}", "BIDIRECTIONAL_SEQUENCE_RNN",
              ins + [bsc(False)], [O(t, fw), O(t, bw)], relaxed=rel, types=[code])
        if code == F32 and not rel:
            model("bidirectional_sequence_rnn_float32_merged", "BIDIRECTIONAL_SEQUENCE_RNN",
                  ins + [bsc(True)], [O(t, np.concatenate([fw, bw], -1))])
    # SVDF (Android's convention): per filter f the memory is state_in[f] with its last column
    # replaced by x . weights_feature[f]; output[u] = act(bias[u] + sum_{r<rank} memory[u*rank+r] .
    # weights_time[u*rank+r]); state_out = memory shifted left by one with a zero last column
    # (so the last column of state_in is a free slot; we feed 0 there).
    for code, rel in variants("SVDF"):
        t = T(code)
        batch, inp, units, rank, mem = 2, 3, 2, 2, 3
        nf = units * rank
        x = rnd((batch, inp), -1, 1, 0.25, rng)
        wf, wt = rnd((nf, inp), -1, 1, 0.25, rng), rnd((nf, mem), -1, 1, 0.25, rng)
        b = rnd((units,), -1, 1, 0.25, rng)
        s = rnd((batch, nf, mem), -1, 1, 0.25, rng)
        s[:, :, -1] = 0
        s_in = s.reshape(batch, nf * mem)
        memory = np.concatenate([s[:, :, :-1], (x @ wf.T)[:, :, None]], axis=2)
        s_out = np.concatenate([memory[:, :, 1:], np.zeros((batch, nf, 1))], axis=2)
        per_filter = (memory * wt[None]).sum(-1)  # [batch, nf]
        y = np.maximum(per_filter.reshape(batch, units, rank).sum(-1) + b, 0)
        model(f"svdf_{tname(code, rel)}", "SVDF",
              [I(t, x), C(t, wf), C(t, wt), C(t, b), I(t, s_in), i32(rank), i32(1)],
              [O(t, s_out.reshape(batch, nf * mem)), O(t, y)], relaxed=rel, types=[code])


# == LSTM family ==================================================================================

def lstm_params(rng, n_in, units, n_out, cifg=False, peephole=False, proj=False, layer_norm=False):
    p = {}
    for g in "ifco":
        p["wx" + g] = None if (cifg and g == "i") else rnd((units, n_in), -0.5, 0.5, 0.125, rng)
        p["wh" + g] = None if (cifg and g == "i") else rnd((units, n_out), -0.5, 0.5, 0.125, rng)
        p["b" + g] = None if (cifg and g == "i") else rnd((units,), -0.5, 0.5, 0.125, rng)
        p["pc" + g] = rnd((units,), -0.5, 0.5, 0.125, rng) if peephole and g != "c" and not (cifg and g == "i") \
            else None
        p["ln" + g] = rnd((units,), 0.5, 1.5, 0.125, rng) if layer_norm and not (cifg and g == "i") else None
    p["pw"] = rnd((n_out, units), -0.5, 0.5, 0.125, rng) if proj else None
    p["pb"] = rnd((n_out,), -0.25, 0.25, 0.125, rng) if proj else None
    return p


def lstm_step(p, x, h, c, cell_clip=0.0, proj_clip=0.0):
    """One LSTM step (NeuralNetworks.h LSTM formulas, activation tanh)."""
    def pre(g, cell):
        v = x @ p["wx" + g].T + h @ p["wh" + g].T
        if p["pc" + g] is not None:
            v = v + cell * p["pc" + g]
        if p["ln" + g] is not None:  # layer normalization over the units, then weight, then bias
            m, var = v.mean(-1, keepdims=True), v.var(-1, keepdims=True)
            v = (v - m) / np.sqrt(var + 1e-8) * p["ln" + g]
        return v + p["b" + g]
    f = sigmoid(pre("f", c))
    i = 1 - f if p["wxi"] is None else sigmoid(pre("i", c))
    g = np.tanh(pre("c", None))
    c2 = f * c + i * g
    if cell_clip > 0:
        c2 = np.clip(c2, -cell_clip, cell_clip)
    o = sigmoid(pre("o", c2))
    h2 = o * np.tanh(c2)
    if p["pw"] is not None:
        h2 = h2 @ p["pw"].T + p["pb"]
        if proj_clip > 0:
            h2 = np.clip(h2, -proj_clip, proj_clip)
    return h2, c2


def lstm_weight_specs(t, p, aux=False):
    """Inputs 1..17 of LSTM (weights, peepholes, biases, projection); absent ones are omitted."""
    def opt(v):
        return NONE(t.code) if v is None else C(t, v)
    specs = [opt(p["wx" + g]) for g in "ifco"] + [opt(p["wh" + g]) for g in "ifco"]
    specs += [opt(p["pc" + g]) for g in "ifo"] + [opt(p["b" + g]) for g in "ifco"]
    specs += [opt(p["pw"]), opt(p["pb"])]
    return specs


def lstm_ln_specs(t, p):
    return [NONE(t.code) if p["ln" + g] is None else C(t, p["ln" + g]) for g in "ifco"]


def gen_lstm():
    family("lstm")
    rng = np.random.default_rng(14)
    configs = [("basic", {}), ("cifg_peephole", {"cifg": True, "peephole": True}),
               ("projection_clip", {"proj": True})]
    for code, rel in variants("LSTM"):
        t = T(code)
        for cname, cfg in configs:
            if code != F32 and cname != "basic":
                continue
            units, n_in, n_out = 2, 2, (1 if cfg.get("proj") else 2)
            p = lstm_params(rng, n_in, units, n_out, **cfg)
            x = rnd((1, n_in), -1, 1, 0.25, rng)
            h, c = rnd((1, n_out), -0.5, 0.5, 0.125, rng), rnd((1, units), -1, 1, 0.25, rng)
            clip = (0.75, 0.5) if cfg.get("proj") else (0.0, 0.0)
            h2, c2 = lstm_step(p, x, h, c, *clip)
            gates = 3 if cfg.get("cifg") else 4
            ins = [I(t, x)] + lstm_weight_specs(t, p) + [I(t, h), I(t, c), i32(4), fsc(t, clip[0]), fsc(t, clip[1])]
            outs = [O(t, np.zeros((1, units * gates)), ignored=True), O(t, h2), O(t, c2), O(t, h2)]
            model(f"lstm_{tname(code, rel)}_{cname}", "LSTM", ins, outs, relaxed=rel, types=[code])
    # LSTM with layer normalization (feature level 3)
    p = lstm_params(rng, 2, 2, 2, layer_norm=True)
    x, h, c = rnd((1, 2), -1, 1, 0.25, rng), rnd((1, 2), -0.5, 0.5, 0.125, rng), rnd((1, 2), -1, 1, 0.25, rng)
    h2, c2 = lstm_step(p, x, h, c)
    t = T(F32)
    model("lstm_float32_layer_norm", "LSTM",
          [I(t, x)] + lstm_weight_specs(t, p) + [I(t, h), I(t, c), i32(4), fsc(t, 0.0), fsc(t, 0.0)] +
          lstm_ln_specs(t, p), [O(t, np.zeros((1, 8)), ignored=True), O(t, h2), O(t, c2), O(t, h2)], level=29)

    def run(p, xs, h, c, reverse=False):
        outs = [None] * len(xs)
        for k in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
            h, c = lstm_step(p, xs[k], h, c)
            outs[k] = h
        return np.stack(outs), h, c
    # UNIDIRECTIONAL_SEQUENCE_LSTM: time-major [time, batch, input]
    for code, rel in variants("UNIDIRECTIONAL_SEQUENCE_LSTM"):
        t = T(code)
        p = lstm_params(rng, 2, 2, 2)
        xs = rnd((3, 1, 2), -1, 1, 0.25, rng)
        h, c = rnd((1, 2), -0.5, 0.5, 0.125, rng), rnd((1, 2), -1, 1, 0.25, rng)
        ys, hn, cn = run(p, xs, h, c)
        common = lstm_weight_specs(t, p) + [I(t, h), I(t, c), i32(4), fsc(t, 0.0), fsc(t, 0.0)]
        model(f"unidirectional_sequence_lstm_{tname(code, rel)}", "UNIDIRECTIONAL_SEQUENCE_LSTM",
              [I(t, xs)] + common + [bsc(True)] + lstm_ln_specs(t, p), [O(t, ys)], relaxed=rel, types=[code])
        if code == F32 and not rel:
            model("unidirectional_sequence_lstm_float32_batch_major", "UNIDIRECTIONAL_SEQUENCE_LSTM",
                  [I(t, xs.transpose(1, 0, 2))] + common + [bsc(False)] + lstm_ln_specs(t, p),
                  [O(t, ys.transpose(1, 0, 2))])
            model("unidirectional_sequence_lstm_float32_state_outputs", "UNIDIRECTIONAL_SEQUENCE_LSTM",
                  [I(t, xs)] + common + [bsc(True)] + lstm_ln_specs(t, p), [O(t, ys), O(t, hn), O(t, cn)], level=30)
    # BIDIRECTIONAL_SEQUENCE_LSTM
    for code, rel in variants("BIDIRECTIONAL_SEQUENCE_LSTM"):
        t = T(code)
        pf, pb = lstm_params(rng, 2, 2, 2), lstm_params(rng, 2, 2, 2)
        xs = rnd((2, 1, 2), -1, 1, 0.25, rng)
        hf, cf = rnd((1, 2), -0.5, 0.5, 0.125, rng), rnd((1, 2), -1, 1, 0.25, rng)
        hb, cb = rnd((1, 2), -0.5, 0.5, 0.125, rng), rnd((1, 2), -1, 1, 0.25, rng)
        yf = run(pf, xs, hf, cf)[0]
        yb = run(pb, xs, hb, cb, reverse=True)[0]
        ins = [I(t, xs)] + lstm_weight_specs(t, pf) + lstm_weight_specs(t, pb) + \
            [I(t, hf), I(t, cf), I(t, hb), I(t, cb)] + [NONE(code)] * 9 + \
            [i32(4), fsc(t, 0.0), fsc(t, 0.0)]
        tail = [bsc(True)] + [NONE(code)] * 8
        model(f"bidirectional_sequence_lstm_{tname(code, rel)}", "BIDIRECTIONAL_SEQUENCE_LSTM",
              ins + [bsc(False)] + tail, [O(t, yf), O(t, yb)], relaxed=rel, types=[code])
        if code == F32 and not rel:
            model("bidirectional_sequence_lstm_float32_merged", "BIDIRECTIONAL_SEQUENCE_LSTM",
                  ins + [bsc(True)] + tail, [O(t, np.concatenate([yf, yb], -1))])


# == quantized LSTMs ==============================================================================

def gen_quantized_lstm():
    family("quantized_lstm")
    # QUANTIZED_16BIT_LSTM: input/output QUANT8_ASYMM (1/128, 128), weights QUANT8_ASYMM (one scale),
    # biases INT32 (scale = weight scale / 128), cell state QUANT16_SYMM (1/2048). Real-valued LSTM:
    # i, f, o = sigmoid(W x + R h + b), g = tanh(...), c' = f c + i g, h' = o tanh(c').
    # The reference computes in fixed point with several roundings; pick a seed whose products and
    # outputs lie within 0.3 of an integer (at least 0.2 units from a rounding boundary).
    # Android's CPU implementation (and the AOSP test goldens) multiplies [input, previous output]
    # by [recurrent-to-gate | input-to-gate] columns, i.e. pairs the input with the recurrent
    # weights, unlike the documented formula. With input size == output size and identical input
    # and recurrent weights both readings give the same result, so this case is unambiguous.
    tx, tw, tc = T(QA, 1 / 128, 128), T(QA, 1 / 64, 128), T(Q16S, 1 / 2048, 0)
    tb = T(I32, 1 / 64 / 128)

    def margin(v):
        f = np.abs(v - np.round(v))
        return f.max()

    def clear_step(x, h, c, W, R, B=None):
        """One real-valued LSTM step (c', h'), or None when a pre-activation saturates or a
        product or output lies within 0.2 units of a rounding boundary."""
        pre = {g: x @ W[g].T + h @ R[g].T + (0 if B is None else B[g]) for g in "ifco"}
        if max(np.abs(v).max() for v in pre.values()) > 7.5:
            return None
        i, f, o, g = sigmoid(pre["i"]), sigmoid(pre["f"]), sigmoid(pre["o"]), np.tanh(pre["c"])
        c2 = f * c + i * g
        h2 = o * np.tanh(c2)
        if margin(f * c * 2048) < 0.3 and margin(i * g * 2048) < 0.3 and margin(c2 * 2048) < 0.3 \
                and margin(h2 * 128) < 0.3:
            return c2, h2
        return None

    for seed in range(5000):
        rng = np.random.default_rng(1000 + seed)
        x = tx.rt(rng.integers(-100, 100, (1, 2)) / 128)
        h = tx.rt(rng.integers(-100, 100, (1, 2)) / 128)
        c = tc.rt(rng.integers(-3000, 3000, (1, 2)) / 2048)
        W = {g: tw.rt(rng.integers(-64, 64, (2, 2)) / 64) for g in "ifco"}
        R = W  # see below
        B = {g: tb.rt(rng.integers(-4000, 4000, 2) * tb.scale) for g in "ifco"}
        step = clear_step(x, h, c, W, R, B)
        if step is not None:
            c2, h2 = step
            break
    else:
        raise RuntimeError("no QUANTIZED_16BIT_LSTM case with enough margin")
    ins = [I(tx, x)] + [C(tw, W[k]) for k in "ifco"] + [C(tw, R[k]) for k in "ifco"] + \
        [C(tb, B[k]) for k in "ifco"] + [I(tc, c), I(tx, h)]
    model("quantized_16bit_lstm_quant8_asymm", "QUANTIZED_16BIT_LSTM", ins, [O(tc, c2), O(tx, h2)], level=29)

    # QUANTIZED_LSTM (feature level 4), the plain configuration: no CIFG, peephole, projection or
    # layer normalization; zero biases and hidden zero point 0; gate intermediate scales 2^-12,
    # cell state QUANT16_SYMM 2^-11, input / output state / output QUANT8_ASYMM_SIGNED 1/128.
    # Real-valued: i, f, o = sigmoid(W x + R h), g = tanh(W x + R h), c' = f c + i g,
    # h' = o tanh(c'); the output is h' (no projection).
    tx, tw, tc = T(QS, 1 / 128, 0), T(Q8S, 1 / 64, 0), T(Q16S, 1 / 2048, 0)
    for seed in range(5000):
        rng = np.random.default_rng(3000 + seed)
        x = tx.rt(rng.integers(-100, 100, (1, 3)) / 128)
        h = tx.rt(rng.integers(-100, 100, (1, 2)) / 128)
        c = tc.rt(rng.integers(-3000, 3000, (1, 2)) / 2048)
        W = {g: tw.rt(rng.integers(-64, 64, (2, 3)) / 64) for g in "ifco"}
        R = {g: tw.rt(rng.integers(-64, 64, (2, 2)) / 64) for g in "ifco"}
        step = clear_step(x, h, c, W, R)
        if step is not None:
            c2, h2 = step
            break
    else:
        raise RuntimeError("no QUANTIZED_LSTM case with enough margin")
    zb = C(T(I32), np.zeros(2, np.int64))
    ins = [I(tx, x)] + [C(tw, W[k]) for k in "ifco"] + [C(tw, R[k]) for k in "ifco"] + \
        [NONE(Q16S)] * 3 + [zb] * 4 + [NONE(Q8S), NONE(I32), I(tx, h), I(tc, c)] + [NONE(Q16S)] * 4 + \
        [fsc(F32, 0.0), fsc(F32, 0.0)] + [fsc(F32, 2.0 ** -12)] * 4 + [i32(0), fsc(F32, 1 / 128)]
    model("quantized_lstm_quant8_asymm_signed", "QUANTIZED_LSTM", ins, [O(tx, h2), O(tc, c2), O(tx, h2)], level=30)
