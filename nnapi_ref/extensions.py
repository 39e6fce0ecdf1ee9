"""Vendor extensions: how NNAPI encodes an extension's operand and operation types, and what the
runtime and drivers can check about them.

An extension type is ``(prefix << EXTENSION_TYPE_BITS) | type_within_extension``: the high 16
bits are a non-zero prefix the model assigned to the extension's name
(``hal.Model.extension_name_to_prefix``), the low 16 bits the extension's own code. Built-in
types have prefix 0. An extension operand's element (or scalar) size and whether it is a tensor
come from the driver's :class:`~nnapi_ref.hal.ExtensionOperandTypeInformation`; its extra
parameters (``Operand.extension_data``) are opaque to everyone but the driver.
"""
from __future__ import annotations

import math
import re
from typing import Iterable

import numpy as np

from nnapi_ref.errors import bad_data
from nnapi_ref.hal import Extension, ExtensionOperandTypeInformation, Model, Subgraph

EXTENSION_TYPE_BITS = 16  # NNAPI's kExtensionTypeBits
EXTENSION_TYPE_MASK = (1 << EXTENSION_TYPE_BITS) - 1
MAX_PREFIX = (1 << 16) - 1

# A reverse domain name: at least two dot-separated labels of lower-case letters, digits and
# underscores, each starting with a letter (``com.example.my_extension``).
_NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")


def is_extension_type(code) -> bool:
    """A type code with a prefix (a malformed code that is not an integer is no extension's)."""
    return isinstance(code, (int, np.integer)) and int(code) >> EXTENSION_TYPE_BITS != 0


def prefix_of(code: int) -> int:
    return int(code) >> EXTENSION_TYPE_BITS


def within_extension(code: int) -> int:
    return int(code) & EXTENSION_TYPE_MASK


def encode(prefix: int, type_within: int) -> int:
    return (prefix << EXTENSION_TYPE_BITS) | type_within


def name_problem(name) -> str | None:
    """What is wrong with an extension name (None if it is in reverse domain form)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return f"extension name {name!r} is not a reverse domain name (such as com.example.my_extension)"
    return None


def extension_problems(extensions: Iterable[Extension]) -> list[str]:
    """What makes a driver's getSupportedExtensions answer malformed (VTS checks these)."""
    problems, names = [], set()
    for extension in extensions:
        problem = name_problem(extension.name)
        if problem:
            problems.append(problem)
        if extension.name in names:
            problems.append(f"extension {extension.name} listed twice")
        names.add(extension.name)
        types = set()
        for info in extension.operand_types:
            where = f"{extension.name} operand type {info.type}"
            if not (isinstance(info.type, int) and 0 <= info.type <= EXTENSION_TYPE_MASK):
                problems.append(f"{where}: type outside 0-{EXTENSION_TYPE_MASK}")
            if info.type in types:
                problems.append(f"{where}: declared twice")
            types.add(info.type)
            if not (isinstance(info.byte_size, int) and info.byte_size > 0):
                problems.append(f"{where}: byte size {info.byte_size} is not positive")
    return problems


def prefix_map(model: Model) -> dict[int, str]:
    """The model's prefix -> extension name mapping; BAD_DATA unless it is a bijection of
    non-zero 16-bit prefixes and non-empty names."""
    names: dict[int, str] = {}
    for entry in model.extension_name_to_prefix:
        if not isinstance(entry.name, str) or not entry.name:
            raise bad_data(f"extension_name_to_prefix: empty extension name for prefix {entry.prefix}")
        if not (isinstance(entry.prefix, int) and 0 < entry.prefix <= MAX_PREFIX):
            raise bad_data(f"extension_name_to_prefix: prefix {entry.prefix} of {entry.name} outside 1-{MAX_PREFIX}")
        if entry.prefix in names:
            raise bad_data(f"extension_name_to_prefix: prefix {entry.prefix} given twice")
        if entry.name in names.values():
            raise bad_data(f"extension_name_to_prefix: extension {entry.name} given two prefixes")
        names[entry.prefix] = entry.name
    return names


class ExtensionTypes:
    """The extension operand and operation types of one model, resolved against the extensions
    someone (a driver, or all the runtime's devices) declares.

    ``strict``: an operand type of an extension not in ``extensions`` is invalid (prepare,
    the runtime's addOperand); otherwise it is only unknown (a driver's supported-operations
    query says false for the operations that use it)."""

    def __init__(self, model: Model, extensions: Iterable[Extension], strict: bool):
        self.names = prefix_map(model)
        self.declared = {e.name: {info.type: info for info in e.operand_types} for e in extensions}
        self.strict = strict

    def name(self, code: int, what: str) -> str:
        prefix = prefix_of(code)
        if prefix not in self.names:
            raise bad_data(f"{what}: type {code} has prefix {prefix}, which extension_name_to_prefix does not name")
        return self.names[prefix]

    def supported(self, code: int) -> bool:
        """Whether ``code`` is a built-in type or one of a declared extension."""
        if not is_extension_type(code):
            return True
        return self.names.get(prefix_of(code)) in self.declared

    def operand_info(self, code: int, what: str) -> ExtensionOperandTypeInformation | None:
        """The declaration of an extension operand type (None if unknown and not strict)."""
        name = self.name(code, what)
        types = self.declared.get(name)
        if types is None:
            if self.strict:
                raise bad_data(f"{what}: extension {name} is not supported")
            return None
        info = types.get(within_extension(code))
        if info is None:
            raise bad_data(f"{what}: extension {name} has no operand type {within_extension(code)}")
        return info


def dtype_of(info: ExtensionOperandTypeInformation) -> np.dtype:
    """The raw element of an extension operand: ``byte_size`` opaque bytes."""
    return np.dtype((np.void, info.byte_size))


def operand_problem(types: ExtensionTypes, operand, what: str) -> str | None:
    """What is wrong with an extension operand of a model (None when fine or unknown)."""
    info = types.operand_info(operand.type, what)
    if info is None:
        return None
    if not info.is_tensor and operand.dimensions:
        return f"scalar extension type has dimensions {list(operand.dimensions)}"
    if operand.scale != 0 or operand.zero_point != 0:
        return "an extension operand takes its parameters from its extension data; scale and zero point must be 0"
    if operand.channel_quant is not None:
        return "per-channel quantization parameters on an extension operand"
    if operand.value is not None and not isinstance(operand.value, (int, np.integer)):
        dims = operand.dimensions if info.is_tensor else ()
        if info.is_tensor and (not dims or 0 in dims):
            return f"constant with unspecified dimensions {list(dims)}"
        needed = info.byte_size * math.prod(dims)
        given = np.asarray(operand.value).nbytes
        if given != needed:
            return f"constant has {given} bytes, its type needs {needed}"
    return None


def uses_extensions(model: Model) -> bool:
    """Whether any operation of the model is an extension operation."""
    return any(is_extension_type(op.type) for sg in [model.main] + list(model.referenced) for op in sg.operations)


def operation_uses_extension(sg: Subgraph, operation) -> bool:
    """The operation is an extension's, or reads or writes an extension operand."""
    return is_extension_type(operation.type) or any(
        is_extension_type(sg.operands[k].type) for k in tuple(operation.inputs) + tuple(operation.outputs))
