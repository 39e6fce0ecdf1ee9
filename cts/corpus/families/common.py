"""What every family of the corpus shares: operand types and their encoding, operand specs, the
model graph and its emission into test vectors, the feature levels, and the one random generator
(every family draws from it in a fixed order, so the corpus is deterministic)."""
from __future__ import annotations

import math

import numpy as np

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


ACT = {0: lambda x: x, 1: lambda x: np.maximum(x, 0), 2: lambda x: np.clip(x, -1, 1), 3: lambda x: np.clip(x, 0, 6)}
