"""``nnts graph``: a model as a Graphviz graph, as NNAPI's GraphDump prints one.

Operations are boxes, the tensors between them ellipses; the model's inputs and outputs are
marked (a house shape, bold), and constants are folded into the label of the operation that
reads them (a scalar with its value, a tensor with its type and shape; a parameter by its NNAPI name,
"stride 2x2", :mod:`nnts.runners.parameters`), so the picture shows the data flow rather than
dozens of weight nodes. With ``--driver``, each operation is coloured
by the device the runtime's partitioner assigns it to (the same decision a compilation makes,
``nnapi_ref.runtime.compilation.partition``), with a legend. SVG comes from Graphviz's ``dot``
(Debian package ``graphviz``) when it is installed; the dot text needs nothing.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from nnapi_ref.hal import Model, Subgraph
from nnapi_ref.runtime.compilation import partition
from nnapi_ref.runtime.devices import Device
from nnapi_ref.types import SCALAR_TYPES, Lifetime, OperandCode, OperationCode, PreferenceCode
from nnapi_ref.validation import CONSTANT_LIFETIMES, topological_order
from nnapi_ref.vectors import FormatError, load_file
from nnts.formats import files
from nnts.formats.tflite.importer import load_tflite
from nnts.runners.drivers import load_drivers
from nnts.runners.parameters import parameter_names, parameters
from nnts.runners.settings import Settings

PALETTE = ("#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69", "#fccde5", "#d9d9d9")
MAX_SCALAR_LABEL = 6  # a constant with up to this many elements shows its values


class GraphError(Exception):
    """A model file that cannot be read (one line for the command)."""


def load_model(path: str) -> tuple[Model, str]:
    """The HAL model of a test-vector file (its first test) or a .tflite file, and its name."""
    if not os.path.exists(path):
        raise GraphError(f"{path}: no such file")
    if path.endswith(".tflite"):
        try:
            model, _ = load_tflite(path)
        except (ValueError, OSError) as e:
            raise GraphError(f"{path}: cannot import: {e}") from None
        return model.hal_model, Path(path).stem
    try:
        tests = load_file(path)
    except FormatError as e:
        raise GraphError(e.message) from None
    if not tests:
        raise GraphError(f"{path}: the file holds no test")
    problem = _index_problem(tests[0].model)
    if problem:
        raise GraphError(f"{path}: test {tests[0].name}: {problem}")
    return tests[0].model, tests[0].name


def _index_problem(model: Model) -> str | None:
    """What operand index of ``model`` names no operand (a file's model is drawn unvalidated, so
    that a model NNAPI refuses can be looked at, but every index it draws must exist)."""
    for n, sg in enumerate((model.main, *model.referenced)):
        where = "main" if n == 0 else f"subgraph {n - 1}"
        count = len(sg.operands)
        for j, operation in enumerate(sg.operations):
            bad = [k for k in (*operation.inputs, *operation.outputs) if not 0 <= k < count]
            if bad:
                return f"{where} operation {j} names operand {bad[0]} of {count}"
        bad = [k for k in (*sg.input_indexes, *sg.output_indexes) if not 0 <= k < count]
        if bad:
            return f"{where}: input or output index {bad[0]} of {count} operands"
    return None


def _type(code) -> str:
    try:
        return OperandCode(code).name
    except ValueError:
        return str(code)


def _operation_name(code) -> str:
    try:
        return OperationCode(code).name
    except ValueError:
        return f"operation {code}"


def _constant_text(operand) -> str:
    value = np.asarray(operand.value) if operand.value is not None else None
    if operand.type in SCALAR_TYPES and value is not None and value.size == 1:
        return f"{_type(operand.type)} {value.reshape(-1)[0].item()!r}"
    shape = "x".join(str(d) for d in operand.dimensions)
    if value is not None and value.size <= MAX_SCALAR_LABEL:
        return f"{_type(operand.type)} [{shape}] = {np.array2string(value.reshape(-1), separator=',')}"
    return f"{_type(operand.type)} [{shape}] const"


def _quote(text: str) -> str:
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + _CONTROL.sub(lambda m: f"\\\\x{ord(m.group()):02x}", text) + '"'  # shown, not obeyed by a terminal


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def assign_devices(model: Model, driver: str, settings: Settings = Settings()) -> dict[int, str]:
    """The device name per main operation index, as the runtime's partitioner assigns them
    among the drivers of the ``--driver`` string ``driver``."""
    try:
        drivers = load_drivers(driver, settings=settings)
    except Exception as e:  # a bad driver string or a driver that does not start: one line
        raise GraphError(f"--driver {driver}: {e}") from None
    return partition_devices(model, [Device(d) for d in drivers])


def partition_devices(model: Model, devices) -> dict[int, str]:
    """The device name per main operation index among runtime ``devices``."""
    steps = partition(_in_execution_order(model), devices, PreferenceCode.FAST_SINGLE_ANSWER, allow_cpu=True)
    order = topological_order(model.main)
    return {order[j]: device.name for device, group in steps for j in group}


def _in_execution_order(model: Model) -> Model:
    """A copy whose main operations are in execution order (what drivers are handed)."""
    order = topological_order(model.main)
    main = model.main
    sg = Subgraph(main.operands, [main.operations[j] for j in order], main.input_indexes, main.output_indexes)
    return Model(sg, model.referenced, model.relax_computation_float32_to_float16)


def to_dot(model: Model, name: str = "model", devices: dict[int, str] | None = None) -> str:
    """The dot text of ``model``'s main subgraph; ``devices``: device name per operation."""
    main = model.main
    inputs, outputs = set(main.input_indexes), set(main.output_indexes)
    colours = {}
    for device in sorted(set((devices or {}).values())):
        colours[device] = PALETTE[len(colours) % len(PALETTE)]
    lines = [f"digraph {_quote(name)} {{", "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=9];']
    for k, operand in enumerate(main.operands):
        if operand.lifetime in CONSTANT_LIFETIMES or operand.lifetime in (Lifetime.NO_VALUE, Lifetime.SUBGRAPH):
            continue
        shape = "x".join(str(d) for d in operand.dimensions) or "?"
        label = f"#{k} {_type(operand.type)} [{shape}]"
        if k in inputs:
            lines.append(f"  t{k} [label={_quote('input ' + str(main.input_indexes.index(k)) + chr(10) + label)}, "
                         f"shape=invhouse, style=bold];")
        elif k in outputs:
            lines.append(f"  t{k} [label={_quote('output ' + str(main.output_indexes.index(k)) + chr(10) + label)}, "
                         f"shape=house, style=bold];")
        else:
            lines.append(f"  t{k} [label={_quote(label)}, shape=ellipse];")
    for j, operation in enumerate(main.operations):
        rows = [f"{_operation_name(operation.type)} (#{j})"]
        names = parameter_names(main, operation)
        rows += [phrase for phrase in parameters(main, operation) if not phrase.endswith(" at run time")]
        for position, k in enumerate(operation.inputs):
            operand = main.operands[k]
            if position in names:
                continue  # said by its name above, or an edge labelled with it below
            if operand.lifetime in CONSTANT_LIFETIMES:
                rows.append(f"in{position}: {_constant_text(operand)}")
            elif operand.lifetime == Lifetime.NO_VALUE:
                rows.append(f"in{position}: omitted")
            elif operand.lifetime == Lifetime.SUBGRAPH:
                rows.append(f"in{position}: subgraph {operand.value}")
        style = ""
        if devices is not None and j in devices:
            rows.append(f"on {devices[j]}")
            style = f', style=filled, fillcolor="{colours[devices[j]]}"'
        lines.append(f"  op{j} [label={_quote(chr(10).join(rows))}, shape=box{style}];")
        for position, k in enumerate(operation.inputs):
            if main.operands[k].lifetime not in CONSTANT_LIFETIMES + (Lifetime.NO_VALUE, Lifetime.SUBGRAPH):
                lines.append(f"  t{k} -> op{j} [label={_quote(names.get(position, f'in{position}'))}];")
        for k in operation.outputs:
            lines.append(f"  op{j} -> t{k};")
    if colours:
        lines.append("  subgraph cluster_legend { label=\"devices\"; fontname=\"Helvetica\";")
        for n, (device, colour) in enumerate(colours.items()):
            lines.append(f"    legend{n} [label={_quote(device)}, shape=box, style=filled, fillcolor=\"{colour}\"];")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def dot_program() -> str | None:
    return shutil.which("dot")


def render_svg(dot_text: str, out: str) -> None:
    """Write the SVG of ``dot_text`` to ``out`` (atomically) through Graphviz."""
    _write(out, _svg(dot_text))


def _svg(dot_text: str) -> str:
    """The SVG of ``dot_text``, through Graphviz."""
    program = dot_program()
    if program is None:
        raise GraphError("Graphviz's dot is not installed (apt-get install graphviz); use --dot for the text")
    try:
        done = subprocess.run([program, "-Tsvg"], input=dot_text, capture_output=True, text=True, errors="replace",
                              timeout=120)
    except subprocess.TimeoutExpired:
        raise GraphError("dot ran past 120 s (a model too large to draw; use --dot for the text)") from None
    if done.returncode != 0:
        raise GraphError(f"dot failed: {done.stderr.strip()[:300]}")
    return done.stdout


def _write(path: str, text: str) -> None:
    try:
        files.write_atomic(path, text)
    except OSError as e:
        raise GraphError(f"{path}: cannot write: {e.strerror or e}") from None


def picture_beside(model_path: str | os.PathLike) -> Path | None:
    """The SVG of a model file written beside it (``x.json`` -> ``x.svg``) when Graphviz is
    installed, for failure messages (a random graph's reproducer); None without Graphviz or when
    it fails (a picture is a help, never a reason for the failure report to fail)."""
    if dot_program() is None:
        return None
    out = Path(model_path).with_suffix(".svg")
    try:
        model, name = load_model(str(model_path))
        render_svg(to_dot(model, name), str(out))
    except (GraphError, OSError, subprocess.TimeoutExpired):
        return None
    return out


def main(path: str, driver: str | None = None, svg: str | None = None, dot: str | None = None,
         settings: Settings = Settings()) -> int:
    """``nnts graph``: dot text to stdout (or --dot FILE), or an SVG (--svg FILE)."""
    try:
        model, name = load_model(path)
        devices = assign_devices(model, driver, settings) if driver else None
        text = to_dot(model, name, devices)
        for out in (svg, dot):
            if out and out != "-" and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
                raise GraphError(f"{out}: the folder does not exist")
        if svg and svg != "-":
            render_svg(text, svg)
        elif svg:  # "-": the standard output, as the shell's tools have it
            sys.stdout.write(_svg(text))
        elif dot and dot != "-":
            _write(dot, text)
        else:
            sys.stdout.write(text)
    except GraphError as e:
        print(f"nnts graph: {e}", file=sys.stderr)
        return 2
    return 0
