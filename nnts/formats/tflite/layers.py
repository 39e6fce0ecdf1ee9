"""The converter's operators of network layers: convolutions, FULLY_CONNECTED, pools, MEAN, SOFTMAX,
reshapes, pads, QUANTIZE/DEQUANTIZE, CONCATENATION and TRANSPOSE (see :mod:`.tflite` for the mapping)."""
from __future__ import annotations

import numpy as np

from nnapi_ref import OperandType
from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.formats.tflite.flatbuffer import PADDING, QUANT8, TfOperator, TfTensor, conv_out_size, ints_of


class LayerOperators:
    """Methods of the converter (:class:`nnts.formats.tflite.importer._Converter`), which mixes these classes in."""

    # One method per TFLite builtin, named op_<BUILTIN NAME>; ``op.inputs``/``op.outputs`` are
    # TFLite tensor indices (-1 for an omitted optional input). Option slots follow schema.fbs.

    def type_of(self, idx: int) -> OperandType:
        o = self.m._operands[idx]
        return OperandType(o.type, o.dimensions, o.scale, o.zero_point)

    def dequantized(self, t: TfTensor) -> np.ndarray:
        """A constant int8/uint8 (per-tensor or per-channel) or float16 tensor as float32."""
        data = t.data
        if t.type_name == "FLOAT16":
            return data.astype(np.float32)
        if t.scale is None:
            self.fail(f"tensor {t.index} ({t.name!r}) of type {t.type_name} has no quantization parameters")
        shape = [1] * data.ndim
        if t.per_channel:
            shape[t.quantized_dimension] = -1
        scale = t.scale.astype(np.float32).reshape(shape)
        zp = t.zero_point.astype(np.float32).reshape(shape)
        return ((data.astype(np.float32) - zp) * scale).astype(np.float32)

    def filter_operand(self, k: int, x_type: OperandType, channel_dim: int, shape=None) -> int:
        """The weights of a convolution / FC (``shape``: reshaped) in the type NNAPI wants with an
        input of type ``x_type``."""
        t = self.t(k)
        data = self.value_of(k, "the filter")
        shape = tuple(shape or data.shape)
        data = data.reshape(shape)
        key = ("filter", k, shape, x_type.type)
        if x_type.type == T.TENSOR_FLOAT32:
            if t.type_name == "FLOAT32":
                return self.const(OperandType(T.TENSOR_FLOAT32, shape), data, key=key)
            if t.type_name in ("INT8", "INT4", "UINT8", "FLOAT16"):
                if t.type_name != "FLOAT16" and ("hybrid", k) not in self.const_cache:
                    self.const_cache[("hybrid", k)] = 0
                    self.note(f"hybrid weights (tensor {k}, {t.type_name}) dequantized to float32 "
                              "(NNAPI has no hybrid operation)")
                return self.const(OperandType(T.TENSOR_FLOAT32, shape), self.dequantized(t).reshape(shape), key=key)
        elif x_type.type in QUANT8 and t.type_name in ("INT8", "INT4", "UINT8"):
            # INT4 weights (unpacked to int8 values on read) are int8 weights that use 16 levels.
            if t.per_channel:
                if t.type_name == "UINT8" or np.any(t.zero_point != 0):
                    self.fail(f"per-channel filter tensor {k} must be INT8 or INT4 with zero points 0")
                if t.quantized_dimension != channel_dim:
                    self.fail(f"filter tensor {k} is quantized along dimension {t.quantized_dimension}; "
                              f"NNAPI needs {channel_dim}")
                cq = (tuple(float(s) for s in t.scale), channel_dim)
                return self.const(OperandType(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, shape), data.astype(np.int8),
                                  channel_quant=cq, key=key)
            scale, zp = self.quant(t)
            if x_type.type == T.TENSOR_QUANT8_ASYMM_SIGNED and t.type_name == "UINT8":
                data, zp = (data.astype(np.int16) - 128).astype(np.int8), zp - 128
            elif x_type.type == T.TENSOR_QUANT8_ASYMM and t.type_name in ("INT8", "INT4"):
                data, zp = (data.astype(np.int16) + 128).astype(np.uint8), zp + 128
            return self.const(OperandType(x_type.type, shape, scale, zp), data, key=key)
        self.fail(f"filter tensor {k} of type {t.type_name} with input type {x_type.type.name} is not supported")

    def bias_operand(self, k: int, x_type: OperandType, w_idx: int, n: int) -> int:
        w_type = self.type_of(w_idx)
        if x_type.type == T.TENSOR_FLOAT32:
            if k < 0:
                return self.const(OperandType(T.TENSOR_FLOAT32, (n,)), np.zeros(n, np.float32), key=("zeros", n))
            t = self.t(k)
            data = self.value_of(k, "the bias")
            if t.type_name != "FLOAT32":
                self.fail(f"bias tensor {k} of type {t.type_name} with float input is not supported")
            return self.const(OperandType(T.TENSOR_FLOAT32, (n,)), data.reshape(n), key=("tensor", k))
        # NNAPI: bias scale = input scale * filter scale, 0 (ignored) with a per-channel filter.
        per_channel = w_type.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL
        scale = 0.0 if per_channel else float(np.float32(x_type.scale) * np.float32(w_type.scale))
        if k < 0:
            data = np.zeros(n, np.int32)
        else:
            t = self.t(k)
            data = self.value_of(k, "the bias")
            if t.type_name != "INT32":
                self.fail(f"bias tensor {k} of type {t.type_name} with quantized input is not supported "
                          "(NNAPI needs INT32)")
            if t.scale is not None:
                want = (np.float64(x_type.scale) * np.asarray(self.m._operands[w_idx].channel_quant.scales)
                        if per_channel else np.array([scale]))
                if np.max(np.abs(t.scale.astype(np.float64) - want) / want) > 1e-5:
                    self.note(f"bias tensor {k} scale differs from input scale * filter scale; "
                              "NNAPI uses the latter (as TFLite's kernels do)")
        return self.const(OperandType(T.TENSOR_INT32, (n,), scale), data.astype(np.int32).reshape(n),
                          key=("bias", k, scale))

    def conv(self, op: TfOperator, depthwise: bool) -> None:
        ins = op.inputs
        if len(ins) < 2:
            self.fail(f"takes at least 2 inputs, got {len(ins)}")
        x, w, b = ins[0], ins[1], ins[2] if len(ins) > 2 else -1
        xi = self.tensor(x)
        xt = self.type_of(xi)
        wshape = self.value_of(w, "the filter").shape
        if len(xt.dimensions) != 4 or len(wshape) != 4:
            self.fail(f"input {list(xt.dimensions)} and filter {list(wshape)} must be 4-D")
        padding = self.opt("padding")
        sw, sh = self.opt("strideW"), self.opt("strideH")
        if depthwise:
            fuse = self.fuse()
            dw, dh = self.opt("dilationWFactor", 1), self.opt("dilationHFactor", 1)
            c_out = wshape[3]
            if wshape[0] != 1 or c_out % xt.dimensions[3]:
                self.fail(f"filter {list(wshape)} does not fit input {list(xt.dimensions)}")
            mult = c_out // xt.dimensions[3]   # the depth_multiplier option is unreliable in old files
        else:
            fuse = self.fuse()
            dw, dh = self.opt("dilationWFactor", 1), self.opt("dilationHFactor", 1)
            c_out = wshape[0]
        if padding not in PADDING:
            self.fail(f"padding {padding} is neither SAME nor VALID")
        n, h, wd, _ = xt.dimensions
        kh, kw = wshape[1], wshape[2]
        expect = (n, conv_out_size(padding, h, sh, dh, kh), conv_out_size(padding, wd, sw, dw, kw), c_out)
        out_k = op.outputs[0]
        if tuple(self.t(out_k).shape) != expect:
            self.fail(f"output shape {list(self.t(out_k).shape)} differs from {list(expect)} computed with "
                      f"{'SAME' if padding == 0 else 'VALID'} padding")
        wi = self.filter_operand(w, xt, 3 if depthwise else 0)
        bi = self.bias_operand(b, xt, wi, c_out)
        args = [xi, wi, bi, self.i32(PADDING[padding]), self.i32(sw), self.i32(sh)]
        if depthwise:
            args.append(self.i32(mult))
        args.append(self.i32(fuse))
        if dw != 1 or dh != 1:
            args += [self.boolean(False), self.i32(dw), self.i32(dh)]
        self.emit(Op.DEPTHWISE_CONV_2D if depthwise else Op.CONV_2D, args, [self.define(out_k)])

    def op_CONV_2D(self, op):
        self.conv(op, depthwise=False)

    def op_DEPTHWISE_CONV_2D(self, op):
        self.conv(op, depthwise=True)

    def reshape_to(self, src: int, shape, dst: int) -> None:
        self.emit(Op.RESHAPE, [src, self.i32_tensor(list(shape))], [dst])

    def op_FULLY_CONNECTED(self, op):
        ins = op.inputs
        x, w, b = ins[0], ins[1], ins[2] if len(ins) > 2 else -1
        fuse = self.fuse()
        if self.opt("weightsFormat") != 0:
            self.fail("weights_format other than DEFAULT (shuffled weights) is not supported")
        xi = self.tensor(x)
        xt = self.type_of(xi)
        wt = self.t(w)
        wshape = self.value_of(w, "the weights").shape
        if len(wshape) != 2:
            self.fail(f"weights must be 2-D, got {list(wshape)}")
        units, n_in = wshape
        total = int(np.prod(xt.dimensions))
        if total % n_in:
            self.fail(f"input {list(xt.dimensions)} is not a whole number of rows of {n_in}")
        batch = total // n_in
        out_k = op.outputs[0]
        out_shape = tuple(self.t(out_k).shape)
        if int(np.prod(out_shape)) != batch * units:
            self.fail(f"output shape {list(out_shape)} does not hold {batch} x {units} values")
        ot = self.out_type(out_k)
        if xt.type in QUANT8 and wt.per_channel:
            # NNAPI's FULLY_CONNECTED has no per-channel filter: RESHAPE -> 1x1 CONV_2D -> RESHAPE.
            self.note("per-channel FULLY_CONNECTED lowered to RESHAPE -> 1x1 CONV_2D -> RESHAPE")
            x4 = self.temp(xt, (batch, 1, 1, n_in))
            self.reshape_to(xi, (batch, 1, 1, n_in), x4)
            wi = self.filter_operand(w, xt, 0, (units, 1, 1, n_in))
            bi = self.bias_operand(b, xt, wi, units)
            y4 = self.temp(ot, (batch, 1, 1, units))
            self.emit(Op.CONV_2D, [x4, wi, bi, self.i32(2), self.i32(1), self.i32(1), self.i32(fuse)], [y4])
            self.reshape_to(y4, out_shape, self.define(out_k))
            return
        if len(xt.dimensions) < 2:
            x2 = self.temp(xt, (batch, n_in))
            self.reshape_to(xi, (batch, n_in), x2)
            xi = x2
        wi = self.filter_operand(w, xt, 0)
        bi = self.bias_operand(b, xt, wi, units)
        if out_shape == (batch, units):
            self.emit(Op.FULLY_CONNECTED, [xi, wi, bi, self.i32(fuse)], [self.define(out_k)])
        else:   # keep_num_dims: NNAPI's output is 2-D
            y2 = self.temp(ot, (batch, units))
            self.emit(Op.FULLY_CONNECTED, [xi, wi, bi, self.i32(fuse)], [y2])
            self.reshape_to(y2, out_shape, self.define(out_k))

    def binary(self, op, code: Op):
        a, b = op.inputs[:2]
        self.emit(code, [self.tensor(a), self.tensor(b), self.i32(self.fuse())], [self.define(op.outputs[0])])

    def pool(self, op, code: Op):
        padding = self.opt("padding")
        if padding not in PADDING:
            self.fail(f"padding {padding} is neither SAME nor VALID")
        sw, sh, fw, fh = (self.opt(s) for s in ("strideW", "strideH", "filterWidth", "filterHeight"))
        xi = self.tensor(op.inputs[0])
        n, h, w, c = self.type_of(xi).dimensions
        expect = (n, conv_out_size(padding, h, sh, 1, fh), conv_out_size(padding, w, sw, 1, fw), c)
        if tuple(self.t(op.outputs[0]).shape) != expect:
            self.fail(f"output shape {list(self.t(op.outputs[0]).shape)} differs from {list(expect)}")
        args = [xi, self.i32(PADDING[padding]), self.i32(sw), self.i32(sh), self.i32(fw), self.i32(fh),
                self.i32(self.fuse())]
        self.emit(code, args, [self.define(op.outputs[0])])

    def op_AVERAGE_POOL_2D(self, op):
        self.pool(op, Op.AVERAGE_POOL_2D)

    def op_MAX_POOL_2D(self, op):
        self.pool(op, Op.MAX_POOL_2D)

    def requantize(self, src: int, out_k: int) -> None:
        """src (quantized) -> TFLite tensor out_k of another quantization, through float32:
        DEQUANTIZE -> QUANTIZE (NNAPI has no quantized-to-quantized QUANTIZE)."""
        f = self.temp(OperandType(T.TENSOR_FLOAT32), self.type_of(src).dimensions)
        self.emit(Op.DEQUANTIZE, [src], [f])
        self.emit(Op.QUANTIZE, [f], [self.define(out_k)])

    def op_MEAN(self, op):
        x, axes_k = op.inputs[:2]
        xi = self.tensor(x)
        xt = self.type_of(xi)
        rank = len(xt.dimensions)
        axes = sorted({int(a) % rank for a in np.asarray(self.value_of(axes_k, "the axes")).reshape(-1)})
        keep = bool(self.opt(0, "?", False))
        out_k = op.outputs[0]
        ot = self.out_type(out_k)
        args = [xi, self.i32_tensor(axes), self.i32(int(keep))]
        requantized = xt.type in QUANT8 and (np.float32(ot.scale) != np.float32(xt.scale)
                                             or ot.zero_point != xt.zero_point)
        if requantized and self.convention == "nnapi":
            # NNAPI's MEAN keeps the input's quantization (and truncates its division), and
            # TFLite's NNAPI delegate refuses such a MEAN (TFLite's own kernel runs it): in
            # float32 the mean is rounded once, to the output's quantization. Under the "tflite"
            # convention the MEAN keeps TFLite's output quantization, which only the reference
            # driver's TFLite convention accepts (it computes TFLite's integer mean).
            self.note(f"MEAN output quantization ({ot.scale:.7g}, {ot.zero_point}) differs from the input's "
                      f"({xt.scale:.7g}, {xt.zero_point}): DEQUANTIZE -> MEAN (float32) -> QUANTIZE")
            f_in = self.temp(OperandType(T.TENSOR_FLOAT32), xt.dimensions)
            f_out = self.temp(OperandType(T.TENSOR_FLOAT32), ot.dimensions)
            self.emit(Op.DEQUANTIZE, [xi], [f_in])
            self.emit(Op.MEAN, [f_in] + args[1:], [f_out])
            self.emit(Op.QUANTIZE, [f_out], [self.define(out_k)])
        else:
            self.emit(Op.MEAN, args, [self.define(out_k)])

    def op_RESHAPE(self, op):
        self.reshape_to(self.tensor(op.inputs[0]), self.t(op.outputs[0]).shape, self.define(op.outputs[0]))

    def op_SQUEEZE(self, op):
        xi = self.tensor(op.inputs[0])
        shape = self.type_of(xi).dimensions
        dims = ints_of(self.opt("squeezeDims", None))
        axes = sorted({d % len(shape) for d in dims}) if dims else [i for i, s in enumerate(shape) if s == 1]
        if any(shape[a] != 1 for a in axes):
            self.fail(f"squeezes dimensions {axes} of {list(shape)} that are not 1")
        self.emit(Op.SQUEEZE, [xi, self.i32_tensor(axes)], [self.define(op.outputs[0])])

    def op_SOFTMAX(self, op):
        xi = self.tensor(op.inputs[0])
        beta = self.opt("beta", 0.0)
        args = [xi, self.f32(beta)]
        if len(self.type_of(xi).dimensions) not in (2, 4):
            args.append(self.i32(-1))
        self.emit(Op.SOFTMAX, args, [self.define(op.outputs[0])])

    def op_PAD(self, op):
        pads = np.asarray(self.value_of(op.inputs[1], "the paddings"))
        self.emit(Op.PAD, [self.tensor(op.inputs[0]), self.i32_tensor(pads)], [self.define(op.outputs[0])])

    def op_PADV2(self, op):
        pads = np.asarray(self.value_of(op.inputs[1], "the paddings"))
        xi = self.tensor(op.inputs[0])
        value = np.asarray(self.value_of(op.inputs[2], "the pad value")).reshape(-1)[0]
        pad = self.f32(value) if self.type_of(xi).type == T.TENSOR_FLOAT32 else self.i32(int(value))
        self.emit(Op.PAD_V2, [xi, self.i32_tensor(pads), pad], [self.define(op.outputs[0])])

    def op_QUANTIZE(self, op):
        xi = self.tensor(op.inputs[0])
        if self.type_of(xi).type in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
            self.emit(Op.QUANTIZE, [xi], [self.define(op.outputs[0])])
            return
        xt, ot = self.type_of(xi), self.out_type(op.outputs[0])
        exact = np.float32(xt.scale) == np.float32(ot.scale)
        self.note(f"quantized QUANTIZE ({xt.type.name} -> {ot.type.name}) as DEQUANTIZE -> QUANTIZE"
                  + (" (exact: equal scales)" if exact else " (rounds through float32)"))
        self.requantize(xi, op.outputs[0])

    def op_DEQUANTIZE(self, op):
        x = op.inputs[0]
        if x not in self.operand_of and self.t(x).data is not None:   # constant (e.g. float16 weights): fold
            self.fold(op.outputs[0], self.dequantized(self.t(x)))
            return
        xi = self.tensor(x)
        # NNAPI's DEQUANTIZE takes quantized input only; float16 -> float32 is a CAST.
        code = Op.CAST if self.type_of(xi).type == T.TENSOR_FLOAT16 else Op.DEQUANTIZE
        self.emit(code, [xi], [self.define(op.outputs[0])])

    def op_CONCATENATION(self, op):
        ins = [self.tensor(k) for k in op.inputs]
        rank = len(self.t(op.outputs[0]).shape)
        axis = self.opt("axis") % rank
        out = self.activation_after(self.fuse(), op.outputs[0], self.out_type(op.outputs[0]))
        self.emit(Op.CONCATENATION, ins + [self.i32(axis)], [out])

    def op_TRANSPOSE(self, op):
        perm = np.asarray(self.value_of(op.inputs[1], "the permutation"))
        self.emit(Op.TRANSPOSE, [self.tensor(op.inputs[0]), self.i32_tensor(perm)], [self.define(op.outputs[0])])
