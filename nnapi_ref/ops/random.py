"""RANDOM_MULTINOMIAL: draws class indices from softmax(logits), row by row.

The generator is numpy's PCG64 seeded from the two seed values (deterministic for given seeds;
freshly random when both are 0, as NNAPI specifies). NNAPI's CPU implementation uses a Philox
generator, so individual samples differ from it; only the distribution is specified.
"""
from __future__ import annotations

import numpy as np

from nnapi_ref.ops.base import Call, OperationCode, OperationRegistration, Signature, T, check, register
from nnapi_ref.types import ResultCode


@register
class RandomMultinomial(OperationRegistration):
    code = OperationCode.RANDOM_MULTINOMIAL
    zero_sized_inputs = ResultCode.BAD_DATA
    parameters = {1: "samples", 2: "seeds"}
    incomparable = "random samples: compared by distribution, not element by element"
    signatures = [Signature(29, [t, T.INT32, T.TENSOR_INT32], [T.TENSOR_INT32])
                  for t in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)]

    def infer(self, call: Call):
        logits, samples, seeds = call.ins
        check(logits.rank == 2, f"RANDOM_MULTINOMIAL: logits must be 2-D [batches, classes], got rank {logits.rank}")
        check(seeds.rank == 1 and seeds.shape[0] == 2,
              f"RANDOM_MULTINOMIAL: seeds must have shape [2], got {list(seeds.shape)}")
        n = samples.scalar()
        check(n >= 0, f"RANDOM_MULTINOMIAL: the number of samples must not be negative, got {n}")
        return [(logits.shape[0], n)]

    def execute(self, call: Call):
        logits, samples, seeds = call.ins
        n = samples.scalar()
        s0, s1 = (int(s) & 0xFFFFFFFF for s in seeds.value.reshape(-1))
        rng = np.random.default_rng() if s0 == 0 and s1 == 0 else np.random.default_rng([s0, s1])
        x = logits.value.astype(np.float64)
        batches, classes = x.shape
        with np.errstate(invalid="ignore", over="ignore"):
            p = np.exp(x - x.max(axis=1, keepdims=True))
            cdf = np.cumsum(p, axis=1) / p.sum(axis=1, keepdims=True)
        u = rng.random((batches, n))
        # One searchsorted for all rows: offset row b's CDF and uniforms by 2 * b.
        offset = 2.0 * np.arange(batches)[:, None]
        flat = np.searchsorted((cdf + offset).ravel(), (u + offset).ravel(), side="right")
        idx = flat.reshape(batches, n) - classes * np.arange(batches)[:, None]
        return [np.clip(idx, 0, max(classes - 1, 0)).astype(np.int32)]
