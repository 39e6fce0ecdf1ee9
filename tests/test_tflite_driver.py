"""The TensorFlow Lite driver (``--driver tflite``, ``tflite-ref``): mapped operations against
hand-computed values, the flatbuffer written with TFLite's schema, every documented failure class
still reproducing, partitioning with the reference, and a clear message without the package."""
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import Model, NnapiError, OperandType, ResultCode, hal, using_drivers, vectors
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.generators.builders import output, run_operation, scalar, tensor
from nnts.runners.drivers import load_driver
from nnts.runners.model_runner import run_test

from . import support

pytest.importorskip("ai_edge_litert", reason="the tflite driver needs the ai-edge-litert package (nnts[tflite])")

from nnts.adapters import tflite as tflite_driver
from nnts.adapters.tflite_export import to_flatbuffer  # noqa: E402

REPRODUCERS = sorted((Path(__file__).resolve().parents[1] / "docs" / "conformance" / "tflite").glob("*.json"))
F32, I32, Q8, S8 = T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


@pytest.fixture(scope="module", params=["tflite", "tflite-ref"])
def tfl(request):
    return load_driver(request.param)


def run_on(device, code, inputs, outputs):
    with using_drivers([device]) as devices:
        return run_operation(code, inputs, outputs, devices=devices)


def test_conv_2d_nchw_explicit_padding_relu_matches_numpy(tfl):
    """NCHW and explicit paddings that are not SAME's: transposes around a PAD and a VALID conv."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 4, 3)).astype(np.float32)  # NCHW: 2 channels, 4x3 image
    w = rng.standard_normal((3, 3, 3, 2)).astype(np.float32)  # OHWI
    b = np.array([0.5, -0.25, 0.0], np.float32)
    pads = [scalar(T.INT32, v) for v in (1, 0, 0, 2)]  # left 1, right 0, top 0, bottom 2
    out, = run_on(tfl, Op.CONV_2D, [tensor(F32, x), tensor(F32, w, as_input=False), tensor(F32, b, as_input=False),
                                    *pads, scalar(T.INT32, 1), scalar(T.INT32, 1), scalar(T.INT32, 1),
                                    scalar(T.BOOL, True)], [output(F32, (1, 3, 4, 2))])
    image = np.pad(x[0].transpose(1, 2, 0), ((0, 2), (1, 0), (0, 0)))  # HWC, padded to 6x4
    expected = np.zeros((4, 2, 3))
    for i in range(4):
        for j in range(2):
            expected[i, j] = np.tensordot(w, image[i:i + 3, j:j + 3], axes=([1, 2, 3], [0, 1, 2])) + b
    np.testing.assert_allclose(out[0], np.maximum(expected, 0).transpose(2, 0, 1), rtol=1e-5, atol=1e-5)


def test_quantized_conv_with_per_channel_filter_matches_hand_computed(tfl):
    """int8 input, per-channel symmetric filter, int32 bias: the driver supplies the bias scales
    TFLite checks (input scale x filter scale per channel)."""
    x = np.array([2, 4, -6, 8], np.int8).reshape(1, 2, 2, 1)  # scale 0.5, zero point 0: 1, 2, -3, 4
    w = np.array([1, 1, 1, 1, 2, 0, 0, 2], np.int8).reshape(2, 2, 2, 1)
    filt = tensor(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, w, as_input=False, channel_scales=(1.0, 0.5), channel_dim=0)
    out, = run_on(tfl, Op.CONV_2D, [tensor(S8, x, 0.5, 0), filt, tensor(I32, np.array([2, 0], np.int32), as_input=False),
                                    scalar(T.INT32, 2), scalar(T.INT32, 1), scalar(T.INT32, 1), scalar(T.INT32, 0)],
                  [output(S8, (1, 1, 1, 2), 0.25, 0)])
    # channel 0: (1 + 2 - 3 + 4) * 1.0 + 2 * 0.5 = 5 -> 20; channel 1: (2 * 1 + 2 * 4) * 0.5 = 5 -> 20
    np.testing.assert_array_equal(out.reshape(-1), [20, 20])


def test_pooling_softmax_mean_and_reshape_match_numpy(tfl):
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    out, = run_on(tfl, Op.AVERAGE_POOL_2D, [tensor(F32, x), scalar(T.INT32, 1), scalar(T.INT32, 2), scalar(T.INT32, 2),
                                            scalar(T.INT32, 3), scalar(T.INT32, 3), scalar(T.INT32, 0)],
                  [output(F32, (1, 2, 2, 1))])
    expected = [[np.mean(x[0, 0:3, 0:3]), np.mean(x[0, 0:3, 2:4])], [np.mean(x[0, 2:4, 0:3]), np.mean(x[0, 2:4, 2:4])]]
    np.testing.assert_allclose(out.reshape(2, 2), expected, rtol=1e-6)
    y = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 4.0]], np.float32)
    out, = run_on(tfl, Op.SOFTMAX, [tensor(F32, y), scalar(T.FLOAT32, 0.5)], [output(F32, (2, 3))])
    e = np.exp(0.5 * y.astype(np.float64))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    out, = run_on(tfl, Op.MEAN, [tensor(F32, y), tensor(I32, [1, -1], as_input=False), scalar(T.INT32, 0)],
                  [output(F32, (2,))])
    np.testing.assert_allclose(out, [2.0, 1.0], rtol=1e-6)  # axes 1 and -1 are the same axis
    out, = run_on(tfl, Op.REDUCE_MAX, [tensor(F32, y), tensor(I32, [0, 1], as_input=False), scalar(T.BOOL, False)],
                  [output(F32, ())])
    assert out.shape == (1,) and out[0] == 4.0  # every axis reduced without keep_dims: shape [1], not a scalar


def test_argmax_of_a_vector_has_shape_one(tfl):
    """NNAPI reduces a 1-D input to shape [1] (TFLite to a scalar; a random graph found it)."""
    out, = run_on(tfl, Op.ARGMIN, [tensor(F32, [3.0, -1.0, 2.0]), scalar(T.INT32, 0)], [output(I32, ())])
    assert out.shape == (1,) and out[0] == 1


def test_select_of_one_element_into_an_output_of_unknown_rank_has_shape_one(tfl):
    """TFLite keeps the file's output shape when every tensor has one element: the driver writes
    the inputs' shape there (a random graph found a scalar result)."""
    out, = run_on(tfl, Op.SELECT, [tensor(T.TENSOR_BOOL8, [False]), tensor(I32, [5]), tensor(I32, [7])],
                  [output(I32, ())])
    assert out.shape == (1,) and out[0] == 7


def test_add_broadcast_relu6_and_quantize_match_hand_computed(tfl):
    a = np.array([[1.0, 5.0], [-3.0, 7.0]], np.float32)
    out, = run_on(tfl, Op.ADD, [tensor(F32, a), tensor(F32, [0.5, 2.0]), scalar(T.INT32, 3)], [output(F32, (2, 2))])
    np.testing.assert_array_equal(out, [[1.5, 6.0], [0.0, 6.0]])
    out, = run_on(tfl, Op.QUANTIZE, [tensor(F32, [0.3, -1.2, 150.0, 2.6])], [output(Q8, (4,), 0.5, 10)])
    np.testing.assert_array_equal(out, [11, 8, 255, 15])  # round(x / 0.5) + 10, saturated


def test_flatbuffer_uses_tflite_types_and_quantization():
    """The converted file read back with TFLite's own schema: uint8 for QUANT8_ASYMM, the
    operand's scale and zero point, the fused activation in the options."""
    from ai_edge_litert import schema_py_generated as schema
    model = Model()
    q = OperandType(Q8, (2,), 0.5, 3)
    a, b, y = model.add_operand(q), model.add_operand(q), model.add_operand(OperandType(Q8, (2,), 1.0, 1))
    fuse = model.add_operand(OperandType(T.INT32, ()))
    model.set_operand_value(fuse, np.int32(1))
    model.add_operation(Op.ADD, [a, b, fuse], [y])
    model.identify_inputs_and_outputs([a, b], [y])
    model.finish()
    flatbuffer, inputs, outputs = to_flatbuffer(model.hal_model)
    m = schema.ModelT.InitFromObj(schema.Model.GetRootAs(flatbuffer, 0))
    tensors = m.subgraphs[0].tensors
    assert [tensors[i].type for i in inputs + outputs] == [schema.TensorType.UINT8] * 3
    assert list(tensors[outputs[0]].quantization.scale) == [1.0] and list(tensors[outputs[0]].quantization.zeroPoint) == [1]
    op = m.subgraphs[0].operators[0]
    assert m.operatorCodes[op.opcodeIndex].builtinCode == schema.BuiltinOperator.ADD
    assert op.builtinOptions.fusedActivationFunction == schema.ActivationFunctionType.RELU


def test_compilation_cache_round_trip_and_wrong_token(tmp_path):
    """The converted model saved under a token prepares again from the cache files and computes
    the same; another token or a flipped bit is a clean GENERAL_FAILURE."""
    model = Model()
    x, y = model.add_operand(OperandType(F32, (3,))), model.add_operand(OperandType(F32, (3,)))
    model.add_operation(Op.RELU6, [x], [y])
    model.identify_inputs_and_outputs([x], [y])
    model.finish()
    device, token = tflite_driver.TfliteDevice(), bytes(range(32))
    with open(tmp_path / "model", "w+b") as m, open(tmp_path / "data", "w+b") as d:
        device.prepare_model(model.hal_model, 1, 100, None, [m], [d], token)
        prepared = device.prepare_model_from_cache(None, [m], [d], token)
        result = np.zeros(3, np.float32)
        prepared.execute_synchronously(hal.Request([hal.RequestArgument(hal.ArgumentLifetime.POINTER,
                                                                        pointer=np.array([-1, 3, 9], np.float32))],
                                                   [hal.RequestArgument(hal.ArgumentLifetime.POINTER, pointer=result)]),
                                       False, None, 0)
        np.testing.assert_array_equal(result, [0, 3, 6])
        with pytest.raises(hal.HalError) as e:
            device.prepare_model_from_cache(None, [m], [d], bytes(32))
        assert e.value.status == hal.ErrorStatus.GENERAL_FAILURE
        d.seek(-1, 2)
        last = d.read(1)
        d.seek(-1, 2)
        d.write(bytes([last[0] ^ 1]))
        with pytest.raises(hal.HalError) as e:
            device.prepare_model_from_cache(None, [m], [d], token)
        assert e.value.status == hal.ErrorStatus.GENERAL_FAILURE and "corrupted" in e.value.message


def test_unmapped_types_and_parameters_are_unsupported(tfl):
    model = Model()
    x = model.add_operand(OperandType(F32, (2,)))
    fuse = model.add_operand(OperandType(T.INT32, ()))  # a fused activation given at execution time
    y = model.add_operand(OperandType(F32, (2,)))
    model.add_operation(Op.ADD, [x, x, fuse], [y])
    h = model.add_operand(OperandType(T.TENSOR_FLOAT16, (2,)))
    z = model.add_operand(OperandType(T.TENSOR_FLOAT16, (2,)))
    model.add_operation(Op.ABS, [h], [z])  # no float16 kernel
    model.identify_inputs_and_outputs([x, fuse, h], [y, z])
    model.finish()
    with using_drivers([tfl]) as devices:
        assert model.get_supported_operations_for_devices(devices) == [False, False]


def quantized_softmax_model(row: int) -> Model:
    """SOFTMAX of a uint8 [2, row] input (row 0: unknown), beta 1."""
    model = Model()
    x = model.add_operand(OperandType(Q8, (2, row), 0.5, 0))
    beta = model.add_operand(OperandType(T.FLOAT32, ()))
    model.set_operand_value(beta, np.float32(1.0))
    y = model.add_operand(OperandType(Q8, (2, row), 1 / 256, 0))
    model.add_operation(Op.SOFTMAX, [x, beta], [y])
    model.identify_inputs_and_outputs([x], [y])
    model.finish()
    return model


def test_reference_quantized_softmax_over_long_rows_is_unsupported():
    """TFLite's reference quantized SOFTMAX aborts the process (TFLITE_CHECK) once a row's
    exponentials sum to 512: a row of 512 equal values does. Each exponential is at most 1, so
    tflite-ref supports rows up to 511 elements and reports longer (or unknown) ones unsupported,
    and refuses to compile them when asked directly; the default kernels take them."""
    reference, default = load_driver("tflite-ref"), load_driver("tflite")
    for row, supported in [(511, True), (512, False), (0, False)]:
        with using_drivers([reference]) as devices:
            assert quantized_softmax_model(row).get_supported_operations_for_devices(devices) == [supported]
    with using_drivers([default]) as devices:
        assert quantized_softmax_model(512).get_supported_operations_for_devices(devices) == [True]
    with pytest.raises(hal.HalError) as e:
        reference.prepare_model(quantized_softmax_model(512).hal_model, 1, 100, None, [], [], None)
    assert "SOFTMAX over rows of 512" in e.value.message


def test_partitioning_with_the_reference_runs_the_rest_on_the_reference():
    support.check_partitioning_with_the_reference(tflite_driver.TfliteDevice())


@pytest.mark.parametrize("path", REPRODUCERS, ids=[p.stem for p in REPRODUCERS])
def test_each_failure_class_still_differs_from_the_reference(path):
    """Each documented class: the reference computes the file's expected outputs, TFLite (with
    the kernels the file names) does not; if it starts to, the class is out of date."""
    for test in vectors.load_file(path):
        with using_drivers([ReferenceDevice()]) as devices:
            assert run_test(test, devices).status == "pass", f"{test.name}: the reference disagrees with the file"
        for spec in kernels_of(test.name):
            with using_drivers([load_driver(spec)]) as devices:
                result = run_test(test, devices)
            assert result.status == "fail", f"{test.name} now {result.status} on {spec}: update {path.name}"


def kernels_of(name: str) -> list[str]:
    """The drivers a reproducer fails on: its name ends in _default or _reference when only one
    kernel set differs."""
    if name.endswith("_default"):
        return ["tflite"]
    if name.endswith("_reference"):
        return ["tflite-ref"]
    return ["tflite", "tflite-ref"]


def test_missing_package_makes_the_driver_unavailable(monkeypatch):
    monkeypatch.setattr(tflite_driver, "litert", None)
    monkeypatch.setattr(tflite_driver, "_IMPORT_ERROR", "No module named 'ai_edge_litert'")
    with pytest.raises(NnapiError) as e:
        tflite_driver.TfliteDevice()
    assert e.value.code == ResultCode.UNAVAILABLE_DEVICE and "ai-edge-litert" in e.value.message
