"""The remote-driver wire format: frames, primitive encodings and the HAL types on the wire.

``docs/remote-protocol.md`` is the specification; this module is its Python implementation,
shared by the client and the server. Decoding never executes or trusts what it reads: every
length is checked against what is left of the frame, and every failure is a
:class:`ProtocolError`.
"""
from __future__ import annotations

import functools
import struct
from enum import IntEnum

import numpy as np

from nnapi_ref import hal
from nnapi_ref.types import DTYPES, DeviceTypeCode, Lifetime, OperandCode, OperationCode

VERSION = 3  # the newest version this side speaks; HELLO settles on the client's if the server has it
OLDEST_VERSION = 2  # 2: vendor extensions (declarations, extension data, the prefix mapping)
HARDWARE_BUFFER_POOL_VERSION = 3  # request pools that are hardware buffers, with their description
HINTS_VERSION = 3  # compilation and execution hints (addExtensionAttribute) in PREPARE_MODEL and executions
MAGIC = b"NNTS"
HEADER = struct.Struct("<IIQ")  # length of what follows the length field, message type, call id
MAX_FRAME = 1 << 28             # what a server accepts from a client (models with inline constants)
MAX_REPLY = 1 << 24             # what a client accepts from a server (replies are small)
INLINE_LIMIT = 4096             # constants up to this many bytes travel in the message itself


class Msg(IntEnum):
    # client -> server; replied to unless marked otherwise
    HELLO = 1
    GET_SUPPORTED_OPERATIONS = 2
    PREPARE_MODEL = 3
    PREPARE_MODEL_FROM_CACHE = 4
    EXECUTE_SYNC = 5
    EXECUTE_ASYNC = 6
    EXECUTE_FENCED = 7
    CONFIGURE_BURST = 8
    BURST_EXECUTE = 9
    BURST_RELEASE_MEMORY = 10
    ALLOCATE = 11
    BUFFER_COPY_TO = 12
    BUFFER_COPY_FROM = 13
    TRACE_START = 14     # optional: a server without tracing answers ERROR
    TRACE_COLLECT = 15
    REGION_ADD = 20      # no reply
    REGION_REMOVE = 21   # no reply
    RELEASE = 22         # no reply
    # server -> client, carrying the call id of the request they answer
    ERROR = 100
    DEVICE_INFO = 101
    SUPPORTED = 102
    PREPARED = 103
    EXECUTED = 104
    LAUNCHED = 105
    EXECUTION_DONE = 106
    FENCED_DONE = 107
    BURST = 108
    BUFFER = 109
    OK = 110
    TRACE_CLOCK = 111
    TRACE_SPANS = 112


NO_REPLY = frozenset({Msg.REGION_ADD, Msg.REGION_REMOVE, Msg.RELEASE})

# The trace phase of a request's IPC spans (client and server; the others are not traced).
IPC_PHASES = {Msg.HELLO: "initialization", Msg.GET_SUPPORTED_OPERATIONS: "compilation",
              Msg.PREPARE_MODEL: "compilation", Msg.PREPARE_MODEL_FROM_CACHE: "compilation",
              Msg.EXECUTE_SYNC: "compute", Msg.EXECUTE_ASYNC: "compute", Msg.EXECUTE_FENCED: "compute",
              Msg.BURST_EXECUTE: "compute", Msg.CONFIGURE_BURST: "execution", Msg.ALLOCATE: "execution",
              Msg.BUFFER_COPY_TO: "io", Msg.BUFFER_COPY_FROM: "io"}


class ProtocolError(Exception):
    """A frame that does not follow the protocol."""


class EncodeError(Exception):
    """A value the wire cannot carry (a negative index, an unknown pool kind): the client
    rejects the call with INVALID_ARGUMENT, as a HAL conversion would."""


# ---------------------------------------------------------------------------------------------
# Primitives
# ---------------------------------------------------------------------------------------------

_U8, _U32, _I32, _I64, _U64, _F32 = (struct.Struct(f) for f in ("<B", "<I", "<i", "<q", "<Q", "<f"))


class Writer:
    """Builds one message body."""

    def __init__(self):
        self.parts: list[bytes] = []

    def u8(self, v: int) -> None:
        self.parts.append(_U8.pack(v))

    def u32(self, v) -> None:
        v = int(v)
        if not 0 <= v < 1 << 32:
            raise EncodeError(f"{v} does not fit an unsigned 32-bit field")
        self.parts.append(_U32.pack(v))

    def i32(self, v) -> None:
        v = int(v)
        if not -(1 << 31) <= v < 1 << 31:
            raise EncodeError(f"{v} does not fit a signed 32-bit field")
        self.parts.append(_I32.pack(v))

    def i64(self, v: int) -> None:
        self.parts.append(_I64.pack(v))

    def u64(self, v: int) -> None:
        self.parts.append(_U64.pack(v))

    def f32(self, v: float) -> None:
        self.parts.append(_F32.pack(v))

    def bytes(self, v) -> None:
        self.u32(len(v))
        self.parts.append(bytes(v))

    def str(self, v: str) -> None:
        self.bytes(v.encode("utf-8"))

    def u32_list(self, values) -> None:
        values = [int(v) for v in values]
        if any(not 0 <= v < 1 << 32 for v in values):
            raise EncodeError(f"{values} has an entry outside the unsigned 32-bit range")
        self.parts.append(_U32.pack(len(values)) + struct.pack(f"<{len(values)}I", *values))

    def type_code(self, v) -> None:
        """An operand or operation type: 32 bits, an extension's prefix in the high 16 (a
        prefix from 0x8000 reads as a negative i32, which is how it travels)."""
        v = int(v)
        if not -(1 << 31) <= v < 1 << 32:
            raise EncodeError(f"type {v} does not fit 32 bits")
        self.i32(v - (1 << 32) if v >= 1 << 31 else v)

    def optional_i64(self, v: int | None) -> None:
        if v is None:
            self.u8(0)
        else:
            self.parts.append(b"\x01" + _I64.pack(v))

    def optional_bytes(self, v) -> None:
        if v is None:
            self.u8(0)
        else:
            self.u8(1)
            try:
                self.bytes(v)
            except TypeError:
                raise EncodeError(f"{type(v).__name__} where bytes are expected") from None

    def finish(self, msg: int, call_id: int) -> bytes:
        body = b"".join(self.parts)
        return HEADER.pack(12 + len(body), msg, call_id) + body


class Reader:
    """Reads one message body; every read is bounds-checked."""

    def __init__(self, body: bytes | memoryview):
        self.body = memoryview(body)
        self.pos = 0

    def raw(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.body):
            raise ProtocolError(f"message truncated: {n} bytes wanted at offset {self.pos} of {len(self.body)}")
        view = self.body[self.pos:self.pos + n]
        self.pos += n
        return view

    def _unpack(self, s: struct.Struct):
        return self.unpack(s)[0]

    def unpack(self, s: struct.Struct) -> tuple:
        """The fields of a precompiled struct, read at once."""
        if self.pos + s.size > len(self.body):
            raise ProtocolError(f"message truncated at offset {self.pos} of {len(self.body)}")
        values = s.unpack_from(self.body, self.pos)
        self.pos += s.size
        return values

    def u8(self) -> int:
        return self._unpack(_U8)

    def u32(self) -> int:
        return self._unpack(_U32)

    def i32(self) -> int:
        return self._unpack(_I32)

    def i64(self) -> int:
        return self._unpack(_I64)

    def u64(self) -> int:
        return self._unpack(_U64)

    def f32(self) -> float:
        return self._unpack(_F32)

    def bool(self) -> bool:
        v = self.u8()
        if v > 1:
            raise ProtocolError(f"boolean field holds {v}")
        return bool(v)

    def bytes(self) -> memoryview:
        return self.raw(self.u32())

    def str(self) -> str:
        try:
            return str(self.bytes(), "utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"string is not UTF-8: {e}") from None

    def count(self, item_size: int) -> int:
        """A list length, checked against what is left (``item_size``: the smallest item)."""
        n = self.u32()
        if n * item_size > len(self.body) - self.pos:
            raise ProtocolError(f"list of {n} items longer than the rest of the message")
        return n

    def u32_list(self) -> tuple[int, ...]:
        n = self.count(4)
        return struct.unpack_from(f"<{n}I", self.raw(4 * n)) if n else ()

    def type_code(self) -> int:
        """An operand or operation type (see :meth:`Writer.type_code`): a negative built-in
        type reads as a large extension type, as invalid either way."""
        return self.u32()

    def optional_i64(self) -> int | None:
        return self.i64() if self.bool() else None

    def optional_bytes(self) -> bytes | None:
        return bytes(self.bytes()) if self.bool() else None

    def end(self) -> None:
        if self.pos != len(self.body):
            raise ProtocolError(f"{len(self.body) - self.pos} unread bytes at the end of the message")


# ---------------------------------------------------------------------------------------------
# Regions: shared memory by id, the way the HAL passes hidl_memory / ashmem handles
# ---------------------------------------------------------------------------------------------

_REGION_REF = struct.Struct("<QQQ")


def write_region_ref(w: Writer, ref: tuple[int, int, int]) -> None:
    w.parts.append(_REGION_REF.pack(*ref))


def read_region_ref(r: Reader) -> tuple[int, int, int]:
    return r.unpack(_REGION_REF)


# ---------------------------------------------------------------------------------------------
# Small HAL types
# ---------------------------------------------------------------------------------------------

_TIMING = struct.Struct("<qq")


def write_timing(w: Writer, t: hal.Timing) -> None:
    w.parts.append(_TIMING.pack(t.time_on_device_ns, t.time_in_driver_ns))


def read_timing(r: Reader) -> hal.Timing:
    return hal.Timing(*r.unpack(_TIMING))


def write_output_shapes(w: Writer, shapes) -> None:
    w.u32(len(shapes))
    for s in shapes:
        w.u32_list(s.dimensions)
        w.u8(bool(s.is_sufficient))


def read_output_shapes(r: Reader) -> list[hal.OutputShape]:
    return [hal.OutputShape(r.u32_list(), r.bool()) for _ in range(r.count(5))]


def write_error(w: Writer, e: hal.HalError) -> None:
    w.i32(int(e.status))
    w.str(e.message)
    write_output_shapes(w, e.output_shapes)


def read_error(r: Reader) -> hal.HalError:
    status = r.i32()
    try:
        status = hal.ErrorStatus(status)
    except ValueError:
        raise ProtocolError(f"unknown error status {status}") from None
    if status == hal.ErrorStatus.NONE:
        raise ProtocolError("ERROR message with status NONE")
    error = hal.HalError(status, r.str(), read_output_shapes(r))
    r.end()
    return error


def write_performance(w: Writer, p: hal.PerformanceInfo) -> None:
    w.f32(p.exec_time)
    w.f32(p.power_usage)


def read_performance(r: Reader) -> hal.PerformanceInfo:
    return hal.PerformanceInfo(r.f32(), r.f32())


def write_device_info(w: Writer, device: hal.Device) -> None:
    w.str(device.get_name())
    w.str(device.get_version_string())
    w.i32(int(device.get_type()))
    w.i64(int(device.get_feature_level()))
    caps = device.get_capabilities()
    write_performance(w, caps.relaxed_float32_to_float16_performance_scalar)
    write_performance(w, caps.relaxed_float32_to_float16_performance_tensor)
    w.u32(len(caps.operand_performance))
    for code, info in caps.operand_performance:
        w.i32(int(code))
        write_performance(w, info)
    write_performance(w, caps.if_performance)
    write_performance(w, caps.while_performance)
    extensions = device.get_supported_extensions()
    w.u32(len(extensions))
    for ext in extensions:
        w.str(ext.name)
        w.u32(len(ext.operand_types))
        for info in ext.operand_types:
            w.u32(info.type)
            w.u8(bool(info.is_tensor))
            w.u32(info.byte_size)
    model_files, data_files = device.get_number_of_cache_files_needed()
    w.u32(model_files)
    w.u32(data_files)


def read_device_info(r: Reader) -> dict:
    info = {"name": r.str(), "version": r.str()}
    device_type = r.i32()
    try:
        info["type"] = DeviceTypeCode(device_type)
    except ValueError:
        raise ProtocolError(f"unknown device type {device_type}") from None
    info["feature_level"] = r.i64()
    scalar, tensor = read_performance(r), read_performance(r)
    operand_performance = []
    for _ in range(r.count(12)):
        code = r.i32()
        operand_performance.append((OperandCode(code) if code in OperandCode._value2member_map_ else code,
                                    read_performance(r)))
    info["capabilities"] = hal.Capabilities(scalar, tensor, operand_performance, read_performance(r),
                                            read_performance(r))
    info["extensions"] = [read_extension(r) for _ in range(r.count(8))]
    info["cache_files"] = (r.u32(), r.u32())
    return info


def read_extension(r: Reader) -> hal.Extension:
    name = r.str()
    types = tuple(hal.ExtensionOperandTypeInformation(r.u32(), r.bool(), r.u32()) for _ in range(r.count(9)))
    return hal.Extension(name, types)


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------

VALUE_NONE, VALUE_INLINE, VALUE_REGION, VALUE_SUBGRAPH = 0, 1, 2, 3


def constant_bytes(operand: hal.Operand) -> np.ndarray:
    """A constant's bytes in its operand type's element type (as the executor reads it)."""
    value = operand.value
    dtype = DTYPES.get(operand.type) if operand.type != OperandCode.SUBGRAPH else None
    if dtype is not None and isinstance(value, (np.ndarray, np.generic)) and value.dtype == dtype:
        return np.ascontiguousarray(value).reshape(-1).view(np.uint8)  # already its type: nothing to convert
    if dtype is not None:
        try:
            with np.errstate(all="ignore"):
                value = np.asarray(value, dtype)
        except (TypeError, ValueError):
            value = np.asarray(value)
    else:
        value = np.asarray(value)
    if value.dtype.hasobject:
        raise EncodeError(f"a constant holds Python objects ({value.dtype})")
    return np.ascontiguousarray(value).reshape(-1).view(np.uint8)


# An operand's value and what follows it, in one part for the common forms: no value, or an inline
# constant (kind, offset, length), then no per-channel quantization (u8 0) and no extension data (u8 0).
_NO_VALUE_PLAIN = bytes([VALUE_NONE, 0, 0])
_INLINE = struct.Struct("<BII")
_INLINE_PLAIN = struct.Struct("<BIIBB")


@functools.lru_cache(maxsize=64)
def _operand_head(n: int) -> struct.Struct:
    """An operand's fixed fields with ``n`` dimensions: type code, dimensions, scale, zero point,
    lifetime (as Writer.type_code, u32_list, f32, i32, i32 write them one by one)."""
    return struct.Struct(f"<iI{n}Ifii")


@functools.lru_cache(maxsize=256)
def _operation_layout(n_in: int, n_out: int) -> struct.Struct:
    """An operation: type code, inputs, outputs (as Writer.type_code and u32_list write them)."""
    return struct.Struct(f"<iI{n_in}II{n_out}I")


def write_model(w: Writer, model: hal.Model, place_constant) -> None:
    """``place_constant(raw uint8 array)`` returns a region reference for a large constant."""
    blob: list[bytes] = []
    blob_size = 0

    def write_subgraph(sg: hal.Subgraph) -> None:
        nonlocal blob_size
        w.u32(len(sg.operands))
        for o in sg.operands:
            try:  # the fixed fields in one pack; anything it refuses goes through the checked fields
                dims = o.dimensions
                w.parts.append(_operand_head(len(dims)).pack(o.type, len(dims), *dims, o.scale, o.zero_point,
                                                             o.lifetime))
            except (struct.error, TypeError):
                w.type_code(o.type)
                w.u32_list(o.dimensions)
                w.f32(o.scale)
                w.i32(o.zero_point)
                w.i32(int(o.lifetime))
            plain = o.channel_quant is None and o.extension_data is None
            if o.value is None:
                if plain:  # no value, no per-channel quantization, no extension data: one part
                    w.parts.append(_NO_VALUE_PLAIN)
                    continue
                w.u8(VALUE_NONE)
            elif o.type == OperandCode.SUBGRAPH or o.lifetime == 6:  # a subgraph index
                if not isinstance(o.value, (int, np.integer)):
                    raise EncodeError(f"subgraph reference {o.value!r} is not an index")
                w.u8(VALUE_SUBGRAPH)
                w.u32(o.value)
            else:
                raw = constant_bytes(o)
                if raw.nbytes <= INLINE_LIMIT:
                    offset = blob_size
                    blob.append(raw.tobytes())
                    blob_size += raw.nbytes
                    if plain:
                        w.parts.append(_INLINE_PLAIN.pack(VALUE_INLINE, offset, raw.nbytes, 0, 0))
                        continue
                    w.parts.append(_INLINE.pack(VALUE_INLINE, offset, raw.nbytes))
                else:
                    w.u8(VALUE_REGION)
                    write_region_ref(w, place_constant(raw))
            if o.channel_quant is None:
                w.u8(0)
            else:
                w.u8(1)
                w.u32(len(o.channel_quant.scales))
                for s in o.channel_quant.scales:
                    w.f32(s)
                w.u32(o.channel_quant.channel_dim)
            w.optional_bytes(o.extension_data)
        w.u32(len(sg.operations))
        for op in sg.operations:
            try:
                ins, outs = op.inputs, op.outputs
                w.parts.append(_operation_layout(len(ins), len(outs)).pack(op.type, len(ins), *ins, len(outs), *outs))
            except (struct.error, TypeError):
                w.type_code(op.type)
                w.u32_list(op.inputs)
                w.u32_list(op.outputs)
        w.u32_list(sg.input_indexes)
        w.u32_list(sg.output_indexes)

    write_subgraph(model.main)
    w.u32(len(model.referenced))
    for sg in model.referenced:
        write_subgraph(sg)
    w.u8(bool(model.relax_computation_float32_to_float16))
    w.bytes(b"".join(blob))
    w.u32(len(model.extension_name_to_prefix))
    for entry in model.extension_name_to_prefix:
        w.str(entry.name)
        w.u32(entry.prefix)


def _enum_or_int(enum, value: int):
    return enum(value) if value in enum._value2member_map_ else value


_CODE_AND_COUNT = struct.Struct("<II")   # an operand's type code and number of dimensions
_OPERAND_TAIL = struct.Struct("<fiiB")   # scale, zero point, lifetime, value kind
_operand_codes = OperandCode._value2member_map_
_lifetimes = Lifetime._value2member_map_


def read_model(r: Reader, region_bytes) -> hal.Model:
    """``region_bytes(region ref)`` returns the uint8 array a VALUE_REGION constant lives in."""
    pending: list[tuple[hal.Operand, int, int]] = []  # inline values, resolved once the blob is read

    def read_subgraph() -> hal.Subgraph:
        operands = []
        for _ in range(r.count(23)):  # the smallest operand: no dimensions, value, quantization or data
            code, n = r.unpack(_CODE_AND_COUNT)
            if 4 * n > len(r.body) - r.pos:
                raise ProtocolError(f"list of {n} items longer than the rest of the message")
            dims = struct.unpack_from(f"<{n}I", r.raw(4 * n)) if n else ()
            scale, zero_point, lifetime, kind = r.unpack(_OPERAND_TAIL)
            o = hal.Operand(_operand_codes.get(code, code), dims, scale, zero_point, _lifetimes.get(lifetime, lifetime))
            if kind == VALUE_INLINE:
                pending.append((o, r.u32(), r.u32()))
            elif kind == VALUE_REGION:
                o.value = _typed(region_bytes(read_region_ref(r)), o.type)
            elif kind == VALUE_SUBGRAPH:
                o.value = r.u32()
            elif kind != VALUE_NONE:
                raise ProtocolError(f"unknown operand value kind {kind}")
            if r.bool():
                scales = tuple(r.f32() for _ in range(r.count(4)))
                o.channel_quant = hal.ChannelQuant(scales, r.u32())
            o.extension_data = r.optional_bytes()
            operands.append(o)
        operations = [hal.Operation(_enum_or_int(OperationCode, r.type_code()), r.u32_list(), r.u32_list())
                      for _ in range(r.count(12))]
        return hal.Subgraph(operands, operations, r.u32_list(), r.u32_list())

    main = read_subgraph()
    referenced = [read_subgraph() for _ in range(r.count(16))]
    relax = r.bool()
    blob = r.bytes()
    for o, offset, length in pending:
        if offset + length > len(blob):
            raise ProtocolError(f"inline constant [{offset}, {offset + length}) outside {len(blob)} bytes of values")
        o.value = _typed(np.frombuffer(blob[offset:offset + length], np.uint8), o.type)
    prefixes = [hal.ExtensionNameAndPrefix(r.str(), r.u32()) for _ in range(r.count(8))]
    return hal.Model(main, referenced, relax, prefixes)


def _typed(raw: np.ndarray, code) -> np.ndarray:
    """A constant's bytes as its operand type's elements (raw bytes when that cannot be)."""
    dtype = DTYPES.get(code) if code != OperandCode.SUBGRAPH else None
    if dtype is None or raw.nbytes % dtype.itemsize:
        return raw
    return raw.view(dtype) if raw.ctypes.data % dtype.itemsize == 0 else raw.copy().view(dtype)


def write_hints(w: Writer, hints: hal.Hints) -> None:
    """A compilation's or execution's hints (TokenValuePair) and the prefixes their tokens use."""
    w.u32(len(hints.hints))
    for hint in hints.hints:
        w.type_code(hint.token)
        w.bytes(hint.value)
    w.u32(len(hints.extension_name_to_prefix))
    for entry in hints.extension_name_to_prefix:
        w.str(entry.name)
        w.u32(entry.prefix)


def read_hints(r: Reader) -> hal.Hints:
    hints = tuple(hal.TokenValuePair(r.type_code(), bytes(r.bytes())) for _ in range(r.count(8)))
    prefixes = tuple(hal.ExtensionNameAndPrefix(r.str(), r.u32()) for _ in range(r.count(8)))
    return hal.Hints(hints, prefixes)


# ---------------------------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------------------------

POOL_REGION, POOL_DEVICE_BUFFER, POOL_HARDWARE_BUFFER = 0, 1, 2
HARDWARE_BUFFER_BLOB_FORMAT = 0x21  # AHARDWAREBUFFER_FORMAT_BLOB: plain bytes; any other format is an image


_ARGUMENT = struct.Struct("<iIIII")  # lifetime, pool index, offset, length, number of dimensions
_POINTER = struct.Struct("<BQQQ")    # present, then the region reference
_LIFETIMES = hal.ArgumentLifetime._value2member_map_


def write_argument(w: Writer, arg: hal.RequestArgument, pointer_ref) -> None:
    """``pointer_ref``: the region reference holding a POINTER argument's bytes, or None."""
    dims = arg.dimensions
    try:
        w.parts.append(_ARGUMENT.pack(arg.lifetime, arg.pool_index, arg.offset, arg.length, len(dims)))
        if dims:
            w.parts.append(struct.pack(f"<{len(dims)}I", *dims))
        w.parts.append(b"\0" if pointer_ref is None else _POINTER.pack(1, *pointer_ref))
    except struct.error as e:
        raise EncodeError(f"a request argument that does not fit its fields ({e})") from None


def read_argument(r: Reader, region_bytes) -> hal.RequestArgument:
    lifetime, pool_index, offset, length, n = r.unpack(_ARGUMENT)
    if 4 * n > len(r.body) - r.pos:
        raise ProtocolError(f"list of {n} items longer than the rest of the message")
    dims = struct.unpack_from(f"<{n}I", r.raw(4 * n)) if n else ()
    arg = hal.RequestArgument(_LIFETIMES.get(lifetime, lifetime), pool_index, offset, length, dimensions=dims)
    if r.bool():
        arg.pointer = region_bytes(read_region_ref(r))
    return arg


def write_hardware_buffer_description(w: Writer, desc) -> None:
    """An AHardwareBuffer_Desc: width, height, layers, format, usage, stride."""
    for v in (desc.width, desc.height, desc.layers, desc.format):
        w.u32(v)
    w.u64(int(desc.usage))
    w.u32(desc.stride)


def read_hardware_buffer_description(r: Reader) -> hal.HardwareBufferDescription:
    return hal.HardwareBufferDescription(r.u32(), r.u32(), r.u32(), r.u32(), r.u64(), r.u32())


_OPTIONS = struct.Struct("<BBqQ")             # measure, deadline present, deadline, loop timeout
_OPTIONS_NO_DEADLINE = struct.Struct("<BBQ")  # measure, no deadline, loop timeout


def write_execution_options(w: Writer, measure: bool, deadline: int | None, loop_timeout: int) -> None:
    """An execution's ``measure: bool``, ``deadline: optional<i64>``, ``loop_timeout: u64``."""
    if deadline is None:
        w.parts.append(_OPTIONS_NO_DEADLINE.pack(bool(measure), 0, loop_timeout))
    else:
        w.parts.append(_OPTIONS.pack(bool(measure), 1, deadline, loop_timeout))


def read_request(r: Reader, region_bytes, version: int = VERSION) -> hal.Request:
    inputs = [read_argument(r, region_bytes) for _ in range(r.count(18))]
    outputs = [read_argument(r, region_bytes) for _ in range(r.count(18))]
    pools = []
    for _ in range(r.count(9)):
        kind = r.u8()
        if kind == POOL_REGION:
            pools.append(hal.SharedMemory(region_bytes(read_region_ref(r))))
        elif kind == POOL_DEVICE_BUFFER:
            pools.append(r.u64())
        elif kind == POOL_HARDWARE_BUFFER and version >= HARDWARE_BUFFER_POOL_VERSION:
            buffer = region_bytes(read_region_ref(r))
            desc = read_hardware_buffer_description(r)
            memory_kind = hal.HARDWARE_BUFFER_BLOB if desc.format == HARDWARE_BUFFER_BLOB_FORMAT else hal.HARDWARE_BUFFER
            pools.append(hal.SharedMemory(buffer, memory_kind, desc))
        else:
            raise ProtocolError(f"unknown pool kind {kind}")
    return hal.Request(inputs, outputs, pools)


# ---------------------------------------------------------------------------------------------
# Trace spans (TRACE_START / TRACE_COLLECT, optional): the server's own spans for the client's trace
# ---------------------------------------------------------------------------------------------

MAX_SPANS_PER_REPLY = 20000  # with names cut to MAX_SPAN_NAME bytes, a reply stays under MAX_REPLY
MAX_SPAN_NAME = 200
SPAN_PHASES = ("initialization", "preparation", "compilation", "execution", "io", "compute", "results",
               "termination", "unspecified")
SPAN_LAYERS = ("application", "runtime", "ipc", "driver", "cpu", "other", "utility")


def write_spans(w: Writer, pid: int, process_name: str, threads: dict[int, str], spans, more: bool) -> None:
    """``spans``: (name, phase, layer, start ns, duration ns, thread id), on the server's monotonic clock."""
    w.u32(pid)
    w.str(process_name[:MAX_SPAN_NAME])
    w.u32(len(threads))
    for tid, name in threads.items():
        w.u64(tid)
        w.str(name[:MAX_SPAN_NAME])
    w.u32(len(spans))
    for name, phase, layer, start, duration, tid in spans:
        w.str(name.encode("utf-8")[:MAX_SPAN_NAME].decode("utf-8", "ignore"))
        w.str(phase)
        w.str(layer)
        w.i64(start)
        w.i64(duration)
        w.u64(tid)
    w.u8(more)


def read_spans(r: Reader):
    """(pid, process name, threads, spans, more) of a TRACE_SPANS reply; unknown phases or layers,
    negative durations are malformed."""
    pid, process_name = r.u32(), r.str()
    threads = {}
    for _ in range(r.count(12)):
        tid = r.u64()
        threads[tid] = r.str()
    spans = []
    for _ in range(r.count(36)):
        name, phase, layer, start, duration, tid = r.str(), r.str(), r.str(), r.i64(), r.i64(), r.u64()
        if phase not in SPAN_PHASES or layer not in SPAN_LAYERS:
            raise ProtocolError(f"span {name!r} of unknown phase {phase!r} or layer {layer!r}")
        if duration < 0:
            raise ProtocolError(f"span {name!r} of negative duration {duration}")
        spans.append((name, phase, layer, start, duration, tid))
    return pid, process_name, threads, spans, r.bool()
