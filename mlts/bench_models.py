"""Real .tflite models side by side: nnapi_ref (the models imported by :mod:`mlts.tflite`) against
TensorFlow Lite itself, for latency and agreement.

    python -m mlts.bench_models [--quick] [--models GLOB] [--models-dir DIR] [--json FILE] [--ref-kernels]

For every ``*.tflite`` in the models folder (default ``../shared/models`` of the repository, as
described by its README.md): import it with :func:`mlts.tflite.load_tflite`, compile it for the
reference driver and run it through ``Compilation`` / ``Execution`` (as ``mlts.bench_ops`` does),
and run the original file in ``ai_edge_litert``'s Interpreter with one thread (default op
resolver, XNNPACK on), both on one CPU thread, on the real inputs of the folder:

* classifiers: every image of ``images.npz`` of the model's input size; float models get
  ``pixel / 127.5 - 1``, uint8 models the raw pixels (the models' own conventions);
* LSTMs: every sequence of ``lstm_inputs.npz`` of the model's input shape, TFLite's variable
  state tensors reset before each (``reset_all_variables``), as nnapi_ref starts from zero states.

Reports per model: ms/inference for each (best and median over all timed runs; the two are
timed alternately, input by input, so that a shared machine's drift affects both alike), the
ratio of the medians nnapi_ref / TFLite, and agreement: for classifiers (a SOFTMAX at the end) the fraction of
inputs (frames, for sequence outputs) with the same top-1, and the max |difference| of the outputs,
dequantized for quantized outputs (also in quantization steps). A model the importer refuses is
listed with the reason, with TFLite's timing alone. ``--ref-kernels`` also compares with TFLite's
reference kernels (``OpResolverType.BUILTIN_REF``), nearer to NNAPI's arithmetic than XNNPACK.
Not a test: the figures depend on the machine and its load.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import fnmatch  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from mlts.tflite import TFLiteImportError, load_tflite, parse_tflite  # noqa: E402
from nnapi_ref import Compilation, Execution  # noqa: E402

MODELS_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "models"


def tflite_interpreter_class():
    """ai_edge_litert's Interpreter and OpResolverType, or (None, None) when not installed."""
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        return None, None
    return Interpreter, OpResolverType


def model_inputs(models_dir: Path, shape: tuple, dtype: np.dtype, scale: float, zero_point: int):
    """The real inputs for a model input of this shape, as a list of arrays of ``shape``, and a
    label for them; (None, why) when the folder has none."""
    for fname in ("images.npz", "lstm_inputs.npz"):
        path = models_dir / fname
        if not path.exists():
            continue
        with np.load(path, allow_pickle=False) as npz:
            for key in npz.files:
                data = npz[key]
                if data.ndim != len(shape) or tuple(data.shape[1:]) != tuple(shape[1:]) or shape[0] != 1:
                    continue
                samples = [data[i][None] for i in range(data.shape[0])]
                if data.dtype == np.uint8:   # images
                    if dtype == np.uint8:
                        return samples, f"{fname}:{key} (raw pixels)"
                    real = [s.astype(np.float32) / np.float32(127.5) - np.float32(1.0) for s in samples]
                    if dtype == np.float32:
                        return real, f"{fname}:{key} (pixel/127.5 - 1)"
                    info = np.iinfo(dtype)
                    return ([np.clip(np.round(r / scale) + zero_point, info.min, info.max).astype(dtype) for r in real],
                            f"{fname}:{key} (pixel/127.5 - 1, quantized)")
                if dtype == np.float32:
                    return [s.astype(np.float32) for s in samples], f"{fname}:{key}"
    return None, f"no input data of shape {list(shape)} in {models_dir}"


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def summary(times: list[float]) -> dict:
    return {"best_ms": min(times) * 1e3, "median_ms": statistics.median(times) * 1e3, "runs": len(times)}


class NnapiRunner:
    def __init__(self, path: Path):
        t0 = time.perf_counter()
        self.model, self.info = load_tflite(path)
        self.import_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.compilation = Compilation(self.model)
        self.compilation.finish()
        self.compile_s = time.perf_counter() - t0
        out = self.info.outputs[0]
        self.result = np.zeros(out.shape, out.dtype)

    def run(self, x: np.ndarray) -> np.ndarray:
        execution = Execution(self.compilation)
        execution.set_input(0, x)
        execution.set_output(0, self.result)
        execution.compute()
        return self.result.copy()


class TfliteRunner:
    def __init__(self, path: Path, interpreter_cls, resolver=None):
        kwargs = {"experimental_op_resolver_type": resolver} if resolver is not None else {}
        self.it = interpreter_cls(model_path=str(path), num_threads=1, **kwargs)
        self.it.allocate_tensors()
        self.inp = self.it.get_input_details()[0]
        self.out = self.it.get_output_details()[0]
        # Variable tensors (LSTM states) carry over between invokes: reset before each sequence.
        self.stateful = any(t.is_variable for t in parse_tflite(Path(path).read_bytes()).tensors)

    def run(self, x: np.ndarray) -> np.ndarray:
        if self.stateful:
            self.it.reset_all_variables()   # start each sequence from zero states, as nnapi_ref does
        self.it.set_tensor(self.inp["index"], x)
        self.it.invoke()
        return self.it.get_tensor(self.out["index"]).copy()


def agreement(info, ours: list[np.ndarray], theirs: list[np.ndarray], classifier: bool) -> dict:
    out = info.outputs[0]
    a = np.stack([out.dequantize(o) for o in ours])
    b = np.stack([out.dequantize(o) for o in theirs])
    result = {"max_abs_diff": float(np.max(np.abs(a - b)))}
    if out.quantized:
        result["max_diff_steps"] = int(np.max(np.abs(np.stack(ours).astype(np.int64)
                                                     - np.stack(theirs).astype(np.int64))))
    if classifier:
        same = a.argmax(-1) == b.argmax(-1)
        result["top1_agree"] = float(same.mean())
        result["top1_same"] = int(same.sum())
        result["top1_total"] = int(same.size)
    return result


def bench_model(path: Path, models_dir: Path, rounds: int, tflite_runs: int, ref_kernels: bool) -> dict:
    row: dict = {"model": path.name}
    interpreter_cls, resolver_type = tflite_interpreter_class()
    try:
        ours = NnapiRunner(path)
    except TFLiteImportError as e:
        ours = None
        row["import_error"] = str(e)
    tfl = TfliteRunner(path, interpreter_cls) if interpreter_cls is not None else None
    if ours is not None:
        info = ours.info
        inp = info.inputs[0]
        shape, dtype, scale, zp = inp.shape, inp.dtype, inp.scale, inp.zero_point
        row.update(import_s=ours.import_s, compile_s=ours.compile_s, feature_level=ours.model.feature_level,
                   nnapi_operations=len(info.nnapi_operations), notes=info.notes)
    elif tfl is not None:
        shape, dtype = tuple(tfl.inp["shape"]), np.dtype(tfl.inp["dtype"])
        scale, zp = tfl.inp["quantization"]
    else:
        return row
    samples, label = model_inputs(models_dir, shape, dtype, scale, zp)
    row["inputs"] = label
    if samples is None:
        return row
    row["samples"] = len(samples)
    classifier = ours is not None and "SOFTMAX" in info.operators[-2:]
    tflite_times: list[float] = []
    if tfl is not None:
        for _ in range(5):
            tfl.run(samples[0])
    if ours is not None:
        ours.run(samples[0])   # warm-up (first execution prepares the weights)
        outputs, times = [], []
        for r in range(rounds):
            for x in samples:
                t0 = time.perf_counter()
                y = ours.run(x)
                times.append(time.perf_counter() - t0)
                if tfl is not None:   # alternately: the machine's drift affects both alike
                    tflite_times.append(timed(lambda: tfl.run(x)))
                if r == 0:
                    outputs.append(y)
        row["nnapi_ref"] = summary(times)
    if tfl is not None:
        theirs = [tfl.run(x) for x in samples]
        if not tflite_times:
            tflite_times = [timed(lambda: tfl.run(samples[k % len(samples)]))
                            for k in range(max(tflite_runs, len(samples)))]
        row["tflite"] = summary(tflite_times)
        if ours is not None:
            row["agreement"] = agreement(info, outputs, theirs, classifier)
            row["ratio"] = row["nnapi_ref"]["median_ms"] / row["tflite"]["median_ms"]
        if ref_kernels and ours is not None:
            ref = TfliteRunner(path, interpreter_cls, resolver_type.BUILTIN_REF)
            row["agreement_ref_kernels"] = agreement(info, outputs, [ref.run(x) for x in samples], classifier)
    return row


def fmt_agree(a: dict | None) -> str:
    if not a:
        return "n/a"
    s = ""
    if "top1_total" in a:
        s += f"top-1 {a['top1_same']}/{a['top1_total']}  "
    s += f"max|d| {a['max_abs_diff']:.3g}"
    if "max_diff_steps" in a:
        s += f" ({a['max_diff_steps']} steps)"
    return s


def print_table(rows: list[dict], ref_kernels: bool, out=sys.stdout) -> None:
    head = (f"{'model':42s} {'nnapi_ref ms':>15s} {'TFLite ms':>13s} {'ratio':>6s}  agreement with TFLite"
            + ("  |  with TFLite reference kernels" if ref_kernels else ""))
    print(head, file=out)
    print(f"{'':42s} {'best / median':>15s} {'best / median':>13s}", file=out)
    for row in rows:
        n, t = row.get("nnapi_ref"), row.get("tflite")
        ours = f"{n['best_ms']:6.1f} / {n['median_ms']:6.1f}" if n else "-"
        theirs = f"{t['best_ms']:5.2f} / {t['median_ms']:5.2f}" if t else "-"
        ratio = f"{row['ratio']:6.1f}" if "ratio" in row else "-"
        if "import_error" in row:
            agree = "not importable (below)"
        elif "samples" not in row:
            agree = row.get("inputs", "")
        else:
            agree = fmt_agree(row.get("agreement"))
            if ref_kernels:
                agree += "  |  " + fmt_agree(row.get("agreement_ref_kernels"))
        print(f"{row['model']:42s} {ours:>15s} {theirs:>13s} {ratio:>6s}  {agree}", file=out)
    for row in rows:
        if "import_error" in row:
            print(f"\n{row['model']}: not importable: {row['import_error']}", file=out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one timed round per input (else 3)")
    parser.add_argument("--models", default="*.tflite", help="glob of model file names (default *.tflite)")
    parser.add_argument("--models-dir", type=Path, default=MODELS_DIR, help=f"default {MODELS_DIR}")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    parser.add_argument("--ref-kernels", action="store_true",
                        help="also compare with TFLite's reference kernels (OpResolverType.BUILTIN_REF)")
    args = parser.parse_args(argv)
    paths = sorted(p for p in args.models_dir.glob("*.tflite") if fnmatch.fnmatch(p.name, args.models))
    if not paths:
        print(f"no models matching {args.models!r} in {args.models_dir}", file=sys.stderr)
        return 1
    if tflite_interpreter_class()[0] is None:
        print("ai_edge_litert is not installed: nnapi_ref only (pip install ai-edge-litert)")
    rounds, tflite_runs = (1, 20) if args.quick else (3, 50)
    rows = []
    for path in paths:
        rows.append(bench_model(path, args.models_dir, rounds, tflite_runs, args.ref_kernels))
        print(f"  {path.name}: done", file=sys.stderr, flush=True)
    print_table(rows, args.ref_kernels)
    print(f"(one thread: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS')}, TFLite num_threads=1, default op resolver (XNNPACK); "
          f"ratio = median / median)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"models_dir": str(args.models_dir), "rounds": rounds, "models": rows},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
