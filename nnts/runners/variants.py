"""A generated test runs one test model's variants (execution modes, unspecified output
dimensions, device memory, the compilation cache, ...) one after the other, as AOSP's generated
tests run a model's execution configurations in one test and name the failing one in its
message. A pytest item costs about 2 ms of pytest and pytest-xdist work, whatever the test does:
with one item per variant, that was most of a conformance run's time.

Each variant keeps its own result and its own id, ``<test id>-<variant>`` (the test ids of the
suites before variants shared a test): in the failure message, in ``--expected-failures``
entries (which may also name the test or the test model), and in the conformance report, which
lists every variant's result (the ``nnts_variants`` property, read by ``nnts.reports.results``).
``--variants`` runs only some of them (``--variants sync``: the synchronous path alone).
"""
from __future__ import annotations

import argparse
import json
import time
import traceback
from dataclasses import dataclass
from typing import Callable

import pytest

from nnts.formats.expected_failures import names_of, variant_names
from nnts.formats.results import pytest_outcome
from nnts.runners.parameters import describe_model

PROPERTY = "nnts_variants"
PARAMETERS_PROPERTY = "nnts_parameters"  # the model's operations with their parameters, in words
# The variants of CTS (nnts.runners.cases: MODEL_VARIANTS, TWIN_VARIANTS) and VTS (vts/test_generated.py),
# "-" read as "_" (VTS writes device-memory, CTS device_memory).
KNOWN = ("sync", "async", "burst", "fenced", "dynamic", "device_memory", "hardware_buffer", "cached", "signed",
         "dynamic_fenced", "insufficient")


def add_options(group) -> None:
    group.addoption("--variants", type=_variant_names, default=None, metavar="LIST",
                    help="run only these variants of the generated tests' models, comma-separated: "
                         f"{', '.join(KNOWN)} (default: all)")


def _variant_names(value: str) -> frozenset[str]:
    names = frozenset(v.strip().replace("-", "_") for v in value.split(",") if v.strip())
    unknown = sorted(names - set(KNOWN))
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"{', '.join(unknown) or repr(value)}: not a variant; the variants are "
                                         f"{', '.join(KNOWN)}")
    return names


def selected(config, variants: tuple[str, ...]) -> tuple[str, ...]:
    """Those of a test model's ``variants`` that ``--variants`` chose (all, without it)."""
    chosen = config.getoption("variants", None)
    return variants if chosen is None else tuple(v for v in variants if v.replace("-", "_") in chosen)


@dataclass
class VariantResult:
    variant: str
    status: str        # passed, failed, skipped, unsupported, xfailed or xpassed
    message: str = ""
    duration_s: float = 0.0


def run_variant(variant: str, call: Callable[[], None]) -> VariantResult:
    """Run one variant: ``call()`` returns when it passes, and raises what a test would
    (``pytest.skip``, ``pytest.fail``, an assertion) when it does not."""
    start = time.perf_counter()
    status, message = "passed", ""
    try:
        call()
    except pytest.skip.Exception as e:
        message = e.msg or "skipped"
        status = "unsupported" if "unsupported" in message else "skipped"
    except pytest.fail.Exception as e:
        if e.msg.endswith("from pytest-timeout."):  # pytest-timeout: the test's time is up, not the variant's
            raise
        status, message = "failed", e.msg
    except AssertionError as e:
        status, message = "failed", str(e) or "assertion failed"
    except Exception as e:  # the driver raised what it must not: the last frames say where
        status = "failed"
        message = "".join(traceback.format_exception(e, limit=-4)).rstrip()
    return VariantResult(variant, status, message, time.perf_counter() - start)


def run_all(request, case, path, run: Callable[[str], None]) -> None:
    """A generated test's body: ``run(variant)`` for each of ``case.variants`` (a test model's
    case: its ``id``, ``operation``, ``dtype``, ``test`` and ``variants``; ``path`` the file it
    came from), then the verdict (``conclude``)."""
    results = [run_variant(variant, lambda: run(variant)) for variant in case.variants]
    node = request.node
    said = describe_model(case.test.model)
    node.user_properties.append((PARAMETERS_PROPERTY, said))
    conclude(node, f"{case.operation} {case.dtype}, test model {case.test.name} from {path}", results,
             expectations(getattr(request.config, "nnts_expected", None), node, case), f"operations: {said}",
             strict=request.config.getoption("strict_expected_failures", False))


def expectations(listed, node, case) -> dict[str, str]:
    """The variants of a generated test (``node``, running ``case``) that ``listed`` (the
    ``--expected-failures`` entries, or None) names, by variant id, test id or model name
    (``nnts.formats.expected_failures``), with their reasons."""
    if listed is None:
        return {}
    names = names_of(str(node.path), node.nodeid, node.name)
    found = {}
    for variant in case.variants:
        reason = listed.reason(variant_names(names, case.id, case.test.name, variant))
        if reason is not None:
            found[variant] = reason
    return found


def conclude(node, heading: str, results: list[VariantResult], expected: dict[str, str], details: str = "",
             strict: bool = False) -> None:
    """The test's verdict from its variants' results: failed when any variant failed that
    ``expected`` does not list (the message says each failure, under ``heading``), or, with
    ``strict``, passed though listed; xfailed when only listed ones failed, skipped when every
    variant was, passed otherwise. Every variant's result goes to the report through the test's
    ``nnts_variants`` property. ``details``: a line the failure message gives after the heading
    (the model's operations and parameters)."""
    for r in results:
        reason = expected.get(r.variant)
        if reason is None:
            continue
        if r.status == "failed":
            r.status, r.message = "xfailed", f"{reason}: {r.message}"
        elif r.status == "passed" and strict:
            r.status = "failed"
            r.message = f"listed as an expected failure ({reason}) but passed (--strict-expected-failures)"
        elif r.status == "passed":
            r.status, r.message = "xpassed", f"listed as an expected failure ({reason}) but passed"
    node.user_properties.append((PROPERTY, json.dumps(
        [[r.variant, r.status, r.message, round(r.duration_s, 4)] for r in results])))
    outcome = pytest_outcome([r.status for r in results])  # as the report counts it
    if outcome == "failed":
        failed = [r for r in results if r.status == "failed"]
        shown = "\n".join(f"[{r.variant}] {r.message}" for r in failed)
        pytest.fail(f"{heading}: {_count(failed, results)} failed\n" + (f"{details}\n" if details else "") + shown,
                    pytrace=False)
    if outcome == "xfailed":
        pytest.xfail("; ".join(f"[{r.variant}] {r.message}" for r in results if r.status == "xfailed"))
    if outcome == "skipped":
        pytest.skip(results[0].message)


def _count(some: list, results: list) -> str:
    names = ", ".join(r.variant for r in some)
    return f"{names} ({len(some)} of {len(results)} variants)" if len(results) > 1 else names
