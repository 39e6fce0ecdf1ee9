"""The converter's operators of shapes, slicing and layout (split, slice, gather, space/depth/batch,
tile, pack, top-k, resize, fill, shape folding, transpose convolution, batch matmul, lookups)."""
from __future__ import annotations

import struct

import numpy as np

from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.formats.tflite.flatbuffer import NUMPY_TYPES, PADDING


class ShapeOperators:
    """Methods of the converter (:class:`nnts.formats.tflite.importer._Converter`), which mixes these classes in."""

    def op_MIRROR_PAD(self, op):
        pads = self.const_ints(op.inputs[1], "the paddings")
        mode = self.opt("mode")   # TFLite MirrorPadMode and NNAPI's mode: REFLECT 0, SYMMETRIC 1
        self.emit(Op.MIRROR_PAD, [self.tensor(op.inputs[0]), self.i32_tensor(np.reshape(pads, (-1, 2))),
                                  self.i32(mode)], [self.define(op.outputs[0])])

    def op_SPLIT(self, op):
        axis = self.const_int(op.inputs[0], "the axis")
        xi = self.tensor(op.inputs[1])
        self.emit(Op.SPLIT, [xi, self.i32(axis), self.i32(len(op.outputs))], [self.define(k) for k in op.outputs])

    def op_SPLIT_V(self, op):
        """NNAPI's SPLIT makes equal parts: one SLICE per output, its size from the output's shape."""
        xi = self.tensor(op.inputs[0])
        shape = self.type_of(xi).dimensions
        axis = self.const_int(op.inputs[2], "the axis") % len(shape)
        begin = 0
        for k in op.outputs:
            size = self.t(k).shape[axis]
            starts = [begin if d == axis else 0 for d in range(len(shape))]
            sizes = [size if d == axis else -1 for d in range(len(shape))]
            self.emit(Op.SLICE, [xi, self.i32_tensor(starts), self.i32_tensor(sizes)], [self.define(k)])
            begin += size
        if begin != shape[axis]:
            self.fail(f"outputs hold {begin} of the {shape[axis]} elements along axis {axis}")

    def op_STRIDED_SLICE(self, op):
        for name in ("ellipsisMask", "newAxisMask"):
            if self.opt(name, 0):
                self.fail(f"{name} {self.opt(name, 0)} is not supported by NNAPI's STRIDED_SLICE")
        if self.opt("offset", False):
            self.fail("offset=true (begin/end relative to begin) is not supported by NNAPI's STRIDED_SLICE")
        xi = self.tensor(op.inputs[0])
        masks = [self.opt(name, 0) for name in ("beginMask", "endMask", "shrinkAxisMask")]
        args = [xi] + [self.int_operand(k) for k in op.inputs[1:4]]
        if masks[2]:
            # TFLite takes element begin[i] of a shrunk axis whatever end[i] and the masks say; NNAPI
            # needs the slice [begin, begin + 1) spelled out.
            shape = self.type_of(xi).dimensions
            begin = self.const_ints(op.inputs[1], "begin (with shrink_axis_mask)")
            end = self.const_ints(op.inputs[2], "end (with shrink_axis_mask)")
            for i in range(len(begin)):
                if masks[2] >> i & 1:
                    begin[i] %= shape[i]
                    end[i] = begin[i] + 1
                    masks[0] &= ~(1 << i)
                    masks[1] &= ~(1 << i)
            args[1:3] = [self.i32_tensor(begin), self.i32_tensor(end)]
        args += [self.i32(m) for m in masks]
        self.emit(Op.STRIDED_SLICE, args, [self.define(op.outputs[0])])

    def op_SLICE(self, op):
        args = [self.tensor(op.inputs[0])] + [self.int_operand(k) for k in op.inputs[1:3]]
        self.emit(Op.SLICE, args, [self.define(op.outputs[0])])

    def op_EXPAND_DIMS(self, op):
        axis = self.const_int(op.inputs[1], "the axis")
        self.emit(Op.EXPAND_DIMS, [self.tensor(op.inputs[0]), self.i32(axis)], [self.define(op.outputs[0])])

    def op_GATHER(self, op):
        if self.opt("batchDims", 0):
            self.fail(f"batch_dims {self.opt('batchDims', 0)} is not supported by NNAPI's GATHER")
        xi = self.tensor(op.inputs[0])
        axis = self.opt("axis", 0) % len(self.type_of(xi).dimensions)
        self.emit(Op.GATHER, [xi, self.i32(axis), self.int_operand(op.inputs[1])], [self.define(op.outputs[0])])

    def arg(self, op, code: Op):
        if self.t(op.outputs[0]).type_name != "INT32":
            self.fail(f"output type {self.t(op.outputs[0]).type_name}: NNAPI's {code.name} outputs INT32 only")
        axis = self.const_int(op.inputs[1], "the axis")
        self.emit(code, [self.tensor(op.inputs[0]), self.i32(axis)], [self.define(op.outputs[0])])

    def op_ARG_MAX(self, op):
        self.arg(op, Op.ARGMAX)

    def op_ARG_MIN(self, op):
        self.arg(op, Op.ARGMIN)

    def op_DEPTH_TO_SPACE(self, op):
        self.emit(Op.DEPTH_TO_SPACE, [self.tensor(op.inputs[0]), self.i32(self.opt("blockSize"))],
                  [self.define(op.outputs[0])])

    def op_SPACE_TO_DEPTH(self, op):
        self.emit(Op.SPACE_TO_DEPTH, [self.tensor(op.inputs[0]), self.i32(self.opt("blockSize"))],
                  [self.define(op.outputs[0])])

    def op_BATCH_TO_SPACE_ND(self, op):
        crops = self.const_ints(op.inputs[2], "the crops")
        if any(crops):
            self.fail(f"crops {crops}: NNAPI's BATCH_TO_SPACE_ND does not crop (TFLite's NNAPI delegate "
                      "refuses non-zero crops too)")
        args = [self.tensor(op.inputs[0]), self.i32_tensor(self.const_ints(op.inputs[1], "the block shape"))]
        self.emit(Op.BATCH_TO_SPACE_ND, args, [self.define(op.outputs[0])])

    def op_SPACE_TO_BATCH_ND(self, op):
        pads = np.reshape(self.const_ints(op.inputs[2], "the paddings"), (-1, 2))
        args = [self.tensor(op.inputs[0]), self.i32_tensor(self.const_ints(op.inputs[1], "the block shape")),
                self.i32_tensor(pads)]
        self.emit(Op.SPACE_TO_BATCH_ND, args, [self.define(op.outputs[0])])

    def op_TILE(self, op):
        args = [self.tensor(op.inputs[0]), self.i32_tensor(self.const_ints(op.inputs[1], "the multiples"))]
        self.emit(Op.TILE, args, [self.define(op.outputs[0])])

    def op_PACK(self, op):
        axis = self.opt("axis", 0)
        self.emit(Op.PACK, [self.i32(axis)] + [self.tensor(k) for k in op.inputs], [self.define(op.outputs[0])])

    def op_UNPACK(self, op):
        """NNAPI has no UNPACK: SPLIT along the axis, then a RESHAPE of each part that drops it."""
        xi = self.tensor(op.inputs[0])
        xt = self.type_of(xi)
        axis = self.opt("axis", 0) % len(xt.dimensions)
        part = tuple(1 if d == axis else s for d, s in enumerate(xt.dimensions))
        parts = [self.temp(xt, part) for _ in op.outputs]
        self.emit(Op.SPLIT, [xi, self.i32(axis), self.i32(len(op.outputs))], parts)
        for p, k in zip(parts, op.outputs):
            self.reshape_to(p, self.t(k).shape, self.define(k))

    def op_TOPK_V2(self, op):
        k = self.const_int(op.inputs[1], "k")
        self.emit(Op.TOPK_V2, [self.tensor(op.inputs[0]), self.i32(k)], [self.define(j) for j in op.outputs])

    def resize(self, op, code: Op):
        h, w = self.const_ints(op.inputs[1], "the size")
        align, half = (self.boolean(bool(self.opt(name, False))) for name in ("alignCorners", "halfPixelCenters"))
        args = [self.tensor(op.inputs[0]), self.i32(w), self.i32(h), self.boolean(False), align, half]
        self.emit(code, args, [self.define(op.outputs[0])])

    def op_RESIZE_BILINEAR(self, op):
        self.resize(op, Op.RESIZE_BILINEAR)

    def op_RESIZE_NEAREST_NEIGHBOR(self, op):
        self.resize(op, Op.RESIZE_NEAREST_NEIGHBOR)

    def op_FILL(self, op):
        dims = self.const_ints(op.inputs[0], "the dimensions")
        value = np.asarray(self.value_of(op.inputs[1], "the value")).reshape(-1)[0]
        ot = self.out_type(op.outputs[0])
        scalar = {T.TENSOR_FLOAT32: self.f32, T.TENSOR_INT32: self.i32}.get(ot.type)
        if scalar is None:
            self.fail(f"{ot.type.name} output: NNAPI's FILL makes FLOAT32 or INT32 here")
        self.emit(Op.FILL, [self.i32_tensor(dims), scalar(value)], [self.define(op.outputs[0])])

    def fold(self, k: int, value) -> None:
        """Output tensor ``k`` is a constant known at import (static shapes): no operation."""
        t = self.t(k)
        t.data = np.asarray(value, NUMPY_TYPES.get(t.type_name, np.int32)).reshape(t.shape)
        self.folded.add(k)

    def op_SHAPE(self, op):
        self.fold(op.outputs[0], self.type_of(self.tensor(op.inputs[0])).dimensions)

    def op_RANK(self, op):
        self.fold(op.outputs[0], len(self.type_of(self.tensor(op.inputs[0])).dimensions))

    def op_DENSIFY(self, op):
        """TFLite stores sparse weights as a constant that DENSIFY expands; it was densified on read."""
        self.fold(op.outputs[0], self.value_of(op.inputs[0], "the sparse tensor"))

    def op_TRANSPOSE_CONV(self, op):
        out_shape, w, x = op.inputs[:3]
        b = op.inputs[3] if len(op.inputs) > 3 else -1
        xi = self.tensor(x)
        xt = self.type_of(xi)
        padding = self.opt("padding")
        if padding not in PADDING:
            self.fail(f"padding {padding} is neither SAME nor VALID")
        wi = self.filter_operand(w, xt, 0)
        c_out = self.type_of(wi).dimensions[0]
        bi = self.bias_operand(b, xt, wi, c_out)
        args = [xi, wi, bi, self.i32_tensor(self.const_ints(out_shape, "the output shape")), self.i32(PADDING[padding]),
                self.i32(self.opt("strideW")), self.i32(self.opt("strideH")), self.i32(self.fuse()),
                self.boolean(False)]
        self.emit(Op.TRANSPOSE_CONV_2D, args, [self.define(op.outputs[0])])

    def op_LSH_PROJECTION(self, op):
        """TFLite's SPARSE projection (1) is NNAPI's type 3 (its type 1 is the deprecated one that
        hashes differently), without weights, as TFLite's NNAPI delegate maps it; DENSE is 2 in both."""
        kind = self.opt("type")
        if kind not in (1, 2):
            self.fail(f"projection type {kind} is neither SPARSE (1) nor DENSE (2)")
        weight = op.inputs[2] if len(op.inputs) > 2 else -1
        if kind == 1 and weight >= 0:
            self.fail("a SPARSE projection with weights is not supported by NNAPI")
        args = [self.tensor(op.inputs[0]), self.tensor(op.inputs[1]),
                self.tensor(weight) if weight >= 0 else self.omitted(), self.i32(3 if kind == 1 else 2)]
        self.emit(Op.LSH_PROJECTION, args, [self.define(op.outputs[0])])

    def custom_transpose_conv_bias(self, op):
        """MediaPipe's Convolution2DTransposeBias (segmentation models): TRANSPOSE_CONV with a bias
        input, inputs (input, filter, bias), options a raw TfLiteTransposeConvParams (int32
        padding: 1 SAME, 2 VALID, NNAPI's codes too; stride width; stride height)."""
        if len(op.custom_options) < 12 or len(op.inputs) != 3:
            self.fail(f"expects 3 inputs and 12 bytes of options, got {len(op.inputs)} and {len(op.custom_options)}")
        padding, stride_w, stride_h = struct.unpack_from("<3i", op.custom_options)
        if padding not in (1, 2):
            self.fail(f"padding {padding} is neither SAME (1) nor VALID (2)")
        x, w, b = op.inputs
        xi = self.tensor(x)
        xt = self.type_of(xi)
        wi = self.filter_operand(w, xt, 0)
        bi = self.bias_operand(b, xt, wi, self.type_of(wi).dimensions[0])
        args = [xi, wi, bi, self.i32_tensor(list(self.t(op.outputs[0]).shape)), self.i32(padding),
                self.i32(stride_w), self.i32(stride_h), self.i32(0), self.boolean(False)]
        self.emit(Op.TRANSPOSE_CONV_2D, args, [self.define(op.outputs[0])])

    def op_BATCH_MATMUL(self, op):
        a, b = self.tensor(op.inputs[0]), self.tensor(op.inputs[1])
        args = [a, b, self.boolean(bool(self.opt("adjX", False))), self.boolean(bool(self.opt("adjY", False)))]
        self.emit(Op.BATCH_MATMUL, args, [self.define(op.outputs[0])])

    def op_EMBEDDING_LOOKUP(self, op):
        self.emit(Op.EMBEDDING_LOOKUP, [self.int_operand(op.inputs[0]), self.tensor(op.inputs[1])],
                  [self.define(op.outputs[0])])
