"""Test vectors: the JSON "nnapi-test-vector/1" format, specified in ``docs/test-vectors.md``, and
its version 2, which adds vendor extensions (see :data:`FORMAT_EXTENSIONS`).

It is also the suite's model interchange format: a model a driver failed on is saved as one file
and replayed with ``nnts vectors run FILE``. Reading never executes anything from the file.
"""
from __future__ import annotations

import contextvars
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from nnapi_ref import budget, extensions as ext, ops
from nnapi_ref.errors import NnapiError
from nnapi_ref.hal import ChannelQuant, ExtensionNameAndPrefix, Model, Operand, Operation, Subgraph
from nnapi_ref.types import DTYPES, FLOAT_TYPES, Lifetime, OperandCode, OperationCode, ResultCode, type_name

FORMAT = "nnapi-test-vector/1"
FORMAT_NAME = "nnapi-test-vector"  # a file's ``format`` is this name, "/", and the schema version
# Version 2 = version 1 plus vendor extensions; written only for files that use them, so readers
# of version 1 keep reading every other file. A test (or bare model) gets ``"extensions"``: its
# ``[{"name", "prefix"}]`` mapping; an extension operand's ``"type"`` is an object
# ``{"extension": name, "type": code within it, "byte_size": bytes per element}``, its
# ``"extension_data"`` and its ``"data"`` (constants, inputs, expected outputs) hex strings of
# raw bytes; an extension operation's ``"type"`` is ``{"extension": name, "type": code}``.
FORMAT_EXTENSIONS = "nnapi-test-vector/2"
READABLE_FORMATS = (FORMAT, FORMAT_EXTENSIONS)  # the versions this reader understands (docs/test-vectors.md)
LICENSE = "Apache-2.0"


@dataclass
class TestModel:
    """One test: a model, the values to feed, the outputs to expect."""

    name: str
    model: Model
    inputs: list[np.ndarray | None]           # per main input; None = omitted
    expected: list[np.ndarray]                # per main output
    ignored: list[bool]                       # per main output: not compared
    min_feature_level: int | None = None
    expect_failure: bool = False
    multinomial_tolerance: float = 0.0
    source: str = ""
    output_dims: list[tuple[int, ...]] = field(default_factory=list)  # expected shapes (0 = zero-sized)
    # The random tests' accuracy criteria (``accuracy_criteria``): per output type name, atol, rtol,
    # bias and mse; None: NNAPI's per-element tolerance (nnapi_ref.tolerance)
    criteria: dict[str, dict[str, float]] | None = None

    @property
    def is_relaxed(self) -> bool:
        return self.model.relax_computation_float32_to_float16


class FormatError(NnapiError):
    """A test-vector file that does not follow the format (BAD_DATA, with where and why)."""

    def __init__(self, message: str):
        super().__init__(ResultCode.BAD_DATA, message)


def decode_data(values, code: OperandCode, what: str) -> np.ndarray:
    """A JSON ``data`` list as a flat numpy array of the operand's element type."""
    dtype = DTYPES[code]
    try:
        if code in FLOAT_TYPES:
            try:
                return np.array(values, np.float64).astype(dtype)
            except (TypeError, ValueError):  # "NaN" / "Infinity" strings
                return np.array([float(v) for v in values], np.float64).astype(dtype)
        if dtype == np.bool_:
            return np.array([bool(v) for v in values], np.bool_)
        array = np.array(values, np.int64)
        info = np.iinfo(dtype)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise FormatError(f"{what}: values outside the range of {type_name(code)}")
        return array.astype(dtype)
    except (TypeError, ValueError) as e:
        raise FormatError(f"{what}: bad data for {type_name(code)}: {e}") from None


def encode_data(array: np.ndarray) -> list:
    flat = np.asarray(array).reshape(-1)
    if flat.dtype.kind == "f":
        out = []
        for v in flat:
            if math.isnan(v):
                out.append("NaN")
            elif math.isinf(v):
                out.append("Infinity" if v > 0 else "-Infinity")
            else:
                out.append(float(str(v)))  # numpy's shortest repr of the float32/float16 value
        return out
    if flat.dtype == np.bool_:
        return [bool(v) for v in flat]
    return [int(v) for v in flat]


def _enum(enum, name, what):
    try:
        return enum[name]
    except KeyError:
        raise FormatError(f"{what}: unknown {enum.__name__} {name!r}") from None


# What reading a field of the wrong JSON type raises (a string where a number belongs, a list
# where an object does, an integer too large for a float): a malformed file, never a traceback.
MALFORMED = (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError, RecursionError)


def _dimensions(value) -> tuple[int, ...]:
    """A JSON list of integers (not a string of digits, not booleans, not 2.5)."""
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        raise TypeError(f"dimensions {value!r} are not a list of integers")
    return tuple(value)


def _prefixes_from_json(d: dict, what: str) -> list[ExtensionNameAndPrefix]:
    return [ExtensionNameAndPrefix(str(e["name"]), int(e["prefix"])) for e in d.get("extensions") or []]


def _extension_code(t: dict, prefixes: list[ExtensionNameAndPrefix], what: str) -> int:
    name = str(t["extension"])
    prefix = next((e.prefix for e in prefixes if e.name == name), None)
    if prefix is None:
        raise FormatError(f"{what}: extension {name!r} is not in the test's extensions")
    within = int(t["type"])
    if not 0 <= within <= ext.EXTENSION_TYPE_MASK:
        raise FormatError(f"{what}: type {within} within {name} outside 0-{ext.EXTENSION_TYPE_MASK}")
    return ext.encode(prefix, within)


def _extension_bytes(value, byte_size: int, what: str) -> np.ndarray:
    """Raw hex data as elements of ``byte_size`` opaque bytes."""
    try:
        raw = bytes.fromhex(value)
    except (TypeError, ValueError):
        raise FormatError(f"{what}: extension data is not a hex string") from None
    if byte_size <= 0 or len(raw) % byte_size:
        raise FormatError(f"{what}: {len(raw)} bytes are not whole elements of {byte_size} bytes")
    return np.frombuffer(raw, np.uint8).copy().view(np.dtype((np.void, byte_size)))


# Set by ``nnts.runners.vector_cache`` while it reads or records a file: (data, decode) -> array.
DATA_HOOK: contextvars.ContextVar = contextvars.ContextVar("nnts_vector_data_hook", default=None)


def _decode(values, code, sizes: dict, what: str) -> np.ndarray:
    hook = DATA_HOOK.get()
    if hook is not None:
        return hook(values, lambda: _decode_data(values, code, sizes, what))
    return _decode_data(values, code, sizes, what)


def _decode_data(values, code, sizes: dict, what: str) -> np.ndarray:
    if ext.is_extension_type(code):
        if code not in sizes:
            raise FormatError(f"{what}: extension data without the type's byte_size")
        return _extension_bytes(values or "", sizes[code], what)
    return decode_data(values, code, what)


def _subgraph_from_json(d: dict, what: str, is_main: bool, prefixes=()):
    """A Subgraph plus, for main, the input values and expected outputs."""
    sizes: dict[int, int] = {}  # extension operand type -> bytes per element
    operands = []
    inputs, expected, ignored, output_dims = [], [], [], []
    try:
        raw_operands = d["operands"]
        for i, o in enumerate(raw_operands):
            where = f"{what} operand {i}"
            if isinstance(o["type"], dict):
                code = _extension_code(o["type"], prefixes, where)
                if o["type"].get("byte_size"):
                    sizes[code] = int(o["type"]["byte_size"])
            else:
                code = OperandCode.SUBGRAPH if o["type"] in ("SUBGRAPH", "MODEL") else \
                    _enum(OperandCode, o["type"], where)
            life = _enum(Lifetime, o["lifetime"], where)
            dims = _dimensions(o["dimensions"])
            cq = o.get("channel_quant")
            channel_quant = ChannelQuant(tuple(float(np.float32(s)) for s in cq["scales"]), int(cq["channel_dim"])) \
                if cq else None
            operand = Operand(code, dims, float(np.float32(o.get("scale", 0.0))), int(o.get("zero_point", 0)),
                              life, None, channel_quant)
            if o.get("extension_data") is not None:
                operand.extension_data = _extension_bytes(o["extension_data"], 1, where).tobytes()
            data = o.get("data")
            if life in (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE):
                operand.value = _decode(data or [], code, sizes, where)
            elif life == Lifetime.SUBGRAPH:
                operand.value = int(data[0])
            operands.append(operand)
        operations = [Operation(_extension_code(op["type"], prefixes, f"{what} operation {j}")
                                if isinstance(op["type"], dict) else _enum(OperationCode, op["type"], f"{what} operation {j}"),
                                tuple(int(x) for x in op["inputs"]), tuple(int(x) for x in op["outputs"]))
                      for j, op in enumerate(d["operations"])]
        sg = Subgraph(operands, operations, tuple(int(x) for x in d["input_indexes"]),
                      tuple(int(x) for x in d["output_indexes"]))
        if is_main:
            for k in sg.input_indexes:
                data = raw_operands[k].get("data")
                if not data:  # [] marks an omitted optional input
                    inputs.append(None)
                else:
                    inputs.append(_decode(data, operands[k].type, sizes, f"{what} input operand {k}"))
            for k in sg.output_indexes:
                o = raw_operands[k]
                expected.append(_decode(o.get("data") or [], operands[k].type, sizes, f"{what} output operand {k}"))
                ignored.append(bool(o.get("is_ignored", False)))
                output_dims.append(operands[k].dimensions)
    except MALFORMED as e:
        raise FormatError(f"{what}: malformed subgraph ({type(e).__name__}: {e})") from None
    return sg, inputs, expected, ignored, output_dims


def _fix_input_shapes(sg: Subgraph, inputs: list, what: str) -> list:
    """Give each fed input the shape of its operand (zero-sized inputs keep 0 dimensions)."""
    out = []
    for k, value in zip(sg.input_indexes, inputs):
        if value is not None:
            dims = sg.operands[k].dimensions
            if any(d < 0 for d in dims) or math.prod(dims) != value.size:
                raise FormatError(f"{what} input operand {k}: {value.size} values for dimensions {list(dims)}")
            value = value.reshape(dims)
        out.append(value)
    return out


def test_from_json(d: dict, source: str = "") -> TestModel:
    if not isinstance(d, dict):
        raise FormatError(f"a test is a JSON {type(d).__name__}, not an object")
    name = str(d.get("name", "?"))
    try:
        prefixes = _prefixes_from_json(d, name)
        main, inputs, expected, ignored, output_dims = _subgraph_from_json(d["main"], f"{name} main", True, prefixes)
        referenced = [_subgraph_from_json(r, f"{name} subgraph {k}", False, prefixes)[0]
                      for k, r in enumerate(d.get("referenced") or [])]
        level = d.get("min_feature_level")
        if level is not None and not isinstance(level, int):
            raise TypeError(f"min_feature_level {level!r} is not an integer")
        model = Model(main, referenced, bool(d.get("is_relaxed", False)), prefixes)
        return TestModel(name=name, model=model, inputs=_fix_input_shapes(main, inputs, f"{name} main"),
                         expected=expected, ignored=ignored, min_feature_level=level,
                         expect_failure=bool(d.get("expect_failure", False)),
                         multinomial_tolerance=float(d.get("expected_multinomial_distribution_tolerance", 0.0)),
                         source=source, output_dims=output_dims, criteria=_criteria_from_json(d.get("accuracy_criteria")))
    except MALFORMED as e:
        raise FormatError(f"{name}: malformed test ({type(e).__name__}: {e})") from None


CRITERIA_FIELDS = ("atol", "rtol", "bias", "mse")


def _criteria_from_json(value) -> dict | None:
    """``accuracy_criteria``: {operand type name: {"atol", "rtol", "bias", "mse"}} (numbers;
    missing: 0 for rtol, unbounded for bias and mse), or None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError(f"accuracy_criteria is a {type(value).__name__}, not an object")
    criteria = {}
    for name, c in value.items():
        if name not in OperandCode.__members__ or not isinstance(c, dict) or "atol" not in c:
            raise ValueError(f"accuracy_criteria {name!r}: an operand type with at least atol")
        numbers = {k: float(c[k]) for k in CRITERIA_FIELDS if k in c}
        if any(not (v >= 0) for v in numbers.values()):  # NaN too
            raise ValueError(f"accuracy_criteria {name!r}: negative or NaN")
        criteria[name] = numbers
    return criteria


def check_format(value, path) -> None:
    """A FormatError naming what is wrong unless ``value`` is a version this reader understands:
    missing, a later (or unknown) version of the format, or not a test-vector format at all."""
    if value in READABLE_FORMATS:
        return
    readable = ", ".join(READABLE_FORMATS)
    if value is None:
        raise FormatError(f"{path}: not a test-vector file (no \"format\" field; expected \"{FORMAT}\")")
    if isinstance(value, str) and value.startswith(FORMAT_NAME + "/"):
        raise FormatError(f"{path}: test-vector format version {value!r} is not one this nnts reads ({readable}); "
                          f"a newer nnts may read it")
    raise FormatError(f"{path}: format {value!r} is not a test-vector format (expected \"{FORMAT}\")")


def load_file(path: str | os.PathLike) -> list[TestModel]:
    """Every test model of one test-vector file."""
    path = Path(path)
    return tests_of_document(read_document(path), path)


def read_document(path: Path):
    """A test-vector file's JSON document."""
    try:
        with open(path, encoding="utf-8") as f:
            # read whole and parsed into objects of about 8 times its size
            budget.check(os.fstat(f.fileno()).st_size * 8, f"{path}: reading this test-vector file")
            return json.load(f)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FormatError(f"{path}: cannot read test vectors: {e}") from None
    except RecursionError:
        raise FormatError(f"{path}: cannot read test vectors: JSON nested too deeply") from None


def tests_of_document(doc, path: Path) -> list[TestModel]:
    """The test models of a test-vector file's document (``path`` names it in errors)."""
    if not isinstance(doc, dict):
        raise FormatError(f"{path}: not a test-vector file (the top level is a JSON {type(doc).__name__}, "
                          f"not an object with \"format\": \"{FORMAT}\")")
    check_format(doc.get("format"), path)
    source = str(doc.get("source", path.name))
    tests = doc.get("tests", [])
    if not isinstance(tests, list):
        raise FormatError(f"{path}: 'tests' is a JSON {type(tests).__name__}, not a list")
    try:
        return [test_from_json(t, source) for t in tests]
    except FormatError as e:
        raise FormatError(f"{path}: {e.message}") from None
    except RecursionError:
        raise FormatError(f"{path}: a test nested too deeply") from None


def find_files(paths: Iterable[str | os.PathLike]) -> Iterator[Path]:
    """The .json files named by ``paths`` (files, or folders searched recursively), sorted."""
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = []
            # A folder that cannot be listed is yielded itself: reading it fails, and that names it
            # (an error row), instead of the folder's tests silently missing from the run.
            for folder, _, names in os.walk(p, onerror=lambda e: found.append(Path(e.filename))):
                found += [Path(folder) / n for n in names if n.endswith(".json") and (Path(folder) / n).is_file()]
            yield from sorted(found)
        else:
            yield p


# -- writing ---------------------------------------------------------------------------------------

def _type_to_json(code, names: dict[int, str], byte_size: int | None = None):
    if not ext.is_extension_type(code):
        return type_name(code) if byte_size is not None else OperationCode(code).name
    t = {"extension": names.get(ext.prefix_of(code), "?"), "type": ext.within_extension(code)}
    if byte_size:
        t["byte_size"] = byte_size
    return t


def _operand_to_json(o: Operand, data, ignored=False, names=None, sizes=None) -> dict:
    if ext.is_extension_type(o.type):
        return {"type": _type_to_json(o.type, names or {}, (sizes or {}).get(o.type, 0)), "dimensions": list(o.dimensions), "scale": 0.0,
                "zero_point": 0, "lifetime": Lifetime(o.lifetime).name, "is_ignored": ignored, "channel_quant": None,
                "extension_data": None if o.extension_data is None else bytes(o.extension_data).hex(), "data": data}
    return {"type": type_name(o.type), "dimensions": list(o.dimensions), "scale": float(np.float32(o.scale)),
            "zero_point": int(o.zero_point), "lifetime": Lifetime(o.lifetime).name, "is_ignored": ignored,
            "channel_quant": None if o.channel_quant is None else
            {"scales": [float(str(np.float32(s))) for s in o.channel_quant.scales],
             "channel_dim": o.channel_quant.channel_dim},
            "data": data}


def _data_to_json(o: Operand, value):
    if ext.is_extension_type(o.type):
        return np.ascontiguousarray(value).reshape(-1).view(np.uint8).tobytes().hex()
    return encode_data(value)


def subgraph_to_json(sg: Subgraph, inputs=None, expected=None, ignored=None, names=None) -> dict:
    """``names``: the model's prefix -> extension name mapping (for extension types)."""
    names = names or {}
    sizes = {}  # extension operand type -> bytes per element, from whatever values there are
    valued = [(o.type, o.value) for o in sg.operands if o.lifetime in (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE)]
    valued += [(sg.operands[k].type, v) for k, v in zip(sg.input_indexes, inputs or []) if v is not None]
    valued += [(sg.operands[k].type, v) for k, v in zip(sg.output_indexes, expected or [])]
    for code, value in valued:
        if ext.is_extension_type(code):
            sizes.setdefault(code, np.asarray(value).dtype.itemsize)
    operands = []
    for k, o in enumerate(sg.operands):
        data = None
        if o.lifetime in (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE):
            data = _data_to_json(o, o.value)
        elif o.lifetime == Lifetime.SUBGRAPH:
            data = [int(o.value)]
        operands.append(_operand_to_json(o, data, names=names, sizes=sizes))
    if inputs is not None:
        for k, value in zip(sg.input_indexes, inputs):
            operands[k]["data"] = [] if value is None else _data_to_json(sg.operands[k], value)
    if expected is not None:
        for n, (k, value) in enumerate(zip(sg.output_indexes, expected)):
            operands[k]["data"] = _data_to_json(sg.operands[k], value)
            operands[k]["is_ignored"] = bool(ignored[n]) if ignored else False
    return {"operands": operands,
            "operations": [{"type": _type_to_json(op.type, names), "inputs": list(op.inputs),
                            "outputs": list(op.outputs)} for op in sg.operations],
            "input_indexes": list(sg.input_indexes), "output_indexes": list(sg.output_indexes)}


def _extensions_to_json(model: Model) -> dict:
    if not model.extension_name_to_prefix:
        return {}
    return {"extensions": [{"name": e.name, "prefix": e.prefix} for e in model.extension_name_to_prefix]}


def test_to_json(t: TestModel) -> dict:
    names = {e.prefix: e.name for e in t.model.extension_name_to_prefix}
    return {"name": t.name, "min_feature_level": t.min_feature_level, "expect_failure": t.expect_failure,
            "is_relaxed": t.is_relaxed, "expected_multinomial_distribution_tolerance": t.multinomial_tolerance,
            **_extensions_to_json(t.model), **({"accuracy_criteria": t.criteria} if t.criteria else {}),
            "main": subgraph_to_json(t.model.main, t.inputs, t.expected, t.ignored, names),
            "referenced": [subgraph_to_json(sg, names=names) for sg in t.model.referenced]}


def model_to_json(model: Model) -> dict:
    """A bare model (no inputs or expectations) in the test-vector subgraph encoding."""
    names = {e.prefix: e.name for e in model.extension_name_to_prefix}
    return {"is_relaxed": model.relax_computation_float32_to_float16, **_extensions_to_json(model),
            "main": subgraph_to_json(model.main, names=names),
            "referenced": [subgraph_to_json(sg, names=names) for sg in model.referenced]}


def model_from_json(d: dict) -> Model:
    prefixes = _prefixes_from_json(d, "model")
    main = _subgraph_from_json(d["main"], "main", False, prefixes)[0]
    referenced = [_subgraph_from_json(r, f"subgraph {k}", False, prefixes)[0]
                  for k, r in enumerate(d.get("referenced") or [])]
    return Model(main, referenced, bool(d.get("is_relaxed", False)), prefixes)


def write_file(path: str | os.PathLike, tests: list[TestModel], source: str = "nnts") -> None:
    uses_extensions = any(t.model.extension_name_to_prefix for t in tests)
    doc = {"format": FORMAT_EXTENSIONS if uses_extensions else FORMAT, "source": source, "license": LICENSE, "tests": [test_to_json(t) for t in tests]}
    write_text_atomic(path, json.dumps(doc))


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a new private file beside it renamed into place, at
    the umask's mode: a symlink planted at ``path`` is replaced, never followed, and no reader
    sees half a file."""
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)[:64]}.", suffix=".tmp",
                               dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# -- variants ----------------------------------------------------------------------------------

def _signed(array: np.ndarray) -> np.ndarray:
    return (array.astype(np.int16) - 128).astype(np.int8)


def signed_twin(test: TestModel) -> TestModel | None:
    """The model with every TENSOR_QUANT8_ASYMM operand made TENSOR_QUANT8_ASYMM_SIGNED (zero point
    and values shifted by -128): it must compute the same real values. None when the model has no
    such operand, or has an operation whose meaning the shift changes (its declaration's
    ``same_when_signed``: CAST, PAD_V2)."""
    subgraphs = [test.model.main] + test.model.referenced
    if not any(o.type == OperandCode.TENSOR_QUANT8_ASYMM for sg in subgraphs for o in sg.operands):
        return None
    registry = ops.load_all()
    if any(op.type in registry and not registry[op.type].same_when_signed for sg in subgraphs for op in sg.operations):
        return None

    def convert(sg: Subgraph) -> Subgraph:
        operands = []
        for o in sg.operands:
            if o.type == OperandCode.TENSOR_QUANT8_ASYMM:
                value = None if o.value is None else _signed(o.value)
                o = Operand(OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, o.dimensions, o.scale, o.zero_point - 128,
                            o.lifetime, value, o.channel_quant)
            else:
                o = Operand(o.type, o.dimensions, o.scale, o.zero_point, o.lifetime, o.value, o.channel_quant)
            operands.append(o)
        return Subgraph(operands, list(sg.operations), sg.input_indexes, sg.output_indexes)

    main = convert(test.model.main)
    model = Model(main, [convert(sg) for sg in test.model.referenced], test.model.relax_computation_float32_to_float16)

    def shift(indexes, values):
        return [v if v is None or test.model.main.operands[k].type != OperandCode.TENSOR_QUANT8_ASYMM else _signed(v)
                for k, v in zip(indexes, values)]

    return TestModel(name=f"{test.name}_signed_twin", model=model,
                     inputs=shift(test.model.main.input_indexes, test.inputs),
                     expected=shift(test.model.main.output_indexes, test.expected), ignored=list(test.ignored),
                     min_feature_level=max(test.min_feature_level or 0, 30), expect_failure=test.expect_failure,
                     multinomial_tolerance=test.multinomial_tolerance, source=test.source,
                     output_dims=list(test.output_dims))
