"""Where a driver's arithmetic first departs from TensorFlow Lite's, operator by operator.

    python -m nnts.mlts.diverge MODEL.tflite [--driver D] [--convention nnapi|tflite] [--inputs FILE]

Imports the model with every TFLite operator's output exposed as an extra model output
(:func:`nnts.formats.tflite.importer.load_tflite` ``extra_outputs``), runs it on the driver alone (no CPU
fallback), runs the file in TFLite's reference kernels (``OpResolverType.BUILTIN_REF``,
``experimental_preserve_all_tensors=True``: every intermediate stays readable) and compares the
two tensor by tensor, on every input. It prints every operator output that differs (quantization
steps for quantized tensors, absolute difference for float ones, and how many elements; "with
identical inputs" when the operator's inputs agree, so the difference is its own arithmetic,
not one carried from upstream), names the first one, and ends with
``N differing elements in K of M operator outputs``. Exit status 0 when nothing differs, 1 when
something does.

``--driver`` is any driver string (default ``reference``). ``--convention`` picks the reference
driver's quantized arithmetic convention (see :mod:`nnapi_ref.ops.requantization`): ``nnapi``
(AOSP's CPU implementation, the default) or ``tflite``; it only applies to the reference driver,
and ``tflite`` also imports the model under TFLite's convention (``load_tflite(...,
convention="tflite")``: a quantized MEAN keeps TFLite's output quantization, which valid NNAPI
cannot express, and the driver computes TFLite's integer mean).
``--inputs`` is an .npz whose arrays are batches of the model's first input (axis 0; dtype and
shape of the input); without it the real images of ``../shared/models`` are used (as
``nnts bench`` prepares them), else 2 random inputs (seed 0).
"""
from __future__ import annotations

import argparse
import os
import sys
import zipfile
from pathlib import Path

import numpy as np

from nnapi_ref import Compilation
from nnapi_ref.errors import NnapiError
from nnapi_ref.runtime.devices import Device
from nnts.formats import files
from nnts.formats.tflite.importer import TFLiteImportError, infer, load_tflite, parse_tflite
from nnts.mlts.bench import MODELS_DIR, model_inputs
from nnts.mlts.tflite_baseline import tflite_interpreter_class
from nnts.mlts.tflite_probe import crash_reason
from nnts.runners.drivers import load_driver
from nnts.runners.settings import Settings, entry_point


def operator_outputs(path) -> list[tuple[int, str, int, list[int]]]:
    """(operator index, operator name, output tensor, input tensors) for every operator output,
    in order."""
    g = parse_tflite(Path(path).read_bytes())
    return [(i, op.name, k, [j for j in op.inputs if j >= 0])
            for i, op in enumerate(g.operators) for k in op.outputs if k >= 0]


def reference_driver_string(convention: str) -> str:
    return "reference" if convention == "nnapi" else f"nnapi_ref.drivers.reference:{convention}_convention"


def load_inputs(path: str | None, shape, dtype, scale, zero_point) -> list[np.ndarray]:
    if path is not None:
        with np.load(path, allow_pickle=False) as npz:
            batches = [npz[k] for k in npz.files]
        samples = [b[i][None] for b in batches for i in range(b.shape[0])
                   if tuple(b.shape[1:]) == tuple(shape[1:]) and b.dtype == dtype]
        if not samples:
            raise SystemExit(f"{path}: no array of shape (N, {', '.join(map(str, shape[1:]))}) and dtype {dtype}")
        return samples
    samples, _ = model_inputs(MODELS_DIR, shape, dtype, scale, zero_point)
    if samples:
        return samples
    rng = np.random.default_rng(0)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return [rng.integers(info.min, info.max + 1, size=shape).astype(dtype) for _ in range(2)]
    return [rng.uniform(-1, 1, size=shape).astype(dtype) for _ in range(2)]


class Difference:
    """One operator output's comparison over all inputs."""

    def __init__(self, index: int, op: str, tensor: int, name: str, inputs: list[int]):
        self.index, self.op, self.tensor, self.name, self.inputs = index, op, tensor, name, inputs
        self.local = False      # differs although every input is identical in both runtimes
        self.elements = 0       # differing elements over all inputs
        self.total = 0
        self.largest = 0.0      # quantization steps (quantized) or absolute difference (float)
        self.shape = ()
        self.quantized = False

    def add(self, ours: np.ndarray, theirs: np.ndarray) -> None:
        theirs = theirs.reshape(ours.shape)
        self.shape, self.total = ours.shape, self.total + ours.size
        self.quantized = np.issubdtype(ours.dtype, np.integer)
        if self.quantized:
            d = np.abs(ours.astype(np.int64) - theirs.astype(np.int64))
        else:
            d = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
            d[np.isnan(d) & (np.isnan(ours) == np.isnan(theirs))] = 0
        self.elements += int(np.count_nonzero(d))
        if d.size:
            self.largest = max(self.largest, float(np.nanmax(d)) if not np.all(np.isnan(d)) else np.inf)

    def describe(self) -> str:
        largest = f"{int(self.largest)} step(s)" if self.quantized else f"{self.largest:.3g} (absolute)"
        name = self.name if len(self.name) <= 48 else self.name[:45] + "..."
        return (f"operator {self.index} {self.op} (tensor {self.tensor} {name!r}, {tuple(self.shape)}): "
                f"{self.elements} of {self.total} elements differ, by up to {largest}"
                + (", with identical inputs" if self.local else ""))


def diverge(path, driver: str = "reference", inputs: list[np.ndarray] | None = None,
            inputs_file: str | None = None, convention: str = "nnapi",
            settings: Settings = Settings()) -> list[Difference]:
    """Compare every operator output of ``path`` on ``driver`` with TFLite's reference kernels;
    one :class:`Difference` per operator output, in operator order. ``convention`` is the
    import's (:func:`nnts.formats.tflite.importer.load_tflite`)."""
    # Operator outputs folded into constants at import (float16 or sparse weights, SHAPE) are
    # no NNAPI operation's: only the computed ones can be exposed and compared.
    computed = load_tflite(path, convention=convention)[1].operand_of
    outputs = [o for o in operator_outputs(path) if o[2] in computed]
    model, info = load_tflite(path, extra_outputs=[k for _, _, k, _ in outputs], convention=convention)
    position = {t.tensor: j for j, t in enumerate(info.outputs)}
    inp = info.inputs[0]
    if inputs is None:
        inputs = load_inputs(inputs_file, inp.shape, inp.dtype, inp.scale, inp.zero_point)
    compilation = Compilation(model, [Device(load_driver(driver, settings=settings))])
    compilation.finish()
    interpreter_cls, resolver = tflite_interpreter_class()
    if interpreter_cls is None:
        raise SystemExit("mlts.diverge needs ai-edge-litert (TFLite's reference kernels)")
    interpreter = interpreter_cls(model_path=str(path), num_threads=1,
                                  experimental_op_resolver_type=resolver.BUILTIN_REF,
                                  experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    input_index = interpreter.get_input_details()[0]["index"]
    names = {d["index"]: d["name"] for d in interpreter.get_tensor_details()}
    diffs = [Difference(i, op, k, names.get(k, ""), ins) for i, op, k, ins in outputs]
    for x in inputs:
        ours = infer(compilation, info, [x])
        interpreter.set_tensor(input_index, x)
        interpreter.invoke()
        for d in diffs:
            d.add(ours[position[d.tensor]], interpreter.get_tensor(d.tensor))
    differs = {d.tensor for d in diffs if d.elements}
    for d in diffs:
        d.local = d.elements > 0 and not differs.intersection(d.inputs)
    return diffs


def report(diffs: list[Difference], out=None) -> int:
    """Print the differing outputs, the first one, and the closing count (to ``out``, default
    stdout); return the total count."""
    out = out or sys.stdout
    differing = [d for d in diffs if d.elements]
    for d in differing:
        print(d.describe(), file=out)
    if differing:
        print(f"first differing: {differing[0].describe()}", file=out)
    total = sum(d.elements for d in differing)
    print(f"{total} differing elements in {len(differing)} of {len(diffs)} operator outputs", file=out)
    return total


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="a .tflite file")
    parser.add_argument("--driver", help="driver string (default: reference)")
    parser.add_argument("--convention", choices=("nnapi", "tflite"),
                        help="the reference driver's quantized arithmetic convention (default nnapi)")
    parser.add_argument("--inputs", help=".npz of input batches (default: ../shared/models images, else random)")
    args = parser.parse_args(argv)
    if args.driver and args.convention:
        parser.error("--convention applies to the reference driver; give --driver or --convention, not both")
    convention = args.convention or "nnapi"
    driver = args.driver or reference_driver_string(convention)
    try:
        files.input_file("model", str(args.model), text=False)
        files.input_file("--inputs", args.inputs, text=False)
        crashed = crash_reason(args.model)  # TFLite runs it in this process below: not if it crashes
        if crashed:
            raise files.UsageError(f"{args.model}: {crashed}")
        print(f"{args.model.name} on {driver} against TFLite's reference kernels:", flush=True)
        diffs = diverge(args.model, driver, inputs_file=args.inputs, convention=convention,
                        settings=entry_point(os.environ))
    except (files.UsageError, TFLiteImportError, NnapiError) as e:
        print(f"mlts.diverge: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:  # an --inputs file that is not an .npz
        print(f"mlts.diverge: {args.inputs}: not a readable .npz of inputs ({type(e).__name__}: {e})",
              file=sys.stderr)
        return 2
    return 1 if report(diffs) else 0


if __name__ == "__main__":
    sys.exit(main())
