"""One page per driver (``nnts report page RESULTS.json... --html OUT``): its conformance results
(several conformance JSON files are merged, as ``nnts report merge`` does) with, at the top, the
summary of each other result of the same driver given (``nnts stress --json``, ``nnts vectors run
--json`` or a fuzz campaign's reproducers run so, ``nnts bench --json``) and their details below:
is this driver right, robust and fast."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

from nnts.formats import jsonfile
from nnts.formats.results import earlier_status, included
from nnts.reports import bench, results
from nnts.reports.conformance import input_folders, render


def other_result(path: str) -> dict:
    """A stress, vectors or bench JSON file as {kind, title, ok, summary, rows} for the page."""
    try:
        data = jsonfile.read(path, any)
    except jsonfile.JsonError as e:
        raise results.ResultsError(str(e)) from None
    name = Path(path).name
    if isinstance(data, dict) and str(data.get("schema", "")).startswith("nnts-bench/") \
            and isinstance(data.get("models"), list):
        rows = [r for r in data["models"] if isinstance(r, dict)]
        bad = [r for r in rows if bench._failing(r)]
        ratios = [r["ratio"] for r in rows if isinstance(r.get("ratio"), (int, float)) and not r.get("fallback")]
        summary = (f"{len(rows)} model{'' if len(rows) == 1 else 's'}, {sum(earlier_status(str(r.get('status'))) == 'passed' or bool(r.get('driver')) for r in rows)} run, {len(bad)} failing accuracy or "
                   f"execution" + (f"; median latency x{statistics.median(ratios):.2f} TFLite's" if ratios else ""))
        table = [(r.get("model"), r.get("status"), f"x{r['ratio']:.2f}" if isinstance(r.get("ratio"), (int, float))
                  else "-", r.get("reason") or "") for r in rows]
        return {"kind": "bench", "title": f"Benchmark ({name})", "ok": not bad, "summary": summary,
                "columns": ("model", "status", "latency / TFLite", "note"), "rows": table}
    try:
        part = included(path)
    except (ValueError, KeyError, TypeError):
        raise results.ResultsError(f"{path}: not a conformance, stress, vectors or bench JSON file") from None
    if part["kind"] == "stress":
        return {"kind": "stress", "title": part["title"], "ok": part["ok"],
                "summary": ", ".join(f"{n} {v}" for v, n in part["counts"].items()),
                "columns": ("test", "verdict", "message"),
                "rows": [(r.get("name"), r.get("verdict"), r.get("message") or "") for r in part["rows"]]}
    if part["kind"] == "vectors":
        d = part["data"]
        return {"kind": "vectors", "title": part["title"], "ok": part["ok"],
                "summary": f"{d.get('passed', 0)} passed, {d.get('failed', 0)} failed, {d.get('skipped', 0)} skipped, "
                           f"{d.get('crashed', 0)} crashed, {d.get('hung', 0)} hung",
                "columns": ("test", "status", "message"),
                "rows": [(r.get("name"), r.get("status"), (r.get("message") or "")[:500]) for r in part["bad"]]}
    raise results.ResultsError(f"{path}: a conformance file of schema 1: rerun with this nnts")


def main_page(paths: list[str], html: str, baseline: str | None = None) -> int:
    """``nnts report page``: the conformance JSON files among ``paths`` merged, the others summarized."""
    conformance, others = [], []
    try:
        for p in paths:
            try:
                head = jsonfile.loads(Path(p).read_bytes())
            except (OSError, ValueError):
                head = None
            if isinstance(head, dict) and head.get("schema") == results.SCHEMA:
                conformance.append(dict(results.load(p), _path=p))
            else:
                others.append(other_result(p))
        earlier = results.load(baseline) if baseline else None
    except results.ResultsError as e:
        print(f"nnts: {e}", file=sys.stderr)
        return 2
    if not conformance:
        print("nnts: report page needs at least one conformance JSON file (pytest ... --report out/conformance.json)",
              file=sys.stderr)
        return 2
    meta, tests = results.merge(conformance, [c["_path"] for c in conformance])
    results.vet_merged(tests)
    if len(conformance) == 1:
        meta.pop("merged_from")
    comparison = dict(results.compare(tests, earlier["tests"]), path=baseline) if earlier else None
    data = results.to_json(meta, tests, comparison)
    try:
        results.write_atomically(html, render(data, others, folder=Path(html).parent,
                                              folders=input_folders([c["_path"] for c in conformance])))
    except OSError as e:
        print(f"nnts: cannot write {e.filename or html}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"nnts: {html}: {len(tests)} conformance tests" + "".join(
        f"; {o['title']}: {'all pass' if o['ok'] else 'failures'}" for o in others))
    return 0
