"""NNAPI enumerations with the NDK's numeric values (``NeuralNetworks.h``), and per-type facts.

Everything else in ``nnapi_ref`` speaks in these types, so a value printed anywhere in the
suite can be looked up in the NDK header directly.
"""
from __future__ import annotations

from enum import IntEnum

import numpy as np


class OperandCode(IntEnum):
    FLOAT32 = 0
    INT32 = 1
    UINT32 = 2
    TENSOR_FLOAT32 = 3
    TENSOR_INT32 = 4
    TENSOR_QUANT8_ASYMM = 5
    BOOL = 6
    TENSOR_QUANT16_SYMM = 7
    TENSOR_FLOAT16 = 8
    TENSOR_BOOL8 = 9
    FLOAT16 = 10
    TENSOR_QUANT8_SYMM_PER_CHANNEL = 11
    TENSOR_QUANT16_ASYMM = 12
    TENSOR_QUANT8_SYMM = 13
    TENSOR_QUANT8_ASYMM_SIGNED = 14
    MODEL = 15
    SUBGRAPH = 15  # the HAL's name for MODEL


class OperationCode(IntEnum):
    ADD = 0
    AVERAGE_POOL_2D = 1
    CONCATENATION = 2
    CONV_2D = 3
    DEPTHWISE_CONV_2D = 4
    DEPTH_TO_SPACE = 5
    DEQUANTIZE = 6
    EMBEDDING_LOOKUP = 7
    FLOOR = 8
    FULLY_CONNECTED = 9
    HASHTABLE_LOOKUP = 10
    L2_NORMALIZATION = 11
    L2_POOL_2D = 12
    LOCAL_RESPONSE_NORMALIZATION = 13
    LOGISTIC = 14
    LSH_PROJECTION = 15
    LSTM = 16
    MAX_POOL_2D = 17
    MUL = 18
    RELU = 19
    RELU1 = 20
    RELU6 = 21
    RESHAPE = 22
    RESIZE_BILINEAR = 23
    RNN = 24
    SOFTMAX = 25
    SPACE_TO_DEPTH = 26
    SVDF = 27
    TANH = 28
    BATCH_TO_SPACE_ND = 29
    DIV = 30
    MEAN = 31
    PAD = 32
    SPACE_TO_BATCH_ND = 33
    SQUEEZE = 34
    STRIDED_SLICE = 35
    SUB = 36
    TRANSPOSE = 37
    ABS = 38
    ARGMAX = 39
    ARGMIN = 40
    AXIS_ALIGNED_BBOX_TRANSFORM = 41
    BIDIRECTIONAL_SEQUENCE_LSTM = 42
    BIDIRECTIONAL_SEQUENCE_RNN = 43
    BOX_WITH_NMS_LIMIT = 44
    CAST = 45
    CHANNEL_SHUFFLE = 46
    DETECTION_POSTPROCESSING = 47
    EQUAL = 48
    EXP = 49
    EXPAND_DIMS = 50
    GATHER = 51
    GENERATE_PROPOSALS = 52
    GREATER = 53
    GREATER_EQUAL = 54
    GROUPED_CONV_2D = 55
    HEATMAP_MAX_KEYPOINT = 56
    INSTANCE_NORMALIZATION = 57
    LESS = 58
    LESS_EQUAL = 59
    LOG = 60
    LOGICAL_AND = 61
    LOGICAL_NOT = 62
    LOGICAL_OR = 63
    LOG_SOFTMAX = 64
    MAXIMUM = 65
    MINIMUM = 66
    NEG = 67
    NOT_EQUAL = 68
    PAD_V2 = 69
    POW = 70
    PRELU = 71
    QUANTIZE = 72
    QUANTIZED_16BIT_LSTM = 73
    RANDOM_MULTINOMIAL = 74
    REDUCE_ALL = 75
    REDUCE_ANY = 76
    REDUCE_MAX = 77
    REDUCE_MIN = 78
    REDUCE_PROD = 79
    REDUCE_SUM = 80
    ROI_ALIGN = 81
    ROI_POOLING = 82
    RSQRT = 83
    SELECT = 84
    SIN = 85
    SLICE = 86
    SPLIT = 87
    SQRT = 88
    TILE = 89
    TOPK_V2 = 90
    TRANSPOSE_CONV_2D = 91
    UNIDIRECTIONAL_SEQUENCE_LSTM = 92
    UNIDIRECTIONAL_SEQUENCE_RNN = 93
    RESIZE_NEAREST_NEIGHBOR = 94
    QUANTIZED_LSTM = 95
    IF = 96
    WHILE = 97
    ELU = 98
    HARD_SWISH = 99
    FILL = 100
    RANK = 101
    BATCH_MATMUL = 102
    PACK = 103
    MIRROR_PAD = 104
    REVERSE = 105


class ResultCode(IntEnum):
    NO_ERROR = 0
    OUT_OF_MEMORY = 1
    INCOMPLETE = 2
    UNEXPECTED_NULL = 3
    BAD_DATA = 4
    OP_FAILED = 5
    BAD_STATE = 6
    UNMAPPABLE = 7
    OUTPUT_INSUFFICIENT_SIZE = 8
    UNAVAILABLE_DEVICE = 9
    MISSED_DEADLINE_TRANSIENT = 10
    MISSED_DEADLINE_PERSISTENT = 11
    RESOURCE_EXHAUSTED_TRANSIENT = 12
    RESOURCE_EXHAUSTED_PERSISTENT = 13
    DEAD_OBJECT = 14


class FuseCode(IntEnum):
    NONE = 0
    RELU = 1
    RELU1 = 2
    RELU6 = 3


class PaddingCode(IntEnum):
    SAME = 1
    VALID = 2


class PreferenceCode(IntEnum):
    LOW_POWER = 0
    FAST_SINGLE_ANSWER = 1
    SUSTAINED_SPEED = 2


class PriorityCode(IntEnum):
    LOW = 90
    MEDIUM = 100
    HIGH = 110
    DEFAULT = 100


class DeviceTypeCode(IntEnum):
    UNKNOWN = 0
    OTHER = 1
    CPU = 2
    GPU = 3
    ACCELERATOR = 4


class DurationCode(IntEnum):
    ON_HARDWARE = 0
    IN_DRIVER = 1
    FENCED_ON_HARDWARE = 2
    FENCED_IN_DRIVER = 3


class FeatureLevel(IntEnum):
    LEVEL_1 = 27  # Android 8.1, NNAPI 1.0
    LEVEL_2 = 28  # Android 9, NNAPI 1.1
    LEVEL_3 = 29  # Android 10, NNAPI 1.2
    LEVEL_4 = 30  # Android 11, NNAPI 1.3
    LEVEL_5 = 31  # Android 12
    LEVEL_6 = 1000006
    LEVEL_7 = 1000007
    LEVEL_8 = 1000008


class Lifetime(IntEnum):
    """Operand lifetimes of the HAL's model (OperandLifeTime)."""

    TEMPORARY_VARIABLE = 0
    SUBGRAPH_INPUT = 1
    SUBGRAPH_OUTPUT = 2
    CONSTANT_COPY = 3
    CONSTANT_REFERENCE = 4
    NO_VALUE = 5
    SUBGRAPH = 6
    POINTER = 7


# NDK constants.
MAX_SIZE_OF_IMMEDIATELY_COPIED_VALUES = 128
BYTE_SIZE_OF_CACHE_TOKEN = 32
MAX_NUMBER_OF_CACHE_FILES = 32
LOOP_TIMEOUT_DEFAULT_NS = 2_000_000_000
LOOP_TIMEOUT_MAXIMUM_NS = 15_000_000_000

T = OperandCode

DTYPES: dict[OperandCode, np.dtype] = {
    T.FLOAT32: np.dtype(np.float32),
    T.INT32: np.dtype(np.int32),
    T.UINT32: np.dtype(np.uint32),
    T.BOOL: np.dtype(np.bool_),
    T.FLOAT16: np.dtype(np.float16),
    T.TENSOR_FLOAT32: np.dtype(np.float32),
    T.TENSOR_INT32: np.dtype(np.int32),
    T.TENSOR_QUANT8_ASYMM: np.dtype(np.uint8),
    T.TENSOR_QUANT16_SYMM: np.dtype(np.int16),
    T.TENSOR_FLOAT16: np.dtype(np.float16),
    T.TENSOR_BOOL8: np.dtype(np.bool_),
    T.TENSOR_QUANT8_SYMM_PER_CHANNEL: np.dtype(np.int8),
    T.TENSOR_QUANT16_ASYMM: np.dtype(np.uint16),
    T.TENSOR_QUANT8_SYMM: np.dtype(np.int8),
    T.TENSOR_QUANT8_ASYMM_SIGNED: np.dtype(np.int8),
    T.SUBGRAPH: np.dtype(np.int32),
}

SCALAR_TYPES = frozenset({T.FLOAT32, T.INT32, T.UINT32, T.BOOL, T.FLOAT16, T.SUBGRAPH})
TENSOR_TYPES = frozenset(set(DTYPES) - SCALAR_TYPES)
FLOAT_TYPES = frozenset({T.FLOAT32, T.FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_FLOAT16})
QUANT_ASYMM_TYPES = frozenset({T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT16_ASYMM})
QUANT_SYMM_TYPES = frozenset({T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM})
QUANT_TYPES = QUANT_ASYMM_TYPES | QUANT_SYMM_TYPES | {T.TENSOR_QUANT8_SYMM_PER_CHANNEL}

# Zero-point ranges of the quantized types whose zero point may be non-zero.
ZERO_POINT_RANGE = {
    T.TENSOR_QUANT8_ASYMM: (0, 255),
    T.TENSOR_QUANT8_ASYMM_SIGNED: (-128, 127),
    T.TENSOR_QUANT16_ASYMM: (0, 65535),
}


def is_tensor(code: OperandCode) -> bool:
    return code in TENSOR_TYPES


def element_size(code: OperandCode) -> int:
    return DTYPES[code].itemsize


def byte_size(code: OperandCode, dims) -> int:
    """Bytes taken by an operand of fully known shape ``dims``."""
    n = 1
    for d in dims:
        n *= d
    return n * DTYPES[code].itemsize


def combine_dimensions(a, b) -> tuple[int, ...] | None:
    """Merge two partially known shapes (0 = unknown dimension, () = unknown rank); None if they
    conflict."""
    a, b = tuple(a), tuple(b)
    if a == b or not b:  # the usual case: the same shape given twice
        return a
    if not a:
        return b
    if len(a) != len(b) or any(x and y and x != y for x, y in zip(a, b)):
        return None
    return tuple(x or y for x, y in zip(a, b))


def type_name(code: int) -> str:
    """A printable name for an operand code, also for codes outside the enum."""
    try:
        return "SUBGRAPH" if code == 15 else OperandCode(code).name
    except ValueError:
        return f"<operand type {code}>"
