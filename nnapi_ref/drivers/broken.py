"""Deliberately broken drivers: the reference driver with one fault each, for testing the suite
itself (``tests/test_broken_drivers.py``). Load one with ``--driver nnapi_ref.drivers.broken:<name>``.

========================  ==================================================================
``wrong_add_quant8``      ADD with a TENSOR_QUANT8_ASYMM output: every other element off by
                          ``ADD_QUANT8_ERROR`` (2, beyond the +-1 quant8 tolerance);
                          ``wrong_add_quant8_by_one`` is the same fault off by 1, which the
                          quant8 tolerance cannot tell from a rounding difference;
                          ``wrong_add_quant8_sparse``: every fourth element off by 2, within
                          the random-graph criteria for one ADD (MSE 1 <= 2): caught only
                          where later operations amplify it (``cts/test_random_graph.py``)
``off_by_one_rounding``   AVERAGE_POOL_2D on quant8 types rounds the average down (truncation)
                          instead of to nearest: 1 LSB low wherever the fraction is >= 1/2.
                          Within the +-1 quant8 tolerance on its own; caught only where a
                          later operation amplifies it (a requantization to a finer scale)
``add_quant8_truncating`` ADD with a TENSOR_QUANT8_ASYMM output requantizes by truncation
                          (rounding down) instead of to nearest: every output at most one step
                          low, about half of them; within the per-element tolerance, caught by
                          the random tests' bias and MSE where later operations amplify it
``float16_arithmetic``    every TENSOR_FLOAT32 operation computes in float16 (inputs and
                          outputs rounded to float16), relaxed model or not
``wrong_output_shape``    CONV_2D: reports its model outputs' shapes with the dimensions of
                          size 1 dropped (the data is right)
``accepts_invalid_model`` no model validation: get_supported_operations and prepare_model
                          accept what they should reject with INVALID_ARGUMENT
``raises_on_invalid_model`` get_supported_operations and prepare_model reject an invalid model
                          with a plain ValueError instead of HalError(INVALID_ARGUMENT) (the
                          runtime hides it; the ``execute`` fuzzing harness catches it)
``bad_timing``            measured timing has time on device > time in driver
``burst_caches_pool``     a burst reads its inputs from a copy of each memory pool taken the
                          first time it saw the pool's token (the contents cached, not the
                          mapping), until the token is released
``shared_scratch``        the intermediate results of the main model live in buffers allocated
                          once per prepared model: right one execution at a time, but
                          concurrent executions overwrite each other's intermediates
``keeps_first_shape``     a prepared model reports the output shapes of its first successful
                          execution for every later one (the data is right)
``ignores_extension_prefix`` reads operand and operation types by their low 16 bits only: an
                          extension's operation 0 is ADD to it (vendor extensions)
``crashes_on_extension_data`` the example extension's driver (org.nnts.example), reading a
                          TENSOR_QUANT64_ASYMM operand's extension data with the wrong layout:
                          prepare raises struct.error instead of working
``accepts_unsupported_extension`` the example extension's driver, taking any extension's
                          operation and operand type 0 for org.nnts.example's
``dilated_depthwise_multiplier`` DEPTHWISE_CONV_2D with a dilation factor above 1 and a depth
                          multiplier above 1 together leaves out the bias (a special-cased
                          kernel for that rare form); every other form is right
``wrong_on_large_tensors`` an operation output of more than ``LARGE_ELEMENTS`` (16384) elements
                          has every element past the first 16384 taken from one element further
                          on (a second tile read one element off); smaller outputs are right
``relaxed_bfloat16``      a relaxed model's TENSOR_FLOAT32 outputs rounded to bfloat16 (8
                          significant bits: below the float16 precision relaxed computation
                          must keep); models that are not relaxed are right
``proposals_clip_last_pixel`` GENERATE_PROPOSALS clips boxes to the last pixel, [0, width - 1] x
                          [0, height - 1] (Detectron's legacy convention), and tests the centres
                          against it, where NNAPI clips to [0, width] x [0, height]
``nms_limit_per_class``   BOX_WITH_NMS_LIMIT applies max_detections to each class but not to
                          the batch's total: a batch with survivors in several classes keeps
                          boxes too many; every other case is right
``hardware_buffer_offset`` reads every argument in a hardware-buffer pool from the pool's start,
                          as if each input and output had a hardware buffer of its own (the
                          offset ignored); ashmem and fd pools are right
``hardware_buffer_unchecked`` takes the ranges of arguments in hardware-buffer pools on trust:
                          one past the pool's end is cut short instead of rejected with
                          INVALID_ARGUMENT; ashmem and fd pools are checked
``writes_past_output``    writes each output in whole 16-byte tiles: an output whose size is not
                          a multiple of 16 bytes, in a memory pool, spills zeros past its region
``flushes_constant_memory`` flushes float32 subnormal constants to zero in place, in the client's
                          constant memory (model constants set from a Memory), at every execution
``device_memory_per_model`` each prepared model keeps a copy of each device memory it reads: a
                          device memory another compilation wrote since is read as it was
``replays_first_path``    records the branch an IF took and the trip count of a WHILE at a
                          prepared model's first execution and replays them ever after
``timing_in_microseconds`` reports timeOnDevice and timeInDriver in microseconds, not nanoseconds
``one_program_slot``      keeps one loaded program per device: an execution runs whatever program
                          is loaded when its inputs are in place, another compilation's when one
                          was prepared or executed meanwhile
``leaks_fence_fd``        each fenced execution opens a file descriptor for its sync fence and
                          never closes it
``float16_accumulator``   sums float16 in float16: L2_NORMALIZATION's sum of squares, MEAN's sum
                          and FULLY_CONNECTED's dot products overflow past 65504 where the
                          result itself is well within float16's range
``extension_column_major`` the example extension's driver, reading TENSOR_QUANT64_ASYMM inputs of
                          rank 2 and more in column-major order (its kernel's layout): rank 1
                          is right
``caches_by_graph``       keys its cache of compiled programs (on a prepare with a cache token) by
                          the graph alone, weights left out: a model with other weights gets the
                          first one's program
========================  ==================================================================

Each fault is a wrapper around the reference implementation: a prepared model whose execution
plans use a wrapped operation in place of the registry's (the global registry is not touched), or
an override of one reference driver method.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import struct
import threading
import time

import numpy as np

from nnapi_ref import hal
from nnapi_ref.drivers.example_extension import TENSOR_QUANT64_ASYMM, ExampleExtensionDevice, ExamplePreparedModel
from nnapi_ref.drivers.reference import ReferenceBuffer, ReferenceDevice, ReferencePreparedModel
from nnapi_ref.executor import Executor
from nnapi_ref.ops.base import Arg, Call
from nnapi_ref.types import Lifetime, OperandCode as T, OperationCode

ADD_QUANT8_ERROR = 2
QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


class _WrappedOperation:
    """An operation implementation with a fault: ``fault(call, outputs)`` returns the outputs;
    ``inputs(call)``, if given, changes the call first."""

    def __init__(self, impl, fault, inputs=None):
        self._impl = impl
        self._fault = fault
        self._inputs = inputs

    def infer(self, call):
        return self._impl.infer(call)

    def execute(self, call):
        if self._inputs is not None:
            call = self._inputs(call)
        return self._fault(call, self._impl.execute(call))

    def __getattr__(self, name):
        return getattr(self._impl, name)


class BrokenDevice(ReferenceDevice):
    """The reference driver with one fault. Subclasses set ``FAULT`` and override
    :meth:`operation_fault` (a fault in some operations) or :meth:`wrap_prepared`."""

    FAULT = "none"

    def __init__(self):
        super().__init__(name=f"nnts-broken-{self.FAULT}")

    def get_version_string(self) -> str:
        return f"nnts broken driver ({self.FAULT})"

    def operation_fault(self, code: OperationCode, impl):
        """The implementation to use for operations of type ``code`` (``impl``: the reference's)."""
        return impl

    def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
        prepared = super().prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token)
        for plan in prepared.plans:  # this prepared model's own plans: the registry stays as it is
            for step in plan.steps:
                step.impl = self.operation_fault(step.code, step.impl)
        return self.wrap_prepared(prepared)

    def wrap_prepared(self, prepared: ReferencePreparedModel) -> ReferencePreparedModel:
        return prepared


# -- wrong_add_quant8 ---------------------------------------------------------------------------

class WrongAddQuant8(BrokenDevice):
    FAULT = "wrong_add_quant8"
    ERROR = ADD_QUANT8_ERROR
    EVERY = 2  # every EVERY-th element is wrong

    def operation_fault(self, code, impl):
        if code != OperationCode.ADD:
            return impl

        def fault(call: Call, outputs):
            if call.outs[0].type != T.TENSOR_QUANT8_ASYMM:
                return outputs
            out = np.array(outputs[0], np.int32).reshape(-1)
            wrong = np.arange(out.size) % self.EVERY == 0
            # Off by ERROR, away from the end of the range so the error always shows.
            out[wrong] = np.where(out[wrong] + self.ERROR <= 255, out[wrong] + self.ERROR,
                                  out[wrong] - self.ERROR)
            return [out.astype(np.uint8).reshape(np.shape(outputs[0]))] + list(outputs[1:])
        return _WrappedOperation(impl, fault)


class WrongAddQuant8ByOne(WrongAddQuant8):
    FAULT = "wrong_add_quant8_by_one"
    ERROR = 1


class WrongAddQuant8Sparse(WrongAddQuant8):
    FAULT = "wrong_add_quant8_sparse"
    EVERY = 4


# -- off_by_one_rounding ------------------------------------------------------------------------

class OffByOneRounding(BrokenDevice):
    """AVERAGE_POOL_2D (quant8): the average is truncated instead of rounded to nearest.

    The exact average comes from the float32 implementation of the same operation on the
    dequantized input; the faulty result is floor(average / scale) + zero point, kept within one
    LSB of the correct result (so only the rounding is wrong)."""

    FAULT = "off_by_one_rounding"

    def operation_fault(self, code, impl):
        if code != OperationCode.AVERAGE_POOL_2D:
            return impl

        def fault(call: Call, outputs):
            source, out = call.ins[0], call.outs[0]
            if out.type not in QUANT8:
                return outputs
            real = Arg(T.TENSOR_FLOAT32, source.shape, value=source.dequantize().astype(np.float32))
            float_call = Call([real] + list(call.ins[1:]), [Arg(T.TENSOR_FLOAT32, out.shape)], call.relaxed,
                              call.runner)
            average = np.asarray(impl.execute(float_call)[0], np.float64)
            truncated = np.floor(average / out.scale + 1e-9) + out.zero_point
            correct = np.asarray(outputs[0], np.int32)
            wrong = np.clip(truncated, correct - 1, correct).astype(outputs[0].dtype)
            return [wrong] + list(outputs[1:])
        return _WrappedOperation(impl, fault)


# -- add_quant8_truncating ----------------------------------------------------------------------

class AddQuant8Truncating(BrokenDevice):
    """ADD (TENSOR_QUANT8_ASYMM): the sum is requantized by truncation instead of to nearest, from
    the exact sum (the float32 ADD of the dequantized inputs, with the same fused activation),
    kept within one step below the correct result (so only the rounding is wrong)."""

    FAULT = "add_quant8_truncating"

    def operation_fault(self, code, impl):
        if code != OperationCode.ADD:
            return impl

        def fault(call: Call, outputs):
            out = call.outs[0]
            if out.type != T.TENSOR_QUANT8_ASYMM:
                return outputs
            reals = [Arg(T.TENSOR_FLOAT32, a.shape, value=a.dequantize().astype(np.float32)) for a in call.ins[:2]]
            float_call = Call(reals + list(call.ins[2:]), [Arg(T.TENSOR_FLOAT32, out.shape)], call.relaxed,
                              call.runner)
            exact = np.asarray(impl.execute(float_call)[0], np.float64)
            truncated = np.floor(exact / out.scale + 1e-9) + out.zero_point
            correct = np.asarray(outputs[0], np.int32)
            return [np.clip(truncated, correct - 1, correct).astype(outputs[0].dtype)] + list(outputs[1:])
        return _WrappedOperation(impl, fault)


# -- float16_arithmetic -------------------------------------------------------------------------

def _to_float16(value):
    return None if value is None else np.asarray(value).astype(np.float16).astype(np.float32)


class Float16Arithmetic(BrokenDevice):
    """TENSOR_FLOAT32 operations compute in float16 (as if every model were relaxed): their
    float32 inputs and outputs are rounded to float16."""

    FAULT = "float16_arithmetic"

    def operation_fault(self, code, impl):
        if code in (OperationCode.IF, OperationCode.WHILE):
            return impl
        return _WrappedOperation(impl, self._round_outputs, self._round_inputs)

    @staticmethod
    def _round_inputs(call: Call) -> Call:
        ins = [Arg(a.type, a.shape, a.scale, a.zero_point, a.channel_quant, _to_float16(a._value), a.omitted)
               if a.type == T.TENSOR_FLOAT32 and a._value is not None else a for a in call.ins]
        return Call(ins, call.outs, call.relaxed, call.runner)

    @staticmethod
    def _round_outputs(call: Call, outputs):
        return [_to_float16(o) if a.type == T.TENSOR_FLOAT32 else o for a, o in zip(call.outs, outputs)]


# -- wrong_output_shape -------------------------------------------------------------------------

class _DroppedOnes(ReferencePreparedModel):
    """Reports the shapes of model outputs written by ``operation`` without their 1s."""

    def __init__(self, prepared: ReferencePreparedModel, operation: OperationCode):
        super().__init__(prepared.device, prepared.model, prepared.plans)
        main = prepared.model.main
        produced = {k for op in main.operations if op.type == operation for k in op.outputs}
        self.affected = [i for i, k in enumerate(main.output_indexes) if k in produced]

    def _run(self, request, measure, deadline_ns, loop_timeout_ns):
        result = super()._run(request, measure, deadline_ns, loop_timeout_ns)
        shapes = list(result.output_shapes)
        for i in self.affected:
            dims = shapes[i].dimensions
            if 1 in dims and len(dims) > 1:
                shapes[i] = hal.OutputShape(tuple(d for d in dims if d != 1) or (1,), shapes[i].is_sufficient)
        return hal.ExecutionResult(shapes, result.timing)


class WrongOutputShape(BrokenDevice):
    FAULT = "wrong_output_shape"
    OPERATION = OperationCode.CONV_2D

    def wrap_prepared(self, prepared):
        return _DroppedOnes(prepared, self.OPERATION)


# -- accepts_invalid_model ----------------------------------------------------------------------

class _NoValidation:
    def level(self, model, extensions=()) -> int:
        return 0


class AcceptsInvalidModel(BrokenDevice):
    """Never validates a model: the reference's checks are skipped (what its executor happens
    to reject while preparing is still rejected)."""

    FAULT = "accepts_invalid_model"

    def __init__(self):
        super().__init__()
        self._validated = _NoValidation()


# -- raises_on_invalid_model --------------------------------------------------------------------

class RaisesOnInvalidModel(BrokenDevice):
    """Rejects an invalid model with a ValueError: the validation is there, the error code is not."""

    FAULT = "raises_on_invalid_model"

    def _validate(self, call, *args):
        try:
            return call(*args)
        except hal.HalError as e:
            if e.status != hal.ErrorStatus.INVALID_ARGUMENT:
                raise
            raise ValueError(f"invalid model: {e.message}") from None

    def get_supported_operations(self, model):
        return self._validate(super().get_supported_operations, model)

    def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
        return self._validate(super().prepare_model, model, preference, priority, deadline_ns, model_cache,
                              data_cache, token)


# -- bad_timing ---------------------------------------------------------------------------------

class _BadTiming(ReferencePreparedModel):
    def __init__(self, prepared: ReferencePreparedModel):
        super().__init__(prepared.device, prepared.model, prepared.plans)

    def _run(self, request, measure, deadline_ns, loop_timeout_ns):
        result = super()._run(request, measure, deadline_ns, loop_timeout_ns)
        if not measure:
            return result
        in_driver = result.timing.time_in_driver_ns
        return hal.ExecutionResult(result.output_shapes, hal.Timing(2 * in_driver + 1000, in_driver))


class BadTiming(BrokenDevice):
    """Reports more time on the device than in the driver (which includes it)."""

    FAULT = "bad_timing"

    def wrap_prepared(self, prepared):
        return _BadTiming(prepared)


# -- burst_caches_pool ---------------------------------------------------------------------------

class _ContentCachingBurst(hal.IBurst):
    """Inputs are read from a copy of each shared memory pool taken when its memory identifier
    token was first seen; the copy lives until the token is released."""

    def __init__(self, prepared: ReferencePreparedModel):
        self.prepared = prepared
        self.copies: dict[int, hal.SharedMemory] = {}

    def execute(self, request, memory_identifier_tokens, measure, deadline_ns, loop_timeout_ns):
        if len(memory_identifier_tokens) != len(request.pools):
            raise hal.HalError(hal.ErrorStatus.INVALID_ARGUMENT, "burst: one memory identifier token per pool needed")
        n = len(request.pools)
        staged = [self.copies.setdefault(token, hal.SharedMemory(pool.buffer.copy()))
                  if isinstance(pool, hal.SharedMemory) else pool
                  for pool, token in zip(request.pools, memory_identifier_tokens)]
        inputs = [dataclasses.replace(a, pool_index=a.pool_index + n)
                  if a.lifetime == hal.ArgumentLifetime.POOL and 0 <= a.pool_index < n else a for a in request.inputs]
        return self.prepared._run(hal.Request(inputs, request.outputs, list(request.pools) + staged), measure,
                                  deadline_ns, loop_timeout_ns)

    def release_memory_resource(self, memory_identifier_token):
        self.copies.pop(memory_identifier_token, None)


class _ContentCachingPrepared(ReferencePreparedModel):
    def __init__(self, prepared: ReferencePreparedModel):
        super().__init__(prepared.device, prepared.model, prepared.plans)

    def configure_execution_burst(self):
        return _ContentCachingBurst(self)


class BurstCachesPool(BrokenDevice):
    """A burst caches the contents of the pools it is given by token, instead of their mapping:
    a pool rewritten between two executions of one burst is read as it was the first time."""

    FAULT = "burst_caches_pool"

    def wrap_prepared(self, prepared):
        return _ContentCachingPrepared(prepared)


# -- shared_scratch ------------------------------------------------------------------------------

SCRATCH_HOLD_S = 0.002  # how long an intermediate sits in the scratch buffer before it is read


def _into_scratch(scratch: dict):
    """A fault putting an operation's outputs into ``scratch`` (one buffer per output, kept
    across executions) and returning those buffers, after the time a device would take."""
    def fault(call: Call, outputs):
        results = []
        for i, out in enumerate(outputs):
            out = np.asarray(out)
            buffer = scratch.get(i)
            if buffer is None or buffer.shape != out.shape or buffer.dtype != out.dtype:
                buffer = scratch[i] = np.empty_like(out)
            buffer[...] = out
            results.append(buffer)
        time.sleep(SCRATCH_HOLD_S)
        return results
    return fault


class SharedScratch(BrokenDevice):
    """The main model's operations writing only intermediate operands write them into one scratch
    buffer per prepared model: executions one at a time are right, concurrent ones read each
    other's intermediates."""

    FAULT = "shared_scratch"

    def wrap_prepared(self, prepared):
        main = prepared.plans[0]
        temporaries = {k for k, o in enumerate(main.subgraph.operands) if o.lifetime == Lifetime.TEMPORARY_VARIABLE}
        for step in main.steps:
            if set(step.outputs) <= temporaries:
                step.impl = _WrappedOperation(step.impl, _into_scratch({}))
        return prepared


# -- keeps_first_shape -----------------------------------------------------------------------------

class _FirstShapes(ReferencePreparedModel):
    def __init__(self, prepared: ReferencePreparedModel):
        super().__init__(prepared.device, prepared.model, prepared.plans)
        self.first_shapes: list[hal.OutputShape] | None = None

    def _run(self, request, measure, deadline_ns, loop_timeout_ns):
        result = super()._run(request, measure, deadline_ns, loop_timeout_ns)
        if self.first_shapes is None:
            self.first_shapes = list(result.output_shapes)
        return hal.ExecutionResult(list(self.first_shapes), result.timing)


class KeepsFirstShape(BrokenDevice):
    """Reports the output shapes of a prepared model's first successful execution ever after."""

    FAULT = "keeps_first_shape"

    def wrap_prepared(self, prepared):
        return _FirstShapes(prepared)


# -- hardware_buffer_offset ----------------------------------------------------------------------

class _HardwareBufferFromStart(ReferencePreparedModel):
    def __init__(self, prepared: ReferencePreparedModel):
        super().__init__(prepared.device, prepared.model, prepared.plans)

    def _region(self, arg, pools, role, i):
        if arg.lifetime == hal.ArgumentLifetime.POOL and 0 <= arg.pool_index < len(pools) and \
                getattr(pools[arg.pool_index], "kind", None) == hal.HARDWARE_BUFFER_BLOB:
            arg = dataclasses.replace(arg, offset=0)
        return super()._region(arg, pools, role, i)


class HardwareBufferOffset(BrokenDevice):
    """Ignores the offset of arguments in hardware-buffer pools."""

    FAULT = "hardware_buffer_offset"

    def wrap_prepared(self, prepared):
        return _HardwareBufferFromStart(prepared)


class _HardwareBufferOnTrust(ReferencePreparedModel):
    def __init__(self, prepared: ReferencePreparedModel):
        super().__init__(prepared.device, prepared.model, prepared.plans)

    def _region(self, arg, pools, role, i):
        if arg.lifetime == hal.ArgumentLifetime.POOL and 0 <= arg.pool_index < len(pools) and \
                getattr(pools[arg.pool_index], "kind", None) == hal.HARDWARE_BUFFER_BLOB and arg.offset >= 0:
            return pools[arg.pool_index].buffer[arg.offset:arg.offset + arg.length]  # numpy cuts it short
        return super()._region(arg, pools, role, i)


class HardwareBufferUnchecked(BrokenDevice):
    """Does not check argument ranges against hardware-buffer pools."""

    FAULT = "hardware_buffer_unchecked"

    def wrap_prepared(self, prepared):
        return _HardwareBufferOnTrust(prepared)


# Factories for ``--driver nnapi_ref.drivers.broken:<name>``.
wrong_add_quant8 = WrongAddQuant8
# -- dilated_depthwise_multiplier ---------------------------------------------------------------

def _depthwise_dilated_with_multiplier(call: Call) -> bool:
    """Whether a DEPTHWISE_CONV_2D call has a dilation factor above 1 and a depth multiplier above
    1 (implicit padding: multiplier at 6, dilation at 9 and 10; explicit: at 9, 12 and 13)."""
    ins = call.ins
    implicit = len(ins) <= 8 or ins[8].type == T.BOOL
    multiplier, dilation = (6, 9) if implicit else (9, 12)
    if len(ins) < dilation + 2:
        return False
    return int(ins[multiplier].scalar()) > 1 and max(int(ins[dilation].scalar()), int(ins[dilation + 1].scalar())) > 1


class DilatedDepthwiseMultiplier(BrokenDevice):
    FAULT = "dilated_depthwise_multiplier"

    def operation_fault(self, code, impl):
        if code != OperationCode.DEPTHWISE_CONV_2D:
            return impl

        def without_bias(call: Call) -> Call:
            if not _depthwise_dilated_with_multiplier(call):
                return call
            bias = call.ins[2]
            zeros = Arg(bias.type, bias.shape, bias.scale, bias.zero_point, bias.channel_quant,
                        np.zeros_like(bias.value))
            return Call(call.ins[:2] + [zeros] + call.ins[3:], call.outs, call.relaxed, call.runner)
        return _WrappedOperation(impl, lambda call, outputs: outputs, without_bias)


# -- wrong_on_large_tensors ---------------------------------------------------------------------

LARGE_ELEMENTS = 16384


class WrongOnLargeTensors(BrokenDevice):
    FAULT = "wrong_on_large_tensors"

    def operation_fault(self, code, impl):
        if code in (OperationCode.IF, OperationCode.WHILE):
            return impl

        def fault(call: Call, outputs):
            wrong = []
            for o in outputs:
                o = np.array(o)
                if o.size > LARGE_ELEMENTS + 1:
                    flat = o.reshape(-1)
                    flat[LARGE_ELEMENTS:-1] = flat[LARGE_ELEMENTS + 1:].copy()
                wrong.append(o)
            return wrong
        return _WrappedOperation(impl, fault)


# -- relaxed_bfloat16 ---------------------------------------------------------------------------

def _to_bfloat16(value: np.ndarray) -> np.ndarray:
    """float32 values rounded (to nearest, ties to even) to bfloat16's 8 significant bits."""
    bits = np.ascontiguousarray(value, np.float32).view(np.uint32)
    rounded = (bits + (((bits >> 16) & 1) + 0x7FFF)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


class RelaxedBfloat16(BrokenDevice):
    FAULT = "relaxed_bfloat16"

    def operation_fault(self, code, impl):
        if code in (OperationCode.IF, OperationCode.WHILE):
            return impl

        def fault(call: Call, outputs):
            if not call.relaxed:
                return outputs
            return [_to_bfloat16(o) if a.type == T.TENSOR_FLOAT32 else o for a, o in zip(call.outs, outputs)]
        return _WrappedOperation(impl, fault)


# -- nms_limit_per_class -------------------------------------------------------------------------

class NmsLimitPerClass(BrokenDevice):
    FAULT = "nms_limit_per_class"

    def operation_fault(self, code, impl):
        if code != OperationCode.BOX_WITH_NMS_LIMIT:
            return impl

        def per_class_only(call: Call, outputs):
            limit = int(call.ins[4].scalar())
            if limit < 0:
                return outputs
            unlimited = Arg(call.ins[4].type, (), value=np.array(-1, np.int32))
            scores, rois, classes, batches = impl.execute(Call(call.ins[:4] + [unlimited] + call.ins[5:], call.outs,
                                                               call.relaxed, call.runner))
            seen: dict = {}
            keep = np.zeros(len(classes), bool)
            for i, group in enumerate(zip(batches.tolist(), classes.tolist())):  # grouped, best first per class
                seen[group] = seen.get(group, 0) + 1
                keep[i] = seen[group] <= limit
            return [scores[keep], rois[keep], classes[keep], batches[keep]]
        return _WrappedOperation(impl, per_class_only)


# -- proposals_clip_last_pixel -------------------------------------------------------------------

class ProposalsClipLastPixel(BrokenDevice):
    FAULT = "proposals_clip_last_pixel"

    def operation_fault(self, code, impl):
        if code != OperationCode.GENERATE_PROPOSALS:
            return impl

        def one_pixel_less(call: Call) -> Call:
            info = call.ins[3]
            pixel = round(1 / info.scale) if info.type == T.TENSOR_QUANT16_ASYMM else 1
            smaller = Arg(info.type, info.shape, info.scale, info.zero_point, None,
                          (info.value - pixel).astype(info.value.dtype))
            return Call(call.ins[:3] + [smaller] + call.ins[4:], call.outs, call.relaxed, call.runner)
        return _WrappedOperation(impl, lambda call, outputs: outputs, one_pixel_less)


wrong_add_quant8_by_one = WrongAddQuant8ByOne
wrong_add_quant8_sparse = WrongAddQuant8Sparse
off_by_one_rounding = OffByOneRounding
add_quant8_truncating = AddQuant8Truncating
float16_arithmetic = Float16Arithmetic
wrong_output_shape = WrongOutputShape
accepts_invalid_model = AcceptsInvalidModel
raises_on_invalid_model = RaisesOnInvalidModel
bad_timing = BadTiming
burst_caches_pool = BurstCachesPool
shared_scratch = SharedScratch
keeps_first_shape = KeepsFirstShape
dilated_depthwise_multiplier = DilatedDepthwiseMultiplier
wrong_on_large_tensors = WrongOnLargeTensors
relaxed_bfloat16 = RelaxedBfloat16
nms_limit_per_class = NmsLimitPerClass
proposals_clip_last_pixel = ProposalsClipLastPixel
hardware_buffer_offset = HardwareBufferOffset
hardware_buffer_unchecked = HardwareBufferUnchecked

# -- vendor extensions ------------------------------------------------------------------------------

def _low_bits(code, codes):
    """The built-in type of ``code``'s low 16 bits, when there is one (the prefix ignored)."""
    low = int(code) & 0xFFFF
    return codes(low) if low in codes._value2member_map_ else code


def _without_prefixes(model: hal.Model) -> hal.Model:
    def subgraph(sg: hal.Subgraph) -> hal.Subgraph:
        operands = [dataclasses.replace(o, type=_low_bits(o.type, T), extension_data=None) for o in sg.operands]
        operations = [hal.Operation(_low_bits(op.type, OperationCode), op.inputs, op.outputs) for op in sg.operations]
        return hal.Subgraph(operands, operations, sg.input_indexes, sg.output_indexes)

    return hal.Model(subgraph(model.main), [subgraph(sg) for sg in model.referenced],
                     model.relax_computation_float32_to_float16)


class IgnoresExtensionPrefix(BrokenDevice):
    FAULT = "ignores_extension_prefix"

    def get_supported_operations(self, model):
        return super().get_supported_operations(_without_prefixes(model))

    def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
        return super().prepare_model(_without_prefixes(model), preference, priority, deadline_ns, model_cache,
                                     data_cache, token)


class _BrokenExample(ExampleExtensionDevice):
    FAULT = "none"

    def __init__(self):
        super().__init__(name=f"nnts-broken-{self.FAULT}")


class CrashesOnExtensionData(_BrokenExample):
    FAULT = "crashes_on_extension_data"

    def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
        for operand in model.main.operands:
            if operand.extension_data is not None:
                struct.unpack("<d", operand.extension_data)  # the layout is "<dq": 16 bytes, not 8
        return super().prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token)


class AcceptsUnsupportedExtension(_BrokenExample):
    FAULT = "accepts_unsupported_extension"

    def _is_ours(self, model, code, type_within: int) -> bool:
        return code >> 16 != 0 and code & 0xFFFF == type_within  # whatever extension the prefix names

    def check_extensions(self, model) -> None:
        pass


class _ColumnMajorInputs(ExamplePreparedModel):
    def _compute(self, executor, inputs):
        main = self.model.main
        read = []
        for k, value in zip(main.input_indexes, inputs):
            if value is not None and np.ndim(value) >= 2 and \
                    self.device._is_ours(self.model, main.operands[k].type, TENSOR_QUANT64_ASYMM):
                value = np.asarray(value).reshape(-1).reshape(np.shape(value), order="F")
            read.append(value)
        return super()._compute(executor, read)


class ExtensionColumnMajor(_BrokenExample):
    FAULT = "extension_column_major"

    def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
        prepared = super().prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token)
        if isinstance(prepared, ExamplePreparedModel):
            return _ColumnMajorInputs(prepared.device, prepared.model, prepared.plans)
        return prepared


ignores_extension_prefix = IgnoresExtensionPrefix
crashes_on_extension_data = CrashesOnExtensionData
accepts_unsupported_extension = AcceptsUnsupportedExtension
extension_column_major = ExtensionColumnMajor


# -- writes_past_output -------------------------------------------------------------------------

OUTPUT_TILE_BYTES = 16


class _TiledOutputs(ReferencePreparedModel):
    """Outputs written in whole tiles: the last tile of an output in a memory pool is written
    whole, the bytes past the output's end zeroed, inside its region or not."""

    def __init__(self, prepared: ReferencePreparedModel):
        super().__init__(prepared.device, prepared.model, prepared.plans)

    def _run_request(self, request, measure, deadline_ns, loop_timeout_ns):
        result = super()._run_request(request, measure, deadline_ns, loop_timeout_ns)
        main = self.model.main
        for i, (arg, shape) in enumerate(zip(request.outputs, result.output_shapes)):
            if arg.lifetime != hal.ArgumentLifetime.POOL or not isinstance(request.pools[arg.pool_index],
                                                                            hal.SharedMemory):
                continue
            pool = request.pools[arg.pool_index]
            itemsize = self.device.dtype_of(self.model, main.operands[main.output_indexes[i]].type).itemsize
            written = itemsize * math.prod(shape.dimensions)
            tiles_end = arg.offset + -(-written // OUTPUT_TILE_BYTES) * OUTPUT_TILE_BYTES
            pool.buffer[arg.offset + written:min(tiles_end, pool.size)] = 0
        return result


class WritesPastOutput(BrokenDevice):
    FAULT = "writes_past_output"

    def wrap_prepared(self, prepared):
        return _TiledOutputs(prepared)


# -- flushes_constant_memory --------------------------------------------------------------------

class _FlushedConstants(ReferencePreparedModel):
    def __init__(self, prepared: ReferencePreparedModel):
        super().__init__(prepared.device, prepared.model, prepared.plans)

    def _run_request(self, request, measure, deadline_ns, loop_timeout_ns):
        tiny = np.finfo(np.float32).tiny
        for sg in [self.model.main] + list(self.model.referenced):
            for operand in sg.operands:
                if operand.lifetime == Lifetime.CONSTANT_REFERENCE and operand.type == T.TENSOR_FLOAT32:
                    value = operand.value
                    value[(value != 0) & (np.abs(value) < tiny)] = 0  # in place: the client's memory
        return super()._run_request(request, measure, deadline_ns, loop_timeout_ns)


class FlushesConstantMemory(BrokenDevice):
    """Subnormal float32 weights are flushed to zero where they lie, in the client's constant
    memory: the results stay within tolerance, the client's memory does not stay as it was."""

    FAULT = "flushes_constant_memory"

    def wrap_prepared(self, prepared):
        return _FlushedConstants(prepared)


# -- device_memory_per_model ----------------------------------------------------------------------

class _DeviceMemoryCopies(ReferencePreparedModel):
    """Keeps a copy of each device memory it reads; refreshes it when the memory was written by a
    copy or by this prepared model, not when another prepared model wrote it."""

    def __init__(self, prepared: ReferencePreparedModel):
        super().__init__(prepared.device, prepared.model, prepared.plans)
        self.copies: dict[int, np.ndarray] = {}

    def _read_input(self, i, arg, pools):
        array = super()._read_input(i, arg, pools)
        if arg.lifetime != hal.ArgumentLifetime.POOL or not isinstance(pools[arg.pool_index], ReferenceBuffer):
            return array
        buffer = pools[arg.pool_index]
        writer, data = self.device.last_writes.get(id(buffer), (None, None))
        kept = self.copies.get(id(buffer))
        if kept is not None and writer is not None and writer is not self and data is buffer.data:
            return kept  # another compilation's output, not seen
        self.copies[id(buffer)] = np.array(array)
        return array

    def _output_target(self, i, region, dims, result, shape):
        target = super()._output_target(i, region, dims, result, shape)
        if not isinstance(region, ReferenceBuffer) or target is None:
            return target

        def write(array, region=region):
            target(array)
            self.device.last_writes[id(region)] = (self, region.data)
        return write


class DeviceMemoryPerModel(BrokenDevice):
    FAULT = "device_memory_per_model"

    def __init__(self):
        super().__init__()
        self.last_writes: dict[int, tuple] = {}  # device memory -> (prepared model, data it wrote)

    def wrap_prepared(self, prepared):
        return _DeviceMemoryCopies(prepared)


# -- replays_first_path ---------------------------------------------------------------------------

class _CountingRunner:
    """A subgraph runner counting the runs of one subgraph (a WHILE body)."""

    def __init__(self, runner, counted: int):
        self._runner, self._counted, self.count = runner, counted, 0

    def run(self, values, plan):
        self.count += plan == self._counted
        return self._runner.run(values, plan)

    def __getattr__(self, name):
        return getattr(self._runner, name)


class _ReplayedLoop:
    """WHILE: the first execution's trip count, recorded, then the body run that many times."""

    def __init__(self, impl):
        self._impl = impl
        self.trips: int | None = None

    def infer(self, call):
        return self._impl.infer(call)

    def execute(self, call: Call):
        body = call.ins[1].scalar() + 1
        if self.trips is None:
            counting = _CountingRunner(call.runner, body)
            outputs = self._impl.execute(dataclasses.replace(call, runner=counting))
            self.trips = counting.count
            return outputs
        values = [a.value for a in call.ins[2:]]
        state = len(call.runner.plans[body].subgraph.output_indexes)
        for _ in range(self.trips):
            values = call.runner.run(values, body) + values[state:]
        return values[:len(call.outs)]

    def __getattr__(self, name):
        return getattr(self._impl, name)


class ReplaysFirstPath(BrokenDevice):
    """Control flow traced once: the first execution's IF branches and WHILE trip counts are
    what every later execution of the prepared model runs."""

    FAULT = "replays_first_path"

    def operation_fault(self, code, impl):
        if code == OperationCode.WHILE:
            return _ReplayedLoop(impl)
        if code != OperationCode.IF:
            return impl
        first: dict = {}

        def first_condition(call: Call) -> Call:
            condition = first.setdefault("condition", call.ins[0])
            return dataclasses.replace(call, ins=[condition] + list(call.ins[1:]))
        return _WrappedOperation(impl, lambda call, outputs: outputs, first_condition)


# -- timing_in_microseconds -----------------------------------------------------------------------

def _in_microseconds(value: int) -> int:
    return value if value == hal.NO_TIME else value // 1000


def _timing_in_microseconds(timing: hal.Timing) -> hal.Timing:
    return hal.Timing(_in_microseconds(timing.time_on_device_ns), _in_microseconds(timing.time_in_driver_ns))


class _MicrosecondTiming(ReferencePreparedModel):
    def __init__(self, prepared: ReferencePreparedModel):
        super().__init__(prepared.device, prepared.model, prepared.plans)

    def _run(self, request, measure, deadline_ns, loop_timeout_ns):
        result = super()._run(request, measure, deadline_ns, loop_timeout_ns)
        timing = result.timing
        return hal.ExecutionResult(result.output_shapes, _timing_in_microseconds(timing))

    def execute_fenced(self, request, wait_for, measure, deadline_ns, loop_timeout_ns, timeout_after_fence_ns):
        fence, callback = super().execute_fenced(request, wait_for, measure, deadline_ns, loop_timeout_ns,
                                                 timeout_after_fence_ns)
        launched, fenced, status = callback.get_execution_info()
        converted = hal.FencedExecutionCallback()
        converted.finish(status, _timing_in_microseconds(launched), _timing_in_microseconds(fenced))
        return fence, converted


class TimingInMicroseconds(BrokenDevice):
    """Measured durations in the device's clock unit, microseconds, where NNAPI wants nanoseconds."""

    FAULT = "timing_in_microseconds"

    def wrap_prepared(self, prepared):
        return _MicrosecondTiming(prepared)


# -- one_program_slot -------------------------------------------------------------------------------

INPUT_TRANSFER_S = 0.001  # the time the inputs take to reach the device, after the program is loaded


class _SlotProgram(ReferencePreparedModel):
    def __init__(self, prepared: ReferencePreparedModel):
        super().__init__(prepared.device, prepared.model, prepared.plans)

    def _executor(self, deadline_ns, loop_timeout_ns):
        return deadline_ns, loop_timeout_ns

    def _compute(self, executor, inputs):
        device = self.device
        if device.loaded is not self:
            device.loaded = self
        time.sleep(INPUT_TRANSFER_S)
        program = device.loaded  # whatever is loaded now: the check and the run are not one step
        return super()._compute(Executor(program.plans, program.model.relax_computation_float32_to_float16,
                                         *executor), inputs)


class OneProgramSlot(BrokenDevice):
    """One program loaded on the device at a time, without a lock: preparing a model loads it, an
    execution loads its own if another is loaded, then moves its inputs and runs the loaded one."""

    FAULT = "one_program_slot"

    def __init__(self):
        super().__init__()
        self.loaded: ReferencePreparedModel | None = None

    def wrap_prepared(self, prepared):
        self.loaded = _SlotProgram(prepared)
        return self.loaded


# -- caches_by_graph --------------------------------------------------------------------------------

def _graph_digest(model: hal.Model) -> str:
    """A digest of a model's graph: operations, connections, operand types and shapes; no values."""
    parts = []
    for sg in [model.main] + list(model.referenced):
        parts.append(repr([(int(o.type), o.dimensions, o.scale, o.zero_point, int(o.lifetime)) for o in sg.operands]))
        parts.append(repr([(int(op.type), op.inputs, op.outputs) for op in sg.operations]))
        parts.append(repr((sg.input_indexes, sg.output_indexes)))
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


class CachesByGraph(BrokenDevice):
    FAULT = "caches_by_graph"

    def __init__(self):
        super().__init__()
        self._programs: dict[str, ReferencePreparedModel] = {}
        self._lock = threading.Lock()

    def prepare_model(self, model, preference, priority, deadline_ns, model_cache, data_cache, token):
        if token is None:
            return super().prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token)
        key = _graph_digest(model)
        with self._lock:
            program = self._programs.get(key)
        if program is None:
            program = super().prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token)
            with self._lock:
                self._programs[key] = program
        return program


# -- leaks_fence_fd ---------------------------------------------------------------------------------

class _FenceFdLeak(ReferencePreparedModel):
    def __init__(self, prepared: ReferencePreparedModel):
        super().__init__(prepared.device, prepared.model, prepared.plans)

    def execute_fenced(self, request, wait_for, measure, deadline_ns, loop_timeout_ns, timeout_after_fence_ns):
        result = super().execute_fenced(request, wait_for, measure, deadline_ns, loop_timeout_ns,
                                        timeout_after_fence_ns)
        signalled, written = os.pipe()  # the sync fence's file descriptors: the one to signal is closed,
        os.close(written)               # the one a waiter would poll is forgotten
        self.device.fences.append(signalled)
        return result


class LeaksFenceFd(BrokenDevice):
    FAULT = "leaks_fence_fd"

    def __init__(self):
        super().__init__()
        self.fences: list[int] = []

    def wrap_prepared(self, prepared):
        return _FenceFdLeak(prepared)


# -- float16_accumulator ----------------------------------------------------------------------------

F16 = np.float16


def _f16_sum(values: np.ndarray, axis, keepdims: bool = False) -> np.ndarray:
    """A sum rounded to float16 after every addition (numpy's own float16 sums add in float32)."""
    axes = tuple(a % values.ndim for a in (axis if isinstance(axis, tuple) else (axis,)))
    kept = [a for a in range(values.ndim) if a not in axes]
    terms = np.transpose(values.astype(F16), kept + list(axes)).reshape([values.shape[a] for a in kept] + [-1])
    total = np.zeros(terms.shape[:-1], F16)
    for k in range(terms.shape[-1]):
        total = (total + terms[..., k]).astype(F16)
    if keepdims:
        total = total.reshape([1 if a in axes else values.shape[a] for a in range(values.ndim)])
    return total


class Float16Accumulator(BrokenDevice):
    """float16 operations accumulate in a float16 register, as a GPU's half-precision path does."""

    FAULT = "float16_accumulator"

    def operation_fault(self, code, impl):
        if code not in (OperationCode.L2_NORMALIZATION, OperationCode.MEAN, OperationCode.FULLY_CONNECTED):
            return impl

        def fault(call: Call, outputs):
            if call.outs[0].type != T.TENSOR_FLOAT16:
                return outputs
            x = np.asarray(call.ins[0].value, F16)
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                if code == OperationCode.L2_NORMALIZATION:
                    axis = int(call.ins[1].scalar()) if len(call.ins) > 1 else -1
                    result = x / np.sqrt(_f16_sum(x * x, axis, keepdims=True))
                elif code == OperationCode.MEAN:
                    axes = tuple(int(a) % x.ndim for a in np.asarray(call.ins[1].value).reshape(-1))
                    count = F16(np.prod([x.shape[a] for a in set(axes)]))
                    result = _f16_sum(x, axes, keepdims=bool(call.ins[2].scalar())) / count
                else:
                    if int(call.ins[3].scalar()) != 0:  # a fused activation: left to the reference
                        return outputs
                    weights = np.asarray(call.ins[1].value, F16)
                    rows = x.reshape(-1, weights.shape[1])
                    result = _f16_sum(rows[:, None, :] * weights[None, :, :], 2) + np.asarray(call.ins[2].value, F16)
            return [np.asarray(result, F16).reshape(np.shape(outputs[0]))] + list(outputs[1:])
        return _WrappedOperation(impl, fault)


writes_past_output = WritesPastOutput
flushes_constant_memory = FlushesConstantMemory
device_memory_per_model = DeviceMemoryPerModel
replays_first_path = ReplaysFirstPath
timing_in_microseconds = TimingInMicroseconds
one_program_slot = OneProgramSlot
caches_by_graph = CachesByGraph
leaks_fence_fd = LeaksFenceFd
float16_accumulator = Float16Accumulator

ALL = {cls.FAULT: cls for cls in (WrongAddQuant8, WrongAddQuant8ByOne, WrongAddQuant8Sparse, OffByOneRounding,
                                  Float16Arithmetic, WrongOutputShape, AcceptsInvalidModel, RaisesOnInvalidModel,
                                  BadTiming, BurstCachesPool, SharedScratch, KeepsFirstShape, IgnoresExtensionPrefix,
                                  CrashesOnExtensionData, AcceptsUnsupportedExtension, DilatedDepthwiseMultiplier,
                                  WrongOnLargeTensors, RelaxedBfloat16, NmsLimitPerClass,
                                  ProposalsClipLastPixel, HardwareBufferOffset, HardwareBufferUnchecked,
                                  WritesPastOutput, FlushesConstantMemory, DeviceMemoryPerModel, ReplaysFirstPath,
                                  TimingInMicroseconds, OneProgramSlot, CachesByGraph, LeaksFenceFd,
                                  Float16Accumulator, ExtensionColumnMajor, AddQuant8Truncating)}
