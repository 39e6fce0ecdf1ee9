"""Benchmark of the reference's heavy operations and of a whole MobileNet v2 (224x224).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python -m nnts.mlts.bench_ops [--quick]

Prints, for CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED at MobileNet v2 layer shapes (float32
and quant8), the time per call through the operation's ``execute`` and the achieved GFLOP/s
(2 flops per multiply-add), next to numpy's float32 matmul GFLOP/s on this machine; then the time
per inference of a MobileNet v2 built with the NDK-style :class:`nnapi_ref.Model` builder, run
through Compilation/Execution, with random weights. Not a test: figures vary with the machine.
Real models against TensorFlow Lite, side by side: ``nnts bench``.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from nnapi_ref import ops  # noqa: E402
from nnapi_ref import Compilation, Execution, Model, OperandType  # noqa: E402
from nnapi_ref.ops.base import Arg, Call  # noqa: E402
from nnapi_ref.types import OperandCode as T, OperationCode as Op  # noqa: E402

RNG = np.random.default_rng(0)
# MobileNet v2 bottlenecks: (expansion t, output channels c, repeats n, first stride s).
BLOCKS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def run_times(fn, repeat: int, min_time: float = 0.2) -> list[float]:
    """Wall times of ``fn`` in seconds: at least ``repeat`` runs and ``min_time`` in all, after
    one untimed warm-up run."""
    fn()
    times: list[float] = []
    while len(times) < repeat or sum(times) < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 50 * repeat:
            break
    return times


def best_time(fn, repeat: int, min_time: float = 0.2) -> float:
    """Best wall time of ``fn`` in seconds (see :func:`run_times`)."""
    return min(run_times(fn, repeat, min_time))


def matmul_gflops() -> float:
    a = RNG.standard_normal((3136, 384), np.float32)
    b = RNG.standard_normal((384, 96), np.float32)
    t = best_time(lambda: a @ b, 5)
    return 2 * 3136 * 384 * 96 / t / 1e9


def _arg(type_, value=None, scale=0.0, zp=0, shape=None, cq=None):
    if value is not None:
        value = np.asarray(value)
        shape = value.shape
    return Arg(type_, shape, scale, zp, cq, value)


def _scalar(type_, v):
    return _arg(type_, np.asarray(v, {T.INT32: np.int32, T.BOOL: np.bool_}[type_]))


def prepared_call(ins, out) -> Call:
    """A call whose weights and scalars are constants, with the per-operation cache the executor
    gives it: weights are prepared on the first call (not timed) and reused, as in a compiled model."""
    return Call(ins, [out], constant_inputs=frozenset(range(1, len(ins))), cache={})


def conv_call(kind, h, cin, cout, k, stride, quant, depthwise=False):
    pad = 1  # SAME
    x_t = T.TENSOR_QUANT8_ASYMM if quant else T.TENSOR_FLOAT32
    b_t = T.TENSOR_INT32 if quant else T.TENSOR_FLOAT32
    if quant:
        x = RNG.integers(0, 256, (1, h, h, cin), dtype=np.uint8)
        w = RNG.integers(0, 256, (1, k, k, cout) if depthwise else (cout, k, k, cin), dtype=np.uint8)
        b = RNG.integers(-1000, 1000, cout, dtype=np.int32)
        ins = [_arg(x_t, x, 0.02, 128), _arg(x_t, w, 0.01, 120), _arg(b_t, b, np.float32(0.02) * np.float32(0.01))]
    else:
        x = RNG.standard_normal((1, h, h, cin), dtype=np.float32)
        w = RNG.standard_normal((1, k, k, cout) if depthwise else (cout, k, k, cin), dtype=np.float32)
        ins = [_arg(x_t, x), _arg(x_t, w), _arg(b_t, RNG.standard_normal(cout, dtype=np.float32))]
    ins += [_scalar(T.INT32, pad), _scalar(T.INT32, stride), _scalar(T.INT32, stride)]
    if depthwise:
        ins.append(_scalar(T.INT32, cout // cin))
    ins.append(_scalar(T.INT32, 3))
    oh = (h + stride - 1) // stride
    out = _arg(x_t, None, 0.05 if quant else 0.0, 100 if quant else 0, (1, oh, oh, cout))
    flops = 2 * oh * oh * cout * k * k * (1 if depthwise else cin)
    return prepared_call(ins, out), flops


def fc_call(batch, cin, cout, quant):
    if quant:
        ins = [_arg(T.TENSOR_QUANT8_ASYMM, RNG.integers(0, 256, (batch, cin), dtype=np.uint8), 0.02, 128),
               _arg(T.TENSOR_QUANT8_ASYMM, RNG.integers(0, 256, (cout, cin), dtype=np.uint8), 0.01, 120),
               _arg(T.TENSOR_INT32, RNG.integers(-1000, 1000, cout, dtype=np.int32), np.float32(0.02) * np.float32(0.01))]
        out = _arg(T.TENSOR_QUANT8_ASYMM, None, 0.05, 100, (batch, cout))
    else:
        ins = [_arg(T.TENSOR_FLOAT32, RNG.standard_normal((batch, cin), dtype=np.float32)),
               _arg(T.TENSOR_FLOAT32, RNG.standard_normal((cout, cin), dtype=np.float32)),
               _arg(T.TENSOR_FLOAT32, RNG.standard_normal(cout, dtype=np.float32))]
        out = _arg(T.TENSOR_FLOAT32, None, shape=(batch, cout))
    ins.append(_scalar(T.INT32, 0))
    return prepared_call(ins, out), 2 * batch * cin * cout


def bench_layers(peak: float, quick: bool) -> None:
    registry = ops.load_all()
    layers = [
        ("CONV_2D 3x3/2 224x224x3->32", Op.CONV_2D, dict(h=224, cin=3, cout=32, k=3, stride=2)),
        ("CONV_2D 1x1 112x112x16->96", Op.CONV_2D, dict(h=112, cin=16, cout=96, k=1, stride=1)),
        ("CONV_2D 1x1 56x56x144->24", Op.CONV_2D, dict(h=56, cin=144, cout=24, k=1, stride=1)),
        ("CONV_2D 1x1 28x28x32->192", Op.CONV_2D, dict(h=28, cin=32, cout=192, k=1, stride=1)),
        ("CONV_2D 1x1 7x7x320->1280", Op.CONV_2D, dict(h=7, cin=320, cout=1280, k=1, stride=1)),
        ("CONV_2D 3x3 28x28x64->64", Op.CONV_2D, dict(h=28, cin=64, cout=64, k=3, stride=1)),
        ("DEPTHWISE 3x3 112x112x32", Op.DEPTHWISE_CONV_2D, dict(h=112, cin=32, cout=32, k=3, stride=1)),
        ("DEPTHWISE 3x3/2 112x112x96", Op.DEPTHWISE_CONV_2D, dict(h=112, cin=96, cout=96, k=3, stride=2)),
        ("DEPTHWISE 3x3 56x56x144", Op.DEPTHWISE_CONV_2D, dict(h=56, cin=144, cout=144, k=3, stride=1)),
        ("DEPTHWISE 3x3 14x14x384", Op.DEPTHWISE_CONV_2D, dict(h=14, cin=384, cout=384, k=3, stride=1)),
        ("DEPTHWISE 3x3 7x7x960", Op.DEPTHWISE_CONV_2D, dict(h=7, cin=960, cout=960, k=3, stride=1)),
        ("FULLY_CONNECTED 1x1280->1000", Op.FULLY_CONNECTED, None),
    ]
    print(f"{'layer':34s} {'type':6s} {'ms/call':>9s} {'GFLOP/s':>8s}")
    for label, code, kw in layers:
        for quant in (False, True):
            if code == Op.FULLY_CONNECTED:
                call, flops = fc_call(1, 1280, 1000, quant)
            else:
                call, flops = conv_call(code, quant=quant, depthwise=code == Op.DEPTHWISE_CONV_2D, **kw)
            impl = registry[code]
            t = best_time(lambda: impl.execute(call), 2 if quick else 5)
            print(f"{label:34s} {'quant8' if quant else 'fp32':6s} {t * 1e3:9.3f} {flops / t / 1e9:8.2f}")
    print(f"(numpy float32 matmul 3136x384 @ 384x96: {peak:.1f} GFLOP/s)")


class GraphBuilder:
    """MobileNet v2 through the NDK-style Model builder, float32 or quant8 (random weights)."""

    RELU6 = (6 / 255, 0)      # quantization of relu6 outputs
    LINEAR = (0.1, 128)       # quantization of linear (projection, residual) outputs

    def __init__(self, quant: bool):
        self.quant = quant
        self.m = Model()
        self.t = T.TENSOR_QUANT8_ASYMM if quant else T.TENSOR_FLOAT32
        self.quant_of: dict[int, tuple[float, int]] = {}
        self.flops = 0

    def const(self, type_, value, scale=0.0, zp=0):
        value = np.asarray(value)
        k = self.m.add_operand(OperandType(type_, value.shape, scale, zp))
        self.m.set_operand_value(k, value)
        return k

    def scalar(self, v):
        k = self.m.add_operand(OperandType(T.INT32))
        self.m.set_operand_value(k, np.int32(v))
        return k

    def tensor(self, shape, quant):
        scale, zp = quant if self.quant else (0.0, 0)
        k = self.m.add_operand(OperandType(self.t, shape, scale, zp))
        self.quant_of[k] = quant
        return k

    def weights(self, shape, fan_in):
        if self.quant:
            return self.const(self.t, RNG.integers(100, 156, shape, dtype=np.uint8), 0.02, 128), 0.02
        return self.const(self.t, (RNG.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)), 0.0

    def bias(self, x, n, w_scale):
        if self.quant:
            x_scale = self.quant_of[x][0]
            return self.const(T.TENSOR_INT32, RNG.integers(-200, 200, n, dtype=np.int32),
                              float(np.float32(x_scale) * np.float32(w_scale)))
        return self.const(T.TENSOR_FLOAT32, np.zeros(n, np.float32))

    def conv(self, x, shape, cout, k, stride, relu6, depthwise=False):
        n, h, w, cin = shape
        oh = (h + stride - 1) // stride
        if depthwise:
            wk, ws = self.weights((1, k, k, cin), k * k)
            cout = cin
            self.flops += 2 * oh * oh * cin * k * k
        else:
            wk, ws = self.weights((cout, k, k, cin), k * k * cin)
            self.flops += 2 * oh * oh * cout * k * k * cin
        args = [x, wk, self.bias(x, cout, ws), self.scalar(1), self.scalar(stride), self.scalar(stride)]
        if depthwise:
            args.append(self.scalar(1))
        args.append(self.scalar(3 if relu6 else 0))
        out_shape = (n, oh, oh, cout)
        y = self.tensor(out_shape, self.RELU6 if relu6 else self.LINEAR)
        self.m.add_operation(Op.DEPTHWISE_CONV_2D if depthwise else Op.CONV_2D, args, [y])
        return y, out_shape

    def build(self):
        m = self.m
        shape = (1, 224, 224, 3)
        x_in = self.tensor(shape, (1 / 128, 128))
        x, shape = self.conv(x_in, shape, 32, 3, 2, True)
        cin = 32
        for t, c, reps, s in BLOCKS:
            for r in range(reps):
                stride = s if r == 0 else 1
                y, yshape = x, shape
                if t != 1:
                    y, yshape = self.conv(y, yshape, cin * t, 1, 1, True)
                y, yshape = self.conv(y, yshape, 0, 3, stride, True, depthwise=True)
                y, yshape = self.conv(y, yshape, c, 1, 1, False)
                if stride == 1 and cin == c:
                    z = self.tensor(yshape, self.LINEAR)
                    m.add_operation(Op.ADD, [x, y, self.scalar(0)], [z])
                    y = z
                x, shape, cin = y, yshape, c
        x, shape = self.conv(x, shape, 1280, 1, 1, True)
        pooled = self.tensor((1, 1, 1, 1280), self.RELU6)
        m.add_operation(Op.AVERAGE_POOL_2D, [x, self.scalar(2), self.scalar(1), self.scalar(1), self.scalar(7),
                                             self.scalar(7), self.scalar(0)], [pooled])
        wk, ws = self.weights((1000, 1280), 1280)
        self.flops += 2 * 1280 * 1000
        logits = self.tensor((1, 1000), self.LINEAR)
        m.add_operation(Op.FULLY_CONNECTED, [pooled, wk, self.bias(pooled, 1000, ws), self.scalar(0)], [logits])
        m.identify_inputs_and_outputs([x_in], [logits])
        m.finish()
        return m


def bench_graph(quant: bool, quick: bool) -> None:
    builder = GraphBuilder(quant)
    model = builder.build()
    compilation = Compilation(model)
    compilation.finish()
    if quant:
        image = RNG.integers(0, 256, (1, 224, 224, 3), dtype=np.uint8)
        result = np.zeros(1000, np.uint8)
    else:
        image = RNG.standard_normal((1, 224, 224, 3), dtype=np.float32)
        result = np.zeros(1000, np.float32)

    def infer():
        execution = Execution(compilation)
        execution.set_input(0, image)
        execution.set_output(0, result)
        execution.compute()

    times = run_times(infer, 2 if quick else 5, 1.0)
    t, median = min(times), statistics.median(times)
    print(f"MobileNet v2 224x224 {'quant8' if quant else 'float32':7s}: {t * 1e3:7.1f} ms/inference best, "
          f"{median * 1e3:.1f} median of {len(times)} ({builder.flops / 1e9:.2f} GFLOP, {builder.flops / t / 1e9:.1f} "
          f"GFLOP/s at best)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--no-layers", action="store_true", help="only the whole-graph figures")
    args = parser.parse_args(argv)
    peak = matmul_gflops()
    if not args.no_layers:
        bench_layers(peak, args.quick)
    for quant in (False, True):
        bench_graph(quant, args.quick)
    print(f"numpy float32 matmul: {peak:.1f} GFLOP/s (single thread: OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS')}, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')})")


if __name__ == "__main__":
    main()
