"""SVDF."""
import numpy as np
import pytest

from nnapi_ref.errors import NnapiError
from nnapi_ref.types import OperandCode as T, OperationCode as Op, ResultCode
from nnts.generators.builders import omitted, output, run_operation, scalar, tensor

F32, F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
RNG = np.random.default_rng(3)


def svdf(x, wf, wt, bias, state, rank, fuse=0, t=F32):
    return run_operation(Op.SVDF, [tensor(t, x), tensor(t, wf), tensor(t, wt),
                                   tensor(t, bias) if bias is not None else omitted(t),
                                   tensor(t, state), scalar(T.INT32, rank), scalar(T.INT32, fuse)],
                         [output(t), output(t)])


def textbook_svdf(x, wf, wt, bias, state, rank):
    """Plain loops. A filter's state holds memory_size activations, oldest first, whose newest slot
    is an empty placeholder (0 after every step); the new activation fills that slot."""
    batch, filters, memory = len(x), len(wf), len(wt[0])
    out, new_state = [], []
    for b in range(batch):
        row_out, row_state = [], []
        activations = []
        for f in range(filters):
            mem = [state[b][f * memory + m] for m in range(memory - 1)]      # keep all but the placeholder
            mem.append(sum(wf[f][i] * x[b][i] for i in range(len(x[b]))))  # newest activation
            activations.append(sum(mem[m] * wt[f][m] for m in range(memory)))
            row_state += mem  # the memory after this step, before the final shift
        for u in range(filters // rank):
            v = sum(activations[u * rank + k] for k in range(rank)) + (bias[u] if bias is not None else 0.0)
            row_out.append(v)
        # the state handed to the next step is shifted once more, its newest slot zeroed
        shifted = []
        for f in range(filters):
            mem = row_state[f * memory:(f + 1) * memory]
            shifted += mem[1:] + [0.0]
        out.append(row_out)
        new_state.append(shifted)
    return np.array(out), np.array(new_state)


def test_one_filter_by_hand():
    # memory 2, state [0.5, placeholder]: memory becomes [0.5, 3*2 = 6]; output = 0.5*0.25 + 6*0.5 + 0.1
    state_out, out = svdf([[2.0]], [[3.0]], [[0.25, 0.5]], [0.1], [[0.5, 1.0]], 1)
    assert out[0, 0] == pytest.approx(3.225)
    np.testing.assert_allclose(state_out, [[6.0, 0.0]])
    _, out = svdf([[2.0]], [[3.0]], [[0.25, 0.5]], [0.1], [[0.5, 1.0]], 1, fuse=2)  # RELU1
    assert out[0, 0] == pytest.approx(1.0)


@pytest.mark.parametrize("with_bias", [True, False])
def test_textbook_over_three_steps(with_bias):
    batch, inputs, units, rank, memory = 2, 3, 2, 2, 4
    filters = units * rank
    wf = RNG.uniform(-1, 1, (filters, inputs))
    wt = RNG.uniform(-1, 1, (filters, memory))
    bias = RNG.uniform(-1, 1, units) if with_bias else None
    state = np.zeros((batch, filters * memory))
    exp_state = state.tolist()
    for _ in range(3):
        x = RNG.uniform(-1, 1, (batch, inputs))
        state, out = svdf(x, wf, wt, bias, state, rank)
        exp_out, exp_state = textbook_svdf(x.tolist(), wf.tolist(), wt.tolist(),
                                           None if bias is None else bias.tolist(), exp_state, rank)
        np.testing.assert_allclose(out, exp_out, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(state, exp_state, rtol=1e-5, atol=1e-6)
        exp_state = exp_state.tolist()


def test_float16():
    wf, wt = RNG.uniform(-1, 1, (2, 3)), RNG.uniform(-1, 1, (2, 2))
    x, state = RNG.uniform(-1, 1, (1, 3)), RNG.uniform(-1, 1, (1, 4))
    s16, o16 = svdf(x, wf, wt, [0.5], state, 2, t=F16)
    cast = [a.astype(np.float16) for a in (x, wf, wt, state)]
    s32, o32 = svdf(cast[0], cast[1], cast[2], [0.5], cast[3], 2)
    assert o16.dtype == np.float16
    np.testing.assert_allclose(o16.astype(np.float32), o32, rtol=5e-3, atol=5e-3)


def test_validation():
    def bad(**kw):
        args = dict(x=np.zeros((1, 3)), wf=np.zeros((4, 3)), wt=np.zeros((4, 2)), bias=np.zeros(2),
                    state=np.zeros((1, 8)), rank=2)
        args.update(kw)
        with pytest.raises(NnapiError) as e:
            svdf(**args)
        assert e.value.code == ResultCode.BAD_DATA

    bad(rank=3)                         # 4 filters are not a multiple of rank 3
    bad(bias=np.zeros(3))               # bias must have num_units = 2 entries
    bad(x=np.zeros((1, 2)))             # input size differs from weights_feature
    bad(wt=np.zeros((3, 2)))            # weights_time rows != filters
    bad(state=np.zeros((1, 6)))         # state size != memory * filters
    bad(rank=0)
