"""``nnts bench``: a driver's latency and accuracy on real models against TensorFlow Lite, as
AOSP's MLTS measures them.

Every model is imported by :func:`nnts.formats.tflite.importer.load_tflite` and run through nnapi_ref's runtime on
the driver under test (``Compilation(model)`` over the drivers given, with CPU fallback, as an
app would), and, for the baseline, in TFLite's own Interpreter (``ai_edge_litert``, one thread,
default op resolver with XNNPACK) on the same inputs, the two timed alternately input by input so
that a shared machine's drift affects both alike. TFLite runs in a child process
(:mod:`mlts.tflite_baseline`, each inference timed there): a model that crashes it is a row's
``baseline_error``. Accuracy is judged against TFLite's reference
kernels (``OpResolverType.BUILTIN_REF``), whose arithmetic NNAPI's is specified by; agreement with
XNNPACK, which may round differently, is reported beside it.

Models: by default ``../shared/models`` (its real images and sequences as inputs), else the seeded
set of :mod:`mlts.models`; ``--models`` takes files, folders and globs.

The JSON (``--json``; ``schema: "nnts-bench/2"``; schema 1 named the statuses ok, import_error and
driver_error, still read: ``nnts.formats.results.earlier_status``), all times in milliseconds::

    {"schema", "generated", "driver", "devices": [names], "baseline": "tflite"|"none",
     "settings": {"warmup", "runs", "max_time_s", "inflight"},
     "environment": {"cpu", "cores", "threads": {"blas": {library: threads}, "tflite": 1}, "python",
                    "platform", "numpy", "blas", "tflite", "load_start": [1, 5, 15 min], "load_end": [...]},
     "models": [{
        "model", "path", "sha256", "family", "origin": "real"|"seeded", "inputs": "real"|"synthetic",
        "input_source", "samples", "kind": "classifier"|"sequence"|"other", "precision": output type,
        "status": one of nnts.formats.results.STATUSES: "passed" (ran on the driver, accuracy within
            the criteria or not measured), "failed" (the driver failed, or missed the accuracy criteria),
            "skipped" (the importer refused the model, or no operation ran on the driver), "error"
            (nnts bench failed on it),
        "reason": null | why (also partial support),
        "baseline_error": present when TFLite refuses the file or crashes on it,
        "operations": {"total", "on_driver", "by_device": {name: n}, "unsupported": {NNAPI op: n}},
        "time_on_driver": share of execution time on the driver's devices (null: one step, all or none),
        "on_driver": null | {"operations": share of the operations on the driver, "time": share of
            the execution time (null: not measured)},
        "fallback": true when less than half of either ran on the driver (DRIVER_SHARE_MIN): the
            model ran mostly on the CPU fallback, has no "ratio" and is not counted in the driver's
            figures (the reason says so); with no operation on the driver its status is "skipped",
        "driver" and "baseline": null | {
            "first_ms", "latency_ms": {"runs", "mean", "std", "min", "p50", "p90", "p99", "max"},
            "histogram": {"edges": [bins + 1], "counts": [bins]},
            "compile_ms": {"cold", "cached"} (baseline: interpreter creation + allocate_tensors, cached null),
            "burst_ms": latency dict (baseline: null), "throughput": {"inflight", "per_s"}},
        "ratio": driver p50 / baseline p50 (models that ran on the driver only),
        "accuracy": null | {"against": "tflite-reference-kernels", "max_abs_error", "mse", "snr_db"
            (null: identical), "max_error_steps" (quantized outputs), "top1_agreement", "top5_agreement"
            (classifiers: share of inputs, or frames, whose TFLite top-1 is the driver's top-1 / in its
            top 5), "frame_cosine_min", "frame_cosine_mean" (sequences), "xnnpack": {"max_abs_error",
            "max_error_steps", "top1_agreement"}, "failures": [criteria not met, see mlts.bench_gate],
            "computed_by": {device: operations it computed} (the driver's, and the CPU fallback's),
            "nnapi_convention": present when a quantized model misses the criteria against TFLite:
            {"explained": whether the reference in TFLite's convention meets them (the gap is then
            NNAPI's documented arithmetic, e.g. MEAN truncating), the same figures against the
            reference (NNAPI's arithmetic), "failures"}}}]}
"""
from __future__ import annotations

import fnmatch
import glob
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits
from tqdm import tqdm

from nnapi_ref import Burst, Compilation, Execution, NnapiError, get_devices, trace
from nnapi_ref.runtime import using_drivers
from nnapi_ref.types import OperationCode
from nnts.formats import trace_summary
from nnts.formats.files import write_atomic
from nnts.formats.paths import SHARED_MODELS
from nnts.formats.tflite.importer import TFLiteImportError, check_io, load_tflite, parse_tflite
from nnts.mlts import bench_gate, models
from nnts.mlts.models import synthetic_inputs
from nnts.mlts.tflite_baseline import INFLIGHT, BaselineCrashed, TfliteProcess, tflite_interpreter_class, timed
from nnts.runners.drivers import load_driver

SCHEMA = "nnts-bench/2"
MODELS_DIR = SHARED_MODELS  # ../shared/models beside a clone
HISTOGRAM_BINS = 20
MIN_RUNS = 5          # timed runs even past --max-time
# Weights that are seeded, not trained: the seeded set, and ../shared/models's speech LSTMs (its README, section 3).
SEEDED_WEIGHTS = ("*_seeded_*", "lstm_*_like_*")
DRIVER_SHARE_MIN = 0.5  # a model with less of its operations or time on the driver ran on the CPU fallback


# -- inputs --------------------------------------------------------------------------------------

def model_inputs(models_dir: Path | None, shape: tuple, dtype, scale: float, zero_point: int):
    """The real inputs of a models folder for a model input of this shape: (list of arrays,
    label), or (None, why) when the folder has none (images.npz: photos; lstm_inputs.npz:
    sequences, see ../shared/models/README.md)."""
    for fname in ("images.npz", "lstm_inputs.npz"):
        path = models_dir / fname if models_dir else None
        if path is None or not path.exists():
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


def inputs_for(models_dir: Path | None, specs: list[tuple], samples: int):
    """Inputs per sample (a tuple per sample, one array per model input), their kind (real or
    synthetic) and a label. ``specs``: (shape, dtype, scale, zero point) per input. Real data
    from the models folder for single-input models where it has some, else seeded synthetic."""
    if len(specs) == 1:
        real, label = model_inputs(models_dir, *specs[0])
        if real is not None:
            kind = "real" if label.startswith("images.npz") else "synthetic"   # lstm_inputs.npz is N(0, 1)
            return [(x,) for x in real], kind, label
    per_input = [synthetic_inputs(*spec, samples, seed=k) for k, spec in enumerate(specs)]
    return list(zip(*per_input)), "synthetic", f"{samples} seeded synthetic inputs (mlts.models.synthetic_inputs)"


# -- statistics ------------------------------------------------------------------------------------

def latency(times_s: list[float]) -> dict | None:
    if not times_s:
        return None
    ms = np.asarray(times_s) * 1e3
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {"runs": len(ms), "mean": float(ms.mean()), "std": float(ms.std()), "min": float(ms.min()),
            "p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(ms.max())}


def histogram(times_s: list[float]) -> dict:
    counts, edges = np.histogram(np.asarray(times_s) * 1e3, bins=HISTOGRAM_BINS)
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


# -- runtimes ------------------------------------------------------------------------------------------

class _TimedPrepared:
    """A step's prepared model that adds the time of its executions to ``spent[device]``: the
    share of time per device of a partitioned plan."""

    def __init__(self, prepared, spent: dict, device: str):
        self._prepared, self._spent, self._device = prepared, spent, device

    def execute_synchronously(self, *args):
        t0 = time.perf_counter()
        try:
            return self._prepared.execute_synchronously(*args)
        finally:
            self._spent[self._device] = self._spent.get(self._device, 0.0) + time.perf_counter() - t0

    def __getattr__(self, name):
        return getattr(self._prepared, name)


class DriverRunner:
    """The model compiled over the runtime's devices (the drivers under test) with CPU fallback."""

    def __init__(self, model, info, token: bytes, cache_dir: str):
        self.model, self.info = model, info
        self.compile_cold = self._compile(token, cache_dir)[0]
        self.compile_cached, self.compilation = self._compile(token, cache_dir)
        self.outputs = [np.zeros(o.shape, o.dtype) for o in info.outputs]
        self.spent: dict[str, float] = {}

    def _compile(self, token, cache_dir):
        compilation = Compilation(self.model)
        compilation.set_caching(cache_dir, token)
        return timed(lambda: (compilation.finish(), compilation)[1])

    def operations(self) -> dict:
        """Operations per device in the plan, and those the drivers reported unsupported."""
        main = self.model.hal_model.main
        names = [OperationCode(op.type).name for op in main.operations]
        drivers = get_devices()
        unsupported: dict[str, int] = {}
        for j, name in enumerate(names):
            if not any(_supported(d, self.model)[j] for d in drivers):
                unsupported[name] = unsupported.get(name, 0) + 1
        by_device: dict[str, int] = {}
        for step in self.compilation.plan.steps:
            n = len(names) if step.operations is None else len(step.operations)
            by_device[step.device.name] = by_device.get(step.device.name, 0) + n
        ours = {d.name for d in drivers}
        return {"total": len(names), "on_driver": sum(n for d, n in by_device.items() if d in ours),
                "by_device": by_device, "unsupported": unsupported}

    def time_per_device(self) -> None:
        """From now on, time each step of a partitioned plan (a single step needs no split)."""
        steps = self.compilation.plan.steps
        if len(steps) > 1:
            for step in steps:
                step.prepared = _TimedPrepared(step.prepared, self.spent, step.device.name)

    def execution(self, inputs, outputs) -> Execution:
        execution = Execution(self.compilation)
        for i, x in enumerate(inputs):
            execution.set_input(i, x)
        for i, o in enumerate(outputs):
            execution.set_output(i, o)
        return execution

    def run(self, inputs) -> list[np.ndarray]:
        self.execution(inputs, self.outputs).compute()
        return [o.copy() for o in self.outputs]

    def burst(self, samples, runs: int) -> list[float]:
        burst = Burst(self.compilation)
        times = []
        for i in range(runs):
            execution = self.execution(samples[i % len(samples)], self.outputs)
            times.append(timed(execution.burst_compute, burst)[0])
        return times

    def throughput(self, samples, total: int) -> float:
        """Inferences per second with INFLIGHT asynchronous executions outstanding at a time."""
        buffers = [[np.zeros_like(o) for o in self.outputs] for _ in range(INFLIGHT)]
        t0 = time.perf_counter()
        for start in range(0, total, INFLIGHT):
            events = [self.execution(samples[(start + k) % len(samples)], buffers[k]).start_compute()
                      for k in range(min(INFLIGHT, total - start))]
            for event in events:
                event.wait()
        return total / (time.perf_counter() - t0)


def _supported(device, model) -> list[bool]:
    try:
        return list(device.driver.get_supported_operations(model.hal_model))
    except Exception:   # a driver is foreign code: one that cannot answer supports nothing
        return [False] * len(model.hal_model.main.operations)


# -- accuracy ------------------------------------------------------------------------------------

def accuracy(out, ours: list[np.ndarray], theirs: list[np.ndarray], classifier: bool, sequence: bool) -> dict:
    """Output ``out`` (a TensorInfo) of the driver against the same output of TFLite, over all samples."""
    a = np.stack([out.dequantize(o) for o in ours])
    b = np.stack([out.dequantize(o) for o in theirs])
    err = a - b
    noise = float(np.sum(err ** 2))
    result = {"max_abs_error": float(np.max(np.abs(err))), "mse": float(np.mean(err ** 2)),
              "snr_db": None if noise == 0 else float(10 * np.log10(max(float(np.sum(b ** 2)), 1e-30) / noise))}
    if out.quantized:
        result["max_error_steps"] = int(np.max(np.abs(np.stack(ours).astype(np.int64) - np.stack(theirs).astype(np.int64))))
    if classifier:
        rows_a, rows_b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
        top1_b = rows_b.argmax(-1)
        top5_a = np.argsort(-rows_a, axis=-1, kind="stable")[:, :5]
        result["top1_agreement"] = float(np.mean(rows_a.argmax(-1) == top1_b))
        result["top5_agreement"] = float(np.mean((top5_a == top1_b[:, None]).any(-1)))
    if sequence:
        fa, fb = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
        norms = np.linalg.norm(fa, axis=-1) * np.linalg.norm(fb, axis=-1)
        cos = np.where(norms > 0, np.sum(fa * fb, -1) / np.maximum(norms, 1e-30), 1.0)
        result["frame_cosine_min"], result["frame_cosine_mean"] = float(cos.min()), float(cos.mean())
    return result


def outputs_on(driver: str, model, info, samples) -> list[np.ndarray]:
    """The first output for each sample, computed on ``driver`` alone (in this process)."""
    with using_drivers([load_driver(driver)]):
        compilation = Compilation(model)
        compilation.finish()
        results = []
        for inputs in samples:
            outputs = [np.zeros(o.shape, o.dtype) for o in info.outputs]
            execution = Execution(compilation)
            for i, x in enumerate(inputs):
                execution.set_input(i, x)
            for i, o in enumerate(outputs):
                execution.set_output(i, o)
            execution.compute()
            results.append(outputs[0])
    return results


def nnapi_convention(name: str, model, info, samples, ours, tflite, classifier: bool, sequence: bool) -> dict:
    """A quantized model where the driver misses the criteria against TFLite: is the gap NNAPI's
    documented arithmetic (the reference in TFLite's convention meets the criteria, so the
    difference is the conventions it switches), and does the driver then meet them against NNAPI's
    arithmetic (the reference)? A driver may implement either convention, not neither."""
    in_tflite_convention = outputs_on("nnapi_ref.drivers.reference:tflite_convention", model, info, samples)
    gap = accuracy(info.outputs[0], in_tflite_convention, tflite, classifier, sequence)
    result = accuracy(info.outputs[0], ours, outputs_on("reference", model, info, samples), classifier, sequence)
    result["against"] = "nnapi-reference"
    result["explained"] = not bench_gate.accuracy_failures(name, gap, bench_gate.DEFAULT_THRESHOLDS)
    result["failures"] = bench_gate.accuracy_failures(name, result, bench_gate.DEFAULT_THRESHOLDS)
    return result


# -- one model -----------------------------------------------------------------------------------

def family(name: str) -> str:
    """The model without its precision: rows of one network group together."""
    stem = Path(name).stem
    for suffix in ("_float", "_quant", "_int8", "_hybrid", "_uint8", "_fp16"):
        if stem.endswith(suffix):
            return stem[: -len(suffix)]
    return stem


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Settings:
    def __init__(self, warmup=3, runs=50, max_time=20.0, baseline="tflite", samples=8):
        self.warmup, self.runs, self.max_time, self.baseline, self.samples = warmup, runs, max_time, baseline, samples


def bench_model(path: Path, models_dir: Path | None, settings: Settings, cache_dir: str) -> dict:
    """One row of the results (see the module docstring); never raises for a model that cannot run."""
    digest = sha256(path)
    row: dict = {"model": path.name, "path": str(path), "sha256": digest, "family": family(path.name),
                 "origin": "seeded" if any(fnmatch.fnmatch(path.name, p) for p in SEEDED_WEIGHTS) else "real",
                 "status": "passed", "reason": None, "driver": None, "baseline": None, "accuracy": None,
                 "operations": None, "time_on_driver": None, "on_driver": None, "fallback": False}
    base = None
    try:
        graph = parse_tflite(path.read_bytes())
    except TFLiteImportError:
        graph = None  # the importer says why below; TFLite may still take the file
    try:
        if graph is not None:
            check_io(graph)
    except TFLiteImportError as e:  # no inputs, or inputs no one should allocate: neither runtime tries
        row.update(status="skipped", reason=f"importer: {e}")
        return row
    if settings.baseline == "tflite" and tflite_interpreter_class()[0] is not None:
        try:  # in a child (mlts/tflite_baseline.py): a crash there is this row's reason, not the run's end
            base = TfliteProcess(path)
        except (ValueError, RuntimeError, BaselineCrashed) as e:  # refused or crashed: the driver still runs
            row["baseline_error"] = str(e)
    try:
        return _bench_loaded(row, path, digest, base, models_dir, settings, cache_dir)
    finally:
        if base is not None:
            base.close()


def _bench_loaded(row: dict, path: Path, digest: str, base, models_dir, settings: Settings, cache_dir: str) -> dict:
    ours = info = None
    try:
        model, info = load_tflite(path)
    except TFLiteImportError as e:
        row.update(status="skipped", reason=f"importer: {e}")
    except Exception as e:   # the importer's own failure: still a row, not the end of the run
        row.update(status="skipped", reason=f"importer crashed: {type(e).__name__}: {e}")
    if info is not None:
        specs = [(i.shape, i.dtype, i.scale, i.zero_point) for i in info.inputs]
        row["precision"] = info.outputs[0].tflite_type
        row["kind"] = ("classifier" if "SOFTMAX" in info.operators[-2:] else "other") if \
            "UNIDIRECTIONAL_SEQUENCE_LSTM" not in info.operators else "sequence"
        try:
            ours = DriverRunner(model, info, bytes.fromhex(digest), cache_dir)
            row["operations"] = ours.operations()
        except NnapiError as e:
            row.update(status="failed", reason=f"compilation: {e}")
    elif base is not None:
        specs = [(tuple(d["shape"]), np.dtype(d["dtype"]), *d["quantization"]) for d in base.inputs]
        row["precision"] = str(np.dtype(base.outputs[0]["dtype"])).upper()
    else:
        return row
    samples, row["inputs"], row["input_source"] = inputs_for(models_dir, specs, settings.samples)
    row["samples"] = len(samples)
    if base is not None:
        base = _baseline_step(row, base, base.set_samples, samples)
    if ours is not None and row["operations"]["unsupported"]:
        ops = row["operations"]
        row["reason"] = (f"the driver reported {sum(ops['unsupported'].values())} of {ops['total']} operations "
                         f"unsupported ({', '.join(f'{k}x{n}' for k, n in ops['unsupported'].items())}); they ran on "
                         + ", ".join(f"{d} ({n})" for d, n in ops["by_device"].items()))
    try:
        _measure(row, ours, base, samples, settings)
    except NnapiError as e:
        row.update(status="failed", reason=f"execution: {e}")
        row["driver"] = None
    credit(row)
    if row["status"] in ("passed", "skipped") and row.get("baseline") and row.get("driver"):
        try:
            with TfliteProcess(path, reference_kernels=True) as ref:
                ref.set_samples(samples)
                theirs = ref.first_outputs()
            xnnpack = base.first_outputs()
        except (ValueError, RuntimeError, BaselineCrashed) as e:
            row["baseline_error"] = f"accuracy: {e}"
            return row
        classifier, sequence = "SOFTMAX" in info.operators[-2:], len(info.outputs[0].shape) == 3
        outs = [ours.run(x)[0] for x in samples]
        acc = accuracy(info.outputs[0], outs, theirs, classifier, sequence)
        xnn = accuracy(info.outputs[0], outs, xnnpack, classifier, False)
        acc["against"] = "tflite-reference-kernels"
        acc["xnnpack"] = {k: xnn[k] for k in ("max_abs_error", "max_error_steps", "top1_agreement") if k in xnn}
        acc["failures"] = bench_gate.accuracy_failures(row["model"], acc, bench_gate.DEFAULT_THRESHOLDS)
        if acc["failures"] and info.outputs[0].quantized:
            acc["nnapi_convention"] = nnapi_convention(row["model"], model, info, samples, outs, theirs,
                                                       classifier, sequence)
            acc["failures"] = bench_gate.model_accuracy_failures(row["model"], acc, bench_gate.DEFAULT_THRESHOLDS)
        acc["computed_by"] = dict(row["operations"]["by_device"])  # operations per device that computed them
        row["accuracy"] = acc
        if acc["failures"] and row["operations"]["on_driver"]:  # none on the driver: not the driver's failure
            row["status"] = "failed"
        if not row["fallback"]:  # the driver's figure only where the driver ran the model
            row["ratio"] = row["driver"]["latency_ms"]["p50"] / row["baseline"]["latency_ms"]["p50"]
    return row


def credit(row: dict) -> None:
    """How much of a model ran on the driver (``on_driver``: its share of the operations and of
    the execution time), and whether it ran ``fallback``, mostly on the CPU fallback (less than
    :data:`DRIVER_SHARE_MIN` of either): such a model's latency is not the driver's (no ``ratio``,
    out of the driver's figures), and one with no operation on the driver is ``skipped``."""
    ops = row.get("operations")
    if not ops or not ops["total"]:
        return
    by_operations = ops["on_driver"] / ops["total"]
    by_time = row.get("time_on_driver")
    if by_time is None and by_operations in (0.0, 1.0):
        by_time = by_operations  # one step: all the time on one side
    row["on_driver"] = {"operations": by_operations, "time": by_time}
    row["fallback"] = min(by_operations, by_time if by_time is not None else 1.0) < DRIVER_SHARE_MIN
    if not row["fallback"]:
        return
    time = f", {by_time:.0%} of the time" if by_time is not None else ""
    said = (f"mostly on the CPU fallback ({ops['on_driver']} of {ops['total']} operations on the driver{time}): "
            "not counted in the driver's figures")
    row["reason"] = said + (f"; {row['reason']}" if row.get("reason") else "")
    if ops["on_driver"] == 0 and row["status"] == "passed":
        row["status"] = "skipped"


def _baseline_step(row: dict, base, step, *args):
    """``step(*args)`` of the baseline's child, or None (with the row's ``baseline_error``) when
    it crashed or TFLite refused: the driver's figures go on without it."""
    try:
        step(*args)
        return base
    except (RuntimeError, BaselineCrashed) as e:
        row["baseline_error"] = str(e)
        base.close()
        return None


def _measure(row: dict, ours: DriverRunner | None, base: TfliteProcess | None, samples, settings: Settings) -> None:
    """Latency of both, alternately (the baseline's times measured in its child process); then
    burst and throughput (the figures of the docstring)."""
    first = {}
    baseline_times: list[float] = []

    def baseline(i: int) -> None:  # one timed inference of the baseline; stops it for good if it crashes
        nonlocal base
        if base is not None:
            base = _baseline_step(row, base, lambda: baseline_times.append(base.time(i % len(samples))))

    if ours is not None:
        first["driver"] = timed(ours.run, samples[0])[0]
    baseline(0)
    first["baseline"] = baseline_times.pop() if baseline_times else None
    for i in range(settings.warmup):
        if ours is not None:
            ours.run(samples[i % len(samples)])
        baseline(i)
    baseline_times.clear()
    if ours is not None:
        ours.time_per_device()
    times: dict[str, list[float]] = {"driver": [], "baseline": []}
    deadline = time.monotonic() + settings.max_time
    for i in range(settings.runs):
        x = samples[i % len(samples)]
        if ours is not None:
            times["driver"].append(timed(ours.run, x)[0])
        baseline(i)
        if time.monotonic() > deadline and i + 1 >= MIN_RUNS:
            break
    extra = max(MIN_RUNS, min(settings.runs, 20))
    if ours is not None:
        row["driver"] = {"first_ms": first["driver"] * 1e3, "latency_ms": latency(times["driver"]),
                         "histogram": histogram(times["driver"]),
                         "compile_ms": {"cold": ours.compile_cold * 1e3, "cached": ours.compile_cached * 1e3},
                         "burst_ms": latency(ours.burst(samples, extra)),
                         "throughput": {"inflight": INFLIGHT, "per_s": ours.throughput(samples, 2 * extra)}}
        if ours.spent:
            on_driver = {d.name for d in get_devices()}
            row["time_on_driver"] = sum(t for d, t in ours.spent.items() if d in on_driver) / sum(ours.spent.values())
    per_s = []
    if base is not None:
        base = _baseline_step(row, base, lambda: per_s.append(base.throughput(2 * extra)))
    if base is not None:
        times["baseline"] = baseline_times
        row["baseline"] = {"first_ms": first["baseline"] * 1e3, "latency_ms": latency(times["baseline"]),
                           "histogram": histogram(times["baseline"]),
                           "compile_ms": {"cold": base.compile_ms, "cached": None}, "burst_ms": None,
                           "throughput": {"inflight": INFLIGHT, "per_s": per_s[0]}}


# -- the model set ---------------------------------------------------------------------------------

def resolve_models(specs: list[str] | None) -> list[tuple[Path, Path | None]]:
    """(model file, folder of its real inputs or None) for each ``--models`` entry: a .tflite file,
    a folder (its *.tflite), a glob (matched as a path, then in the default folder), or ``seeded``
    (the seeded set, what a fresh clone or an installed nnts benchmarks by default). Default:
    ../shared/models when it has models, else the seeded set (written on first use)."""
    if not specs:
        if MODELS_DIR and sorted(MODELS_DIR.glob("*.tflite")):
            return [(p, MODELS_DIR) for p in sorted(MODELS_DIR.glob("*.tflite"))]
        return [(p, None) for p in models.seeded_models()]
    found: list[tuple[Path, Path | None]] = []
    for spec in specs:
        p = Path(spec)
        if spec == "seeded" and not p.exists():
            found += [(f, None) for f in models.seeded_models()]
        elif p.is_dir():
            in_folder = sorted(p.glob("*.tflite"))
            if not in_folder:
                raise FileNotFoundError(f"{spec}: no .tflite model in the folder")
            found += [(f, f) for f in in_folder]
        elif p.is_file():
            found.append((p, p.parent))
        else:
            matches = sorted(Path(m) for m in glob.glob(spec)) or [f for f, _ in resolve_models(None)
                                                                   if fnmatch.fnmatch(f.name, spec)]
            if not matches:
                raise FileNotFoundError(f"no model matches {spec!r}")
            found += [(m, m.parent) for m in matches]
    for k, (f, d) in enumerate(found):
        if d is not None and d.is_file():
            found[k] = (f, f.parent)
        if d is not None and f.parent == models.default_folder():
            found[k] = (f, None)   # the seeded set has no real inputs
    return found


# -- environment, the run, the table ---------------------------------------------------------------------

def environment() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    blas = "unknown"
    try:
        config = np.show_config(mode="dicts")
        lib = config.get("Build Dependencies", {}).get("blas", {})
        blas = f"{lib.get('name', '?')} {lib.get('version', '')}".strip()
    except (TypeError, AttributeError):
        pass
    tflite = "not installed"
    try:
        tflite = f"ai-edge-litert {version('ai-edge-litert')}"
    except Exception:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "threads": {"blas": blas_threads(), "tflite": 1},
            "python": platform.python_version(), "platform": platform.platform(), "numpy": np.__version__,
            "blas": blas, "tflite": tflite,
            "load_start": list(os.getloadavg())}


def blas_threads():
    """numpy's BLAS threads per library (threadpoolctl)."""
    return {i["internal_api"]: i["num_threads"] for i in threadpool_info()}


def one_blas_thread():
    """numpy's BLAS on one thread while benchmarking, as TFLite runs on one: a multi-threaded
    BLAS on a loaded machine spins, and was 50 times slower here."""
    return threadpool_limits(limits=1)


def run(models: list[tuple[Path, Path | None]], driver: str, settings: Settings, progress=None) -> dict:
    """Benchmark every model on the runtime's current devices; the results document."""
    rows = []
    with one_blas_thread(), tempfile.TemporaryDirectory(prefix="nnts-bench-cache-") as cache_dir:
        env = environment()
        for path, models_dir in models:
            if progress:
                progress.start(path.name)
            started = trace.now()
            try:
                rows.append(bench_model(path, models_dir, settings, cache_dir))
            except Exception as e:  # a bug of ours on one model: its row, the others still run
                rows.append(error_row(path, f"nnts bench failed on it: {type(e).__name__}: {e}"))
            if trace.on:  # nnts bench --trace: this model's timing summary and operation times
                rows[-1]["trace"] = trace_summary.window(started, trace.now())
            if progress:
                progress.done(rows[-1])
    env["load_end"] = list(os.getloadavg())
    return {"schema": SCHEMA, "generated": time.strftime("%Y-%m-%dT%H:%M:%S"), "driver": driver,
            "devices": [d.name for d in get_devices()], "baseline": settings.baseline,
            "settings": {"warmup": settings.warmup, "runs": settings.runs, "max_time_s": settings.max_time,
                         "inflight": INFLIGHT, "samples": settings.samples},
            "environment": env, "models": rows}


def error_row(path: Path, reason: str) -> dict:
    return {"model": path.name, "path": str(path), "sha256": None, "family": family(path.name), "origin": "real",
            "status": "error", "reason": reason, "driver": None, "baseline": None, "accuracy": None,
            "operations": None, "time_on_driver": None, "on_driver": None, "fallback": False}


def summary_line(row: dict) -> str:
    """One row as text: status, latency against the baseline, accuracy."""
    if row["status"] != "passed" and row.get("driver") is None:
        return f"{row['status'].upper()}: {row['reason']}"
    d, b, acc = row.get("driver"), row.get("baseline"), row.get("accuracy")
    text = f"{d['latency_ms']['p50']:.2f} ms" if d else "-"
    if b:
        text += f" vs TFLite {b['latency_ms']['p50']:.2f} ms"
    if "ratio" in row:
        text += f" (x{row['ratio']:.1f})"
    if acc:
        text += "; " + fmt_accuracy(acc)
        if acc["failures"]:
            text += " FAILS " + "; ".join(acc["failures"])
    if row.get("fallback"):
        text += f"; {row['reason']}"
    elif row["operations"] and row["operations"]["on_driver"] < row["operations"]["total"]:
        text += f"; {row['operations']['on_driver']}/{row['operations']['total']} ops on the driver"
    return text


def fmt_accuracy(acc: dict) -> str:
    parts = []
    if "top1_agreement" in acc:
        parts.append(f"top-1 {acc['top1_agreement']:.0%} top-5 {acc['top5_agreement']:.0%}")
    parts.append(f"max|d| {acc['max_abs_error']:.2g}")
    if "max_error_steps" in acc:
        parts.append(f"{acc['max_error_steps']} steps")
    if "frame_cosine_min" in acc:
        parts.append(f"cos>={acc['frame_cosine_min']:.4f}")
    parts.append("SNR inf" if acc["snr_db"] is None else f"SNR {acc['snr_db']:.0f} dB")
    nnapi = acc.get("nnapi_convention")
    if nnapi and not acc["failures"]:
        parts.append(f"(meets the criteria against NNAPI's arithmetic, the reference: {fmt_accuracy(nnapi)}; "
                     "the gap to TFLite is NNAPI's documented convention)")
    return " ".join(parts)


def print_table(results: dict, out=sys.stdout) -> None:
    print(f"{'model':44s} {'origin':6s} {'inputs':9s} {'on driver':>13s} {'driver p50':>10s} {'TFLite p50':>10s} "
          f"{'ratio':>6s}  accuracy against TFLite (reference kernels)", file=out)
    for row in results["models"]:
        d, b = row.get("driver"), row.get("baseline")
        ours = f"{d['latency_ms']['p50']:.2f}" if d else "-"
        theirs = f"{b['latency_ms']['p50']:.2f}" if b else "-"
        ratio = f"{row['ratio']:.1f}" if "ratio" in row else "-"
        if row["status"] != "passed" and row.get("driver") is None:
            acc = f"{row['status']}: {row['reason'][:120]}"
        elif row.get("accuracy"):
            acc = fmt_accuracy(row["accuracy"]) + (" FAIL" if row["accuracy"]["failures"] else "")
        else:
            acc = "n/a"
        if row.get("fallback"):
            acc = f"CPU FALLBACK, not the driver's: {acc}"
        print(f"{row['model']:44s} {row['origin']:6s} {row.get('inputs', '-'):9s} {on_driver(row):>13s} {ours:>10s} "
              f"{theirs:>10s} {ratio:>6s}  {acc}", file=out)
    env = results["environment"]
    print(f"({env['cpu']}, {env['cores']} cores, load {env['load_start'][0]:.2f} -> {env['load_end'][0]:.2f}; "
          f"ms per inference, p50 of the timed runs; ratio = driver / TFLite, for models that ran mostly on the "
          f"driver; on driver = operations, share of the time)", file=out)


def on_driver(row: dict) -> str:
    """"10/65 ops 5%": how much of a model ran on the driver ("-" where nothing was planned)."""
    ops, share = row.get("operations"), row.get("on_driver")
    if not ops:
        return "-"
    time = share["time"] if share else None
    return f"{ops['on_driver']}/{ops['total']} ops" + (f" {time:.0%}" if time is not None else "")


class Progress:
    """A tqdm bar on a terminal, else one line per model as pytest writes them."""

    def __init__(self, total: int, stream=sys.stderr):
        self.stream, self.bar = stream, None
        if stream.isatty():
            try:
                self.bar = tqdm(total=total, file=stream, unit="model")
            except ImportError:
                pass

    def start(self, name: str) -> None:
        if self.bar is not None:
            self.bar.set_description(name)
        else:
            print(f"{name} ...", end=" ", file=self.stream, flush=True)

    def done(self, row: dict) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.write(f"{row['model']}: {summary_line(row)}", file=self.stream)
        else:
            print(f"{row['status'].upper()} {summary_line(row)}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def write_json(path: str, results: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(results, indent=1) + "\n")
