"""Write .tflite flatbuffers from numpy weights, with TFLite's own schema (the object API of
``ai_edge_litert.schema_py_generated``, packed by the ``flatbuffers`` package), so that the files
are exactly what TFLite reads: the benchmark runs the very same file in TFLite and on the driver.

:class:`Net` writes one architecture in one of three precisions from the same seeded weights:
``float``; ``int8`` (full-integer, as TFLite's converter makes it: per-channel symmetric int8
convolution weights, int32 biases at ``input_scale * weight_scale``, int8 activations with the
ranges measured on calibration data, SOFTMAX at 1/256 and -128); ``hybrid`` (int8 weights, float
activations: dynamic-range quantization of FULLY_CONNECTED and LSTM weights).
"""
from __future__ import annotations

import numpy as np

from nnts.formats.tflite.writer import GraphBuilder, available, options  # noqa: F401  (this module's API)


def activation_quant(lo: float, hi: float) -> tuple[float, int]:
    """Asymmetric int8 (scale, zero point) covering [lo, hi] and 0, as TFLite's calibrator does."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = max(hi - lo, 1e-8) / 255.0
    return scale, int(np.clip(round(-128 - lo / scale), -128, 127))


def symmetric_quant(w: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 weights (zero point 0): one scale per slice along ``axis``, or one in all."""
    reduce = tuple(i for i in range(w.ndim) if i != axis) if axis is not None else None
    scale = np.maximum(np.abs(w).max(axis=reduce), 1e-8) / 127.0
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    q = np.clip(np.round(w / np.reshape(scale, shape)), -127, 127).astype(np.int8)
    return q, np.atleast_1d(scale).astype(np.float32)


class Net:
    """Layers of an architecture, written in ``precision`` (float, int8 or hybrid).

    ``ranges``: float range of each named activation, measured on calibration data (needed for
    int8). ``gains`` and ``biases``: a factor for the weights and a bias per layer name, in place
    of 1 and the layer's own (the logits' centring and scale, set from a first float build). Each layer returns the tensor index of its output; its name keys
    the ranges, so a float build with every activation exposed calibrates an int8 one."""

    def __init__(self, precision: str, description: str, ranges=None, gains=None, biases=None):
        self.precision = precision
        self.b = GraphBuilder(description)
        self.ranges = ranges or {}
        self.gains = gains or {}
        self.biases = biases or {}
        self.quant: dict[int, tuple[float, int]] = {}   # int8 activation tensor -> (scale, zero point)
        self.shapes: dict[int, tuple] = {}
        self.activations: dict[str, int] = {}           # name -> tensor index (calibration outputs)

    def act(self, name: str, shape, quant: tuple[float, int] | None = None) -> int:
        if self.precision != "int8":
            k = self.b.tensor(name, shape)
        else:
            quant = quant or activation_quant(*self.ranges[name][:2])
            k = self.b.tensor(name, shape, "int8", scale=quant[0], zero_point=quant[1])
            self.quant[k] = quant
        self.shapes[k] = tuple(shape)
        self.activations[name] = k
        return k

    def input(self, name: str, shape, lo: float, hi: float) -> int:
        return self.act(name, shape, activation_quant(lo, hi) if self.precision == "int8" else None)

    def weights(self, name: str, w: np.ndarray, axis: int | None, hybrid_ok: bool) -> int:
        """A float or int8 weight tensor: per-channel along ``axis`` in int8 builds, per-tensor
        in hybrid builds of layers TFLite runs hybrid (``hybrid_ok``)."""
        if self.precision == "int8" or (self.precision == "hybrid" and hybrid_ok):
            q, scale = symmetric_quant(w, axis if self.precision == "int8" else None)
            return self.b.tensor(name, w.shape, "int8", q, scale, np.zeros(len(scale), np.int64),
                                 axis=axis if self.precision == "int8" and axis is not None else 0)
        return self.b.tensor(name, w.shape, "float32", w)

    def bias(self, name: str, bias: np.ndarray, x: int, w: int) -> int:
        if self.precision != "int8":
            return self.b.tensor(name, bias.shape, "float32", bias)
        scale = self.quant[x][0] * np.asarray(self.b.tensors[w].quantization.scale, np.float64)
        scale = np.broadcast_to(scale, bias.shape)
        q = np.round(bias / scale).astype(np.int32)
        return self.b.tensor(name, bias.shape, "int32", q, scale.astype(np.float32), np.zeros(len(scale), np.int64))

    def conv(self, name: str, x: int, w: np.ndarray, stride: int = 1, relu6: bool = True,
             depthwise: bool = False) -> int:
        """CONV_2D (``w``: [out, kh, kw, in]) or DEPTHWISE_CONV_2D (``w``: [1, kh, kw, channels]),
        SAME padding, zero bias, RELU6 fused or none."""
        n, h, wd, _ = self.shapes[x]
        w = w * self.gains.get(name, 1.0)
        out_c = w.shape[3] if depthwise else w.shape[0]
        out = self.act(name, (n, -(-h // stride), -(-wd // stride), out_c))
        wk = self.weights(name + "/weights", w, 3 if depthwise else 0, hybrid_ok=False)
        bk = self.bias(name + "/bias", self.biases.get(name, np.zeros(out_c, np.float32)), x, wk)
        fused = 3 if relu6 else 0
        if depthwise:
            opts = options("DepthwiseConv2DOptions", padding=0, strideW=stride, strideH=stride, depthMultiplier=1,
                           fusedActivationFunction=fused, dilationWFactor=1, dilationHFactor=1)
        else:
            opts = options("Conv2DOptions", padding=0, strideW=stride, strideH=stride, fusedActivationFunction=fused,
                           dilationWFactor=1, dilationHFactor=1)
        self.b.op("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", [x, wk, bk], [out], opts)
        return out

    def fully_connected(self, name: str, x: int, w: np.ndarray, bias: np.ndarray, relu: bool = False) -> int:
        """FULLY_CONNECTED (``w``: [units, in]); a rank-3 input keeps its dimensions."""
        gain = self.gains.get(name, 1.0)
        shape = self.shapes[x][:-1] + (w.shape[0],)
        out = self.act(name, shape)
        wk = self.weights(name + "/weights", w * gain, None, hybrid_ok=True)
        bk = self.bias(name + "/bias", np.asarray(self.biases.get(name, bias * gain), np.float32), x, wk)
        self.b.op("FULLY_CONNECTED", [x, wk, bk], [out],
                  options("FullyConnectedOptions", fusedActivationFunction=1 if relu else 0,
                          keepNumDims=len(shape) > 2))
        return out

    def same_quant(self, name: str, shape, x: int) -> int:
        """An activation quantized as ``x`` (what AVERAGE_POOL_2D and RESHAPE require in int8)."""
        return self.act(name, shape, self.quant.get(x))

    def average_pool(self, name: str, x: int) -> int:
        n, h, w, c = self.shapes[x]
        out = self.same_quant(name, (n, 1, 1, c), x)
        self.b.op("AVERAGE_POOL_2D", [x], [out], options("Pool2DOptions", padding=1, strideW=1, strideH=1,
                                                         filterWidth=w, filterHeight=h))
        return out

    def mean(self, name: str, x: int) -> int:
        n, _, _, c = self.shapes[x]
        axes = self.b.tensor(name + "/axes", (2,), "int32", np.array([1, 2], np.int32))
        out = self.act(name, (n, c))
        self.b.op("MEAN", [x, axes], [out], options("ReducerOptions", keepDims=False))
        return out

    def reshape(self, name: str, x: int, shape) -> int:
        new = self.b.tensor(name + "/shape", (len(shape),), "int32", np.array(shape, np.int32))
        out = self.same_quant(name, shape, x)
        self.b.op("RESHAPE", [x, new], [out], options("ReshapeOptions", newShape=list(shape)))
        return out

    def add(self, name: str, a: int, b: int) -> int:
        out = self.act(name, self.shapes[a])
        self.b.op("ADD", [a, b], [out], options("AddOptions", fusedActivationFunction=0))
        return out

    def softmax(self, name: str, x: int) -> int:
        out = self.act(name, self.shapes[x], (1 / 256, -128) if self.precision == "int8" else None)
        self.b.op("SOFTMAX", [x], [out], options("SoftmaxOptions", beta=1.0))
        return out

    def lstm(self, name: str, x: int, units: int, rng: np.random.Generator) -> int:
        """UNIDIRECTIONAL_SEQUENCE_LSTM (batch-major, TANH, cell clip 10, no peephole, projection
        or layer norm) with Glorot-uniform input and orthogonal recurrent weights, forget bias 1,
        as Keras initializes them; zero initial states (variable tensors)."""
        if self.precision == "int8":
            raise ValueError("integer LSTMs are not written (the importer refuses them)")
        n, t, features = self.shapes[x]
        limit = np.sqrt(6.0 / (features + units))
        ins = [x]
        for gate in ("input", "forget", "cell", "output"):
            w = rng.uniform(-limit, limit, (units, features)).astype(np.float32)
            ins.append(self.weights(f"{name}/{gate}_w", w, None, hybrid_ok=True))
        for gate in ("input", "forget", "cell", "output"):
            q, _ = np.linalg.qr(rng.standard_normal((units, units)))
            ins.append(self.weights(f"{name}/{gate}_r", q.astype(np.float32), None, hybrid_ok=True))
        ins += [-1, -1, -1]
        for gate in ("input", "forget", "cell", "output"):
            b = np.full(units, 1.0 if gate == "forget" else 0.0, np.float32)
            ins.append(self.b.tensor(f"{name}/{gate}_b", (units,), "float32", b))
        ins += [-1, -1]
        ins.append(self.b.tensor(f"{name}/h", (n, units), variable=True))
        ins.append(self.b.tensor(f"{name}/c", (n, units), variable=True))
        ins += [-1, -1, -1, -1]
        out = self.act(name, (n, t, units))
        self.b.op("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, [out],
                  options("UnidirectionalSequenceLSTMOptions", fusedActivationFunction=4, cellClip=10.0,
                          projClip=0.0, timeMajor=False))
        return out

    def finish(self, inputs, outputs) -> bytes:
        return self.b.finish(list(inputs), list(outputs))
