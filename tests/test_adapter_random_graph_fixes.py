"""Driver bugs random graphs found in the ONNX Runtime and TFLite adapters, each
checked against the runtime itself: ARGMAX of a vector, SAME pooling with a stride larger than
the window on an image whose size only shape propagation knows, int8 FULLY_CONNECTED rounding
twice as NNAPI does, PRELU whose alpha broadcasts the input."""
import numpy as np
import pytest

from nnapi_ref import hal, using_drivers
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.types import Lifetime, OperandCode as T, OperationCode as Op
from nnapi_ref.vectors import TestModel as Case
from nnts.generators.builders import output, run_operation, scalar, tensor
from nnts.runners.differential import run
from nnts.runners.drivers import load_driver
from nnts.runners.model_runner import build_model

F32, I32, S8, Q8 = T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_ASYMM


def driver(spec):
    if spec == "onnxruntime":
        pytest.importorskip("onnxruntime")
        pytest.importorskip("onnx")
    else:
        pytest.importorskip("ai_edge_litert")
    return load_driver(spec)


def run_on(spec, code, inputs, outputs):
    with using_drivers([driver(spec)]) as devices:
        return run_operation(code, inputs, outputs, devices=devices)


def test_onnxruntime_argmax_of_a_vector_has_shape_one():
    """NNAPI: "If input is 1-dimensional, the output shape is [1]" (seed 2002056 gave rank 0)."""
    out, = run_on("onnxruntime", Op.ARGMIN, [tensor(F32, [3.0, -1.0, 2.0]), scalar(T.INT32, 0)], [output(I32, ())])
    assert out.shape == (1,) and out[0] == 1
    out, = run_on("onnxruntime", Op.ARGMAX, [tensor(I32, [[3, 9], [4, 1]]), scalar(T.INT32, 1)], [output(I32, ())])
    assert out.shape == (2,) and out.tolist() == [1, 0]


def _operand(type_, dims, value=None, lifetime=Lifetime.TEMPORARY_VARIABLE):
    if value is not None:
        lifetime = Lifetime.CONSTANT_COPY
        value = np.asarray(value, np.int32 if type_ in (T.INT32, I32) else np.float32)
    return hal.Operand(type_, tuple(dims), 0.0, 0, lifetime, value)


def reshape_then_max_pool(input_dims) -> hal.Model:
    """RESHAPE of a [1, 2, 2, 1] input to [1, 2, 2, 1] (its result's size left unknown, as seed
    2003335's), then MAX_POOL_2D with SAME padding, a 1x1 window and stride 2 down the height:
    NNAPI's padding (1 - 1) * 2 + 1 - 2 = -1 is clamped to 0."""
    operands = [_operand(F32, input_dims, lifetime=Lifetime.SUBGRAPH_INPUT),
                _operand(I32, (4,), [1, 2, 2, 1]),
                _operand(F32, (0, 0, 0, 0)),
                *[_operand(T.INT32, (), v) for v in (1, 1, 2, 1, 1, 0)],  # SAME, strides w 1 h 2, window 1x1
                _operand(F32, (0, 0, 0, 0), lifetime=Lifetime.SUBGRAPH_OUTPUT)]
    operations = [hal.Operation(Op.RESHAPE, (0, 1), (2,)), hal.Operation(Op.MAX_POOL_2D, (2, 3, 4, 5, 6, 7, 8), (9,))]
    return hal.Model(hal.Subgraph(operands, operations, (0,), (9,)))


def test_onnxruntime_same_pooling_with_a_stride_larger_than_the_window():
    model = reshape_then_max_pool((1, 2, 2, 1))
    x = np.array([1, 2, 3, 4], np.float32).reshape(1, 2, 2, 1)
    expected = np.array([1, 2], np.float32).reshape(1, 1, 2, 1)  # rows 0 only, no padding
    test = Case(name="pool", model=model, inputs=[x], expected=[expected], ignored=[False],
                     min_feature_level=29, output_dims=[(1, 1, 2, 1)])
    with using_drivers([ReferenceDevice()]) as devices:
        np.testing.assert_array_equal(run(devices, test)[0], expected)
    with using_drivers([driver("onnxruntime")]) as devices:
        np.testing.assert_array_equal(run(devices, test)[0], expected)


def test_onnxruntime_same_pooling_on_an_image_of_unknown_size_is_unsupported_where_ort_fails():
    """With the model input's height unknown, the padding cannot be resolved and ORT's
    auto_pad would go negative: MAX_POOL_2D is reported unsupported (the RESHAPE is not)."""
    model = build_model(Case(name="pool", model=reshape_then_max_pool((1, 0, 2, 1)), inputs=[None],
                                  expected=[None], ignored=[False], min_feature_level=29, output_dims=[()]).model)
    with using_drivers([driver("onnxruntime")]) as devices:
        assert model.get_supported_operations_for_devices(devices) == [True, False]


def test_onnxruntime_int8_fully_connected_rounds_twice_as_nnapi():
    """Accumulator 4 * 82 = 328, multiplier float32(0.5 * 0.1490868) / 1 = 0.0745434: exactly
    24.450, which one rounding makes 24. NNAPI's Q31 multiplier 0.596347 * 2**-3 rounds twice:
    328 * 0.596347 = 195.60 -> 196, then 196 / 8 = 24.5 -> 25 (halves away from zero), -25 for
    the negated row (seed 2005868)."""
    x = np.array([[82] * 4, [-82] * 4], np.int8)
    inputs = [tensor(S8, x, 0.5, 0), tensor(S8, np.ones((1, 4), np.int8), 0.1490868, 0, as_input=False),
              tensor(I32, np.zeros(1, np.int32), float(np.float32(0.5) * np.float32(0.1490868)), 0, as_input=False),
              scalar(T.INT32, 0)]
    out, = run_on("onnxruntime", Op.FULLY_CONNECTED, inputs, [output(S8, (2, 1), 1.0, 0)])
    assert out.ravel().tolist() == [25, -25]
    assert round(328 * float(np.float32(0.5) * np.float32(0.1490868))) == 24  # what one rounding gives


def test_onnxruntime_uint8_fully_connected_with_zero_points_bias_and_relu():
    """uint8 with zero points, a bias and RELU: every element as the reference's fixed point."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (3, 6)).astype(np.uint8)
    w = rng.integers(0, 256, (4, 6)).astype(np.uint8)
    b = rng.integers(-2000, 2000, 4).astype(np.int32)
    inputs = [tensor(Q8, x, 0.05, 120), tensor(Q8, w, 0.02, 130, as_input=False),
              tensor(I32, b, float(np.float32(0.05) * np.float32(0.02)), 0, as_input=False), scalar(T.INT32, 1)]
    outputs = [output(Q8, (3, 4), 0.07, 100)]
    expected, = _reference(Op.FULLY_CONNECTED, inputs, outputs)
    out, = run_on("onnxruntime", Op.FULLY_CONNECTED, inputs, outputs)
    np.testing.assert_array_equal(out, expected)
    assert expected.min() >= 100 and len(np.unique(expected)) > 3  # RELU clamps at the zero point


def _reference(code, inputs, outputs):
    with using_drivers([ReferenceDevice()]) as devices:
        return run_operation(code, inputs, outputs, devices=devices)


@pytest.mark.parametrize("spec", ["tflite", "tflite-ref"])
def test_tflite_prelu_whose_alpha_broadcasts_the_input(spec):
    """Alpha [1, 4, 1] over input [1, 1, 1] (the shrunk reproducer of seed 2002178): TFLite's
    PRELU wants the output to have the input's shape; NNAPI broadcasts both."""
    out, = run_on(spec, Op.PRELU, [tensor(F32, np.array([[[-2.0]]], np.float32)),
                                   tensor(F32, np.array([[[1.0], [0.5], [-1.0], [2.0]]], np.float32))],
                  [output(F32, (1, 4, 1))])
    assert out.shape == (1, 4, 1) and out.ravel().tolist() == [-2.0, -1.0, 2.0, -4.0]
    # uint8: input -10, 10 (scale 0.5, zero point 120) times alpha -2.5, 2.5, 5 (scale 0.25)
    out, = run_on(spec, Op.PRELU, [tensor(Q8, np.array([[[100], [140]]], np.uint8), 0.5, 120),
                                   tensor(Q8, np.array([[[110, 130, 140]]], np.uint8), 0.25, 120, as_input=False)],
                  [output(Q8, (1, 2, 3), 0.5, 120)])
    assert out.reshape(2, 3).tolist() == [[170, 70, 20], [140, 140, 140]]  # 25, -25, -50; 10 kept


@pytest.mark.parametrize("spec", ["tflite", "tflite-ref"])
def test_tflite_dequantize_of_a_constant_is_unsupported(spec):
    """XNNPACK folds it into a static tensor and fails to set up when that is a model output
    (random graph seed 3004960); a DEQUANTIZE of a model input stays supported."""
    def model(lifetime):
        value = np.arange(8, dtype=np.int8).reshape(2, 4) if lifetime == Lifetime.CONSTANT_COPY else None
        operands = [hal.Operand(S8, (2, 4), 0.5, -3, lifetime, value),
                    hal.Operand(F32, (2, 4), lifetime=Lifetime.SUBGRAPH_OUTPUT)]
        inputs = (0,) if lifetime == Lifetime.SUBGRAPH_INPUT else ()
        return hal.Model(hal.Subgraph(operands, [hal.Operation(Op.DEQUANTIZE, (0,), (1,))], inputs, (1,)))
    device = driver(spec)
    assert device.get_supported_operations(model(Lifetime.CONSTANT_COPY)) == [False]
    assert device.get_supported_operations(model(Lifetime.SUBGRAPH_INPUT)) == [True]


@pytest.mark.parametrize("code", [Op.CONV_2D, Op.DEPTHWISE_CONV_2D])
def test_onnxruntime_uint8_convolution_with_int8_channel_weights_accumulates_exactly(code):
    """A uint8 image of 255s, per-channel int8 weights of -127 and 127 (scale 0.01), 8 products a
    channel: accumulator -+259,080, times 0.01 / 1000 = -+2.59 -> 197 and 203 about zero point
    200. MLAS's u8s8 kernel (x86 without VNNI) adds pairs of products in saturating int16
    (-32,768 each, 4 pairs: -1.31 -> 199 and 201); the driver runs the weights as uint8 with zero
    point 128 (seeds 3002630, 3003740)."""
    per_channel = T.TENSOR_QUANT8_SYMM_PER_CHANNEL
    if code == Op.CONV_2D:  # one 1x1 filter of 8 input channels per output channel
        image, weights = np.full((1, 1, 1, 8), 255, np.uint8), np.array([-127, 127], np.int8).reshape(2, 1, 1, 1)
        weights, extra = np.repeat(weights, 8, axis=3), []
        channel_dim = 0
    else:  # a 2x4 window on one channel, depth multiplier 2
        image, weights = np.full((1, 2, 4, 1), 255, np.uint8), np.tile(np.array([-127, 127], np.int8), (1, 2, 4, 1))
        extra, channel_dim = [scalar(T.INT32, 2)], 3
    inputs = [tensor(Q8, image, 1.0, 0),
              tensor(per_channel, weights, as_input=False, channel_scales=[0.01, 0.01], channel_dim=channel_dim),
              tensor(I32, np.zeros(2, np.int32), 0.0, 0, as_input=False),
              *[scalar(T.INT32, 0) for _ in range(4)], scalar(T.INT32, 1), scalar(T.INT32, 1), *extra,
              scalar(T.INT32, 0)]
    outputs = [output(Q8, (1, 1, 1, 2), 1000.0, 200)]
    out, = run_on("onnxruntime", code, inputs, outputs)
    assert out.ravel().tolist() == [197, 203]
    assert _reference(code, inputs, outputs)[0].ravel().tolist() == [197, 203]


def test_onnxruntime_quantized_average_pool_rounds_stored_values_half_away_from_zero():
    """Seed 3008336: int8 at zero point 3, a 2x1 window over 20 and -27: NNAPI averages the
    stored values, -3.5 -> -4 (halves away from zero); ORT's DequantizeLinear -> AveragePool ->
    QuantizeLinear averages the real ones, (17 - 30) / 2 = -6.5 -> -6 (half to even), stored -3.
    uint8 17 and 18 at zero point 16: NNAPI 17.5 -> 18, real 1.5 -> 2 and 18 too; 18 and 19:
    18.5 -> 19, real 2.5 -> 2 (stored 18)."""
    def pool(type_, column, zero_point):
        x = np.asarray(column).reshape(1, len(column), 1, 1)
        inputs = [tensor(type_, x, 0.25, zero_point), *[scalar(T.INT32, v) for v in (0, 0, 0, 0, 1, 1, 1, 2, 0)]]
        return [run_on("onnxruntime", Op.AVERAGE_POOL_2D, inputs, [output(type_, (1, len(column) - 1, 1, 1), 0.25,
                                                                            zero_point)])[0].ravel().tolist(),
                _reference(Op.AVERAGE_POOL_2D, inputs, [output(type_, (1, len(column) - 1, 1, 1), 0.25,
                                                                zero_point)])[0].ravel().tolist()]
    assert pool(S8, np.array([20, -27, 12], np.int8), 3) == [[-4, -8], [-4, -8]]  # -7.5 -> -8
    assert pool(Q8, np.array([17, 18, 19], np.uint8), 16) == [[18, 19], [18, 19]]


@pytest.mark.parametrize("type_", [Q8, S8])
def test_onnxruntime_quantized_average_pool_matches_the_reference(type_):
    """Random windows, strides, explicit paddings (never averaged in) and fused activations:
    every element as the reference's integer kernel."""
    rng = np.random.default_rng(3008336)
    low, high = (0, 256) if type_ == Q8 else (-128, 128)
    for _ in range(12):
        h, w, c = (int(v) for v in rng.integers(1, 7, 3))
        fh, fw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        pads = [min(int(v), f - 1) for v, f in zip(rng.integers(0, 3, 4), (fw, fw, fh, fh))]  # left right top bottom
        stride_w, stride_h = (int(v) for v in rng.integers(1, 3, 2))
        x = rng.integers(low, high, (2, h, w, c)).astype(np.uint8 if type_ == Q8 else np.int8)
        out_h, out_w = (h + pads[2] + pads[3] - fh) // stride_h + 1, (w + pads[0] + pads[1] - fw) // stride_w + 1
        inputs = [tensor(type_, x, 0.1, int(rng.integers(low, high))),
                  *[scalar(T.INT32, v) for v in (*pads, stride_w, stride_h, fw, fh, int(rng.integers(0, 4)))]]
        outputs = [output(type_, (2, out_h, out_w, c), 0.1, inputs[0].zero_point)]
        np.testing.assert_array_equal(run_on("onnxruntime", Op.AVERAGE_POOL_2D, inputs, outputs)[0],
                                      _reference(Op.AVERAGE_POOL_2D, inputs, outputs)[0])
