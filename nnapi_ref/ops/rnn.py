"""Basic recurrent layers: RNN (one time step), UNIDIRECTIONAL_SEQUENCE_RNN and
BIDIRECTIONAL_SEQUENCE_RNN.

Each step computes ``h_t = activation(x_t W^T + aux_t A^T + h_{t-1} R^T + b)`` the way NNAPI's CPU
implementation does; float16 operands are computed in wider precision and rounded at the end. The
input-to-hidden products of all time steps are one batched matmul; only the recurrence loops over
time.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import Arg, Call, OperationCode, OperationRegistration, Signature, T, check, register
from nnapi_ref.ops.common import FLOAT_ACTIVATION_RANGE, check_fuse_code
from nnapi_ref.types import DTYPES, FuseCode, ResultCode

FLOATS = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


# ----------------------------------------------------------------------------- shared helpers

def present(arg: Arg) -> bool:
    """An optional operand has a value (not omitted, not zero-sized)."""
    return not arg.omitted and arg.shape is not None and 0 not in arg.shape


def fvalue(arg: Arg) -> np.ndarray | None:
    """The float64 value of an optional float operand (None when absent)."""
    return arg.value.astype(np.float64) if present(arg) else None


def check_shape(arg: Arg, dims, name: str) -> None:
    check(arg.shape is not None and tuple(arg.shape) == tuple(dims),
          f"{name} has shape {None if arg.shape is None else list(arg.shape)}, expected {list(dims)}")


def check_rank(arg: Arg, rank: int, name: str) -> None:
    check(arg.shape is not None and len(arg.shape) == rank,
          f"{name} must have rank {rank}, got {None if arg.shape is None else len(arg.shape)}")


def check_aux_input(aux: Arg, x: Arg) -> None:
    """A bidirectional sequence operation's auxiliary input: rank 3, with the input's time and
    batch dimensions."""
    check_rank(aux, 3, "auxiliary input")
    check(tuple(aux.shape[:2]) == tuple(x.shape[:2]),
          f"auxiliary input shape {list(aux.shape)} does not match the input's first two dimensions")


def fused_activation(x: np.ndarray, fuse: int) -> np.ndarray:
    if fuse == FuseCode.NONE:
        return x
    lo, hi = FLOAT_ACTIVATION_RANGE[FuseCode(fuse)]
    return np.clip(x, lo, hi)


def to_output(x: np.ndarray, out: Arg) -> np.ndarray:
    return np.asarray(x).astype(DTYPES[out.type])


def rnn_sequence(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray, h0: np.ndarray, fuse: int,
                 aux: np.ndarray | None = None, aux_w: np.ndarray | None = None,
                 reverse: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Run a basic RNN cell over a time-major sequence ``x`` [time, batch, input].

    Returns (outputs [time, batch, units], final hidden state [batch, units])."""
    pre = x @ w.T + b
    if aux is not None and aux_w is not None:
        pre = pre + aux @ aux_w.T
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    out = np.empty(pre.shape, np.float64)
    h = h0
    for t in steps:
        h = fused_activation(pre[t] + h @ r.T, fuse)
        out[t] = h
    return out, h


def check_cell(weights: Arg, recurrent: Arg, bias: Arg, hidden: Arg, batch: int, input_size: int,
               prefix: str = "") -> int:
    """Validate one RNN cell's tensors; return its number of units."""
    check_rank(weights, 2, f"{prefix}weights")
    units = weights.shape[0]
    check(weights.shape[1] == input_size,
          f"{prefix}weights have {weights.shape[1]} columns, the input size is {input_size}")
    check_shape(recurrent, (units, units), f"{prefix}recurrent weights")
    check_shape(bias, (units,), f"{prefix}bias")
    check_shape(hidden, (batch, units), f"{prefix}hidden state")
    return units


# ----------------------------------------------------------------------------- RNN

@register
class Rnn(OperationRegistration):
    code = OperationCode.RNN
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = {5: "fused activation"}
    accuracy = "relaxed"
    signatures = [
        Signature(27, [T.TENSOR_FLOAT32] * 5 + [T.INT32], [T.TENSOR_FLOAT32] * 2),
        Signature(29, [T.TENSOR_FLOAT16] * 5 + [T.INT32], [T.TENSOR_FLOAT16] * 2),
    ]

    def infer(self, call: Call):
        x, w, r, b, h, fuse = call.ins
        check_rank(x, 2, "input")
        batch, input_size = x.shape
        units = check_cell(w, r, b, h, batch, input_size)
        check_fuse_code(fuse.scalar())
        return [(batch, units), (batch, units)]

    def execute(self, call: Call):
        x, w, r, b, h, fuse = call.ins
        out, _ = rnn_sequence(fvalue(x)[None], fvalue(w), fvalue(r), fvalue(b), fvalue(h), fuse.scalar())
        return [to_output(out[0], call.outs[0]), to_output(out[0], call.outs[1])]


# ----------------------------------------------------------------------------- UNIDIRECTIONAL_SEQUENCE_RNN

@register
class UnidirectionalSequenceRnn(OperationRegistration):
    code = OperationCode.UNIDIRECTIONAL_SEQUENCE_RNN
    parameters = {5: "fused activation", 6: "time major"}
    accuracy = "relaxed"
    signatures = [
        Signature(29, [t] * 5 + [T.INT32, T.INT32], [t]) for t in FLOATS
    ] + [
        Signature(30, [t] * 5 + [T.INT32, T.INT32], [t, t]) for t in FLOATS
    ]

    def infer(self, call: Call):
        x, w, r, b, h, fuse, time_major = call.ins
        check_rank(x, 3, "input")
        tm = time_major.scalar()
        check(tm in (0, 1), f"time_major must be 0 or 1, got {tm}")
        steps, batch = (x.shape[0], x.shape[1]) if tm else (x.shape[1], x.shape[0])
        units = check_cell(w, r, b, h, batch, x.shape[2])
        check_fuse_code(fuse.scalar())
        out = (steps, batch, units) if tm else (batch, steps, units)
        return [out, (batch, units)][:len(call.outs)]

    def execute(self, call: Call):
        x, w, r, b, h, fuse, time_major = call.ins
        tm = time_major.scalar()
        seq = fvalue(x) if tm else fvalue(x).transpose(1, 0, 2)
        out, h_last = rnn_sequence(seq, fvalue(w), fvalue(r), fvalue(b), fvalue(h), fuse.scalar())
        if not tm:
            out = out.transpose(1, 0, 2)
        results = [to_output(out, call.outs[0])]
        if len(call.outs) > 1:
            results.append(to_output(h_last, call.outs[1]))
        return results


# ----------------------------------------------------------------------------- BIDIRECTIONAL_SEQUENCE_RNN

AUX_INPUTS = (9, 10, 11)  # the optional auxiliary input and its forward and backward weights


def bidirectional_rnn_signatures() -> list[Signature]:
    sigs = []
    for t in FLOATS:
        inputs = [t] * 12 + [T.INT32, T.BOOL, T.BOOL]
        sigs += [Signature(level, inputs, outputs, omittable=AUX_INPUTS)
                 for level, outputs in ((29, [t]), (29, [t, t]), (30, [t] * 3), (30, [t] * 4))]
    return sigs


@register
class BidirectionalSequenceRnn(OperationRegistration):
    """Inputs: 0 input, 1-4 forward weights/recurrent weights/bias/hidden state, 5-8 the same
    backward, 9 aux input, 10-11 forward/backward aux weights, 12 activation, 13 time_major,
    14 merge_outputs. Outputs: forward output, backward output (unless merged), then (feature
    level 4) the forward and backward final hidden states."""

    code = OperationCode.BIDIRECTIONAL_SEQUENCE_RNN
    parameters = {12: "fused activation", 13: "time major", 14: "merge outputs"}
    accuracy = "relaxed"
    signatures = bidirectional_rnn_signatures()

    @staticmethod
    def linking(call: Call) -> str:
        aux, fw_aux_w, bw_aux_w = (present(a) for a in call.ins[9:12])
        if not aux and not fw_aux_w and not bw_aux_w:
            return "none"
        if aux and not fw_aux_w and not bw_aux_w:
            return "parallel"
        check(aux and fw_aux_w and bw_aux_w,
              "auxiliary input and auxiliary weights must be all present, only the input present, or all omitted")
        return "cross"

    def infer(self, call: Call):
        ins = call.ins
        x = ins[0]
        merge = bool(ins[14].scalar())
        n_out = len(call.outs)
        check(n_out in ((1, 3) if merge else (2, 4)),
              f"{n_out} outputs given, expected {'1 or 3' if merge else '2 or 4'} with merge_outputs={merge}")
        check_rank(x, 3, "input")
        tm = bool(ins[13].scalar())
        steps, batch = (x.shape[0], x.shape[1]) if tm else (x.shape[1], x.shape[0])
        mode = self.linking(call)
        fw_units = check_cell(ins[1], ins[2], ins[3], ins[4], batch, x.shape[2], "forward ")
        bw_input_size = x.shape[2]
        if mode != "none":
            aux = ins[9]
            check_aux_input(aux, x)
            if mode == "parallel":
                bw_input_size = aux.shape[2]
            else:
                check_shape(ins[10], (fw_units, aux.shape[2]), "forward auxiliary weights")
        bw_units = check_cell(ins[5], ins[6], ins[7], ins[8], batch, bw_input_size, "backward ")
        if mode == "cross":
            check_shape(ins[11], (bw_units, ins[9].shape[2]), "backward auxiliary weights")
        check_fuse_code(ins[12].scalar())

        def seq(units):
            return (steps, batch, units) if tm else (batch, steps, units)

        shapes = [seq(fw_units + bw_units)] if merge else [seq(fw_units), seq(bw_units)]
        if n_out > len(shapes):
            shapes += [(batch, fw_units), (batch, bw_units)]
        return shapes

    def execute(self, call: Call):
        ins = call.ins
        tm = bool(ins[13].scalar())
        merge = bool(ins[14].scalar())
        fuse = ins[12].scalar()
        mode = self.linking(call)

        def time_major(a):
            return a if tm else a.transpose(1, 0, 2)

        x = time_major(fvalue(ins[0]))
        aux = time_major(fvalue(ins[9])) if mode != "none" else None
        bw_x = aux if mode == "parallel" else x
        fw_aux, bw_aux = (aux, aux) if mode == "cross" else (None, None)
        fw_out, fw_h = rnn_sequence(x, fvalue(ins[1]), fvalue(ins[2]), fvalue(ins[3]), fvalue(ins[4]), fuse,
                                    fw_aux, fvalue(ins[10]))
        bw_out, bw_h = rnn_sequence(bw_x, fvalue(ins[5]), fvalue(ins[6]), fvalue(ins[7]), fvalue(ins[8]), fuse,
                                    bw_aux, fvalue(ins[11]), reverse=True)
        outs = call.outs
        if merge:
            seqs = [np.concatenate([fw_out, bw_out], axis=2)]
        else:
            seqs = [fw_out, bw_out]
        results = [to_output(time_major(s), o) for s, o in zip(seqs, outs)]
        if len(outs) > len(seqs):
            results += [to_output(fw_h, outs[len(seqs)]), to_output(bw_h, outs[len(seqs) + 1])]
        return results
