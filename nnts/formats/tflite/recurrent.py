"""The converter's resource variables (streaming models) and recurrent operators (RNN, SVDF, the
LSTMs), each starting from zero states; see :mod:`.tflite` for the mapping."""
from __future__ import annotations

import numpy as np

from nnapi_ref import OperandType
from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.formats.tflite.flatbuffer import text_of


class RecurrentOperators:
    """Methods of the converter (:class:`nnts.formats.tflite.importer._Converter`), which mixes these classes in."""

    # NNAPI models are stateless: as with the LSTM states, every inference starts from the
    # variables' initial values (those CALL_ONCE's subgraph assigns: a fresh TFLite interpreter's
    # first invocation), and the new values the model assigns are not kept.

    def op_CALL_ONCE(self, op):
        index = self.opt("initSubgraphIndex")
        subgraphs = self.g.subgraphs
        if not 0 < index < len(subgraphs):
            self.fail(f"initializes with subgraph {index} of {len(subgraphs)}")
        init = subgraphs[index]
        handles = {}
        for o in init.operators:
            if o.name == "VAR_HANDLE" and o.options is not None:
                handles[o.outputs[0]] = (text_of(o.options.container), text_of(o.options.sharedName))
            elif o.name == "ASSIGN_VARIABLE" and o.inputs[0] in handles and init.tensors[o.inputs[1]].data is not None:
                self.variables[handles[o.inputs[0]]] = ("const", init.tensors[o.inputs[1]].data)
            else:
                self.fail(f"subgraph {index} operator {o.index} ({o.name}): only constant variable assignments "
                          "are imported from an initialization subgraph")
        self.note(f"{len(self.variables)} resource variables start from subgraph {index}'s values at every "
                  "inference; their new values are not kept (NNAPI models are stateless)")

    def op_VAR_HANDLE(self, op):
        self.handles[op.outputs[0]] = (text_of(self.opt("container", None)), text_of(self.opt("sharedName", None)))
        self.folded.add(op.outputs[0])

    def variable(self, k: int) -> tuple[str, str]:
        if k not in self.handles:
            self.fail(f"tensor {k} is not a VAR_HANDLE output")
        return self.handles[k]

    def op_READ_VARIABLE(self, op):
        key = self.variable(op.inputs[0])
        if key not in self.variables:
            self.fail(f"reads variable {key[1]!r} before any value is assigned")
        kind, value = self.variables[key]
        if kind == "const":
            self.fold(op.outputs[0], value)
        else:
            self.emit(Op.RESHAPE, [value, self.i32_tensor(list(self.t(op.outputs[0]).shape))],
                      [self.define(op.outputs[0])])

    def op_ASSIGN_VARIABLE(self, op):
        key = self.variable(op.inputs[0])
        k = op.inputs[1]
        self.variables[key] = ("const", self.t(k).data) if k not in self.operand_of and self.t(k).data is not None \
            else ("operand", self.tensor(k))

    # -- recurrent operators ----------------------------------------------------------------------
    # TFLite's state inputs are variable tensors, zero after reset_all_variables(); NNAPI has none,
    # so each inference starts from zero states (constants). Weights of hybrid operators (int8,
    # float16) are dequantized: NNAPI has no hybrid recurrent operations.

    def float_weight(self, k: int, what: str = "weight") -> int:
        """Constant tensor ``k`` as a TENSOR_FLOAT32 operand (dequantized when int8/uint8/float16);
        an omitted one (-1) as NNAPI's omitted operand."""
        if k < 0:
            return self.omitted()
        t = self.t(k)
        data = self.value_of(k, f"{what} tensor {k}")
        if t.type_name == "FLOAT32":
            return self.const(OperandType(T.TENSOR_FLOAT32, data.shape), data, key=("tensor", k))
        if t.type_name in ("INT8", "INT4", "UINT8", "FLOAT16"):
            if t.type_name != "FLOAT16" and ("hybrid", self.op.index) not in self.const_cache:
                self.const_cache[("hybrid", self.op.index)] = 0
                self.note(f"hybrid weights ({t.type_name}) dequantized to float32 (NNAPI has no hybrid recurrent "
                          "operation; TFLite's hybrid kernels quantize the activations on the fly)")
            return self.const(OperandType(T.TENSOR_FLOAT32, data.shape), self.dequantized(t), key=("deq", k))
        self.fail(f"{what} tensor {k} has type {t.type_name}")

    def zero_state(self, k: int, shape) -> int:
        if k < 0 or not self.t(k).is_variable:
            self.fail(f"state input {k} is not a variable tensor")
        return self.const(OperandType(T.TENSOR_FLOAT32, shape), np.zeros(shape, np.float32),
                          key=("zeros",) + tuple(shape))

    def float_input(self, k: int, what: str) -> int:
        xi = self.tensor(k)
        if self.type_of(xi).type != T.TENSOR_FLOAT32:
            self.fail(f"{self.type_of(xi).type.name} input: only float32 {what}s are imported (NNAPI's is float)")
        return xi

    def op_RNN(self, op):
        x, w, r, b, h = op.inputs[:5]
        xi = self.float_input(x, "RNN")
        batch, units = self.type_of(xi).dimensions[0], self.value_of(w, "the weights").shape[0]
        args = [xi, self.float_weight(w), self.float_weight(r), self.float_weight(b),
                self.zero_state(h, (batch, units)),
                self.i32(self.fuse())]
        self.emit(Op.RNN, args, [self.temp(OperandType(T.TENSOR_FLOAT32), (batch, units)), self.define(op.outputs[0])])

    def op_UNIDIRECTIONAL_SEQUENCE_RNN(self, op):
        x, w, r, b, h = op.inputs[:5]
        xi = self.float_input(x, "RNN")
        time_major = bool(self.opt("timeMajor", False))
        batch, units = self.type_of(xi).dimensions[1 if time_major else 0], self.value_of(w, "the weights").shape[0]
        args = [xi, self.float_weight(w), self.float_weight(r), self.float_weight(b),
                self.zero_state(h, (batch, units)),
                self.i32(self.fuse()), self.i32(int(time_major))]
        self.emit(Op.UNIDIRECTIONAL_SEQUENCE_RNN, args, [self.define(op.outputs[0])])

    def op_BIDIRECTIONAL_SEQUENCE_RNN(self, op):
        """TFLite's inputs 0-11 are NNAPI's (input; forward and backward weights, recurrent
        weights, bias, state (zero); auxiliary input and weights); then activation, time_major,
        merge_outputs."""
        ins = list(op.inputs) + [-1] * (12 - len(op.inputs))
        xi = self.float_input(ins[0], "BIDIRECTIONAL_SEQUENCE_RNN")
        time_major = bool(self.opt("timeMajor", False))
        batch = self.type_of(xi).dimensions[1 if time_major else 0]
        args = [xi]
        for w, r, b, h in (ins[1:5], ins[5:9]):
            units = self.value_of(w, "the weights").shape[0]
            args += [self.float_weight(w), self.float_weight(r), self.float_weight(b),
                     self.zero_state(h, (batch, units))]
        aux = ins[9]
        if aux >= 0 and aux not in self.operand_of:
            self.fail("the auxiliary input must be computed, not a constant")
        args += [self.tensor(aux) if aux >= 0 else self.omitted()] + [self.float_weight(k) for k in ins[10:12]]
        merge = bool(self.opt("mergeOutputs", False))
        args += [self.i32(self.fuse()), self.boolean(time_major), self.boolean(merge)]
        if len(op.outputs) != (1 if merge else 2):
            self.fail(f"{len(op.outputs)} outputs with merge_outputs={merge}")
        self.emit(Op.BIDIRECTIONAL_SEQUENCE_RNN, args, [self.define(k) for k in op.outputs])

    def op_SVDF(self, op):
        x, wf, wt, b, state = (list(op.inputs) + [-1] * 5)[:5]
        xi = self.float_input(x, "SVDF")
        batch = self.type_of(xi).dimensions[0]
        filters, memory = self.value_of(wt, "the time weights").shape
        args = [xi, self.float_weight(wf), self.float_weight(wt), self.float_weight(b),
                self.zero_state(state, (batch, memory * filters)), self.i32(self.opt("rank")), self.i32(self.fuse())]
        self.emit(Op.SVDF, args, [self.temp(OperandType(T.TENSOR_FLOAT32), (batch, memory * filters)),
                                  self.define(op.outputs[0])])

    def lstm_operands(self, op, batch_dim: int) -> tuple[list[int], list[int], tuple[int, int, int]]:
        """NNAPI's (UNIDIRECTIONAL_SEQUENCE_)LSTM inputs 0-19 (input, weights, zero states) and its
        four layer-normalization weights, from TFLite's inputs 0-23; and (batch, cells, outputs)."""
        ins = list(op.inputs) + [-1] * (24 - len(op.inputs))
        xi = self.tensor(ins[0])
        xt = self.type_of(xi)
        if xt.type != T.TENSOR_FLOAT32:
            layer_norm = any(k >= 0 for k in ins[20:24])
            self.fail(f"integer LSTM ({xt.type.name} input) cannot be mapped: NNAPI has no quantized sequence "
                      "LSTM, and its QUANTIZED_LSTM (one time step of the 8x8->16 integer LSTM) "
                      + ("would have to be unrolled over the time steps (not implemented)" if layer_norm else
                         "applies the gate biases only inside layer normalization (AOSP's QLSTM.cpp precomputes "
                         "the effective biases with bias=nullptr), while this LSTM has no layer normalization "
                         "and TFLite adds its gate biases to the gate accumulators: the biases would be lost")
                      + "; only float and hybrid (int8 weights, float activations) LSTMs are imported")
        n_cell = self.value_of(ins[1] if ins[1] >= 0 else ins[2], "the input-to-forget weights").shape[0]
        n_out = self.value_of(ins[16], "the projection weights").shape[0] if ins[16] >= 0 else n_cell
        batch = xt.dimensions[batch_dim]
        states = [self.zero_state(ins[18], (batch, n_out)), self.zero_state(ins[19], (batch, n_cell))]
        args = [xi] + [self.float_weight(k, "LSTM weight") for k in ins[1:18]] + states
        return args, [self.float_weight(k, "LSTM weight") for k in ins[20:24]], (batch, n_cell, n_out)

    def op_UNIDIRECTIONAL_SEQUENCE_LSTM(self, op):
        if self.opt("diagonalRecurrentTensors", False):
            self.fail("diagonal_recurrent_tensors is not supported by NNAPI")
        time_major = bool(self.opt("timeMajor", False))
        args, layer_norm, _ = self.lstm_operands(op, 1 if time_major else 0)
        args += [self.i32(self.opt("fusedActivationFunction")), self.f32(self.opt("cellClip", 0.0)),
                 self.f32(self.opt("projClip", 0.0)), self.boolean(time_major)]
        args += layer_norm   # TFLite inputs 20-23 -> NNAPI 24-27
        if len(op.outputs) != 1:
            self.fail(f"{len(op.outputs)} outputs; expected 1")
        self.emit(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, args, [self.define(op.outputs[0])])

    def op_BIDIRECTIONAL_SEQUENCE_LSTM(self, op):
        """TFLite's inputs 0-47 are NNAPI's 0-47 (input; forward and backward weights; the four
        states, zero; the auxiliary input and weights); the options follow, then NNAPI's eight
        layer-normalization weights, omitted (TFLite's operator has none)."""
        ins = list(op.inputs) + [-1] * (48 - len(op.inputs))
        time_major = bool(self.opt("timeMajor", True))
        xi = self.float_input(ins[0], "BIDIRECTIONAL_SEQUENCE_LSTM")
        batch = self.type_of(xi).dimensions[1 if time_major else 0]
        states = []
        for weights, state in ((1, 35), (18, 37)):   # each direction's input-to-forget weights, output state
            n_cell = self.value_of(ins[weights + 1], "the input-to-forget weights").shape[0]
            proj = ins[weights + 15]
            n_out = self.value_of(proj, "the projection weights").shape[0] if proj >= 0 else n_cell
            states += [self.zero_state(ins[state], (batch, n_out)), self.zero_state(ins[state + 1], (batch, n_cell))]
        aux = ins[39]
        if aux >= 0 and aux not in self.operand_of:
            self.fail("the auxiliary input must be computed, not a constant")
        args = [xi] + [self.float_weight(k, "LSTM weight") for k in ins[1:35]] + states
        args += [self.tensor(aux) if aux >= 0 else self.omitted()]
        args += [self.float_weight(k, "LSTM weight") for k in ins[40:48]]
        merge = bool(self.opt("mergeOutputs", False))
        args += [self.i32(self.opt("fusedActivationFunction")), self.f32(self.opt("cellClip", 0.0)),
                 self.f32(self.opt("projClip", 0.0)), self.boolean(merge), self.boolean(time_major)]
        args += [self.omitted() for _ in range(8)]
        if len(op.outputs) != (1 if merge else 2):
            self.fail(f"{len(op.outputs)} outputs with merge_outputs={merge}")
        self.emit(Op.BIDIRECTIONAL_SEQUENCE_LSTM, args, [self.define(k) for k in op.outputs])

    def op_LSTM(self, op):
        """One LSTM step: NNAPI's LSTM, whose scratch buffer and state outputs are not kept."""
        if self.opt("kernelType", 0) != 0:
            self.fail("the BASIC kernel (TFLite's 5-input quantized LSTM cell) is not supported")
        args, layer_norm, (batch, n_cell, n_out) = self.lstm_operands(op, 0)
        args += [self.i32(self.opt("fusedActivationFunction")), self.f32(self.opt("cellClip", 0.0)),
                 self.f32(self.opt("projClip", 0.0))]
        args += layer_norm   # TFLite inputs 20-23 -> NNAPI 23-26
        if len(op.outputs) != 1:
            self.fail(f"{len(op.outputs)} outputs; expected 1")
        f32 = OperandType(T.TENSOR_FLOAT32)
        gates = 3 if op.inputs[1] < 0 else 4   # CIFG: no input gate
        scratch = [self.temp(f32, (batch, n_cell * gates)), self.temp(f32, (batch, n_out)),
                   self.temp(f32, (batch, n_cell))]
        self.emit(Op.LSTM, args, scratch + [self.define(op.outputs[0])])
