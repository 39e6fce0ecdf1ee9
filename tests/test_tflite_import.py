"""nnts.formats.tflite.importer: .tflite flatbuffers imported as nnapi_ref Models.

Hand-built models (a minimal flatbuffer *writer* below, independent of the schema module the importer reads with)
check the mapping against outputs computed here with plain numpy; the real models of
../shared/models, when present with ai_edge_litert installed, are checked against TFLite itself.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import Compilation, Execution
from nnts.formats.tflite import importer as tflite
from nnts.formats.tflite.importer import TFLiteImportError, convert, load_tflite, parse_tflite

# The importer reads .tflite files with ai-edge-litert's schema module.
pytestmark = pytest.mark.skipif(tflite.schema is None, reason=tflite.NEEDS_SCHEMA)

MODELS = Path(__file__).resolve().parents[1].parent / "shared" / "models"

try:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
except ImportError:  # pragma: no cover - depends on the environment
    Interpreter = OpResolverType = None


# ----------------------------------------------------------------------------- flatbuffer writer

class Table:
    """A flatbuffer table: ``fields`` maps slot -> Scalar, Vector, TableVector, String or Table."""

    def __init__(self, **slots):
        self.fields = {int(k[1:]): v for k, v in slots.items()}   # f0=..., f3=...


class Scalar:
    def __init__(self, fmt: str, value):
        self.fmt, self.value = fmt, value


class Vector:
    def __init__(self, fmt: str, values, align: int = 4):
        self.fmt, self.values, self.align = fmt, list(values), align


class TableVector:
    def __init__(self, tables):
        self.tables = list(tables)


class String:
    def __init__(self, text: str):
        self.text = text


class Writer:
    """Lays objects out front to back, each table's children after it, so every uoffset points
    forward (flatbuffers only requires offsets to be unsigned and in the buffer). A table is its
    vtable (uint16 vtable size, uint16 table size, uint16 per slot: field offset in the table or
    0) followed by the table: an int32 ``table - vtable`` then the inline fields."""

    def __init__(self):
        self.buf = bytearray(8)

    def pad(self, align: int, extra: int = 0) -> None:
        while (len(self.buf) + extra) % align:
            self.buf.append(0)

    def finish(self, root: Table, identifier: bytes = b"TFL3") -> bytes:
        pos = self.write(root)
        struct.pack_into("<I", self.buf, 0, pos)
        self.buf[4:8] = identifier
        return bytes(self.buf)

    def write(self, obj) -> int:
        if isinstance(obj, Table):
            return self.table(obj)
        if isinstance(obj, Vector):
            size = struct.calcsize("<" + obj.fmt)
            self.pad(max(size, obj.align), 4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(obj.values))
            self.buf += struct.pack(f"<{len(obj.values)}{obj.fmt}", *obj.values)
            return pos
        if isinstance(obj, String):
            self.pad(4)
            pos = len(self.buf)
            raw = obj.text.encode()
            self.buf += struct.pack("<I", len(raw)) + raw + b"\0"
            return pos
        if isinstance(obj, TableVector):
            self.pad(4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(obj.tables)) + bytes(4 * len(obj.tables))
            for k, t in enumerate(obj.tables):
                at = pos + 4 + 4 * k
                struct.pack_into("<I", self.buf, at, self.write(t) - at)
            return pos
        raise TypeError(obj)

    def table(self, t: Table) -> int:
        layout, off = {}, 4
        for slot, v in sorted(t.fields.items()):
            size = struct.calcsize("<" + v.fmt) if isinstance(v, Scalar) else 4
            off = (off + size - 1) // size * size
            layout[slot] = off
            off += size
        size = (off + 3) // 4 * 4
        n_slots = max(t.fields) + 1 if t.fields else 0
        self.pad(2)
        vpos = len(self.buf)
        self.buf += struct.pack(f"<HH{n_slots}H", 4 + 2 * n_slots, size, *[layout.get(s, 0) for s in range(n_slots)])
        self.pad(4)
        tpos = len(self.buf)
        self.buf += struct.pack("<i", tpos - vpos) + bytes(size - 4)
        for slot, v in t.fields.items():
            if isinstance(v, Scalar):
                struct.pack_into("<" + v.fmt, self.buf, tpos + layout[slot], v.value)
        for slot, v in t.fields.items():
            if not isinstance(v, Scalar):
                at = tpos + layout[slot]
                struct.pack_into("<I", self.buf, at, self.write(v) - at)
        return tpos


# TFLite schema: TensorType, BuiltinOperator and BuiltinOptions codes used here.
FLOAT32, INT32, INT8, COMPLEX64 = 0, 2, 9, 8
ADD, CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, SEGMENT_SUM, CUSTOM = 0, 3, 4, 9, 125, 32
OPTIONS = {CONV_2D: 1, DEPTHWISE_CONV_2D: 2, FULLY_CONNECTED: 8, ADD: 11}
TYPE_FMT = {FLOAT32: (np.float32, "f"), INT32: (np.int32, "i"), INT8: (np.int8, "b")}


def tensor(shape, ttype=FLOAT32, data=None, scale=None, zero_point=None, qdim=0, name="t"):
    return dict(shape=shape, type=ttype, data=data, scale=scale, zero_point=zero_point, qdim=qdim, name=name)


def build_tflite(tensors, operators, inputs, outputs, identifier=b"TFL3") -> bytes:
    """A one-subgraph .tflite: ``operators`` are (builtin code, inputs, outputs, options fields
    as a dict slot -> Scalar, or a custom code string for CUSTOM)."""
    buffers = [Table()]   # buffer 0: empty, by convention
    tensor_tables = []
    for k, t in enumerate(tensors):
        fields = dict(f0=Vector("i", t["shape"]), f1=Scalar("b", t["type"]), f3=String(f"{t['name']}{k}"))
        if t["data"] is not None:
            raw = np.ascontiguousarray(t["data"], TYPE_FMT[t["type"]][0]).tobytes()
            buffers.append(Table(f0=Vector("B", raw, align=16)))
            fields["f2"] = Scalar("I", len(buffers) - 1)
        if t["scale"] is not None:
            fields["f4"] = Table(f2=Vector("f", t["scale"]), f3=Vector("q", t["zero_point"]), f6=Scalar("i", t["qdim"]))
        tensor_tables.append(Table(**fields))
    codes, ops = [], []
    for code, ins, outs, opts in operators:
        key = (code, opts if code == CUSTOM else None)
        if key not in codes:
            codes.append(key)
        fields = dict(f0=Scalar("I", codes.index(key)), f1=Vector("i", ins), f2=Vector("i", outs))
        if code in OPTIONS and opts:
            fields.update(f3=Scalar("B", OPTIONS[code]), f4=Table(**{f"f{s}": v for s, v in opts.items()}))
        ops.append(Table(**fields))
    opcodes = [Table(f0=Scalar("b", min(c, 127)), f2=Scalar("i", 1), f3=Scalar("i", c),
                     **({"f1": String(custom)} if c == CUSTOM else {})) for c, custom in codes]
    subgraph = Table(f0=TableVector(tensor_tables), f1=Vector("i", inputs), f2=Vector("i", outputs),
                     f3=TableVector(ops), f4=String("main"))
    model = Table(f0=Scalar("I", 3), f1=TableVector(opcodes), f2=TableVector([subgraph]),
                  f3=String("hand-built by tests/test_tflite_import.py"), f4=TableVector(buffers))
    return Writer().finish(model, identifier)


def run(path_or_bytes, *inputs, tmp_path=None):
    if isinstance(path_or_bytes, bytes):
        path = tmp_path / "model.tflite"
        path.write_bytes(path_or_bytes)
    else:
        path = path_or_bytes
    model, info = load_tflite(path)
    compilation = Compilation(model)
    compilation.finish()
    execution = Execution(compilation)
    for k, x in enumerate(inputs):
        execution.set_input(k, x)
    out = info.outputs[0]
    result = np.zeros(out.shape, out.dtype)
    execution.set_output(0, result)
    execution.compute()
    return result, info


def tflite_run(path, *inputs, reference_kernels=True):
    kwargs = {"experimental_op_resolver_type": OpResolverType.BUILTIN_REF} if reference_kernels else {}
    it = Interpreter(model_path=str(path), num_threads=1, **kwargs)
    it.allocate_tensors()
    it.reset_all_variables()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


# ----------------------------------------------------------------------------- numpy expectations

def same_pads(size, stride, k):
    """TFLite's SAME padding of one dimension: (before, after)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + k - size, 0)
    return total // 2, total - total // 2


def conv_reference(x, w, b, stride, padding, depthwise=False):
    """Direct float64 convolution, NHWC input, OHWI filter (1HW(C*m) for depthwise)."""
    n, h, wd, c = x.shape
    _, kh, kw, _ = w.shape
    if padding == "SAME":
        (pt, pb), (pl, pr) = same_pads(h, stride, kh), same_pads(wd, stride, kw)
    else:
        pt = pb = pl = pr = 0
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    oh, ow = (xp.shape[1] - kh) // stride + 1, (xp.shape[2] - kw) // stride + 1
    c_out = w.shape[3] if depthwise else w.shape[0]
    y = np.zeros((n, oh, ow, c_out))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            if depthwise:
                mult = c_out // c
                y[:, i, j, :] = np.einsum("nhwc,hwc->nc", np.repeat(win, mult, axis=3), w[0])
            else:
                y[:, i, j, :] = np.einsum("nhwc,ohwc->no", win, w)
    return y + b


RNG = np.random.default_rng(1234)


def conv_model(depthwise=False, padding=0, stride=2, act=1):
    x = RNG.standard_normal((1, 5, 6, 2)).astype(np.float32)
    w = RNG.standard_normal((1, 3, 3, 4) if depthwise else (3, 3, 3, 2)).astype(np.float32)
    b = RNG.standard_normal(w.shape[3] if depthwise else 3).astype(np.float32)
    pad_name = "SAME" if padding == 0 else "VALID"
    expected = conv_reference(x, w, b, stride, pad_name, depthwise)
    expected = {0: expected, 1: np.maximum(expected, 0), 3: np.clip(expected, 0, 6)}[act]
    opts = {0: Scalar("b", padding), 1: Scalar("i", stride), 2: Scalar("i", stride)}
    if depthwise:
        opts.update({3: Scalar("i", 2), 4: Scalar("b", act)})
    else:
        opts[3] = Scalar("b", act)
    tensors = [tensor(x.shape), tensor(w.shape, data=w), tensor(b.shape, data=b), tensor(expected.shape)]
    data = build_tflite(tensors, [(DEPTHWISE_CONV_2D if depthwise else CONV_2D, [0, 1, 2], [3], opts)], [0], [3])
    return data, x, expected


# ----------------------------------------------------------------------------- hand-built models

@pytest.mark.parametrize("depthwise, padding, stride, act", [
    (False, 0, 2, 1),   # SAME, stride 2 on 5x6: padding (1, 1) rows and (0, 1) columns, RELU
    (False, 1, 1, 0),   # VALID
    (True, 0, 1, 3),    # depthwise, multiplier 2, SAME, RELU6
    (True, 1, 2, 0),
])
def test_float_convolution_matches_numpy(tmp_path, depthwise, padding, stride, act):
    data, x, expected = conv_model(depthwise, padding, stride, act)
    got, info = run(data, x, tmp_path=tmp_path)
    assert info.operators == ["DEPTHWISE_CONV_2D" if depthwise else "CONV_2D"]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    if Interpreter is not None:   # the hand-built file is a valid .tflite for TFLite too
        np.testing.assert_allclose(tflite_run(tmp_path / "model.tflite", x), expected, rtol=1e-5, atol=1e-5)


def quantize(real, scale, zp, lo=-128, hi=127):
    return np.clip(np.floor(real / scale + 0.5) + zp, lo, hi).astype(np.int8)


def test_int8_per_channel_conv_matches_real_arithmetic(tmp_path):
    """int8 activations -> TENSOR_QUANT8_ASYMM_SIGNED, per-channel int8 filter ->
    TENSOR_QUANT8_SYMM_PER_CHANNEL (channel_dim 0), int32 bias: the result is the real-valued
    convolution of the dequantized operands, requantized, within one quantization step."""
    xs, xz, ys, yz = 0.05, 3, 0.08, -2
    x = RNG.integers(-128, 128, (1, 4, 4, 3)).astype(np.int8)
    w = RNG.integers(-127, 128, (5, 3, 3, 3)).astype(np.int8)
    ws = np.array([0.01, 0.02, 0.005, 0.015, 0.03], np.float32)
    b = RNG.integers(-500, 500, 5).astype(np.int32)
    real = conv_reference((x.astype(np.float64) - xz) * xs, w * ws[:, None, None, None].astype(np.float64),
                          b * (xs * ws.astype(np.float64)), 1, "SAME")
    expected = quantize(real, ys, yz)
    tensors = [tensor(x.shape, INT8, scale=[xs], zero_point=[xz]),
               tensor(w.shape, INT8, w, scale=list(ws), zero_point=[0] * 5, qdim=0),
               tensor(b.shape, INT32, b, scale=list(xs * ws), zero_point=[0] * 5),
               tensor(expected.shape, INT8, scale=[ys], zero_point=[yz])]
    opts = {0: Scalar("b", 0), 1: Scalar("i", 1), 2: Scalar("i", 1), 3: Scalar("b", 0)}
    got, info = run(build_tflite(tensors, [(CONV_2D, [0, 1, 2], [3], opts)], [0], [3]), x, tmp_path=tmp_path)
    assert info.inputs[0].dtype == np.int8 and (info.outputs[0].scale, info.outputs[0].zero_point) == (
        pytest.approx(ys), yz)
    assert np.max(np.abs(got.astype(int) - expected.astype(int))) <= 1


def test_int8_per_channel_fully_connected_lowered_to_conv(tmp_path):
    """NNAPI's FULLY_CONNECTED has no per-channel filter: RESHAPE -> 1x1 CONV_2D -> RESHAPE."""
    xs, xz, ys, yz = 0.1, -5, 0.2, 7
    x = RNG.integers(-128, 128, (3, 6)).astype(np.int8)
    w = RNG.integers(-127, 128, (4, 6)).astype(np.int8)
    ws = np.array([0.01, 0.03, 0.02, 0.005], np.float32)
    b = RNG.integers(-300, 300, 4).astype(np.int32)
    real = ((x.astype(np.float64) - xz) * xs) @ (w * ws[:, None].astype(np.float64)).T + b * (xs * ws)
    expected = quantize(np.maximum(real, 0), ys, yz)   # fused RELU
    tensors = [tensor(x.shape, INT8, scale=[xs], zero_point=[xz]),
               tensor(w.shape, INT8, w, scale=list(ws), zero_point=[0] * 4),
               tensor(b.shape, INT32, b, scale=list(xs * ws), zero_point=[0] * 4),
               tensor(expected.shape, INT8, scale=[ys], zero_point=[yz])]
    got, info = run(build_tflite(tensors, [(FULLY_CONNECTED, [0, 1, 2], [3], {0: Scalar("b", 1)})], [0], [3]), x,
                    tmp_path=tmp_path)
    assert info.nnapi_operations == ["RESHAPE", "CONV_2D", "RESHAPE"]
    assert np.max(np.abs(got.astype(int) - expected.astype(int))) <= 1


def test_add_with_broadcast_and_shared_constant(tmp_path):
    """ADD of an input and a constant broadcast along the last axis, twice with the same constant
    tensor (the converter shares constants between operators), RELU6 fused on the second."""
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32) * 4
    c = RNG.standard_normal(4).astype(np.float32)
    tensors = [tensor(x.shape), tensor(c.shape, data=c), tensor(x.shape), tensor(x.shape)]
    ops = [(ADD, [0, 1], [2], {0: Scalar("b", 0)}), (ADD, [2, 1], [3], {0: Scalar("b", 3)})]
    got, info = run(build_tflite(tensors, ops, [0], [3]), x, tmp_path=tmp_path)
    np.testing.assert_allclose(got, np.clip(x + 2 * c, 0, 6), rtol=1e-6, atol=1e-6)
    assert info.nnapi_operations == ["ADD", "ADD"]


# ----------------------------------------------------------------------------- errors

def test_every_truncation_is_a_clear_error():
    data, _, _ = conv_model()
    graph = parse_tflite(data)   # the whole file parses
    assert [op.name for op in graph.operators] == ["CONV_2D"]
    for n in range(len(data)):
        with pytest.raises(TFLiteImportError):
            convert(parse_tflite(data[:n]))


def test_corrupted_bytes_give_a_clear_error_or_a_model():
    data, _, _ = conv_model()
    rng = np.random.default_rng(7)
    for _ in range(300):
        corrupt = bytearray(data)
        for at in rng.integers(0, len(data), 3):
            corrupt[at] = rng.integers(0, 256)
        try:
            convert(parse_tflite(bytes(corrupt)))
        except TFLiteImportError:
            pass


def test_not_a_tflite_file(tmp_path):
    data, _, _ = conv_model()
    path = tmp_path / "bad.tflite"
    path.write_bytes(data[:4] + b"XXXX" + data[8:])
    with pytest.raises(ValueError, match="not a .tflite file"):
        load_tflite(path)
    path.write_bytes(b"\x01\x02")
    with pytest.raises(ValueError, match="too short"):
        load_tflite(path)


@pytest.mark.parametrize("code, opts, message", [
    (SEGMENT_SUM, None, r"operator 0 \(SEGMENT_SUM\): is not supported"),
    (CUSTOM, "MyFancyOp", r"CUSTOM\(MyFancyOp\)"),
])
def test_unsupported_operator_is_named(code, opts, message):
    data = build_tflite([tensor([1, 4]), tensor([1, 4])], [(code, [0], [1], opts)], [0], [1])
    with pytest.raises(TFLiteImportError, match=message):
        convert(parse_tflite(data))


def test_unsupported_tensor_type_is_named():
    data = build_tflite([tensor([1, 4], COMPLEX64), tensor([1, 4])], [(ADD, [0, 0], [1], None)], [0], [1])
    with pytest.raises(TFLiteImportError, match="COMPLEX64"):
        convert(parse_tflite(data))


def test_unsupported_fused_activation_is_named():
    data = build_tflite([tensor([1, 4]), tensor([1, 4])], [(ADD, [0, 0], [1], {0: Scalar("b", 4)})], [0], [1])
    with pytest.raises(TFLiteImportError, match=r"ADD\): fused activation TANH"):
        convert(parse_tflite(data))


# ----------------------------------------------------------------------------- the real models

needs_models = pytest.mark.skipif(not MODELS.is_dir() or Interpreter is None,
                                  reason="needs ../shared/models and ai_edge_litert")

# chelsea and rocket: top-1 margins of at least 0.09 (24 output steps) in every MobileNet
# (manifest.json), so a correct import cannot flip them.
IMAGES = (1, 3)


@needs_models
@pytest.mark.parametrize("name", ["mobilenet_v1_1.0_224_float", "mobilenet_v1_1.0_224_quant",
                                  "mobilenet_v2_160_dogbreeds_float", "mobilenet_v2_160_dogbreeds_quant"])
def test_mobilenet_agrees_with_tflite(name):
    """Compared with TFLite's reference kernels (BUILTIN_REF), whose integer arithmetic NNAPI's CPU
    implementation follows. Tolerances:

    * float32 probabilities: 1e-4. Both sum float32 products in different orders; measured up to
      7e-6 here, and TFLite's own XNNPACK and reference kernels differ by up to 9e-6 (README).
    * uint8 probabilities (scale 1/256): 8 steps. Every layer run alone on TFLite's own inputs
      agrees to the bit except a few elements off by one step (NNAPI computes the requantization
      multiplier from float32(input_scale * filter_scale), TFLite from the double product); those
      flips propagate through ~30-60 layers and the softmax turns one logit step into several
      output steps. Measured: at most 3 (v1) and 7 (v2) steps over the 8 images, 0-1 on these
      two; TFLite's XNNPACK and reference kernels themselves differ by 8 and 11 steps (README).
    """
    path = MODELS / f"{name}.tflite"
    model, info = load_tflite(path)
    compilation = Compilation(model)
    compilation.finish()
    inp, out = info.inputs[0], info.outputs[0]
    with np.load(MODELS / "images.npz", allow_pickle=False) as npz:
        images = npz[f"images_{inp.shape[1]}"]
    for k in IMAGES:
        x = images[k][None]
        x = x if inp.dtype == np.uint8 else x.astype(np.float32) / np.float32(127.5) - np.float32(1)
        ours = np.zeros(out.shape, out.dtype)
        execution = Execution(compilation)
        execution.set_input(0, x)
        execution.set_output(0, ours)
        execution.compute()
        theirs = tflite_run(path, x)
        assert ours.argmax() == theirs.argmax(), f"image {k}: top-1 {ours.argmax()} vs TFLite {theirs.argmax()}"
        if out.quantized:
            assert np.max(np.abs(ours.astype(int) - theirs.astype(int))) <= 8, f"image {k}"
        else:
            np.testing.assert_allclose(ours, theirs, atol=1e-4, err_msg=f"image {k}")


@needs_models
def test_float_lstm_agrees_with_tflite():
    """UNIDIRECTIONAL_SEQUENCE_LSTM x3 and FULLY_CONNECTED with keep_num_dims (RESHAPE back to
    rank 3); float32 throughout, so within 1e-4 (measured 2.4e-6)."""
    path = MODELS / "lstm_tts_like_float.tflite"
    with np.load(MODELS / "lstm_inputs.npz", allow_pickle=False) as npz:
        x = npz["tts_like"][0][None]
    ours, info = run(path, x)
    np.testing.assert_allclose(ours, tflite_run(path, x), atol=1e-4)


@needs_models
def test_integer_lstm_is_refused_with_the_reason():
    with pytest.raises(TFLiteImportError, match=r"UNIDIRECTIONAL_SEQUENCE_LSTM\): integer LSTM .*biases"):
        load_tflite(MODELS / "lstm_asr_like_quant.tflite")
