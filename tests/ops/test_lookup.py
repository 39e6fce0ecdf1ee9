"""EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION through the runtime.

Lookup expectations are plain Python indexing / dictionaries. LSH_PROJECTION is checked against
the ``farmhash`` package (pyfarmhash; skipped when not installed) with keys packed by ``struct``,
and by hash-independent properties (sparse = bits packed MSB first, the sparse offset, weight
scaling and negation).
"""
import struct

import numpy as np
import pytest

from nnapi_ref.errors import NnapiError
from nnapi_ref.types import OperandCode as T, OperationCode as O, ResultCode
from nnts.generators.builders import omitted, output, run_operation, scalar, tensor

F32, F16, I32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
Q8, Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


def assert_fails(code, inputs, outputs, result=ResultCode.BAD_DATA):
    with pytest.raises(NnapiError) as info:
        run_operation(code, inputs, outputs)
    assert info.value.code == result


# ---- EMBEDDING_LOOKUP ----------------------------------------------------------------------

@pytest.mark.parametrize("type_", [F32, F16, I32, Q8, Q8S])
def test_embedding_lookup_types(type_):
    values = np.arange(24).reshape(3, 2, 4) - (0 if type_ == Q8 else 10)
    scale, zp = (0.5, 3) if type_ in (Q8, Q8S) else (0.0, 0)
    lookups = [2, 0, 2, 1]
    (got,) = run_operation(O.EMBEDDING_LOOKUP, [tensor(I32, lookups), tensor(type_, values, scale, zp)],
                           [output(type_, None, scale, zp)])
    expected = [values.tolist()[i] for i in lookups]
    np.testing.assert_array_equal(got, expected)


def test_embedding_lookup_out_of_range():
    values = tensor(F32, np.zeros((3, 2), np.float32))
    # A constant lookup is checked at compilation (BAD_DATA), a fed one at execution (OP_FAILED).
    assert_fails(O.EMBEDDING_LOOKUP, [tensor(I32, [0, 3], as_input=False), values], [output(F32)])
    assert_fails(O.EMBEDDING_LOOKUP, [tensor(I32, [-1], as_input=False), values], [output(F32)])
    assert_fails(O.EMBEDDING_LOOKUP, [tensor(I32, [1, 3]), values], [output(F32)], ResultCode.OP_FAILED)


def test_embedding_lookup_validation():
    assert_fails(O.EMBEDDING_LOOKUP, [tensor(I32, [0]), tensor(F32, np.zeros(3, np.float32))], [output(F32)])
    assert_fails(O.EMBEDDING_LOOKUP, [tensor(I32, [[0]]), tensor(F32, np.zeros((3, 2), np.float32))], [output(F32)])
    q = tensor(Q8, np.zeros((3, 2), np.uint8), 0.5, 3)
    assert_fails(O.EMBEDDING_LOOKUP, [tensor(I32, [0]), q], [output(Q8, None, 0.5, 4)])


# ---- HASHTABLE_LOOKUP ----------------------------------------------------------------------

@pytest.mark.parametrize("type_", [F32, I32, Q8])
def test_hashtable_lookup(type_):
    keys = [-7, 0, 3, 100]
    values = np.arange(12).reshape(4, 3) + 1
    scale, zp = (0.25, 2) if type_ == Q8 else (0.0, 0)
    lookups = [3, 5, -7, 100, 1]
    got, hits = run_operation(O.HASHTABLE_LOOKUP, [tensor(I32, lookups), tensor(I32, keys),
                                                   tensor(type_, values, scale, zp)],
                              [output(type_, None, scale, zp), output(Q8, None, 1.0, 0)])
    table = dict(zip(keys, values.tolist()))
    np.testing.assert_array_equal(got, [table.get(k, [0, 0, 0]) for k in lookups])
    np.testing.assert_array_equal(hits, [int(k in table) for k in lookups])
    assert hits.dtype == np.uint8


def test_hashtable_lookup_validation():
    lookups, keys = tensor(I32, [1]), tensor(I32, [1, 2])
    outs = [output(F32), output(Q8, None, 1.0, 0)]
    assert_fails(O.HASHTABLE_LOOKUP, [lookups, keys, tensor(F32, np.zeros((3, 2), np.float32))], outs)  # 2 keys, 3 rows
    assert_fails(O.HASHTABLE_LOOKUP, [lookups, tensor(I32, [[1, 2]]), tensor(F32, np.zeros((2, 2), np.float32))], outs)
    assert_fails(O.HASHTABLE_LOOKUP, [lookups, keys, tensor(F32, np.zeros((2, 2), np.float32))],
                 [output(F32), output(Q8, None, 0.5, 0)])  # hits must be scale 1, zero point 0
    assert_fails(O.HASHTABLE_LOOKUP, [lookups, keys, tensor(Q8, np.zeros((2, 2), np.uint8), 0.5, 1)],
                 [output(Q8, None, 0.5, 2), output(Q8, None, 1.0, 0)])


# ---- LSH_PROJECTION ------------------------------------------------------------------------

HASH = np.array([[0.123, 0.456], [-0.321, -0.654], [1.234, 5.678], [-4.321, -8.765]], np.float32)
INPUT = np.array([[12345, 54321], [67890, 9876], [-12345678, -87654321]], np.int32)


def run_lsh(hash_, inp, weight, kind, hash_type=F32, input_type=I32):
    w = omitted(hash_type) if weight is None else tensor(hash_type, weight)
    scale = 0.5 if input_type == Q8 else 0.0
    (out,) = run_operation(O.LSH_PROJECTION, [tensor(hash_type, hash_), tensor(input_type, inp, scale), w,
                                              scalar(T.INT32, kind)], [output(I32)])
    return out


def expected_bits_farmhash(hash_, inp, weight):
    farmhash = pytest.importorskip("farmhash")
    rows = [np.ascontiguousarray(r).tobytes() for r in inp]
    bits = []
    for seed in np.asarray(hash_, np.float32).reshape(-1):
        score = 0.0
        for i, row in enumerate(rows):
            h = farmhash.fingerprint64(struct.pack("<f", float(seed)) + row)
            h = h - (1 << 64) if h >= 1 << 63 else h
            score += float(h) * (1.0 if weight is None else float(weight[i]))
        bits.append(1 if score > 0 else 0)
    return np.array(bits).reshape(np.shape(hash_))


@pytest.mark.parametrize("weight", [None, [0.12, 0.34, 0.56], [1.0, -2.0, 0.5]])
def test_lsh_dense_matches_farmhash(weight):
    got = run_lsh(HASH, INPUT, weight, 2)
    np.testing.assert_array_equal(got, expected_bits_farmhash(HASH, INPUT, weight).reshape(-1))


@pytest.mark.parametrize("input_type,inp", [(F32, np.linspace(-3, 3, 10, dtype=np.float32).reshape(5, 2)),
                                            (Q8, np.arange(30, dtype=np.uint8).reshape(5, 3, 2)),
                                            (F16, np.linspace(-1, 1, 6, dtype=np.float16).reshape(3, 2))])
def test_lsh_input_types_match_farmhash(input_type, inp):
    got = run_lsh(HASH, inp, None, 2, input_type=input_type)
    np.testing.assert_array_equal(got, expected_bits_farmhash(HASH, inp, None).reshape(-1))


def test_lsh_float16_hash_uses_float32_seed():
    hash16 = HASH.astype(np.float16)
    got = run_lsh(hash16, INPUT, np.array([0.5, 0.25, 2.0], np.float16), 2, hash_type=F16)
    expected = expected_bits_farmhash(hash16.astype(np.float32), INPUT, [0.5, 0.25, 2.0])
    np.testing.assert_array_equal(got, expected.reshape(-1))


def test_lsh_sparse_packs_dense_bits():
    dense = run_lsh(HASH, INPUT, None, 2).reshape(4, 2)
    packed = [int("".join(str(b) for b in row), 2) for row in dense.tolist()]
    np.testing.assert_array_equal(run_lsh(HASH, INPUT, None, 1), packed)
    # Type 3 adds k * 2**bits to signature k.
    np.testing.assert_array_equal(run_lsh(HASH, INPUT, None, 3), [p + k * 4 for k, p in enumerate(packed)])


def test_lsh_weight_scaling_and_negation():
    w = np.array([0.3, -1.2, 0.7], np.float32)
    base = run_lsh(HASH, INPUT, w, 2)
    np.testing.assert_array_equal(run_lsh(HASH, INPUT, w * 4, 2), base)
    np.testing.assert_array_equal(run_lsh(HASH, INPUT, -w, 2), 1 - base)


def test_lsh_validation():
    w = omitted(F32)
    good_input = tensor(I32, INPUT)
    cases = [
        [tensor(F32, HASH[0]), good_input, w, scalar(T.INT32, 2)],                        # hash not 2-D
        [tensor(F32, np.zeros((2, 33), np.float32)), good_input, w, scalar(T.INT32, 2)],  # > 32 bits
        [tensor(F32, HASH), good_input, w, scalar(T.INT32, 4)],                           # unknown type
        [tensor(F32, HASH), good_input, w, scalar(T.INT32, 0)],
        [tensor(F32, HASH), good_input, tensor(F32, [1.0, 2.0]), scalar(T.INT32, 2)],     # 2 weights, 3 rows
        [tensor(F32, np.zeros((3, 31), np.float32)), good_input, w, scalar(T.INT32, 3)],  # 31 + ceil(log2 3) > 32
    ]
    for inputs in cases:
        assert_fails(O.LSH_PROJECTION, inputs, [output(I32)])
