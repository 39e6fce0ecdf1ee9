"""``nnts gate RESULTS.json [--baseline EARLIER.json] [--thresholds FILE]``: the CI gate on
``nnts bench`` results. Exits 1 with one line per violation:

* accuracy: a model whose accuracy against TFLite misses a criterion below;
* a model the driver failed to compile or run (an importer refusal is the importer's, not the
  driver's: not a violation), or one that ran in EARLIER.json and does not now;
* latency (with ``--baseline``): a model whose driver median (p50) grew beyond
  ``earlier * (1 + median_regression_max) + noise_floor_ms``; models are matched by file name
  and content (sha256), so a changed model is never compared with its old self.

Thresholds file (TOML; every key optional, these are the defaults)::

    [accuracy]
    top1_agreement_min = 0.85   # classifiers: share of inputs (frames) with TFLite's top-1
    top5_agreement_min = 0.95   # ... whose TFLite top-1 is in the driver's top 5
    max_error_steps = 16        # quantized outputs: largest difference in quantization steps
    snr_db_min = 20.0           # signal (TFLite's output) to error ratio, all outputs
    frame_cosine_min = 0.98     # sequence outputs: the worst frame's cosine similarity

    [latency]
    median_regression_max = 0.25   # +25 % ...
    noise_floor_ms = 0.5           # ... plus this much, before a slower median is a regression

    [models."lstm_*_hybrid*"]      # per-model overrides of [accuracy] keys, by file-name glob
    snr_db_min = 15.0

The defaults suit a driver held to TFLite's reference kernels on the benchmark set (a correct
quantized driver differs from them by rounding, well within 16 steps and 20 dB). Where NNAPI's
arithmetic and TFLite's differ by a documented convention (MEAN truncating, requantization
rounding: ``nnapi_ref/ops/requantization.py``), a quantized model may instead meet the criteria
against the reference (NNAPI's arithmetic), provided the reference in TFLite's convention meets
them against TFLite (so the whole gap is the conventions): a driver may follow either, not neither.
"""
from __future__ import annotations

import copy
import fnmatch
import json
import math
import numbers
import sys
import tomllib

from nnts.formats.results import earlier_status

DEFAULT_THRESHOLDS = {
    "accuracy": {"top1_agreement_min": 0.85, "top5_agreement_min": 0.95, "max_error_steps": 16,
                 "snr_db_min": 20.0, "frame_cosine_min": 0.98},
    "latency": {"median_regression_max": 0.25, "noise_floor_ms": 0.5},
    "models": {},
}


def load_thresholds(path: str | None) -> dict:
    """The defaults, updated from a TOML file; an unknown section or key is an error (a typo
    must not silently leave a criterion at its default)."""
    thresholds = copy.deepcopy(DEFAULT_THRESHOLDS)
    if not path:
        return thresholds
    try:
        with open(path, "rb") as f:
            given = tomllib.load(f)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"{path}: not a TOML file ({e})") from None
    for section, values in given.items():
        if section not in thresholds or not isinstance(values, dict):
            raise ValueError(f"{path}: unknown section [{section}] (expected accuracy, latency, models)")
        if section == "models":
            for pattern, overrides in values.items():
                if not isinstance(overrides, dict):
                    raise ValueError(f'{path}: models."{pattern}" is not a table of [accuracy] keys')
                _check_keys(path, f'models."{pattern}"', overrides, DEFAULT_THRESHOLDS["accuracy"])
            thresholds["models"].update(values)
        else:
            _check_keys(path, section, values, DEFAULT_THRESHOLDS[section])
            thresholds[section].update(values)
    return thresholds


def _check_keys(path, section, values, known) -> None:
    unknown = set(values) - set(known)
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(sorted(unknown))} in [{section}]; "
                         f"known: {', '.join(known)}")
    for key, value in values.items():  # nan would switch the check off: every comparison is false
        if not _is_number(value) or not math.isfinite(value):
            raise ValueError(f"{path}: [{section}] {key} = {value!r} is not a finite number")


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def load_results(path: str, what: str) -> dict:
    """A results file of ``nnts bench --json``, its shape checked (a clean error naming the file
    and the field, never a traceback in the middle of the gate)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError, RecursionError) as e:
        raise ValueError(f"{what} {path}: not readable JSON ({type(e).__name__}: {e})") from None
    problem = results_problem(doc)
    if problem:
        raise ValueError(f"{what} {path}: not nnts bench results: {problem}")
    return doc


def results_problem(doc) -> str | None:
    """What makes ``doc`` something other than nnts bench results (mlts/bench.py's schema), or None."""
    if not isinstance(doc, dict):
        return f"a JSON {type(doc).__name__} at the top, not an object"
    models = doc.get("models")
    if not isinstance(models, list):
        return f"'models' is {type(models).__name__ if models is not None else 'missing'}, not a list"
    for i, row in enumerate(models):
        where = f"models[{i}]"
        if not isinstance(row, dict):
            return f"{where} is a JSON {type(row).__name__}, not an object"
        for key in ("model", "status"):
            if not isinstance(row.get(key), str):
                return f"{where} has no string '{key}'"
        if row.get("sha256") is not None and not isinstance(row["sha256"], str):
            return f"{where}.sha256 is not a string"
        acc = row.get("accuracy")
        if acc is not None:
            if not isinstance(acc, dict):
                return f"{where}.accuracy is not an object"
            for key in ("snr_db", "max_error_steps", "top1_agreement", "top5_agreement", "frame_cosine_min"):
                if acc.get(key) is not None and not _is_number(acc[key]):
                    return f"{where}.accuracy.{key} is {acc[key]!r}, not a number"
            if "snr_db" not in acc:
                return f"{where}.accuracy has no snr_db"
        driver = row.get("driver")
        if driver is not None:
            latency = driver.get("latency_ms") if isinstance(driver, dict) else None
            if not isinstance(latency, dict) or not _is_number(latency.get("p50")):
                return f"{where}.driver.latency_ms.p50 is not a number"
    return None


def criteria_for(model: str, thresholds: dict) -> dict:
    criteria = dict(thresholds["accuracy"])
    for pattern, overrides in thresholds["models"].items():
        if fnmatch.fnmatch(model, pattern):
            criteria.update(overrides)
    return criteria


def accuracy_failures(model: str, acc: dict, thresholds: dict) -> list[str]:
    """The criteria ``acc`` (a row's accuracy, see mlts.bench) misses, as text."""
    c = criteria_for(model, thresholds)
    failures = []
    for key, limit in (("top1_agreement", "top1_agreement_min"), ("top5_agreement", "top5_agreement_min"),
                       ("frame_cosine_min", "frame_cosine_min")):
        # "not >=", never "<": a NaN misses every criterion instead of passing it
        if acc.get(key) is not None and not acc[key] >= c[limit]:
            failures.append(f"{key} {acc[key]:.4g} < {c[limit]:g}")
    if acc.get("max_error_steps") is not None and not acc["max_error_steps"] <= c["max_error_steps"]:
        failures.append(f"max_error_steps {acc['max_error_steps']} > {c['max_error_steps']:g}")
    if acc["snr_db"] is not None and not acc["snr_db"] >= c["snr_db_min"]:
        failures.append(f"snr_db {acc['snr_db']:.1f} < {c['snr_db_min']:g}")
    return failures


def model_accuracy_failures(model: str, acc: dict, thresholds: dict) -> list[str]:
    """The criteria a model misses against TFLite, unless the gap is NNAPI's documented arithmetic
    (the reference in TFLite's convention meets them) and the driver meets them against NNAPI's
    arithmetic (the reference): a driver may implement either convention, not neither."""
    failures = accuracy_failures(model, acc, thresholds)
    nnapi = acc.get("nnapi_convention")
    if failures and nnapi and nnapi.get("explained") and not accuracy_failures(model, nnapi, thresholds):
        return []
    return failures


def violations(results: dict, earlier: dict | None, thresholds: dict) -> list[str]:
    """One line per violation of ``results`` (and against ``earlier``) under ``thresholds``."""
    lines = []
    before = {(r["model"], r.get("sha256")): r for r in (earlier or {}).get("models", [])}
    lat = thresholds["latency"]
    for row in results["models"]:
        name = row["model"]
        old = before.get((name, row.get("sha256")))
        status = earlier_status(row["status"])
        if status == "failed" and not row.get("driver"):  # a model that ran and missed accuracy: below
            lines.append(f"{name}: the driver failed: {row.get('reason')}")
        elif status in ("skipped", "error") and old is not None and old.get("driver"):
            lines.append(f"{name}: ran on the driver in the earlier results, now {row['status']}: {row.get('reason')}")
        if row.get("accuracy"):
            lines += [f"{name}: accuracy: {f}" for f in model_accuracy_failures(name, row["accuracy"], thresholds)]
        if old and old.get("driver") and row.get("driver"):
            was, now = old["driver"]["latency_ms"]["p50"], row["driver"]["latency_ms"]["p50"]
            limit = was * (1 + lat["median_regression_max"]) + lat["noise_floor_ms"]
            if not now <= limit:  # a NaN median is a violation, not a pass
                lines.append(f"{name}: latency: median {now:.3f} ms > {limit:.3f} ms (earlier {was:.3f} ms "
                             f"+{lat['median_regression_max']:.0%} +{lat['noise_floor_ms']:g} ms)")
    return lines


def main(results_path: str, baseline_path: str | None, thresholds_path: str | None) -> int:
    try:
        results = load_results(results_path, "results")
        earlier = load_results(baseline_path, "--baseline") if baseline_path else None
        thresholds = load_thresholds(thresholds_path)
    except (OSError, ValueError) as e:
        print(f"nnts gate: {e}", file=sys.stderr)
        return 2
    lines = violations(results, earlier, thresholds)
    for line in lines:
        print(line)
    n = len(results.get("models", []))
    print(f"nnts gate: {len(lines)} violation(s) in {n} model(s)" + (f" against {baseline_path}" if earlier else ""))
    return 1 if lines else 0
