"""RANDOM_MULTINOMIAL through the runtime: shapes, determinism for fixed seeds, and class
frequencies against softmax(logits) computed with scipy.special.softmax (a chi-square bound)."""
import numpy as np
import pytest
from scipy.special import softmax

from nnapi_ref.errors import NnapiError
from nnapi_ref.types import OperandCode as T, OperationCode as O, ResultCode
from nnts.generators.builders import output, run_operation, scalar, tensor

F32, F16, I32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
# 99.99% quantiles of the chi-square distribution with 1, 2, 3 degrees of freedom.
CHI2_9999 = {1: 15.14, 2: 18.42, 3: 21.11}


def sample(logits, n, seeds=(37, 42), type_=F32):
    (out,) = run_operation(O.RANDOM_MULTINOMIAL, [tensor(type_, logits), scalar(T.INT32, n),
                                                  tensor(I32, list(seeds), as_input=False)], [output(I32)])
    return out


@pytest.mark.parametrize("type_", [F32, F16])
def test_multinomial_frequencies_follow_softmax(type_):
    logits = np.array([[0.0, 1.0, 2.0, -1.0], [3.0, 3.0, -5.0, 0.5]], np.float32)
    n = 4000
    got = sample(logits.astype(np.float16 if type_ == F16 else np.float32), n, type_=type_)
    assert got.shape == (2, n) and got.dtype == np.int32
    assert got.min() >= 0 and got.max() < 4
    p = softmax(logits.astype(np.float64), axis=1)
    for row, probs in zip(got, p):
        counts = np.bincount(row, minlength=4)
        keep = probs * n >= 5
        stat = np.sum((counts[keep] - n * probs[keep]) ** 2 / (n * probs[keep]))
        assert stat < CHI2_9999[int(keep.sum()) - 1]
        assert counts[~keep].sum() <= 20


def test_multinomial_never_samples_impossible_class():
    logits = np.array([[0.0, -1e4, 0.0]], np.float32)
    got = sample(logits, 500)
    assert not np.any(got == 1)


def test_multinomial_deterministic_for_fixed_seeds():
    logits = np.zeros((3, 10), np.float32)
    np.testing.assert_array_equal(sample(logits, 64, (1, 2)), sample(logits, 64, (1, 2)))
    assert not np.array_equal(sample(logits, 64, (1, 2)), sample(logits, 64, (2, 1)))


def test_multinomial_zero_seeds_are_random():
    logits = np.zeros((1, 1000), np.float32)
    assert not np.array_equal(sample(logits, 64, (0, 0)), sample(logits, 64, (0, 0)))


def test_multinomial_validation():
    def bad(inputs):
        with pytest.raises(NnapiError) as info:
            run_operation(O.RANDOM_MULTINOMIAL, inputs, [output(I32)])
        assert info.value.code == ResultCode.BAD_DATA

    seeds = tensor(I32, [1, 2], as_input=False)
    bad([tensor(F32, np.zeros(4, np.float32)), scalar(T.INT32, 3), seeds])                   # logits not 2-D
    bad([tensor(F32, np.zeros((1, 4), np.float32)), scalar(T.INT32, 3), tensor(I32, [1, 2, 3], as_input=False)])
    bad([tensor(F32, np.zeros((1, 4), np.float32)), scalar(T.INT32, -1), seeds])
    bad([tensor(I32, np.zeros((1, 4), np.int32)), scalar(T.INT32, 3), seeds])               # logits type
