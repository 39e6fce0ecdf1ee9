#!/usr/bin/env python3
"""Generate the project's own NNAPI test-vector corpus (``cts/corpus/*.json``).

Run ``python cts/corpus/generate.py`` from anywhere; it is deterministic (fixed seeds).

Expected values come from independent math written here from the NeuralNetworks.h
documentation (numpy / scipy, naive loops, hand-derived values) -- never from ``nnapi_ref``.
Quantized results are computed in float64 and quantized with round-half-away-from-zero and
clamping. This script does not import anything from the project.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from scipy import special

HERE = Path(__file__).resolve().parent
FORMAT = "nnapi-test-vector/1"

F32, F16, I32, B8 = "TENSOR_FLOAT32", "TENSOR_FLOAT16", "TENSOR_INT32", "TENSOR_BOOL8"
QA, QS = "TENSOR_QUANT8_ASYMM", "TENSOR_QUANT8_ASYMM_SIGNED"
Q8S, QPC = "TENSOR_QUANT8_SYMM", "TENSOR_QUANT8_SYMM_PER_CHANNEL"
Q16A, Q16S = "TENSOR_QUANT16_ASYMM", "TENSOR_QUANT16_SYMM"
QRANGE = {QA: (0, 255), QS: (-128, 127), Q8S: (-128, 127), QPC: (-128, 127), Q16A: (0, 65535),
          Q16S: (-32768, 32767), I32: (-2**31, 2**31 - 1)}
QUANT = (QA, QS, Q8S, QPC, Q16A, Q16S)

# First feature level at which each operation accepts each tensor type (NeuralNetworks.h
# "Available since" notes; 1000006/1000007 = feature levels 6/7).
LEVELS = {
    'ADD': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'INT32': 30, 'QUANT8_ASYMM_SIGNED': 30},
    'AVERAGE_POOL_2D': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'CONCATENATION': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'CONV_2D': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'DEPTHWISE_CONV_2D': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'DEPTH_TO_SPACE': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'DEQUANTIZE': {'QUANT8_ASYMM': 27, 'QUANT8_SYMM': 29, 'QUANT8_SYMM_PER_CHANNEL': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'EMBEDDING_LOOKUP': {'FLOAT32': 27, 'INT32': 29, 'QUANT8_ASYMM': 29, 'FLOAT16': 30, 'QUANT8_ASYMM_SIGNED': 30},
    'FLOOR': {'FLOAT32': 27, 'FLOAT16': 29},
    'FULLY_CONNECTED': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'HASHTABLE_LOOKUP': {'FLOAT32': 27, 'INT32': 27, 'QUANT8_ASYMM': 27},
    'L2_NORMALIZATION': {'FLOAT32': 27, 'FLOAT16': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'L2_POOL_2D': {'FLOAT32': 27, 'FLOAT16': 29},
    'LOCAL_RESPONSE_NORMALIZATION': {'FLOAT32': 27, 'FLOAT16': 29},
    'LOGISTIC': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'LSH_PROJECTION': {'FLOAT32': 27, 'INT32': 27, 'FLOAT16': 29},
    'LSTM': {'FLOAT32': 27, 'FLOAT16': 29},
    'MAX_POOL_2D': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'MUL': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'INT32': 30, 'QUANT8_ASYMM_SIGNED': 30},
    'RELU': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'RELU1': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'RELU6': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'RESHAPE': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30, 'INT32': 1000006},
    'RESIZE_BILINEAR': {'FLOAT32': 27, 'FLOAT16': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'RNN': {'FLOAT32': 27, 'FLOAT16': 29},
    'SOFTMAX': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'SPACE_TO_DEPTH': {'FLOAT32': 27, 'QUANT8_ASYMM': 27, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'SVDF': {'FLOAT32': 27, 'FLOAT16': 29},
    'TANH': {'FLOAT32': 27, 'FLOAT16': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'BATCH_TO_SPACE_ND': {'FLOAT32': 28, 'QUANT8_ASYMM': 28, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'DIV': {'FLOAT32': 28, 'FLOAT16': 29, 'INT32': 30},
    'MEAN': {'FLOAT32': 28, 'QUANT8_ASYMM': 28, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'PAD': {'FLOAT32': 28, 'QUANT8_ASYMM': 28, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'SPACE_TO_BATCH_ND': {'FLOAT32': 28, 'QUANT8_ASYMM': 28, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'SQUEEZE': {'FLOAT32': 28, 'QUANT8_ASYMM': 28, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'STRIDED_SLICE': {'FLOAT32': 28, 'QUANT8_ASYMM': 28, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'SUB': {'FLOAT32': 28, 'FLOAT16': 29, 'QUANT8_ASYMM': 29, 'INT32': 30, 'QUANT8_ASYMM_SIGNED': 30},
    'TRANSPOSE': {'FLOAT32': 28, 'QUANT8_ASYMM': 28, 'FLOAT16': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'ABS': {'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 30},
    'ARGMAX': {'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'ARGMIN': {'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'AXIS_ALIGNED_BBOX_TRANSFORM': {'FLOAT16': 29, 'FLOAT32': 29, 'QUANT16_ASYMM': 29},
    'BIDIRECTIONAL_SEQUENCE_LSTM': {'FLOAT16': 29, 'FLOAT32': 29},
    'BIDIRECTIONAL_SEQUENCE_RNN': {'FLOAT16': 29, 'FLOAT32': 29},
    'BOX_WITH_NMS_LIMIT': {'FLOAT16': 29, 'FLOAT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'CAST': {'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'BOOL8': 30, 'QUANT16_ASYMM': 30, 'QUANT16_SYMM': 30, 'QUANT8_ASYMM_SIGNED': 30, 'QUANT8_SYMM': 30},
    'CHANNEL_SHUFFLE': {'FLOAT16': 29, 'FLOAT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'DETECTION_POSTPROCESSING': {'FLOAT16': 29, 'FLOAT32': 29},
    'EQUAL': {'BOOL8': 29, 'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'EXP': {'FLOAT16': 29, 'FLOAT32': 29},
    'EXPAND_DIMS': {'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'GATHER': {'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'GENERATE_PROPOSALS': {'FLOAT16': 29, 'FLOAT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'GREATER': {'BOOL8': 29, 'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'GREATER_EQUAL': {'BOOL8': 29, 'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'GROUPED_CONV_2D': {'FLOAT16': 29, 'FLOAT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'HEATMAP_MAX_KEYPOINT': {'FLOAT16': 29, 'FLOAT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'INSTANCE_NORMALIZATION': {'FLOAT16': 29, 'FLOAT32': 29},
    'LESS': {'BOOL8': 29, 'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'LESS_EQUAL': {'BOOL8': 29, 'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'LOG': {'FLOAT16': 29, 'FLOAT32': 29},
    'LOGICAL_AND': {'BOOL8': 29},
    'LOGICAL_NOT': {'BOOL8': 29},
    'LOGICAL_OR': {'BOOL8': 29},
    'LOG_SOFTMAX': {'FLOAT16': 29, 'FLOAT32': 29},
    'MAXIMUM': {'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'MINIMUM': {'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'NEG': {'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29},
    'NOT_EQUAL': {'BOOL8': 29, 'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'PAD_V2': {'FLOAT16': 29, 'FLOAT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'POW': {'FLOAT16': 29, 'FLOAT32': 29},
    'PRELU': {'FLOAT16': 29, 'FLOAT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'QUANTIZE': {'FLOAT16': 29, 'FLOAT32': 29},
    'QUANTIZED_16BIT_LSTM': {'QUANT8_ASYMM': 29},
    'RANDOM_MULTINOMIAL': {'INT32': 29},
    'REDUCE_ALL': {'BOOL8': 29},
    'REDUCE_ANY': {'BOOL8': 29},
    'REDUCE_MAX': {'FLOAT16': 29, 'FLOAT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'REDUCE_MIN': {'FLOAT16': 29, 'FLOAT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'REDUCE_PROD': {'FLOAT16': 29, 'FLOAT32': 29},
    'REDUCE_SUM': {'FLOAT16': 29, 'FLOAT32': 29},
    'ROI_ALIGN': {'FLOAT16': 29, 'FLOAT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'ROI_POOLING': {'FLOAT16': 29, 'FLOAT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'RSQRT': {'FLOAT16': 29, 'FLOAT32': 29, 'QUANT8_ASYMM': 1000007, 'QUANT8_ASYMM_SIGNED': 1000007},
    'SELECT': {'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'SIN': {'FLOAT16': 29, 'FLOAT32': 29},
    'SLICE': {'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'SPLIT': {'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'SQRT': {'FLOAT16': 29, 'FLOAT32': 29},
    'TILE': {'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'TOPK_V2': {'FLOAT16': 29, 'FLOAT32': 29, 'INT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'TRANSPOSE_CONV_2D': {'FLOAT16': 29, 'FLOAT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'UNIDIRECTIONAL_SEQUENCE_LSTM': {'FLOAT16': 29, 'FLOAT32': 29},
    'UNIDIRECTIONAL_SEQUENCE_RNN': {'FLOAT16': 29, 'FLOAT32': 29},
    'RESIZE_NEAREST_NEIGHBOR': {'FLOAT16': 29, 'FLOAT32': 29, 'QUANT8_ASYMM': 29, 'QUANT8_ASYMM_SIGNED': 30},
    'QUANTIZED_LSTM': {'QUANT8_ASYMM_SIGNED': 30},
    'IF': {'BOOL8': 30},
    'WHILE': {'FLOAT32': 30},
    'ELU': {'FLOAT16': 30, 'FLOAT32': 30},
    'HARD_SWISH': {'FLOAT16': 30, 'FLOAT32': 30, 'QUANT8_ASYMM': 30, 'QUANT8_ASYMM_SIGNED': 30},
    'FILL': {'INT32': 30},
    'RANK': {'BOOL8': 30, 'FLOAT16': 30, 'FLOAT32': 30, 'INT32': 30, 'QUANT16_ASYMM': 30, 'QUANT16_SYMM': 30, 'QUANT8_ASYMM': 30, 'QUANT8_ASYMM_SIGNED': 30, 'QUANT8_SYMM': 30, 'QUANT8_SYMM_PER_CHANNEL': 30},
    'BATCH_MATMUL': {'FLOAT16': 1000006, 'FLOAT32': 1000006, 'INT32': 1000006, 'QUANT8_ASYMM_SIGNED': 1000006},
    'PACK': {'FLOAT16': 1000006, 'FLOAT32': 1000006, 'INT32': 1000006, 'QUANT8_ASYMM': 1000006, 'QUANT8_ASYMM_SIGNED': 1000006},
    'MIRROR_PAD': {'FLOAT16': 1000007, 'FLOAT32': 1000007, 'INT32': 1000007, 'QUANT8_ASYMM': 1000007, 'QUANT8_ASYMM_SIGNED': 1000007},
    'REVERSE': {'FLOAT16': 1000007, 'FLOAT32': 1000007, 'INT32': 1000007, 'QUANT8_ASYMM': 1000007, 'QUANT8_ASYMM_SIGNED': 1000007},
}


def short(t: str) -> str:
    return t.replace("TENSOR_", "")


def rha(x):
    """Round half away from zero."""
    x = np.asarray(x, np.float64)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


class T:
    """A tensor type: operand code plus quantization parameters."""

    def __init__(self, code, scale=0.0, zp=0, cq=None):
        self.code, self.scale, self.zp, self.cq = code, float(np.float32(scale)), int(zp), cq

    @property
    def quant(self):
        return self.code in QUANT

    def enc(self, real):
        """Real values -> stored values (quantize / cast)."""
        a = np.asarray(real)
        if self.code == F32:
            return a.astype(np.float32)
        if self.code == F16:
            return a.astype(np.float16)
        if self.code == B8:
            return a.astype(bool)
        if self.code == I32 and not self.scale:
            return a.astype(np.int64)
        lo, hi = QRANGE[self.code]
        if self.cq is not None:
            scales, dim = self.cq
            shape = [1] * a.ndim
            shape[dim] = -1
            q = rha(a / np.asarray(scales, np.float64).reshape(shape))
        else:
            q = rha(a / self.scale) + self.zp
        return np.clip(q, lo, hi).astype(np.int64)

    def dec(self, stored):
        """Stored values -> the real values the operation sees."""
        a = np.asarray(stored)
        if self.code in (F32, F16):
            return a.astype(np.float64)
        if self.code == B8 or (self.code == I32 and not self.scale):
            return a
        if self.cq is not None:
            scales, dim = self.cq
            shape = [1] * a.ndim
            shape[dim] = -1
            return a.astype(np.float64) * np.asarray(scales, np.float64).reshape(shape)
        return (a.astype(np.float64) - self.zp) * self.scale

    def rt(self, real):
        """Round-trip: the real value actually representable."""
        return self.dec(self.enc(real))


def tq(code, scale=None, zp=None):
    """Default tensor types: quant8 asymm scale 0.5 zp 128, signed scale 0.5 zp -10."""
    if code == QA:
        return T(code, 0.5 if scale is None else scale, 128 if zp is None else zp)
    if code == QS:
        return T(code, 0.5 if scale is None else scale, -10 if zp is None else zp)
    if code in (Q8S, Q16S):
        return T(code, 0.5 if scale is None else scale, 0)
    if code == Q16A:
        return T(code, 0.125 if scale is None else scale, 32768 if zp is None else zp)
    return T(code, scale or 0.0, zp or 0)


def enc_list(a, code):
    flat = np.asarray(a).reshape(-1)
    if code in (F32, F16, "FLOAT32", "FLOAT16"):
        out = []
        for v in flat:
            v = np.float16(v) if code in (F16, "FLOAT16") else np.float32(v)
            if math.isnan(v):
                out.append("NaN")
            elif math.isinf(v):
                out.append("Infinity" if v > 0 else "-Infinity")
            else:
                f = float(str(v))
                out.append(int(f) if f.is_integer() and abs(f) < 2**53 else f)
        return out
    if code in (B8, "BOOL"):
        return [bool(v) for v in flat]
    return [int(v) for v in flat]


# -- operand specs -------------------------------------------------------------------------------

class Spec:
    def __init__(self, life, code, dims, data=None, scale=0.0, zp=0, cq=None, ignored=False):
        self.life, self.code, self.dims, self.data = life, code, list(dims), data
        self.scale, self.zp, self.cq, self.ignored = float(np.float32(scale)), zp, cq, ignored

    def json(self):
        """The operand; to keep the files small, fields at their default value (scale 0.0,
        zero_point 0, is_ignored false, channel_quant null, data null) are left out, as the
        format's reader (nnapi_ref.vectors) allows."""
        d = {"type": self.code, "dimensions": self.dims, "lifetime": self.life}
        if self.scale:
            d["scale"] = self.scale
        if self.zp:
            d["zero_point"] = self.zp
        if self.ignored:
            d["is_ignored"] = True
        if self.cq is not None:
            d["channel_quant"] = {"scales": enc_list(self.cq[0], F32), "channel_dim": self.cq[1]}
        if self.data is not None:
            d["data"] = enc_list(self.data, self.code)
        return d


def _spec(life, t, real, dims=None, stored=None, ignored=False):
    if stored is None:
        stored = t.enc(real)
    stored = np.asarray(stored)
    if dims is None:
        dims = stored.shape
    return Spec(life, t.code, dims, stored, t.scale, t.zp, t.cq, ignored)


def I(t, real=None, dims=None, stored=None):
    """A model input, fed with ``real`` (quantized for quant types)."""
    return _spec("SUBGRAPH_INPUT", t, real, dims, stored)


def C(t, real=None, dims=None, stored=None):
    """A constant tensor."""
    return _spec("CONSTANT_COPY", t, real, dims, stored)


def O(t, real=None, dims=None, stored=None, ignored=False):
    """A model output with its expected value (quantized from the float64 result)."""
    return _spec("SUBGRAPH_OUTPUT", t, real, dims, stored, ignored)


def i32(v):
    return Spec("CONSTANT_COPY", "INT32", [], [int(v)])


def fsc(t, v):
    """A float scalar matching the tensor type (FLOAT16 for float16 models, else FLOAT32)."""
    code = "FLOAT16" if (t.code if isinstance(t, T) else t) == F16 else "FLOAT32"
    return Spec("CONSTANT_COPY", code, [], [v])


def bsc(v):
    return Spec("CONSTANT_COPY", "BOOL", [], [bool(v)])


def NONE(code):
    """An omitted optional input (quantized types still need a valid scale)."""
    return Spec("NO_VALUE", code, [0] if code.startswith("TENSOR") else [], None,
                scale=1.0 if code in QUANT else 0.0)


def ci32(values, dims=None):
    a = np.asarray(values, np.int64)
    return Spec("CONSTANT_COPY", I32, a.shape if dims is None else dims, a)


class Graph:
    def __init__(self):
        self.operands, self.operations, self.inputs, self.outputs = [], [], [], []

    def add(self, spec):
        if isinstance(spec, int):
            return spec
        k = len(self.operands)
        self.operands.append(spec)
        if spec.life == "SUBGRAPH_INPUT":
            self.inputs.append(k)
        elif spec.life == "SUBGRAPH_OUTPUT":
            self.outputs.append(k)
        return k

    def temp(self, t, dims):
        return self.add(Spec("TEMPORARY_VARIABLE", t.code, dims, None, t.scale, t.zp, t.cq))

    def op(self, name, ins, outs):
        ins = [self.add(s) for s in ins]
        outs = [self.add(s) for s in outs]
        self.operations.append({"type": name, "inputs": ins, "outputs": outs})
        return outs

    def json(self):
        return {"operands": [o.json() for o in self.operands], "operations": self.operations,
                "input_indexes": self.inputs, "output_indexes": self.outputs}


TESTS: dict[str, list] = {}   # family -> tests
FAMILY = ["misc"]
NAMES: set = set()


def level_of(op, *codes, at_least=27):
    lv = at_least
    for c in codes:
        lv = max(lv, LEVELS[op][short(c)])
    return lv


def emit(name, level, graph, relaxed=False, fail=False, referenced=(), multinomial=0.0):
    name = "nnts_" + name
    assert name not in NAMES, name
    NAMES.add(name)
    if relaxed:
        level = max(level, 28)
    TESTS.setdefault(FAMILY[0], []).append(
        {"name": name, "min_feature_level": level, "expect_failure": fail, "is_relaxed": relaxed,
         "expected_multinomial_distribution_tolerance": multinomial, "main": graph.json(),
         "referenced": [g.json() for g in referenced]})


def model(name, op, ins, outs, level=None, types=None, relaxed=False, fail=False, at_least=27):
    """One-operation model. ``level`` defaults to the op's level for ``types`` (the tensor codes)."""
    g = Graph()
    g.op(op, ins, outs)
    if level is None:
        codes = types or [s.code for s in list(ins) + list(outs)
                          if isinstance(s, Spec) and s.code.startswith("TENSOR") and short(s.code) in LEVELS[op]]
        level = level_of(op, *codes, at_least=at_least)
    emit(name, level, g, relaxed=relaxed, fail=fail)


def family(name):
    FAMILY[0] = name


def tname(code, relaxed=False):
    return "relaxed" if relaxed else short(code).lower()


# Type sets used by many ops (float32, relaxed float32, float16, quant8 asymm/signed).
def variants(op, extra=()):
    """(code, relaxed) pairs: every tensor type the op supports, plus a relaxed float32 variant."""
    out = []
    for s in LEVELS[op]:
        code = "TENSOR_" + s
        if code in (F32, F16, QA, QS, I32) + tuple(extra):
            out.append((code, False))
    if "FLOAT32" in LEVELS[op]:
        out.append((F32, True))
    return out


RNG = np.random.default_rng(20240601)


def rnd(shape, lo=-4.0, hi=4.0, step=0.5, rng=None):
    """Random values on a grid (exactly representable in every type with scale ``step``)."""
    rng = rng or RNG
    n = int(round((hi - lo) / step))
    return lo + step * rng.integers(0, n + 1, size=shape)


# == elementwise ==================================================================================

ACT = {0: lambda x: x, 1: lambda x: np.maximum(x, 0), 2: lambda x: np.clip(x, -1, 1), 3: lambda x: np.clip(x, 0, 6)}


def gen_binary():
    family("elementwise_binary")
    rng = np.random.default_rng(1)
    fns = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply}
    for op, fn in fns.items():
        for code, relaxed in variants(op):
            a = rnd((2, 3), rng=rng)
            b = rnd((3,), rng=rng) if op != "MUL" else rnd((3,), -2, 2, rng=rng)
            act = 1 if code in (QA, QS) else 0
            if code == I32:
                t = T(I32)
                act = 0
            else:
                t = tq(code)
            out_t = tq(code, scale=1.0) if (op == "MUL" and t.quant) else t
            ra, rb = t.rt(a), t.rt(b)
            model(f"{op.lower()}_{tname(code, relaxed)}_broadcast", op,
                  [I(t, ra), I(t, rb), i32(act)], [O(out_t, ACT[act](fn(ra, rb)))], relaxed=relaxed)
        # fused activations on float32
        for act in ((2, 3) if op == "ADD" else (3,)):
            a, b = rnd((4,), rng=rng), rnd((4,), rng=rng)
            model(f"{op.lower()}_float32_act{act}", op, [I(T(F32), a), I(T(F32), b), i32(act)],
                  [O(T(F32), ACT[act](fn(a, b)))])
    # quant with differing scales (ADD)
    for code in (QA, QS):
        ta, tb, to = T(code, 0.25, 100 if code == QA else 3), T(code, 0.5, 120 if code == QA else -7), \
            T(code, 0.75, 128 if code == QA else 1)
        a, b = ta.rt(rnd((2, 2), -8, 8, 0.25, rng)), tb.rt(rnd((2, 2), -8, 8, 0.5, rng))
        for op, fn in (("ADD", np.add), ("SUB", np.subtract)):
            model(f"{op.lower()}_{short(code).lower()}_scales", op, [I(ta, a), I(tb, b), i32(0)],
                  [O(to, fn(a, b))], at_least=29 if op == "SUB" else 27)
    # DIV
    for code, relaxed in variants("DIV"):
        if code == I32:
            a = np.array([7, -7, 7, -7, 6, 0])
            b = np.array([2, 2, -2, -2, 3, 5])
            # NNAPI: integer division rounds toward negative infinity
            model("div_int32", "DIV", [I(T(I32), a), I(T(I32), b), i32(0)], [O(T(I32), np.floor_divide(a, b))])
            continue
        t = T(code)
        a = rnd((2, 3), rng=rng)
        b = np.array([0.5, -2.0, 4.0])
        model(f"div_{tname(code, relaxed)}", "DIV", [I(t, a), I(t, b), i32(0)], [O(t, a / b)], relaxed=relaxed)
    model("div_float32_relu", "DIV", [I(T(F32), [1.0, -3.0, 5.0]), I(T(F32), [4.0, 2.0, 8.0]), i32(1)],
          [O(T(F32), [0.25, 0.0, 0.625])])
    # MAXIMUM / MINIMUM
    for op, fn in (("MAXIMUM", np.maximum), ("MINIMUM", np.minimum)):
        for code, relaxed in variants(op):
            t = T(I32) if code == I32 else tq(code)
            a, b = t.rt(rnd((2, 3), rng=rng)), t.rt(rnd((1, 3), rng=rng))
            model(f"{op.lower()}_{tname(code, relaxed)}", op, [I(t, a), I(t, b)], [O(t, fn(a, b))], relaxed=relaxed)
        for code in (QA, QS):
            ta, tb, to = tq(code), T(code, 0.25, 5), T(code, 1.0, 2)
            a, b = ta.rt(rnd((4,), rng=rng)), tb.rt(rnd((4,), rng=rng))
            model(f"{op.lower()}_{short(code).lower()}_scales", op, [I(ta, a), I(tb, b)], [O(to, fn(a, b))])
    # POW
    for code, relaxed in variants("POW"):
        t = T(code)
        a = np.array([[1.0, 2.0, 3.0], [0.5, 4.0, 1.5]])
        b = np.array([2.0, 0.5, -1.0])
        model(f"pow_{tname(code, relaxed)}", "POW", [I(t, a), I(t, b)], [O(t, np.power(t.rt(a), t.rt(b)))],
              relaxed=relaxed)
    # invalid: fused activation code 4 does not exist
    model("add_float32_bad_activation", "ADD", [I(T(F32), [1.0, 2.0]), I(T(F32), [1.0, 2.0]), i32(4)],
          [O(T(F32), [0.0, 0.0])], fail=True)
    # invalid: shapes that do not broadcast
    model("add_float32_bad_broadcast", "ADD", [I(T(F32), np.zeros((2, 3))), I(T(F32), np.zeros((2,))), i32(0)],
          [O(T(F32), np.zeros((2, 3)))], fail=True)


def gen_unary():
    family("elementwise_unary")
    rng = np.random.default_rng(2)
    x_any = np.array([[-2.5, -1.0, -0.25, 0.0], [0.75, 1.5, 3.0, 4.25]])
    x_pos = np.array([[0.25, 0.5, 1.0, 2.0], [3.0, 4.0, 6.25, 9.0]])
    table = {
        "ABS": (np.abs, x_any), "EXP": (np.exp, x_any), "LOG": (np.log, x_pos), "NEG": (np.negative, x_any),
        "RSQRT": (lambda v: 1 / np.sqrt(v), x_pos), "SIN": (np.sin, x_any), "SQRT": (np.sqrt, x_pos),
        "FLOOR": (np.floor, x_any),
    }
    for op, (fn, x) in table.items():
        for code, relaxed in variants(op):
            if code == I32:
                xi = np.array([[-5, 0, 3], [7, -1, 2]])
                model(f"{op.lower()}_int32", op, [I(T(I32), xi)], [O(T(I32), fn(xi))])
                continue
            if code in (QA, QS):  # RSQRT quant (feature level 7)
                ti = T(code, 0.25, 0 if code == QA else -128)
                to = T(code, 1 / 32, 0 if code == QA else -128)
                xq = np.array([0.25, 0.5, 1.0, 2.0, 4.0, 9.0, 16.0, 25.0])
                model(f"{op.lower()}_{short(code).lower()}", op, [I(ti, xq)], [O(to, fn(ti.rt(xq)))])
                continue
            t = T(code)
            model(f"{op.lower()}_{tname(code, relaxed)}", op, [I(t, x)], [O(t, fn(t.rt(x)))], relaxed=relaxed)
    # FLOOR on a rank-4 tensor
    x = rnd((1, 2, 2, 2), -3, 3, 0.25, rng)
    model("floor_float32_4d", "FLOOR", [I(T(F32), x)], [O(T(F32), np.floor(x))])


# == activations ==================================================================================

def gen_activations():
    family("activations")
    rng = np.random.default_rng(3)
    x = np.array([[-6.5, -3.0, -1.0, -0.5], [0.0, 0.5, 1.0, 2.5], [4.0, 6.0, 7.5, -0.25]])
    simple = {"RELU": lambda v: np.maximum(v, 0), "RELU1": lambda v: np.clip(v, -1, 1),
              "RELU6": lambda v: np.clip(v, 0, 6)}
    for op, fn in simple.items():
        for code, relaxed in variants(op):
            t = tq(code)
            model(f"{op.lower()}_{tname(code, relaxed)}", op, [I(t, x)], [O(t, fn(t.rt(x)))], relaxed=relaxed)
    sig = lambda v: 1 / (1 + np.exp(-v))
    outq = {"LOGISTIC": ({QA: (1 / 256, 0), QS: (1 / 256, -128)}, sig),
            "TANH": ({QA: (1 / 128, 128), QS: (1 / 128, 0)}, np.tanh)}
    for op, (oq, fn) in outq.items():
        for code, relaxed in variants(op):
            t = tq(code, scale=0.125) if code in (QA, QS) else T(code)
            to = T(code, *oq[code]) if code in oq else t
            xv = x / 2
            model(f"{op.lower()}_{tname(code, relaxed)}", op, [I(t, xv)], [O(to, fn(t.rt(xv)))], relaxed=relaxed)
    # ELU
    for code, relaxed in variants("ELU"):
        t = T(code)
        model(f"elu_{tname(code, relaxed)}", "ELU", [I(t, x), fsc(t, 0.5)],
              [O(t, np.where(x > 0, x, 0.5 * (np.exp(t.rt(x)) - 1)))], relaxed=relaxed)
    # HARD_SWISH: x * relu6(x + 3) / 6
    hs = lambda v: v * np.clip(v + 3, 0, 6) / 6
    for code, relaxed in variants("HARD_SWISH"):
        t = tq(code, scale=0.125) if code in (QA, QS) else T(code)
        to = tq(code, scale=1 / 16) if code in (QA, QS) else t
        xv = np.array([-4.0, -3.0, -2.5, -1.0, -0.375, 0.0, 0.625, 1.5, 2.875, 3.0, 4.25, 5.0])
        model(f"hard_swish_{tname(code, relaxed)}", "HARD_SWISH", [I(t, xv)], [O(to, hs(t.rt(xv)))],
              relaxed=relaxed)
    # PRELU: x if x >= 0 else alpha * x (alpha broadcast)
    for code, relaxed in variants("PRELU"):
        t = tq(code)
        ta = T(code, 0.25, 128 if code == QA else 0) if t.quant else t
        to = T(code, 0.25, 120 if code == QA else 5) if t.quant else t
        xv = t.rt(rnd((1, 2, 2, 3), -6, 6, rng=rng))
        al = ta.rt(np.array([0.0, 0.5, -1.25]))
        model(f"prelu_{tname(code, relaxed)}", "PRELU", [I(t, xv), C(ta, al)],
              [O(to, np.where(xv >= 0, xv, xv * al))], relaxed=relaxed)
    # SOFTMAX: exp(beta*(x - max)) / sum
    for code, relaxed in variants("SOFTMAX"):
        t = tq(code, scale=0.25) if code in (QA, QS) else T(code)
        to = T(code, 1 / 256, 0 if code == QA else -128) if t.quant else t
        xv = t.rt(rnd((2, 5), -3, 3, 0.25, rng))
        model(f"softmax_{tname(code, relaxed)}", "SOFTMAX", [I(t, xv), fsc(t, 1.0)],
              [O(to, special.softmax(xv, axis=-1))], relaxed=relaxed)
        if code == F16 or relaxed:
            continue
        # beta != 1 and an explicit axis (feature level 3)
        xv = t.rt(rnd((2, 3, 2), -2, 2, 0.25, rng))
        model(f"softmax_{tname(code, relaxed)}_axis1_beta", "SOFTMAX", [I(t, xv), fsc(t, 0.5), i32(1)],
              [O(to, special.softmax(0.5 * xv, axis=1))], relaxed=relaxed, at_least=29)
    model("softmax_float32_4d", "SOFTMAX", [I(T(F32), x.reshape(1, 3, 1, 4)), fsc(F32, 2.0)],
          [O(T(F32), special.softmax(2 * x.reshape(1, 3, 1, 4), axis=-1))])
    model("softmax_float32_bad_beta", "SOFTMAX", [I(T(F32), [[1.0, 2.0]]), fsc(F32, 0.0)],
          [O(T(F32), [[0.5, 0.5]])], fail=True)
    # LOG_SOFTMAX: beta*x - max - log(sum(exp(beta*x - max)))
    for code, relaxed in variants("LOG_SOFTMAX"):
        t = T(code)
        xv = rnd((2, 4), -3, 3, 0.25, rng)
        model(f"log_softmax_{tname(code, relaxed)}", "LOG_SOFTMAX", [I(t, xv), fsc(t, 1.0), i32(-1)],
              [O(t, special.log_softmax(xv, axis=-1))], relaxed=relaxed)
        model(f"log_softmax_{tname(code, relaxed)}_axis0", "LOG_SOFTMAX", [I(t, xv), fsc(t, 2.0), i32(0)],
              [O(t, special.log_softmax(2 * xv, axis=0))], relaxed=relaxed)


# == comparisons, logical, select =================================================================

def gen_comparisons():
    family("comparisons")
    rng = np.random.default_rng(4)
    fns = {"EQUAL": np.equal, "NOT_EQUAL": np.not_equal, "GREATER": np.greater, "GREATER_EQUAL": np.greater_equal,
           "LESS": np.less, "LESS_EQUAL": np.less_equal}
    for op, fn in fns.items():
        for code, relaxed in variants(op, extra=(B8,)):
            if relaxed:
                continue
            if code == B8:
                a = np.array([True, True, False, False])
                b = np.array([True, False, True, False])
                model(f"{op.lower()}_bool8", op, [I(T(B8), a), I(T(B8), b)], [O(T(B8), fn(a, b))])
                continue
            t = tq(code, scale=1.0) if code == I32 else tq(code)
            a = rnd((2, 3), -2, 2, rng=rng)
            b = np.array([-0.5, 0.0, 1.0])
            a[0] = b  # some equal elements
            model(f"{op.lower()}_{tname(code, relaxed)}", op, [I(t, a), I(t, b)], [O(T(B8), fn(a, b))],
                  relaxed=relaxed, types=[code])
        for code in ((QA, QS) if op in ("EQUAL", "GREATER") else ()):  # differing scales: compare real values
            ta, tb = T(code, 0.5, 10), T(code, 0.25, -20 if code == QS else 40)
            a = np.array([1.0, 2.0, -1.0, 3.5, 0.0])
            b = np.array([1.0, 1.75, -0.75, 3.75, 0.0])
            model(f"{op.lower()}_{short(code).lower()}_scales", op, [I(ta, a), I(tb, b)], [O(T(B8), fn(a, b))],
                  types=[code])
    a = np.array([[True, False, True], [False, False, True]])
    b = np.array([True, True, False])
    model("logical_and_bool8", "LOGICAL_AND", [I(T(B8), a), I(T(B8), b)], [O(T(B8), a & b)])
    model("logical_or_bool8", "LOGICAL_OR", [I(T(B8), a), I(T(B8), b)], [O(T(B8), a | b)])
    model("logical_not_bool8", "LOGICAL_NOT", [I(T(B8), a)], [O(T(B8), ~a)])
    # SELECT: output[i] = cond[i] ? input1[i] : input2[i]
    for code, relaxed in variants("SELECT"):
        t = T(I32) if code == I32 else tq(code)
        c = np.array([[True, False, True], [False, True, False]])
        a, b = rnd((2, 3), rng=rng), rnd((2, 3), rng=rng)
        model(f"select_{tname(code, relaxed)}", "SELECT", [I(T(B8), c), I(t, a), I(t, b)], [O(t, np.where(c, a, b))],
              relaxed=relaxed, types=[code])
    model("select_float32_bad_shape", "SELECT", [I(T(B8), [True, False]), I(T(F32), [1.0, 2.0, 3.0]),
                                                 I(T(F32), [1.0, 2.0, 3.0])],
          [O(T(F32), [1.0, 2.0, 3.0])], fail=True)


# == data movement / shape ops ====================================================================

def movement_types(op, relaxed_too=False):
    """(T, relaxed) for data-movement ops: quant types keep their scale / zero point. No relaxed
    variant unless asked: relaxed precision does not matter when values are only moved."""
    out = []
    for code, relaxed in variants(op):
        if relaxed and not relaxed_too:
            continue
        out.append((T(I32) if code == I32 else tq(code), relaxed))
    return out


def gen_shapes():
    family("shapes")
    rng = np.random.default_rng(5)
    for t, rel in movement_types("RESHAPE"):
        x = t.rt(rnd((2, 3), rng=rng))
        model(f"reshape_{tname(t.code, rel)}", "RESHAPE", [I(t, x), ci32([3, -1])], [O(t, x.reshape(3, 2))],
              relaxed=rel, types=[t.code])
    for t, rel in movement_types("SQUEEZE"):
        x = t.rt(rnd((1, 3, 1, 2), rng=rng))
        model(f"squeeze_{tname(t.code, rel)}", "SQUEEZE", [I(t, x), ci32([0, 2])], [O(t, x.reshape(3, 2))],
              relaxed=rel, types=[t.code])
    x = rnd((1, 2, 1), rng=rng)
    model("squeeze_float32_all", "SQUEEZE", [I(T(F32), x), NONE(I32)], [O(T(F32), x.reshape(2))], at_least=28)
    for t, rel in movement_types("EXPAND_DIMS"):
        x = t.rt(rnd((2, 3), rng=rng))
        model(f"expand_dims_{tname(t.code, rel)}", "EXPAND_DIMS", [I(t, x), i32(-1)], [O(t, x.reshape(2, 3, 1))],
              relaxed=rel, types=[t.code])
    for t, rel in movement_types("TRANSPOSE"):
        x = t.rt(rnd((2, 3, 4), rng=rng))
        model(f"transpose_{tname(t.code, rel)}", "TRANSPOSE", [I(t, x), ci32([2, 0, 1])],
              [O(t, x.transpose(2, 0, 1))], relaxed=rel, types=[t.code])
    x = rnd((2, 3), rng=rng)
    model("transpose_float32_default_perm", "TRANSPOSE", [I(T(F32), x), NONE(I32)], [O(T(F32), x.T)])
    for t, rel in movement_types("CONCATENATION"):
        a, b = t.rt(rnd((2, 2), rng=rng)), t.rt(rnd((2, 3), rng=rng))
        model(f"concatenation_{tname(t.code, rel)}", "CONCATENATION", [I(t, a), I(t, b), i32(1)],
              [O(t, np.concatenate([a, b], 1))], relaxed=rel, types=[t.code])
    for code in (QA, QS):  # differing input scales (feature level 4 for asymm)
        ta, tb, to = T(code, 0.5, 10), T(code, 0.25, 3), T(code, 0.25, 0)
        a, b = ta.rt(rnd((1, 3), -4, 4, rng=rng)), tb.rt(rnd((2, 3), -4, 4, rng=rng))
        model(f"concatenation_{short(code).lower()}_scales", "CONCATENATION", [I(ta, a), I(tb, b), i32(0)],
              [O(to, np.concatenate([a, b], 0))], at_least=29)
    for t, rel in movement_types("SPLIT"):
        x = t.rt(rnd((2, 6), rng=rng))
        parts = np.split(x, 3, axis=1)
        model(f"split_{tname(t.code, rel)}", "SPLIT", [I(t, x), i32(1), i32(3)], [O(t, p) for p in parts],
              relaxed=rel, types=[t.code])
    for t, rel in movement_types("SLICE"):
        x = t.rt(rnd((3, 4), rng=rng))
        model(f"slice_{tname(t.code, rel)}", "SLICE", [I(t, x), ci32([1, 1]), ci32([2, -1])],
              [O(t, x[1:3, 1:])], relaxed=rel, types=[t.code])
    for t, rel in movement_types("STRIDED_SLICE"):
        x = t.rt(rnd((3, 5), rng=rng))
        # begin [2, 0], end [0, 5], strides [-1, 2], no masks; then shrink axis 0 in a second model
        model(f"strided_slice_{tname(t.code, rel)}", "STRIDED_SLICE",
              [I(t, x), ci32([2, 0]), ci32([0, 5]), ci32([-1, 2]), i32(0), i32(0), i32(0)],
              [O(t, x[2:0:-1, 0:5:2])], relaxed=rel, types=[t.code])
    x = rnd((3, 4), rng=rng)
    model("strided_slice_float32_masks", "STRIDED_SLICE",
          [I(T(F32), x), ci32([1, 0]), ci32([2, 1]), ci32([1, -1]), i32(2), i32(0), i32(1)],
          [O(T(F32), x[1, 3:1:-1])], at_least=28)  # begin_mask bit 1: axis 1 starts at its last element (stride < 0)
    for t, rel in movement_types("TILE"):
        x = t.rt(rnd((2, 2), rng=rng))
        model(f"tile_{tname(t.code, rel)}", "TILE", [I(t, x), ci32([2, 3])], [O(t, np.tile(x, (2, 3)))],
              relaxed=rel, types=[t.code])
    for t, rel in movement_types("REVERSE"):
        x = t.rt(rnd((2, 3), rng=rng))
        model(f"reverse_{tname(t.code, rel)}", "REVERSE", [I(t, x), ci32([1])], [O(t, x[:, ::-1])],
              relaxed=rel, types=[t.code])
    for t, rel in movement_types("PACK"):
        a, b, c = (t.rt(rnd((2, 2), rng=rng)) for _ in range(3))
        model(f"pack_{tname(t.code, rel)}", "PACK", [i32(1), I(t, a), I(t, b), I(t, c)],
              [O(t, np.stack([a, b, c], 1))], relaxed=rel, types=[t.code])
    for t, rel in movement_types("GATHER"):
        x = t.rt(rnd((3, 4), rng=rng))
        idx = np.array([[2, 0], [1, 2]])
        model(f"gather_{tname(t.code, rel)}", "GATHER", [I(t, x), i32(1), I(T(I32), idx)],
              [O(t, np.take(x, idx, axis=1))], relaxed=rel, types=[t.code])
    model("gather_float32_bad_index", "GATHER", [I(T(F32), [1.0, 2.0]), i32(0), C(T(I32), [2])],
          [O(T(F32), [0.0])], fail=True)
    # PAD (pads with the zero point, i.e. real 0.0), PAD_V2 (explicit pad value), MIRROR_PAD
    for t, rel in movement_types("PAD"):
        x = t.rt(rnd((1, 2, 3), rng=rng))
        pads = [[0, 0], [1, 0], [2, 1]]
        model(f"pad_{tname(t.code, rel)}", "PAD", [I(t, x), ci32(pads)], [O(t, np.pad(x, pads))],
              relaxed=rel, types=[t.code])
    for t, rel in movement_types("PAD_V2"):
        x = t.rt(rnd((2, 2), rng=rng))
        pads = [[1, 1], [0, 2]]
        if t.quant:
            pv, real = i32(t.zp + 3), 1.5
        else:
            pv, real = fsc(t, -2.5), -2.5
        model(f"pad_v2_{tname(t.code, rel)}", "PAD_V2", [I(t, x), ci32(pads), pv],
              [O(t, np.pad(x, pads, constant_values=real))], relaxed=rel, types=[t.code])
    for t, rel in movement_types("MIRROR_PAD"):
        x = t.rt(rnd((2, 3), rng=rng))
        pads = [[1, 1], [2, 1]]
        model(f"mirror_pad_{tname(t.code, rel)}_reflect", "MIRROR_PAD", [I(t, x), ci32(pads), i32(0)],
              [O(t, np.pad(x, pads, mode="reflect"))], relaxed=rel, types=[t.code])
        if t.code in (F16, I32):
            continue
        model(f"mirror_pad_{tname(t.code, rel)}_symmetric", "MIRROR_PAD", [I(t, x), ci32(pads), i32(1)],
              [O(t, np.pad(x, pads, mode="symmetric"))], relaxed=rel, types=[t.code])
    # invalid: the paddings tensor must have shape [rank(input), 2]
    model("pad_float32_bad_paddings_shape", "PAD", [I(T(F32), [1.0, 2.0]), ci32([[1, 0, 0]])],
          [O(T(F32), [0.0, 1.0, 2.0])], fail=True)
    # RANK: a scalar INT32 output
    for code in (F32, F16, I32, QA, QS, B8, Q8S, Q16A, Q16S):
        t = tq(code)
        x = np.zeros((2, 1, 3)) if code != B8 else np.zeros((2, 1, 3), bool)
        g = Graph()
        g.op("RANK", [I(t, x)], [Spec("SUBGRAPH_OUTPUT", "INT32", [], [3])])
        emit(f"rank_{short(code).lower()}", 30, g)
    g = Graph()
    g.op("RANK", [I(T(QPC, 0.0, 0, ([0.5, 0.25], 1)), stored=np.zeros((3, 2), np.int64))],
         [Spec("SUBGRAPH_OUTPUT", "INT32", [], [2])])
    emit("rank_quant8_symm_per_channel", 30, g)
    # FILL: dims tensor + scalar value
    for code, sc in ((F32, "FLOAT32"), (F16, "FLOAT16"), (I32, "INT32")):
        v = 1.5 if code != I32 else -7
        model(f"fill_{short(code).lower()}", "FILL", [I(T(I32), [2, 3]), Spec("CONSTANT_COPY", sc, [], [v])],
              [O(T(code), np.full((2, 3), v))], level=30)


def gen_space():
    family("space")
    rng = np.random.default_rng(6)
    for t, rel in movement_types("DEPTH_TO_SPACE"):
        x = t.rt(rnd((1, 2, 2, 8), rng=rng))
        n, h, w, c = x.shape
        b = 2
        y = x.reshape(n, h, w, b, b, c // 4).transpose(0, 1, 3, 2, 4, 5).reshape(n, h * b, w * b, c // 4)
        model(f"depth_to_space_{tname(t.code, rel)}", "DEPTH_TO_SPACE", [I(t, x), i32(2)], [O(t, y)],
              relaxed=rel, types=[t.code])
        model(f"space_to_depth_{tname(t.code, rel)}", "SPACE_TO_DEPTH", [I(t, y), i32(2)], [O(t, x)],
              relaxed=rel, types=[t.code])
        if t.code == F32 and not rel:  # NCHW layout (feature level 3)
            model("depth_to_space_float32_nchw", "DEPTH_TO_SPACE", [I(t, x.transpose(0, 3, 1, 2)), i32(2), bsc(True)],
                  [O(t, y.transpose(0, 3, 1, 2))], at_least=29)
            model("space_to_depth_float32_nchw", "SPACE_TO_DEPTH", [I(t, y.transpose(0, 3, 1, 2)), i32(2), bsc(True)],
                  [O(t, x.transpose(0, 3, 1, 2))], at_least=29)
    for t, rel in movement_types("BATCH_TO_SPACE_ND"):
        # input batch 4 = 2x2 blocks of a [1, 4, 4, 1] image
        img = t.rt(rnd((1, 4, 4, 2), rng=rng))
        blocks = np.stack([img[0, i::2, j::2, :] for i in range(2) for j in range(2)])  # [4, 2, 2, 2]
        model(f"batch_to_space_nd_{tname(t.code, rel)}", "BATCH_TO_SPACE_ND", [I(t, blocks), ci32([2, 2])],
              [O(t, img)], relaxed=rel, types=[t.code])
        # SPACE_TO_BATCH_ND with padding: pad width 3 -> 4 on the right
        img3 = t.rt(rnd((1, 2, 3, 1), rng=rng))
        padded = np.pad(img3, [[0, 0], [0, 0], [0, 1], [0, 0]])
        sb = np.stack([padded[0, i::1, j::2, :] for i in range(1) for j in range(2)])  # block [1, 2]
        model(f"space_to_batch_nd_{tname(t.code, rel)}", "SPACE_TO_BATCH_ND",
              [I(t, img3), ci32([1, 2]), ci32([[0, 0], [0, 1]])], [O(t, sb)], relaxed=rel, types=[t.code])
    x = rnd((1, 2, 4, 4), rng=rng)  # NCHW
    blocks = np.stack([x[0, :, i::2, j::2] for i in range(2) for j in range(2)])
    model("space_to_batch_nd_float32_nchw", "SPACE_TO_BATCH_ND", [I(T(F32), x), ci32([2, 2]), ci32([[0, 0], [0, 0]]),
                                                                 bsc(True)], [O(T(F32), blocks)], at_least=29)
    model("batch_to_space_nd_float32_nchw", "BATCH_TO_SPACE_ND", [I(T(F32), blocks), ci32([2, 2]), bsc(True)],
          [O(T(F32), x)], at_least=29)
    # CHANNEL_SHUFFLE: reshape channels to [groups, C/groups], transpose, flatten
    for t, rel in movement_types("CHANNEL_SHUFFLE"):
        x = t.rt(rnd((2, 6), rng=rng))
        y = x.reshape(2, 2, 3).transpose(0, 2, 1).reshape(2, 6)
        model(f"channel_shuffle_{tname(t.code, rel)}", "CHANNEL_SHUFFLE", [I(t, x), i32(2), i32(-1)], [O(t, y)],
              relaxed=rel, types=[t.code])
    x = rnd((1, 6, 2), rng=rng)
    model("channel_shuffle_float32_axis1", "CHANNEL_SHUFFLE", [I(T(F32), x), i32(3), i32(1)],
          [O(T(F32), x.reshape(1, 3, 2, 2).transpose(0, 2, 1, 3).reshape(1, 6, 2))])


# == reductions, arg ops, casts, lookups ==========================================================

def gen_reductions():
    family("reductions")
    rng = np.random.default_rng(7)
    for t, rel in movement_types("MEAN", True):
        x = t.rt(rnd((2, 3, 2), rng=rng))
        model(f"mean_{tname(t.code, rel)}", "MEAN", [I(t, x), ci32([1]), i32(0)], [O(t, x.mean(axis=1))],
              relaxed=rel, types=[t.code])
    x = rnd((2, 3, 2), rng=rng)
    model("mean_float32_keepdims_neg_axes", "MEAN", [I(T(F32), x), ci32([-1, 0]), i32(1)],
          [O(T(F32), x.mean(axis=(0, 2), keepdims=True))], at_least=28)
    fns = {"REDUCE_SUM": np.sum, "REDUCE_PROD": np.prod, "REDUCE_MAX": np.max, "REDUCE_MIN": np.min}
    for op, fn in fns.items():
        for t, rel in movement_types(op, op in ("REDUCE_SUM", "REDUCE_PROD")):
            x = t.rt(rnd((2, 3), -2, 2, rng=rng))
            model(f"{op.lower()}_{tname(t.code, rel)}", op, [I(t, x), ci32([1]), bsc(False)], [O(t, fn(x, axis=1))],
                  relaxed=rel, types=[t.code])
        x = rnd((2, 2, 2), -2, 2, rng=rng)
        model(f"{op.lower()}_float32_keepdims", op, [I(T(F32), x), ci32([0, -1]), bsc(True)],
              [O(T(F32), fn(x, axis=(0, 2), keepdims=True))])
    b = np.array([[True, False, True], [True, True, True]])
    for op, fn in (("REDUCE_ALL", np.all), ("REDUCE_ANY", np.any)):
        model(f"{op.lower()}_bool8", op, [I(T(B8), b), ci32([1]), bsc(False)], [O(T(B8), fn(b, axis=1))])
        model(f"{op.lower()}_bool8_axis0_keep", op, [I(T(B8), b), ci32([0]), bsc(True)],
              [O(T(B8), fn(b, axis=0, keepdims=True))])
    for op, fn in (("ARGMAX", np.argmax), ("ARGMIN", np.argmin)):
        for t, rel in movement_types(op):
            x = np.array([[1.0, 3.5, -2.0, 0.5], [-1.5, 0.0, 2.0, 4.0], [2.5, -3.0, 1.5, -0.5]])
            if t.code == I32:
                x = x * 2
            model(f"{op.lower()}_{tname(t.code, rel)}", op, [I(t, x), i32(1)], [O(T(I32), fn(x, axis=1))],
                  relaxed=rel, types=[t.code])
            model(f"{op.lower()}_{tname(t.code, rel)}_axis0", op, [I(t, x), i32(0)], [O(T(I32), fn(x, axis=0))],
                  relaxed=rel, types=[t.code])
    for t, rel in movement_types("TOPK_V2"):
        x = np.array([[1.0, 3.5, -2.0, 0.5, 2.0], [-1.5, 0.0, 2.5, 4.0, -3.0]])
        order = np.argsort(-x, axis=1, kind="stable")[:, :3]
        model(f"topk_v2_{tname(t.code, rel)}", "TOPK_V2", [I(t, x), i32(3)],
              [O(t, np.take_along_axis(x, order, 1)), O(T(I32), order)], relaxed=rel, types=[t.code])


def gen_conversions():
    family("conversions")
    # CAST: numeric conversion of the stored values (quantization parameters are ignored),
    # saturating at the output type's range; float -> integer on integral values only.
    vals = {F32: np.array([1.0, -2.0, 3.0, 100.0, 0.0, 7.0]), F16: np.array([1.0, -2.0, 3.0, 100.0, 0.0, 7.0]),
            I32: np.array([1, -2, 3, 100, 0, 7]), QA: np.array([1, 0, 3, 100, 255, 7])}
    for src in (F32, F16, I32, QA):
        for dst in (F32, F16, I32, QA):
            ts, td = (T(c, 0.5, 3) if c == QA else T(c) for c in (src, dst))
            x = vals[src]
            y = x.astype(np.float64)
            if dst == QA:
                y = np.clip(y, 0, 255)
            model(f"cast_{short(src).lower()}_to_{short(dst).lower()}", "CAST",
                  [I(ts, stored=x)], [O(td, stored=y)], level=29)
    # feature level 4: identity casts of the newly allowed types
    for code, x in ((B8, [True, False, True]), (Q16A, [0, 100, 65535]), (Q16S, [-32768, 5, 32767]),
                    (QS, [-128, 0, 127]), (Q8S, [-128, 1, 127])):
        t = tq(code)
        model(f"cast_{short(code).lower()}_identity", "CAST", [I(t, stored=np.array(x))],
              [O(t, stored=np.array(x))], level=30)
    # QUANTIZE: round(x / scale) + zero_point, clamped (values away from .5 ties)
    x = np.array([-10.3, -1.2, 0.0, 0.7, 3.3, 60.2, 100.0, -70.0])
    for src, dst, lv in ((F32, QA, 29), (F16, QA, 29), (F32, QS, 30), (F16, QS, 30)):
        to = T(dst, 0.5, 120 if dst == QA else -3)
        model(f"quantize_{short(src).lower()}_to_{short(dst).lower()}", "QUANTIZE", [I(T(src), x)],
              [O(to, T(src).rt(x))], level=lv)
    # DEQUANTIZE: (q - zero_point) * scale
    for src, dst, lv in ((QA, F32, 27), (QA, F16, 29), (Q8S, F32, 29), (Q8S, F16, 29), (QS, F32, 30),
                         (QS, F16, 30)):
        ti = T(src, 0.25, 0 if src == Q8S else (100 if src == QA else -5))
        q = np.array([0, 1, 50, 127, -128, -1]) if src != QA else np.array([0, 1, 100, 127, 255, 200])
        model(f"dequantize_{short(src).lower()}_to_{short(dst).lower()}", "DEQUANTIZE", [I(ti, stored=q)],
              [O(T(dst), ti.dec(q))], level=lv)
    model("dequantize_quant8_asymm_relaxed", "DEQUANTIZE", [I(T(QA, 0.5, 10), stored=np.array([0, 10, 20, 255]))],
          [O(T(F32), [-5.0, 0.0, 5.0, 122.5])], level=28, relaxed=True)
    scales = [0.5, 0.25, 2.0]
    tpc = T(QPC, 0.0, 0, (scales, 1))
    q = np.array([[1, -2, 3], [127, -128, 0]])
    for dst in (F32, F16):
        model(f"dequantize_quant8_symm_per_channel_to_{short(dst).lower()}", "DEQUANTIZE", [I(tpc, stored=q)],
              [O(T(dst), q * np.array(scales))], level=29)


def gen_lookups():
    family("lookups")
    rng = np.random.default_rng(8)
    for code in (F32, I32, QA, QS, F16):
        t = T(I32) if code == I32 else tq(code)
        values = t.rt(rnd((4, 2, 2), rng=rng))
        lk = np.array([2, 0, 2])
        model(f"embedding_lookup_{short(code).lower()}", "EMBEDDING_LOOKUP", [I(T(I32), lk), I(t, values)],
              [O(t, values[lk])], types=[code])
    model("embedding_lookup_float32_relaxed", "EMBEDDING_LOOKUP",
          [I(T(I32), [1]), I(T(F32), [[1.0, 2.0], [3.0, 4.0]])], [O(T(F32), [[3.0, 4.0]])], relaxed=True)
    # HASHTABLE_LOOKUP: output row i = values[j] where keys[j] == lookups[i], else zeros; hits 1/0
    for code in (F32, I32, QA):
        # quant: zero point 0, so "filled with zeros" means the same for stored and real values
        t = T(I32) if code == I32 else T(code) if code == F32 else T(code, 0.5, 0)
        keys = np.array([-3, 1, 7, 20])
        values = t.rt(rnd((4, 2), 0, 4, rng=rng))
        lk = np.array([7, 2, -3, 20])
        out = np.zeros((4, 2))
        hits = np.zeros(4)
        for i, k in enumerate(lk):
            if k in keys:
                out[i] = values[list(keys).index(k)]
                hits[i] = 1
        model(f"hashtable_lookup_{short(code).lower()}", "HASHTABLE_LOOKUP",
              [I(T(I32), lk), I(T(I32), keys), I(t, values)],
              [O(t, out), O(T(QA, 1.0, 0), hits)], level=27)


# == convolutions, fully connected, pooling =======================================================

def conv_ref(x, w, b, stride=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1), groups=1):
    """Naive NHWC convolution. w: [O, kh, kw, C/groups]; pads: (top, bottom, left, right)."""
    n, h, wd, c = x.shape
    o, kh, kw, cg = w.shape
    sh, sw = stride
    dh, dw = dil
    t, bt, l, r = pads
    oh = (h + t + bt - ((kh - 1) * dh + 1)) // sh + 1
    ow = (wd + l + r - ((kw - 1) * dw + 1)) // sw + 1
    out = np.zeros((n, oh, ow, o))
    opg = o // groups
    for bi in range(n):
        for yy in range(oh):
            for xx in range(ow):
                for oc in range(o):
                    g = oc // opg
                    acc = b[oc]
                    for ky in range(kh):
                        for kx in range(kw):
                            iy, ix = yy * sh - t + ky * dh, xx * sw - l + kx * dw
                            if 0 <= iy < h and 0 <= ix < wd:
                                for ci in range(cg):
                                    acc += x[bi, iy, ix, g * cg + ci] * w[oc, ky, kx, ci]
                    out[bi, yy, xx, oc] = acc
    return out


def same_pads(size, k, stride, dil=1):
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dil + 1 - size, 0)
    return total // 2, total - total // 2


def conv_types(code):
    """(input, filter, bias, output) types for a convolution of ``code``."""
    if code == QA:
        return T(QA, 0.5, 128), T(QA, 0.25, 128), T(I32, 0.125), T(QA, 0.5, 100)
    if code == QS:
        return T(QS, 0.5, -10), T(QS, 0.25, 0), T(I32, 0.125), T(QS, 0.5, 5)
    t = T(code)
    return t, t, t, t


def gen_conv():
    family("convolution")
    rng = np.random.default_rng(9)
    for code, rel in variants("CONV_2D"):
        ti, tf, tb, to = conv_types(code)
        x = ti.rt(rnd((1, 3, 4, 2), -2, 2, rng=rng))
        w = tf.rt(rnd((3, 2, 2, 2), -1, 1, 0.25, rng=rng))
        b = tb.rt(rnd((3,), -1, 1, 0.125, rng=rng))
        y = conv_ref(x, w, b, pads=(0, 1, 1, 0))
        model(f"conv_2d_{tname(code, rel)}_explicit", "CONV_2D",
              [I(ti, x), C(tf, w), C(tb, b), i32(1), i32(0), i32(0), i32(1), i32(1), i32(1), i32(0)],
              [O(to, y)], relaxed=rel, types=[code])
        if code == F16 or rel:
            continue
        # implicit SAME padding, stride 2, RELU
        pt, pb = same_pads(3, 2, 2)
        pl, pr = same_pads(4, 2, 2)
        y = np.maximum(conv_ref(x, w, b, (2, 2), (pt, pb, pl, pr)), 0)
        model(f"conv_2d_{tname(code, rel)}_same_stride2_relu", "CONV_2D",
              [I(ti, x), I(tf, w), I(tb, b), i32(1), i32(2), i32(2), i32(1)],
              [O(to, y)], relaxed=rel, types=[code])
    # NCHW layout and dilation (feature level 3)
    x = rnd((1, 4, 4, 1), -2, 2, rng=rng)
    w = rnd((2, 2, 2, 1), -1, 1, 0.25, rng=rng)
    b = np.array([0.5, -0.25])
    y = conv_ref(x, w, b, dil=(2, 2))
    model("conv_2d_float32_nchw_dilation", "CONV_2D",
          [I(T(F32), x.transpose(0, 3, 1, 2)), C(T(F32), w), C(T(F32), b), i32(2), i32(1), i32(1), i32(0),
           bsc(True), i32(2), i32(2)], [O(T(F32), y.transpose(0, 3, 1, 2))], at_least=29)
    # per-channel quantized filter (feature level 3): bias scale = input scale * channel scale
    for code in (QA, QS):
        ti, _, _, to = conv_types(code)
        sc = [0.25, 0.5, 0.125]
        tf = T(QPC, 0.0, 0, (sc, 0))
        x = ti.rt(rnd((1, 2, 3, 2), -2, 2, rng=rng))
        w = tf.rt(rnd((3, 1, 2, 2), -1, 1, 0.125, rng=rng))
        b = np.array([0.25, -0.5, 0.0625])
        bq = np.round(b / (0.5 * np.array(sc)))
        y = conv_ref(x, w, bq * 0.5 * np.array(sc))
        model(f"conv_2d_{short(code).lower()}_per_channel", "CONV_2D",
              [I(ti, x), C(tf, w), C(T(I32), stored=bq), i32(0), i32(0), i32(0), i32(0), i32(1), i32(1), i32(0)],
              [O(to, y)], level=max(29, LEVELS["CONV_2D"][short(code)]))
    model("conv_2d_float32_bad_stride", "CONV_2D",
          [I(T(F32), np.zeros((1, 2, 2, 1))), C(T(F32), np.ones((1, 1, 1, 1))), C(T(F32), [0.0]), i32(2), i32(0),
           i32(1), i32(0)], [O(T(F32), np.zeros((1, 2, 2, 1)))], fail=True)
    # DEPTHWISE_CONV_2D: output channel k uses input channel k // multiplier
    for code, rel in variants("DEPTHWISE_CONV_2D"):
        ti, tf, tb, to = conv_types(code)
        x = ti.rt(rnd((1, 3, 3, 2), -2, 2, rng=rng))
        w = tf.rt(rnd((1, 2, 2, 4), -1, 1, 0.25, rng=rng))
        b = tb.rt(rnd((4,), -1, 1, 0.125, rng=rng))
        wg = w[0].transpose(2, 0, 1)[..., None]  # [4, kh, kw, 1], groups = 2 input channels
        y = conv_ref(x, wg, b, groups=2)
        model(f"depthwise_conv_2d_{tname(code, rel)}", "DEPTHWISE_CONV_2D",
              [I(ti, x), C(tf, w), C(tb, b), i32(0), i32(0), i32(0), i32(0), i32(1), i32(1), i32(2), i32(0)],
              [O(to, y)], relaxed=rel, types=[code])
        if code == F16 or rel:
            continue
        pt, pb = same_pads(3, 2, 1)
        y = np.clip(conv_ref(x, wg, b, pads=(pt, pb, pt, pb), groups=2), 0, 6)
        model(f"depthwise_conv_2d_{tname(code, rel)}_same_relu6", "DEPTHWISE_CONV_2D",
              [I(ti, x), C(tf, w), C(tb, b), i32(1), i32(1), i32(1), i32(2), i32(3)],
              [O(to, y)], relaxed=rel, types=[code])
    x = rnd((1, 3, 3, 2), -2, 2, rng=rng)
    w = rnd((1, 2, 2, 2), -1, 1, 0.25, rng=rng)
    y = conv_ref(x, w[0].transpose(2, 0, 1)[..., None], np.zeros(2), dil=(2, 1), groups=2)
    model("depthwise_conv_2d_float32_nchw_dilation", "DEPTHWISE_CONV_2D",
          [I(T(F32), x.transpose(0, 3, 1, 2)), C(T(F32), w), C(T(F32), [0.0, 0.0]), i32(0), i32(0), i32(0), i32(0),
           i32(1), i32(1), i32(1), i32(0), bsc(True), i32(1), i32(2)], [O(T(F32), y.transpose(0, 3, 1, 2))],
          at_least=29)
    sc = [0.25, 0.5]
    tf = T(QPC, 0.0, 0, (sc, 3))
    x = T(QA, 0.5, 128).rt(rnd((1, 2, 2, 2), -2, 2, rng=rng))
    w = tf.rt(rnd((1, 2, 2, 2), -1, 1, 0.25, rng=rng))
    bq = np.array([3, -2])
    y = conv_ref(x, w[0].transpose(2, 0, 1)[..., None], bq * 0.5 * np.array(sc), groups=2)
    model("depthwise_conv_2d_quant8_asymm_per_channel", "DEPTHWISE_CONV_2D",
          [I(T(QA, 0.5, 128), x), C(tf, w), C(T(I32), stored=bq), i32(0), i32(0), i32(0), i32(0), i32(1), i32(1),
           i32(1), i32(0)], [O(T(QA, 0.25, 128), y)], level=29)
    # GROUPED_CONV_2D
    for code, rel in variants("GROUPED_CONV_2D"):
        ti, tf, tb, to = conv_types(code)
        x = ti.rt(rnd((1, 3, 3, 4), -2, 2, rng=rng))
        w = tf.rt(rnd((4, 2, 2, 2), -1, 1, 0.25, rng=rng))
        b = tb.rt(rnd((4,), -1, 1, 0.125, rng=rng))
        y = conv_ref(x, w, b, pads=(1, 0, 0, 1), groups=2)
        model(f"grouped_conv_2d_{tname(code, rel)}", "GROUPED_CONV_2D",
              [I(ti, x), C(tf, w), C(tb, b), i32(0), i32(1), i32(1), i32(0), i32(1), i32(1), i32(2), i32(0),
               bsc(False)], [O(to, y)], relaxed=rel, types=[code])
    x = rnd((1, 3, 3, 4), -2, 2, rng=rng)
    w = rnd((2, 2, 2, 2), -1, 1, 0.25, rng=rng)
    y = conv_ref(x, w, np.zeros(2), stride=(2, 2), groups=2)
    model("grouped_conv_2d_float32_nchw_valid_stride2", "GROUPED_CONV_2D",
          [I(T(F32), x.transpose(0, 3, 1, 2)), C(T(F32), w), C(T(F32), [0.0, 0.0]), i32(2), i32(2), i32(2), i32(2),
           i32(0), bsc(True)], [O(T(F32), y.transpose(0, 3, 1, 2))])
    # TRANSPOSE_CONV_2D: out[y*s + ky - pt, x*s + kx - pl, o] += in[y, x, c] * w[o, ky, kx, c]
    def tconv(x, w, b, s, pt, pl, oh, ow):
        n, h, wd, c = x.shape
        o, kh, kw, _ = w.shape
        out = np.zeros((n, oh, ow, o)) + b
        for bi in range(n):
            for yy in range(h):
                for xx in range(wd):
                    for ky in range(kh):
                        for kx in range(kw):
                            oy, ox = yy * s + ky - pt, xx * s + kx - pl
                            if 0 <= oy < oh and 0 <= ox < ow:
                                out[bi, oy, ox] += w[:, ky, kx, :] @ x[bi, yy, xx]
        return out
    for code, rel in variants("TRANSPOSE_CONV_2D"):
        ti, tf, tb, to = conv_types(code)
        x = ti.rt(rnd((1, 2, 2, 2), -2, 2, rng=rng))
        w = tf.rt(rnd((2, 3, 3, 2), -1, 1, 0.25, rng=rng))
        b = tb.rt(rnd((2,), -1, 1, 0.125, rng=rng))
        # explicit padding 1 on every side, stride 2: out = (2-1)*2 + 3 - 2 = 3
        y = tconv(x, w, b, 2, 1, 1, 3, 3)
        model(f"transpose_conv_2d_{tname(code, rel)}", "TRANSPOSE_CONV_2D",
              [I(ti, x), C(tf, w), C(tb, b), i32(1), i32(1), i32(1), i32(1), i32(2), i32(2), i32(0), bsc(False)],
              [O(to, y)], relaxed=rel, types=[code])
    x = rnd((1, 2, 2, 1), -2, 2, rng=rng)
    w = rnd((1, 3, 3, 1), -1, 1, 0.25, rng=rng)
    # implicit SAME, stride 2, output shape 4x4: total pad = (2-1)*2 + 3 - 4 = 1 -> top/left 0, bottom/right 1
    y = tconv(x, w, np.array([0.25]), 2, 0, 0, 4, 4)
    model("transpose_conv_2d_float32_same_output_shape", "TRANSPOSE_CONV_2D",
          [I(T(F32), x), C(T(F32), w), C(T(F32), [0.25]), ci32([1, 4, 4, 1]), i32(1), i32(2), i32(2), i32(0),
           bsc(False)], [O(T(F32), y)])
    # FULLY_CONNECTED: y = x W^T + b
    for code, rel in variants("FULLY_CONNECTED"):
        ti, tf, tb, to = conv_types(code)
        x = ti.rt(rnd((2, 3), -2, 2, rng=rng))
        w = tf.rt(rnd((4, 3), -1, 1, 0.25, rng=rng))
        b = tb.rt(rnd((4,), -1, 1, 0.125, rng=rng))
        model(f"fully_connected_{tname(code, rel)}", "FULLY_CONNECTED", [I(ti, x), C(tf, w), C(tb, b), i32(0)],
              [O(to, x @ w.T + b)], relaxed=rel, types=[code])
    x = rnd((1, 2, 3), -2, 2, rng=rng)  # rank 3: flattened to [2, 3]
    w = rnd((2, 3), -1, 1, 0.25, rng=rng)
    model("fully_connected_float32_rank3_relu", "FULLY_CONNECTED",
          [I(T(F32), x), I(T(F32), w), I(T(F32), [0.5, -0.5]), i32(1)],
          [O(T(F32), np.maximum(x.reshape(2, 3) @ w.T + [0.5, -0.5], 0))])
    # BATCH_MATMUL
    for code, rel in variants("BATCH_MATMUL"):
        t = T(I32) if code == I32 else tq(code)
        to = T(QS, 1.0, 3) if code == QS else t
        a = t.rt(rnd((2, 2, 3), -2, 2, rng=rng))
        bm = t.rt(rnd((2, 3, 2), -2, 2, rng=rng))
        model(f"batch_matmul_{tname(code, rel)}", "BATCH_MATMUL", [I(t, a), I(t, bm), bsc(False), bsc(False)],
              [O(to, a @ bm)], relaxed=rel, types=[code])
    a, bm = rnd((3, 2), rng=rng), rnd((2, 3), rng=rng)
    model("batch_matmul_float32_adjoint", "BATCH_MATMUL", [I(T(F32), a), I(T(F32), bm), bsc(True), bsc(True)],
          [O(T(F32), a.T @ bm.T)])


def pool_ref(x, k, stride, pads, kind):
    n, h, w, c = x.shape
    kh, kw = k
    sh, sw = stride
    t, b, l, r = pads
    oh, ow = (h + t + b - kh) // sh + 1, (w + l + r - kw) // sw + 1
    out = np.zeros((n, oh, ow, c))
    for yy in range(oh):
        for xx in range(ow):
            y0, x0 = yy * sh - t, xx * sw - l
            win = x[:, max(y0, 0):min(y0 + kh, h), max(x0, 0):min(x0 + kw, w), :]
            if kind == "avg":
                out[:, yy, xx] = win.mean(axis=(1, 2))  # padding is not counted
            elif kind == "max":
                out[:, yy, xx] = win.max(axis=(1, 2))
            else:
                out[:, yy, xx] = np.sqrt((win ** 2).mean(axis=(1, 2)))
    return out


def gen_pooling():
    family("pooling")
    rng = np.random.default_rng(10)
    for op, kind in (("AVERAGE_POOL_2D", "avg"), ("MAX_POOL_2D", "max"), ("L2_POOL_2D", "l2")):
        for code, rel in variants(op):
            t = tq(code)
            x = t.rt(rnd((1, 4, 5, 2), -4, 4, rng=rng))
            y = pool_ref(x, (2, 3), (2, 2), (0, 0, 1, 0), kind)
            model(f"{op.lower()}_{tname(code, rel)}_explicit", op,
                  [I(t, x), i32(1), i32(0), i32(0), i32(0), i32(2), i32(2), i32(3), i32(2), i32(0)],
                  [O(t, y)], relaxed=rel, types=[code])
            if code == F16 or rel:
                continue
            pt, pb = same_pads(4, 3, 1)
            pl, pr = same_pads(5, 3, 1)
            y = np.clip(pool_ref(x, (3, 3), (1, 1), (pt, pb, pl, pr), kind), -1, 1)
            model(f"{op.lower()}_{tname(code, rel)}_same_relu1", op,
                  [I(t, x), i32(1), i32(1), i32(1), i32(3), i32(3), i32(2)],
                  [O(t, y)], relaxed=rel, types=[code])
        x = rnd((1, 2, 3, 3), -4, 4, rng=rng)  # NCHW
        y = pool_ref(x.transpose(0, 2, 3, 1), (2, 2), (1, 1), (0, 0, 0, 0), kind)
        model(f"{op.lower()}_float32_nchw", op, [I(T(F32), x), i32(2), i32(1), i32(1), i32(2), i32(2), i32(0),
                                                 bsc(True)], [O(T(F32), y.transpose(0, 3, 1, 2))], at_least=29)
    model("max_pool_2d_float32_bad_filter", "MAX_POOL_2D",
          [I(T(F32), np.zeros((1, 2, 2, 1))), i32(2), i32(1), i32(1), i32(0), i32(0), i32(0)],
          [O(T(F32), np.zeros((1, 2, 2, 1)))], fail=True)


# == normalization, resize ========================================================================

def gen_normalization():
    family("normalization")
    rng = np.random.default_rng(11)
    for code, rel in variants("L2_NORMALIZATION"):
        t = tq(code, scale=0.25) if code in (QA, QS) else T(code)
        to = T(code, 1 / 128, 128 if code == QA else 0) if t.quant else t
        x = t.rt(rnd((1, 1, 2, 4), -3, 3, 0.25, rng))  # rank 4: the only rank before feature level 3
        model(f"l2_normalization_{tname(code, rel)}", "L2_NORMALIZATION", [I(t, x)],
              [O(to, x / np.sqrt((x ** 2).sum(-1, keepdims=True)))], relaxed=rel, types=[code])
    x = rnd((2, 3, 2), -3, 3, 0.25, rng)
    model("l2_normalization_float32_axis1", "L2_NORMALIZATION", [I(T(F32), x), i32(1)],
          [O(T(F32), x / np.sqrt((x ** 2).sum(1, keepdims=True)))], at_least=29)
    # LRN: x / (bias + alpha * sum_{d-r..d+r} x^2) ^ beta
    def lrn(x, r, bias, alpha, beta, axis=-1):
        x = np.moveaxis(x, axis, -1)
        sq = np.zeros_like(x)
        c = x.shape[-1]
        for d in range(c):
            sq[..., d] = (x[..., max(0, d - r):min(c, d + r + 1)] ** 2).sum(-1)
        return np.moveaxis(x / (bias + alpha * sq) ** beta, -1, axis)
    for code, rel in variants("LOCAL_RESPONSE_NORMALIZATION"):
        t = T(code)
        x = rnd((1, 1, 2, 5), -2, 2, 0.25, rng)
        model(f"local_response_normalization_{tname(code, rel)}", "LOCAL_RESPONSE_NORMALIZATION",
              [I(t, x), i32(1), fsc(t, 1.0), fsc(t, 0.5), fsc(t, 0.75)], [O(t, lrn(x, 1, 1.0, 0.5, 0.75))],
              relaxed=rel, types=[code])
    x = rnd((1, 4, 2), -2, 2, 0.25, rng)
    model("local_response_normalization_float32_axis1", "LOCAL_RESPONSE_NORMALIZATION",
          [I(T(F32), x), i32(2), fsc(F32, 2.0), fsc(F32, 0.25), fsc(F32, 0.5), i32(1)],
          [O(T(F32), lrn(x, 2, 2.0, 0.25, 0.5, axis=1))], at_least=29)
    # INSTANCE_NORMALIZATION: per (batch, channel) over H, W; gamma * (x - mean) / sqrt(var + eps) + beta
    for code, rel in variants("INSTANCE_NORMALIZATION"):
        t = T(code)
        x = rnd((2, 2, 2, 2), -2, 2, 0.25, rng)
        m, v = x.mean(axis=(1, 2), keepdims=True), x.var(axis=(1, 2), keepdims=True)
        y = 1.5 * (x - m) / np.sqrt(v + 0.01) + 0.25
        model(f"instance_normalization_{tname(code, rel)}", "INSTANCE_NORMALIZATION",
              [I(t, x), fsc(t, 1.5), fsc(t, 0.25), fsc(t, 0.01), bsc(False)], [O(t, y)], relaxed=rel, types=[code])
        if code == F32 and not rel:
            model("instance_normalization_float32_nchw", "INSTANCE_NORMALIZATION",
                  [I(t, x.transpose(0, 3, 1, 2)), fsc(t, 1.5), fsc(t, 0.25), fsc(t, 0.01), bsc(True)],
                  [O(t, y.transpose(0, 3, 1, 2))])


def resize_ref(x, oh, ow, kind, align=False, half=False):
    n, h, w, c = x.shape
    def scale(i, o):
        return (i - 1) / (o - 1) if align and o > 1 else i / o
    sy, sx = scale(h, oh), scale(w, ow)
    out = np.zeros((n, oh, ow, c))
    for yy in range(oh):
        for xx in range(ow):
            if kind == "nearest":
                if align:
                    iy, ix = min(int(rha(yy * sy)), h - 1), min(int(rha(xx * sx)), w - 1)
                else:
                    off = 0.5 if half else 0.0
                    iy, ix = min(int(math.floor((yy + off) * sy)), h - 1), min(int(math.floor((xx + off) * sx)), w - 1)
                out[:, yy, xx] = x[:, iy, ix]
            else:
                fy = (yy + 0.5) * sy - 0.5 if half else yy * sy
                fx = (xx + 0.5) * sx - 0.5 if half else xx * sx
                fy, fx = max(fy, 0.0), max(fx, 0.0)
                y0, x0 = int(math.floor(fy)), int(math.floor(fx))
                y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
                dy, dx = fy - y0, fx - x0
                out[:, yy, xx] = (x[:, y0, x0] * (1 - dy) * (1 - dx) + x[:, y0, x1] * (1 - dy) * dx +
                                  x[:, y1, x0] * dy * (1 - dx) + x[:, y1, x1] * dy * dx)
    return out


def gen_resize():
    family("resize")
    rng = np.random.default_rng(12)
    for code, rel in variants("RESIZE_BILINEAR"):
        t = tq(code)
        x = t.rt(rnd((1, 2, 3, 2), -4, 4, rng=rng))
        # out height 3, width 5 (inputs: width first, then height)
        model(f"resize_bilinear_{tname(code, rel)}", "RESIZE_BILINEAR", [I(t, x), i32(5), i32(3)],
              [O(t, resize_ref(x, 3, 5, "bilinear"))], relaxed=rel, types=[code])
        model(f"resize_nearest_neighbor_{tname(code, rel)}", "RESIZE_NEAREST_NEIGHBOR",
              [I(t, x), i32(5), i32(3), bsc(False)], [O(t, resize_ref(x, 3, 5, "nearest"))], relaxed=rel,
              types=[code])
        if code == F16 or rel:
            continue
        model(f"resize_bilinear_{tname(code, rel)}_half_pixel", "RESIZE_BILINEAR",
              [I(t, x), i32(4), i32(4), bsc(False), bsc(False), bsc(True)],
              [O(t, resize_ref(x, 4, 4, "bilinear", half=True))], relaxed=rel, types=[code], at_least=30)
        model(f"resize_nearest_neighbor_{tname(code, rel)}_align_corners", "RESIZE_NEAREST_NEIGHBOR",
              [I(t, x), i32(4), i32(3), bsc(False), bsc(True), bsc(False)],
              [O(t, resize_ref(x, 3, 4, "nearest", align=True))], relaxed=rel, types=[code], at_least=30)
    x = rnd((1, 3, 3, 1), -4, 4, rng=rng)
    model("resize_bilinear_float32_align_corners", "RESIZE_BILINEAR",
          [I(T(F32), x), i32(5), i32(2), bsc(False), bsc(True), bsc(False)],
          [O(T(F32), resize_ref(x, 2, 5, "bilinear", align=True))], at_least=30)
    model("resize_bilinear_float32_nchw_scales", "RESIZE_BILINEAR",
          [I(T(F32), x.transpose(0, 3, 1, 2)), fsc(F32, 2.0), fsc(F32, 1.5), bsc(True)],
          [O(T(F32), resize_ref(x, 4, 6, "bilinear").transpose(0, 3, 1, 2))], at_least=29)
    model("resize_nearest_neighbor_float32_half_pixel", "RESIZE_NEAREST_NEIGHBOR",
          [I(T(F32), x), i32(2), i32(5), bsc(False), bsc(False), bsc(True)],
          [O(T(F32), resize_ref(x, 5, 2, "nearest", half=True))], at_least=30)
    model("resize_bilinear_float32_bad_align_half", "RESIZE_BILINEAR",  # align_corners and half_pixel: invalid
          [I(T(F32), x), i32(5), i32(2), bsc(False), bsc(True), bsc(True)],
          [O(T(F32), np.zeros((1, 2, 5, 1)))], fail=True)


# == control flow, random =========================================================================

def sg_in(code, dims):
    return Spec("SUBGRAPH_INPUT", code, dims)


def sg_out(code, dims):
    return Spec("SUBGRAPH_OUTPUT", code, dims)


def subgraph_ref(k):
    return Spec("SUBGRAPH", "SUBGRAPH", [], [k])


def gen_control_flow():
    family("control_flow")
    # IF: cond ? x + y : x * y
    then_g, else_g = Graph(), Graph()
    for g, op in ((then_g, "ADD"), (else_g, "MUL")):
        a, b = g.add(sg_in(F32, [3])), g.add(sg_in(F32, [3]))
        g.op(op, [a, b, i32(0)], [sg_out(F32, [3])])
    x, y = np.array([1.0, -2.0, 3.5]), np.array([0.5, 4.0, -1.0])
    for cond in (True, False):
        g = Graph()
        g.op("IF", [I(T(B8), [cond]), subgraph_ref(0), subgraph_ref(1), I(T(F32), x), I(T(F32), y)],
             [O(T(F32), x + y if cond else x * y)])
        emit(f"if_float32_{'then' if cond else 'else'}", 30, g, referenced=[then_g, else_g])
    # WHILE: while x < limit: x = x * 2 + inc  (limit and inc are loop-invariant state/inputs)
    cond_g, body_g = Graph(), Graph()
    a, lim, inc = (cond_g.add(sg_in(F32, [1])) for _ in range(3))
    cond_g.op("LESS", [a, lim], [sg_out(B8, [1])])
    a, lim, inc = (body_g.add(sg_in(F32, [1])) for _ in range(3))
    tmp = body_g.temp(T(F32), [1])
    body_g.op("MUL", [a, C(T(F32), [2.0]), i32(0)], [tmp])
    body_g.op("ADD", [tmp, inc, i32(0)], [sg_out(F32, [1])])
    v = 1.0
    while v < 50.0:
        v = v * 2 + 0.5
    g = Graph()
    g.op("WHILE", [subgraph_ref(0), subgraph_ref(1), I(T(F32), [1.0]), C(T(F32), [50.0]), I(T(F32), [0.5])],
         [O(T(F32), [v])])
    emit("while_float32_double_until", 30, g, referenced=[cond_g, body_g])
    g = Graph()  # zero iterations
    g.op("WHILE", [subgraph_ref(0), subgraph_ref(1), I(T(F32), [60.0]), C(T(F32), [50.0]), I(T(F32), [0.5])],
         [O(T(F32), [60.0])])
    emit("while_float32_no_iteration", 30, g, referenced=[cond_g, body_g])
    # invalid: IF condition with more than one element
    g = Graph()
    g.op("IF", [I(T(B8), [True, False]), subgraph_ref(0), subgraph_ref(1), I(T(F32), x), I(T(F32), y)],
         [O(T(F32), x + y)])
    emit("if_float32_bad_condition", 30, g, referenced=[then_g, else_g], fail=True)


def gen_random():
    family("random")
    # RANDOM_MULTINOMIAL: class frequencies must match softmax(logits) within the tolerance
    for code in (F32, F16):
        logits = np.log(np.array([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]]))
        g = Graph()
        g.op("RANDOM_MULTINOMIAL", [I(T(code), logits), i32(1000), ci32([37, 42])],
             [O(T(I32), stored=np.zeros((2, 1000), np.int64))])
        emit(f"random_multinomial_{short(code).lower()}", 29, g, multinomial=0.06)


# == recurrent networks ===========================================================================

def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def gen_rnn():
    family("rnn")
    rng = np.random.default_rng(13)
    # RNN: h' = act(x W^T + h R^T + b); outputs (hidden_state_out, output) are both h'
    for code, rel in variants("RNN"):
        t = T(code)
        x, h = rnd((2, 3), -1, 1, 0.25, rng), rnd((2, 2), -1, 1, 0.25, rng)
        w, r, b = rnd((2, 3), -1, 1, 0.25, rng), rnd((2, 2), -1, 1, 0.25, rng), rnd((2,), -1, 1, 0.25, rng)
        for act, fn in ((1, ACT[1]), (2, ACT[2])):
            y = fn(x @ w.T + h @ r.T + b)
            model(f"rnn_{tname(code, rel)}_act{act}", "RNN",
                  [I(t, x), C(t, w), C(t, r), C(t, b), I(t, h), i32(act)], [O(t, y), O(t, y)], relaxed=rel,
                  types=[code])

    def run_rnn(xs, w, r, b, h, act, reverse=False):
        outs = [None] * len(xs)
        order = range(len(xs) - 1, -1, -1) if reverse else range(len(xs))
        for k in order:
            h = act(xs[k] @ w.T + h @ r.T + b)
            outs[k] = h
        return np.stack(outs), h
    # UNIDIRECTIONAL_SEQUENCE_RNN: time-major [time, batch, input] or batch-major
    for code, rel in variants("UNIDIRECTIONAL_SEQUENCE_RNN"):
        t = T(code)
        xs = rnd((3, 2, 2), -1, 1, 0.25, rng)  # time 3, batch 2
        h0 = rnd((2, 2), -1, 1, 0.25, rng)
        w, r, b = rnd((2, 2), -1, 1, 0.25, rng), rnd((2, 2), -1, 1, 0.25, rng), rnd((2,), -1, 1, 0.25, rng)
        ys, _ = run_rnn(xs, w, r, b, h0, ACT[2])
        model(f"unidirectional_sequence_rnn_{tname(code, rel)}_time_major", "UNIDIRECTIONAL_SEQUENCE_RNN",
              [I(t, xs), C(t, w), C(t, r), C(t, b), I(t, h0), i32(2), i32(1)], [O(t, ys)], relaxed=rel, types=[code])
        model(f"unidirectional_sequence_rnn_{tname(code, rel)}_batch_major", "UNIDIRECTIONAL_SEQUENCE_RNN",
              [I(t, xs.transpose(1, 0, 2)), C(t, w), C(t, r), C(t, b), I(t, h0), i32(1), i32(0)],
              [O(t, run_rnn(xs, w, r, b, h0, ACT[1])[0].transpose(1, 0, 2))], relaxed=rel, types=[code])
    # UNIDIRECTIONAL_SEQUENCE_RNN with the final hidden state output (feature level 4)
    xs = rnd((2, 1, 2), -1, 1, 0.25, rng)
    h0 = rnd((1, 2), -1, 1, 0.25, rng)
    w, r, b = rnd((2, 2), -1, 1, 0.25, rng), rnd((2, 2), -1, 1, 0.25, rng), rnd((2,), -1, 1, 0.25, rng)
    ys, hn = run_rnn(xs, w, r, b, h0, ACT[2])
    model("unidirectional_sequence_rnn_float32_state_output", "UNIDIRECTIONAL_SEQUENCE_RNN",
          [I(T(F32), xs), C(T(F32), w), C(T(F32), r), C(T(F32), b), I(T(F32), h0), i32(2), i32(1)],
          [O(T(F32), ys), O(T(F32), hn)], level=30)
    # BIDIRECTIONAL_SEQUENCE_RNN: forward and backward passes, separate or merged outputs
    for code, rel in variants("BIDIRECTIONAL_SEQUENCE_RNN"):
        t = T(code)
        xs = rnd((3, 1, 2), -1, 1, 0.25, rng)
        p = [rnd(s, -1, 1, 0.25, rng) for s in ((2, 2), (2, 2), (2,), (1, 2), (3, 2), (3, 3), (3,), (1, 3))]
        fw, _ = run_rnn(xs, p[0], p[1], p[2], p[3], ACT[2])
        bw, _ = run_rnn(xs, p[4], p[5], p[6], p[7], ACT[2], reverse=True)
        ins = [I(t, xs), C(t, p[0]), C(t, p[1]), C(t, p[2]), I(t, p[3]), C(t, p[4]), C(t, p[5]), C(t, p[6]),
               I(t, p[7]), NONE(code), NONE(code), NONE(code), i32(2), bsc(True)]
        model(f"bidirectional_sequence_rnn_{tname(code, rel)}", "BIDIRECTIONAL_SEQUENCE_RNN",
              ins + [bsc(False)], [O(t, fw), O(t, bw)], relaxed=rel, types=[code])
        if code == F32 and not rel:
            model("bidirectional_sequence_rnn_float32_merged", "BIDIRECTIONAL_SEQUENCE_RNN",
                  ins + [bsc(True)], [O(t, np.concatenate([fw, bw], -1))])
    # SVDF (Android's convention): per filter f the memory is state_in[f] with its last column
    # replaced by x . weights_feature[f]; output[u] = act(bias[u] + sum_{r<rank} memory[u*rank+r] .
    # weights_time[u*rank+r]); state_out = memory shifted left by one with a zero last column
    # (so the last column of state_in is a free slot; we feed 0 there).
    for code, rel in variants("SVDF"):
        t = T(code)
        batch, inp, units, rank, mem = 2, 3, 2, 2, 3
        nf = units * rank
        x = rnd((batch, inp), -1, 1, 0.25, rng)
        wf, wt = rnd((nf, inp), -1, 1, 0.25, rng), rnd((nf, mem), -1, 1, 0.25, rng)
        b = rnd((units,), -1, 1, 0.25, rng)
        s = rnd((batch, nf, mem), -1, 1, 0.25, rng)
        s[:, :, -1] = 0
        s_in = s.reshape(batch, nf * mem)
        memory = np.concatenate([s[:, :, :-1], (x @ wf.T)[:, :, None]], axis=2)
        s_out = np.concatenate([memory[:, :, 1:], np.zeros((batch, nf, 1))], axis=2)
        per_filter = (memory * wt[None]).sum(-1)  # [batch, nf]
        y = np.maximum(per_filter.reshape(batch, units, rank).sum(-1) + b, 0)
        model(f"svdf_{tname(code, rel)}", "SVDF",
              [I(t, x), C(t, wf), C(t, wt), C(t, b), I(t, s_in), i32(rank), i32(1)],
              [O(t, s_out.reshape(batch, nf * mem)), O(t, y)], relaxed=rel, types=[code])


# == LSTM family ==================================================================================

def lstm_params(rng, n_in, units, n_out, cifg=False, peephole=False, proj=False, layer_norm=False):
    p = {}
    for g in "ifco":
        p["wx" + g] = None if (cifg and g == "i") else rnd((units, n_in), -0.5, 0.5, 0.125, rng)
        p["wh" + g] = None if (cifg and g == "i") else rnd((units, n_out), -0.5, 0.5, 0.125, rng)
        p["b" + g] = None if (cifg and g == "i") else rnd((units,), -0.5, 0.5, 0.125, rng)
        p["pc" + g] = rnd((units,), -0.5, 0.5, 0.125, rng) if peephole and g != "c" and not (cifg and g == "i") \
            else None
        p["ln" + g] = rnd((units,), 0.5, 1.5, 0.125, rng) if layer_norm and not (cifg and g == "i") else None
    p["pw"] = rnd((n_out, units), -0.5, 0.5, 0.125, rng) if proj else None
    p["pb"] = rnd((n_out,), -0.25, 0.25, 0.125, rng) if proj else None
    return p


def lstm_step(p, x, h, c, cell_clip=0.0, proj_clip=0.0):
    """One LSTM step (NeuralNetworks.h LSTM formulas, activation tanh)."""
    def pre(g, cell):
        v = x @ p["wx" + g].T + h @ p["wh" + g].T
        if p["pc" + g] is not None:
            v = v + cell * p["pc" + g]
        if p["ln" + g] is not None:  # layer normalization over the units, then weight, then bias
            m, var = v.mean(-1, keepdims=True), v.var(-1, keepdims=True)
            v = (v - m) / np.sqrt(var + 1e-8) * p["ln" + g]
        return v + p["b" + g]
    f = sigmoid(pre("f", c))
    i = 1 - f if p["wxi"] is None else sigmoid(pre("i", c))
    g = np.tanh(pre("c", None))
    c2 = f * c + i * g
    if cell_clip > 0:
        c2 = np.clip(c2, -cell_clip, cell_clip)
    o = sigmoid(pre("o", c2))
    h2 = o * np.tanh(c2)
    if p["pw"] is not None:
        h2 = h2 @ p["pw"].T + p["pb"]
        if proj_clip > 0:
            h2 = np.clip(h2, -proj_clip, proj_clip)
    return h2, c2


def lstm_weight_specs(t, p, aux=False):
    """Inputs 1..17 of LSTM (weights, peepholes, biases, projection); absent ones are omitted."""
    def opt(v):
        return NONE(t.code) if v is None else C(t, v)
    specs = [opt(p["wx" + g]) for g in "ifco"] + [opt(p["wh" + g]) for g in "ifco"]
    specs += [opt(p["pc" + g]) for g in "ifo"] + [opt(p["b" + g]) for g in "ifco"]
    specs += [opt(p["pw"]), opt(p["pb"])]
    return specs


def lstm_ln_specs(t, p):
    return [NONE(t.code) if p["ln" + g] is None else C(t, p["ln" + g]) for g in "ifco"]


def gen_lstm():
    family("lstm")
    rng = np.random.default_rng(14)
    configs = [("basic", {}), ("cifg_peephole", {"cifg": True, "peephole": True}),
               ("projection_clip", {"proj": True})]
    for code, rel in variants("LSTM"):
        t = T(code)
        for cname, cfg in configs:
            if code != F32 and cname != "basic":
                continue
            units, n_in, n_out = 2, 2, (1 if cfg.get("proj") else 2)
            p = lstm_params(rng, n_in, units, n_out, **cfg)
            x = rnd((1, n_in), -1, 1, 0.25, rng)
            h, c = rnd((1, n_out), -0.5, 0.5, 0.125, rng), rnd((1, units), -1, 1, 0.25, rng)
            clip = (0.75, 0.5) if cfg.get("proj") else (0.0, 0.0)
            h2, c2 = lstm_step(p, x, h, c, *clip)
            gates = 3 if cfg.get("cifg") else 4
            ins = [I(t, x)] + lstm_weight_specs(t, p) + [I(t, h), I(t, c), i32(4), fsc(t, clip[0]), fsc(t, clip[1])]
            outs = [O(t, np.zeros((1, units * gates)), ignored=True), O(t, h2), O(t, c2), O(t, h2)]
            model(f"lstm_{tname(code, rel)}_{cname}", "LSTM", ins, outs, relaxed=rel, types=[code])
    # LSTM with layer normalization (feature level 3)
    p = lstm_params(rng, 2, 2, 2, layer_norm=True)
    x, h, c = rnd((1, 2), -1, 1, 0.25, rng), rnd((1, 2), -0.5, 0.5, 0.125, rng), rnd((1, 2), -1, 1, 0.25, rng)
    h2, c2 = lstm_step(p, x, h, c)
    t = T(F32)
    model("lstm_float32_layer_norm", "LSTM",
          [I(t, x)] + lstm_weight_specs(t, p) + [I(t, h), I(t, c), i32(4), fsc(t, 0.0), fsc(t, 0.0)] +
          lstm_ln_specs(t, p), [O(t, np.zeros((1, 8)), ignored=True), O(t, h2), O(t, c2), O(t, h2)], level=29)

    def run(p, xs, h, c, reverse=False):
        outs = [None] * len(xs)
        for k in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
            h, c = lstm_step(p, xs[k], h, c)
            outs[k] = h
        return np.stack(outs), h, c
    # UNIDIRECTIONAL_SEQUENCE_LSTM: time-major [time, batch, input]
    for code, rel in variants("UNIDIRECTIONAL_SEQUENCE_LSTM"):
        t = T(code)
        p = lstm_params(rng, 2, 2, 2)
        xs = rnd((3, 1, 2), -1, 1, 0.25, rng)
        h, c = rnd((1, 2), -0.5, 0.5, 0.125, rng), rnd((1, 2), -1, 1, 0.25, rng)
        ys, hn, cn = run(p, xs, h, c)
        common = lstm_weight_specs(t, p) + [I(t, h), I(t, c), i32(4), fsc(t, 0.0), fsc(t, 0.0)]
        model(f"unidirectional_sequence_lstm_{tname(code, rel)}", "UNIDIRECTIONAL_SEQUENCE_LSTM",
              [I(t, xs)] + common + [bsc(True)] + lstm_ln_specs(t, p), [O(t, ys)], relaxed=rel, types=[code])
        if code == F32 and not rel:
            model("unidirectional_sequence_lstm_float32_batch_major", "UNIDIRECTIONAL_SEQUENCE_LSTM",
                  [I(t, xs.transpose(1, 0, 2))] + common + [bsc(False)] + lstm_ln_specs(t, p),
                  [O(t, ys.transpose(1, 0, 2))])
            model("unidirectional_sequence_lstm_float32_state_outputs", "UNIDIRECTIONAL_SEQUENCE_LSTM",
                  [I(t, xs)] + common + [bsc(True)] + lstm_ln_specs(t, p), [O(t, ys), O(t, hn), O(t, cn)], level=30)
    # BIDIRECTIONAL_SEQUENCE_LSTM
    for code, rel in variants("BIDIRECTIONAL_SEQUENCE_LSTM"):
        t = T(code)
        pf, pb = lstm_params(rng, 2, 2, 2), lstm_params(rng, 2, 2, 2)
        xs = rnd((2, 1, 2), -1, 1, 0.25, rng)
        hf, cf = rnd((1, 2), -0.5, 0.5, 0.125, rng), rnd((1, 2), -1, 1, 0.25, rng)
        hb, cb = rnd((1, 2), -0.5, 0.5, 0.125, rng), rnd((1, 2), -1, 1, 0.25, rng)
        yf = run(pf, xs, hf, cf)[0]
        yb = run(pb, xs, hb, cb, reverse=True)[0]
        ins = [I(t, xs)] + lstm_weight_specs(t, pf) + lstm_weight_specs(t, pb) + \
            [I(t, hf), I(t, cf), I(t, hb), I(t, cb)] + [NONE(code)] * 9 + \
            [i32(4), fsc(t, 0.0), fsc(t, 0.0)]
        tail = [bsc(True)] + [NONE(code)] * 8
        model(f"bidirectional_sequence_lstm_{tname(code, rel)}", "BIDIRECTIONAL_SEQUENCE_LSTM",
              ins + [bsc(False)] + tail, [O(t, yf), O(t, yb)], relaxed=rel, types=[code])
        if code == F32 and not rel:
            model("bidirectional_sequence_lstm_float32_merged", "BIDIRECTIONAL_SEQUENCE_LSTM",
                  ins + [bsc(True)] + tail, [O(t, np.concatenate([yf, yb], -1))])


# == detection / ROI ops ==========================================================================

def bbox_apply(roi, d, img_h, img_w):
    """NNAPI box transform: roi (x1, y1, x2, y2), delta (dx, dy, dw, dh); clipped to the image."""
    w, h = roi[2] - roi[0], roi[3] - roi[1]
    cx, cy = roi[0] + 0.5 * w + d[0] * w, roi[1] + 0.5 * h + d[1] * h
    nw, nh = w * math.exp(d[2]), h * math.exp(d[3])
    return [min(max(cx - nw / 2, 0), img_w), min(max(cy - nh / 2, 0), img_h),
            min(max(cx + nw / 2, 0), img_w), min(max(cy + nh / 2, 0), img_h)]


def iou(a, b):
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def det_types(code):
    """(data type, box type, score type) per detection-op tensor type."""
    if code == QA:
        return T(QA, 0.125, 128), T(Q16A, 0.125, 0), T(QA, 1 / 128, 0)
    if code == QS:
        return T(QS, 0.125, 0), T(Q16A, 0.125, 0), T(QS, 1 / 128, -128)
    return T(code), T(code), T(code)


def gen_detection():
    family("detection")
    # AXIS_ALIGNED_BBOX_TRANSFORM
    rois = np.array([[1.0, 2.0, 9.0, 6.0], [0.0, 0.0, 4.0, 4.0], [4.0, 4.0, 12.0, 14.0]])
    deltas = np.array([[0.25, -0.125, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0],
                       [0.125, 0.25, -0.25, 0.25, -0.5, -0.5, 0.0, 0.0],
                       [0.5, 0.5, 0.0, 0.25, 0.0, 0.0, 0.5, 0.5]])
    batch = np.array([0, 1, 1])
    info = np.array([[16.0, 16.0], [15.0, 12.0]])  # (height, width)
    out = np.array([[c for k in range(2) for c in bbox_apply(rois[i], deltas[i, 4 * k:4 * k + 4], *info[batch[i]])]
                    for i in range(3)])
    for code, rel in variants("AXIS_ALIGNED_BBOX_TRANSFORM") + [(Q16A, False)]:
        if code in (QA, QS, I32):
            continue
        if code == Q16A:
            tb, td = T(Q16A, 0.125, 0), T(QA, 0.0625, 128)
        else:
            tb = td = T(code)
        model(f"axis_aligned_bbox_transform_{tname(code, rel)}", "AXIS_ALIGNED_BBOX_TRANSFORM",
              [I(tb, rois), I(td, deltas), I(T(I32), batch), I(tb, info)], [O(tb, out)], relaxed=rel,
              level=29 if code != Q16A else 29)
    # ROI_ALIGN: average of sampling-point bilinear samples per output bin
    def roi_align(x, rois, bidx, oh, ow, hr, wr, sh, sw):
        n, h, w, c = x.shape
        out = np.zeros((len(rois), oh, ow, c))
        for r, roi in enumerate(rois):
            x1, y1, x2, y2 = roi[0] / wr, roi[1] / hr, roi[2] / wr, roi[3] / hr
            rw, rh = max(x2 - x1, 1.0), max(y2 - y1, 1.0)
            bw, bh = rw / ow, rh / oh
            for i in range(oh):
                for j in range(ow):
                    acc = np.zeros(c)
                    for yi in range(sh):
                        for xi in range(sw):
                            yy = y1 + i * bh + (yi + 0.5) * bh / sh
                            xx = x1 + j * bw + (xi + 0.5) * bw / sw
                            yy, xx = max(yy, 0.0), max(xx, 0.0)
                            y0, x0 = int(math.floor(yy)), int(math.floor(xx))
                            dy, dx = yy - y0, xx - x0
                            if y0 >= h - 1:
                                y0, dy = h - 1, 0.0
                            if x0 >= w - 1:
                                x0, dx = w - 1, 0.0
                            y1_, x1_ = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
                            img = x[bidx[r]]
                            acc += (img[y0, x0] * (1 - dy) * (1 - dx) + img[y0, x1_] * (1 - dy) * dx +
                                    img[y1_, x0] * dy * (1 - dx) + img[y1_, x1_] * dy * dx)
                    out[r, i, j] = acc / (sh * sw)
        return out

    def roi_pool(x, rois, bidx, oh, ow, hr, wr):
        n, h, w, c = x.shape
        out = np.zeros((len(rois), oh, ow, c))
        for r, roi in enumerate(rois):
            x1, y1 = int(rha(roi[0] / wr)), int(rha(roi[1] / hr))
            x2, y2 = int(rha(roi[2] / wr)), int(rha(roi[3] / hr))
            rw, rh = max(x2 - x1 + 1, 1), max(y2 - y1 + 1, 1)
            bw, bh = rw / ow, rh / oh
            for i in range(oh):
                for j in range(ow):
                    hs, he = int(math.floor(i * bh)) + y1, int(math.ceil((i + 1) * bh)) + y1
                    ws, we = int(math.floor(j * bw)) + x1, int(math.ceil((j + 1) * bw)) + x1
                    hs, he, ws, we = min(max(hs, 0), h), min(max(he, 0), h), min(max(ws, 0), w), min(max(we, 0), w)
                    win = x[bidx[r], hs:he, ws:we]
                    out[r, i, j] = win.max(axis=(0, 1)) if win.size else 0
        return out
    rng = np.random.default_rng(15)
    for code, rel in variants("ROI_ALIGN"):
        tx, tb, _ = det_types(code)
        x = tx.rt(rnd((2, 4, 4, 2), -4, 4, 0.25, rng))
        rois = np.array([[0.0, 0.0, 4.0, 4.0], [2.0, 2.0, 8.0, 8.0], [1.0, 3.0, 5.0, 6.0]])
        bidx = np.array([0, 1, 0])
        y = roi_align(x, rois, bidx, 2, 2, 2.0, 2.0, 2, 2)
        model(f"roi_align_{tname(code, rel)}", "ROI_ALIGN",
              [I(tx, x), I(tb, rois), C(T(I32), bidx), i32(2), i32(2), fsc(tx, 2.0), fsc(tx, 2.0), i32(2), i32(2),
               bsc(False)], [O(tx, y)], relaxed=rel, types=[code])
        rois_p = np.array([[0.0, 0.0, 6.0, 6.0], [2.0, 0.0, 6.0, 2.0]])
        bidx_p = np.array([1, 0])
        y = roi_pool(x, rois_p, bidx_p, 2, 2, 2.0, 2.0)
        model(f"roi_pooling_{tname(code, rel)}", "ROI_POOLING",
              [I(tx, x), I(tb, rois_p), C(T(I32), bidx_p), i32(2), i32(2), fsc(tx, 2.0), fsc(tx, 2.0), bsc(False)],
              [O(tx, y)], relaxed=rel, types=[code])
    # HEATMAP_MAX_KEYPOINT: a peak with a symmetric 3x3 neighbourhood (zero gradient: no sub-pixel
    # shift, score = peak value); keypoint = box start + (index + 0.5) * box size / heatmap size
    hm = np.zeros((2, 4, 4, 2))
    peaks = {(0, 0): (1, 2, 0.75), (0, 1): (2, 1, 0.5), (1, 0): (2, 2, 0.875), (1, 1): (1, 1, 0.625)}
    for (b, k), (py, px, v) in peaks.items():
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                hm[b, py + dy, px + dx, k] = v * (1.0 if dy == dx == 0 else 0.5 if dy == 0 or dx == 0 else 0.25)
    boxes = np.array([[2.0, 4.0, 10.0, 12.0], [0.0, 0.0, 16.0, 8.0]])
    scores = np.zeros((2, 2))
    kps = np.zeros((2, 2, 2))
    for (b, k), (py, px, v) in peaks.items():
        scores[b, k] = v
        kps[b, k] = [boxes[b, 0] + (px + 0.5) * (boxes[b, 2] - boxes[b, 0]) / 4,
                     boxes[b, 1] + (py + 0.5) * (boxes[b, 3] - boxes[b, 1]) / 4]
    for code, rel in variants("HEATMAP_MAX_KEYPOINT"):
        if code in (QA, QS):
            th, tb, ts = T(code, 1 / 128, 0 if code == QA else -128), T(Q16A, 0.125, 0), \
                T(code, 1 / 128, 0 if code == QA else -128)
        else:
            th = tb = ts = T(code)
        model(f"heatmap_max_keypoint_{tname(code, rel)}", "HEATMAP_MAX_KEYPOINT",
              [I(th, hm), I(tb, boxes), bsc(False)], [O(ts, scores), O(tb, kps)], relaxed=rel, types=[code])
    model("heatmap_max_keypoint_float32_nchw", "HEATMAP_MAX_KEYPOINT",
          [I(T(F32), hm.transpose(0, 3, 1, 2)), I(T(F32), boxes), bsc(True)], [O(T(F32), scores), O(T(F32), kps)])
    # BOX_WITH_NMS_LIMIT, hard NMS, one foreground class (class 0 is background): box B overlaps
    # A with IoU 81/119 > 0.5 and is suppressed; D is below the score threshold.
    A, B, Cb, D = [0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0], [20.0, 20.0, 30.0, 30.0], [0.0, 20.0, 8.0, 28.0]
    assert iou(A, B) > 0.5 and iou(A, Cb) == 0
    sc = np.array([[0.125, 0.875], [0.25, 0.75], [0.0, 0.625], [0.5, 0.25], [0.0, 0.5]])
    bx = np.array([[0.0] * 4 + A, [0.0] * 4 + B, [0.0] * 4 + Cb, [0.0] * 4 + D, [0.0] * 4 + A])
    bsplit = np.array([0, 0, 0, 0, 1])
    for code, rel in variants("BOX_WITH_NMS_LIMIT"):
        _, tb, ts = det_types(code)
        if code in (QA, QS):
            tb = T(Q16A, 0.125, 0)
        model(f"box_with_nms_limit_{tname(code, rel)}", "BOX_WITH_NMS_LIMIT",
              [I(ts, sc), I(tb, bx), I(T(I32), bsplit), fsc(ts, 0.375), i32(-1), i32(0), fsc(ts, 0.5),
               fsc(ts, 1.0), fsc(ts, 0.375)],
              [O(ts, [0.875, 0.625, 0.5]), O(tb, [A, Cb, A]), O(T(I32), [1, 1, 1]), O(T(I32), [0, 0, 1])],
              relaxed=rel, types=[code])
    # GENERATE_PROPOSALS: 1x2 feature map, one anchor; anchor shifted by (w * width_stride,
    # h * height_stride), transformed by the deltas, clipped; sorted by score; no overlap
    anchors = np.array([[0.0, 0.0, 4.0, 4.0]])
    scores = np.array([0.375, 0.875]).reshape(1, 1, 2, 1)
    gdel = np.array([[0.25, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, 0.0]]).reshape(1, 1, 2, 4)
    props = [bbox_apply([0.0 + 8 * j, 0.0, 4.0 + 8 * j, 4.0], gdel[0, 0, j], 16.0, 16.0) for j in range(2)]
    for code, rel in variants("GENERATE_PROPOSALS"):
        if code in (QA, QS):
            ts, td, ta, tb = T(code, 1 / 128, 0 if code == QA else -128), T(code, 0.125, 0), \
                T(Q16S, 0.125, 0), T(Q16A, 0.125, 0)
        else:
            ts = td = ta = tb = T(code)
        model(f"generate_proposals_{tname(code, rel)}", "GENERATE_PROPOSALS",
              [I(ts, scores), I(td, gdel), I(ta, anchors), I(tb, [[16.0, 16.0]]), fsc(ts, 8.0), fsc(ts, 8.0),
               i32(-1), i32(-1), fsc(ts, 0.5), fsc(ts, 1.0), bsc(False)],
              [O(ts, [0.875, 0.375]), O(tb, [props[1], props[0]]), O(T(I32), [0, 0])], relaxed=rel, types=[code])
    # DETECTION_POSTPROCESSING (fast NMS): anchors (ycenter, xcenter, h, w); box = center +
    # delta / scale * anchor size, size * exp(delta / scale); per anchor its best non-background
    # class; anchor 1 overlaps anchor 0 and is suppressed.
    anc = np.array([[5.0, 5.0, 10.0, 10.0], [5.5, 5.5, 10.0, 10.0], [20.0, 20.0, 8.0, 8.0]])
    dl = np.array([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, -2.0, 0.5, 0.0]])
    cs = np.array([[0.0, 0.875, 0.125], [0.0, 0.75, 0.5], [0.25, 0.375, 0.625]])
    def decode(a, d):
        yc, xc = d[0] / 10 * a[2] + a[0], d[1] / 10 * a[3] + a[1]
        h, w = math.exp(d[2] / 5) * a[2], math.exp(d[3] / 5) * a[3]
        return [yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2]
    boxes = [decode(anc[i], dl[i]) for i in range(3)]
    for code, rel in variants("DETECTION_POSTPROCESSING"):
        t = T(code)
        model(f"detection_postprocessing_{tname(code, rel)}", "DETECTION_POSTPROCESSING",
              [I(t, cs[None]), I(t, dl[None]), I(t, anc), fsc(t, 10.0), fsc(t, 10.0), fsc(t, 5.0), fsc(t, 5.0),
               bsc(False), i32(2), i32(1), i32(1), fsc(t, 0.0), fsc(t, 0.5), bsc(True)],
              [O(t, [[0.875, 0.625]]), O(t, [[boxes[0], boxes[2]]]), O(T(I32), [[0, 1]]), O(T(I32), [2])],
              relaxed=rel, types=[code])


# == LSH_PROJECTION ===============================================================================

M64 = (1 << 64) - 1
K0, K1, K2 = 0xc3a5c85c97cb3127, 0xb492b66fbe98f273, 0x9ae16a3b2f90404f


def _rot(v, s):
    return ((v >> s) | (v << (64 - s))) & M64 if s else v


def _hl16(u, v, mul):
    a = ((u ^ v) * mul) & M64
    a ^= a >> 47
    b = ((v ^ a) * mul) & M64
    b ^= b >> 47
    return (b * mul) & M64


def fingerprint64(s: bytes) -> int:
    """farmhash Fingerprint64 (farmhashna::Hash64) for keys of 4..16 bytes, as a signed int."""
    n = len(s)
    f64 = lambda o: int.from_bytes(s[o:o + 8], "little")
    f32 = lambda o: int.from_bytes(s[o:o + 4], "little")
    if n >= 8:
        mul = K2 + n * 2
        a = (f64(0) + K2) & M64
        b = f64(n - 8)
        c = (_rot(b, 37) * mul + a) & M64
        d = ((_rot(a, 25) + b) * mul) & M64
        h = _hl16(c, d, mul)
    elif n >= 4:
        mul = K2 + n * 2
        a = f32(0)
        h = _hl16((n + (a << 3)) & M64, f32(n - 4), mul)
    else:
        raise ValueError("key too short")
    return h - (1 << 64) if h >> 63 else h


def gen_lsh():
    family("lsh_projection")
    # sign bit (i, j) = sum_rows weight[r] * Fingerprint64(float32 seed hash[i, j] bytes + row bytes) > 0
    hashes = np.array([[0.123, 0.456], [-0.321, 0.789], [1.5, -2.25]], np.float32)
    rows_i = np.array([[12345], [54321], [67890]], np.int64)  # input [3, 1] int32: 8-byte keys
    rows_f = np.array([[1.25, -3.5], [0.5, 7.0]], np.float32)  # input [2, 2] float32: 12-byte keys
    weight = np.array([0.5, -1.25, 2.0])

    def bits(h, rows, w, dtype):
        out = np.zeros(h.shape, np.int64)
        for i in range(h.shape[0]):
            for j in range(h.shape[1]):
                score = 0.0
                for r in range(rows.shape[0]):
                    key = np.float32(h[i, j]).tobytes() + np.asarray(rows[r], dtype).tobytes()
                    score += (1.0 if w is None else w[r]) * float(fingerprint64(key))
                out[i, j] = score > 0
        return out
    for code, hcode in ((F32, F32), (F16, F16)):
        th = T(hcode)
        hv = th.rt(hashes).astype(np.float32)
        # type 2 (DENSE): every bit; type 3 (SPARSE): per function the bits as an integer plus i * 2^bits
        b = bits(hv, rows_i, weight, np.int32)
        sfx = short(code).lower()
        for kind, out in ((2, b.reshape(-1)), (3, (b * [1, 2]).sum(1) + 4 * np.arange(3))):
            model(f"lsh_projection_{sfx}_int32_rows_{'dense' if kind == 2 else 'sparse'}", "LSH_PROJECTION",
                  [C(th, hv), I(T(I32), rows_i), C(th, weight), i32(kind)], [O(T(I32), out)],
                  level=29 if kind == 3 or code == F16 else 27)
    b = bits(hashes[:2], rows_f, None, np.float32)
    model("lsh_projection_float32_float_rows_dense_no_weight", "LSH_PROJECTION",
          [C(T(F32), hashes[:2]), I(T(F32), rows_f), NONE(F32), i32(2)], [O(T(I32), b.reshape(-1))], level=27)
    b = bits(hashes, rows_i, None, np.int32)
    model("lsh_projection_float32_sparse_deprecated", "LSH_PROJECTION",  # type 1: no i * 2^bits offset
          [C(T(F32), hashes), I(T(I32), rows_i), NONE(F32), i32(1)], [O(T(I32), (b * [1, 2]).sum(1))], level=27)


# == quantized LSTMs ==============================================================================

def gen_quantized_lstm():
    family("quantized_lstm")
    # QUANTIZED_16BIT_LSTM: input/output QUANT8_ASYMM (1/128, 128), weights QUANT8_ASYMM (one scale),
    # biases INT32 (scale = weight scale / 128), cell state QUANT16_SYMM (1/2048). Real-valued LSTM:
    # i, f, o = sigmoid(W x + R h + b), g = tanh(...), c' = f c + i g, h' = o tanh(c').
    # The reference computes in fixed point with several roundings; pick a seed whose products and
    # outputs lie within 0.3 of an integer (at least 0.2 units from a rounding boundary).
    # Android's CPU implementation (and the AOSP test goldens) multiplies [input, previous output]
    # by [recurrent-to-gate | input-to-gate] columns, i.e. pairs the input with the recurrent
    # weights, unlike the documented formula. With input size == output size and identical input
    # and recurrent weights both readings give the same result, so this case is unambiguous.
    tx, tw, tc = T(QA, 1 / 128, 128), T(QA, 1 / 64, 128), T(Q16S, 1 / 2048, 0)
    tb = T(I32, 1 / 64 / 128)

    def margin(v):
        f = np.abs(v - np.round(v))
        return f.max()

    def clear_step(x, h, c, W, R, B=None):
        """One real-valued LSTM step (c', h'), or None when a pre-activation saturates or a
        product or output lies within 0.2 units of a rounding boundary."""
        pre = {g: x @ W[g].T + h @ R[g].T + (0 if B is None else B[g]) for g in "ifco"}
        if max(np.abs(v).max() for v in pre.values()) > 7.5:
            return None
        i, f, o, g = sigmoid(pre["i"]), sigmoid(pre["f"]), sigmoid(pre["o"]), np.tanh(pre["c"])
        c2 = f * c + i * g
        h2 = o * np.tanh(c2)
        if margin(f * c * 2048) < 0.3 and margin(i * g * 2048) < 0.3 and margin(c2 * 2048) < 0.3 \
                and margin(h2 * 128) < 0.3:
            return c2, h2
        return None

    for seed in range(5000):
        rng = np.random.default_rng(1000 + seed)
        x = tx.rt(rng.integers(-100, 100, (1, 2)) / 128)
        h = tx.rt(rng.integers(-100, 100, (1, 2)) / 128)
        c = tc.rt(rng.integers(-3000, 3000, (1, 2)) / 2048)
        W = {g: tw.rt(rng.integers(-64, 64, (2, 2)) / 64) for g in "ifco"}
        R = W  # see below
        B = {g: tb.rt(rng.integers(-4000, 4000, 2) * tb.scale) for g in "ifco"}
        step = clear_step(x, h, c, W, R, B)
        if step is not None:
            c2, h2 = step
            break
    else:
        raise RuntimeError("no QUANTIZED_16BIT_LSTM case with enough margin")
    ins = [I(tx, x)] + [C(tw, W[k]) for k in "ifco"] + [C(tw, R[k]) for k in "ifco"] + \
        [C(tb, B[k]) for k in "ifco"] + [I(tc, c), I(tx, h)]
    model("quantized_16bit_lstm_quant8_asymm", "QUANTIZED_16BIT_LSTM", ins, [O(tc, c2), O(tx, h2)], level=29)

    # QUANTIZED_LSTM (feature level 4), the plain configuration: no CIFG, peephole, projection or
    # layer normalization; zero biases and hidden zero point 0; gate intermediate scales 2^-12,
    # cell state QUANT16_SYMM 2^-11, input / output state / output QUANT8_ASYMM_SIGNED 1/128.
    # Real-valued: i, f, o = sigmoid(W x + R h), g = tanh(W x + R h), c' = f c + i g,
    # h' = o tanh(c'); the output is h' (no projection).
    tx, tw, tc = T(QS, 1 / 128, 0), T(Q8S, 1 / 64, 0), T(Q16S, 1 / 2048, 0)
    for seed in range(5000):
        rng = np.random.default_rng(3000 + seed)
        x = tx.rt(rng.integers(-100, 100, (1, 3)) / 128)
        h = tx.rt(rng.integers(-100, 100, (1, 2)) / 128)
        c = tc.rt(rng.integers(-3000, 3000, (1, 2)) / 2048)
        W = {g: tw.rt(rng.integers(-64, 64, (2, 3)) / 64) for g in "ifco"}
        R = {g: tw.rt(rng.integers(-64, 64, (2, 2)) / 64) for g in "ifco"}
        step = clear_step(x, h, c, W, R)
        if step is not None:
            c2, h2 = step
            break
    else:
        raise RuntimeError("no QUANTIZED_LSTM case with enough margin")
    zb = C(T(I32), np.zeros(2, np.int64))
    ins = [I(tx, x)] + [C(tw, W[k]) for k in "ifco"] + [C(tw, R[k]) for k in "ifco"] + \
        [NONE(Q16S)] * 3 + [zb] * 4 + [NONE(Q8S), NONE(I32), I(tx, h), I(tc, c)] + [NONE(Q16S)] * 4 + \
        [fsc(F32, 0.0), fsc(F32, 0.0)] + [fsc(F32, 2.0 ** -12)] * 4 + [i32(0), fsc(F32, 1 / 128)]
    model("quantized_lstm_quant8_asymm_signed", "QUANTIZED_LSTM", ins, [O(tx, h2), O(tc, c2), O(tx, h2)], level=30)


GENERATORS = [v for k, v in list(globals().items()) if k.startswith("gen_")]


def main():
    for g in GENERATORS:
        g()
    for fam, tests in TESTS.items():
        doc = {"format": FORMAT, "source": f"nnts/cts/corpus/generate.py ({fam})", "license": "Apache-2.0",
               "tests": tests}
        with open(HERE / f"{fam}.json", "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
    print(f"{sum(len(t) for t in TESTS.values())} models in {len(TESTS)} files")


if __name__ == "__main__":
    main()
