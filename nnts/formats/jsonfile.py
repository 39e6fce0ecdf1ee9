"""Reading JSON that anyone may have written (results to merge, fuzz artifacts' sidecars, ...): the
one validator every such reader uses. A file is read whole only up to a size, parsed, bounded in
nesting, and checked against a schema of types before any field is used; what does not fit is a
:class:`JsonError` naming the file and the field, never a traceback later.

A schema is a type (``str``, ``int``, ``float`` (any number), ``bool``), ``None`` for null,
``any``, a tuple of schemas (any of them), ``[schema]`` (a list of such), ``{key: schema}`` (an
object whose given keys, where present, fit; other keys are left as they are) or
``{str: schema}`` (an object of any keys, every value fitting).
"""
from __future__ import annotations

import json
import os

MAX_BYTES = 512 << 20
MAX_DEPTH = 64


class JsonError(ValueError):
    """A JSON file that cannot be used: the message names it and what is wrong."""


def read(path: str | os.PathLike, schema, max_bytes: int = MAX_BYTES):
    """The file's JSON value, checked against ``schema``; a JsonError otherwise."""
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as e:
        raise JsonError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(raw) > max_bytes:
        raise JsonError(f"{path}: over {max_bytes >> 20} MiB, more than such a file holds")
    try:
        value = loads(raw)
    except ValueError as e:
        raise JsonError(f"{path}: {e}") from None
    check(value, schema, str(path))
    return value


def loads(raw: bytes | str):
    """Parsed JSON no deeper than MAX_DEPTH (the parser's own limit, a RecursionError, is caught)."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"not JSON ({e})") from None
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return value


def check(value, schema, where: str) -> None:
    """``value`` fits ``schema``; a JsonError naming the field (``where``) that does not."""
    if schema is any:
        return
    if schema is None:
        if value is not None:
            raise JsonError(f"{where}: should be null, is {_kind(value)}")
        return
    if isinstance(schema, tuple):
        for option in schema:
            if isinstance(option, (list, dict)) and isinstance(value, type(option)):
                check(value, option, where)  # the container it is: what inside it does not fit
                return
            try:
                check(value, option, where)
                return
            except JsonError:
                continue
        raise JsonError(f"{where}: should be {' or '.join(_name(s) for s in schema)}, is {_kind(value)}")
    if isinstance(schema, list):
        if not isinstance(value, list):
            raise JsonError(f"{where}: should be a list, is {_kind(value)}")
        for i, item in enumerate(value):
            check(item, schema[0], f"{where}[{i}]")
        return
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            raise JsonError(f"{where}: should be an object, is {_kind(value)}")
        if list(schema) == [str]:
            for key, item in value.items():
                check(item, schema[str], f"{where}.{key}")
            return
        for key, item_schema in schema.items():
            if key in value:
                check(value[key], item_schema, f"{where}.{key}")
        return
    if schema is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif schema is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, schema)
    if not ok:
        raise JsonError(f"{where}: should be {_name(schema)}, is {_kind(value)}")


def _name(schema) -> str:
    if schema is None:
        return "null"
    if isinstance(schema, list):
        return "a list"
    if isinstance(schema, dict):
        return "an object"
    if isinstance(schema, tuple):
        return " or ".join(_name(s) for s in schema)
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
            dict: "an object"}.get(schema, str(schema))


def _kind(value) -> str:
    if value is None:
        return "null"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)
