"""How many .tflite models the importer takes, and whether they then compute what TFLite computes.

    python -m nnts.mlts.import_coverage FILE_OR_DIR... [--samples N] [--json OUT]

For every model (a folder: its ``*.tflite`` files, recursively): import it with
:func:`nnts.formats.tflite.importer.load_tflite`; if that fails, the reason and every operator the importer has no
mapping for. If it imports, run it on nnapi_ref (the runtime's devices, CPU fallback) and in
TFLite's interpreter (reference kernels; its default ones when the reference resolver lacks an
operator; a fresh one per input for models with resource variables) on the same seeded synthetic
inputs (:func:`mlts.models.synthetic_inputs`), and compare
every output: the max absolute error (dequantized), that error relative to the largest TFLite
output magnitude, and for quantized outputs the max error in quantization steps.

A model *agrees* when every output is within ``FLOAT_RTOL`` of TFLite's largest magnitude (float
outputs) or within ``QUANT_STEPS`` steps (quantized outputs): both runtimes sum in different
orders and round requantizations differently, so a correct import is close, not bit-exact. In a
deep quantized network single-step flips (NNAPI forms the requantization multiplier from the
float32 product of the scales, TFLite from the double one) propagate: on ../shared/models'
MobileNet quant classifiers the import differs from TFLite's reference kernels by up to 5 (v1)
and 8 (v2) output steps, and TFLite's own XNNPACK and reference kernels differ from each other by
8 and 11 (README); hence 8.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from nnapi_ref import Compilation
from nnapi_ref.errors import NnapiError
from nnts.formats.files import UsageError, output_path, write_atomic
from nnts.formats.tflite.importer import TFLiteImportError, infer, load_tflite, parse_tflite, unmapped_operators
from nnts.mlts.bench import accuracy
from nnts.mlts.models import synthetic_inputs
from nnts.mlts.tflite_baseline import TfliteRunner, tflite_interpreter_class
from nnts.mlts.tflite_probe import crash_reason

FLOAT_RTOL = 1e-3
QUANT_STEPS = 8
STATUSES = ("agrees", "differs", "refused", "failed", "no baseline")


def model_files(specs) -> list[Path]:
    files = []
    for spec in specs:
        p = Path(spec)
        files += sorted(p.rglob("*.tflite")) if p.is_dir() else [p]
    return files


def tflite_baseline(path: Path):
    """(runner, kernels) for TFLite's interpreter, or (None, why) when TFLite cannot load the model."""
    if tflite_interpreter_class()[0] is None:
        return None, "ai-edge-litert is not installed"
    crashed = crash_reason(path)  # in a child: its crash is this row's detail, not the end of the run
    if crashed:
        return None, crashed
    try:
        return TfliteRunner(path, reference_kernels=True), "reference"
    except (ValueError, RuntimeError):
        pass
    try:
        return TfliteRunner(path), "default"
    except (ValueError, RuntimeError) as e:
        return None, str(e).strip().splitlines()[0]


def run_nnapi(model, info, samples) -> list[list[np.ndarray]]:
    compilation = Compilation(model)
    compilation.finish()
    return [infer(compilation, info, inputs) for inputs in samples]


def cover(path: Path, samples: int = 2) -> dict:
    """One model's row (see the module doc)."""
    row = {"model": str(path), "operators": None, "status": None, "detail": "", "refused": []}
    try:
        graph = parse_tflite(path.read_bytes())
        row["operators"] = len(graph.operators)
        row["refused"] = unmapped_operators(graph)
        model, info = load_tflite(path)
    except (TFLiteImportError, OSError) as e:
        row.update(status="refused", detail=str(e))
        return row
    row["nnapi_operations"] = len(info.nnapi_operations)
    specs = [(i.shape, i.dtype, i.scale, i.zero_point) for i in info.inputs]
    inputs = list(zip(*[synthetic_inputs(*spec, samples, seed=k) for k, spec in enumerate(specs)]))
    try:
        ours = run_nnapi(model, info, inputs)
    except NnapiError as e:
        row.update(status="failed", detail=f"nnapi_ref: {e}")
        return row
    base, kernels = tflite_baseline(path)
    if base is None:
        row.update(status="no baseline", detail=f"TFLite cannot run it: {kernels}")
        return row
    row["tflite_kernels"] = kernels
    if any(op.name == "VAR_HANDLE" for op in graph.operators):
        # Resource variables keep their values across invocations (reset_all_variables() does not
        # reset them): a fresh interpreter per sample, as every nnapi_ref inference starts afresh.
        theirs = [TfliteRunner(path, reference_kernels=kernels == "reference").run(x) for x in inputs]
    else:
        theirs = [base.run(x) for x in inputs]
    worst = {"max_abs_error": 0.0, "relative_error": 0.0, "max_error_steps": 0}
    agrees = True
    for j, out in enumerate(info.outputs):
        acc = accuracy(out, [o[j] for o in ours], [t[j] for t in theirs], classifier=False, sequence=False)
        scale = max(float(np.max(np.abs(np.stack([out.dequantize(t[j]) for t in theirs])))), 1e-30)
        worst["max_abs_error"] = max(worst["max_abs_error"], acc["max_abs_error"])
        worst["relative_error"] = max(worst["relative_error"], acc["max_abs_error"] / scale)
        if out.quantized:
            worst["max_error_steps"] = max(worst["max_error_steps"], acc["max_error_steps"])
            agrees &= acc["max_error_steps"] <= QUANT_STEPS
        else:
            agrees &= acc["max_abs_error"] <= FLOAT_RTOL * scale
    row.update(worst, status="agrees" if agrees else "differs")
    return row


def print_table(rows: list[dict], out=None) -> None:
    out = out or sys.stdout
    w = max([len(Path(r["model"]).name) for r in rows] + [5])
    print(f"{'model':<{w}}  {'ops':>4}  {'status':<11}  {'max abs err':>11}  {'relative':>9}  {'steps':>5}  detail",
          file=out)
    for r in rows:
        ops = "" if r["operators"] is None else str(r["operators"])
        if "max_abs_error" in r:
            figures = f"{r['max_abs_error']:>11.3g}  {r['relative_error']:>9.2g}  {r['max_error_steps']:>5}"
        else:
            figures = f"{'':>11}  {'':>9}  {'':>5}"
        detail = r["detail"]
        if r["status"] == "refused" and r["refused"]:
            detail = f"unmapped: {', '.join(r['refused'])}; first error: {detail}"
        print(f"{Path(r['model']).name:<{w}}  {ops:>4}  {r['status']:<11}  {figures}  {detail}", file=out)
    counts = {s: sum(r["status"] == s for r in rows) for s in STATUSES}
    imported = len(rows) - counts["refused"]
    print(f"\n{len(rows)} models: {imported} import ({', '.join(f'{n} {s}' for s, n in counts.items() if n)})",
          file=out)
    refused = sorted({op for r in rows for op in r["refused"]})
    if refused:
        print(f"operators without a mapping: {', '.join(refused)}", file=out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nnts.mlts.import_coverage", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help=".tflite files or folders of them")
    parser.add_argument("--samples", type=int, default=2, help="seeded inputs per model (default 2)")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    args = parser.parse_args(argv)
    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        parser.error(f"no such file or folder: {', '.join(missing)}")
    if args.samples < 1:
        parser.error(f"--samples {args.samples}: must be 1 or more")
    try:
        output_path("--json", args.json)
    except UsageError as e:
        parser.error(str(e))
    files = model_files(args.paths)
    if not files:
        parser.error("no .tflite files found")
    rows = []
    for f in files:
        try:
            rows.append(cover(f, args.samples))
        except Exception as e:  # a bug of ours on one model: its row, the others still run
            rows.append({"model": str(f), "operators": None, "status": "failed", "refused": [],
                         "detail": f"import_coverage failed on it: {type(e).__name__}: {e}"})
    print_table(rows)
    if args.json:
        write_atomic(args.json, json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
