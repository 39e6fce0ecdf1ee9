"""The seeded benchmark set: what ``nnts bench`` runs where ``../shared/models`` is absent.

Architecture-faithful models with seeded weights, written as .tflite files (see
:mod:`mlts.models.builder`) so that TFLite and the driver run the very same file:

* ``mobilenet_v1_0.25_128_seeded_{float,int8}``: TF-slim MobileNet v1 at width 0.25, 128x128 input
  (one of Google's published sizes): a 3x3 stride-2 convolution, 13 depthwise-separable blocks
  with RELU6, average pool, 1x1 convolution to 1001 logits, RESHAPE, SOFTMAX.
* ``mobilenet_v2_0.35_96_seeded_{float,int8}``: Keras MobileNetV2 at width 0.35, 96x96: 17
  inverted-residual blocks (expand 1x1, depthwise 3x3, linear 1x1 projection, ADD where the shape
  allows), 1x1 convolution to 1280, MEAN, FULLY_CONNECTED to 1001, SOFTMAX.
* ``lstm_asr_seeded_{float,hybrid}``: [1,50,320] filterbank frames, 3 LSTM layers of 160, a
  FULLY_CONNECTED to 42 phone logits and SOFTMAX (MLTS's ``asr_float`` shapes, as
  ``../shared/models``'s ``lstm_asr_like``); ``lstm_tts_seeded_float``: [1,50,334] linguistic
  features, 2 FULLY_CONNECTED+RELU of 256, 2 LSTM layers of 192, FULLY_CONNECTED to 196.

Weights: He-normal convolutions, Glorot/orthogonal LSTMs, zero biases (forget gate 1), from a
fixed seed. The logits layer is centred and scaled on calibration data (as batch normalization
would), to standard deviation 3 (1 for the TTS regression outputs): the prediction then depends on
the input and is neither flat nor saturated. int8
models are calibrated on 16 synthetic inputs (another seed than the benchmark's) run through the
float model on nnapi_ref's reference driver. Inputs: smooth synthetic images in [-1, 1] and
N(0, 1) frames (:func:`synthetic_inputs`), labelled synthetic in the report.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from nnapi_ref import Compilation, Execution, using_drivers
from nnapi_ref.drivers.reference import ReferenceDevice
from nnts.formats.tflite.importer import load_tflite
from nnts.mlts.models import builder

VERSION = "1"   # bump when the models change: the cache folder is per version
CALIBRATION_SEED = 1234
CALIBRATION_SAMPLES = 16


def he(rng, shape, fan_in) -> np.ndarray:
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def divisible(v: float, d: int = 8) -> int:
    """Keras's _make_divisible: channels rounded to a multiple of 8, never below 90 %."""
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


def conv_block(net, rng, name, x, out_c, k=1, stride=1, relu6=True):
    in_c = net.shapes[x][3]
    return net.conv(name, x, he(rng, (out_c, k, k, in_c), k * k * in_c), stride, relu6)


def depthwise(net, rng, name, x, stride):
    c = net.shapes[x][3]
    return net.conv(name, x, he(rng, (1, 3, 3, c), 9), stride, True, depthwise=True)


def mobilenet_v1(net, rng, alpha=0.25, size=128, classes=1001):
    x = net.input("input", (1, size, size, 3), -1.0, 1.0)
    y = conv_block(net, rng, "Conv2d_0", x, int(32 * alpha), k=3, stride=2)
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    for i, (c, s) in enumerate(blocks, 1):
        y = depthwise(net, rng, f"Conv2d_{i}_depthwise", y, s)
        y = conv_block(net, rng, f"Conv2d_{i}_pointwise", y, int(c * alpha))
    y = net.average_pool("AvgPool_1a", y)
    y = conv_block(net, rng, "Conv2d_1c_1x1", y, classes, relu6=False)
    y = net.reshape("Reshape", y, (1, classes))
    return x, net.softmax("Predictions", y), "Conv2d_1c_1x1", 3.0


def mobilenet_v2(net, rng, alpha=0.35, size=96, classes=1001):
    x = net.input("input", (1, size, size, 3), -1.0, 1.0)
    y = conv_block(net, rng, "Conv1", x, divisible(32 * alpha), k=3, stride=2)
    k = 0
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)):
        for j in range(n):
            stride, in_c, out_c = (s if j == 0 else 1), net.shapes[y][3], divisible(c * alpha)
            h = conv_block(net, rng, f"block_{k}_expand", y, in_c * t) if t != 1 else y
            h = depthwise(net, rng, f"block_{k}_depthwise", h, stride)
            h = conv_block(net, rng, f"block_{k}_project", h, out_c, relu6=False)
            y = net.add(f"block_{k}_add", y, h) if stride == 1 and in_c == out_c else h
            k += 1
    y = conv_block(net, rng, "Conv_1", y, 1280)
    y = net.mean("global_average_pooling", y)
    w = (rng.standard_normal((classes, 1280)) * np.sqrt(1.0 / 1280)).astype(np.float32)
    y = net.fully_connected("Logits", y, w, np.zeros(classes, np.float32))
    return x, net.softmax("Predictions", y), "Logits", 3.0


def dense(rng, units, features):
    limit = np.sqrt(6.0 / (features + units))
    return rng.uniform(-limit, limit, (units, features)).astype(np.float32), np.zeros(units, np.float32)


def lstm_asr(net, rng):
    x = net.input("input", (1, 50, 320), -4.0, 4.0)
    y = x
    for i in range(3):
        y = net.lstm(f"lstm_{i}", y, 160, rng)
    y = net.fully_connected("Logits", y, *dense(rng, 42, 160))
    return x, net.softmax("Predictions", y), "Logits", 3.0


def lstm_tts(net, rng):
    x = net.input("input", (1, 50, 334), -4.0, 4.0)
    y = net.fully_connected("fc_0", x, *dense(rng, 256, 334), relu=True)
    y = net.fully_connected("fc_1", y, *dense(rng, 256, 256), relu=True)
    for i in range(2):
        y = net.lstm(f"lstm_{i}", y, 192, rng)
    out = net.fully_connected("Acoustic", y, *dense(rng, 196, 192))
    return x, out, "Acoustic", 1.0


# file stem -> (architecture, seed, precisions)
ARCHITECTURES = {
    "mobilenet_v1_0.25_128_seeded": (mobilenet_v1, 1, ("float", "int8")),
    "mobilenet_v2_0.35_96_seeded": (mobilenet_v2, 2, ("float", "int8")),
    "lstm_asr_seeded": (lstm_asr, 3, ("float", "hybrid")),
    "lstm_tts_seeded": (lstm_tts, 4, ("float",)),
}


def synthetic_inputs(shape, dtype, scale: float, zero_point: int, n: int, seed: int) -> list[np.ndarray]:
    """``n`` seeded inputs: images (rank 4, 3 channels) as smooth random patterns in [-1, 1],
    anything else N(0, 1); quantized with (scale, zero point) for integer inputs."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    out = []
    for _ in range(n):
        if len(shape) == 4 and shape[-1] == 3:
            h, w = shape[1], shape[2]
            yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
            img = np.zeros(shape, np.float64)
            for _ in range(6):   # a few random low-frequency waves per channel, and some noise
                fy, fx, phase = rng.uniform(0.5, 4, 2).tolist() + [rng.uniform(0, 2 * np.pi)]
                img += rng.uniform(0.2, 1, (1, 1, 1, 3)) * np.sin(2 * np.pi * (fy * yy + fx * xx) + phase)[None, :, :, None]
            img = img / np.abs(img).max() * 0.9 + rng.normal(0, 0.05, shape)
            real = np.clip(img, -1, 1)
        else:
            real = rng.standard_normal(shape)
        if dtype.kind == "f":
            out.append(real.astype(dtype))
        elif dtype.kind in "iu" and scale:
            info = np.iinfo(dtype)
            out.append(np.clip(np.round(real / scale) + zero_point, info.min, info.max).astype(dtype))
        else:
            info = np.iinfo(dtype) if dtype.kind in "iu" else None
            out.append(np.clip(np.round(real * 4), info.min, info.max).astype(dtype) if info else real.astype(dtype))
    return out


def _calibrate(float_model: bytes, activations: dict[str, int], input_shape, keep: str):
    """(min, max) of every named activation of the float model, on nnapi_ref's reference driver
    over the calibration inputs, and the values of activation ``keep`` stacked over them."""

    names = list(activations)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "float.tflite"
        path.write_bytes(float_model)
        model, info = load_tflite(path, extra_outputs=[activations[n] for n in names])
    by_tensor = {o.tensor: i for i, o in enumerate(info.outputs)}
    ranges = {n: (np.inf, -np.inf) for n in names}
    kept = []
    with using_drivers([ReferenceDevice()]) as devices:
        compilation = Compilation(model, devices)
        compilation.finish()
        for x in synthetic_inputs(input_shape, np.float32, 0, 0, CALIBRATION_SAMPLES, CALIBRATION_SEED):
            execution = Execution(compilation)
            execution.set_input(0, x)
            outs = [np.zeros(o.shape, o.dtype) for o in info.outputs]
            for i, o in enumerate(outs):
                execution.set_output(i, o)
            execution.compute()
            for n in names:
                a = outs[by_tensor[activations[n]]]
                ranges[n] = (min(ranges[n][0], float(a.min())), max(ranges[n][1], float(a.max())))
            kept.append(outs[by_tensor[activations[keep]]])
    return ranges, np.stack(kept)


def build(stem: str) -> dict[str, bytes]:
    """The files of one architecture: {file name: .tflite bytes}, deterministic."""
    arch, seed, precisions = ARCHITECTURES[stem]

    def make(precision, ranges=None, gains=None, biases=None):
        net = builder.Net(precision, f"nnts seeded {stem} ({precision}), mlts.models v{VERSION}", ranges, gains,
                          biases)
        x, y, logits, std = arch(net, np.random.default_rng(seed))
        return net, net.finish([x], [y]), logits, std

    net, first, logits, std = make("float")
    ranges, values = _calibrate(first, {n: k for n, k in net.activations.items() if n != "input"},
                                net.shapes[net.activations["input"]], logits)
    # Centre each logit on the calibration data (as batch normalization would) and scale them to
    # the wanted spread: the prediction then depends on the input, not on a dominant class.
    axes = tuple(range(values.ndim - 1))
    mean = values.mean(axis=axes)
    gain = std / max(float((values - mean).std()), 1e-12)
    centred = (values - mean) * gain
    ranges[logits] = (float(centred.min()), float(centred.max()))
    return {f"{stem}_{p}.tflite": make(p, ranges, {logits: gain}, {logits: -mean.reshape(-1) * gain})[1]
            for p in precisions}


def default_folder() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "nnts" / f"seeded-models-v{VERSION}"


def seeded_models(folder: Path | None = None, stems=None) -> list[Path]:
    """The seeded set's files in ``folder`` (default ``~/.cache/nnts/seeded-models-v1``), written
    when missing (a few seconds); ``stems`` picks architectures (default all)."""
    reason = builder.available()
    if reason:
        raise RuntimeError(reason)
    folder = Path(folder or default_folder())
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem in stems or ARCHITECTURES:
        files = [f"{stem}_{p}.tflite" for p in ARCHITECTURES[stem][2]]
        if not all((folder / f).exists() for f in files):
            print(f"nnts: building the seeded model {stem} into {folder} (first use only, a few seconds each)",
                  file=sys.stderr, flush=True)
            for name, data in build(stem).items():
                tmp = folder / f".{name}.{os.getpid()}"
                tmp.write_bytes(data)
                tmp.replace(folder / name)   # atomic: a concurrent run never reads half a file
        paths += [folder / f for f in files]
    return paths
