"""Conformance results: one record per test (per variant, for tests that run a test model's
variants: ``nnts.runners.variants``), gathered from pytest's reports (by nnts/plugin.py,
on the xdist controller too), summarized, written and read as JSON, compared with an earlier run
and merged across shards. The HTML page (reports/conformance.py) renders what this module computes.

JSON schema ``nnts-conformance/2`` (``--report out/conformance.json``)::

    {"schema": "nnts-conformance/2",
     "driver": "--driver as given",
     "generated": "ISO time the file was written",
     "meta": {"nnts_version", "git_commit" (null outside a clone), "command", "started" (ISO),
              "duration_s", "feature_level" (null: no filter), "driver_spec", "reproducers",
              "machine": {"cpu", "cores", "python", "numpy", "platform"},
              "drivers": [{"name", "version", "type", "feature_level", "capabilities"}],
              "corpora": [{"path", "models"}], "merged_from": [paths] (merged files only)},
     "totals": {STATUS: n for every status of STATUSES},
     "pytest": {"passed", "failed", "error", "skipped", "xfailed", "xpassed"}: pytest's own summary,
     "parts": {PART: {STATUS: n}},          every part of the suite with a test (PARTS)
     "matrix": {OPERATION: {DATA TYPE: {STATUS: n}}},  tests that compute values only (VALUE_PARTS)
     "paths": {EXECUTION PATH: {STATUS: n}},           the same tests by variant (sync, burst, ...)
     "validation": {OPERATION: {STATUS: n}},           VTS model and request validation
     "unsupported": {OPERATION: {DATA TYPE: n}},       tests skipped because the driver said so (a
                                                       test of no operation under its part of the
                                                       suite, of no one type under "any type")
     "failures": [TEST], the tests failed, crashed, hung, in error or unexpectedly passing,
     "baseline": {"path", "newly_failing", "newly_passing", "newly_unsupported"} (lists of ids;
                 only with --baseline),
     "tests": [TEST]}

    TEST = {"id", "test" (the pytest test id that runs it: the id, or for a variant of a generated
            test the test's id, which the variant's id extends with "-VARIANT"), "part", "op",
            "dtype", "variant" (null where not one), "status", "phase"
            ("setup", "call" or "teardown": the report that decided), "duration_s",
            "message" (failures: the trimmed report text; skips: the reason), "reproducer" (the
            saved model, where one was), "replay" (failures: ``nnts vectors run REPRODUCER ...``
            where a model was saved, else the ``pytest TEST-ID --driver ...`` command that reruns it),
            "graph" (the reproducer's picture, an SVG beside it, where Graphviz drew one),
            "parameters" (a generated test's model: its operations with their parameters in NNAPI's
            words, "CONV_2D (padding SAME, stride 2x2, fused activation RELU1, layout NHWC)"; else null)}

Statuses: passed, failed, crashed and hung (the driver, out of process, died or did not answer:
failed in pytest's terms), error (a setup or teardown failure, pytest's "error"), xfailed, xpassed,
unsupported (skipped because the driver reported the operation unsupported) and skipped (any other
skip). Schema 1 (``nnts-conformance/1``: totals and matrix only, other status names) is still read by
``nnts bench --include`` (:func:`nnts.formats.results.upgrade_v1`).
"""
from __future__ import annotations

import collections
import datetime
import json
import os
import platform
import re
import shlex
import stat
import subprocess
from pathlib import Path

import numpy

import nnts
from nnts.formats import jsonfile
from nnts.formats.files import write_atomic
from nnts.formats.results import FAILING, PYTEST_STATUS, STATUSES, pytest_outcome
from nnts.runners import cases

SCHEMA = "nnts-conformance/2"

# The part of the suite a test belongs to, from its module (folder and file name).
MODULE_PARTS = {
    ("cts", "test_generated"): "CTS generated",
    ("cts", "test_api"): "CTS API and runtime",
    ("cts", "test_runtime"): "CTS API and runtime",
    ("cts", "test_sequences"): "execution sequences",
    ("cts", "test_random_graph"): "random graphs",
    ("cts", "test_random_operation"): "random single operations",
    ("cts", "test_random_partitioned"): "random graphs across devices",
    ("vts", "test_generated"): "VTS generated",
    ("vts", "test_basic"): "VTS capabilities",
    ("vts", "test_validate_model"): "VTS model and request validation",
    ("vts", "test_validate_request"): "VTS model and request validation",
    ("vts", "test_caching"): "caching",
    ("vts", "test_memory_domain"): "memory domains",
    ("vts", "test_qos"): "QoS",
    ("vts", "test_sequences"): "execution sequences",
}
EXTENSION_PART = "vendor extensions"  # tests marked ``extension``, wherever they are
PARTS = tuple(dict.fromkeys(MODULE_PARTS.values())) + (EXTENSION_PART, "other")
VALUE_PARTS = ("CTS generated", "VTS generated", "random graphs", "random single operations")  # compute values
VALIDATION_PART = "VTS model and request validation"
DRIVER_KEYS = ("name", "version", "type", "feature_level", "capabilities")
TEST_KEYS = ("id", "test", "part", "op", "dtype", "variant", "status", "phase", "duration_s", "message", "reproducer",
             "replay", "graph", "parameters")
MESSAGE_LIMIT = 4000  # characters of a failure's report text kept


def part_of(nodeid: str, module: str | None = None) -> str:
    """The part of the suite of a test, from its module (``cts/test_generated``, as the plugin
    sends it) or else its id (``cts/test_generated.py::...``)."""
    path = Path(module or nodeid.split("::", 1)[0])
    return MODULE_PARTS.get((path.parent.name, path.stem), "other")


def trim(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """The text without xdist's "[gw0] linux -- Python ..." line, its middle cut past ``limit``."""
    text = re.sub(r"^\[gw\d+\] .* -- Python .*\n", "", text.strip()).strip()
    return text if len(text) <= limit else text[:limit // 2] + "\n[... trimmed ...]\n" + text[-limit // 2:]


def _last(pattern: str, text: str) -> re.Match | None:
    matches = list(re.finditer(pattern, text, re.M))
    return matches[-1] if matches else None


def reproducer_of(message: str) -> tuple[str | None, str | None]:
    """The saved reproducer and the command that replays it, where the failure names them: the
    last such lines, which nnts adds after whatever the driver said."""
    replay = _last(r"(nnts vectors run \S+.*)$", message)
    path = _last(r"^reproducer: (.+)$", message)
    if replay and not path:
        path = re.match(r"nnts vectors run (\S+)", replay.group(1))
    return (path.group(1).strip().strip("'") if path else None), (replay.group(1).strip() if replay else None)


def graph_of(message: str) -> str | None:
    """The reproducer's SVG picture, where the failure names one (``graph: PATH``, the last)."""
    found = _last(r"^graph: (.+\.svg)$", message)
    return found.group(1).strip() if found else None


def made_by_nnts(path, folders, suffix: str) -> bool:
    """Whether ``path`` (named by a failure message or a JSON file: anyone's text) is a file nnts
    made for this run: a regular file (not a link) of this user, ending in ``suffix``, inside one
    of ``folders`` (the run's output folders). Only such a file is read, or has a picture drawn
    beside it."""
    if not isinstance(path, str) or not path.endswith(suffix) or not folders:
        return False
    try:
        st = os.lstat(path)
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        return False
    for folder in folders:
        root = os.path.realpath(folder)
        if os.path.commonpath([root, real]) == root and real != root:
            return True
    return False


REPLAY_PROGRAMS = (["nnts", "vectors", "run"], ["pytest"], ["nnts", "test"])


def plain_replay(replay) -> bool:
    """Whether a replay command is one nnts writes: a command of nnts (or pytest), its words
    quoted as ``shlex.join`` quotes them, so that what a reader copies runs nothing else (no
    ``;``, ``|``, ``$(...)`` outside quotes, no line breaks)."""
    if not isinstance(replay, str) or "\n" in replay or "\r" in replay:
        return False
    try:
        words = shlex.split(replay)
    except ValueError:
        return False
    return shlex.join(words) == replay and any(words[:len(p)] == p for p in REPLAY_PROGRAMS)


def vet_run_files(tests: list[dict], folder: str, driver: str) -> None:
    """A live run's records: a reproducer only where nnts saved it (in the run's reproducer
    ``folder``), its replay command only in the form nnts wrote for it with this run's ``driver``,
    else rebuilt so (a driver's message can name any path and print any command)."""
    for t in tests:
        if t.get("graph") and not made_by_nnts(t["graph"], [folder], ".svg"):
            t["graph"] = None
        if t.get("reproducer") and not made_by_nnts(t["reproducer"], [folder], ".json"):
            t["reproducer"] = t["replay"] = None
        if t.get("reproducer"):
            if not _replays(t.get("replay"), t["reproducer"], driver):
                t["replay"] = shlex.join(["nnts", "vectors", "run", t["reproducer"], "--driver", driver])
        elif t.get("replay") and not plain_replay(t["replay"]):
            t["replay"] = None


def _replays(replay, reproducer: str, driver: str) -> bool:
    """Whether ``replay`` is ``nnts vectors run REPRODUCER --driver DRIVER`` with at most the
    options nnts adds (``--mode M``, ``--dynamic``)."""
    if not plain_replay(replay):
        return False
    words = shlex.split(replay)
    if words[:4] != ["nnts", "vectors", "run", reproducer]:
        return False
    options, rest = {}, words[4:]
    while rest:
        if rest[0] == "--dynamic":
            options["--dynamic"], rest = True, rest[1:]
        elif rest[0] in ("--driver", "--mode") and len(rest) > 1 and rest[0] not in options:
            options[rest[0]], rest = rest[1], rest[2:]
        else:
            return False
    return options.get("--driver") == driver


def vet_merged(tests: list[dict]) -> None:
    """Records read from JSON files: a replay command only in the form nnts writes (the paths
    are kept as text; :func:`made_by_nnts` decides where one is ever read)."""
    for t in tests:
        if t.get("replay") and not plain_replay(t["replay"]):
            t["replay"] = None


def records_of_report(report, props: dict) -> list[dict]:
    """The records of one pytest report: none for a report that decides nothing (a passed setup
    or teardown, a skipped teardown), one per variant for a test that ran a test model's
    variants (its ``nnts_variants`` property, unless the driver died in it), else one."""
    record = record_of_report(report, props)
    if record is None or "nnts_variants" not in props or report.when != "call" or props.get("nnts_verdict"):
        return [] if record is None else [record]
    out = []
    for variant, status, message, duration in json.loads(props["nnts_variants"]):
        one = dict(record, id=f"{record['id'][:-1]}-{variant}]" if record["id"].endswith("]") else
                   f"{record['id']}-{variant}", variant=variant.replace("-", "_"), status=status,
                   duration_s=duration, message=None, reproducer=None, replay=None, graph=None)
        _add_message(one, message)
        out.append(one)
    return out


def record_of_report(report, props: dict) -> dict | None:
    """The record of one pytest report, or None for a report that decides nothing (a passed
    setup or teardown, a skipped teardown)."""
    when = report.when
    if when in ("setup", "teardown") and report.passed or when == "teardown" and report.skipped:
        return None
    wasxfail = hasattr(report, "wasxfail")
    text = report.longreprtext if not report.passed else ""
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else text
        reason = re.sub(r"^Skipped: ", "", str(reason))
        status = "xfailed" if wasxfail else "unsupported" if "unsupported" in reason else "skipped"
        text = report.wasxfail if wasxfail and report.wasxfail else reason
    elif report.failed:
        status = props.get("nnts_verdict") or ("failed" if when == "call" else "error")  # crashed, hung
    else:
        status = "xpassed" if wasxfail else "passed"
        text = f"listed as an expected failure ({report.wasxfail}) but passed" if wasxfail else ""
    record = {"id": report.nodeid if when != "teardown" else f"{report.nodeid} (teardown)", "test": report.nodeid,
              "part": EXTENSION_PART if props.get("nnts_section") == "extension" else
              part_of(report.nodeid, props.get("nnts_module")), "op": props.get("nnts_op"),
              "dtype": None if props.get("nnts_dtype") == "-" else props.get("nnts_dtype"),  # "-": no one type
              "variant": (props.get("nnts_variant") or "").replace("-", "_") or None, "status": status, "phase": when,
              "duration_s": round(getattr(report, "duration", 0.0), 4), "message": None, "reproducer": None,
              "replay": None, "graph": None, "parameters": props.get("nnts_parameters")}
    _add_message(record, text)
    return record


def is_variant(record: dict) -> bool:
    """Whether a record is one variant of a generated test (``records_of_report``)."""
    return bool(record.get("test")) and record["id"] != record["test"] and not record["id"].endswith(" (teardown)")


def _add_message(record: dict, text: str) -> None:
    """The record's message (trimmed), and for a failure the reproducer, replay command and
    picture it names."""
    status = record["status"]
    if status != "passed":
        record["message"] = trim(text, MESSAGE_LIMIT if status in FAILING else 300) or None
    if status in FAILING and record["message"]:
        record["reproducer"], record["replay"] = reproducer_of(record["message"])
        record["graph"] = graph_of(record["message"])


# -- the run's facts -----------------------------------------------------------------------------

def unique_facts(kind: str, facts: list[dict]) -> list[dict]:
    """Drivers (by name, version, type and feature level: each worker measures its own
    performance figures) or corpora (by path and size) named once, the first of each kept."""
    keys = DRIVER_KEYS[:4] if kind == "drivers" else ("path", "models")
    return list({tuple(f.get(k) for k in keys): f for f in reversed(facts)}.values())[::-1]


def driver_facts(drivers) -> list[dict]:
    """Name, version, type, feature level and a capabilities summary of loaded HAL drivers."""
    out = []
    for d in drivers:
        try:
            caps = d.get_capabilities()
            types = [getattr(code, "name", str(code)) for code, _ in caps.operand_performance]
            relaxed = caps.relaxed_float32_to_float16_performance_tensor
            summary = (f"{len(types)} operand types with performance figures; relaxed float32 as float16: exec "
                       f"{relaxed.exec_time:g}; IF exec {caps.if_performance.exec_time:g}, WHILE exec "
                       f"{caps.while_performance.exec_time:g}; cache files {d.get_number_of_cache_files_needed()}")
            out.append({"name": d.get_name(), "version": d.get_version_string(), "type": d.get_type().name,
                        "feature_level": d.get_feature_level(), "capabilities": summary})
        except Exception as e:  # a driver that cannot describe itself still gets a line
            out.append({"name": type(d).__name__, "version": None, "type": None, "feature_level": None,
                        "capabilities": f"not available: {e}"})
    return out


def corpus_facts(config) -> list[dict]:
    """The test-vector corpora (project corpus, --vectors, shared corpus) and how many of their
    models the generated tests ran (what this process collected)."""
    roots = [cases.CORPUS, *cases.vector_paths(config)]
    models: dict[str, set] = {str(r): set() for r in roots}
    root_of: dict[str, Path | None] = {}  # per file (a few hundred), not per case (tens of thousands)
    for c in cases.collect_cases(config) if cases._cases_cache else []:
        path = str(c.path)
        if path not in root_of:
            root_of[path] = next((r for r in roots if Path(path) == r or r in Path(path).parents), None)
        if root_of[path] is not None:
            models[str(root_of[path])].add((path, c.test.name))
    return [{"path": p, "models": len(m)} for p, m in models.items()]


def machine_facts() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        numpy_version = numpy.__version__
    except ImportError:
        numpy_version = None
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "numpy": numpy_version,
            "platform": platform.platform()}


def git_commit() -> str | None:
    """The commit of the clone nnts runs from, or None for an installed copy."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() + ("+changes" if dirty else "")) if done.returncode == 0 else None


def pytest_replay(config, nodeid: str, variant: str | None = None) -> str:
    """The pytest command that runs one test (one ``variant`` of a generated test) again with
    this run's driver and corpus options (for failures that saved no reproducer: VTS, API tests,
    crashes and hangs)."""
    args = ["pytest", nodeid.removesuffix(" (teardown)"), "--driver", config.getoption("driver")]
    args += ["--variants", variant] if variant else []
    args += [a for v in config.getoption("vectors") for a in ("--vectors", v)]
    args += ["--no-shared-vectors"] if config.getoption("no_shared_vectors") else []
    args += ["--isolate"] if config.getoption("isolate") else []
    if config.getoption("feature_level") is not None:
        args += ["--feature-level", str(config.getoption("feature_level"))]
    return shlex.join(args)


def run_meta(config, started: datetime.datetime, drivers: list[dict], corpora: list[dict]) -> dict:
    return {"nnts_version": nnts.__version__, "git_commit": git_commit(),
            "command": config.getoption("nnts_command")  # the command typed: nnts test passes it
            or "pytest " + shlex.join(str(a) for a in config.invocation_params.args),
            "started": started.isoformat(timespec="seconds"),
            "duration_s": round((datetime.datetime.now() - started).total_seconds(), 1),
            "feature_level": config.getoption("feature_level"), "driver_spec": config.getoption("driver"),
            "reproducers": config.getoption("reproducers"), "machine": machine_facts(),
            "drivers": drivers, "corpora": corpora}


# -- summaries ------------------------------------------------------------------------------------

def _counter_dict(counter: collections.Counter) -> dict:
    return {s: counter[s] for s in STATUSES}


def headline(message: str | None) -> str:
    """The line of a failure's message that says what went wrong (the worst element where named)."""
    lines = [line.strip() for line in (message or "").splitlines() if line.strip()]
    for line in lines:
        if "worst" in line or line.startswith(("E ", "CRASH", "HANG")):
            return line.removeprefix("E ").strip()[:300]
    return lines[0][:300] if lines else ""


def summarize(tests: list[dict]) -> dict:
    """Totals, pytest's summary, parts, matrix, execution paths, validation, unsupported, failures."""
    totals = collections.Counter(t["status"] for t in tests)
    parts = collections.defaultdict(collections.Counter)
    matrix = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
    paths = collections.defaultdict(collections.Counter)
    validation = collections.defaultdict(collections.Counter)
    unsupported = collections.defaultdict(collections.Counter)
    for t in tests:
        parts[t["part"]][t["status"]] += 1
        if t["part"] in VALUE_PARTS:
            op = t["op"] or ("(random graphs)" if t["part"] == "random graphs" else "(other)")
            matrix[op][t["dtype"] or "mixed"][t["status"]] += 1
            paths[t["variant"] or ("random graph" if t["part"] == "random graphs" else "sync")][t["status"]] += 1
        elif t["part"] == VALIDATION_PART:
            validation[t["op"] or "(any)"][t["status"]] += 1
        if t["status"] == "unsupported":
            unsupported[_operation_of(t)][_type_of(t)] += 1
    pytest_totals = collections.Counter()
    variants_of = collections.defaultdict(list)  # a generated test's variants: one pytest test
    for t in tests:
        if is_variant(t):
            variants_of[t["test"]].append(t["status"])
        else:
            pytest_totals[PYTEST_STATUS[t["status"]]] += 1
    for statuses in variants_of.values():
        pytest_totals[pytest_outcome(statuses)] += 1
    return {"totals": _counter_dict(totals),
            "pytest": {k: pytest_totals[k] for k in ("passed", "failed", "error", "skipped", "xfailed", "xpassed")},
            "parts": {p: _counter_dict(parts[p]) for p in PARTS if p in parts},
            "matrix": {op: {d: _counter_dict(c) for d, c in sorted(per.items())} for op, per in sorted(matrix.items())},
            "paths": {v: _counter_dict(c) for v, c in sorted(paths.items())},
            "validation": {op: _counter_dict(c) for op, c in sorted(validation.items())},
            "unsupported": {op: dict(sorted(c.items())) for op, c in sorted(unsupported.items())},
            "failures": [t for t in tests if t["status"] in FAILING]}


RAN = ("passed", "failed", "crashed", "hung", "xfailed", "xpassed")  # the driver took the model
ANY_TYPE = "any type"  # the unsupported tests of no one operand type (API, sequences, validation)
WHY_UNSUPPORTED = {
    "operation": "the driver ran no test of this operation",
    "operand type": "the driver ran this operation on other operand types only",
    "form": "the driver ran this operation on these types in other tests (another form, parameter or size)",
}


def _operation_of(t: dict) -> str:
    return t["op"] or t["part"]


def _type_of(t: dict) -> str:
    return t["dtype"] if t["dtype"] not in (None, "-") else ANY_TYPE  # "-": files written before


def unsupported_reasons(tests: list[dict]) -> list[tuple[str, str, int, str]]:
    """Why the driver's unsupported tests were: (operation, operand type, tests, why) for each
    operation and type, ``why`` a key of :data:`WHY_UNSUPPORTED`, told from what the driver did
    run in the same results (an operation it ran in no test, one it ran on other types only,
    or one it ran on this type in another form). A test of no operation counts under its part
    of the suite; a test of no one operand type under :data:`ANY_TYPE`. Only tests that compute
    values count as run: a model the driver rejects passes a validation test."""
    ran_types = collections.defaultdict(set)
    for t in tests:
        if t["status"] in RAN and t["part"] in VALUE_PARTS:  # computed values: validation runs nothing
            ran_types[_operation_of(t)].add(_type_of(t))
    counts = collections.Counter((_operation_of(t), _type_of(t)) for t in tests if t["status"] == "unsupported")
    rows = []
    for (op, dtype), n in sorted(counts.items()):
        ran = ran_types.get(op, set())
        why = "operation" if not ran else "form" if dtype in ran else "operand type"
        rows.append((op, dtype, n, why))
    return rows


def feature_level_skips(tests: list[dict]) -> int:
    """Tests skipped because they need a feature level above the driver's."""
    return sum(1 for t in tests if t["status"] == "skipped" and "feature level" in (t["message"] or ""))


def unsupported_line(tests: list[dict]) -> str | None:
    """One line of what the driver reported unsupported, by reason (None when nothing was)."""
    rows = unsupported_reasons(tests)
    above = feature_level_skips(tests)
    if not rows and not above:
        return None
    parts = []
    for why, words in (("operation", "operations it ran in no test"),
                       ("operand type", "operations unsupported on some operand types"),
                       ("form", "operations unsupported in some forms")):
        chosen = [r for r in rows if r[3] == why]
        if chosen:
            parts.append(f"{_count(len({r[0] for r in chosen}), 'operation')}{words.removeprefix('operations')} "
                         f"({_count(sum(r[2] for r in chosen), 'test')})")
    line = f"{_count(sum(r[2] for r in rows), 'test')} skipped as unsupported"
    line += ": " + ", ".join(parts) if parts else ""
    if above:
        line += f"; {_count(above, 'test')} skipped as above the driver's feature level"
    return line


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def compare(tests: list[dict], earlier: list[dict]) -> dict:
    """deqp-runner's comparison: what fails now and did not, passes now and did not, and is now
    unsupported and was not (a test absent from the earlier run counts as new)."""
    before = {t["id"]: t["status"] for t in earlier}
    newly = {"newly_failing": [], "newly_passing": [], "newly_unsupported": []}
    for t in tests:
        was = before.get(t["id"])
        if t["status"] in FAILING and was not in FAILING:
            newly["newly_failing"].append(t["id"])
        elif t["status"] == "passed" and was != "passed":
            newly["newly_passing"].append(t["id"])
        elif t["status"] == "unsupported" and was != "unsupported":
            newly["newly_unsupported"].append(t["id"])
    return newly


def to_json(meta: dict, tests: list[dict], baseline: dict | None = None) -> dict:
    data = {"schema": SCHEMA, "driver": meta.get("driver_spec"),
            "generated": datetime.datetime.now().isoformat(timespec="seconds"), "meta": meta}
    data.update(summarize(tests))
    if baseline is not None:
        data["baseline"] = baseline
    data["tests"] = tests
    return data


def dumps(data: dict) -> str:
    """The JSON text: indented, one line per test (a full run has tens of thousands)."""
    head = {k: v for k, v in data.items() if k not in ("failures", "tests")}
    lines = json.dumps(head, indent=1)[:-2]
    for key in ("failures", "tests"):
        rows = ",\n  ".join(json.dumps(t) for t in data.get(key, []))
        lines += f',\n "{key}": [\n  {rows}\n ]' if rows else f',\n "{key}": []'
    return lines + "\n}\n"


def write_atomically(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (:func:`nnts.formats.files.write_atomic`), its
    folder made first; an OSError names ``path``."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from None


class ResultsError(ValueError):
    """A results file that cannot be read: the message names it and why."""


_TEXT = (str, None)
_COUNTS = {str: int}
TEST_SCHEMA = {"id": str, "test": _TEXT, "part": str, "op": _TEXT, "dtype": _TEXT, "variant": _TEXT, "status": str,
               "phase": _TEXT, "duration_s": (float, None), "message": _TEXT, "reproducer": _TEXT,
               "replay": _TEXT, "graph": _TEXT}
RESULTS_SCHEMA = {
    "schema": str, "driver": _TEXT, "generated": _TEXT,
    "meta": ({"nnts_version": _TEXT, "git_commit": _TEXT, "command": _TEXT, "started": _TEXT,
              "duration_s": (float, None), "feature_level": (int, None), "driver_spec": _TEXT, "reproducers": _TEXT,
              "machine": ({"cpu": _TEXT, "cores": (int, None), "python": _TEXT, "numpy": _TEXT, "platform": _TEXT},
                          None),
              "drivers": [{"name": _TEXT, "version": _TEXT, "type": (str, int, None), "feature_level": (int, None),
                           "capabilities": _TEXT}],
              "corpora": [{"path": _TEXT, "models": (int, None)}], "merged_from": [str]}, None),
    "totals": _COUNTS, "pytest": _COUNTS, "tests": [TEST_SCHEMA]}


def load(path: str | Path) -> dict:
    """A conformance JSON file of schema 2 (meta and tests), as written by :func:`to_json`,
    every field used checked for its type (:mod:`nnts.formats.jsonfile`: the file may be anyone's)."""
    try:
        data = jsonfile.read(path, dict)
        schema = data.get("schema")
        if schema != SCHEMA:
            hint = " (schema 1 has no per-test results: rerun with this nnts)" if schema == "nnts-conformance/1" else ""
            raise ResultsError(f"{path}: not a {SCHEMA} conformance results file{hint}")
        jsonfile.check(data, RESULTS_SCHEMA, str(path))
    except jsonfile.JsonError as e:
        raise ResultsError(str(e)) from None
    tests = data.get("tests")
    if not isinstance(tests, list) or not all(t.get("status") in STATUSES for t in tests):
        raise ResultsError(f"{path}: its 'tests' are not a list of test results (id, part, status)")
    for t in tests:
        for key in TEST_KEYS:
            t.setdefault(key, None)
    if not isinstance(data.get("meta"), dict):
        data["meta"] = {}
    meta = data["meta"]
    for key, keys in (("drivers", DRIVER_KEYS), ("corpora", ("path", "models"))):
        entries = meta.get(key) if isinstance(meta.get(key), list) else []
        meta[key] = [{k: e.get(k) for k in keys} for e in entries if isinstance(e, dict)]
    if meta.get("machine") is not None:
        machine = meta["machine"] if isinstance(meta["machine"], dict) else {}
        meta["machine"] = {k: machine.get(k) for k in ("cpu", "cores", "python", "numpy", "platform")}
    return data


def merge(files: list[dict], names: list[str]) -> tuple[dict, list[dict]]:
    """Shards' results as one run: every test of every file (counts add up), the drivers and
    corpora named once, the run spanning the earliest start to the latest end."""
    tests = [t for data in files for t in data["tests"]]
    metas = [data.get("meta", {}) for data in files]
    spans = []
    for m in metas:
        try:
            start = datetime.datetime.fromisoformat(m["started"])
            spans.append((start, start + datetime.timedelta(seconds=float(m.get("duration_s") or 0))))
        except (KeyError, TypeError, ValueError):  # a file without a readable start: its span unknown
            pass
    starts, ends = [a for a, _ in spans], [b for _, b in spans]
    meta = dict(metas[0])
    meta.update({"started": min(starts).isoformat(timespec="seconds") if starts else None,
                 "duration_s": round((max(ends) - min(starts)).total_seconds(), 1) if starts else None,
                 "command": " ; ".join(dict.fromkeys(m.get("command", "") for m in metas)),
                 "drivers": unique_facts("drivers", [d for m in metas for d in m.get("drivers", [])]),
                 "corpora": unique_facts("corpora", [c for m in metas for c in m.get("corpora", [])]),
                 "driver_spec": ",".join(dict.fromkeys(str(m.get("driver_spec")) for m in metas)),
                 "merged_from": names})
    return meta, tests
