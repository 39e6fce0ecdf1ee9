"""The driver interface: what an NNAPI driver implements, modelled on NN HAL 1.3 and the AIDL HAL.

Read this module top to bottom to write a driver. The runtime (``nnapi_ref.runtime``) reaches a
driver only through the classes at the end (:class:`Device`, :class:`PreparedModel`,
:class:`IBurst`, :class:`Buffer`); the data classes before them are the canonical types that
travel across the interface.

Names are those of AOSP's canonical interface (``nn::Model``, ``nn::Request``, ``IBurst``...), where
the runtime's NDK objects have names of their own: :class:`Model` is the canonical model a driver
receives, which ``nnapi_ref.Model`` (the NDK's ANeuralNetworksModel, a builder) produces when
finished; :class:`IBurst` is a driver's burst, which ``nnapi_ref.Burst`` (ANeuralNetworksBurst)
configures per prepared model; :class:`Operation` is one operation of a subgraph, declared by an
``nnapi_ref.ops.OperationRegistration``.

Conventions (the HAL's, in Python form):

* A call that fails raises :class:`HalError` carrying an :class:`ErrorStatus`, the way a HAL call
  returns a non-NONE status. Any other exception escaping a driver is treated by the runtime as
  GENERAL_FAILURE.
* Times are nanoseconds. A deadline is an absolute ``time.monotonic_ns()`` value or ``None``.
* A driver must validate every model and request it is given and reject invalid ones with
  INVALID_ARGUMENT (VTS checks this directly, without the runtime in between).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Callable, Sequence

import numpy as np

from nnapi_ref.types import DeviceTypeCode, Lifetime, OperandCode, OperationCode, PreferenceCode, PriorityCode


class ErrorStatus(IntEnum):
    NONE = 0
    DEVICE_UNAVAILABLE = 1
    GENERAL_FAILURE = 2
    OUTPUT_INSUFFICIENT_SIZE = 3
    INVALID_ARGUMENT = 4
    MISSED_DEADLINE_TRANSIENT = 5
    MISSED_DEADLINE_PERSISTENT = 6
    RESOURCE_EXHAUSTED_TRANSIENT = 7
    RESOURCE_EXHAUSTED_PERSISTENT = 8
    DEAD_OBJECT = 10000  # transport failure: the driver process died


class HalError(Exception):
    """A failed driver call. ``output_shapes`` accompanies OUTPUT_INSUFFICIENT_SIZE."""

    def __init__(self, status: ErrorStatus, message: str = "",
                 output_shapes: list[OutputShape] | None = None):
        super().__init__(f"{ErrorStatus(status).name}: {message}")
        self.status = ErrorStatus(status)
        self.message = message
        self.output_shapes = output_shapes or []


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChannelQuant:
    """Per-channel quantization of a TENSOR_QUANT8_SYMM_PER_CHANNEL operand."""

    scales: tuple[float, ...]
    channel_dim: int


@dataclass
class Operand:
    """One operand of a subgraph.

    ``dimensions`` is ``()`` for scalars and for tensors of unknown rank; a 0 entry is an
    unknown dimension. ``value`` holds a constant's data as a numpy array of the operand's
    element type (for CONSTANT_REFERENCE, a view of the caller's memory), or, for a SUBGRAPH
    operand, the index of the referenced subgraph.
    """

    type: OperandCode
    dimensions: tuple[int, ...] = ()
    scale: float = 0.0
    zero_point: int = 0
    lifetime: Lifetime = Lifetime.TEMPORARY_VARIABLE
    value: Any = None
    channel_quant: ChannelQuant | None = None
    extension_data: bytes | None = None  # an extension operand's extra parameters (opaque to the runtime)


@dataclass
class Operation:
    type: OperationCode
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass
class Subgraph:
    operands: list[Operand]
    operations: list[Operation]
    input_indexes: tuple[int, ...]
    output_indexes: tuple[int, ...]


@dataclass(frozen=True)
class ExtensionNameAndPrefix:
    """Which extension an operand or operation type's high 16 bits (its prefix) stand for."""

    name: str
    prefix: int


@dataclass(frozen=True)
class TokenValuePair:
    """A compilation or execution hint (the AIDL HAL's TokenValuePair, from the NDK's
    addExtensionAttribute): ``token`` is an extension's prefix in the high 16 bits and the
    attribute's code within the extension in the low 16; ``value`` is opaque bytes. A driver may
    ignore hints; it must not fail on one it does not understand."""

    token: int
    value: bytes


@dataclass(frozen=True)
class Hints:
    """The hints of one compilation or execution, with the prefixes their tokens use."""

    hints: tuple[TokenValuePair, ...] = ()
    extension_name_to_prefix: tuple[ExtensionNameAndPrefix, ...] = ()


NO_HINTS = Hints()


@dataclass
class Model:
    """A model as a driver receives it: the main subgraph and those IF/WHILE refer to.

    An operand or operation type of ``(prefix << 16) | type`` with a non-zero prefix is type
    ``type`` of the extension ``extension_name_to_prefix`` names for ``prefix`` (see
    :mod:`nnapi_ref.extensions`); the prefixes are the model's own, not fixed per extension."""

    main: Subgraph
    referenced: list[Subgraph] = field(default_factory=list)
    relax_computation_float32_to_float16: bool = False
    extension_name_to_prefix: list[ExtensionNameAndPrefix] = field(default_factory=list)


def step_model(model: Model, operations: list[int]) -> tuple[Model, list[int], list[int]]:
    """The sub-model running ``operations`` of ``model.main`` (what one step of an execution plan
    sends to its device), with the main operand indexes of its inputs and outputs."""
    main = model.main
    inside = set(operations)
    produced = {k for j in operations for k in main.operations[j].outputs}
    consumed_outside = {k for j, op in enumerate(main.operations) if j not in inside for k in op.inputs}
    consumed_outside |= set(main.output_indexes)
    remap: dict[int, int] = {}
    operands: list[Operand] = []
    inputs, outputs = [], []
    for j in operations:
        for k in list(main.operations[j].inputs) + list(main.operations[j].outputs):
            if k in remap:
                continue
            o = main.operands[k]
            copy = Operand(o.type, o.dimensions, o.scale, o.zero_point, o.lifetime, o.value, o.channel_quant,
                           o.extension_data)
            if o.lifetime in (Lifetime.SUBGRAPH_INPUT, Lifetime.TEMPORARY_VARIABLE, Lifetime.SUBGRAPH_OUTPUT):
                if k in produced:
                    copy.lifetime = Lifetime.SUBGRAPH_OUTPUT if k in consumed_outside else Lifetime.TEMPORARY_VARIABLE
                else:
                    copy.lifetime = Lifetime.SUBGRAPH_INPUT
            remap[k] = len(operands)
            operands.append(copy)
            if copy.lifetime == Lifetime.SUBGRAPH_INPUT:
                inputs.append(k)
            elif copy.lifetime == Lifetime.SUBGRAPH_OUTPUT:
                outputs.append(k)
    ops = [Operation(main.operations[j].type, tuple(remap[k] for k in main.operations[j].inputs),
                     tuple(remap[k] for k in main.operations[j].outputs)) for j in operations]
    sg = Subgraph(operands, ops, tuple(remap[k] for k in inputs), tuple(remap[k] for k in outputs))
    return (Model(sg, model.referenced, model.relax_computation_float32_to_float16, model.extension_name_to_prefix),
            inputs, outputs)


# ---------------------------------------------------------------------------------------------
# Memory and requests
# ---------------------------------------------------------------------------------------------

HARDWARE_BUFFER_BLOB = "hardware_buffer_blob"
HARDWARE_BUFFER = "hardware_buffer"


@dataclass(frozen=True)
class HardwareBufferDescription:
    """An AHardwareBuffer_Desc as a driver receives it (the runtime's own is
    ``nnapi_ref.runtime.HardwareBufferDesc``, with the same fields): ``format`` 0x21 is BLOB."""

    width: int
    height: int
    layers: int
    format: int
    usage: int
    stride: int


class SharedMemory:
    """A memory pool both the runtime and a driver can read and write.

    ``buffer`` is a writable flat numpy uint8 array over the pool's bytes. ``kind`` is the HAL's
    name for the memory: "ashmem", "mmap_fd", :data:`HARDWARE_BUFFER_BLOB` (an AHardwareBuffer
    of format BLOB: plain bytes, mapped as any shared memory) or :data:`HARDWARE_BUFFER` (an image
    format, ``description`` its AHardwareBuffer_Desc: a driver that cannot consume the format
    fails the execution with GENERAL_FAILURE, as a CPU cannot map it).
    """

    def __init__(self, buffer: np.ndarray, kind: str = "ashmem", description: Any = None):
        self.buffer = buffer
        self.kind = kind
        self.description = description

    @property
    def size(self) -> int:
        return self.buffer.nbytes


class ArgumentLifetime(IntEnum):
    POOL = 0
    NO_VALUE = 1
    POINTER = 2  # in-process drivers only: ``pointer`` is the caller's buffer itself


@dataclass
class RequestArgument:
    """Where one model input or output of an execution lives, and its dimensions if given."""

    lifetime: ArgumentLifetime
    pool_index: int = 0
    offset: int = 0
    length: int = 0
    pointer: Any = None
    dimensions: tuple[int, ...] = ()


@dataclass
class Request:
    """One execution's arguments. A pool is a :class:`SharedMemory` or an int token of a
    driver-allocated :class:`Buffer` (memory domains)."""

    inputs: list[RequestArgument]
    outputs: list[RequestArgument]
    pools: list[Any] = field(default_factory=list)


@dataclass
class OutputShape:
    dimensions: tuple[int, ...]
    is_sufficient: bool = True


NO_TIME = -1  # a Timing field that was not measured


@dataclass(frozen=True)
class Timing:
    time_on_device_ns: int = NO_TIME
    time_in_driver_ns: int = NO_TIME


NO_TIMING = Timing()


@dataclass
class ExecutionResult:
    output_shapes: list[OutputShape]
    timing: Timing = NO_TIMING


# ---------------------------------------------------------------------------------------------
# Capabilities
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PerformanceInfo:
    """Performance relative to the CPU reference: lower is better, 1.0 is the same."""

    exec_time: float = 1.0
    power_usage: float = 1.0


@dataclass
class Capabilities:
    relaxed_float32_to_float16_performance_scalar: PerformanceInfo = PerformanceInfo()
    relaxed_float32_to_float16_performance_tensor: PerformanceInfo = PerformanceInfo()
    operand_performance: list[tuple[OperandCode, PerformanceInfo]] = field(default_factory=list)
    if_performance: PerformanceInfo = PerformanceInfo()
    while_performance: PerformanceInfo = PerformanceInfo()

    def performance(self, operand_type: OperandCode) -> PerformanceInfo:
        for code, info in self.operand_performance:
            if code == operand_type:
                return info
        return PerformanceInfo(float("inf"), float("inf"))


@dataclass(frozen=True)
class ExtensionOperandTypeInformation:
    """One operand type of an extension: its code within the extension (0-65535), whether it is a
    tensor, and the byte size of the scalar or of one tensor element."""

    type: int
    is_tensor: bool
    byte_size: int


@dataclass(frozen=True)
class Extension:
    """A vendor extension a driver supports (getSupportedExtensions): its name, in reverse domain
    form (``com.example.my_extension``), and the operand types it defines. Its operations are
    not listed: the driver's supported-operations query says which it runs."""

    name: str
    operand_types: tuple[ExtensionOperandTypeInformation, ...] = ()


# ---------------------------------------------------------------------------------------------
# Fences and callbacks
# ---------------------------------------------------------------------------------------------

class SyncFence:
    """A sync fence: signalled once, with success or an error status. Any thread may wait."""

    def __init__(self):
        self._event = threading.Event()
        self.status = ErrorStatus.NONE

    @classmethod
    def signalled(cls, status: ErrorStatus = ErrorStatus.NONE) -> "SyncFence":
        fence = cls()
        fence.signal(status)
        return fence

    def signal(self, status: ErrorStatus = ErrorStatus.NONE) -> None:
        self.status = status
        self._event.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """True once signalled (whatever the status), False if ``timeout_s`` passed first."""
        return self._event.wait(timeout_s)

    def is_signalled(self) -> bool:
        return self._event.is_set()


class ExecutionCallback:
    """Receives the outcome of an asynchronous execution; ``wait`` blocks until it arrives."""

    def __init__(self, on_finish: Callable[["ExecutionCallback"], None] | None = None):
        self._done = threading.Event()
        self._on_finish = on_finish
        self.status = ErrorStatus.NONE
        self.message = ""
        self.output_shapes: list[OutputShape] = []
        self.timing = NO_TIMING

    def notify(self, status: ErrorStatus, output_shapes: list[OutputShape], timing: Timing,
               message: str = "") -> None:
        self.status, self.output_shapes, self.timing, self.message = status, output_shapes, timing, message
        self._done.set()
        if self._on_finish is not None:
            self._on_finish(self)

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._done.wait(timeout_s)


class FencedExecutionCallback:
    """Returned with a fenced execution's fence: its status and timing once the fence fires.

    ``timing_launched`` covers the execution from launch, ``timing_fenced`` from the moment all
    waited-for fences were signalled.
    """

    def __init__(self):
        self._done = threading.Event()
        self.status = ErrorStatus.NONE
        self.timing_launched = NO_TIMING
        self.timing_fenced = NO_TIMING

    def finish(self, status: ErrorStatus, timing_launched: Timing, timing_fenced: Timing) -> None:
        self.status, self.timing_launched, self.timing_fenced = status, timing_launched, timing_fenced
        self._done.set()

    def get_execution_info(self) -> tuple[Timing, Timing, ErrorStatus]:
        self._done.wait()
        return self.timing_launched, self.timing_fenced, self.status


# ---------------------------------------------------------------------------------------------
# Memory domains
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BufferRole:
    """Which input or output of which prepared model a device memory may be used as."""

    model_index: int
    io_index: int
    probability: float = 1.0


@dataclass
class BufferDesc:
    dimensions: tuple[int, ...] = ()


class Buffer:
    """A driver-allocated memory (memory domains): opaque to the runtime except for copies."""

    def copy_to(self, destination: SharedMemory) -> None:
        raise NotImplementedError

    def copy_from(self, source: SharedMemory, dimensions: Sequence[int]) -> None:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------

class IBurst:
    """A reusable execution context for low-latency repeated executions of one prepared model."""

    def execute(self, request: Request, memory_identifier_tokens: Sequence[int], measure: bool,
                deadline_ns: int | None, loop_timeout_ns: int) -> ExecutionResult:
        raise NotImplementedError

    def execute_with_config(self, request: Request, memory_identifier_tokens: Sequence[int], measure: bool,
                            deadline_ns: int | None, loop_timeout_ns: int, hints: Hints) -> ExecutionResult:
        """IBurst::executeSynchronouslyWithConfig: ``execute`` with the execution's hints, which
        this default ignores (as a driver may)."""
        return self.execute(request, memory_identifier_tokens, measure, deadline_ns, loop_timeout_ns)

    def release_memory_resource(self, memory_identifier_token: int) -> None:
        pass


class PreparedModel:
    """A model compiled for a device."""

    def execute_synchronously(self, request: Request, measure: bool, deadline_ns: int | None,
                              loop_timeout_ns: int) -> ExecutionResult:
        raise NotImplementedError

    def execute(self, request: Request, measure: bool, deadline_ns: int | None,
                loop_timeout_ns: int, callback: ExecutionCallback) -> None:
        """Launch an asynchronous execution; report its outcome through ``callback``.

        Raise HalError only when the launch itself fails (for example an invalid request)."""
        raise NotImplementedError

    def execute_fenced(self, request: Request, wait_for: Sequence[SyncFence], measure: bool,
                       deadline_ns: int | None, loop_timeout_ns: int,
                       timeout_after_fence_ns: int | None) -> tuple[SyncFence, FencedExecutionCallback]:
        """Start once every fence in ``wait_for`` is signalled; return a fence that is signalled
        when the outputs are ready, and a callback giving the status and timing."""
        raise NotImplementedError

    def configure_execution_burst(self) -> IBurst:
        raise NotImplementedError

    # With the execution's hints (ANeuralNetworksExecution_addExtensionAttribute; the AIDL HAL's
    # executeSynchronouslyWithConfig / executeFencedWithConfig): the defaults ignore them.
    def execute_synchronously_with_config(self, request: Request, measure: bool, deadline_ns: int | None,
                                          loop_timeout_ns: int, hints: Hints) -> ExecutionResult:
        return self.execute_synchronously(request, measure, deadline_ns, loop_timeout_ns)

    def execute_with_config(self, request: Request, measure: bool, deadline_ns: int | None, loop_timeout_ns: int,
                            callback: ExecutionCallback, hints: Hints) -> None:
        self.execute(request, measure, deadline_ns, loop_timeout_ns, callback)

    def execute_fenced_with_config(self, request: Request, wait_for: Sequence[SyncFence], measure: bool,
                                   deadline_ns: int | None, loop_timeout_ns: int, timeout_after_fence_ns: int | None,
                                   hints: Hints) -> tuple[SyncFence, FencedExecutionCallback]:
        return self.execute_fenced(request, wait_for, measure, deadline_ns, loop_timeout_ns, timeout_after_fence_ns)


class Device:
    """An NNAPI driver (IDevice). Subclass it and override every method."""

    def get_name(self) -> str:
        raise NotImplementedError

    def get_version_string(self) -> str:
        raise NotImplementedError

    def get_type(self) -> DeviceTypeCode:
        raise NotImplementedError

    def get_feature_level(self) -> int:
        raise NotImplementedError

    def get_capabilities(self) -> Capabilities:
        raise NotImplementedError

    def get_supported_extensions(self) -> list[Extension]:
        """The vendor extensions this driver supports (docs/extensions.md). A model using any
        other extension is valid, its operations unsupported; prepare rejects it."""
        return []

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        """(model cache files, data cache files); (0, 0) if the driver does no caching."""
        return (0, 0)

    def get_supported_operations(self, model: Model) -> list[bool]:
        """One flag per operation of ``model.main``. Raise INVALID_ARGUMENT for an invalid model."""
        raise NotImplementedError

    def prepare_model(self, model: Model, preference: PreferenceCode, priority: PriorityCode,
                      deadline_ns: int | None, model_cache: Sequence[Any], data_cache: Sequence[Any],
                      token: bytes | None) -> PreparedModel:
        """Compile ``model``. ``model_cache``/``data_cache`` are writable binary files (as many
        as get_number_of_cache_files_needed says) to save the compilation to under ``token``."""
        raise NotImplementedError

    def prepare_model_with_config(self, model: Model, preference: PreferenceCode, priority: PriorityCode,
                                  deadline_ns: int | None, model_cache: Sequence[Any], data_cache: Sequence[Any],
                                  token: bytes | None, hints: Hints) -> PreparedModel:
        """IDevice::prepareModelWithConfig: ``prepare_model`` with the compilation's hints
        (ANeuralNetworksCompilation_addExtensionAttribute), which this default ignores."""
        return self.prepare_model(model, preference, priority, deadline_ns, model_cache, data_cache, token)

    def prepare_model_from_cache(self, deadline_ns: int | None, model_cache: Sequence[Any],
                                 data_cache: Sequence[Any], token: bytes) -> PreparedModel:
        raise HalError(ErrorStatus.GENERAL_FAILURE, "caching not supported")

    def allocate(self, desc: BufferDesc, prepared_models: Sequence[PreparedModel],
                 input_roles: Sequence[BufferRole], output_roles: Sequence[BufferRole]) -> tuple[Buffer, int]:
        """Allocate device memory usable in the given roles; return it with a non-zero token."""
        raise HalError(ErrorStatus.GENERAL_FAILURE, "memory domains not supported")
