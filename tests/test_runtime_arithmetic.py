"""The bit-exact models of the runtimes' quantized arithmetic (nnts.runners.runtime_arithmetic) against the
runtimes themselves, and the rounding classes built on them deciding the random-graph seeds they
were made for: each class accepts its instance and rejects a non-instance."""
import numpy as np
import pytest

from nnapi_ref import hal
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.runtime import Device
from nnapi_ref.types import Lifetime, OperandCode as T, OperationCode as Op
from nnts.generators.graphs import Graph
from nnts.generators.random_graphs import case_size, generate
from nnts.runners import runtime_arithmetic
from nnts.runners.differential import Failure, Outcome, check
from nnts.runners.known_classes import classes_for, explain, simulate

REFERENCE = [Device(ReferenceDevice())]
Q8, F32 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_FLOAT32


def _ort_session(nodes, inputs, outputs, initializers):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper
    model = helper.make_model(helper.make_graph(nodes, "m", inputs, outputs, initializers),
                              opset_imports=[helper.make_opsetid("", 21)])
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_quant_qdq", "1")  # as the driver
    options.intra_op_num_threads = 1
    return onnx, ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def ort_quantized_resize(x: np.ndarray, scale: float, zero_point: int, out_h: int, out_w: int, mode: str):
    """DequantizeLinear -> Resize (linear, ``mode``) -> QuantizeLinear of uint8 NCHW ``x`` on
    ONNX Runtime."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["real"]),
             helper.make_node("Resize", ["real", "", "", "sizes"], ["resized"], mode="linear",
                              coordinate_transformation_mode=mode),
             helper.make_node("QuantizeLinear", ["resized", "s", "z"], ["y"])]
    constants = [numpy_helper.from_array(np.array(np.float32(scale)), "s"),
                 numpy_helper.from_array(np.array(np.uint8(zero_point)), "z"),
                 numpy_helper.from_array(np.array([*x.shape[:2], out_h, out_w], np.int64), "sizes")]
    _, session = _ort_session(nodes, [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], constants)
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("mode", ["align_corners", "half_pixel", "asymmetric"])
def test_ort_quantized_resize_bilinear_is_bit_exact(mode):
    """Random images, sizes and quantizations: the model gives ONNX Runtime's every value (the
    half-to-even rounding of the exact result does not: a float32 sum lands beside the half)."""
    rng = np.random.default_rng(22)
    for _ in range(60):
        shape = tuple(int(d) for d in rng.integers(1, 5, 4))
        out_h, out_w = (int(d) for d in rng.integers(1, 9, 2))
        scale, zero_point = float(np.float32(rng.uniform(0.01, 1.0))), int(rng.integers(0, 256))
        x = rng.integers(0, 256, shape).astype(np.uint8)
        model = runtime_arithmetic.ort_quantized_resize_bilinear(x, scale, zero_point, out_h, out_w, mode, scale,
                                                                 zero_point, 0, 255, nchw=True)
        assert np.array_equal(model, ort_quantized_resize(x, scale, zero_point, out_h, out_w, mode))


def resize_then_dequantize(image, width: int) -> Graph:
    """RESIZE_BILINEAR of a quantized [1, 1, n, 1] image (scale 0.5) to ``width`` columns, then
    DEQUANTIZE (so that one step is a float difference the criteria see)."""
    image = np.asarray(image, np.uint8).reshape(1, 1, -1, 1)
    operands = [hal.Operand(Q8, image.shape, 0.5, 0, Lifetime.SUBGRAPH_INPUT),
                hal.Operand(T.INT32, (), 0.0, 0, Lifetime.CONSTANT_COPY, np.array(width, np.int32)),
                hal.Operand(T.INT32, (), 0.0, 0, Lifetime.CONSTANT_COPY, np.array(1, np.int32)),
                hal.Operand(Q8, (1, 1, width, 1), 0.5, 0, Lifetime.TEMPORARY_VARIABLE),
                hal.Operand(F32, (1, 1, width, 1), 0.0, 0, Lifetime.SUBGRAPH_OUTPUT)]
    operations = [hal.Operation(Op.RESIZE_BILINEAR, (0, 1, 2), (3,)), hal.Operation(Op.DEQUANTIZE, (3,), (4,))]
    return Graph(operands, operations, [0], [4], {0: image})


def float_mismatch(graph: Graph, actual) -> Outcome:
    expected = simulate(graph, [])[0]
    return Outcome("fail", "", expected, [np.asarray(actual, np.float32).reshape(expected[0].shape)],
                   failure=Failure("mismatch", "DEQUANTIZE", "values"), mismatched=[0])


def test_ort_resize_class_accepts_its_instance_and_rejects_others():
    """[0, 1] (stored, scale 0.5) to 4 columns samples 0, 0.5, 1, 1: NNAPI rounds the half up
    to 1, ONNX Runtime to even, 0 (class 5's reproducer); a result off elsewhere is no instance."""
    graph = resize_then_dequantize([0, 1], 4)
    assert simulate(graph, [])[0][0].ravel().tolist() == [0, 0.5, 0.5, 0.5]
    assert explain(graph, float_mismatch(graph, [0, 0, 0.5, 0.5]), "onnxruntime").startswith("onnxruntime class 5")
    assert explain(graph, float_mismatch(graph, [0, 0.5, 0.5, 0]), "onnxruntime") is None


def test_ort_resize_class_has_no_instance_where_nnapi_rounds_as_onnx_runtime():
    """[0, 3] to 4 columns samples 0, 1.5, 3, 3: both round 1.5 to 2, so the two agree (a
    truncating reference once gave [0, 1, 3, 3] and blamed ONNX Runtime)."""
    graph = resize_then_dequantize([0, 3], 4)
    assert simulate(graph, [])[0][0].ravel().tolist() == [0, 1, 1.5, 1.5]
    assert explain(graph, float_mismatch(graph, [0, 0.5, 1.5, 1.5]), "onnxruntime") is None


def _seed_outcome(driver: str, seed: int):
    if driver == "onnxruntime":
        pytest.importorskip("onnxruntime")
        pytest.importorskip("onnx")
    else:
        pytest.importorskip("ai_edge_litert")
    from nnts.runners.drivers import load_driver
    devices = [Device(load_driver(driver))]
    graph = generate(seed, case_size(seed), level=min(d.feature_level for d in devices))
    return graph, check(graph, devices, REFERENCE)


@pytest.mark.parametrize("driver, seed, number", [
    ("onnxruntime", 3002408, 5),  # RESIZE_BILINEAR -> FULLY_CONNECTED -> L2_NORMALIZATION: one step amplified
    ("tflite", 3017529, 8),  # XNNPACK's MEAN -> PAD -> LOGISTIC
    ("tflite", 2007012, 8),  # MIRROR_PAD -> XNNPACK's MEAN -> DEQUANTIZE
])
def test_campaign_seed_is_explained_by_its_class(driver, seed, number):
    graph, outcome = _seed_outcome(driver, seed)
    assert outcome.status == "fail"
    assert explain(graph, outcome, driver) == next(c for c in classes_for(driver) if c.number == number).name(driver)


def xnnpack_mean(x: np.ndarray, axes: tuple, scale: float, zero_point: int, keep: bool) -> np.ndarray:
    """Quantized MEAN on the tflite driver (XNNPACK), the output quantized as the input (NNAPI)."""
    pytest.importorskip("ai_edge_litert")
    from nnapi_ref import using_drivers
    from nnts.generators.builders import output, run_operation, scalar, tensor
    from nnts.runners.drivers import load_driver
    type_ = Q8 if x.dtype == np.uint8 else T.TENSOR_QUANT8_ASYMM_SIGNED
    shape = tuple(1 if a in axes else d for a, d in enumerate(x.shape) if keep or a not in axes)
    inputs = [tensor(type_, x, scale, zero_point), tensor(T.TENSOR_INT32, np.array(axes, np.int32), as_input=False),
              scalar(T.INT32, int(keep))]
    with using_drivers([load_driver("tflite")]) as devices:
        return run_operation(Op.MEAN, inputs, [output(type_, shape, scale, zero_point)], devices=devices)[0]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_xnnpack_quantized_mean_is_bit_exact(dtype):
    """Random shapes, axes and quantizations (ties included: small counts of small integers):
    the model gives XNNPACK's every value; NNAPI's truncation and TFLite's reference rounding
    (halves away from zero) do not."""
    rng = np.random.default_rng(2007012)
    info = np.iinfo(dtype)
    for _ in range(40):
        rank = int(rng.integers(1, 5))
        x = rng.integers(info.min, int(info.max) + 1, tuple(int(d) for d in rng.integers(1, 5, rank))).astype(dtype)
        axes = tuple(sorted({int(a) for a in rng.integers(0, rank, int(rng.integers(1, rank + 1)))}))
        keep = bool(rng.integers(0, 2))
        scale, zero_point = float(np.float32(rng.uniform(0.01, 1.0))), int(rng.integers(info.min, int(info.max) + 1))
        model = runtime_arithmetic.xnnpack_quantized_mean(x, axes, scale, zero_point, scale, zero_point,
                                                          int(info.min), int(info.max), keep)
        actual = xnnpack_mean(x, axes, scale, zero_point, keep)
        np.testing.assert_array_equal(actual, model.reshape(actual.shape))


def test_xnnpack_quantized_mean_ties_go_to_the_even_stored_value():
    """uint8 [58, 59] (mean 58.5) at zero point 29 and [0, 1] at 0: XNNPACK stores 58 and 0 (even),
    where rounding 29.5 before adding the zero point would give 59."""
    x = np.array([[58, 59]], np.uint8)
    assert xnnpack_mean(x, (1,), 0.5, 29, False).tolist() == [58]
    assert runtime_arithmetic.xnnpack_quantized_mean(x, (1,), 0.5, 29, 0.5, 29, 0, 255).tolist() == [58]
    assert xnnpack_mean(np.array([[0, 1]], np.uint8), (1,), 0.5, 0, False).tolist() == [0]


def mean_then_dequantize(x) -> Graph:
    """MEAN over axis 1 of a quantized [2, 2] input (scale 0.5, zero point 0), then DEQUANTIZE."""
    operands = [hal.Operand(Q8, (2, 2), 0.5, 0, Lifetime.SUBGRAPH_INPUT),
                hal.Operand(T.TENSOR_INT32, (1,), 0.0, 0, Lifetime.CONSTANT_COPY, np.array([1], np.int32)),
                hal.Operand(T.INT32, (), 0.0, 0, Lifetime.CONSTANT_COPY, np.array(0, np.int32)),
                hal.Operand(Q8, (2,), 0.5, 0, Lifetime.TEMPORARY_VARIABLE),
                hal.Operand(F32, (2,), 0.0, 0, Lifetime.SUBGRAPH_OUTPUT)]
    operations = [hal.Operation(Op.MEAN, (0, 1, 2), (3,)), hal.Operation(Op.DEQUANTIZE, (3,), (4,))]
    return Graph(operands, operations, [0], [4], {0: np.asarray(x, np.uint8)})


def test_xnnpack_mean_class_accepts_its_instance_and_rejects_others():
    """MEAN of [1, 2] and [3, 6]: 1.5 and 4.5 steps. NNAPI truncates (1, 4), TFLite's reference
    rounds halves away from zero (2, 5), XNNPACK to even (2, 4): the tflite driver's class 8
    explains XNNPACK's [1.0, 2.0]; tflite-ref's (the reference kernels) does not; a result
    matching no rounding ([1.0, 1.5]) is explained by neither."""
    graph = mean_then_dequantize([[1, 2], [3, 6]])
    assert simulate(graph, [])[0][0].tolist() == [0.5, 2.0]

    def outcome(actual):
        return Outcome("fail", "", simulate(graph, [])[0], [np.array(actual, np.float32)],
                       failure=Failure("mismatch", "DEQUANTIZE", "values"), mismatched=[0])
    assert explain(graph, outcome([1.0, 2.0]), "tflite").startswith("tflite class 8")
    assert explain(graph, outcome([1.0, 2.0]), "tflite-ref") is None
    assert explain(graph, outcome([1.0, 2.5]), "tflite-ref").startswith("tflite class 8")
    assert explain(graph, outcome([1.0, 1.5]), "tflite") is None


@pytest.mark.parametrize("mode", ["asymmetric", "align_corners", "half_pixel"])
def test_xnnpack_quantized_resize_bilinear_is_bit_exact(mode):
    """The model of XNNPACK's quantized RESIZE_BILINEAR (Q11 weights, int32, half up) against the
    tflite driver, on random images of both quantized types (random-graph chain seed 57:
    NNAPI truncates, TFLite's reference kernels round halves away from zero, XNNPACK up)."""
    pytest.importorskip("ai_edge_litert")
    from nnapi_ref import using_drivers
    from nnts.generators.builders import output, run_operation, scalar, tensor
    from nnts.runners.drivers import load_driver
    rng = np.random.default_rng(7)
    with using_drivers([load_driver("tflite")]) as devices:
        for dtype, type_ in ((np.int8, T.TENSOR_QUANT8_ASYMM_SIGNED), (np.uint8, Q8)):
            for _ in range(4):
                h, w, c = (int(v) for v in rng.integers(1, 6, 3))
                out_h, out_w = (int(v) for v in rng.integers(1, 12, 2))
                info = np.iinfo(dtype)
                x = rng.integers(info.min, info.max + 1, (1, h, w, c)).astype(dtype)
                inputs = [tensor(type_, x, 0.1, 3), scalar(T.INT32, out_w), scalar(T.INT32, out_h),
                          scalar(T.BOOL, False), scalar(T.BOOL, mode == "align_corners"),
                          scalar(T.BOOL, mode == "half_pixel")]
                got = run_operation(Op.RESIZE_BILINEAR, inputs, [output(type_, (1, out_h, out_w, c), 0.1, 3)],
                                    devices=devices)[0]
                model = runtime_arithmetic.xnnpack_quantized_resize_bilinear(x, out_h, out_w, mode)
                assert np.array_equal(np.asarray(got, np.int64), model), (mode, x.shape, out_h, out_w)


def _fully_connected(x, w, bias, scales, zero_points, weights_constant=True, devices=None):
    """Quantized FULLY_CONNECTED of ``x`` and ``w`` (stored values) on ``devices``."""
    from nnts.generators.builders import output, run_operation, scalar, tensor
    type_ = Q8 if x.dtype == np.uint8 else T.TENSOR_QUANT8_ASYMM_SIGNED
    (xs, ws, os_), (xz, wz, oz) = scales, zero_points
    inputs = [tensor(type_, x, xs, xz), tensor(type_, w, ws, wz, as_input=not weights_constant),
              tensor(T.TENSOR_INT32, bias, float(np.float32(xs) * np.float32(ws)), 0, as_input=False),
              scalar(T.INT32, 0)]
    return run_operation(Op.FULLY_CONNECTED, inputs, [output(type_, (x.shape[0], w.shape[0]), os_, oz)],
                         devices=devices)[0]


def test_tflite_builtin_quantized_fully_connected_is_bit_exact():
    """The model of TFLite's builtin quantized FULLY_CONNECTED (NNAPI's fixed point, the right
    shift's ties up) against the tflite driver where XNNPACK declines the node: int8 weights with a
    non-zero zero point, and weights given as an input (both types). Multipliers from 0.05 to 1
    put the first rounding on halves often (random-graph chain seed 2002091); NNAPI's rounding
    (ties away from zero) differs from the driver there, the model does not."""
    pytest.importorskip("ai_edge_litert")
    from nnapi_ref import using_drivers
    from nnapi_ref.ops.requantization import product_multipliers
    from nnts.runners.drivers import load_driver
    rng = np.random.default_rng(2002091)
    nnapi_differs = 0
    with using_drivers([load_driver("tflite")]) as devices:
        for case in range(24):
            dtype, constant = ((np.int8, True), (np.int8, False), (np.uint8, False))[case % 3]
            info = np.iinfo(dtype)
            batches, size, units = (int(v) for v in rng.integers(1, 9, 3))
            xz, wz = int(rng.integers(info.min + 12, info.max - 12)), int(rng.integers(info.min + 4, info.max - 4))
            wz = wz or 1  # int8 weights at zero point 0 (constant) are XNNPACK's: class 12, not this
            x = (xz + rng.integers(-12, 13, (batches, size))).astype(dtype)
            w = (wz + rng.integers(-4, 5, (units, size))).astype(dtype)
            bias = rng.integers(-60, 60, units).astype(np.int32)
            xs, ws = float(np.float32(rng.uniform(0.01, 0.5))), float(np.float32(rng.uniform(0.01, 0.5)))
            os_ = float(np.float32(np.float32(xs) * np.float32(ws) / rng.uniform(0.05, 1.0)))
            oz = int(rng.integers(info.min + 40, info.max - 40))
            got = np.asarray(_fully_connected(x, w, bias, (xs, ws, os_), (xz, wz, oz), constant, devices), np.int64)
            (m,), (s,) = product_multipliers(xs, [ws], os_)
            model = runtime_arithmetic.tflite_builtin_quantized_fully_connected(
                x, xz, w, wz, bias, int(m), int(s), oz, int(info.min), int(info.max))
            assert np.array_equal(got, model), (case, dtype, constant)
            nnapi_differs += int(np.sum(np.asarray(_fully_connected(x, w, bias, (xs, ws, os_), (xz, wz, oz), constant,
                                                                    REFERENCE), np.int64) != got))
    assert nnapi_differs > 0


def fully_connected_then_dequantize(weights_zero_point: int) -> Graph:
    """int8 FULLY_CONNECTED of [[-2], [2]] (scale 0.5) with one weight of real value 0.75 (scale 0.75,
    stored ``weights_zero_point`` + 1), output scale 1, then DEQUANTIZE: acc -2 and 2, multiplier
    0.375 = 0.75 * 2**-1 (docs/conformance/tflite/fully_connected_ties_up.json)."""
    s8 = T.TENSOR_QUANT8_ASYMM_SIGNED
    operands = [hal.Operand(s8, (2, 1), 0.5, 0, Lifetime.SUBGRAPH_INPUT),
                hal.Operand(s8, (1, 1), 0.75, weights_zero_point, Lifetime.CONSTANT_COPY,
                            np.array([[weights_zero_point + 1]], np.int8)),
                hal.Operand(T.TENSOR_INT32, (1,), 0.375, 0, Lifetime.CONSTANT_COPY, np.array([0], np.int32)),
                hal.Operand(T.INT32, (), 0.0, 0, Lifetime.CONSTANT_COPY, np.array(0, np.int32)),
                hal.Operand(s8, (2, 1), 1.0, 0, Lifetime.TEMPORARY_VARIABLE),
                hal.Operand(F32, (2, 1), 0.0, 0, Lifetime.SUBGRAPH_OUTPUT)]
    operations = [hal.Operation(Op.FULLY_CONNECTED, (0, 1, 2, 3), (4,)), hal.Operation(Op.DEQUANTIZE, (4,), (5,))]
    return Graph(operands, operations, [0], [5], {0: np.array([[-2], [2]], np.int8)})


def test_tflite_builtin_fully_connected_class_accepts_its_instance_and_rejects_others():
    """acc -2 * 0.75 = -1.5 -> -1 (the doubling high multiply, halves up), then -1 / 2 = -0.5: NNAPI
    -1 (away from zero), TFLite's builtin kernel 0 (up); acc 2 gives 1 in both. The tflite driver's
    class 15 explains [0, 1] where the weights' zero point is -8 (XNNPACK declines the node); not
    for tflite-ref, not at zero point 0 (XNNPACK's node: class 12), not a result of no rounding."""
    graph = fully_connected_then_dequantize(-8)
    assert simulate(graph, [])[0][0].ravel().tolist() == [-1.0, 1.0]

    def outcome(g, actual):
        return Outcome("fail", "", simulate(g, [])[0], [np.array(actual, np.float32).reshape(2, 1)],
                       failure=Failure("mismatch", "DEQUANTIZE", "values"), mismatched=[0])
    assert explain(graph, outcome(graph, [0.0, 1.0]), "tflite").startswith("tflite class 15")
    assert explain(graph, outcome(graph, [0.0, 1.0]), "tflite-ref") is None
    assert explain(graph, outcome(graph, [0.0, 2.0]), "tflite") is None
    symmetric = fully_connected_then_dequantize(0)
    assert explain(symmetric, outcome(symmetric, [0.0, 1.0]), "tflite") is None
