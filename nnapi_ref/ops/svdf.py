"""SVDF: the singular value decomposition filter layer, one time step.

For every filter f the state holds its last ``memory_size`` feature activations. A step replaces
the newest entry by ``weights_feature[f] . input``, takes the dot product of each filter's memory
with ``weights_time[f]``, sums the ``rank`` filters of each unit, adds the bias and applies the
activation; the state returned is shifted one step (oldest dropped, newest slot zeroed), as the
NNAPI CPU implementation does.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import Call, OperationCode, OperationRegistration, Signature, T, check, register
from nnapi_ref.ops.common import check_fuse_code
from nnapi_ref.ops.rnn import check_rank, check_shape, fused_activation, fvalue, present, to_output


@register
class Svdf(OperationRegistration):
    code = OperationCode.SVDF
    zero_sized_inputs = None
    parameters = {5: "rank", 6: "fused activation"}
    accuracy = "relaxed"
    signatures = [
        Signature(27, [T.TENSOR_FLOAT32] * 5 + [T.INT32, T.INT32], [T.TENSOR_FLOAT32] * 2, omittable=[3]),
        Signature(29, [T.TENSOR_FLOAT16] * 5 + [T.INT32, T.INT32], [T.TENSOR_FLOAT16] * 2, omittable=[3]),
    ]

    def infer(self, call: Call):
        x, wf, wt, bias, state, rank_arg, fuse = call.ins
        check_rank(x, 2, "input")
        check_rank(wf, 2, "weights_feature")
        check_rank(wt, 2, "weights_time")
        batch, input_size = x.shape
        filters = wf.shape[0]
        rank = rank_arg.scalar()
        check(rank > 0, f"rank must be positive, got {rank}")
        check(filters % rank == 0, f"the number of filters {filters} is not a multiple of rank {rank}")
        units = filters // rank
        memory = wt.shape[1]
        check(wf.shape[1] == input_size, f"weights_feature have {wf.shape[1]} columns, the input size is {input_size}")
        check(wt.shape[0] == filters, f"weights_time have {wt.shape[0]} rows, expected {filters} filters")
        if present(bias):
            check_shape(bias, (units,), "bias")
        check_shape(state, (batch, memory * filters), "state (in)")
        check_fuse_code(fuse.scalar())
        return [(batch, memory * filters), (batch, units)]

    def execute(self, call: Call):
        x, wf, wt, bias, state, rank_arg, fuse = call.ins
        rank = rank_arg.scalar()
        w_time = fvalue(wt)
        filters, memory = w_time.shape
        batch = x.shape[0]
        mem = fvalue(state).reshape(batch, filters, memory).copy()
        mem[:, :, -1] = fvalue(x) @ fvalue(wf).T
        per_filter = np.einsum("bfm,fm->bf", mem, w_time)
        out = per_filter.reshape(batch, filters // rank, rank).sum(axis=2)
        b = fvalue(bias)
        if b is not None:
            out = out + b
        out = fused_activation(out, fuse.scalar())
        new_state = np.zeros_like(mem)
        new_state[:, :, :-1] = mem[:, :, 1:]
        return [to_output(new_state.reshape(batch, filters * memory), call.outs[0]),
                to_output(out, call.outs[1])]
