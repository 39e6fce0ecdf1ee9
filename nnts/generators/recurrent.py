"""Family declarations (:mod:`nnts.generators.families`) for the recurrent operations whose many inputs are
tied to a few sizes: LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM, BIDIRECTIONAL_SEQUENCE_LSTM,
BIDIRECTIONAL_SEQUENCE_RNN, and the integer QUANTIZED_16BIT_LSTM (NNAPI's fixed quantizations)
and QUANTIZED_LSTM. One draw picks the sizes (units, output size, input size, batch,
time steps), then each optional part of a cell present or omitted: the input gate (CIFG when
omitted), peephole weights, the projection and its bias, layer normalization, the auxiliary
input (none, parallel or cross-linked). Weights are scaled by their fan-in so states stay in
range. LSTM's scratch buffer is an output NNAPI leaves to the driver: it is not compared.

Declared ``single_only``: the single-operation tests draw them by name; the random-graph generator
(every existing seed) does not.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.lstm import CELL, GATE_ACTIVATIONS
from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.generators.families import BOOL, INT32, declare, fuse, start_of_rank
from nnts.generators.graphs import F16, Builder, Out, Tensor, like


def _weights(b: Builder, x: Tensor, shape: tuple, fan_in: int) -> int:
    bound = 1 / np.sqrt(max(1, fan_in))
    return b.fresh(x.type, shape, low=-bound, high=bound).index


def _lstm_cell(b: Builder, x: Tensor, n_input: int, units: int, n_output: int, parts: dict,
               aux_size: int | None = None) -> tuple[list[int], list[int], list[int]]:
    """One LSTM cell's operands in NNAPI order (inputs 1-17 of LSTM), its four layer-norm
    weights (omitted without layer normalization) and, given ``aux_size``, its four auxiliary
    input weights (omitted otherwise)."""
    cifg, peephole, projection = parts["cifg"], parts["peephole"], parts["projection"]
    made = {}
    for g in "ifco":
        made["i2" + g] = None if g == "i" and cifg else _weights(b, x, (units, n_input), n_input)
        made["r2" + g] = None if g == "i" and cifg else _weights(b, x, (units, n_output), n_output)
        made["b" + g] = None if g == "i" and cifg else b.fresh(x.type, (units,), low=-0.5, high=0.5).index
    for g in "ifo":
        made["c2" + g] = (b.fresh(x.type, (units,), low=-0.5, high=0.5).index
                          if peephole and not (g == "i" and cifg) else None)
    made["proj"] = _weights(b, x, (n_output, units), units) if projection else None
    made["proj_b"] = b.fresh(x.type, (n_output,), low=-0.5, high=0.5).index if parts["projection_bias"] else None
    cell = [b.omitted(x.type) if made[name] is None else made[name] for name in CELL]
    layer_norm = [b.fresh(x.type, (units,), low=0.5, high=1.5).index if parts["layer_norm"] and not (g == "i" and cifg)
                  else b.omitted(x.type) for g in "ifco"]
    aux = [_weights(b, x, (units, aux_size), aux_size) if aux_size is not None and not (g == "i" and cifg)
           else b.omitted(x.type) for g in "ifco"]
    return cell, layer_norm, aux


def _parts(b: Builder, layer_norm: bool) -> dict:
    projection = b.chance(0.4)
    return {"cifg": b.chance(0.3), "peephole": b.chance(0.5), "projection": projection,
            "projection_bias": projection and b.chance(0.5), "layer_norm": layer_norm and b.chance(0.5)}


def _sizes(b: Builder, parts: dict) -> tuple[int, int]:
    units = b.dim()
    return units, (b.dim() if parts["projection"] else units)


def _states(b: Builder, x: Tensor, batch: int, units: int, n_output: int) -> list[int]:
    """Output state and cell state in."""
    return [b.fresh(x.type, (batch, n_output), low=-1, high=1).index,
            b.fresh(x.type, (batch, units), low=-1, high=1).index]


def _params(b: Builder, x: Tensor) -> list[int]:
    """Activation, cell clip and projection clip (0: no clipping)."""
    scalar = T.FLOAT16 if x.type == F16 else T.FLOAT32
    clips = [0.0 if b.chance(0.5) else float(b.rng.uniform(0.5, 3.0)) for _ in range(2)]
    return [b.scalar(INT32, b.pick(list(GATE_ACTIVATIONS)))] + [b.scalar(scalar, c) for c in clips]


@declare([Op.LSTM], ranks=(2,), single_only=True, start=start_of_rank(2))
def lstm(b: Builder, x: Tensor, code: Op) -> None:
    """One time step; from feature level 29 sometimes with the four layer-norm inputs (present
    or omitted). The scratch buffer (gate values) is the driver's own: not compared."""
    batch, n_input = x.shape
    tail = b.level >= 29 and b.chance(0.6)  # the four layer-norm inputs (23 or 27 inputs: NNAPI)
    parts = _parts(b, tail)
    units, n_output = _sizes(b, parts)
    cell, layer_norm, _ = _lstm_cell(b, x, n_input, units, n_output, parts)
    ins = [x] + cell + _states(b, x, batch, units, n_output) + _params(b, x) + (layer_norm if tail else [])
    scratch, *_ = b.add(code, ins, [like(x)] * 4)
    b.ignored.add(scratch.index)


@declare([Op.UNIDIRECTIONAL_SEQUENCE_LSTM], ranks=(3,), single_only=True, start=start_of_rank(3))
def unidirectional_sequence_lstm(b: Builder, x: Tensor, code: Op) -> None:
    time_major = b.chance(0.5)
    batch = x.shape[1] if time_major else x.shape[0]
    parts = _parts(b, True)
    units, n_output = _sizes(b, parts)
    cell, layer_norm, _ = _lstm_cell(b, x, x.shape[2], units, n_output, parts)
    ins = ([x] + cell + _states(b, x, batch, units, n_output) + _params(b, x) + [b.scalar(BOOL, time_major)]
           + layer_norm)
    b.add(code, ins, [like(x)] * (3 if b.level >= 30 and b.chance(0.5) else 1))


def _aux_input(b: Builder, x: Tensor, time_major: bool) -> tuple[str, Tensor | None]:
    """The auxiliary input's linking (none, parallel: the backward cell reads it, cross: both
    cells read it through weights of their own) and the input, of x's time and batch sizes."""
    mode = b.pick(["none", "parallel", "cross"])
    if mode == "none":
        return mode, None
    return mode, b.fresh(x.type, x.shape[:2] + (b.dim(),), low=-1, high=1)


@declare([Op.BIDIRECTIONAL_SEQUENCE_LSTM], ranks=(3,), single_only=True, start=start_of_rank(3))
def bidirectional_sequence_lstm(b: Builder, x: Tensor, code: Op) -> None:
    time_major, merge = b.chance(0.5), b.chance(0.5)
    batch = x.shape[1] if time_major else x.shape[0]
    mode, aux = _aux_input(b, x, time_major)
    aux_size = aux.shape[2] if mode == "cross" else None
    cells, states, norms, aux_weights = [], [], [], []
    for backward in (False, True):
        parts = _parts(b, True)
        units, n_output = _sizes(b, parts)
        n_input = aux.shape[2] if backward and mode == "parallel" else x.shape[2]
        cell, layer_norm, aux_w = _lstm_cell(b, x, n_input, units, n_output, parts, aux_size)
        cells += cell
        states += _states(b, x, batch, units, n_output)
        norms += layer_norm
        aux_weights += aux_w
    ins = ([x] + cells + states + [aux.index if aux is not None else b.omitted(x.type)] + aux_weights
           + _params(b, x) + [b.scalar(BOOL, merge), b.scalar(BOOL, time_major)] + norms)
    count = (1 if merge else 2) + (4 if b.level >= 30 and b.chance(0.5) else 0)
    b.add(code, ins, [like(x)] * count)


@declare([Op.BIDIRECTIONAL_SEQUENCE_RNN], ranks=(3,), single_only=True, start=start_of_rank(3))
def bidirectional_sequence_rnn(b: Builder, x: Tensor, code: Op) -> None:
    time_major, merge = b.chance(0.5), b.chance(0.5)
    batch = x.shape[1] if time_major else x.shape[0]
    mode, aux = _aux_input(b, x, time_major)
    ins, units = [x], []
    for backward in (False, True):
        n_input = aux.shape[2] if backward and mode == "parallel" else x.shape[2]
        units.append(b.dim())
        ins += [_weights(b, x, (units[-1], n_input), n_input), _weights(b, x, (units[-1], units[-1]), units[-1]),
                b.fresh(x.type, (units[-1],), low=-0.5, high=0.5).index,
                b.fresh(x.type, (batch, units[-1]), low=-1, high=1).index]
    ins.append(aux.index if aux is not None else b.omitted(x.type))
    ins += [_weights(b, x, (u, aux.shape[2]), aux.shape[2]) if mode == "cross" else b.omitted(x.type) for u in units]
    ins += [fuse(b, x), b.scalar(BOOL, time_major), b.scalar(BOOL, merge)]
    count = (1 if merge else 2) + (2 if b.level >= 30 and b.chance(0.5) else 0)
    b.add(code, ins, [like(x)] * count)


# -- quantized ------------------------------------------------------------------------------------

Q16 = T.TENSOR_QUANT16_SYMM
LSTM_IO_QUANT = (1.0 / 128, 128)     # QUANTIZED_16BIT_LSTM's input and output: fixed by NNAPI
LSTM_CELL_QUANT = (2.0 ** -11, 0)    # and its cell state (4 integer bits)


def _lstm_io(b: Builder, code: Op) -> Tensor:
    """The input [batch, input] of QUANTIZED_16BIT_LSTM, in its fixed quantization."""
    return b.fresh(T.TENSOR_QUANT8_ASYMM, b.start_shape(2), quant=LSTM_IO_QUANT, low=-1.0, high=0.99)


@declare([Op.QUANTIZED_16BIT_LSTM], ranks=(2,), single_only=True, start=_lstm_io,
         domain=lambda x: (x.scale, x.zero_point) == LSTM_IO_QUANT)
def quantized_16bit_lstm(b: Builder, x: Tensor, code: Op) -> None:
    """Weights of one random scale and zero point; biases at the weights' scale / 128; the cell
    state and previous output in NNAPI's fixed quantizations (the reference is bit-exact)."""
    batch, n_input = x.shape
    n_output = b.dim()
    w_scale = float(np.float32(2.0 ** b.rng.uniform(-9, -5)))
    w_zero = int(b.rng.integers(100, 157))
    weights = [b.holding(T.TENSOR_QUANT8_ASYMM, b.rng.integers(0, 256, (n_output, size)).astype(np.uint8),
                         w_scale, w_zero) for size in [n_input] * 4 + [n_output] * 4]
    bias_scale = float(np.float32(np.float32(w_scale) / 128.0))
    reach = max(1, int(0.5 / bias_scale))
    biases = [b.holding(T.TENSOR_INT32, b.rng.integers(-reach, reach + 1, n_output).astype(np.int32), bias_scale, 0)
              for _ in range(4)]
    cell = b.holding(Q16, b.rng.integers(-(1 << 14), 1 << 14, (batch, n_output)).astype(np.int16), *LSTM_CELL_QUANT)
    previous = b.holding(T.TENSOR_QUANT8_ASYMM, b.rng.integers(0, 256, (batch, n_output)).astype(np.uint8),
                         *LSTM_IO_QUANT)
    b.add(code, [x] + weights + biases + [cell, previous],
          [Out(Q16, *LSTM_CELL_QUANT), Out(T.TENSOR_QUANT8_ASYMM, *LSTM_IO_QUANT)])


Q8_SYMM = T.TENSOR_QUANT8_SYMM
GATE_SCALE = 2.0 ** -12  # the gates' intermediate int16 scale: Q3.12, the range the fixed-point logistic takes


@declare([Op.QUANTIZED_LSTM], ranks=(2,), single_only=True, start=start_of_rank(2))
def quantized_lstm(b: Builder, x: Tensor, code: Op) -> None:
    """One step of the integer LSTM: int8 symmetric weights scaled by their fan-in, int16
    peephole and layer-norm weights, a cell state scale of 2**-9 to 2**-12, each optional part
    (CIFG, peephole, projection and its bias, layer normalization) present or omitted; output
    state and cell state in the quantization of the states given."""
    batch, n_input = x.shape
    parts = _parts(b, True)
    units, n_output = _sizes(b, parts)
    cifg = parts["cifg"]

    def symmetric(type_, shape, scale, reach):
        dtype = np.int8 if type_ == Q8_SYMM else np.int16 if type_ == Q16 else np.int32
        return b.holding(type_, b.rng.integers(-reach, reach + 1, shape).astype(dtype), scale, 0)

    def weights(rows, fan_in):
        return symmetric(Q8_SYMM, (rows, fan_in), float(np.float32(1 / (127 * np.sqrt(fan_in)))), 127)

    gates = "ifco"
    ins = [x]
    ins += [b.omitted(Q8_SYMM) if g == "i" and cifg else weights(units, n_input) for g in gates]
    ins += [b.omitted(Q8_SYMM) if g == "i" and cifg else weights(units, n_output) for g in gates]
    ins += [symmetric(Q16, (units,), 2.0 ** -10, 512) if parts["peephole"] and not (g == "i" and cifg)
            else b.omitted(Q16) for g in "ifo"]
    ins += [b.omitted(T.TENSOR_INT32) if g == "i" and cifg else symmetric(T.TENSOR_INT32, (units,), 2.0 ** -20, 1 << 9)
            for g in gates]
    ins.append(weights(n_output, units) if parts["projection"] else b.omitted(Q8_SYMM))
    ins.append(symmetric(T.TENSOR_INT32, (n_output,), 2.0 ** -20, 1 << 9) if parts["projection_bias"]
               else b.omitted(T.TENSOR_INT32))
    out_quant = (float(np.float32(2.0 ** b.rng.uniform(-8, -6))), int(b.rng.integers(-20, 21)))
    cell_quant = (2.0 ** -int(b.rng.integers(9, 13)), 0)
    ins.append(b.holding(T.TENSOR_QUANT8_ASYMM_SIGNED, b.rng.integers(-128, 128, (batch, n_output)).astype(np.int8),
                         *out_quant))
    ins.append(symmetric(Q16, (batch, units), cell_quant[0], 1 << 13))
    ins += [symmetric(Q16, (units,), 2.0 ** -10, 1536) if parts["layer_norm"] and not (g == "i" and cifg)
            else b.omitted(Q16) for g in gates]
    clips = [0.0 if b.chance(0.5) else float(b.rng.uniform(0.5, 3.0)) for _ in range(2)]
    ins += [b.scalar(T.FLOAT32, c) for c in clips] + [b.scalar(T.FLOAT32, GATE_SCALE) for _ in gates]
    ins += [b.scalar(INT32, 0), b.scalar(T.FLOAT32, 2.0 ** -7)]  # hidden state: zero point, scale
    state = Out(T.TENSOR_QUANT8_ASYMM_SIGNED, *out_quant)
    b.add(code, ins, [state, Out(Q16, *cell_quant), state])
