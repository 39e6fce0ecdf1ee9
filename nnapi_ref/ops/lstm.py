"""Float LSTM layers: LSTM (one time step), UNIDIRECTIONAL_SEQUENCE_LSTM and
BIDIRECTIONAL_SEQUENCE_LSTM.

One cell step, as NNAPI's CPU implementation computes it (gate pre-activations are the input and
recurrent matmuls, plus the auxiliary-input matmul for the bidirectional op):

* input gate ``i = sigmoid(z_i + w_ci * c_{t-1})``, or ``1 - f`` with CIFG (no input-gate weights);
* forget gate ``f = sigmoid(z_f + w_cf * c_{t-1})``;
* cell ``c_t = clip(f * c_{t-1} + i * g(z_c), cell_clip)``;
* output gate ``o = sigmoid(z_o + w_co * c_t)``;
* ``h_t = clip(W_proj (o * g(c_t)) + b_proj, proj_clip)`` with a projection, else ``o * g(c_t)``.

Without layer normalization each ``z`` includes its gate bias. With it (feature level 3), ``z``
(peephole term included) is normalized over the units, scaled by the layer-norm weights, and then
the bias is added. A clip threshold of 0 disables clipping. float16 operands are computed in wider
precision and rounded once at the end.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import Arg, Call, OperationCode, OperationRegistration, Signature, T, check, register
from nnapi_ref.ops.rnn import check_aux_input, check_rank, check_shape, fvalue, present, to_output

F32, F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
SCALAR = {F32: T.FLOAT32, F16: T.FLOAT16}
LAYER_NORM_EPSILON = 1e-8

# Names of one cell's operands, in NNAPI order (LSTM inputs 1..17).
CELL = ["i2i", "i2f", "i2c", "i2o", "r2i", "r2f", "r2c", "r2o", "c2i", "c2f", "c2o",
        "bi", "bf", "bc", "bo", "proj", "proj_b"]
LAYER_NORM = ["ln_i", "ln_f", "ln_c", "ln_o"]
AUX = ["aux_i", "aux_f", "aux_c", "aux_o"]
# The cell operands NeuralNetworks.h calls optional: input gate (CIFG), peephole, projection.
OPTIONAL_CELL = ["i2i", "r2i", "c2i", "c2f", "c2o", "bi", "proj", "proj_b"]


def optional_cell_inputs(first: int) -> list[int]:
    """Input positions of one cell's optional operands, its operands starting at ``first``."""
    return [first + CELL.index(name) for name in OPTIONAL_CELL]

GATE_ACTIVATIONS = (0, 1, 2, 3, 4, 6)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def cell_activation(x: np.ndarray, code: int) -> np.ndarray:
    """TFLite's fused activation as the LSTM uses it: 0 none, 1 relu, 2 relu1, 3 relu6, 4 tanh,
    6 sigmoid."""
    if code == 0:
        return x
    if code == 1:
        return np.maximum(x, 0.0)
    if code == 2:
        return np.clip(x, -1.0, 1.0)
    if code == 3:
        return np.clip(x, 0.0, 6.0)
    if code == 4:
        return np.tanh(x)
    return sigmoid(x)


def clip(x: np.ndarray, bound: float) -> np.ndarray:
    """x clipped to [-bound, bound] (np.clip costs ~10 us of checks per call on small arrays)."""
    return np.maximum(np.minimum(x, bound), -bound)


def layer_norm(x: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    variance = (x * x).mean(axis=-1, keepdims=True) - mean * mean
    return (x - mean) / np.sqrt(variance + LAYER_NORM_EPSILON)


def lstm_sequence(x: np.ndarray, p: dict, h0: np.ndarray, c0: np.ndarray, activation: int,
                  cell_clip: float, proj_clip: float, aux: np.ndarray | None = None,
                  reverse: bool = False):
    """Run an LSTM cell over a time-major sequence ``x`` [time, batch, input].

    ``p`` maps the names in CELL, LAYER_NORM and AUX to float64 arrays or None.
    Returns (outputs [time, batch, output_size], h_T, c_T, gate values of the last step)."""
    cifg = p["i2i"] is None
    peephole = p["c2o"] is not None
    use_ln = p["ln_o"] is not None
    gates = "fco" if cifg else "ifco"
    xw = []
    for g in gates:
        z = x @ p["i2" + g].T
        if aux is not None and p.get("aux_" + g) is not None:
            z = z + aux @ p["aux_" + g].T
        if not use_ln:
            z = z + p["b" + g]
        xw.append(z)
    # All gates side by side (time, batch, gates * units): one recurrent product per time step.
    xw = np.concatenate(xw, axis=-1)
    recurrent = np.concatenate([p["r2" + g] for g in gates]).T.copy()
    units = p["r2o"].shape[0]
    z_all = np.empty(xw.shape[1:])
    gate_views = {g: z_all[:, k * units:(k + 1) * units] for k, g in enumerate(gates)}

    def finish(z, g):
        if use_ln:
            z = layer_norm(z) * p["ln_" + g] + p["b" + g]
        return z

    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    out_size = p["r2o"].shape[1]
    outputs = np.empty((x.shape[0], x.shape[1], out_size), np.float64)
    h, c = h0, c0
    scratch = {}
    for t in steps:
        np.matmul(h, recurrent, out=z_all)
        z_all += xw[t]
        z = dict(gate_views)
        if not cifg:
            if peephole and p["c2i"] is not None:
                z["i"] = z["i"] + p["c2i"] * c
            scratch["i"] = sigmoid(finish(z["i"], "i"))
        if peephole:
            z["f"] = z["f"] + p["c2f"] * c
        forget = sigmoid(finish(z["f"], "f"))
        modulation = cell_activation(finish(z["c"], "c"), activation)
        c_new = forget * c + ((1.0 - forget) if cifg else scratch["i"]) * modulation
        if cell_clip > 0:
            c_new = clip(c_new, cell_clip)
        if peephole:
            z["o"] = z["o"] + p["c2o"] * c_new
        out_gate = sigmoid(finish(z["o"], "o"))
        out = out_gate * cell_activation(c_new, activation)
        scratch.update(c=modulation, f=forget, o=out)
        if p["proj"] is not None:
            out = out @ p["proj"].T
            if p["proj_b"] is not None:
                out = out + p["proj_b"]
            if proj_clip > 0:
                out = clip(out, proj_clip)
        outputs[t] = out
        h, c = out, c_new
    return outputs, h, c, scratch


def check_lstm_cell(a: dict, n_input: int, batch: int, h_in: Arg, c_in: Arg, prefix: str = "",
                    aux_input_size: int | None = None) -> tuple[int, int]:
    """Validate one cell's operands (``a`` maps names to Args); return (num_units, output_size)."""
    for name in ("i2f", "i2c", "i2o", "r2f", "r2c", "r2o", "bf", "bc", "bo"):
        check(present(a[name]), f"{prefix}required operand {name} is omitted")
    check_rank(a["i2o"], 2, f"{prefix}input-to-output weights")
    n_cell = a["i2o"].shape[0]
    check_rank(a["r2o"], 2, f"{prefix}recurrent-to-output weights")
    n_output = a["r2o"].shape[1]
    for g in "ifco":
        if present(a["i2" + g]):
            check_shape(a["i2" + g], (n_cell, n_input), f"{prefix}input-to-{g} weights")
        if present(a["r2" + g]):
            check_shape(a["r2" + g], (n_cell, n_output), f"{prefix}recurrent-to-{g} weights")
        if present(a["b" + g]):
            check_shape(a["b" + g], (n_cell,), f"{prefix}{g} gate bias")
    cifg = not present(a["i2i"])
    check(present(a["r2i"]) != cifg,
          f"{prefix}input-to-input and recurrent-to-input weights must both be present or both omitted (CIFG)")
    check(present(a["bi"]) != cifg, f"{prefix}the input gate bias must be present exactly when CIFG is not used")
    for name in ("c2i", "c2f", "c2o"):
        if present(a[name]):
            check_shape(a[name], (n_cell,), f"{prefix}{name} peephole weights")
    peephole = present(a["c2o"])
    check(present(a["c2f"]) == peephole and (present(a["c2i"]) == peephole or (cifg and not present(a["c2i"]))),
          f"{prefix}peephole weights must be all present or all omitted (cell-to-input omitted with CIFG)")
    if present(a["proj"]):
        check_shape(a["proj"], (n_output, n_cell), f"{prefix}projection weights")
    else:
        check(n_output == n_cell, f"{prefix}without projection the output size {n_output} must equal "
                                  f"the number of units {n_cell}")
    if present(a["proj_b"]):
        check(present(a["proj"]), f"{prefix}projection bias given without projection weights")
        check_shape(a["proj_b"], (n_output,), f"{prefix}projection bias")
    ln = [present(a.get(name)) if a.get(name) is not None else False for name in LAYER_NORM]
    if any(ln):
        check(all(ln[1:]) and ln[0] != cifg,
              f"{prefix}layer normalization weights must be all present or all omitted "
              f"(input layer norm weights omitted with CIFG)")
        for name in LAYER_NORM:
            if present(a[name]):
                check_shape(a[name], (n_cell,), f"{prefix}{name} weights")
    if aux_input_size is not None:
        for g in "ifco":
            name = "aux_" + g
            if present(a[name]):
                check_shape(a[name], (n_cell, aux_input_size), f"{prefix}auxiliary input-to-{g} weights")
    check_shape(h_in, (batch, n_output), f"{prefix}output state (in)")
    check_shape(c_in, (batch, n_cell), f"{prefix}cell state (in)")
    return n_cell, n_output


def check_params(activation: Arg, cell_clip: Arg, proj_clip: Arg) -> None:
    code = activation.scalar()
    check(code in GATE_ACTIVATIONS, f"activation function code {code} is not one of 0, 1, 2, 3, 4, 6")
    check(cell_clip.scalar() >= 0, f"cell clip {cell_clip.scalar()} must not be negative")
    check(proj_clip.scalar() >= 0, f"projection clip {proj_clip.scalar()} must not be negative")


def cell_args(ins, first: int, ln_first: int | None = None, aux_first: int | None = None) -> dict:
    a = {name: ins[first + k] for k, name in enumerate(CELL)}
    for k, name in enumerate(LAYER_NORM):
        a[name] = ins[ln_first + k] if ln_first is not None and ln_first + k < len(ins) else None
    for k, name in enumerate(AUX):
        a[name] = ins[aux_first + k] if aux_first is not None else None
    return a


def cell_values(a: dict) -> dict:
    return {name: (fvalue(arg) if arg is not None else None) for name, arg in a.items()}


# ----------------------------------------------------------------------------- LSTM

@register
class Lstm(OperationRegistration):
    code = OperationCode.LSTM
    zero_sized_inputs = None
    parameters = {20: "activation", 21: "cell clip", 22: "projection clip"}
    accuracy = "relaxed"
    signatures = [
        Signature(27, [F32] * 20 + [T.INT32, T.FLOAT32, T.FLOAT32], [F32] * 4, omittable=optional_cell_inputs(1)),
        Signature(29, [F32] * 20 + [T.INT32, T.FLOAT32, T.FLOAT32] + [F32] * 4, [F32] * 4, optional=(0, 4),
                  omittable=optional_cell_inputs(1) + [23, 24, 25, 26]),
        Signature(29, [F16] * 20 + [T.INT32, T.FLOAT16, T.FLOAT16] + [F16] * 4, [F16] * 4, optional=(0, 4),
                  omittable=optional_cell_inputs(1) + [23, 24, 25, 26]),
    ]

    def infer(self, call: Call):
        ins = call.ins
        check(len(ins) in (23, 27), f"LSTM takes 23 or 27 inputs, got {len(ins)}")
        x = ins[0]
        check_rank(x, 2, "input")
        batch, n_input = x.shape
        a = cell_args(ins, 1, 23)
        n_cell, n_output = check_lstm_cell(a, n_input, batch, ins[18], ins[19])
        check_params(ins[20], ins[21], ins[22])
        cifg = not present(ins[1])
        return [(batch, n_cell * (3 if cifg else 4)), (batch, n_output), (batch, n_cell), (batch, n_output)]

    def execute(self, call: Call):
        ins = call.ins
        p = cell_values(cell_args(ins, 1, 23))
        out, h, c, gates = lstm_sequence(fvalue(ins[0])[None], p, fvalue(ins[18]), fvalue(ins[19]),
                                         ins[20].scalar(), float(ins[21].scalar()), float(ins[22].scalar()))
        order = "cfo" if p["i2i"] is None else "icfo"
        scratch = np.concatenate([gates[g] for g in order], axis=1)
        outs = call.outs
        return [to_output(scratch, outs[0]), to_output(h, outs[1]), to_output(c, outs[2]),
                to_output(out[0], outs[3])]


# ----------------------------------------------------------------------------- UNIDIRECTIONAL_SEQUENCE_LSTM

@register
class UnidirectionalSequenceLstm(OperationRegistration):
    """Inputs 0-19 as LSTM's (the input [max_time, batch, input] or batch-major), 20 activation,
    21 cell clip, 22 projection clip, 23 time_major, 24-27 layer normalization weights.
    Outputs: the output sequence, then (feature level 4) the final output and cell states."""

    code = OperationCode.UNIDIRECTIONAL_SEQUENCE_LSTM
    parameters = {20: "activation", 21: "cell clip", 22: "projection clip", 23: "time major"}
    accuracy = "relaxed"
    signatures = [
        Signature(level, [t] * 20 + [T.INT32, SCALAR[t], SCALAR[t], T.BOOL] + [t] * 4, outs,
                  omittable=optional_cell_inputs(1) + [24, 25, 26, 27])
        for t in (F32, F16)
        for level, outs in ((29, [t]), (30, [t] * 3))
    ]

    def infer(self, call: Call):
        ins = call.ins
        x = ins[0]
        check_rank(x, 3, "input")
        tm = bool(ins[23].scalar())
        steps, batch = (x.shape[0], x.shape[1]) if tm else (x.shape[1], x.shape[0])
        a = cell_args(ins, 1, 24)
        n_cell, n_output = check_lstm_cell(a, x.shape[2], batch, ins[18], ins[19])
        check_params(ins[20], ins[21], ins[22])
        shapes = [(steps, batch, n_output) if tm else (batch, steps, n_output)]
        if len(call.outs) == 3:
            shapes += [(batch, n_output), (batch, n_cell)]
        return shapes

    def execute(self, call: Call):
        ins = call.ins
        tm = bool(ins[23].scalar())
        x = fvalue(ins[0])
        if not tm:
            x = x.transpose(1, 0, 2)
        p = cell_values(cell_args(ins, 1, 24))
        out, h, c, _ = lstm_sequence(x, p, fvalue(ins[18]), fvalue(ins[19]), ins[20].scalar(),
                                     float(ins[21].scalar()), float(ins[22].scalar()))
        if not tm:
            out = out.transpose(1, 0, 2)
        outs = call.outs
        results = [to_output(out, outs[0])]
        if len(outs) == 3:
            results += [to_output(h, outs[1]), to_output(c, outs[2])]
        return results


# ----------------------------------------------------------------------------- BIDIRECTIONAL_SEQUENCE_LSTM

def bidirectional_lstm_signatures() -> list[Signature]:
    # Optional: each cell's (as LSTM's), the aux input and weights (39-47), layer norms (53-60).
    omittable = optional_cell_inputs(1) + optional_cell_inputs(18) + list(range(39, 48)) + list(range(53, 61))
    sigs = []
    for t in (F32, F16):
        inputs = [t] * 48 + [T.INT32, SCALAR[t], SCALAR[t], T.BOOL, T.BOOL] + [t] * 8
        sigs += [Signature(level, inputs, outputs, omittable=omittable)
                 for level, outputs in ((29, [t]), (29, [t] * 2), (30, [t] * 5), (30, [t] * 6))]
    return sigs


@register
class BidirectionalSequenceLstm(OperationRegistration):
    """Inputs: 0 input; 1-17 forward cell (as LSTM's 1-17); 18-34 backward cell; 35-38 forward
    output/cell state, backward output/cell state; 39 aux input; 40-43 forward and 44-47 backward
    aux input-to-{input, forget, cell, output} weights; 48 activation; 49 cell clip; 50 projection
    clip; 51 merge_outputs; 52 time_major; 53-56 forward and 57-60 backward layer norm weights.
    Outputs: forward output, backward output (unless merged), then (feature level 4) forward
    output state, forward cell state, backward output state, backward cell state."""

    code = OperationCode.BIDIRECTIONAL_SEQUENCE_LSTM
    zero_sized_inputs = None
    parameters = {48: "activation", 49: "cell clip", 50: "projection clip", 51: "merge outputs", 52: "time major"}
    accuracy = "relaxed"
    signatures = bidirectional_lstm_signatures()

    @staticmethod
    def linking(ins) -> str:
        has_aux = present(ins[39])
        fw_w = any(present(a) for a in ins[40:44])
        bw_w = any(present(a) for a in ins[44:48])
        check(fw_w == bw_w, "forward and backward auxiliary weights must be both present or both omitted")
        if not has_aux:
            check(not fw_w, "auxiliary weights given without an auxiliary input")
            return "none"
        return "cross" if fw_w else "parallel"

    def infer(self, call: Call):
        ins = call.ins
        merge = bool(ins[51].scalar())
        n_out = len(call.outs)
        check(n_out in ((1, 5) if merge else (2, 6)),
              f"{n_out} outputs given, expected {'1 or 5' if merge else '2 or 6'} with merge_outputs={merge}")
        x = ins[0]
        check_rank(x, 3, "input")
        tm = bool(ins[52].scalar())
        steps, batch = (x.shape[0], x.shape[1]) if tm else (x.shape[1], x.shape[0])
        mode = self.linking(ins)
        aux_size = None
        bw_input_size = x.shape[2]
        if mode != "none":
            aux = ins[39]
            check_aux_input(aux, x)
            if mode == "cross":
                aux_size = aux.shape[2]
            else:
                bw_input_size = aux.shape[2]
        fw = cell_args(ins, 1, 53, 40)
        bw = cell_args(ins, 18, 57, 44)
        fw_cell, fw_output = check_lstm_cell(fw, x.shape[2], batch, ins[35], ins[36], "forward ", aux_size)
        bw_cell, bw_output = check_lstm_cell(bw, bw_input_size, batch, ins[37], ins[38], "backward ", aux_size)
        if mode == "cross":
            for prefix, a, cifg in (("forward ", fw, not present(fw["i2i"])), ("backward ", bw, not present(bw["i2i"]))):
                check(all(present(a[n]) for n in AUX[1:]) and present(a["aux_i"]) != cifg,
                      f"{prefix}auxiliary weights must all be present (aux input-to-input omitted with CIFG)")
        check_params(ins[48], ins[49], ins[50])

        def seq(units):
            return (steps, batch, units) if tm else (batch, steps, units)

        shapes = [seq(fw_output + bw_output)] if merge else [seq(fw_output), seq(bw_output)]
        if n_out > len(shapes):
            shapes += [(batch, fw_output), (batch, fw_cell), (batch, bw_output), (batch, bw_cell)]
        return shapes

    def execute(self, call: Call):
        ins = call.ins
        tm = bool(ins[52].scalar())
        merge = bool(ins[51].scalar())
        mode = self.linking(ins)
        activation, cell_clip, proj_clip = ins[48].scalar(), float(ins[49].scalar()), float(ins[50].scalar())

        def time_major(a):
            return a if tm else a.transpose(1, 0, 2)

        x = time_major(fvalue(ins[0]))
        aux = time_major(fvalue(ins[39])) if mode != "none" else None
        bw_x = aux if mode == "parallel" else x
        cross = aux if mode == "cross" else None
        fw_p = cell_values(cell_args(ins, 1, 53, 40))
        bw_p = cell_values(cell_args(ins, 18, 57, 44))
        fw_out, fw_h, fw_c, _ = lstm_sequence(x, fw_p, fvalue(ins[35]), fvalue(ins[36]), activation,
                                              cell_clip, proj_clip, cross)
        bw_out, bw_h, bw_c, _ = lstm_sequence(bw_x, bw_p, fvalue(ins[37]), fvalue(ins[38]), activation,
                                              cell_clip, proj_clip, cross, reverse=True)
        seqs = [np.concatenate([fw_out, bw_out], axis=2)] if merge else [fw_out, bw_out]
        outs = call.outs
        results = [to_output(time_major(s), o) for s, o in zip(seqs, outs)]
        if len(outs) > len(seqs):
            states = [fw_h, fw_c, bw_h, bw_c]
            results += [to_output(s, o) for s, o in zip(states, outs[len(seqs):])]
        return results
