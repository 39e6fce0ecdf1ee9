"""Coverage-guided fuzzing harnesses: fuzzer bytes turned into NNAPI calls.

Each harness is a ``TestOneInput(data)`` for atheris / libFuzzer. The first two bytes of an input
pick a seed (a test model of the test-vector corpus, or a test-vector document); the rest feed a
FuzzedDataProvider that replays the seed through the API under test, deciding at every call
whether to keep it or to change it (a type, a dimension, a value, an index, a lifetime, a field
of a message...), and which calls to add. An input of two bytes replays its seed unchanged, so
the corpus is seeded with one such input per test model.

The oracle: every failure must come back as an NNAPI result code (``NnapiError``, ``HalError``,
or ``ProtocolError`` for the remote wire format). Anything else escaping a harness is a finding,
and so is a driver that turned an internal exception into an error code (the exception is the
error's ``__context__``): a driver's own crash masked as GENERAL_FAILURE. A finding against a
driver other than the reference is replayed on the reference driver: where it fails alike, it is
a :class:`ReferenceBug` (inherited from ``nnapi_ref``), reported apart from the driver's findings.

``model``: the runtime's model builder and ``finish()`` validation.
``execute``: the driver under test, straight through the HAL (nothing in between to mask a
fault): supported operations, prepare and execute of the built model, valid or not.
``request``: requests (arguments, lifetimes, pools, offsets, dimensions) against prepared
models, through the HAL and through the runtime's Execution.
``vectors``: ``nnapi_ref.vectors.load_file`` on mutated documents, then model validation.
``remote``: the remote-driver server fed frames: ``nnts serve``'s ``Session`` in process, or, for
a ``remote:``/``socket:`` driver (a native SDK driver), the driver's own server over a connection
of its own per input; and ``wire.read_model`` / ``read_request`` on mutated encodings.
"""
from __future__ import annotations

import copy
import functools
import json
import math
import os
import struct
import tempfile
import threading

import numpy as np

from nnapi_ref import hal, ops, vectors
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.errors import NnapiError
from nnapi_ref.hal import ArgumentLifetime, HalError
from nnapi_ref.remote import wire
from nnapi_ref.remote.client import RemoteDevice
from nnapi_ref.remote.server import Session
from nnapi_ref.runtime import Compilation, Device, Execution, Memory, Model, OperandType
from nnapi_ref.types import (DTYPES, SCALAR_TYPES, ZERO_POINT_RANGE, Lifetime, OperandCode as T, PreferenceCode,
                             PriorityCode)
from nnapi_ref.validation import validate_model
from nnts.formats.paths import CORPUS, SHARED_VECTORS

try:
    from atheris import FuzzedDataProvider
except ImportError:  # the plain random-bytes loop still needs a provider
    FuzzedDataProvider = None

EXPECTED = (NnapiError, HalError, wire.ProtocolError)
SEED_BYTES = 2  # the seed index at the start of every input

# Values that break assumptions: zero, one, negative, word boundaries, huge.
WEIRD_INTS = [0, 1, -1, 2, 3, 255, 256, 65535, 2**31 - 1, 2**31, -2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**64]
WEIRD_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-45, 1e-30, 3.4e38, 1e300, math.inf, -math.inf, math.nan]
LOOP_TIMEOUT_NS = 50_000_000  # WHILE loops the fuzzer writes must not eat the per-input time limit
# The Builder's lifetimes as constants (an enum member lookup is a descriptor call, per operand).
_SUBGRAPH_LIFETIME = Lifetime.SUBGRAPH
_VALUE_LIFETIMES = (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE, Lifetime.NO_VALUE)
_NO_VALUE = Lifetime.NO_VALUE
# A scale and zero point each operand type accepts (nnapi_ref.validation.operand_type_problem): a
# positive scale and a zero point inside the range for the quantized types, 0 and 0 for the others
# (TENSOR_INT32 too; TENSOR_QUANT8_SYMM_PER_CHANNEL takes its scales from set_operand_symm_per_channel_quant_params).
_ACCEPTED_QUANTIZATION = {code: (0.5, (lo + hi + 1) // 2) for code, (lo, hi) in ZERO_POINT_RANGE.items()} | \
    {T.TENSOR_QUANT8_SYMM: (0.5, 0), T.TENSOR_QUANT16_SYMM: (0.5, 0)}
_PER_CHANNEL = T.TENSOR_QUANT8_SYMM_PER_CHANNEL


class Finding(Exception):
    """A failure that is not an NNAPI result code (raised where a harness sees one in a reply)."""


class ReferenceBug(Exception):
    """An input on which the reference driver itself fails the oracle, in the same way as the
    driver under test: a bug of ``nnapi_ref`` that drivers built on it inherit, not a finding
    against the driver under test (``nnts fuzz`` saves it as a ``reference-bug`` artifact)."""


class BytesProvider:
    """The FuzzedDataProvider methods the harnesses use, in plain Python, for where atheris is not
    installed. It reads the bytes front to back (atheris' provider decodes the same bytes
    differently: an artifact replays under the provider that found it)."""

    def __init__(self, data: bytes):
        self._data = data
        self._pos = 0

    def remaining_bytes(self) -> int:
        return len(self._data) - self._pos

    def ConsumeBytes(self, count: int) -> bytes:
        out = self._data[self._pos:self._pos + max(count, 0)]
        self._pos += len(out)
        return out

    def ConsumeIntInRange(self, lo: int, hi: int) -> int:
        span = hi - lo
        if span <= 0:
            return lo
        raw = self.ConsumeBytes((span.bit_length() + 7) // 8)
        return lo + int.from_bytes(raw, "little") % (span + 1)

    def ConsumeBool(self) -> bool:
        return self.ConsumeIntInRange(0, 1) == 1

    def ConsumeFloat(self) -> float:
        raw = self.ConsumeBytes(8)
        return struct.unpack("<d", raw.ljust(8, b"\0"))[0]

    def PickValueInList(self, values):
        return values[self.ConsumeIntInRange(0, len(values) - 1)]


def provider(data: bytes):
    return FuzzedDataProvider(data) if FuzzedDataProvider is not None else BytesProvider(data)


def split(data: bytes, count: int):
    """(seed index, provider over the rest) for an input."""
    return int.from_bytes(data[:SEED_BYTES], "little") % max(count, 1), provider(data[SEED_BYTES:])


def seed_inputs(count: int) -> list[bytes]:
    """One corpus entry per seed: its index, nothing else (replays it unchanged)."""
    return [i.to_bytes(SEED_BYTES, "little") for i in range(min(count, 1 << (8 * SEED_BYTES)))]


def check_masked(error: Exception) -> None:
    """A HAL error a driver made out of an exception of its own is a crash in disguise."""
    context = error.__context__
    if isinstance(error, HalError) and context is not None and not isinstance(context, EXPECTED + (MemoryError,)):
        raise Finding(f"{type(context).__name__} reported as {error}") from context


# -- seeds: the test-vector corpus ------------------------------------------------------------------

def default_vector_paths() -> list[str]:
    """The project corpus (installed with nnts) and ../shared/vectors beside a clone."""
    return [str(p) for p in (CORPUS, SHARED_VECTORS) if p and p.is_dir()]


def _elements(model: hal.Model) -> int:
    return sum(math.prod(o.dimensions) for sg in [model.main] + model.referenced for o in sg.operands)


def load_seeds(paths, max_elements: int) -> list[vectors.TestModel]:
    """The corpus's test models with at most ``max_elements`` elements in all operands (small
    models keep the executions per second up), in file order."""
    seeds = []
    for path in vectors.find_files(paths):
        try:
            tests = vectors.load_file(path)
        except NnapiError:
            continue
        seeds += [t for t in tests if _elements(t.model) <= max_elements]
    return seeds


# -- the model builder, replayed and mutated -----------------------------------------------------------

class Builder:
    """Replays a HAL model through the runtime's builder calls, letting the provider change or add
    calls. Every builder call's NnapiError is expected; the model may end up invalid.

    With ``stop_at_rejected_operand``, the replay of a subgraph's seed operands and operations
    ends at the first operand the runtime refuses (the refused operand's own value call, and the
    fuzzer's added calls, inputs and outputs and ``finish()`` still run). The runtime keeps
    nothing of a refused call, so each later operand of the seed would take the index of the
    one after it: every value set on a later operand names an index past the last (always
    refused, by the check the refused operand's own value call reaches), and the operations
    name shifted operands, as index mutations do (and operations in another order: see
    ``operations``). A model harness spends that time on other inputs. A driver harness keeps
    the whole replay: its driver is handed the malformed model as built."""

    def __init__(self, fdp, max_dim: int, stop_at_rejected_operand: bool = False):
        self.fdp = fdp
        self.max_dim = max_dim
        self.stop_at_rejected_operand = stop_at_rejected_operand
        # mutate(): 0 (keep the call as it is, and what an exhausted provider answers) or a
        # mutation; the provider's own call, with no Python frame between (a dozen per input)
        self.mutate = functools.partial(fdp.ConsumeIntInRange, 0, 7)

    def call(self, fn, *args) -> None:
        try:
            fn(*args)
        except NnapiError:
            pass

    def dims(self, dims) -> tuple:
        fdp = self.fdp
        kind = self.mutate()
        if kind == 0:
            return tuple(dims)
        if kind == 1:
            return tuple(fdp.PickValueInList(WEIRD_INTS) for _ in range(fdp.ConsumeIntInRange(0, 5)))
        if kind == 2 and dims:
            i = fdp.ConsumeIntInRange(0, len(dims) - 1)
            return tuple(dims[:i]) + (fdp.ConsumeIntInRange(0, self.max_dim),) + tuple(dims[i + 1:])
        if kind == 3:
            return tuple(dims[:-1])
        return tuple(fdp.ConsumeIntInRange(0, self.max_dim) for _ in range(fdp.ConsumeIntInRange(0, 4)))

    def spelled(self, dims: tuple) -> list:
        """The dimensions as Python may spell them: a list, of floats, of numpy integers, or with a
        bool first; add_operand converts them as the NDK's uint32_t would take them, or refuses
        them (BAD_DATA). The seed's tuples of ints skip those conversions."""
        kind = self.fdp.ConsumeIntInRange(0, 3)
        if kind == 1:
            return [float(d) for d in dims]
        if kind == 2:
            return [np.int64(d) if -2**63 <= d < 2**63 else d for d in dims]
        if kind == 3:
            return [True] + list(dims[1:])
        return list(dims)

    def operand_type(self, code):
        kind = self.mutate()
        if kind == 0:
            return code
        if kind == 1:
            return self.fdp.PickValueInList(WEIRD_INTS)
        return self.fdp.ConsumeIntInRange(0, 15)

    def scale(self, scale: float) -> float:
        kind = self.mutate()
        return scale if kind == 0 else self.fdp.PickValueInList(WEIRD_FLOATS) if kind < 5 else self.fdp.ConsumeFloat()

    def int_value(self, value: int) -> int:
        kind = self.mutate()
        return value if kind == 0 else self.fdp.PickValueInList(WEIRD_INTS) if kind < 4 else \
            self.fdp.ConsumeIntInRange(-300, 300)

    def value(self, code, dims, value, omitted: bool = False):
        """The bytes of a constant: the seed's (None where the seed's operand is ``omitted``, a
        NO_VALUE one), random ones of the right size, or of a wrong size."""
        kind = self.mutate()
        if kind == 0 and (value is not None or omitted):
            return value
        dtype = DTYPES.get(code)
        count = math.prod(dims) if all(isinstance(d, int) and d >= 0 for d in dims) else 1
        count = count if count <= 1 << 16 else 1  # the size an enormous operand declares is not allocated
        size = (dtype.itemsize if dtype is not None else 1) * count
        if kind == 1:
            return None  # omitted
        if kind == 2:
            size = self.fdp.ConsumeIntInRange(0, size + 8)
        raw = self.fdp.ConsumeBytes(size)
        return raw + bytes(size - len(raw))

    def indexes(self, indexes, operand_count: int) -> list:
        fdp = self.fdp
        kind = self.mutate()
        indexes = list(indexes)
        if kind == 1 and indexes:
            indexes.pop(fdp.ConsumeIntInRange(0, len(indexes) - 1))
        elif kind == 2:
            indexes.append(fdp.ConsumeIntInRange(0, operand_count))
        elif kind == 3 and indexes:
            indexes[fdp.ConsumeIntInRange(0, len(indexes) - 1)] = fdp.PickValueInList(WEIRD_INTS)
        elif kind == 4 and indexes:
            indexes[fdp.ConsumeIntInRange(0, len(indexes) - 1)] = fdp.ConsumeIntInRange(0, operand_count)
        return indexes

    def subgraph(self, model: Model, sg: hal.Subgraph, referenced: list[Model | None]) -> None:
        """Builder calls for ``sg``'s operands and operations (with ``stop_at_rejected_operand``,
        none after the first operand the runtime refuses), calls of the fuzzer's own, then the
        inputs and outputs."""
        # The operation the replay starts from, decided first: one byte after a seed's index
        # gives a valid model whose operations the runtime must sort.
        first = self.fdp.ConsumeIntInRange(0, len(sg.operations) - 1) if len(sg.operations) > 1 else 0
        if self.operands(model, sg, referenced):
            self.operations(model, sg, first)
        for _ in range(self.fdp.ConsumeIntInRange(0, 3)):
            self.random_call(model)
        n = model.operand_count
        inputs, outputs = self.indexes(sg.input_indexes, n), self.indexes(sg.output_indexes, n)
        try:
            model.identify_inputs_and_outputs(inputs, outputs)
        except NnapiError:
            pass

    def operands(self, model: Model, sg: hal.Subgraph, referenced: list[Model | None]) -> bool:
        """The seed's operands and their values; False when the replay stopped at a refused one."""
        mutate = self.mutate
        add_operand, set_operand_value = model.add_operand, model.set_operand_value
        for k, o in enumerate(sg.operands):
            code, dims, scale, zero_point = o.type, o.dimensions, o.scale, o.zero_point
            if mutate():  # one decision per operand keeps an unchanged replay cheap
                code, dims = self.operand_type(code), self.dims(dims)
                scale, zero_point = self.scale(scale), self.int_value(zero_point)
                if mutate() == 1:
                    dims = self.spelled(dims)
            try:
                add_operand(code, dims, scale, zero_point)
            except NnapiError:
                if self.stop_at_rejected_operand:
                    self.refused_value_call(model, k, o, referenced)
                    return False
            if o.channel_quant is not None:
                scales = [self.scale(s) for s in o.channel_quant.scales]
                self.call(model.set_operand_symm_per_channel_quant_params, k, scales,
                          self.int_value(o.channel_quant.channel_dim))
            lifetime = o.lifetime
            if lifetime == _SUBGRAPH_LIFETIME and isinstance(o.value, int) and o.value < len(referenced):
                self.call(model.set_operand_value_from_model, k, referenced[o.value])
            elif lifetime in _VALUE_LIFETIMES:
                value = self.value(code, dims, o.value, lifetime == _NO_VALUE)
                try:
                    set_operand_value(k, value)
                except NnapiError:
                    pass
        return True

    def operations(self, model: Model, sg: hal.Subgraph, first: int = 0) -> None:
        """The seed's operations from the ``first`` one on, wrapping around (another order: a
        model whose operations the runtime must sort), each kept or changed."""
        mutate, fdp = self.mutate, self.fdp
        add_operation, operations = model.add_operation, sg.operations
        for op in operations[first:] + operations[:first]:
            code, inputs, outputs = op.type, op.inputs, op.outputs
            if mutate():
                n = model.operand_count
                code = code if mutate() == 0 else fdp.ConsumeIntInRange(-1, 110)
                inputs, outputs = self.indexes(inputs, n), self.indexes(outputs, n)
            try:
                add_operation(code, inputs, outputs)
            except NnapiError:
                pass

    def rest_is_known(self, referenced: list[Model | None]) -> bool:
        """With ``stop_at_rejected_operand``: whether the provider is exhausted with a referenced
        model left unfinished, so that what is left to build replays the seed unchanged: each
        model naming the unfinished one has that value call refused (and the SUBGRAPH operand
        left without a model, which finish() refuses), up to the main model; the others finish as
        in the seed's own replay. The same calls for every such input of an IF or WHILE seed
        (inputs with bytes left for them still make them): a model harness skips them."""
        return self.stop_at_rejected_operand and self.fdp.remaining_bytes() == 0 and \
            any(m is not None and not m.finished for m in referenced)

    def refused_value_call(self, model: Model, k: int, o: hal.Operand, referenced: list[Model | None]) -> None:
        """The value call of operand ``k`` after the runtime refused the operand: its index is one
        past the last, which each value call must refuse."""
        if o.lifetime == _SUBGRAPH_LIFETIME and isinstance(o.value, int) and o.value < len(referenced):
            self.call(model.set_operand_value_from_model, k, referenced[o.value])
        elif o.lifetime in _VALUE_LIFETIMES:
            self.call(model.set_operand_value, k, o.value)

    def random_call(self, model: Model) -> None:
        """One more builder call: an operation of the registry with fresh operands of one of its
        signatures' types, a value, or an operand."""
        fdp = self.fdp
        kind = fdp.ConsumeIntInRange(0, 3)
        if kind == 0:
            self.random_operation(model)
        elif kind == 1:
            self.call(model.add_operand, self.operand_type(T.TENSOR_FLOAT32), self.dims((1,)), self.scale(0.0),
                      self.int_value(0))
        elif kind == 2 and model.operand_count:
            k = fdp.ConsumeIntInRange(0, model.operand_count - 1)
            self.call(model.set_operand_value, k, self.value(None, (), None))
        else:
            self.call(model.relax_computation_float32_to_float16, fdp.ConsumeBool())

    def random_operation(self, model: Model) -> None:
        """An operation of the registry on fresh operands of one of its signatures' types. A byte
        decides how the operands are made: as their types accept them (0 to 5, and what an
        exhausted provider answers: the operation reaches add_operation's and finish()'s later
        checks), with their scales and zero points mutated (6), or with a value set on the first
        output (7: add_operation refuses an output that has one)."""
        fdp = self.fdp
        impl = ops.load_all()[fdp.PickValueInList(_operation_codes())]
        sig = fdp.PickValueInList(impl.signatures)
        how = self.mutate()
        ins, outs = [], []
        for code in sig.inputs:
            dims = () if code in SCALAR_TYPES else \
                tuple(fdp.ConsumeIntInRange(1, 4) for _ in range(fdp.ConsumeIntInRange(0, 4)))
            ins.append(self.fresh_operand(model, code, dims, mutated=how == 6))
            if code in SCALAR_TYPES or fdp.ConsumeBool():
                self.call(model.set_operand_value, ins[-1], self.value(code, dims, None))
        for position, code in enumerate(sig.outputs):
            valued = how == 7 and position == 0
            dims = (1,) if valued and code not in SCALAR_TYPES else ()  # a tensor value needs dimensions
            outs.append(self.fresh_operand(model, code, dims, mutated=how == 6))
            if valued:
                self.call(model.set_operand_value, outs[-1], self.value(code, dims, None))
        self.call(model.add_operation, impl.code, ins, outs)

    def fresh_operand(self, model: Model, code, dims: tuple, mutated: bool) -> int:
        """Adds an operand of type ``code`` with a scale and zero point the type accepts (and
        per-channel scales on a chosen dimension), each one ``mutated`` as a seed operand's may
        be; its index (the last operand's, where the runtime refused this one)."""
        scale, zero_point = _ACCEPTED_QUANTIZATION.get(code, (0.0, 0))
        if mutated:
            scale, zero_point = self.scale(scale), self.int_value(zero_point)
        self.call(model.add_operand, code, dims, scale, zero_point)
        k = model.operand_count - 1
        if code == _PER_CHANNEL and dims:
            channel_dim = self.fdp.ConsumeIntInRange(0, len(dims) - 1)
            scales = [self.scale(0.5) if mutated else 0.5 for _ in range(dims[channel_dim])]
            self.call(model.set_operand_symm_per_channel_quant_params, k, scales, channel_dim)
        return k

    def build(self, seed: hal.Model) -> Model:
        """The runtime model (finished when it passed validation)."""
        referenced: list[Model | None] = [None] * len(seed.referenced)
        # Referenced subgraphs first, innermost first: a subgraph only refers to built ones.
        for _ in range(len(seed.referenced)):
            for i, sg in enumerate(seed.referenced):
                inner = [o.value for o in sg.operands if o.lifetime == Lifetime.SUBGRAPH]
                if referenced[i] is None and all(isinstance(v, int) and v < len(referenced) and
                                                 referenced[v] is not None for v in inner):
                    if self.rest_is_known(referenced):
                        return Model()
                    referenced[i] = Model()
                    self.subgraph(referenced[i], sg, referenced)
                    self.call(referenced[i].finish)
        model = Model()
        if self.rest_is_known(referenced):
            return model
        self.subgraph(model, seed.main, referenced)
        relax = seed.relax_computation_float32_to_float16
        model.relax_computation_float32_to_float16(relax if self.mutate() == 0 else not relax)  # refuses nothing
        try:
            model.finish()
        except NnapiError:
            pass
        return model


@functools.cache
def _operation_codes() -> list:
    """The registry's operation codes, in order (what random_call picks from)."""
    return sorted(ops.load_all())


def hal_model(model: Model) -> hal.Model:
    """The model a driver receives: the finished one, or the unvalidated one as built."""
    return model.hal_model if model.finished else model._to_hal()


# -- harnesses ---------------------------------------------------------------------------------------------

class Harness:
    """A harness: ``setup()`` once per process, then ``__call__(data)`` per input."""

    name = ""
    max_elements = 4096  # seed models larger than this are left out

    def __init__(self, driver: hal.Device | None = None, vector_paths=None):
        self.driver = driver
        self.vector_paths = default_vector_paths() if vector_paths is None else list(vector_paths)
        self.seeds: list = []

    def setup(self) -> None:
        self.seeds = load_seeds(self.vector_paths, self.max_elements)

    def seed_inputs(self) -> list[bytes]:
        return seed_inputs(len(self.seeds))

    def __call__(self, data: bytes) -> None:
        try:
            self.checked(data)
        except MemoryError:
            raise
        except Exception as e:
            if self.driver is not None and type(self.driver) is not ReferenceDevice and \
                    self.reference_fails_alike(data, e):
                raise ReferenceBug(f"the reference driver itself raises {type(e).__name__} on this input "
                                   f"({e}): a bug of nnapi_ref, not of the driver under test") from e
            raise

    def checked(self, data: bytes) -> None:
        """One input; raises on a finding."""
        try:
            self.run(data)
        except EXPECTED as e:
            check_masked(e)

    def reference_fails_alike(self, data: bytes, error: Exception) -> bool:
        """Whether this harness on the reference driver raises the same kind of exception on
        ``data`` (the reference, set up the first time a finding needs it)."""
        if not hasattr(self, "_reference"):
            self._reference = type(self)(ReferenceDevice(), self.vector_paths)
            self._reference.setup()
        try:
            self._reference.checked(data)
        except Exception as e:
            return type(e) is type(error)
        return False

    def run(self, data: bytes) -> None:
        raise NotImplementedError


class ModelHarness(Harness):
    """Model building and ``finish()`` validation (the runtime only: no driver)."""

    name = "model"

    def run(self, data: bytes) -> None:
        if not self.seeds:
            return
        index, fdp = split(data, len(self.seeds))
        Builder(fdp, max_dim=2**31, stop_at_rejected_operand=True).build(self.seeds[index].model)


class ExecuteHarness(Harness):
    """Supported operations, prepare and execute on the driver under test, through the HAL."""

    name = "execute"
    max_elements = 1024

    def run(self, data: bytes) -> None:
        if not self.seeds:
            return
        index, fdp = split(data, len(self.seeds))
        model = Builder(fdp, max_dim=8).build(self.seeds[index].model)
        hal_m = hal_model(model)
        self.driver.get_supported_operations(hal_m)
        prepared = self.driver.prepare_model(hal_m, PreferenceCode.FAST_SINGLE_ANSWER, PriorityCode.MEDIUM,
                                             None, [], [], None)
        request = valid_request(hal_m.main, fdp, values=True)
        prepared.execute_synchronously(request, fdp.ConsumeBool(), None, LOOP_TIMEOUT_NS)


def _size(operand: hal.Operand, fdp) -> int:
    """Bytes for an argument of ``operand``: its size where known, else what the provider says."""
    itemsize = DTYPES[operand.type].itemsize if operand.type in DTYPES else 1
    if operand.type in SCALAR_TYPES:
        return itemsize
    dims = operand.dimensions
    if dims and 0 not in dims and math.prod(dims) <= 1 << 16:
        return itemsize * math.prod(dims)
    return itemsize * fdp.ConsumeIntInRange(0, 64)


def valid_request(sg: hal.Subgraph, fdp, values: bool) -> hal.Request:
    """A request with every input and output in one pool, one after the other (inputs filled
    from the provider when ``values``)."""
    args, offset = [], 0
    for k in list(sg.input_indexes) + list(sg.output_indexes):
        operand = sg.operands[k] if 0 <= k < len(sg.operands) else hal.Operand(T.TENSOR_FLOAT32)
        size = _size(operand, fdp)
        args.append(hal.RequestArgument(ArgumentLifetime.POOL, 0, offset, size))
        offset += size
    pool = np.zeros(max(offset, 1), np.uint8)
    if values:
        raw = fdp.ConsumeBytes(offset)
        pool[:len(raw)] = np.frombuffer(raw, np.uint8)
    n = len(sg.input_indexes)
    return hal.Request(args[:n], args[n:], [hal.SharedMemory(pool)])


class RequestHarness(Harness):
    """Requests against prepared (valid) models: through the HAL, every argument field and pool
    mutated, on each execution path; and through the runtime's Execution calls."""

    name = "request"
    max_elements = 1024

    def setup(self) -> None:
        super().setup()
        self.prepared: dict[int, tuple] = {}
        self.devices = [Device(self.driver)]  # the runtime's view of the driver, for Execution

    def _prepared(self, index: int):
        """(runtime model, prepared model) of a seed, or None when it does not prepare."""
        if index not in self.prepared:
            entry = None
            try:
                model = Builder(provider(b""), 0).build(self.seeds[index].model)
                if model.finished:
                    entry = model, self.driver.prepare_model(model.hal_model, PreferenceCode.FAST_SINGLE_ANSWER,
                                                             PriorityCode.MEDIUM, None, [], [], None)
            except EXPECTED:
                pass
            self.prepared[index] = entry
        return self.prepared[index]

    def run(self, data: bytes) -> None:
        if not self.seeds:
            return
        index, fdp = split(data, len(self.seeds))
        entry = self._prepared(index)
        if entry is None:
            return
        model, prepared = entry
        if fdp.ConsumeBool():
            self.runtime_execution(model, fdp)
            return
        request = self.mutated(valid_request(model.hal_model.main, fdp, values=True), fdp)
        path = fdp.ConsumeIntInRange(0, 3)
        measure = fdp.ConsumeBool()
        if path == 0:
            prepared.execute_synchronously(request, measure, None, LOOP_TIMEOUT_NS)
        elif path == 1:
            callback = hal.ExecutionCallback()
            prepared.execute(request, measure, None, LOOP_TIMEOUT_NS, callback)
            callback.wait()
        elif path == 2:
            fences = [hal.SyncFence.signalled(fdp.PickValueInList(list(hal.ErrorStatus)[:5]))
                      for _ in range(fdp.ConsumeIntInRange(0, 2))]
            fence, callback = prepared.execute_fenced(request, fences, measure, None, LOOP_TIMEOUT_NS,
                                                      fdp.PickValueInList([None, 0, 10**9]))
            fence.wait()
            callback.get_execution_info()
        else:
            burst = prepared.configure_execution_burst()
            tokens = [fdp.ConsumeIntInRange(-2, 3) for _ in range(len(request.pools) + fdp.ConsumeIntInRange(-1, 1))]
            burst.execute(request, tokens, measure, None, LOOP_TIMEOUT_NS)

    @staticmethod
    def mutated(request: hal.Request, fdp) -> hal.Request:
        """The request with some fields of some arguments and pools changed."""
        b = Builder(fdp, 8)
        for args in (request.inputs, request.outputs):
            if b.mutate() == 1 and args:
                args.pop(fdp.ConsumeIntInRange(0, len(args) - 1))
            for arg in args:
                if b.mutate() == 0:
                    continue
                arg.lifetime = b.int_value(arg.lifetime)
                arg.pool_index, arg.offset, arg.length = (b.int_value(arg.pool_index), b.int_value(arg.offset),
                                                          b.int_value(arg.length))
                arg.dimensions = b.dims(arg.dimensions)
                if arg.lifetime == ArgumentLifetime.POINTER:
                    arg.pointer = fdp.PickValueInList([None, b"", np.zeros(arg.length % 4096, np.uint8)])
        kind = b.mutate()
        if kind == 1:
            request.pools.append(fdp.PickValueInList([0, 1, -1, 2**64, None, "pool"]))
        elif kind == 2:
            request.pools[0] = hal.SharedMemory(np.zeros(fdp.ConsumeIntInRange(0, 64), np.uint8))
        elif kind == 3:
            request.pools.clear()
        return request

    def runtime_execution(self, model: Model, fdp) -> None:
        """The runtime's Execution calls with fuzzed indexes, buffers, types and memories."""
        compilation = Compilation(model, self.devices)
        compilation.finish()
        execution = Execution(compilation)
        b = Builder(fdp, 8)
        main = model.hal_model.main
        memory = Memory.from_buffer(np.zeros(fdp.ConsumeIntInRange(1, 256), np.uint8))
        for is_input, indexes in ((True, main.input_indexes), (False, main.output_indexes)):
            for i, k in enumerate(indexes):
                operand = main.operands[k]
                index = b.int_value(i)
                size = b.int_value(_size(operand, fdp))
                type_ = None if b.mutate() == 0 else \
                    OperandType(b.operand_type(operand.type), b.dims(operand.dimensions), b.scale(operand.scale),
                                b.int_value(operand.zero_point))
                if fdp.ConsumeBool():
                    offset = b.int_value(0)
                    (execution.set_input_from_memory if is_input else execution.set_output_from_memory)(
                        index, memory, offset, size, type_)
                else:
                    buffer = None if b.mutate() == 1 else np.zeros(max(0, min(size, 1 << 16)), np.uint8)
                    (execution.set_input if is_input else execution.set_output)(index, buffer, type_)
        execution.set_loop_timeout(LOOP_TIMEOUT_NS)
        execution.compute()


class VectorsHarness(Harness):
    """The test-vector loader on mutated documents (JSON types swapped, fields dropped or added,
    data and dimensions disagreeing, enormous dimensions, broken text), then validation of what
    it loaded: BAD_DATA with a message, or a model."""

    name = "vectors"
    max_elements = 2048
    REPLACEMENTS = [None, True, 0, -1, 2**31, 2**63, 10**30, 1.5, "x", "NaN", "TENSOR_FLOAT32", "CONSTANT_COPY",
                    [], [1], [2**40, 2**40], {}, {"x": 1}]

    def setup(self) -> None:
        super().setup()
        self.docs = [json.dumps({"format": vectors.FORMAT, "source": t.source, "tests": [vectors.test_to_json(t)]})
                     for t in self.seeds]
        self.path = os.path.join(tempfile.mkdtemp(prefix="nnts-fuzz-vectors-"), "test.json")

    def run(self, data: bytes) -> None:
        if not self.seeds:
            return
        index, fdp = split(data, len(self.docs))
        doc = json.loads(self.docs[index])
        for _ in range(fdp.ConsumeIntInRange(0, 6)):
            doc = self.mutate(doc, fdp)
        text = json.dumps(doc).encode()
        if fdp.ConsumeIntInRange(0, 7) == 1:  # broken text: cut, or a byte changed
            at = fdp.ConsumeIntInRange(0, len(text))
            text = text[:at] + (fdp.ConsumeBytes(1) if fdp.ConsumeBool() else b"")
        with open(self.path, "wb") as f:
            f.write(text)
        for test in vectors.load_file(self.path):
            validate_model(test.model)

    def mutate(self, node, fdp):
        """``node`` with one value somewhere below it replaced, removed, added to or resized."""
        if isinstance(node, (dict, list)) and node and fdp.ConsumeIntInRange(0, 3) != 0:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            key = fdp.PickValueInList(keys)
            node[key] = self.mutate(node[key], fdp)
            return node
        kind = fdp.ConsumeIntInRange(0, 5)
        if kind == 0 and isinstance(node, dict) and node:
            del node[fdp.PickValueInList(list(node))]
            return node
        if kind == 1 and isinstance(node, dict):
            node[fdp.PickValueInList(["extra", "data", "dimensions", "type", "lifetime", "scale"])] = \
                copy.deepcopy(fdp.PickValueInList(self.REPLACEMENTS))
            return node
        if kind == 2 and isinstance(node, list):
            return node * fdp.ConsumeIntInRange(0, 3) + node[:fdp.ConsumeIntInRange(0, len(node))]
        if kind == 3 and isinstance(node, list):
            return [fdp.PickValueInList(WEIRD_INTS) for _ in range(fdp.ConsumeIntInRange(0, 5))]
        return copy.deepcopy(fdp.PickValueInList(self.REPLACEMENTS))  # later mutations must not reach the constants


class RemoteHarness(Harness):
    """The remote-driver server's decoding: a server fed frames (structured ones from a seed model
    with some bytes changed, or raw ones), every reply checked; or ``wire.read_model`` /
    ``read_request`` on a mutated encoding. Every malformed message must end in an ERROR reply or
    a ProtocolError, and no reply may report an exception the driver raised. The server is a
    Session in process, or the driver's own for a driver in its own process (``remote:`` or
    ``socket:``, such as a native SDK driver): its replies must also be well-formed frames, and it
    must neither die nor hang."""

    name = "remote"
    max_elements = 1024
    REGION_SIZE = 4096
    # Message types sent raw. Not EXECUTE_FENCED (a fence the client never signals blocks its
    # server thread by design), nor REGION_ADD or PREPARE_MODEL* (they name files: only the
    # harness's own are named).
    RAW = [wire.Msg.HELLO, wire.Msg.GET_SUPPORTED_OPERATIONS, wire.Msg.EXECUTE_SYNC, wire.Msg.EXECUTE_ASYNC,
           wire.Msg.CONFIGURE_BURST, wire.Msg.BURST_EXECUTE, wire.Msg.BURST_RELEASE_MEMORY, wire.Msg.ALLOCATE,
           wire.Msg.BUFFER_COPY_TO, wire.Msg.BUFFER_COPY_FROM, wire.Msg.REGION_REMOVE, wire.Msg.RELEASE, 0, 99,
           2**32 - 1]

    def setup(self) -> None:
        super().setup()
        folder = tempfile.mkdtemp(prefix="nnts-fuzz-remote-")
        self.region_path = os.path.join(folder, "region")
        with open(self.region_path, "wb") as f:
            f.write(bytes(self.REGION_SIZE))
        self.cache_path = os.path.join(folder, "cache")
        open(self.cache_path, "wb").close()
        self.encoded = []
        for t in self.seeds:
            w = wire.Writer()
            try:
                wire.write_model(w, t.model, lambda raw: (1, 0, raw.nbytes))
            except wire.EncodeError:
                continue
            self.encoded.append(b"".join(w.parts))
        self.seeds = self.seeds[:len(self.encoded)]

    def run(self, data: bytes) -> None:
        if not self.encoded:
            return
        index, fdp = split(data, len(self.encoded))
        model = self.flipped(self.encoded[index], fdp)
        if fdp.ConsumeIntInRange(0, 3) == 1:
            self.decode(model, fdp)
            return
        frames = [self.frame(wire.Msg.HELLO, wire.MAGIC + struct.pack("<I", wire.VERSION), 1)]
        for call_id in range(2, 2 + fdp.ConsumeIntInRange(0, 5)):
            frames.append(self.message(model, call_id, fdp))
        if not fdp.ConsumeBool():  # the usual conversation first: prepare, then execute
            frames[1:1] = [self.frame(wire.Msg.PREPARE_MODEL, model + self.prepare_tail(fdp), 90),
                           self.frame(wire.Msg.EXECUTE_SYNC, struct.pack("<Q", 1) + self.request(fdp), 91)]
        self.serve(b"".join(frames))

    @staticmethod
    def flipped(body: bytes, fdp) -> bytes:
        out = bytearray(body)
        for _ in range(fdp.ConsumeIntInRange(0, 3)):
            if out:
                out[fdp.ConsumeIntInRange(0, len(out) - 1)] = fdp.ConsumeIntInRange(0, 255)
        return bytes(out)

    def decode(self, body: bytes, fdp) -> None:
        region = np.zeros(self.REGION_SIZE, np.uint8)

        def region_bytes(ref):
            _, offset, length = ref
            if offset + length > region.nbytes:
                raise wire.ProtocolError("outside the region")
            return region[offset:offset + length]
        if fdp.ConsumeBool():
            wire.read_request(wire.Reader(self.flipped(self.request(fdp), fdp)), region_bytes)
        else:
            wire.read_model(wire.Reader(body), region_bytes)

    @staticmethod
    def frame(msg: int, body: bytes, call_id: int) -> bytes:
        return wire.HEADER.pack(12 + len(body), msg, call_id) + body

    def prepare_tail(self, fdp) -> bytes:
        w = wire.Writer()
        w.i32(fdp.PickValueInList([0, 1, 2, 3, -1]))
        w.i32(fdp.PickValueInList([90, 100, 110, 0]))
        w.optional_i64(fdp.PickValueInList([None, 0, 10**9, -1]))
        for _ in range(2):
            files = fdp.ConsumeIntInRange(0, 2)
            w.u32(files)
            for _ in range(files):
                w.str(self.cache_path)
                w.u8(fdp.ConsumeIntInRange(0, 2))
        w.optional_bytes(fdp.PickValueInList([None, b"", bytes(32)]))
        self.hints(w, fdp)
        return b"".join(w.parts)

    @staticmethod
    def hints(w: wire.Writer, fdp) -> None:
        """Hints (none, one, or a token twice), the prefixes named or not."""
        tokens = [fdp.PickValueInList([0x10001, 0x10002, 0x20001, -1]) for _ in range(fdp.ConsumeIntInRange(0, 2))]
        w.u32(len(tokens))
        for token in tokens:
            w.i32(token)
            w.bytes(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 8)))
        names = fdp.ConsumeIntInRange(0, 2)
        w.u32(names)
        for i in range(names):
            w.str(fdp.PickValueInList(["com.example.a", "com.example.b", ""]))
            w.u32(fdp.PickValueInList([1, 2, i + 1, 0x10000]))

    def request(self, fdp) -> bytes:
        """An EXECUTE request body (after the handle) with fuzzed arguments and pools."""
        w = wire.Writer()
        for _ in range(2):
            count = fdp.ConsumeIntInRange(0, 3)
            w.u32(count)
            for _ in range(count):
                w.i32(fdp.ConsumeIntInRange(-1, 3))
                for _ in range(3):
                    w.u32(fdp.PickValueInList([0, 1, 4, 16, 4095, 4096, 2**32 - 1]))
                w.u32_list([fdp.ConsumeIntInRange(0, 5) for _ in range(fdp.ConsumeIntInRange(0, 3))])
                w.u8(0)
        pools = fdp.ConsumeIntInRange(0, 2)
        w.u32(pools)
        for _ in range(pools):
            kind = fdp.ConsumeIntInRange(0, 3)
            w.u8(kind)
            w.u64(fdp.ConsumeIntInRange(0, 2))
            w.u64(fdp.PickValueInList([0, 8, 4096]))
            w.u64(fdp.PickValueInList([0, 8, 4096, 2**64 - 1]))
            if kind == wire.POOL_HARDWARE_BUFFER:  # width, height, layers, format, usage, stride
                w.parts.append(struct.pack("<IIIIQI", fdp.PickValueInList([8, 2, 0]), 1, 1,
                                           fdp.PickValueInList([0x21, 1, 0x33]), 3, fdp.PickValueInList([0, 2, 8])))
        w.u8(fdp.ConsumeIntInRange(0, 1))
        w.optional_i64(fdp.PickValueInList([None, 10**9]))
        w.u64(LOOP_TIMEOUT_NS)
        self.hints(w, fdp)
        return b"".join(w.parts)

    def message(self, model: bytes, call_id: int, fdp) -> bytes:
        """One more frame: a region added, a model, a request, a fenced execution, or raw."""
        kind = fdp.ConsumeIntInRange(0, 4)
        Msg = wire.Msg
        if kind == 0:
            path = self.region_path if fdp.ConsumeBool() else self.region_path + ".missing"
            return self.frame(Msg.REGION_ADD, struct.pack("<QQ", fdp.ConsumeIntInRange(0, 2),
                                                          fdp.PickValueInList([0, 8, 4096, 8192, 2**63]))
                              + struct.pack("<I", len(path)) + path.encode(), call_id)
        if kind == 1:
            msg = fdp.PickValueInList([Msg.GET_SUPPORTED_OPERATIONS, Msg.PREPARE_MODEL])
            tail = self.prepare_tail(fdp) if msg == Msg.PREPARE_MODEL else b""
            return self.frame(msg, model + tail, call_id)
        if kind == 2:
            msg = fdp.PickValueInList([Msg.EXECUTE_SYNC, Msg.EXECUTE_ASYNC, Msg.BURST_EXECUTE])
            body = struct.pack("<Q", fdp.ConsumeIntInRange(0, 3)) + self.request(fdp)
            if msg == Msg.BURST_EXECUTE:
                body += struct.pack("<I", 1) + struct.pack("<q", fdp.ConsumeIntInRange(-1, 2))
            return self.frame(msg, body, call_id)
        if kind == 3:
            body = struct.pack("<Q", fdp.ConsumeIntInRange(0, 3)) + self.request(fdp)
            states = [fdp.PickValueInList([-1, 0, 2, 4]) for _ in range(fdp.ConsumeIntInRange(0, 2))]
            body += struct.pack(f"<I{len(states)}i", len(states), *states) + b"\0"
            return self.frame(Msg.EXECUTE_FENCED, body, call_id)
        return self.frame(fdp.PickValueInList(self.RAW), fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64)), call_id)

    def serve(self, stream: bytes) -> None:
        """Serve the frames on one session (one thread) and check every reply."""
        if isinstance(self.driver, RemoteDevice):
            self.serve_remote(stream)
            return
        replies: list[bytes] = []
        pos = 0

        def read(n: int) -> bytes:
            nonlocal pos
            out = stream[pos:pos + n]
            pos += len(out)
            return out
        session = Session(self.driver, read, replies.append, workers=1)
        session.serve()
        for frame in replies:
            length, msg, _ = wire.HEADER.unpack_from(frame)
            if msg == wire.Msg.ERROR:
                r = wire.Reader(frame[wire.HEADER.size:])
                error = wire.read_error(r)
                if error.message.startswith("driver raised"):
                    raise Finding(f"the server replied: {error.message}")


    HANG_S = 20  # a server that has not ended its replies this long after its input ended hangs

    def serve_remote(self, stream: bytes) -> None:
        """The frames to the driver's own server, on a transport of its own (a new process or
        connection per input), the input then ended: every reply a well-formed frame, no ERROR
        reporting an exception of the driver, and the server ends its replies and exits."""
        transport = self.driver.new_transport()
        hung = []
        timer = threading.Timer(self.HANG_S, lambda: (hung.append(True), transport.kill()))
        timer.daemon = True

        def send():
            try:
                transport.send(stream)
            except OSError:  # the server closed its input: the replies say why
                pass
            transport.end_input()
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        timer.start()
        try:
            problem = self.read_replies(transport)
        finally:
            timer.cancel()
            sender.join(self.HANG_S)
        if hung:
            raise Finding(f"the server hung: no end of its replies {self.HANG_S} s after its input ended")
        code = transport.proc.wait(self.HANG_S) if hasattr(transport, "proc") else 0
        transport.kill()
        transport.close_reader()
        if code < 0 or problem:
            raise Finding(problem or transport.death())

    @staticmethod
    def read_exactly(transport, n: int) -> bytes:
        """``n`` bytes, or fewer where the stream ends (a transport's read returns what has come)."""
        data = b""
        while len(data) < n:
            chunk = transport.read(n - len(data))
            if not chunk:
                break
            data += chunk
        return data

    @classmethod
    def read_replies(cls, transport) -> str | None:
        """Reads replies to the end of the stream; what is wrong with the first bad one."""
        while True:
            header = cls.read_exactly(transport, wire.HEADER.size)
            if not header:
                return None
            if len(header) < wire.HEADER.size:
                return "the stream ends inside a frame header"
            length, msg, _ = wire.HEADER.unpack(header)
            if not 12 <= length <= 12 + wire.MAX_REPLY:
                return f"a reply frame of length {length}"
            body = cls.read_exactly(transport, length - 12)
            if len(body) < length - 12:
                return "the stream ends inside a reply"
            if msg not in wire.Msg._value2member_map_ or msg < wire.Msg.ERROR:
                return f"a reply of unknown type {msg}"
            if msg == wire.Msg.ERROR:
                try:
                    error = wire.read_error(wire.Reader(body))
                except wire.ProtocolError as e:
                    return f"a malformed ERROR reply: {e}"
                if error.message.startswith(("driver raised", "the driver threw")):
                    return f"the server replied: {error.message}"


NNAPI_HARNESSES = {h.name: h for h in (ModelHarness, ExecuteHarness, RequestHarness, VectorsHarness, RemoteHarness)}
