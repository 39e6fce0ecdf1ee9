"""The converter's activations and elementwise operators, and the helpers the operators share
(constant operands, one-to-one mappings, reductions); see :mod:`.tflite` for the mapping."""
from __future__ import annotations

import numpy as np

from nnapi_ref import OperandType
from nnapi_ref.types import DTYPES, OperandCode as T, OperationCode as Op
from nnts.formats.tflite.flatbuffer import QUANT8


class ElementwiseOperators:
    """Methods of the converter (:class:`nnts.formats.tflite.importer._Converter`), which mixes these classes in."""

    def const_ints(self, k: int, what: str) -> list[int]:
        """A constant integer input tensor as a list (int64 constants must fit in int32)."""
        values = [int(v) for v in np.asarray(self.value_of(k, what)).reshape(-1)]
        if any(not -2 ** 31 <= v < 2 ** 31 for v in values):
            self.fail(f"{what} {values} do not fit in int32")
        return values

    def const_int(self, k: int, what: str) -> int:
        values = self.const_ints(k, what)
        if len(values) != 1:
            self.fail(f"{what} must hold one value, got {values}")
        return values[0]

    def int_operand(self, k: int) -> int:
        """An integer tensor input: a TENSOR_INT32 constant (int64 constants converted), or the
        operand computed for it."""
        if k not in self.operand_of and k >= 0 and self.t(k).data is not None:
            return self.i32_tensor(self.const_ints(k, f"tensor {k}"))
        return self.tensor(k)

    def same_shape(self, a: int, b: int, what: str) -> None:
        sa, sb = self.type_of(a).dimensions, self.type_of(b).dimensions
        if tuple(sa) != tuple(sb):
            self.fail(f"{what}: shapes {list(sa)} and {list(sb)} differ (NNAPI does not broadcast them)")

    def plain(self, op, code: Op):
        """A TFLite operator that is NNAPI operation ``code`` of the same inputs, no options. (NNAPI's
        CAST ignores quantization, a QUANT8 tensor is its raw values, as TFLite's does.)"""
        ins = [self.tensor(k) for k in op.inputs]
        xt, out_k = self.type_of(ins[0]), op.outputs[0]
        ot = self.out_type(out_k)
        if code in (Op.RELU, Op.RELU1, Op.RELU6) and xt.type in QUANT8 and (np.float32(ot.scale), ot.zero_point) != (
                np.float32(xt.scale), xt.zero_point):
            # NNAPI's RELUs keep the input's quantization; TFLite's may rescale: RELU, then requantize.
            tmp = self.temp(xt, xt.dimensions)
            self.emit(code, ins, [tmp])
            self.requantize(tmp, out_k)
            return
        self.emit(code, ins, [self.define(k) for k in op.outputs])

    def reduce(self, op, code: Op):
        """SUM, REDUCE_PROD/MAX/MIN/ANY: NNAPI's REDUCE_* take the axes and a BOOL keep_dims."""
        xi = self.tensor(op.inputs[0])
        if not self.t(op.outputs[0]).shape:
            self.fail("reduces to a scalar, which NNAPI cannot output")
        axes = self.const_ints(op.inputs[1], "the axes")
        self.emit(code, [xi, self.i32_tensor(axes), self.boolean(bool(self.opt("keepDims", False)))],
                  [self.define(op.outputs[0])])

    # -- activations and elementwise operators -----------------------------------------------------

    def op_ELU(self, op):
        self.emit(Op.ELU, [self.tensor(op.inputs[0]), self.f32(1.0)], [self.define(op.outputs[0])])

    def op_LEAKY_RELU(self, op):
        """NNAPI has no LEAKY_RELU: PRELU with a one-element alpha (as TFLite's NNAPI delegate maps
        it); a quantized alpha is exact: scale |alpha|, value 1 (zero point 0) or 0 (zero point 1)."""
        xi = self.tensor(op.inputs[0])
        xt = self.type_of(xi)
        alpha = float(np.float32(self.opt("alpha", 0.0)))
        if xt.type in QUANT8:
            if alpha == 0:
                self.fail("alpha 0 cannot be a quantized PRELU alpha (scale 0)")
            q, zp = (1, 0) if alpha > 0 else (0, 1)
            dtype = np.uint8 if xt.type == T.TENSOR_QUANT8_ASYMM else np.int8
            ai = self.const(OperandType(xt.type, (1,), abs(alpha), zp), np.array([q], dtype))
        else:
            ai = self.const(OperandType(xt.type, (1,)), np.array([alpha], DTYPES[xt.type]))
        self.emit(Op.PRELU, [xi, ai], [self.define(op.outputs[0])])

    def op_SQUARED_DIFFERENCE(self, op):
        xi, yi = self.tensor(op.inputs[0]), self.tensor(op.inputs[1])
        ot = self.out_type(op.outputs[0])
        if ot.type != T.TENSOR_FLOAT32:
            self.fail(f"{ot.type.name} output: only float32 is lowered (SUB -> MUL)")
        d = self.temp(ot, ot.dimensions)
        self.emit(Op.SUB, [xi, yi, self.i32(0)], [d])
        self.emit(Op.MUL, [d, d, self.i32(0)], [self.define(op.outputs[0])])

    def op_GELU(self, op):
        """GELU with approximate=true, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), as MULs, ADDs and a
        TANH in float32; the exact form needs erf, which NNAPI lacks."""
        xi = self.tensor(op.inputs[0])
        xt = self.type_of(xi)
        if xt.type != T.TENSOR_FLOAT32:
            self.fail(f"{xt.type.name} input: only float32 is lowered")
        if not self.opt("approximate", False):
            self.fail("approximate=false (erf-based GELU): NNAPI has no erf")
        zero = self.i32(0)

        def emit(code, ins):
            out = self.temp(xt, xt.dimensions)
            self.emit(code, ins, [out])
            return out

        def scalar(v):
            return self.const(OperandType(T.TENSOR_FLOAT32, (1,)), np.array([v], np.float32), key=("gelu", v))

        cube = emit(Op.MUL, [emit(Op.MUL, [xi, xi, zero]), xi, zero])
        inner = emit(Op.ADD, [xi, emit(Op.MUL, [cube, scalar(0.044715), zero]), zero])
        t = emit(Op.TANH, [emit(Op.MUL, [inner, scalar(float(np.sqrt(2 / np.pi))), zero])])
        half = emit(Op.MUL, [xi, scalar(0.5), zero])
        self.emit(Op.MUL, [half, emit(Op.ADD, [t, scalar(1.0), zero]), zero], [self.define(op.outputs[0])])

    def op_SQUARE(self, op):
        xi = self.tensor(op.inputs[0])
        if self.type_of(xi).type != T.TENSOR_FLOAT32:
            self.fail(f"{self.type_of(xi).type.name} input: only float32 is lowered (MUL)")
        self.emit(Op.MUL, [xi, xi, self.i32(0)], [self.define(op.outputs[0])])

    def op_ADD_N(self, op):
        """A chain of ADDs (exact in float32 up to the summation order, which TFLite's kernel shares)."""
        ins = [self.tensor(k) for k in op.inputs]
        ot = self.out_type(op.outputs[0])
        if ot.type != T.TENSOR_FLOAT32:
            self.fail(f"{ot.type.name} output: only float32 is lowered (a chain of ADDs)")
        acc = ins[0]
        for k, x in enumerate(ins[1:], 2):
            out = self.define(op.outputs[0]) if k == len(ins) else self.temp(ot, ot.dimensions)
            self.emit(Op.ADD, [acc, x, self.i32(0)], [out])
            acc = out

    def op_CEIL(self, op):
        """NNAPI has no CEIL: ceil(x) = -floor(-x), exact in float."""
        xi = self.tensor(op.inputs[0])
        xt = self.type_of(xi)
        if xt.type != T.TENSOR_FLOAT32:
            self.fail(f"{xt.type.name} input: only float32 is lowered (NEG -> FLOOR -> NEG)")
        neg, floor = self.temp(xt, xt.dimensions), self.temp(xt, xt.dimensions)
        self.emit(Op.NEG, [xi], [neg])
        self.emit(Op.FLOOR, [neg], [floor])
        self.emit(Op.NEG, [floor], [self.define(op.outputs[0])])

    def op_REVERSE_V2(self, op):
        axes = self.const_ints(op.inputs[1], "the axes")
        if len(axes) != 1:
            self.fail(f"reverses {len(axes)} axes; NNAPI's REVERSE takes one")
        self.emit(Op.REVERSE, [self.tensor(op.inputs[0]), self.i32_tensor(axes)], [self.define(op.outputs[0])])

    def op_ZEROS_LIKE(self, op):
        self.fold(op.outputs[0], np.zeros(self.type_of(self.tensor(op.inputs[0])).dimensions))

    def broadcast(self, xi: int, target, out: int | None = None) -> int:
        """Operand ``xi`` broadcast to shape ``target``: RESHAPE to the target's rank (leading
        ones), then TILE; exact for every type (booleans, which TILE does not take: LOGICAL_OR
        with false). Written to ``out`` when given."""
        xt = self.type_of(xi)
        target = tuple(target)
        shape = (1,) * (len(target) - len(xt.dimensions)) + tuple(xt.dimensions)
        if len(shape) != len(target) or any(s not in (1, t) for s, t in zip(shape, target)):
            self.fail(f"shape {list(xt.dimensions)} does not broadcast to {list(target)}")
        if shape == target and out is None:
            return xi
        if xt.type == T.TENSOR_BOOL8:
            out = self.temp(xt, target) if out is None else out
            false = self.const(OperandType(T.TENSOR_BOOL8, target), np.zeros(target, np.bool_))
            self.emit(Op.LOGICAL_OR, [xi, false], [out])
            return out
        if shape != tuple(xt.dimensions):
            reshaped = self.temp(xt, shape)
            self.reshape_to(xi, shape, reshaped)
            xi = reshaped
        out = self.temp(xt, target) if out is None else out
        self.emit(Op.TILE, [xi, self.i32_tensor([t // s for s, t in zip(shape, target)])], [out])
        return out

    def op_BROADCAST_TO(self, op):
        target = self.const_ints(op.inputs[1], "the shape")
        self.broadcast(self.tensor(op.inputs[0]), target, self.define(op.outputs[0]))

    def op_LOG_SOFTMAX(self, op):
        self.emit(Op.LOG_SOFTMAX, [self.tensor(op.inputs[0]), self.f32(1.0), self.i32(-1)],
                  [self.define(op.outputs[0])])

    def op_L2_POOL_2D(self, op):
        self.pool(op, Op.L2_POOL_2D)

    def op_L2_NORMALIZATION(self, op):
        if self.fuse() != 0:
            self.fail("a fused activation is not supported (TFLite's NNAPI delegate refuses it too)")
        self.emit(Op.L2_NORMALIZATION, [self.tensor(op.inputs[0])], [self.define(op.outputs[0])])

    def op_LOCAL_RESPONSE_NORMALIZATION(self, op):
        args = [self.tensor(op.inputs[0]), self.i32(self.opt("radius")), self.f32(self.opt("bias", 0.0)),
                self.f32(self.opt("alpha", 0.0)), self.f32(self.opt("beta", 0.0))]
        self.emit(Op.LOCAL_RESPONSE_NORMALIZATION, args, [self.define(op.outputs[0])])

    def op_SELECT(self, op):
        cond, a, b = (self.tensor(k) for k in op.inputs[:3])
        self.same_shape(cond, a, "condition and values")
        self.same_shape(a, b, "the two value tensors")
        self.emit(Op.SELECT, [cond, a, b], [self.define(op.outputs[0])])

    def op_SELECT_V2(self, op):
        """SELECT_V2 broadcasts its three inputs; NNAPI's SELECT does not: each is broadcast to
        the output's shape first (RESHAPE, TILE)."""
        shape = list(self.t(op.outputs[0]).shape)
        ins = [self.broadcast(self.tensor(k), shape) for k in op.inputs[:3]]
        self.emit(Op.SELECT, ins, [self.define(op.outputs[0])])
