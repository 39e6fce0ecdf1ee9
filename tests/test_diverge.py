"""mlts.diverge on quantized models the test builds itself (the flatbuffer writer of
tests/test_tflite_import.py): under the TFLite convention the reference driver is bit-exact with
TFLite's reference kernels on every operator output; under the default NNAPI convention every
difference is an operator whose multiplier is the documented float32 scale product (a
convolution, here), and the report's last line counts them."""
from __future__ import annotations

import io

import numpy as np
import pytest

from mlts.diverge import diverge, main, report
from nnapi_ref.errors import NnapiError
from nnapi_ref.ops import requantization

from .test_tflite_import import (ADD, CONV_2D, DEPTHWISE_CONV_2D, INT8, INT32, Interpreter, Scalar, build_tflite,
                                 tensor)

pytestmark = pytest.mark.skipif(Interpreter is None, reason="ai-edge-litert is not installed")

# Scales whose float32 product differs from their double product (checked below), so the two
# conventions give different multipliers for every channel.
XS, XZ = 0.05, 3
MS, MZ = 0.08, -2
OS, OZ = 0.11, 5


def quant_model(seed: int) -> bytes:
    """int8: per-channel CONV_2D (RELU6) -> per-channel DEPTHWISE_CONV_2D -> ADD of the two."""
    rng = np.random.default_rng(seed)
    c = 24
    w1 = rng.integers(-127, 128, (c, 3, 3, 3)).astype(np.int8)
    s1 = rng.uniform(0.004, 0.02, c).astype(np.float32)
    b1 = rng.integers(-3000, 3000, c).astype(np.int32)
    w2 = rng.integers(-127, 128, (1, 3, 3, c)).astype(np.int8)
    s2 = rng.uniform(0.004, 0.02, c).astype(np.float32)
    b2 = rng.integers(-3000, 3000, c).astype(np.int32)
    shape = (1, 12, 12, c)
    tensors = [tensor((1, 12, 12, 3), INT8, scale=[XS], zero_point=[XZ]),
               tensor(w1.shape, INT8, w1, scale=list(s1), zero_point=[0] * c, qdim=0),
               tensor(b1.shape, INT32, b1, scale=list(XS * s1), zero_point=[0] * c),
               tensor(shape, INT8, scale=[MS], zero_point=[MZ]),
               tensor(w2.shape, INT8, w2, scale=list(s2), zero_point=[0] * c, qdim=3),
               tensor(b2.shape, INT32, b2, scale=list(MS * s2), zero_point=[0] * c),
               tensor(shape, INT8, scale=[MS], zero_point=[MZ]),
               tensor(shape, INT8, scale=[OS], zero_point=[OZ])]
    conv = {0: Scalar("b", 0), 1: Scalar("i", 1), 2: Scalar("i", 1), 3: Scalar("b", 3)}
    depthwise = {0: Scalar("b", 0), 1: Scalar("i", 1), 2: Scalar("i", 1), 3: Scalar("i", 1), 4: Scalar("b", 0)}
    ops = [(CONV_2D, [0, 1, 2], [3], conv), (DEPTHWISE_CONV_2D, [3, 4, 5], [6], depthwise),
           (ADD, [3, 6], [7], {0: Scalar("b", 0)})]
    return build_tflite(tensors, ops, [0], [7])


def inputs(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-128, 128, (1, 12, 12, 3)).astype(np.int8) for _ in range(4)]


def test_the_scales_make_the_conventions_differ():
    a = float(np.float32(XS) * np.float32(0.01))
    b = float(np.float32(XS)) * float(np.float32(0.01))
    assert a != b


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tflite_convention_is_bit_exact_with_tflite_reference_kernels(tmp_path, seed):
    path = tmp_path / "quant.tflite"
    path.write_bytes(quant_model(seed))
    diffs = diverge(path, "nnapi_ref.drivers.reference:tflite_convention", inputs(seed))
    assert [d.op for d in diffs] == ["CONV_2D", "DEPTHWISE_CONV_2D", "ADD"]
    assert all(d.total == 4 * 12 * 12 * 24 for d in diffs)
    out = io.StringIO()
    assert report(diffs, out) == 0
    assert out.getvalue().splitlines()[-1] == "0 differing elements in 0 of 3 operator outputs"


def test_nnapi_convention_differs_only_where_the_multiplier_does(tmp_path):
    """Under the NNAPI convention any difference starts in a convolution with identical inputs
    (the float32 scale product) and is one step there. (Such flips need an accumulator within
    ~1e-7 relative of a rounding point: rare on models this small; the real MobileNets show them.)"""
    for seed in range(1, 4):
        path = tmp_path / f"quant{seed}.tflite"
        path.write_bytes(quant_model(seed))
        for d in diverge(path, "reference", inputs(seed)):
            if d.local:
                assert d.op in ("CONV_2D", "DEPTHWISE_CONV_2D") and d.largest == 1, d.describe()
    assert requantization.convention() == "nnapi"


MEAN = 40  # TFLite's BuiltinOperator; without options keep_dims is false


def mean_model() -> bytes:
    """int8 (1, 5, 7, 8): MEAN over height and width (35 elements) to another quantization, as
    MobileNet v2's global pool, and MEAN over width (7) keeping the input's."""
    return build_tflite([tensor((1, 5, 7, 8), INT8, scale=[XS], zero_point=[XZ]),
                         tensor((2,), INT32, np.array([1, 2])),
                         tensor((1, 8), INT8, scale=[OS], zero_point=[OZ]),
                         tensor((1,), INT32, np.array([2])),
                         tensor((1, 5, 8), INT8, scale=[XS], zero_point=[XZ])],
                        [(MEAN, [0, 1], [2], {}), (MEAN, [0, 3], [4], {})], [0], [2, 4])


def mean_inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.integers(-128, 128, (1, 5, 7, 8)).astype(np.int8) for _ in range(6)]


def test_tflite_convention_means_are_tflite_integer_means(tmp_path):
    """Both MEANs bit-exact with TFLite's reference kernel: requantized to another output
    quantization (not valid NNAPI: only under the TFLite convention's import and driver) and
    rounded where AOSP truncates."""
    path = tmp_path / "mean.tflite"
    path.write_bytes(mean_model())
    diffs = diverge(path, "nnapi_ref.drivers.reference:tflite_convention", mean_inputs(), convention="tflite")
    assert [(d.op, d.total) for d in diffs] == [("MEAN", 6 * 8), ("MEAN", 6 * 5 * 8)]
    assert report(diffs, io.StringIO()) == 0


def test_nnapi_convention_means_differ_where_documented(tmp_path):
    """Under the NNAPI convention the MEAN keeping its quantization truncates (AOSP) where TFLite
    rounds: by one step, on many elements of random data; the other is imported as DEQUANTIZE ->
    MEAN (float32) -> QUANTIZE, valid NNAPI, and rounds once (at most one step from TFLite)."""
    path = tmp_path / "mean.tflite"
    path.write_bytes(mean_model())
    pooled, rows = diverge(path, "reference", mean_inputs())
    assert rows.local and rows.largest == 1 and rows.elements > rows.total // 10
    assert pooled.largest <= 1
    with pytest.raises(NnapiError, match="MEAN: output scale/zero point"):  # TFLite's import is not NNAPI
        diverge(path, "reference", mean_inputs(), convention="tflite")


def test_command_line(tmp_path, capsys):
    path = tmp_path / "quant.tflite"
    path.write_bytes(quant_model(1))
    npz = tmp_path / "inputs.npz"
    np.savez(npz, x=np.concatenate(inputs(1)))
    assert main([str(path), "--convention", "tflite", "--inputs", str(npz)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "0 differing elements in 0 of 3 operator outputs"
    with pytest.raises(SystemExit):
        main([str(path), "--convention", "tflite", "--driver", "reference"])
