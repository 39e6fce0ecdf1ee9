"""nnts.formats.tflite.importer: every operator mapping against TFLite's own interpreter.

Each case writes a small .tflite model of one operator (or a short chain) with TFLite's schema
(``ai_edge_litert.schema_py_generated``), runs it in TFLite's interpreter with its reference
kernels (the goldens: a second implementation) and, imported by :func:`nnts.formats.tflite.importer.load_tflite`,
on nnapi_ref; the outputs must agree: float32 within 1e-5 (relative and absolute), integer and
boolean outputs exactly, quantized outputs within one quantization step (NNAPI and TFLite round
their requantization multipliers differently, README).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import Compilation
from nnts.formats.tflite import importer as tflite
from nnts.formats.tflite.importer import TFLiteImportError, convert, load_tflite, parse_tflite
from nnts.formats.tflite.writer import GraphBuilder, options as tflite_options

schema = pytest.importorskip("ai_edge_litert.schema_py_generated", reason="needs ai-edge-litert")
pytest.importorskip("flatbuffers")
from ai_edge_litert.interpreter import Interpreter, OpResolverType  # noqa: E402


class Graph(GraphBuilder):
    """The project's .tflite writer (:mod:`nnts.formats.tflite.writer`) with the tests' shorthands:
    numpy dtypes, (scale, zero point) pairs, options named with their fields."""

    def __init__(self):
        super().__init__("tests/test_tflite_ops.py")

    def tensor(self, shape, dtype=np.float32, data=None, quant=None, axis=0, sparsity=None, raw=None,
               variable=False) -> int:
        """``quant``: (scale, zero point) or (scales, zero points) per channel along ``axis``;
        ``raw``: the buffer's values when they are not ``data`` (sparse tensors)."""
        scale, zero_point = quant if quant is not None else (None, None)
        return super().tensor(f"t{len(self.tensors)}", shape, np.dtype(dtype).name, data, scale, zero_point, axis,
                              variable, sparsity=sparsity, stored=raw)

    def const(self, data, dtype=None, quant=None, axis=0) -> int:
        data = np.asarray(data, dtype)
        return self.tensor(data.shape, data.dtype, data, quant, axis)

    def op(self, name: str, ins, outs, options: str | None = None, **fields) -> None:
        """Operator ``name`` with ``options`` (e.g. "Conv2DOptions") of ``fields`` (camelCase)."""
        super().op(name, ins, outs, tflite_options(options, **fields) if options is not None else None,
                   version=2 if name == "BROADCAST_TO" else 1)  # BROADCAST_TO's versions start at 2


def load_bytes(data: bytes):
    """load_tflite of a model given as bytes (through a temporary file)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.tflite"
        path.write_bytes(data)
        return load_tflite(path)


def run_tflite(path, inputs, reference: bool = True) -> list[np.ndarray]:
    """TFLite's reference kernels (``reference``), or its default ones, also for the few operators
    (ELU) that the reference resolver does not register."""
    it = None
    if reference:
        try:
            it = Interpreter(model_path=str(path), num_threads=1,
                             experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        except ValueError as e:
            if "Didn't find op" not in str(e):
                raise
    it = it or Interpreter(model_path=str(path), num_threads=1)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def run_nnapi(path, inputs):
    model, info = load_tflite(path)
    compilation = Compilation(model)
    compilation.finish()
    return tflite.infer(compilation, info, inputs), info


def check(tmp_path, data: bytes, inputs, steps: int = 1, atol: float = 1e-5, reference: bool = True):
    """Run the model in TFLite and on nnapi_ref; assert the outputs agree (see the module doc)."""
    path = tmp_path / "op.tflite"
    path.write_bytes(data)
    theirs = run_tflite(path, inputs, reference)
    ours, info = run_nnapi(path, inputs)
    assert len(ours) == len(theirs)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape and a.dtype == b.dtype, f"output {k}: {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
        if info.outputs[k].quantized:
            diff = np.abs(a.astype(np.int64) - b.astype(np.int64))
            assert diff.max(initial=0) <= steps, f"output {k}: {diff.max()} steps\n{a}\n{b}"
        elif a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=atol, atol=atol, err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"output {k}")
    return info


RNG = np.random.default_rng(20261123)
Q8 = {np.int8: (-128, 127), np.uint8: (0, 255)}


def floats(*shape, lo=-3.0, hi=3.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def q8(shape, dtype=np.int8):
    lo, hi = Q8[dtype]
    return RNG.integers(lo, hi + 1, shape).astype(dtype)


CASES = {}


def case(name):
    def register(fn):
        CASES[name] = fn
        return fn
    return register


def single(op, x, out_shape, out_dtype=None, options=None, consts=(), out_quant=None, x_quant=None, n_out=1,
           out_shapes=None, **fields):
    """A model of one operator: input ``x`` (an array), then constant inputs ``consts`` (arrays,
    or None for an omitted input), outputs of ``out_shape`` (or ``out_shapes``)."""
    g = Graph()
    xi = g.tensor(x.shape, x.dtype, quant=x_quant)
    ins = [xi] + [-1 if c is None else g.const(c) for c in consts]
    shapes = out_shapes or [out_shape] * n_out
    outs = [g.tensor(s, out_dtype or x.dtype, quant=out_quant if out_quant is not None else x_quant)
            for s in shapes]
    g.op(op, ins, outs, options, **fields)
    return g.finish([xi], outs), [x]


# ----------------------------------------------------------------------------- elementwise

@pytest.mark.parametrize("name", ["EXP", "LOG", "SQRT", "RSQRT", "ABS", "NEG", "SIN", "FLOOR", "ELU", "TANH",
                                  "LOGISTIC", "HARD_SWISH", "RELU", "RELU6", "RELU_N1_TO_1", "LOG_SOFTMAX"])
def test_float_unary(tmp_path, name):
    x = floats(2, 3, 5, lo=0.1 if name in ("LOG", "SQRT", "RSQRT") else -3.0)
    opts = {"LOG_SOFTMAX": "LogSoftmaxOptions"}.get(name)
    check(tmp_path, *single(name, x, x.shape, options=opts))


@pytest.mark.parametrize("name, out_quant", [("LOGISTIC", (1 / 256, -128)), ("TANH", (1 / 128, 0)),
                                             ("HARD_SWISH", (0.03, -30)), ("RELU", (0.02, -128)),
                                             ("RELU6", (6 / 255, -128))])
def test_int8_unary(tmp_path, name, out_quant):
    check(tmp_path, *single(name, q8((1, 4, 4, 3)), (1, 4, 4, 3), x_quant=(0.05, 3), out_quant=out_quant))


@pytest.mark.parametrize("name", ["MAXIMUM", "MINIMUM", "POW", "PRELU", "SQUARED_DIFFERENCE"])
def test_float_binary(tmp_path, name):
    x = floats(2, 3, 4, lo=0.5 if name == "POW" else -3.0)
    y = floats(4, lo=0.2 if name == "PRELU" else -2.0, hi=2.0)
    check(tmp_path, *single(name, x, x.shape, consts=[y]))


@pytest.mark.parametrize("name", ["MAXIMUM", "MINIMUM"])
def test_int8_maximum_minimum(tmp_path, name):
    g = Graph()
    a = g.tensor((2, 5), np.int8, quant=(0.1, 2))
    b = g.tensor((2, 5), np.int8, quant=(0.1, 2))
    o = g.tensor((2, 5), np.int8, quant=(0.1, 2))
    g.op(name, [a, b], [o])
    check(tmp_path, g.finish([a, b], [o]), [q8((2, 5)), q8((2, 5))])


@pytest.mark.parametrize("name", ["LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL"])
def test_comparisons(tmp_path, name):
    x = np.round(floats(3, 4))   # whole numbers, so that EQUAL has matches
    c = np.round(floats(4))
    check(tmp_path, *single(name, x, x.shape, np.bool_, consts=[c]))


def test_int8_comparison_with_different_scales(tmp_path):
    g = Graph()
    a = g.tensor((6,), np.int8, quant=(0.1, 0))
    b = g.const(np.array([5, 10, -10, 0, 7, -3], np.int8), quant=(0.2, 0))
    o = g.tensor((6,), np.bool_)
    g.op("GREATER", [a, b], [o])
    check(tmp_path, g.finish([a], [o]), [np.array([10, 19, -21, 1, 15, -6], np.int8)])


@pytest.mark.parametrize("name", ["LOGICAL_AND", "LOGICAL_OR"])
def test_logical_binary(tmp_path, name):
    x = RNG.integers(0, 2, (3, 4)).astype(np.bool_)
    check(tmp_path, *single(name, x, x.shape, consts=[RNG.integers(0, 2, (3, 4)).astype(np.bool_)]))


def test_logical_not(tmp_path):
    check(tmp_path, *single("LOGICAL_NOT", RNG.integers(0, 2, (7,)).astype(np.bool_), (7,)))


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_leaky_relu(tmp_path, dtype):
    if dtype == np.float32:
        check(tmp_path, *single("LEAKY_RELU", floats(2, 8), (2, 8), options="LeakyReluOptions", alpha=0.2))
    else:
        check(tmp_path, *single("LEAKY_RELU", q8((2, 8)), (2, 8), x_quant=(0.05, -5), out_quant=(0.04, 10),
                                options="LeakyReluOptions", alpha=0.3))


def test_int8_prelu(tmp_path):
    g = Graph()
    x = g.tensor((1, 3, 3, 4), np.int8, quant=(0.05, 1))
    alpha = g.const(q8((4,)), quant=(0.004, 0))
    o = g.tensor((1, 3, 3, 4), np.int8, quant=(0.06, -3))
    g.op("PRELU", [x, alpha], [o])
    check(tmp_path, g.finish([x], [o]), [q8((1, 3, 3, 4))])


def test_select(tmp_path):
    g = Graph()
    c = g.tensor((2, 3), np.bool_)
    a, b = g.tensor((2, 3)), g.const(floats(2, 3))
    o = g.tensor((2, 3))
    g.op("SELECT", [c, a, b], [o])
    check(tmp_path, g.finish([c, a], [o]), [RNG.integers(0, 2, (2, 3)).astype(np.bool_), floats(2, 3)])


@pytest.mark.parametrize("src, dst", [(np.float32, np.int32), (np.int32, np.float32), (np.uint8, np.float32),
                                      (np.float32, np.uint8)])
def test_cast(tmp_path, src, dst):
    x = (floats(2, 5, lo=0, hi=200).astype(src) if src != np.uint8 else
         RNG.integers(0, 256, (2, 5)).astype(np.uint8))
    check(tmp_path, *single("CAST", x, x.shape, dst))


def test_squared_difference_refuses_quantized():
    g = Graph()
    a = g.tensor((4,), np.int8, quant=(0.1, 0))
    o = g.tensor((4,), np.int8, quant=(0.1, 0))
    g.op("SQUARED_DIFFERENCE", [a, a], [o])
    with pytest.raises(TFLiteImportError, match=r"SQUARED_DIFFERENCE\): TENSOR_QUANT8_ASYMM_SIGNED output"):
        load_bytes(g.finish([a], [o]))


# ----------------------------------------------------------------------------- reductions, normalization

@pytest.mark.parametrize("name", ["SUM", "REDUCE_PROD", "REDUCE_MAX", "REDUCE_MIN"])
@pytest.mark.parametrize("keep", [False, True])
def test_float_reductions(tmp_path, name, keep):
    x = floats(2, 3, 4, lo=0.5, hi=1.5)
    out = (2, 1, 4) if keep else (2, 4)
    check(tmp_path, *single(name, x, out, consts=[np.array([1], np.int32)], options="ReducerOptions", keepDims=keep))


@pytest.mark.parametrize("name", ["REDUCE_MAX", "REDUCE_MIN"])
def test_int8_reduce_max_min(tmp_path, name):
    check(tmp_path, *single(name, q8((2, 3, 4)), (2, 3), consts=[np.array([-1], np.int32)], x_quant=(0.1, 4),
                            options="ReducerOptions", keepDims=False))


def test_reduce_any(tmp_path):
    x = RNG.integers(0, 2, (3, 4)).astype(np.bool_)
    check(tmp_path, *single("REDUCE_ANY", x, (3,), consts=[np.array([1], np.int32)], options="ReducerOptions"))


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_l2_normalization(tmp_path, dtype):
    if dtype == np.float32:
        check(tmp_path, *single("L2_NORMALIZATION", floats(2, 6), (2, 6), options="L2NormOptions"))
    else:
        check(tmp_path, *single("L2_NORMALIZATION", q8((1, 2, 2, 6)), (1, 2, 2, 6), x_quant=(0.1, 3),
                                out_quant=(1 / 128, 0), options="L2NormOptions"))


def test_local_response_normalization(tmp_path):
    """Against TFLite's optimized kernel, which computes x / (bias + alpha * sum(x^2 over the
    window))^beta as NNAPI defines it; its reference kernel (BUILTIN_REF) differs from that
    formula by up to 0.23 here (measured with ai-edge-litert 2.3.0)."""
    data, inputs = single("LOCAL_RESPONSE_NORMALIZATION", floats(1, 3, 3, 8), (1, 3, 3, 8),
                          options="LocalResponseNormalizationOptions", radius=2, bias=1.5, alpha=0.3, beta=0.6)
    check(tmp_path, data, inputs, reference=False)


def test_l2_pool(tmp_path):
    check(tmp_path, *single("L2_POOL_2D", floats(1, 6, 6, 3), (1, 3, 3, 3), options="Pool2DOptions", padding=1,
                            strideW=2, strideH=2, filterWidth=2, filterHeight=2))


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_arg_max_min(tmp_path, dtype):
    x = floats(3, 7) if dtype == np.float32 else q8((3, 7))
    quant = None if dtype == np.float32 else (0.1, 0)
    for name, opts in (("ARG_MAX", "ArgMaxOptions"), ("ARG_MIN", "ArgMinOptions")):
        g = Graph()
        xi = g.tensor(x.shape, dtype, quant=quant)
        o = g.tensor((3,), np.int32)
        g.op(name, [xi, g.const(np.array([1], np.int32))], [o], opts, outputType=schema.TensorType.INT32)
        check(tmp_path, g.finish([xi], [o]), [x])


# ----------------------------------------------------------------------------- shapes and layout

@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_pad_mirror_pad(tmp_path, dtype):
    x = floats(1, 3, 4, 2) if dtype == np.float32 else q8((1, 3, 4, 2), np.uint8)
    quant = None if dtype == np.float32 else (0.1, 128)
    pads = np.array([[0, 0], [1, 2], [2, 1], [0, 0]], np.int32)
    for mode, shape in ((0, (1, 6, 7, 2)), (1, (1, 6, 7, 2))):
        check(tmp_path, *single("MIRROR_PAD", x, shape, consts=[pads], x_quant=quant, options="MirrorPadOptions",
                                mode=mode))
    check(tmp_path, *single("PAD", x, (1, 6, 7, 2), consts=[pads], x_quant=quant))


def test_padv2_int64_paddings(tmp_path):
    pads = np.array([[1, 0], [0, 2]], np.int64)
    check(tmp_path, *single("PADV2", floats(2, 3), (3, 5), consts=[pads, np.array([0.5], np.float32)]))


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_transpose(tmp_path, dtype):
    x = floats(2, 3, 4) if dtype == np.float32 else q8((2, 3, 4))
    check(tmp_path, *single("TRANSPOSE", x, (4, 2, 3), consts=[np.array([2, 0, 1], np.int32)],
                            x_quant=None if dtype == np.float32 else (0.5, -1)))


def test_split_and_split_v(tmp_path):
    x = floats(2, 6, 3)
    g = Graph()
    xi = g.tensor(x.shape)
    outs = [g.tensor((2, 2, 3)) for _ in range(3)]
    g.op("SPLIT", [g.const(np.array(1, np.int32)), xi], outs, "SplitOptions", numSplits=3)
    check(tmp_path, g.finish([xi], outs), [x])
    g = Graph()
    xi = g.tensor(x.shape)
    outs = [g.tensor((2, n, 3)) for n in (1, 3, 2)]
    g.op("SPLIT_V", [xi, g.const(np.array([1, -1, 2], np.int32)), g.const(np.array(-2, np.int32))], outs,
         "SplitVOptions", numSplits=3)
    check(tmp_path, g.finish([xi], outs), [x])


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_strided_slice_and_slice(tmp_path, dtype):
    x = floats(3, 8, 5) if dtype == np.float32 else q8((3, 8, 5))
    quant = None if dtype == np.float32 else (0.1, 0)
    begin, end, strides = (np.array(v, np.int32) for v in ([1, -7, 0], [3, 8, 4], [1, 2, 1]))
    check(tmp_path, *single("STRIDED_SLICE", x, (3, 4, 4), consts=[begin, end, strides], x_quant=quant,
                            options="StridedSliceOptions", beginMask=1, endMask=0))
    check(tmp_path, *single("STRIDED_SLICE", x, (4, 4), consts=[begin, end, strides], x_quant=quant,
                            options="StridedSliceOptions", shrinkAxisMask=1))
    check(tmp_path, *single("SLICE", x, (2, 3, 5), consts=[np.array([1, 2, 0], np.int32),
                                                            np.array([2, 3, -1], np.int32)], x_quant=quant))


def test_strided_slice_ellipsis_is_refused():
    data, _ = single("STRIDED_SLICE", floats(3, 4), (3, 4), consts=[np.zeros(2, np.int32), np.array([3, 4], np.int32),
                                                                     np.ones(2, np.int32)],
                     options="StridedSliceOptions", ellipsisMask=1)
    with pytest.raises(TFLiteImportError, match=r"STRIDED_SLICE\): ellipsisMask 1 is not supported"):
        load_bytes(data)


def test_squeeze_expand_dims_reshape(tmp_path):
    g = Graph()
    xi = g.tensor((2, 1, 3))
    a, b = g.tensor((2, 3)), g.tensor((2, 3, 1))
    g.op("SQUEEZE", [xi], [a], "SqueezeOptions", squeezeDims=[1])
    g.op("EXPAND_DIMS", [a, g.const(np.array([-1], np.int32))], [b])
    check(tmp_path, g.finish([xi], [b]), [floats(2, 1, 3)])


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_gather(tmp_path, dtype):
    x = floats(4, 5) if dtype == np.float32 else q8((4, 5))
    check(tmp_path, *single("GATHER", x, (4, 3), consts=[np.array([4, 0, 2], np.int32)],
                            x_quant=None if dtype == np.float32 else (0.1, 1), options="GatherOptions", axis=1))


def test_embedding_lookup(tmp_path):
    g = Graph()
    ids = g.tensor((3,), np.int32)
    o = g.tensor((3, 4))
    g.op("EMBEDDING_LOOKUP", [ids, g.const(floats(5, 4))], [o])
    check(tmp_path, g.finish([ids], [o]), [np.array([4, 0, 4], np.int32)])


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_depth_space(tmp_path, dtype):
    quant = None if dtype == np.float32 else (0.1, 1)
    x = floats(1, 2, 3, 8) if dtype == np.float32 else q8((1, 2, 3, 8))
    check(tmp_path, *single("DEPTH_TO_SPACE", x, (1, 4, 6, 2), x_quant=quant, options="DepthToSpaceOptions",
                            blockSize=2))
    x = floats(1, 4, 6, 2) if dtype == np.float32 else q8((1, 4, 6, 2))
    check(tmp_path, *single("SPACE_TO_DEPTH", x, (1, 2, 3, 8), x_quant=quant, options="SpaceToDepthOptions",
                            blockSize=2))


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_space_batch(tmp_path, dtype):
    quant = None if dtype == np.float32 else (0.1, 1)
    x = floats(1, 4, 3, 2) if dtype == np.float32 else q8((1, 4, 3, 2))
    check(tmp_path, *single("SPACE_TO_BATCH_ND", x, (4, 2, 2, 2), x_quant=quant,
                            consts=[np.array([2, 2], np.int32), np.array([[0, 0], [0, 1]], np.int32)]))
    x = floats(4, 2, 2, 2) if dtype == np.float32 else q8((4, 2, 2, 2))
    check(tmp_path, *single("BATCH_TO_SPACE_ND", x, (1, 4, 4, 2), x_quant=quant,
                            consts=[np.array([2, 2], np.int32), np.zeros((2, 2), np.int32)]))


def test_batch_to_space_crops_are_refused():
    data, _ = single("BATCH_TO_SPACE_ND", floats(4, 2, 2, 1), (1, 4, 3, 1),
                     consts=[np.array([2, 2], np.int32), np.array([[0, 0], [0, 1]], np.int32)])
    with pytest.raises(TFLiteImportError, match=r"BATCH_TO_SPACE_ND\): crops \[0, 0, 0, 1\]"):
        load_bytes(data)


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_tile(tmp_path, dtype):
    x = floats(2, 3) if dtype == np.float32 else q8((2, 3))
    check(tmp_path, *single("TILE", x, (4, 9), consts=[np.array([2, 3], np.int32)],
                            x_quant=None if dtype == np.float32 else (0.1, 0)))


def test_pack_unpack(tmp_path):
    g = Graph()
    a, b = g.tensor((2, 3)), g.tensor((2, 3))
    p = g.tensor((2, 2, 3))
    outs = [g.tensor((2, 2)) for _ in range(3)]
    g.op("PACK", [a, b], [p], "PackOptions", valuesCount=2, axis=1)
    g.op("UNPACK", [p], outs, "UnpackOptions", num=3, axis=2)
    check(tmp_path, g.finish([a, b], [p] + outs), [floats(2, 3), floats(2, 3)])


def test_topk(tmp_path):
    g = Graph()
    x = g.tensor((2, 6))
    v, i = g.tensor((2, 3)), g.tensor((2, 3), np.int32)
    g.op("TOPK_V2", [x, g.const(np.array(3, np.int32))], [v, i])
    check(tmp_path, g.finish([x], [v, i]), [floats(2, 6)])


@pytest.mark.parametrize("name, opts", [("RESIZE_BILINEAR", "ResizeBilinearOptions"),
                                        ("RESIZE_NEAREST_NEIGHBOR", "ResizeNearestNeighborOptions")])
@pytest.mark.parametrize("align, half", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_resize(tmp_path, name, opts, align, half, dtype):
    x = floats(1, 3, 4, 2) if dtype == np.float32 else q8((1, 3, 4, 2), np.uint8)
    check(tmp_path, *single(name, x, (1, 5, 7, 2), consts=[np.array([5, 7], np.int32)], options=opts,
                            x_quant=None if dtype == np.float32 else (0.1, 120), alignCorners=align,
                            halfPixelCenters=half))


def test_fill_shape_rank(tmp_path):
    g = Graph()
    x = g.tensor((2, 3))
    s, f, r = g.tensor((2,), np.int32), g.tensor((2, 3)), g.tensor((), np.int32)
    y = g.tensor((2, 3))
    g.op("SHAPE", [x], [s], "ShapeOptions", outType=schema.TensorType.INT32)
    g.op("RANK", [x], [r])
    g.op("FILL", [g.const(np.array([2, 3], np.int32)), g.const(np.array(1.5, np.float32))], [f])
    g.op("ADD", [x, f], [y])
    info = check(tmp_path, g.finish([x], [y]), [floats(2, 3)])
    assert info.nnapi_operations == ["FILL", "ADD"]


def test_batch_matmul(tmp_path):
    g = Graph()
    a = g.tensor((2, 3, 4))
    o = g.tensor((2, 3, 5))
    g.op("BATCH_MATMUL", [a, g.const(floats(2, 5, 4))], [o], "BatchMatMulOptions", adjY=True)
    check(tmp_path, g.finish([a], [o]), [floats(2, 3, 4)])


@pytest.mark.parametrize("padding, stride", [(0, 2), (1, 2), (0, 1)])
def test_float_transpose_conv(tmp_path, padding, stride):
    h, w = 3, 4
    oh, ow = (h * stride, w * stride) if padding == 0 else ((h - 1) * stride + 3, (w - 1) * stride + 3)
    g = Graph()
    x = g.tensor((1, h, w, 2))
    o = g.tensor((1, oh, ow, 3))
    g.op("TRANSPOSE_CONV", [g.const(np.array([1, oh, ow, 3], np.int32)), g.const(floats(3, 3, 3, 2)), x,
                            g.const(floats(3))], [o], "TransposeConvOptions", padding=padding, strideW=stride,
         strideH=stride)
    check(tmp_path, g.finish([x], [o]), [floats(1, h, w, 2)])


def test_int8_per_channel_transpose_conv(tmp_path):
    g = Graph()
    x = g.tensor((1, 3, 3, 2), np.int8, quant=(0.05, 2))
    ws = np.array([0.01, 0.02, 0.015], np.float32)
    w = g.const(q8((3, 3, 3, 2)), quant=(ws, [0, 0, 0]), axis=0)
    b = g.const(RNG.integers(-200, 200, 3).astype(np.int32), quant=(0.05 * ws, [0, 0, 0]))
    o = g.tensor((1, 6, 6, 3), np.int8, quant=(0.03, -4))
    g.op("TRANSPOSE_CONV", [g.const(np.array([1, 6, 6, 3], np.int32)), w, x, b], [o], "TransposeConvOptions",
         padding=0, strideW=2, strideH=2)
    check(tmp_path, g.finish([x], [o]), [q8((1, 3, 3, 2))])


# ----------------------------------------------------------------------------- quantization, weights

def test_quantize_dequantize(tmp_path):
    g = Graph()
    x = g.tensor((2, 5))
    q = g.tensor((2, 5), np.uint8, quant=(0.02, 100))
    d = g.tensor((2, 5))
    g.op("QUANTIZE", [x], [q])
    g.op("DEQUANTIZE", [q], [d])
    check(tmp_path, g.finish([x], [q, d]), [floats(2, 5, lo=-1.5, hi=1.5)])


def test_float16_weights_behind_dequantize(tmp_path):
    """TFLite's float16 quantization: float16 constants, each behind a DEQUANTIZE to float32."""
    w = floats(4, 6)
    g = Graph()
    x = g.tensor((3, 6))
    w16, wf = g.const(w.astype(np.float16)), g.tensor((4, 6))
    b16, bf = g.const(floats(4).astype(np.float16)), g.tensor((4,))
    o = g.tensor((3, 4))
    g.op("DEQUANTIZE", [w16], [wf])
    g.op("DEQUANTIZE", [b16], [bf])
    g.op("FULLY_CONNECTED", [x, wf, bf], [o], "FullyConnectedOptions")
    info = check(tmp_path, g.finish([x], [o]), [floats(3, 6)])
    assert info.nnapi_operations == ["FULLY_CONNECTED"]


def sparse_csr(dense: np.ndarray, column_major: bool = False):
    """``dense`` (2-D) in TFLite's sparsity format: the outer traversal dimension DENSE, the inner
    one SPARSE_CSR; rows outer (traversal order [0, 1]) or columns outer ([1, 0])."""
    walk = dense.T if column_major else dense
    outer = schema.DimensionMetadataT()
    outer.format, outer.denseSize = schema.DimensionType.DENSE, walk.shape[0]
    inner = schema.DimensionMetadataT()
    inner.format = schema.DimensionType.SPARSE_CSR
    nz = walk != 0
    inner.arraySegmentsType, inner.arraySegments = schema.SparseIndexVector.Int32Vector, schema.Int32VectorT()
    inner.arraySegments.values = np.concatenate([[0], np.cumsum(nz.sum(axis=1))]).astype(np.int32)
    inner.arrayIndicesType, inner.arrayIndices = schema.SparseIndexVector.Uint8Vector, schema.Uint8VectorT()
    inner.arrayIndices.values = np.nonzero(nz)[1].astype(np.uint8)
    s = schema.SparsityParametersT()
    s.traversalOrder, s.dimMetadata = ([1, 0] if column_major else [0, 1]), [outer, inner]
    return s, walk[nz]


def block_sparse(dense: np.ndarray, block=(1, 4)):
    """``dense`` (2-D) block-sparse: dimensions (rows/br, cols/bc) DENSE / SPARSE_CSR over blocks,
    then the block's own (br, bc) DENSE; a block is kept when any of its values is non-zero."""
    br, bc = block
    r, c = dense.shape[0] // br, dense.shape[1] // bc
    blocks = dense.reshape(r, br, c, bc).transpose(0, 2, 1, 3)
    keep = np.any(blocks != 0, axis=(2, 3))
    levels = []
    for fmt, size in ((schema.DimensionType.DENSE, r), (schema.DimensionType.SPARSE_CSR, None),
                      (schema.DimensionType.DENSE, br), (schema.DimensionType.DENSE, bc)):
        m = schema.DimensionMetadataT()
        m.format = fmt
        if size is not None:
            m.denseSize = size
        else:
            m.arraySegmentsType, m.arraySegments = schema.SparseIndexVector.Int32Vector, schema.Int32VectorT()
            m.arraySegments.values = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int32)
            m.arrayIndicesType, m.arrayIndices = schema.SparseIndexVector.Uint16Vector, schema.Uint16VectorT()
            m.arrayIndices.values = np.nonzero(keep)[1].astype(np.uint16)
        levels.append(m)
    s = schema.SparsityParametersT()
    s.traversalOrder, s.blockMap, s.dimMetadata = [0, 1, 2, 3], [0, 1], levels
    return s, blocks[keep].reshape(-1)


@pytest.mark.parametrize("layout", ["csr", "csr column-major", "block"])
def test_sparse_weights_are_densified(tmp_path, layout):
    """A sparse FULLY_CONNECTED weight behind DENSIFY (as TFLite's converter writes it) imports to
    exactly the dense weights, and the model agrees with TFLite."""
    dense = floats(4, 8)
    dense[np.abs(dense) < 1.5] = 0
    if layout == "block":
        dense[:, 4:] = 0
        dense[1] = 0
    sparsity, values = block_sparse(dense) if layout == "block" else sparse_csr(dense, "column" in layout)
    g = Graph()
    x = g.tensor((2, 8))
    ws = g.tensor((4, 8), sparsity=sparsity, raw=values)
    wd, o = g.tensor((4, 8)), g.tensor((2, 4))
    g.op("DENSIFY", [ws], [wd])
    g.op("FULLY_CONNECTED", [x, wd, g.const(floats(4))], [o], "FullyConnectedOptions")
    data = g.finish([x], [o])
    np.testing.assert_array_equal(parse_tflite(data).tensors[ws].data, dense)
    check(tmp_path, data, [floats(2, 8)])


def test_corrupt_sparsity_is_a_clear_error():
    sparsity, values = sparse_csr(np.eye(4, dtype=np.float32))
    sparsity.dimMetadata[1].arrayIndices.values = np.array([0, 1, 2, 9], np.uint8)   # column 9 of 4
    g = Graph()
    x = g.tensor((2, 4))
    ws = g.tensor((4, 4), sparsity=sparsity, raw=values)
    wd, o = g.tensor((4, 4)), g.tensor((2, 4))
    g.op("DENSIFY", [ws], [wd])
    g.op("FULLY_CONNECTED", [x, wd], [o], "FullyConnectedOptions")
    with pytest.raises(TFLiteImportError, match="sparse index lies outside shape"):
        load_bytes(g.finish([x], [o]))


# ----------------------------------------------------------------------------- resource variables

def streaming_model(init):
    """A streaming model as TFLite's converter writes one: CALL_ONCE runs subgraph 1, which
    assigns ``init`` to a resource variable; main reads it, adds the input, outputs the sum and
    assigns it back."""
    g = Graph()
    h = g.tensor((), np.int32)
    g.op("VAR_HANDLE", [], [h], "VarHandleOptions", container="", sharedName="state")
    g.op("ASSIGN_VARIABLE", [h, g.const(init)], [])
    init_graph = g.subgraph([], [])
    g.op("CALL_ONCE", [], [], "CallOnceOptions", initSubgraphIndex=1)
    h = g.tensor((), np.int32)
    g.op("VAR_HANDLE", [], [h], "VarHandleOptions", container="", sharedName="state")
    state, x, y = g.tensor(init.shape), g.tensor(init.shape), g.tensor(init.shape)
    g.op("READ_VARIABLE", [h], [state])
    g.op("ADD", [x, state], [y], "AddOptions")
    g.op("ASSIGN_VARIABLE", [h, y], [])
    return g.finish([x], [y], [init_graph])


def test_resource_variables_start_from_their_initial_values(tmp_path):
    """Each nnapi_ref inference is a fresh TFLite interpreter's first invocation."""
    init = floats(2, 3)
    data = streaming_model(init)
    x = floats(2, 3)
    info = check(tmp_path, data, [x])
    assert info.nnapi_operations == ["ADD"] and "resource variables" in info.notes[0]
    ours, _ = run_nnapi(tmp_path / "op.tflite", [x])
    np.testing.assert_allclose(ours[0], x + init, rtol=1e-6)


def test_control_flow_operator_is_named():
    g = Graph()
    x, y = g.tensor((2,)), g.tensor((2,))
    g.op("NEG", [x], [y])
    body = g.subgraph([x], [y])
    c, x, y = g.tensor((1,), np.bool_), g.tensor((2,)), g.tensor((2,))
    g.op("IF", [c, x], [y], "IfOptions", thenSubgraphIndex=1, elseSubgraphIndex=1)
    with pytest.raises(TFLiteImportError, match=r"operator 0 \(IF\): is not supported"):
        load_bytes(g.finish([c, x], [y], [body]))


# ----------------------------------------------------------------------------- the benchmark set's operators

@pytest.mark.parametrize("name, opts", [("ADD", "AddOptions"), ("SUB", "SubOptions"), ("MUL", "MulOptions")])
@pytest.mark.parametrize("act", [0, 1, 3])
def test_int8_arithmetic_with_broadcast_and_fused_activation(tmp_path, name, opts, act):
    g = Graph()
    a = g.tensor((2, 3, 4), np.int8, quant=(0.05, -3))
    b = g.const(q8((4,)), quant=(0.03, 5))
    o = g.tensor((2, 3, 4), np.int8, quant=(0.06 if name != "MUL" else 0.01, 2))
    g.op(name, [a, b], [o], opts, fusedActivationFunction=act)
    check(tmp_path, g.finish([a], [o]), [q8((2, 3, 4))])


@pytest.mark.parametrize("name, opts", [("ADD", "AddOptions"), ("SUB", "SubOptions"), ("MUL", "MulOptions"),
                                        ("DIV", "DivOptions")])
def test_float_arithmetic(tmp_path, name, opts):
    check(tmp_path, *single(name, floats(2, 3), (2, 3), consts=[floats(3, lo=0.5, hi=2)], options=opts,
                            fusedActivationFunction=1))


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
@pytest.mark.parametrize("name", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
def test_pools(tmp_path, dtype, name):
    x = floats(1, 7, 6, 3) if dtype == np.float32 else q8((1, 7, 6, 3))
    check(tmp_path, *single(name, x, (1, 4, 3, 3), x_quant=None if dtype == np.float32 else (0.1, -4),
                            options="Pool2DOptions", padding=0, strideW=2, strideH=2, filterWidth=3, filterHeight=3,
                            fusedActivationFunction=3))


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_softmax(tmp_path, dtype):
    x = floats(2, 10) if dtype == np.float32 else q8((2, 10))
    check(tmp_path, *single("SOFTMAX", x, (2, 10), x_quant=None if dtype == np.float32 else (0.1, 0),
                            out_quant=None if dtype == np.float32 else (1 / 256, -128), options="SoftmaxOptions",
                            beta=0.7))


def test_uint8_concatenation(tmp_path):
    """uint8 inputs of different scales (TFLite rescales uint8 only; its kernel refuses fused
    activations)."""
    g = Graph()
    a = g.tensor((1, 2, 3), np.uint8, quant=(0.05, 128))
    b = g.tensor((1, 2, 2), np.uint8, quant=(0.1, 118))
    o = g.tensor((1, 2, 5), np.uint8, quant=(0.08, 123))
    g.op("CONCATENATION", [a, b], [o], "ConcatenationOptions", axis=-1)
    check(tmp_path, g.finish([a, b], [o]), [q8((1, 2, 3), np.uint8), q8((1, 2, 2), np.uint8)])


def test_quantize_between_quantized_types(tmp_path):
    g = Graph()
    x = g.tensor((3, 4), np.int8, quant=(0.05, 3))
    u = g.tensor((3, 4), np.uint8, quant=(0.05, 131))
    r = g.tensor((3, 4), np.int8, quant=(0.08, -7))
    g.op("QUANTIZE", [x], [u])
    g.op("QUANTIZE", [x], [r])
    check(tmp_path, g.finish([x], [u, r]), [q8((3, 4))])


def test_dilated_conv(tmp_path):
    g = Graph()
    x, c = g.tensor((1, 7, 7, 2)), g.tensor((1, 7, 7, 3))
    g.op("CONV_2D", [x, g.const(floats(3, 3, 3, 2)), g.const(floats(3))], [c], "Conv2DOptions", padding=0, strideW=1,
         strideH=1, dilationWFactor=2, dilationHFactor=2, fusedActivationFunction=1)
    check(tmp_path, g.finish([x], [c]), [floats(1, 7, 7, 2)])


def test_hybrid_fully_connected_keep_num_dims(tmp_path):
    """int8 weights, float activations: the importer dequantizes the weights, TFLite's hybrid
    kernel quantizes each input row symmetrically (scale max|row| / 127), so each output differs
    by at most half an input step times the row's sum of |weights|."""
    x, w8, ws = floats(1, 5, 6), q8((4, 6)), np.float32(0.02)
    g = Graph()
    xi, f = g.tensor(x.shape), g.tensor((1, 5, 4))
    g.op("FULLY_CONNECTED", [xi, g.const(w8, quant=(ws, 0)), g.const(floats(4))], [f], "FullyConnectedOptions",
         keepNumDims=True)
    bound = float(np.max(np.abs(x)) / 127 / 2 * np.max(np.abs(w8.astype(np.float32) * ws).sum(axis=1)))
    info = check(tmp_path, g.finish([xi], [f]), [x], atol=bound)
    assert info.nnapi_operations == ["FULLY_CONNECTED", "RESHAPE"]


# ----------------------------------------------------------------------------- recurrent operators

def test_rnn_step_and_sequence(tmp_path):
    w, r, b = floats(4, 3, lo=-0.5, hi=0.5), floats(4, 4, lo=-0.5, hi=0.5), floats(4)
    g = Graph()
    x, h, o = g.tensor((2, 3)), g.tensor((2, 4), variable=True), g.tensor((2, 4))
    g.op("RNN", [x, g.const(w), g.const(r), g.const(b), h], [o], "RNNOptions", fusedActivationFunction=1)
    check(tmp_path, g.finish([x], [o]), [floats(2, 3)])
    g = Graph()
    x, h, o = g.tensor((2, 5, 3)), g.tensor((2, 4), variable=True), g.tensor((2, 5, 4))
    g.op("UNIDIRECTIONAL_SEQUENCE_RNN", [x, g.const(w), g.const(r), g.const(b), h], [o], "SequenceRNNOptions",
         timeMajor=False, fusedActivationFunction=3)
    check(tmp_path, g.finish([x], [o]), [floats(2, 5, 3)])


def test_svdf(tmp_path):
    units, rank, memory = 3, 2, 4
    g = Graph()
    x, state, o = g.tensor((2, 5)), g.tensor((2, memory * units * rank), variable=True), g.tensor((2, units))
    g.op("SVDF", [x, g.const(floats(units * rank, 5)), g.const(floats(units * rank, memory)), g.const(floats(units)),
                  state], [o], "SVDFOptions", rank=rank, fusedActivationFunction=1)
    check(tmp_path, g.finish([x], [o]), [floats(2, 5)])


@pytest.mark.parametrize("cifg", [False, True])
def test_lstm_step(tmp_path, cifg):
    """TFLite's one-step LSTM (24 inputs, state variables) -> NNAPI's LSTM."""
    n_in, n_cell = 3, 4
    g = Graph()
    x, o = g.tensor((2, n_in)), g.tensor((2, n_cell))
    ins = [x] + [-1 if cifg and gate == 0 else g.const(floats(n_cell, n_in, lo=-0.5, hi=0.5)) for gate in range(4)]
    ins += [-1 if cifg and gate == 0 else g.const(floats(n_cell, n_cell, lo=-0.5, hi=0.5)) for gate in range(4)]
    ins += [-1, -1, -1]
    ins += [-1 if cifg and gate == 0 else g.const(floats(n_cell, lo=-0.2, hi=1)) for gate in range(4)]
    ins += [-1, -1, g.tensor((2, n_cell), variable=True), g.tensor((2, n_cell), variable=True), -1, -1, -1, -1]
    g.op("LSTM", ins, [o], "LSTMOptions", fusedActivationFunction=4, cellClip=0.0, projClip=0.0)
    info = check(tmp_path, g.finish([x], [o]), [floats(2, n_in)])
    assert info.nnapi_operations == ["LSTM"]


def test_hashtable_lookup(tmp_path):
    g = Graph()
    lookups = g.tensor((4,), np.int32)
    out, hits = g.tensor((4, 2)), g.tensor((4,), np.uint8)
    g.op("HASHTABLE_LOOKUP", [lookups, g.const(np.array([-3, 0, 7, 12], np.int32)), g.const(floats(4, 2))],
         [out, hits])
    check(tmp_path, g.finish([lookups], [out, hits]), [np.array([7, 5, -3, 12], np.int32)])


@pytest.mark.parametrize("kind", [1, 2])
def test_lsh_projection(tmp_path, kind):
    g = Graph()
    x = g.tensor((3, 2), np.int32)
    o = g.tensor((4,) if kind == 1 else (12,), np.int32)
    ins = [g.const(floats(4, 3)), x] + ([] if kind == 1 else [g.const(floats(3, lo=0.1, hi=1))])
    g.op("LSH_PROJECTION", ins, [o], "LSHProjectionOptions", type=kind)
    check(tmp_path, g.finish([x], [o]), [RNG.integers(-100, 100, (3, 2)).astype(np.int32)])


# ----------------------------------------------------------------------------- damaged files

def flatc_layout_model() -> bytes:
    """A model written by the flatbuffers Builder (back to front, as TFLite's converter writes):
    a quantized conv, sparse weights behind DENSIFY, and options of several kinds."""
    sparsity, values = sparse_csr(np.diag(np.arange(1, 5, dtype=np.float32)))
    g = Graph()
    x = g.tensor((1, 4, 4, 2), np.int8, quant=(0.05, 1))
    c = g.tensor((1, 4, 4, 3), np.int8, quant=(0.1, -2))
    w = g.const(q8((3, 3, 3, 2)), quant=([0.01, 0.02, 0.03], [0, 0, 0]), axis=0)
    b = g.const(np.array([5, -5, 9], np.int32), quant=([0.0005, 0.001, 0.0015], [0, 0, 0]))
    g.op("CONV_2D", [x, w, b], [c], "Conv2DOptions", padding=0, strideW=1, strideH=1)
    f, ws, wd, o = g.tensor((1, 4, 4, 3)), g.tensor((4, 4), sparsity=sparsity, raw=values), g.tensor((4, 4)), \
        g.tensor((12, 4))
    g.op("DEQUANTIZE", [c], [f])
    g.op("DENSIFY", [ws], [wd])
    r = g.tensor((12, 4))
    g.op("RESHAPE", [f, g.const(np.array([12, 4], np.int32))], [r], "ReshapeOptions", newShape=[12, 4])
    g.op("BATCH_MATMUL", [r, wd], [o], "BatchMatMulOptions")
    return g.finish([x], [o])


def test_flatc_layout_truncations_and_corruptions_are_clear_errors():
    """Every truncation, and random byte corruptions, of a file in flatc's layout: a
    TFLiteImportError or a model, never another exception (the generated reader does no bounds
    checks of its own)."""
    data = flatc_layout_model()
    assert [op.name for op in parse_tflite(data).operators] == ["CONV_2D", "DEQUANTIZE", "DENSIFY", "RESHAPE",
                                                                 "BATCH_MATMUL"]
    for n in range(0, len(data), 7):
        with pytest.raises(TFLiteImportError):
            convert(parse_tflite(data[:n]))
    rng = np.random.default_rng(11)
    outcomes = {"error": 0, "model": 0}
    for _ in range(400):
        corrupt = bytearray(data)
        for at in rng.integers(0, len(data), 4):
            corrupt[at] = rng.integers(0, 256)
        try:
            convert(parse_tflite(bytes(corrupt)))
            outcomes["model"] += 1
        except TFLiteImportError:
            outcomes["error"] += 1
    assert outcomes["error"] > 0


def test_missing_ai_edge_litert_is_named(monkeypatch):
    from nnts.formats.tflite import flatbuffer as tflite_format
    monkeypatch.setattr(tflite_format, "schema", None)
    with pytest.raises(TFLiteImportError, match="needs the ai-edge-litert package"):
        parse_tflite(b"\x00" * 64)


def bidirectional_lstm(merge: bool, time_major: bool, n_in=3, n_cell=4, steps=5) -> bytes:
    """BIDIRECTIONAL_SEQUENCE_LSTM, batch 2, as many cells both ways (TFLite needs that)."""
    g = Graph()
    x = g.tensor((steps, 2, n_in) if time_major else (2, steps, n_in))
    ins = [x]
    for _ in range(2):   # forward, backward
        ins += [g.const(floats(n_cell, n_in, lo=-0.5, hi=0.5)) for _ in range(4)]
        ins += [g.const(floats(n_cell, n_cell, lo=-0.5, hi=0.5)) for _ in range(4)]
        ins += [-1, -1, -1] + [g.const(floats(n_cell, lo=-0.2, hi=1)) for _ in range(4)] + [-1, -1]
    for _ in range(2):
        ins += [g.tensor((2, n_cell), variable=True), g.tensor((2, n_cell), variable=True)]
    ins += [-1] * 9   # no auxiliary input
    lead = (steps, 2) if time_major else (2, steps)
    outs = [g.tensor(lead + (2 * n_cell,))] if merge else [g.tensor(lead + (n_cell,)), g.tensor(lead + (n_cell,))]
    g.op("BIDIRECTIONAL_SEQUENCE_LSTM", ins, outs, "BidirectionalSequenceLSTMOptions", fusedActivationFunction=4,
         mergeOutputs=merge, timeMajor=time_major)
    return g.finish([x], outs)


@pytest.mark.parametrize("merge, time_major", [(False, False), (False, True), (True, True)])
def test_bidirectional_sequence_lstm(tmp_path, merge, time_major):
    x = floats(*((5, 2, 3) if time_major else (2, 5, 3)))
    info = check(tmp_path, bidirectional_lstm(merge, time_major), [x])
    assert info.nnapi_operations == ["BIDIRECTIONAL_SEQUENCE_LSTM"]


def test_bidirectional_sequence_lstm_merged_batch_major(tmp_path):
    """Merged outputs, batch-major: the import equals TFLite's two separate outputs concatenated.
    TFLite's own merged output differs from that (in both its kernels, ai-edge-litert 2.3.0: its
    merged batch-major output is not the concatenation of its separate ones), so it is not the
    golden here."""
    seed = int(RNG.integers(1 << 30))
    x = floats(2, 5, 3)
    paths = {}
    for merge in (False, True):
        RNG.bit_generator.state = np.random.default_rng(seed).bit_generator.state   # the same weights twice
        paths[merge] = tmp_path / f"merge_{merge}.tflite"
        paths[merge].write_bytes(bidirectional_lstm(merge, time_major=False))
    separate = np.concatenate(run_tflite(paths[False], [x]), axis=-1)
    ours, _ = run_nnapi(paths[True], [x])
    np.testing.assert_allclose(ours[0], separate, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("keep", [False, True])
def test_float_mean(tmp_path, keep):
    check(tmp_path, *single("MEAN", floats(2, 3, 4), (2, 1, 4) if keep else (2, 4),
                            consts=[np.array([1], np.int32)], options="ReducerOptions", keepDims=keep))


def int4_weights(g: Graph, w: np.ndarray, scales) -> int:
    """A constant INT4 tensor (two values a byte, the first in the low nibble) of ``w`` (int8
    values in [-8, 7]), quantized per channel along dimension 0."""
    nibbles = (w.reshape(-1) & 0x0F).astype(np.uint8)
    nibbles = np.append(nibbles, np.uint8(0)) if nibbles.size % 2 else nibbles
    packed = (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8)
    k = g.tensor(w.shape, np.int8, quant=(scales, [0] * len(scales)), axis=0, raw=packed.view(np.int8))
    g.tensors[k].type = schema.TensorType.INT4
    return k


def test_int4_weights_behind_dequantize_and_in_an_int8_conv(tmp_path):
    g = Graph()
    x = g.tensor((3, 5))
    w = RNG.integers(-8, 8, (4, 5)).astype(np.int8)
    wi, wf, o = int4_weights(g, w, [0.1, 0.2, 0.05, 0.3]), g.tensor((4, 5)), g.tensor((3, 4))
    g.op("DEQUANTIZE", [wi], [wf])
    g.op("FULLY_CONNECTED", [x, wf, g.const(floats(4))], [o], "FullyConnectedOptions")
    data = g.finish([x], [o])
    np.testing.assert_array_equal(parse_tflite(data).tensors[wi].data, w)
    check(tmp_path, data, [floats(3, 5)])
    g = Graph()
    x = g.tensor((1, 4, 4, 2), np.int8, quant=(0.05, 1))
    ws = np.array([0.01, 0.02, 0.03], np.float32)
    wi = int4_weights(g, RNG.integers(-8, 8, (3, 3, 3, 2)).astype(np.int8), ws)
    b = g.const(np.array([5, -5, 9], np.int32), quant=(0.05 * ws, [0, 0, 0]))
    c = g.tensor((1, 4, 4, 3), np.int8, quant=(0.02, -2))
    g.op("CONV_2D", [x, wi, b], [c], "Conv2DOptions", padding=0, strideW=1, strideH=1)
    check(tmp_path, g.finish([x], [c]), [q8((1, 4, 4, 2))])



# ----------------------------------------------------------------------------- beyond the delegate's list

def test_square_ceil_reverse_zeros_like(tmp_path):
    x = floats(2, 3, 4)
    check(tmp_path, *single("SQUARE", x, x.shape))
    check(tmp_path, *single("CEIL", x, x.shape))
    check(tmp_path, *single("REVERSE_V2", x, x.shape, consts=[np.array([1], np.int32)]))
    g = Graph()
    xi, z, y = g.tensor(x.shape), g.tensor(x.shape), g.tensor(x.shape)
    g.op("ZEROS_LIKE", [xi], [z])
    g.op("SUB", [z, xi], [y], "SubOptions")
    check(tmp_path, g.finish([xi], [y]), [x])


def test_add_n(tmp_path):
    g = Graph()
    a, b, c, o = g.tensor((2, 3)), g.tensor((2, 3)), g.tensor((2, 3)), g.tensor((2, 3))
    g.op("ADD_N", [a, b, c], [o])
    info = check(tmp_path, g.finish([a, b, c], [o]), [floats(2, 3), floats(2, 3), floats(2, 3)])
    assert info.nnapi_operations == ["ADD", "ADD"]


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_broadcast_to(tmp_path, dtype):
    x = floats(3, 1) if dtype == np.float32 else q8((3, 1))
    check(tmp_path, *single("BROADCAST_TO", x, (2, 3, 4), consts=[np.array([2, 3, 4], np.int32)],
                            x_quant=None if dtype == np.float32 else (0.1, 2)))



@pytest.mark.parametrize("padding", [1, 2])
def test_mediapipe_transpose_conv_bias(tmp_path, padding):
    """MediaPipe's custom Convolution2DTransposeBias, against the kernel of it that TFLite's
    default op resolver registers."""
    x = floats(1, 3, 4, 2)
    g = Graph()
    xi, o = g.tensor(x.shape), g.tensor((1, 6, 8, 3) if padding == 1 else (1, 7, 9, 3))
    g.custom_op("Convolution2DTransposeBias", [xi, g.const(floats(3, 3, 3, 2)), g.const(floats(3))], [o],
                np.array([padding, 2, 2], "<i4").tobytes())
    info = check(tmp_path, g.finish([xi], [o]), [x], reference=False)
    assert info.nnapi_operations == ["TRANSPOSE_CONV_2D"]



def test_int8_layout_operators(tmp_path):
    """The delegate's int8 cases of PACK, SPLIT, SELECT, TOPK_V2, EXPAND_DIMS (same quantization
    in and out, as TFLite requires)."""
    quant = (0.1, -3)
    g = Graph()
    a, b = g.tensor((2, 3), np.int8, quant=quant), g.tensor((2, 3), np.int8, quant=quant)
    c = g.tensor((2, 3), np.bool_)
    packed, sel = g.tensor((2, 2, 3), np.int8, quant=quant), g.tensor((2, 3), np.int8, quant=quant)
    halves = [g.tensor((1, 3), np.int8, quant=quant) for _ in range(2)]
    top, idx = g.tensor((2, 2), np.int8, quant=quant), g.tensor((2, 2), np.int32)
    expanded = g.tensor((2, 1, 3), np.int8, quant=quant)
    g.op("PACK", [a, b], [packed], "PackOptions", valuesCount=2, axis=1)
    g.op("SELECT", [c, a, b], [sel])
    g.op("SPLIT", [g.const(np.array(0, np.int32)), sel], halves, "SplitOptions", numSplits=2)
    g.op("TOPK_V2", [a, g.const(np.array(2, np.int32))], [top, idx])
    g.op("EXPAND_DIMS", [b, g.const(np.array([1], np.int32))], [expanded])
    outs = [packed] + halves + [top, idx, expanded]
    a_values = np.array([[5, -7, 3], [100, -128, 0]], np.int8)   # distinct per row: TOPK's order is unambiguous
    check(tmp_path, g.finish([a, b, c], outs), [a_values, q8((2, 3)), RNG.integers(0, 2, (2, 3)).astype(np.bool_)])


def test_a_folded_constant_as_model_output_is_named():
    g = Graph()
    x, s = g.tensor((2, 3)), g.tensor((2,), np.int32)
    g.op("SHAPE", [x], [s], "ShapeOptions", outType=schema.TensorType.INT32)
    with pytest.raises(TFLiteImportError, match="output tensor 1 is a constant folded at import"):
        load_bytes(g.finish([x], [s]))


def test_stablehlo_operator_is_named_and_listed():
    from nnts.formats.tflite.importer import unmapped_operators
    g = Graph()
    x, y = g.tensor((2,)), g.tensor((2,))
    g.op("STABLEHLO_ADD", [x, x], [y])
    data = g.finish([x], [y])
    assert unmapped_operators(parse_tflite(data)) == ["STABLEHLO_ADD"]
    with pytest.raises(TFLiteImportError, match=r"operator 0 \(STABLEHLO_ADD\): is not supported"):
        load_bytes(data)



def test_select_v2_broadcasts(tmp_path):
    g = Graph()
    c, a = g.tensor((2, 1, 4), np.bool_), g.tensor((3, 1))
    o = g.tensor((2, 3, 4))
    g.op("SELECT_V2", [c, a, g.const(floats(4))], [o])
    info = check(tmp_path, g.finish([c, a], [o]), [RNG.integers(0, 2, (2, 1, 4)).astype(np.bool_), floats(3, 1)])
    assert info.nnapi_operations == ["LOGICAL_OR", "RESHAPE", "TILE", "RESHAPE", "TILE", "SELECT"]



def test_gelu_approximate_and_exact_refused(tmp_path):
    check(tmp_path, *single("GELU", floats(3, 50, lo=-6, hi=6), (3, 50), options="GeluOptions", approximate=True))
    data, _ = single("GELU", floats(2, 3), (2, 3), options="GeluOptions", approximate=False)
    with pytest.raises(TFLiteImportError, match=r"GELU\): approximate=false \(erf-based GELU\): NNAPI has no erf"):
        load_bytes(data)



@pytest.mark.parametrize("merge, time_major", [(False, False), (True, True), (True, False)])
def test_bidirectional_sequence_rnn(tmp_path, merge, time_major):
    g = Graph()
    x = g.tensor((5, 2, 3) if time_major else (2, 5, 3))
    ins = [x]
    for units in (4, 2):
        ins += [g.const(floats(units, 3, lo=-0.5, hi=0.5)), g.const(floats(units, units, lo=-0.5, hi=0.5)),
                g.const(floats(units)), g.tensor((2, units), variable=True)]
    ins += [-1, -1, -1]
    lead = (5, 2) if time_major else (2, 5)
    outs = [g.tensor(lead + (6,))] if merge else [g.tensor(lead + (4,)), g.tensor(lead + (2,))]
    g.op("BIDIRECTIONAL_SEQUENCE_RNN", ins, outs, "BidirectionalSequenceRNNOptions", timeMajor=time_major,
         fusedActivationFunction=1, mergeOutputs=merge)
    info = check(tmp_path, g.finish([x], outs), [floats(*((5, 2, 3) if time_major else (2, 5, 3)))])
    assert info.nnapi_operations == ["BIDIRECTIONAL_SEQUENCE_RNN"]
