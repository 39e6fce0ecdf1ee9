"""Write .tflite flatbuffers with TensorFlow Lite's own schema: the object API of
``ai_edge_litert.schema_py_generated`` (flatc-generated, shipped with the interpreter, so the
schema always matches the runtime that reads the file), packed by the ``flatbuffers`` package.

Shared by the ``tflite`` driver (NNAPI models converted for the interpreter), the benchmark's
seeded models (:mod:`nnts.mlts.models.builder`) and the importer's tests.
"""
from __future__ import annotations

import numpy as np

try:
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema
except ImportError:  # pragma: no cover - depends on the environment
    flatbuffers = schema = None

# numpy dtype name -> schema TensorType
TYPES = {"float32": 0, "float16": 1, "int32": 2, "uint8": 3, "int64": 4, "bool": 6, "int16": 7, "int8": 9}


def available() -> str | None:
    """None when .tflite files can be written here, else why not."""
    return None if schema is not None else "writing .tflite files needs ai-edge-litert (its schema) and flatbuffers"


class GraphBuilder:
    """One subgraph's tensors, buffers and operators; :meth:`finish` packs the model."""

    def __init__(self, description: str):
        self.description = description
        self.tensors: list = []
        self.buffers = [schema.BufferT()]   # buffer 0: the empty buffer of every activation
        self.operators: list = []
        self.opcodes: dict[str, int] = {}   # BuiltinOperator name -> index in self.codes
        self.codes: list = []

    def tensor(self, name: str, shape, dtype: str = "float32", data=None, scale=None, zero_point=None,
               axis: int = 0, variable: bool = False, signature=None, sparsity=None, stored=None) -> int:
        """Append a tensor; ``data`` makes it a constant, ``scale`` (one, or one per slice along
        ``axis``) quantized, ``signature`` (-1 for an unknown dimension) dynamically shaped;
        ``sparsity`` (a ``SparsityParametersT``) makes it sparse, its buffer ``stored`` (the values
        the sparse format keeps) in place of ``data``."""
        t = schema.TensorT()
        t.name, t.shape, t.type, t.isVariable = name, [int(d) for d in shape], TYPES[dtype], variable
        if signature is not None:
            t.shapeSignature = [int(d) for d in signature]
        t.sparsity = sparsity
        t.buffer = 0
        values = stored if stored is not None else data
        if values is not None:
            b = schema.BufferT()
            b.data = np.ascontiguousarray(values, dtype).reshape(-1).view(np.uint8)
            t.buffer = len(self.buffers)
            self.buffers.append(b)
        if scale is not None:
            q = schema.QuantizationParametersT()
            q.scale = list(np.atleast_1d(np.asarray(scale, np.float32)).tolist())
            q.zeroPoint = list(np.broadcast_to(np.asarray(zero_point, np.int64), len(q.scale)).tolist())
            q.quantizedDimension = axis
            t.quantization = q
        self.tensors.append(t)
        return len(self.tensors) - 1

    def op(self, name: str, inputs, outputs, options=None, version: int = 1) -> None:
        """Append operator ``name`` (a BuiltinOperator name); ``options`` an ``...OptionsT`` object;
        an input of -1 is an omitted optional input; ``version`` the operator's (TFLite registers
        some from 2 only: BROADCAST_TO)."""
        if name not in self.opcodes:
            code = schema.OperatorCodeT()
            code.builtinCode = getattr(schema.BuiltinOperator, name)
            code.deprecatedBuiltinCode = min(code.builtinCode, 127)
            code.version = version
            self.opcodes[name] = len(self.codes)
            self.codes.append(code)
        o = schema.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = self.opcodes[name], list(inputs), list(outputs)
        if options is not None:
            o.builtinOptionsType = getattr(schema.BuiltinOptions, type(options).__name__[:-1])
            o.builtinOptions = options
        self.operators.append(o)

    def custom_op(self, code: str, inputs, outputs, custom_options: bytes) -> None:
        """Append a custom operator ``code`` (TFLite's own custom kernels: Convolution2DTransposeBias)."""
        c = schema.OperatorCodeT()
        c.builtinCode, c.deprecatedBuiltinCode, c.customCode, c.version = 32, 32, code, 1
        self.codes.append(c)
        o = schema.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = len(self.codes) - 1, list(inputs), list(outputs)
        o.customOptions = np.frombuffer(custom_options, np.uint8)
        self.operators.append(o)

    def subgraph(self, inputs, outputs, name: str = ""):
        """The tensors and operators so far as a subgraph (a WHILE's condition or body, say); the
        next ones start a new one, sharing buffers and operator codes."""
        sg = schema.SubGraphT()
        sg.tensors, sg.operators, sg.inputs, sg.outputs, sg.name = self.tensors, self.operators, list(inputs), \
            list(outputs), name
        self.tensors, self.operators = [], []
        return sg

    def finish(self, inputs, outputs, others=()) -> bytes:
        """The model: the current subgraph (main), then ``others`` (from :meth:`subgraph`)."""
        m = schema.ModelT()
        m.version, m.buffers, m.description = 3, self.buffers, self.description
        m.subgraphs = [self.subgraph(inputs, outputs, "main")] + list(others)
        m.operatorCodes = self.codes
        fb = flatbuffers.Builder(1 << 16)
        fb.Finish(m.Pack(fb), file_identifier=b"TFL3")
        return bytes(fb.Output())


def options(kind: str, **fields):
    """A ``<kind>T`` options object of the schema with ``fields`` set (camelCase names)."""
    o = getattr(schema, kind + "T")()
    for k, v in fields.items():
        setattr(o, k, v)
    return o
