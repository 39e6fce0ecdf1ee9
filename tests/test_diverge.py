"""mlts.diverge on quantized models the test builds itself (the flatbuffer writer of
tests/test_tflite_import.py): under the TFLite convention the reference driver is bit-exact with
TFLite's reference kernels on every operator output; under the default NNAPI convention every
difference is an operator whose multiplier is the documented float32 scale product (a
convolution, here) or a documented MEAN convention, and the report's last line counts them.
Then the kernels whose TFLite derivation is not the convolutions' (FULLY_CONNECTED, BATCH_MATMUL,
uint8 convolutions, PRELU) against TFLite's kernels at points where the derivations part ways."""
from __future__ import annotations

import io

import numpy as np
import pytest

from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.errors import NnapiError
from nnapi_ref.ops import requantization
from nnapi_ref.runtime.devices import Device
from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.generators.builders import output, run_operation, scalar, tensor as ntensor
from nnts.mlts.diverge import diverge, main, report

from .test_tflite_import import (ADD, CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, INT8, INT32, OPTIONS, TYPE_FMT,
                                 Interpreter, Scalar, build_tflite, tensor, tflite_run)

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


# ---- kernels whose TFLite derivation differs, at points where the derivations part ways -------
# (found by searching accumulators where the candidate derivations give different outputs; the
# expected values are TFLite's own, and AOSP's worked out by hand in each docstring)

S8, U8 = T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_ASYMM
UINT8, MUL, PRELU, BATCH_MATMUL = 3, 18, 54, 126


def tflite_output(tmp_path, tensors, op, inputs) -> np.ndarray:
    path = tmp_path / "op.tflite"
    path.write_bytes(build_tflite(tensors, [(op, list(range(len(tensors) - 1)), [len(tensors) - 1], {})],
                                  [0], [len(tensors) - 1]))
    return tflite_run(path, *inputs).reshape(-1)


def under(convention, code, inputs, outputs) -> np.ndarray:
    out = run_operation(code, inputs, outputs, devices=[Device(ReferenceDevice(convention=convention))])
    return np.asarray(out[0]).reshape(-1)


@pytest.mark.parametrize("uint8", [False, True])
def test_fully_connected_tflite_rounds_once_in_double(tmp_path, monkeypatch, uint8):
    """Per-tensor int8 FULLY_CONNECTED, scales 0.011388898 (input), 0.0011605039 (weights),
    4.408978 (output), one input of 0 and weights of 1: each unit's accumulator is its bias.
    TFLite's reference kernel computes round(acc * 0.0113889 * 0.0011605 / 4.40898) in double:
    39196517 -> 117.50000049 -> 118. AOSP (FullyConnected.cpp) requantizes in fixed point from the
    float32 product: multiplier 1687563678, shift -18; 39196517 * m / 2**31 = 30801919.47 ->
    SRDHM 30801919, RDBP by 2**18 = 117.499998 -> 117; and for -24852259: -19529727.10 ->
    -19529727 -> -74.4999966 -> -74 (a double-product multiplier would give -75). uint8 alike
    (zero points 128)."""
    monkeypatch.setitem(TYPE_FMT, UINT8, (np.uint8, "B"))
    sx, sw, so = 0.011388897895812988, 0.0011605039471760392, 4.40897798538208
    bias = np.array([-24852259, 29856070, -22850735, 23851497, 39196517], np.int32)
    kind, zp, dtype, code = (UINT8, 128, np.uint8, U8) if uint8 else (INT8, 0, np.int8, S8)
    x, w = np.full((1, 1), zp, dtype), np.full((5, 1), zp + 1, dtype)
    theirs = tflite_output(tmp_path, [tensor((1, 1), kind, scale=[sx], zero_point=[zp]),
                                      tensor((5, 1), kind, w, scale=[sw], zero_point=[zp]),
                                      tensor((5,), INT32, bias, scale=[sx * sw], zero_point=[0]),
                                      tensor((1, 5), kind, scale=[so], zero_point=[zp])], FULLY_CONNECTED, [x])
    operands = [ntensor(code, x, scale=sx, zero_point=zp), ntensor(code, w, scale=sw, zero_point=zp, as_input=False),
                ntensor(T.TENSOR_INT32, bias, scale=float(np.float32(sx) * np.float32(sw)), as_input=False),
                scalar(T.INT32, 0)]
    outputs = [output(code, [1, 5], so, zp)]
    assert (theirs.astype(int) - zp).tolist() == [-74, 89, -68, 71, 118]
    assert under("tflite", Op.FULLY_CONNECTED, operands, outputs).tolist() == theirs.tolist()
    assert (under("nnapi", Op.FULLY_CONNECTED, operands, outputs).astype(int) - zp).tolist() == [-74, 89, -68, 71, 117]


def test_batch_matmul_forms_the_scale_product_in_float32_in_both(tmp_path):
    """int8 BATCH_MATMUL, scales 0.010473877 (lhs), 0.083910555 (rhs), 1.90616 (output); rows
    whose accumulator (127 * sum of 16 values + a 17th, against a column of 16 x 127 and a 1) is
    +-196283 or +-124710. Both TFLite (batch_matmul.cc: GetQuantizedConvolutionMultipler) and AOSP
    (BatchMatmul.cpp: the same name in OperationsUtils) take the float32 product: TFLite's outputs
    are the float32 ones in both conventions (a double product moves each by one step)."""
    sl, sr, so = 0.010473877191543579, 0.08391055464744568, 1.9061599969863892
    accs = np.array([-196283, -124710, 124710, 196283])
    total = (accs + 64) // 127
    spread = total[:, None] // 16 + (np.arange(16)[None, :] < total[:, None] % 16)
    lhs = np.concatenate([spread, (accs - 127 * total)[:, None]], axis=1).astype(np.int8).reshape(1, 4, 17)
    rhs = np.array([127] * 16 + [1], np.int8).reshape(1, 17, 1)
    assert ((lhs.astype(np.int64) @ rhs.astype(np.int64)).reshape(-1) == accs).all()
    theirs = tflite_output(tmp_path, [tensor(lhs.shape, INT8, scale=[sl], zero_point=[0]),
                                      tensor(rhs.shape, INT8, rhs, scale=[sr], zero_point=[0]),
                                      tensor((1, 4, 1), INT8, scale=[so], zero_point=[0])], BATCH_MATMUL, [lhs])
    operands = [ntensor(S8, lhs, scale=sl, zero_point=0), ntensor(S8, rhs, scale=sr, zero_point=0, as_input=False),
                scalar(T.BOOL, False), scalar(T.BOOL, False)]
    assert theirs.tolist() == [-91, -58, 58, 91]
    for convention in ("nnapi", "tflite"):
        result = under(convention, Op.BATCH_MATMUL, operands, [output(S8, [1, 4, 1], so, 0)])
        assert result.tolist() == [-91, -58, 58, 91], convention


@pytest.mark.parametrize("depthwise", [False, True])
@pytest.mark.parametrize("uint8", [True, False])
def test_convolution_scale_product_by_type(tmp_path, monkeypatch, uint8, depthwise):
    """A 1x1 CONV_2D (or DEPTHWISE_CONV_2D, depth multiplier 3), scales 0.013840036 (input),
    0.0030784509 (filter, one scale), 1.9368747 (output), input 0 after its zero point, filter 1:
    each channel's accumulator is its bias. TFLite's uint8 kernels use the legacy scalar
    multiplier (float32 product, as AOSP), its int8 kernels the per-channel arrays (double
    product): -4659678 requantizes to -102 or -103."""
    monkeypatch.setitem(TYPE_FMT, UINT8, (np.uint8, "B"))
    sx, sw, so = 0.013840035535395145, 0.0030784509144723415, 1.9368747472763062
    bias = np.array([-4659678, -4341456, -4659678], np.int32)
    kind, zp, dtype = (UINT8, 128, np.uint8) if uint8 else (INT8, 0, np.int8)
    one = Scalar("i", 1)
    if depthwise:
        shape, operator = (1, 1, 1, 3), (DEPTHWISE_CONV_2D, {0: Scalar("b", 1), 1: one, 2: one, 3: Scalar("i", 3),
                                                             4: Scalar("b", 0)})
    else:
        shape, operator = (3, 1, 1, 1), (CONV_2D, {0: Scalar("b", 1), 1: one, 2: one, 3: Scalar("b", 0)})
    path = tmp_path / "conv.tflite"
    path.write_bytes(build_tflite([tensor((1, 1, 1, 1), kind, scale=[sx], zero_point=[zp]),
                                   tensor(shape, kind, np.full(shape, zp + 1, dtype), scale=[sw], zero_point=[zp]),
                                   tensor((3,), INT32, bias, scale=[sx * sw], zero_point=[0]),
                                   tensor((1, 1, 1, 3), kind, scale=[so], zero_point=[zp])],
                                  [(operator[0], [0, 1, 2], [3], operator[1])], [0], [3]))
    x = np.full((1, 1, 1, 1), zp, dtype)
    expected = [-102, -95, -102] if uint8 else [-103, -96, -103]
    assert (tflite_run(path, x).reshape(-1).astype(int) - zp).tolist() == expected
    assert report(diverge(path, "nnapi_ref.drivers.reference:tflite_convention", [x], convention="tflite"),
                  io.StringIO()) == 0


@pytest.mark.parametrize("x, x_q, alpha, alpha_q, out_q, nnapi", [
    (65, (0.011305219493806362, -128), 5, (0.01, 0), (0.029787130653858185, -128), -55),
    (-26, (0.06089763343334198, 127), -47, (0.008680210448801517, 0), (1.5206258296966553, 0), 2),
])
def test_prelu_edges_against_tflite(tmp_path, x, x_q, alpha, alpha_q, out_q, nnapi):
    """The two PRELU edges of tests/test_requantization.py (worked out there by hand): TFLite's
    kernel agrees with the TFLite convention on both, and with AOSP's on the positive one."""
    xs, alphas = np.array([[x]], np.int8), np.array([[alpha]], np.int8)
    theirs = tflite_output(tmp_path, [tensor((1, 1), INT8, scale=[x_q[0]], zero_point=[x_q[1]]),
                                      tensor((1, 1), INT8, alphas, scale=[alpha_q[0]], zero_point=[alpha_q[1]]),
                                      tensor((1, 1), INT8, scale=[out_q[0]], zero_point=[out_q[1]])], PRELU, [xs])
    operands = [ntensor(S8, xs, scale=x_q[0], zero_point=x_q[1]),
                ntensor(S8, alphas, scale=alpha_q[0], zero_point=alpha_q[1], as_input=False)]
    assert under("tflite", Op.PRELU, operands, [output(S8, [1, 1], *out_q)]).tolist() == theirs.tolist()
    assert under("nnapi", Op.PRELU, operands, [output(S8, [1, 1], *out_q)]).tolist() == [nnapi]


def test_mul_tflite_divides_in_float32(tmp_path):
    """int8 MUL, scales 0.045238379 and 0.020682229, output 0.11158180; -128 * -34 = 4352. The
    float32 product 9.3563052e-4 divided in double (AOSP's Broadcast.cpp) is 8.38515335e-3:
    multiplier 1152446701, shift -6, 4352 * m / 2**31 = 2335.49999 -> SRDHM 2335, RDBP by 64 ->
    36; divided in float32 (TFLite's mul.cc: one float expression) 8.38515349e-3: 1152446720,
    2335.50003 -> 2336 -> 36.5 -> 37. (34 * 64 = 2176 is 18.25 -> 18 in both.)"""
    s1, s2, so = 0.04523837938904762, 0.020682228729128838, 0.11158180236816406
    x, y = np.array([[-128, 34]], np.int8), np.array([[-34, 64]], np.int8)
    theirs = tflite_output(tmp_path, [tensor((1, 2), INT8, scale=[s1], zero_point=[0]),
                                      tensor((1, 2), INT8, y, scale=[s2], zero_point=[0]),
                                      tensor((1, 2), INT8, scale=[so], zero_point=[0])], MUL, [x])
    operands = [ntensor(S8, x, scale=s1, zero_point=0), ntensor(S8, y, scale=s2, zero_point=0, as_input=False),
                scalar(T.INT32, 0)]
    assert theirs.tolist() == [37, 18]
    assert under("tflite", Op.MUL, operands, [output(S8, [1, 2], so, 0)]).tolist() == [37, 18]
    assert under("nnapi", Op.MUL, operands, [output(S8, [1, 2], so, 0)]).tolist() == [36, 18]


@pytest.mark.parametrize("code, op", [(55, Op.MAXIMUM), (57, Op.MINIMUM)])
def test_maximum_minimum_tflite_compares_stored_values(tmp_path, code, op):
    """Every pair of int8 values, inputs quantized (0.05, 3) and (0.07, -5), output (0.05, 3).
    TFLite's kernel compares the stored values whatever their quantization (its converter gives
    all three the same); NNAPI requantizes both inputs to the output's first: x = -128 is
    0.05 * (-131) = -6.55, y = -127 is 0.07 * (-122) = -8.54 -> round(-170.8) + 3, saturated
    to -128; so MAXIMUM(-128, -127) is -128 under NNAPI, -127 in TFLite."""
    values = np.arange(-128, 128).astype(np.int8)
    x, y = np.repeat(values, 256).reshape(1, 256, 256), np.tile(values, 256).reshape(1, 256, 256)
    theirs = tflite_output(tmp_path, [tensor(x.shape, INT8, scale=[0.05], zero_point=[3]),
                                      tensor(y.shape, INT8, y, scale=[0.07], zero_point=[-5]),
                                      tensor(x.shape, INT8, scale=[0.05], zero_point=[3])], code, [x])
    operands = [ntensor(S8, x, scale=0.05, zero_point=3), ntensor(S8, y, scale=0.07, zero_point=-5, as_input=False)]
    pick = np.maximum if op == Op.MAXIMUM else np.minimum
    assert (theirs == pick(x, y).reshape(-1)).all()
    assert (under("tflite", op, operands, [output(S8, list(x.shape), 0.05, 3)]) == theirs).all()
    nnapi = under("nnapi", op, operands, [output(S8, list(x.shape), 0.05, 3)]).reshape(256, 256)
    assert nnapi[0, 1] == -128  # both requantize to -128 (MINIMUM agrees with TFLite there)
    assert (nnapi != theirs.reshape(256, 256)).sum() > 30000


# ---- operations the two conventions compute alike, exhaustively against TFLite's kernels --------

def single_op_cases():
    """(name, tensors, operator, input) for one-operator int8 models whose every input value (or
    pair of values) is fed once; quantizations fixed, arbitrary but unequal."""
    values = np.arange(-128, 128).astype(np.int8)
    pairs = np.repeat(values, 256).reshape(1, 256, 256), np.tile(values, 256).reshape(1, 256, 256)
    row = values.reshape(1, 256)
    q_in, q_out = dict(scale=[0.043], zero_point=[-7]), dict(scale=[0.061], zero_point=[11])
    cases = []
    for name, code in (("ADD", ADD), ("SUB", 41)):
        cases.append((name, [tensor(pairs[0].shape, INT8, **q_in), tensor(pairs[1].shape, INT8, pairs[1], scale=[0.029],
                                                                         zero_point=[21]),
                             tensor(pairs[0].shape, INT8, **q_out)], (code, [0, 1], [2], {}), pairs[0]))
    wide = dict(scale=[0.172], zero_point=[-7])  # the activations see inputs up to about +-22
    for name, code, out_q in (("LOGISTIC", 14, dict(scale=[1 / 256], zero_point=[-128])),
                              ("TANH", 28, dict(scale=[1 / 128], zero_point=[0])), ("HARD_SWISH", 117, q_out),
                              ("RELU", 19, wide), ("RELU6", 21, wide), ("RELU_N1_TO_1", 20, wide)):
        cases.append((name, [tensor(row.shape, INT8, **wide), tensor(row.shape, INT8, **out_q)], (code, [0], [1], {}),
                      row))
    cases.append(("DEQUANTIZE", [tensor(row.shape, INT8, **q_in), tensor(row.shape, 0)], (6, [0], [1], {}), row))
    reals = (np.arange(-4000, 4000) * np.float32(0.0215)).astype(np.float32).reshape(1, -1)  # halves of 0.043 too
    cases.append(("QUANTIZE", [tensor(reals.shape, 0), tensor(reals.shape, INT8, **q_in)], (114, [0], [1], {}), reals))
    image = values.reshape(1, 16, 16, 1)
    probabilities = dict(scale=[1 / 256], zero_point=[-128])
    cases.append(("SOFTMAX", [tensor((16, 16), INT8, **wide), tensor((16, 16), INT8, **probabilities)],
                  (25, [0], [1], {0: Scalar("f", 2.3)}), values.reshape(16, 16)))
    for name, code, padding, out_hw in (("AVERAGE_POOL_2D", 1, 0, 8), ("MAX_POOL_2D", 17, 1, 7)):
        cases.append((name, [tensor(image.shape, INT8, **q_in), tensor((1, out_hw, out_hw, 1), INT8, **q_in)],
                      (code, [0], [1], {0: Scalar("b", padding), 1: Scalar("i", 2), 2: Scalar("i", 2),
                                        3: Scalar("i", 3), 4: Scalar("i", 3), 5: Scalar("b", 0)}), image))
    return cases


@pytest.mark.parametrize("case", single_op_cases(), ids=lambda case: case[0])
def test_operations_identical_in_both_conventions(tmp_path, monkeypatch, case):
    """Every input value through ADD, SUB (every pair), the activations, QUANTIZE, DEQUANTIZE,
    SOFTMAX and the pools:
    bit-exact with TFLite's reference kernels under both conventions (their arithmetic is the
    same in AOSP and TFLite: see each operation's module docstring)."""
    name, tensors, operator, x = case
    monkeypatch.setitem(OPTIONS, 25, 9)  # SoftmaxOptions
    monkeypatch.setitem(OPTIONS, 1, 5)   # Pool2DOptions
    monkeypatch.setitem(OPTIONS, 17, 5)
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(build_tflite(tensors, [operator], [0], [len(tensors) - 1]))
    for convention, driver in (("nnapi", "reference"), ("tflite", "nnapi_ref.drivers.reference:tflite_convention")):
        assert report(diverge(path, driver, [x], convention=convention), io.StringIO()) == 0, convention


@pytest.mark.parametrize("align, half", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("uint8", [False, True])
def test_resize_bilinear_against_tflite(tmp_path, monkeypatch, align, half, uint8):
    """RESIZE_BILINEAR (1, 5, 7, 3) -> (1, 9, 11, 3). AOSP interpolates in float32 and rounds
    half up, as TFLite's uint8 kernel does (identical); TFLite's int8 kernel (ResizeBilinearInteger)
    works in 1/1024ths and rounds (up to 2 steps apart: the 10-bit scale moves the sample points)."""
    monkeypatch.setitem(OPTIONS, 23, 15)  # RESIZE_BILINEAR's ResizeBilinearOptions
    kind, dtype, code, lo = (UINT8, np.uint8, U8, 0) if uint8 else (INT8, np.int8, S8, -128)
    x = np.random.default_rng(2).integers(lo, lo + 256, (1, 5, 7, 3)).astype(dtype)
    path = tmp_path / "resize.tflite"
    path.write_bytes(build_tflite([tensor(x.shape, kind, scale=[0.05], zero_point=[lo + 3]),
                                   tensor((2,), INT32, np.array([9, 11])),
                                   tensor((1, 9, 11, 3), kind, scale=[0.05], zero_point=[lo + 3])],
                                  [(23, [0, 1], [2], {2: Scalar("b", align), 3: Scalar("b", half)})], [0], [2]))
    theirs = tflite_run(path, x).reshape(-1).astype(int)
    operands = [ntensor(code, x, scale=0.05, zero_point=lo + 3), scalar(T.INT32, 11), scalar(T.INT32, 9),
                scalar(T.BOOL, False), scalar(T.BOOL, align), scalar(T.BOOL, half)]
    outputs = [output(code, [1, 9, 11, 3], 0.05, lo + 3)]
    assert (under("tflite", Op.RESIZE_BILINEAR, operands, outputs).astype(int) == theirs).all()
    nnapi = under("nnapi", Op.RESIZE_BILINEAR, operands, outputs).astype(int)
    if uint8:
        assert (nnapi == theirs).all()
    else:
        assert 0 < np.abs(nnapi - theirs).max() <= 2


@pytest.mark.parametrize("code, op", [(71, Op.EQUAL), (72, Op.NOT_EQUAL), (61, Op.GREATER), (62, Op.GREATER_EQUAL),
                                      (58, Op.LESS), (63, Op.LESS_EQUAL)])
def test_comparisons_against_tflite(tmp_path, code, op):
    """Every pair of int8 values quantized (0.043, -7) and (0.029, 21). AOSP compares the real
    values in float32; TFLite (ComparisonWithScaling) the zero-point-offset values times 256
    requantized by each scale in fixed point, i.e. rounded to 1/256: x = -98 is -91 * 0.043 =
    -3.913 and y = -114 is -135 * 0.029 = -3.915, unequal in float32 but both -1002/256 in TFLite."""
    values = np.arange(-128, 128).astype(np.int8)
    x, y = np.repeat(values, 256).reshape(1, 256, 256), np.tile(values, 256).reshape(1, 256, 256)
    theirs = tflite_output(tmp_path, [tensor(x.shape, INT8, scale=[0.043], zero_point=[-7]),
                                      tensor(y.shape, INT8, y, scale=[0.029], zero_point=[21]),
                                      tensor(x.shape, 6)], code, [x]).astype(bool)
    operands = [ntensor(S8, x, scale=0.043, zero_point=-7), ntensor(S8, y, scale=0.029, zero_point=21, as_input=False)]
    assert (under("tflite", op, operands, [output(T.TENSOR_BOOL8, list(x.shape))]).astype(bool) == theirs).all()
    nnapi = under("nnapi", op, operands, [output(T.TENSOR_BOOL8, list(x.shape))]).astype(bool).reshape(256, 256)
    at = (-98 + 128, -114 + 128)
    assert nnapi[at] == (op in (Op.NOT_EQUAL, Op.GREATER, Op.GREATER_EQUAL))  # -3.913 > -3.915
    assert theirs.reshape(256, 256)[at] == (op in (Op.EQUAL, Op.GREATER_EQUAL, Op.LESS_EQUAL))


def test_select_tflite_picks_stored_values(tmp_path, monkeypatch):
    """SELECT of int8 inputs quantized (0.05, 3) and (0.07, -5) into (0.06, 1): TFLite's kernel
    copies the stored values; NNAPI requantizes the chosen value to the output's quantization
    (x = 127 is 0.05 * 124 = 6.2, round(6.2 / 0.06) + 1 = 104)."""
    monkeypatch.setitem(TYPE_FMT, 6, (np.bool_, "?"))
    rng = np.random.default_rng(0)
    x = np.arange(-128, 128).astype(np.int8).reshape(1, 256)
    y = rng.integers(-128, 128, (1, 256)).astype(np.int8)
    cond = rng.integers(0, 2, (1, 256)).astype(bool)
    cond[0, 255] = True
    path = tmp_path / "select.tflite"
    path.write_bytes(build_tflite([tensor(x.shape, INT8, scale=[0.05], zero_point=[3]), tensor(cond.shape, 6, cond),
                                   tensor(y.shape, INT8, y, scale=[0.07], zero_point=[-5]),
                                   tensor(x.shape, INT8, scale=[0.06], zero_point=[1])],
                                  [(123, [1, 0, 2], [3], {})], [0], [3]))  # SELECT_V2
    theirs = tflite_run(path, x).reshape(-1)
    assert (theirs == np.where(cond, x, y).reshape(-1)).all()
    operands = [ntensor(T.TENSOR_BOOL8, cond, as_input=False), ntensor(S8, x, scale=0.05, zero_point=3),
                ntensor(S8, y, scale=0.07, zero_point=-5, as_input=False)]
    assert (under("tflite", Op.SELECT, operands, [output(S8, [1, 256], 0.06, 1)]) == theirs).all()
    nnapi = under("nnapi", Op.SELECT, operands, [output(S8, [1, 256], 0.06, 1)])
    assert nnapi[255] == 104 and theirs[255] == 127


@pytest.mark.parametrize("code, op, out_q", [(11, Op.L2_NORMALIZATION, (1 / 128, 0)), (76, Op.RSQRT, (0.02, -100))])
def test_normalizations_identical_in_both_conventions(tmp_path, code, op, out_q):
    """L2_NORMALIZATION (rows of 16) and RSQRT on every int8 value: TFLite's kernels and both
    conventions agree."""
    x = np.arange(-128, 128).astype(np.int8).reshape(16, 16)
    theirs = tflite_output(tmp_path, [tensor(x.shape, INT8, scale=[0.05], zero_point=[-128 if op == Op.RSQRT else 3]),
                                      tensor(x.shape, INT8, scale=[out_q[0]], zero_point=[out_q[1]])], code, [x])
    operands = [ntensor(S8, x, scale=0.05, zero_point=-128 if op == Op.RSQRT else 3)]
    for convention in ("nnapi", "tflite"):
        assert (under(convention, op, operands, [output(S8, [16, 16], *out_q)]) == theirs).all(), convention


@pytest.mark.parametrize("align, half", [(False, False), (True, False), (False, True)])
def test_resize_nearest_neighbor_identical_in_both_conventions(tmp_path, monkeypatch, align, half):
    monkeypatch.setitem(OPTIONS, 97, 74)  # ResizeNearestNeighborOptions
    x = np.random.default_rng(2).integers(-128, 128, (1, 5, 7, 3)).astype(np.int8)
    path = tmp_path / "nearest.tflite"
    path.write_bytes(build_tflite([tensor(x.shape, INT8, scale=[0.05], zero_point=[3]),
                                   tensor((2,), INT32, np.array([9, 11])),
                                   tensor((1, 9, 11, 3), INT8, scale=[0.05], zero_point=[3])],
                                  [(97, [0, 1], [2], {0: Scalar("b", align), 1: Scalar("b", half)})], [0], [2]))
    theirs = tflite_run(path, x).reshape(-1)
    operands = [ntensor(S8, x, scale=0.05, zero_point=3), scalar(T.INT32, 11), scalar(T.INT32, 9),
                scalar(T.BOOL, False), scalar(T.BOOL, align), scalar(T.BOOL, half)]
    for convention in ("nnapi", "tflite"):
        assert (under(convention, Op.RESIZE_NEAREST_NEIGHBOR, operands, [output(S8, [1, 9, 11, 3], 0.05, 3)])
                == theirs).all(), convention


def test_uint8_concatenation_requantizes_alike(tmp_path, monkeypatch):
    """uint8 CONCATENATION of inputs quantized (0.043, 7) and (0.029, 200) into (0.061, 11): TFLite's
    ConcatenationWithScaling, which AOSP runs too, on every input value."""
    monkeypatch.setitem(TYPE_FMT, UINT8, (np.uint8, "B"))
    monkeypatch.setitem(OPTIONS, 2, 10)  # ConcatenationOptions
    x = np.arange(256).astype(np.uint8).reshape(1, 256)
    other = np.random.default_rng(3).integers(0, 256, (1, 256)).astype(np.uint8)
    path = tmp_path / "concat.tflite"
    path.write_bytes(build_tflite([tensor(x.shape, UINT8, scale=[0.043], zero_point=[7]),
                                   tensor(x.shape, UINT8, other, scale=[0.029], zero_point=[200]),
                                   tensor((1, 512), UINT8, scale=[0.061], zero_point=[11])],
                                  [(2, [0, 1], [2], {0: Scalar("i", 1), 1: Scalar("b", 0)})], [0], [2]))
    for convention, driver in (("nnapi", "reference"), ("tflite", "nnapi_ref.drivers.reference:tflite_convention")):
        assert report(diverge(path, driver, [x], convention=convention), io.StringIO()) == 0, convention


@pytest.mark.parametrize("uint8", [True, False])
def test_transpose_conv_scale_product_by_type(tmp_path, monkeypatch, uint8):
    """TRANSPOSE_CONV_2D at the accumulators of test_convolution_scale_product_by_type (1x1
    filter, stride 1): the same rule, float32 product for uint8 and double for int8 in TFLite."""
    monkeypatch.setitem(TYPE_FMT, UINT8, (np.uint8, "B"))
    monkeypatch.setitem(OPTIONS, 67, 49)  # TransposeConvOptions
    sx, sw, so = 0.013840035535395145, 0.0030784509144723415, 1.9368747472763062
    bias = np.array([-4659678, -4341456, -4659678], np.int32)
    kind, zp, dtype, code = (UINT8, 128, np.uint8, U8) if uint8 else (INT8, 0, np.int8, S8)
    w = np.full((3, 1, 1, 1), zp + 1, dtype)
    path = tmp_path / "transpose.tflite"
    path.write_bytes(build_tflite([tensor((1, 1, 1, 1), kind, scale=[sx], zero_point=[zp]),
                                   tensor((4,), INT32, np.array([1, 1, 1, 3])),
                                   tensor(w.shape, kind, w, scale=[sw], zero_point=[zp]),
                                   tensor((3,), INT32, bias, scale=[sx * sw], zero_point=[0]),
                                   tensor((1, 1, 1, 3), kind, scale=[so], zero_point=[zp])],
                                  [(67, [1, 2, 0, 3], [4], {0: Scalar("b", 1), 1: Scalar("i", 1), 2: Scalar("i", 1)})],
                                  [0], [4]))
    x = np.full((1, 1, 1, 1), zp, dtype)
    theirs = tflite_run(path, x).reshape(-1).astype(int) - zp
    assert theirs.tolist() == ([-102, -95, -102] if uint8 else [-103, -96, -103])
    operands = [ntensor(code, x, scale=sx, zero_point=zp), ntensor(code, w, scale=sw, zero_point=zp, as_input=False),
                ntensor(T.TENSOR_INT32, bias, scale=float(np.float32(sx) * np.float32(sw)), as_input=False),
                ntensor(T.TENSOR_INT32, np.array([1, 1, 1, 3]), as_input=False), scalar(T.INT32, 2), scalar(T.INT32, 1),
                scalar(T.INT32, 1), scalar(T.INT32, 0), scalar(T.BOOL, False)]
    ours = under("tflite", Op.TRANSPOSE_CONV_2D, operands, [output(code, [1, 1, 1, 3], so, zp)]).astype(int) - zp
    assert ours.tolist() == theirs.tolist()
    nnapi = under("nnapi", Op.TRANSPOSE_CONV_2D, operands, [output(code, [1, 1, 1, 3], so, zp)]).astype(int) - zp
    assert nnapi.tolist() == [-102, -95, -102]


def test_operator_outputs_folded_at_import_are_left_out(tmp_path, monkeypatch):
    """float16 weights behind DEQUANTIZE (TFLite's float16 quantization) are folded into constants
    at import: no NNAPI operation computes the DEQUANTIZE's output, so it is not compared; the
    FULLY_CONNECTED's is (small integers: exact in float16 and in any summation order)."""
    float16, dequantize = 1, 6  # TFLite's TensorType FLOAT16 and BuiltinOperator DEQUANTIZE
    monkeypatch.setitem(TYPE_FMT, float16, (np.float16, "e"))
    rng = np.random.default_rng(5)
    w = rng.integers(-3, 4, (4, 3)).astype(np.float16)
    path = tmp_path / "fp16_weights.tflite"
    path.write_bytes(build_tflite([tensor([2, 3]), tensor([4, 3], float16, w), tensor([4, 3]), tensor([2, 4])],
                                  [(dequantize, [1], [2], {}), (FULLY_CONNECTED, [0, 2, -1], [3], {})], [0], [3]))
    x = rng.integers(-3, 4, (2, 3)).astype(np.float32)
    differences = diverge(path, inputs=[x])
    assert [(d.op, d.tensor, d.elements, d.total) for d in differences] == [("FULLY_CONNECTED", 3, 0, 8)]
