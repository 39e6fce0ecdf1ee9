"""Lookups and hashing: EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION.

LSH_PROJECTION hashes, for every seed of the hash tensor and every input row, the key
``float32(seed) bytes + the row's raw bytes`` with farmhash's ``Fingerprint64``
(``farmhashna::Hash64``), as NNAPI's CPU implementation does; the signed 64-bit hashes, weighted
(weights default to 1), are summed in double precision row by row and the sign of the sum is
the projected bit. The farmhash port below is vectorized over all keys (they share one length).

AOSP and TFLite
---------------
EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION move or hash stored values: identical.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import (Call, OperationCode, OperationRegistration, Signature, T, ValueUnknown, check, register,
                                signatures)
from nnapi_ref.types import ResultCode

QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def _check_same_quant(name: str, values, out) -> None:
    if values.type in QUANT8:
        check(np.float32(out.scale) == np.float32(values.scale) and out.zero_point == values.zero_point,
              f"{name}: output scale/zero point ({out.scale}, {out.zero_point}) must equal the values' "
              f"({values.scale}, {values.zero_point})")


# ---- EMBEDDING_LOOKUP ----------------------------------------------------------------------

@register
class EmbeddingLookup(OperationRegistration):
    code = OperationCode.EMBEDDING_LOOKUP
    zero_sized_inputs = ResultCode.BAD_DATA
    accuracy = "strict"
    signatures = (signatures(27, (T.TENSOR_FLOAT32,), [T.TENSOR_INT32, None], [None])
                  + signatures(29, (T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM), [T.TENSOR_INT32, None], [None])
                  + signatures(30, (T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM_SIGNED), [T.TENSOR_INT32, None], [None]))

    def infer(self, call: Call):
        lookups, values = call.ins
        check(lookups.rank == 1, f"EMBEDDING_LOOKUP: lookups must be 1-D, got rank {lookups.rank}")
        check(values.rank >= 2, f"EMBEDDING_LOOKUP: values must have rank >= 2, got {values.rank}")
        _check_same_quant("EMBEDDING_LOOKUP", values, call.outs[0])
        try:
            idx = lookups.value
        except ValueUnknown:  # lookups fed at execution: checked then; the shape is known now
            idx = None
        if idx is not None:
            check(bool(np.all((idx >= 0) & (idx < values.shape[0]))),
                  f"EMBEDDING_LOOKUP: lookup values {idx.tolist()} out of range [0, {values.shape[0]})")
        return [(lookups.shape[0],) + tuple(values.shape[1:])]

    def execute(self, call: Call):
        lookups, values = call.ins
        return [values.value[lookups.value.astype(np.int64)]]


# ---- HASHTABLE_LOOKUP ----------------------------------------------------------------------

@register
class HashtableLookup(OperationRegistration):
    code = OperationCode.HASHTABLE_LOOKUP
    zero_sized_inputs = ResultCode.BAD_DATA
    accuracy = "strict"
    signatures = signatures(27, (T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM),
                            [T.TENSOR_INT32, T.TENSOR_INT32, None], [None, T.TENSOR_QUANT8_ASYMM])

    def infer(self, call: Call):
        lookups, keys, values = call.ins
        out, hits = call.outs
        check(lookups.rank == 1, f"HASHTABLE_LOOKUP: lookups must be 1-D, got rank {lookups.rank}")
        check(keys.rank == 1, f"HASHTABLE_LOOKUP: keys must be 1-D, got rank {keys.rank}")
        check(values.rank >= 2, f"HASHTABLE_LOOKUP: values must have rank >= 2, got {values.rank}")
        check(keys.shape[0] == values.shape[0],
              f"HASHTABLE_LOOKUP: {keys.shape[0]} keys for {values.shape[0]} value slices")
        _check_same_quant("HASHTABLE_LOOKUP", values, out)
        check(np.float32(hits.scale) == 1.0 and hits.zero_point == 0,
              f"HASHTABLE_LOOKUP: hits must have scale 1.0 and zero point 0, got {hits.scale} and {hits.zero_point}")
        k = lookups.shape[0]
        return [(k,) + tuple(values.shape[1:]), (k,)]

    def execute(self, call: Call):
        lookups, keys, values = (a.value for a in call.ins)
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        pos = np.searchsorted(sorted_keys, lookups)
        pos_clipped = np.minimum(pos, max(len(keys) - 1, 0))
        hit = (pos < len(keys)) & (sorted_keys[pos_clipped] == lookups) if len(keys) else np.zeros(lookups.shape, bool)
        out = np.zeros((len(lookups),) + values.shape[1:], values.dtype)
        if len(keys):
            out[hit] = values[order[pos_clipped[hit]]]
        return [out, hit.astype(np.uint8)]


# ---- farmhash Fingerprint64 (farmhashna::Hash64), vectorized over equal-length keys --------

_M64 = (1 << 64) - 1
_K0 = np.uint64(0xC3A5C85C97CB3127)
_K1 = np.uint64(0xB492B66FBE98F273)
_K2 = np.uint64(0x9AE16A3B2F90404F)


def _u64(x) -> np.uint64:
    return np.uint64(x & _M64)


def _fetch64(keys: np.ndarray, offset: int) -> np.ndarray:
    return np.ascontiguousarray(keys[:, offset:offset + 8]).view("<u8")[:, 0].astype(np.uint64)


def _fetch32(keys: np.ndarray, offset: int) -> np.ndarray:
    return np.ascontiguousarray(keys[:, offset:offset + 4]).view("<u4")[:, 0].astype(np.uint64)


def _rotate(v: np.ndarray, shift: int) -> np.ndarray:
    if shift == 0:
        return v
    return (v >> np.uint64(shift)) | (v << np.uint64(64 - shift))


def _shift_mix(v: np.ndarray) -> np.ndarray:
    return v ^ (v >> np.uint64(47))


def _hash_len16(u, v, mul) -> np.ndarray:
    a = (u ^ v) * mul
    a = a ^ (a >> np.uint64(47))
    b = (v ^ a) * mul
    b = b ^ (b >> np.uint64(47))
    return b * mul


def _hash_len0to16(s: np.ndarray, n: int) -> np.ndarray:
    count = s.shape[0]
    if n >= 8:
        mul = _u64(int(_K2) + n * 2)
        a = _fetch64(s, 0) + _K2
        b = _fetch64(s, n - 8)
        c = _rotate(b, 37) * mul + a
        d = (_rotate(a, 25) + b) * mul
        return _hash_len16(c, d, mul)
    if n >= 4:
        mul = _u64(int(_K2) + n * 2)
        a = _fetch32(s, 0)
        return _hash_len16(np.uint64(n) + (a << np.uint64(3)), _fetch32(s, n - 4), mul)
    if n > 0:
        a = s[:, 0].astype(np.uint64)
        b = s[:, n >> 1].astype(np.uint64)
        c = s[:, n - 1].astype(np.uint64)
        y = (a + (b << np.uint64(8))) & np.uint64(0xFFFFFFFF)
        z = (np.uint64(n) + (c << np.uint64(2))) & np.uint64(0xFFFFFFFF)
        return _shift_mix(y * _K2 ^ z * _K0) * _K2
    return np.full(count, _K2, np.uint64)


def _hash_len17to32(s: np.ndarray, n: int) -> np.ndarray:
    mul = _u64(int(_K2) + n * 2)
    a = _fetch64(s, 0) * _K1
    b = _fetch64(s, 8)
    c = _fetch64(s, n - 8) * mul
    d = _fetch64(s, n - 16) * _K2
    return _hash_len16(_rotate(a + b, 43) + _rotate(c, 30) + d, a + _rotate(b + _K2, 18) + c, mul)


def _hash_len33to64(s: np.ndarray, n: int) -> np.ndarray:
    mul = _u64(int(_K2) + n * 2)
    a = _fetch64(s, 0) * _K2
    b = _fetch64(s, 8)
    c = _fetch64(s, n - 8) * mul
    d = _fetch64(s, n - 16) * _K2
    y = _rotate(a + b, 43) + _rotate(c, 30) + d
    z = _hash_len16(y, a + _rotate(b + _K2, 18) + c, mul)
    e = _fetch64(s, 16) * mul
    f = _fetch64(s, 24)
    g = (y + _fetch64(s, n - 32)) * mul
    h = (z + _fetch64(s, n - 24)) * mul
    return _hash_len16(_rotate(e + f, 43) + _rotate(g, 30) + h, e + _rotate(f + a, 18) + g, mul)


def _weak_hash_len32_with_seeds(s: np.ndarray, offset: int, a, b):
    w, x, y, z = (_fetch64(s, offset + 8 * k) for k in range(4))
    a = a + w
    b = _rotate(b + a + z, 21)
    c = a
    a = a + x
    a = a + y
    b = b + _rotate(a, 44)
    return a + z, b + c


def fingerprint64(keys: np.ndarray) -> np.ndarray:
    """farmhash Fingerprint64 of every row of the uint8 matrix ``keys`` (uint64 results)."""
    keys = np.ascontiguousarray(keys, np.uint8)
    count, n = keys.shape
    if n <= 16:
        return _hash_len0to16(keys, n)
    if n <= 32:
        return _hash_len17to32(keys, n)
    if n <= 64:
        return _hash_len33to64(keys, n)
    seed = np.uint64(81)
    zeros = np.zeros(count, np.uint64)
    x = np.full(count, seed, np.uint64)
    y = np.full(count, seed, np.uint64) * _K1 + np.uint64(113)
    z = _shift_mix(y * _K2 + np.uint64(113)) * _K2
    v = (zeros, zeros)
    w = (zeros, zeros)
    x = x * _K2 + _fetch64(keys, 0)
    end = ((n - 1) // 64) * 64
    last64 = n - 64
    for s in range(0, end, 64):
        x = _rotate(x + y + v[0] + _fetch64(keys, s + 8), 37) * _K1
        y = _rotate(y + v[1] + _fetch64(keys, s + 48), 42) * _K1
        x = x ^ w[1]
        y = y + v[0] + _fetch64(keys, s + 40)
        z = _rotate(z + w[0], 33) * _K1
        v = _weak_hash_len32_with_seeds(keys, s, v[1] * _K1, x + w[0])
        w = _weak_hash_len32_with_seeds(keys, s + 32, z + w[1], y + _fetch64(keys, s + 16))
        z, x = x, z
    mul = _K1 + ((z & np.uint64(0xFF)) << np.uint64(1))
    s = last64
    w = (w[0] + np.uint64((n - 1) & 63), w[1])
    v = (v[0] + w[0], v[1])
    w = (w[0] + v[0], w[1])
    x = _rotate(x + y + v[0] + _fetch64(keys, s + 8), 37) * mul
    y = _rotate(y + v[1] + _fetch64(keys, s + 48), 42) * mul
    x = x ^ (w[1] * np.uint64(9))
    y = y + v[0] * np.uint64(9) + _fetch64(keys, s + 40)
    z = _rotate(z + w[0], 33) * mul
    v = _weak_hash_len32_with_seeds(keys, s, v[1] * mul, x + w[0])
    w = _weak_hash_len32_with_seeds(keys, s + 32, z + w[1], y + _fetch64(keys, s + 16))
    z, x = x, z
    return _hash_len16(_hash_len16(v[0], w[0], mul) + _shift_mix(y) * _K0 + z,
                       _hash_len16(v[1], w[1], mul) + x, mul)


# ---- LSH_PROJECTION ------------------------------------------------------------------------

SPARSE_DEPRECATED, DENSE, SPARSE = 1, 2, 3


def _lsh_signatures() -> list[Signature]:
    """The weight tensor (input 2) is optional: without it every input row weighs 1."""
    sigs = []
    for input_type in (T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM):
        sigs.append(Signature(27, [T.TENSOR_FLOAT32, input_type, T.TENSOR_FLOAT32, T.INT32], [T.TENSOR_INT32],
                              omittable=[2]))
        sigs.append(Signature(29, [T.TENSOR_FLOAT16, input_type, T.TENSOR_FLOAT16, T.INT32], [T.TENSOR_INT32],
                              omittable=[2]))
    sigs.append(Signature(29, [T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.INT32], [T.TENSOR_INT32],
                          omittable=[2]))
    sigs.append(Signature(29, [T.TENSOR_FLOAT16, T.TENSOR_FLOAT16, T.TENSOR_FLOAT16, T.INT32], [T.TENSOR_INT32],
                          omittable=[2]))
    return sigs


def lsh_bits(seeds: np.ndarray, rows: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """Sign bits (0/1) of sum_i weight_i * Fingerprint64(float32(seed) + row_i) for every seed."""
    seed_bytes = np.ascontiguousarray(seeds.astype(np.float32).reshape(-1)).view(np.uint8).reshape(-1, 4)
    n_rows = rows.shape[0]
    row_bytes = np.ascontiguousarray(rows).view(np.uint8).reshape(n_rows, -1)
    n_seeds = seed_bytes.shape[0]
    keys = np.concatenate([np.repeat(seed_bytes, n_rows, axis=0), np.tile(row_bytes, (n_seeds, 1))], axis=1)
    hashes = fingerprint64(keys).view(np.int64).astype(np.float64).reshape(n_seeds, n_rows)
    score = np.zeros(n_seeds, np.float64)
    for i in range(n_rows):  # double accumulation in row order, as the C++ loop
        score = score + (hashes[:, i] if weights is None else float(weights[i]) * hashes[:, i])
    return (score > 0).astype(np.int64)


@register
class LshProjection(OperationRegistration):
    code = OperationCode.LSH_PROJECTION
    zero_sized_inputs = None
    parameters = {3: "type"}
    incomparable = "sign hashes: any rounding difference flips an output bit"
    signatures = _lsh_signatures()

    def infer(self, call: Call):
        hash_arg, inp, weight, type_arg = call.ins
        check(hash_arg.rank == 2, f"LSH_PROJECTION: the hash tensor must be 2-D, got rank {hash_arg.rank}")
        num_hash, num_bits = hash_arg.shape
        check(num_bits <= 32, f"LSH_PROJECTION: at most 32 bits per hash function, got {num_bits}")
        check(inp.rank >= 1, "LSH_PROJECTION: the input must have rank >= 1")
        kind = type_arg.scalar()
        check(kind in (SPARSE_DEPRECATED, DENSE, SPARSE), f"LSH_PROJECTION: unknown projection type {kind}")
        if kind != DENSE:
            check(num_bits + int(np.ceil(np.log2(num_hash))) <= 32 if num_hash > 0 else True,
                  f"LSH_PROJECTION: sparse projections need bits + ceil(log2(hash functions)) <= 32, got "
                  f"{num_bits} bits and {num_hash} functions")
        if not weight.omitted and weight.shape is not None:
            check(weight.rank == 1, f"LSH_PROJECTION: the weight tensor must be 1-D, got rank {weight.rank}")
            check(weight.shape[0] == inp.shape[0],
                  f"LSH_PROJECTION: {weight.shape[0]} weights for {inp.shape[0]} input rows")
        return [(num_hash * num_bits,) if kind == DENSE else (num_hash,)]

    def execute(self, call: Call):
        hash_arg, inp, weight, type_arg = call.ins
        kind = type_arg.scalar()
        num_hash, num_bits = hash_arg.shape
        weights = None if weight.omitted else weight.value.astype(np.float64)
        bits = lsh_bits(hash_arg.value, inp.value, weights).reshape(num_hash, num_bits)
        if kind == DENSE:
            return [bits.reshape(-1).astype(np.int32)]
        signature = np.zeros(num_hash, np.int64)
        for j in range(num_bits):
            signature = ((signature << 1) | bits[:, j]) & 0xFFFFFFFF
        if kind == SPARSE:
            signature = (signature + np.arange(num_hash, dtype=np.int64) * (1 << num_bits)) & 0xFFFFFFFF
        return [signature.astype(np.uint32).view(np.int32)]
