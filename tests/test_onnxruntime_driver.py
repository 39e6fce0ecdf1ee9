"""The ONNX Runtime driver (``--driver onnxruntime``): mapped operations against numpy, every
documented failure class still reproducing, partitioning with the reference, and a clear
message when the packages are missing."""
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import Model, NnapiError, OperandType, ResultCode, using_drivers, vectors
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.generators.builders import output, run_operation, scalar, tensor
from nnts.runners.model_runner import run_test

from . import support

pytest.importorskip("onnxruntime", reason="the onnxruntime driver needs the onnxruntime package (nnts[onnxruntime])")
pytest.importorskip("onnx", reason="the onnxruntime driver needs the onnx package (nnts[onnxruntime])")

from nnts.adapters import onnxruntime as ort_driver

REPRODUCERS = sorted((Path(__file__).resolve().parents[1] / "docs" / "conformance" / "onnxruntime").glob("*.json"))
F32 = T.TENSOR_FLOAT32


@pytest.fixture(scope="module")
def ort():
    return ort_driver.OnnxRuntimeDevice()


def run_on(device, code, inputs, outputs):
    with using_drivers([device]) as devices:
        return run_operation(code, inputs, outputs, devices=devices)


def test_conv_2d_nhwc_same_padding_relu_matches_numpy(ort):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 5, 4, 3)).astype(np.float32)
    w = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    b = np.array([0.5, -0.25], np.float32)
    out, = run_on(ort, Op.CONV_2D, [tensor(F32, x), tensor(F32, w, as_input=False), tensor(F32, b, as_input=False),
                                    scalar(T.INT32, 1), scalar(T.INT32, 2), scalar(T.INT32, 2), scalar(T.INT32, 1)],
                  [output(F32, (1, 3, 2, 2))])
    # SAME with stride 2: output 3x2; total padding 5-? per axis, the odd element at the end.
    xp = np.pad(x, ((0, 0), (1, 1), (0, 1), (0, 0)))
    expected = np.zeros((1, 3, 2, 2), np.float64)
    for i in range(3):
        for j in range(2):
            window = xp[0, 2 * i:2 * i + 3, 2 * j:2 * j + 3, :]
            expected[0, i, j] = np.tensordot(w, window, axes=([1, 2, 3], [0, 1, 2])) + b
    np.testing.assert_allclose(out, np.maximum(expected, 0), rtol=1e-5, atol=1e-5)


def test_grouped_conv_2d_matches_numpy(ort):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 3, 3, 4)).astype(np.float32)
    w = rng.standard_normal((6, 2, 2, 2)).astype(np.float32)  # 2 groups: 2 input, 3 output channels each
    b = rng.standard_normal(6).astype(np.float32)
    out, = run_on(ort, Op.GROUPED_CONV_2D, [tensor(F32, x), tensor(F32, w, as_input=False),
                                            tensor(F32, b, as_input=False), scalar(T.INT32, 2), scalar(T.INT32, 1),
                                            scalar(T.INT32, 1), scalar(T.INT32, 2), scalar(T.INT32, 0),
                                            scalar(T.BOOL, False)], [output(F32, (1, 2, 2, 6))])
    # VALID 2x2 windows, stride 1: output channel o sees only its group's input channels.
    expected = np.empty((1, 2, 2, 6))
    for i in range(2):
        for j in range(2):
            for o in range(6):
                g = o // 3
                expected[0, i, j, o] = np.sum(x[0, i:i + 2, j:j + 2, 2 * g:2 * g + 2] * w[o]) + b[o]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_transpose_conv_2d_matches_numpy(ort):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 3, 2)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 2)).astype(np.float32)  # [C_out, KH, KW, C_in]
    b = np.array([0.1, -0.2, 0.3], np.float32)
    # Explicit paddings left 0, right 1, top 1, bottom 0, stride 2: the full (1, 5, 6, 3)
    # scatter of every input pixel times the filter, cropped to rows 1..4 and columns 0..4.
    out, = run_on(ort, Op.TRANSPOSE_CONV_2D, [tensor(F32, x), tensor(F32, w, as_input=False),
                                              tensor(F32, b, as_input=False)] +
                  [scalar(T.INT32, v) for v in (0, 1, 1, 0, 2, 2, 0)] + [scalar(T.BOOL, False)],
                  [output(F32, (1, 4, 5, 3))])
    full = np.zeros((5, 6, 3))
    for i in range(2):
        for j in range(3):
            full[2 * i:2 * i + 3, 2 * j:2 * j + 2] += np.einsum("c,oyxc->yxo", x[0, i, j], w)
    np.testing.assert_allclose(out[0], full[1:5, 0:5] + b, rtol=1e-5, atol=1e-5)


def test_average_pool_counts_only_covered_elements(ort):
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    out, = run_on(ort, Op.AVERAGE_POOL_2D, [tensor(F32, x), scalar(T.INT32, 1), scalar(T.INT32, 2),
                                            scalar(T.INT32, 2), scalar(T.INT32, 3), scalar(T.INT32, 3),
                                            scalar(T.INT32, 0)], [output(F32, (1, 2, 2, 1))])
    # SAME, 3x3 windows, stride 2 on 4x4: one padding row/column at the end.
    expected = [[np.mean(x[0, 0:3, 0:3]), np.mean(x[0, 0:3, 2:4])],
                [np.mean(x[0, 2:4, 0:3]), np.mean(x[0, 2:4, 2:4])]]
    np.testing.assert_allclose(out.reshape(2, 2), expected, rtol=1e-6)


def test_softmax_with_beta_and_mean_match_numpy(ort):
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 4.0]], np.float32)
    out, = run_on(ort, Op.SOFTMAX, [tensor(F32, x), scalar(T.FLOAT32, 0.5)], [output(F32, (2, 3))])
    e = np.exp(0.5 * x.astype(np.float64))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    out, = run_on(ort, Op.MEAN, [tensor(F32, x), tensor(T.TENSOR_INT32, [1, -1], as_input=False),
                                 scalar(T.INT32, 0)], [output(F32, (2,))])
    np.testing.assert_allclose(out, [2.0, 1.0], rtol=1e-6)


def test_add_broadcast_relu6_and_quantize_match_hand_computed(ort):
    a = np.array([[1.0, 5.0], [-3.0, 7.0]], np.float32)
    out, = run_on(ort, Op.ADD, [tensor(F32, a), tensor(F32, [0.5, 2.0]), scalar(T.INT32, 3)], [output(F32, (2, 2))])
    np.testing.assert_array_equal(out, [[1.5, 6.0], [0.0, 6.0]])
    out, = run_on(ort, Op.QUANTIZE, [tensor(F32, [0.3, -1.2, 150.0, 2.6])],
                  [output(T.TENSOR_QUANT8_ASYMM, (4,), 0.5, 10)])
    np.testing.assert_array_equal(out, [11, 8, 255, 15])  # round(x / 0.5) + 10, saturated


def resize_nearest(device, image, out_h, out_w, t=F32, align=False, half=False, nchw=False, scale=0.0, zero_point=0):
    n, c = image.shape[0], image.shape[3]
    data = image.transpose(0, 3, 1, 2) if nchw else image
    out_dims = (n, c, out_h, out_w) if nchw else (n, out_h, out_w, c)
    out, = run_on(device, Op.RESIZE_NEAREST_NEIGHBOR,
                  [tensor(t, data, scale, zero_point), scalar(T.INT32, out_w), scalar(T.INT32, out_h),
                   scalar(T.BOOL, nchw), scalar(T.BOOL, align), scalar(T.BOOL, half)],
                  [output(t, out_dims, scale, zero_point)])
    return out.transpose(0, 2, 3, 1) if nchw else out


@pytest.mark.parametrize("nchw", [False, True])
def test_resize_nearest_picks_nnapis_source_pixels(ort, nchw):
    """NNAPI's source row is floor(y * in / out) in float32 (AOSP's ResizeImageOps.cpp): 30 rows
    to 2 take rows 0 and 15 (floor(1 * 15)); ONNX Runtime's Resize divides by out / in and took
    row 14. With align_corners, round(y * (in - 1) / (out - 1)): 5 to 3 takes 0, 2, 4; with
    half-pixel centers floor((y + 0.5) * in / out): 4 to 3 takes 0, 2 (2.0000002), 3."""
    rows = np.arange(30, dtype=np.float32).reshape(1, 30, 1, 1)
    np.testing.assert_array_equal(resize_nearest(ort, rows, 2, 1, nchw=nchw).ravel(), [0, 15])
    cols = np.arange(5, dtype=np.float32).reshape(1, 1, 5, 1)
    np.testing.assert_array_equal(resize_nearest(ort, cols, 1, 3, align=True, nchw=nchw).ravel(), [0, 2, 4])
    grid = (10 * np.arange(4)[:, None] + np.arange(4)[None, :]).astype(np.float32).reshape(1, 4, 4, 1)
    np.testing.assert_array_equal(resize_nearest(ort, grid, 3, 3, half=True, nchw=nchw)[0, :, :, 0],
                                  [[0, 2, 3], [20, 22, 23], [30, 32, 33]])
    quantized = np.arange(30, dtype=np.int8).reshape(1, 30, 1, 1)
    np.testing.assert_array_equal(resize_nearest(ort, quantized, 2, 1, T.TENSOR_QUANT8_ASYMM_SIGNED, nchw=nchw,
                                                 scale=0.5, zero_point=-3).ravel(), [0, 15])


def test_unmapped_types_and_parameters_are_unsupported(ort):
    model = Model()
    x = model.add_operand(OperandType(T.TENSOR_FLOAT32, (2,)))
    fuse = model.add_operand(OperandType(T.INT32, ()))  # a fused activation given at execution time
    y = model.add_operand(OperandType(T.TENSOR_FLOAT32, (2,)))
    model.add_operation(Op.ADD, [x, x, fuse], [y])
    model.identify_inputs_and_outputs([x, fuse], [y])
    model.finish()
    with using_drivers([ort]) as devices:
        assert model.get_supported_operations_for_devices(devices) == [False]


def test_partitioning_with_the_reference_runs_the_rest_on_the_reference():
    support.check_partitioning_with_the_reference(ort_driver.OnnxRuntimeDevice())


@pytest.mark.parametrize("path", REPRODUCERS, ids=[p.stem for p in REPRODUCERS])
def test_each_failure_class_still_differs_from_the_reference(path, ort):
    """Each documented class: the reference computes the file's expected outputs, ONNX Runtime
    does not (if it starts to, the class and its expected-failure entries are out of date)."""
    for test in vectors.load_file(path):
        with using_drivers([ReferenceDevice()]) as devices:
            assert run_test(test, devices).status == "pass", f"{test.name}: the reference disagrees with the file"
        with using_drivers([ort]) as devices:
            result = run_test(test, devices)
        assert result.status == "fail", f"{test.name} now {result.status} on onnxruntime: update {path.name}"


def test_missing_packages_make_the_driver_unavailable(monkeypatch):
    monkeypatch.setattr(ort_driver, "onnxruntime", None)
    monkeypatch.setattr(ort_driver, "_IMPORT_ERROR", "No module named 'onnxruntime'")
    with pytest.raises(NnapiError) as e:
        ort_driver.OnnxRuntimeDevice()
    assert e.value.code == ResultCode.UNAVAILABLE_DEVICE and "onnxruntime" in e.value.message
