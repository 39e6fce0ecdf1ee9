"""``nnts trace summary``: NNAPI's ``parse_systrace`` table of a trace written by :mod:`nnapi_ref.trace`.

Wall time per layer (rows: application, runtime, IPC, driver, CPU) and phase (columns:
initialization, preparation, compilation, the execution sub-phases I/O, compute and results, the
execution's total, termination, and the layer's total), in milliseconds. By default a layer's time
excludes the time its spans wait on a deeper layer (a runtime execution's time inside the driver
counts for the driver); ``--total-times`` includes it. The total row is the wall time covered by
any layer's spans of the column, so it ignores missing (n/a) values, as parse_systrace's footnote
says. Spans are read from their ``[NN_Lx_Px]`` name tags, so an application's own tagged spans
(written by any tool) count too.
"""
from __future__ import annotations

import json
import os
from html import escape

from nnapi_ref import trace
from nnts.formats import jsonfile

ROWS = ("application", "runtime", "ipc", "driver", "cpu")
ROW_TITLES = {"application": "Application", "runtime": "Runtime", "ipc": "IPC", "driver": "Driver", "cpu": "CPU"}
EXECUTION_PHASES = ("execution", "io", "compute", "results")
# Column -> the phases whose spans it covers.
COLUMNS = {"initialization": ("initialization",), "preparation": ("preparation",), "compilation": ("compilation",),
           "io": ("io",), "compute": ("compute",), "results": ("results",), "execution_total": EXECUTION_PHASES,
           "termination": ("termination",)}
TITLES = {"initialization": "Initialization", "preparation": "Preparation", "compilation": "Compilation",
          "io": "I/O", "compute": "Compute", "results": "Results", "execution_total": "Ex. total",
          "termination": "Termination", "total": "Total"}
PER_EXECUTION_COLUMNS = ("io", "compute", "results", "execution_total")


class TraceError(Exception):
    """A file that is not a trace-event JSON document."""


def load_spans(path: str) -> list[dict]:
    """The tagged spans of a trace file: dicts of name, phase, layer, start and end (µs), pid, tid.
    Complete ("X") events and begin/end ("B"/"E") pairs per thread are both read."""
    try:
        document = jsonfile.read(path, ({"traceEvents": [any], "otherData": ({str: any}, None)}, [any]))
    except jsonfile.JsonError as e:
        raise TraceError(str(e)) from None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise TraceError(f"{path} holds no trace events (a list or an object with traceEvents)")
    origin = (document.get("otherData") or {}).get("origin_ns", 0) if isinstance(document, dict) else 0
    return spans_of_events(events, path, origin / 1000 if isinstance(origin, (int, float)) else 0.0)


def spans_of_events(events: list, where: str = "trace", shift_us: float = 0.0) -> list[dict]:
    """The tagged spans of a list of trace events (see :func:`load_spans`); ``shift_us`` is added
    to their times (nnts writes them relative to the trace's origin, which it records: spans of
    several files of one machine, xdist workers' say, share one time axis)."""
    spans, open_spans = [], {}
    for event in events:
        if not isinstance(event, dict) or event.get("ph") not in ("X", "B", "E"):
            continue
        try:
            ts, pid, tid = float(event["ts"]) + shift_us, event.get("pid", 0), event.get("tid", 0)
            if event["ph"] == "E":
                stack = open_spans.get((pid, tid))
                if stack:
                    name, start = stack.pop()
                    _add(spans, name, start, ts, pid, tid)
                continue
            name = str(event["name"])
            if event["ph"] == "B":
                open_spans.setdefault((pid, tid), []).append((name, ts))
            else:
                _add(spans, name, ts, ts + float(event.get("dur", 0)), pid, tid)
        except (KeyError, TypeError, ValueError):
            raise TraceError(f"{where}: malformed trace event {str(event)[:200]}") from None
    return spans


def _add(spans: list, name: str, start: float, end: float, pid, tid) -> None:
    parsed = trace.parse_tag(name)
    if parsed is None:
        return
    phase, layer, rest = parsed
    if layer in ROWS:
        spans.append({"name": rest, "phase": phase, "layer": layer, "start": start, "end": end, "pid": pid, "tid": tid})


# -- interval arithmetic ------------------------------------------------------------------------

def union(intervals) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def subtract(intervals: list[tuple[float, float]], holes: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``intervals`` minus ``holes`` (both unions: sorted, disjoint)."""
    out, j = [], 0
    for start, end in intervals:
        while j < len(holes) and holes[j][1] <= start:
            j += 1
        k, cursor = j, start
        while k < len(holes) and holes[k][0] < end:
            if holes[k][0] > cursor:
                out.append((cursor, holes[k][0]))
            cursor = max(cursor, holes[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def measure(intervals) -> float:
    return sum(b - a for a, b in intervals)


# -- the table --------------------------------------------------------------------------------

def summarize(spans: list[dict], total_times: bool = False) -> dict:
    """Milliseconds per layer and column (None: the layer has no span of that column), the total
    row, and the number of executions (the runtime's, else the top layer's execution spans)."""
    deeper_of = {layer: union((s["start"], s["end"]) for s in spans if ROWS.index(s["layer"]) > ROWS.index(layer))
                 for layer in ROWS}
    layers: dict[str, dict[str, float | None]] = {}
    kept: dict[str, list] = {column: [] for column in COLUMNS}
    for layer in ROWS:
        row: dict[str, float | None] = {}
        for column, phases in COLUMNS.items():
            own = [(s["start"], s["end"]) for s in spans if s["layer"] == layer and s["phase"] in phases]
            if not own:
                row[column] = None
                continue
            intervals = union(own)
            if not total_times:
                intervals = subtract(intervals, deeper_of[layer])
            kept[column] += intervals
            row[column] = measure(intervals) / 1000
        present = [row[c] for c in ("initialization", "preparation", "compilation", "execution_total", "termination")
                   if row[c] is not None]
        row["total"] = sum(present) if present else None
        if any(v is not None for v in row.values()):
            layers[layer] = row
    total = {column: measure(union(kept[column])) / 1000 if kept[column] else None for column in COLUMNS}
    everything = [iv for column in ("initialization", "preparation", "compilation", "execution_total", "termination")
                  for iv in kept[column]]
    total["total"] = measure(union(everything)) / 1000 if everything else None
    return {"mode": "total times" if total_times else "self times", "unit": "ms", "layers": layers, "total": total,
            "incomplete": {c: any(row.get(c) is None for row in layers.values()) for c in total},
            "executions": count_executions(spans)}


def count_executions(spans: list[dict]) -> int:
    for layer in ("runtime",) + ROWS:
        count = sum(1 for s in spans if s["layer"] == layer and s["phase"] == "execution")
        if count:
            return count
    return 0


def per_execution(summary: dict) -> dict:
    """The execution columns divided by the number of executions."""
    n = summary["executions"] or 1
    scale = lambda row: {c: (row[c] / n if row.get(c) is not None else None) for c in PER_EXECUTION_COLUMNS}
    return {**summary, "layers": {layer: scale(row) for layer, row in summary["layers"].items()},
            "total": scale(summary["total"]), "per_execution": True}


def format_table(summary: dict, columns=None) -> str:
    """The table as parse_systrace prints it."""
    columns = columns or tuple(COLUMNS) + ("total",)
    width = 14
    kind = "per execution" if summary.get("per_execution") else summary["mode"].replace(" times", " time")
    title = f"NNAPI timing summary ({kind}, ms wall-clock)"
    if summary.get("per_execution"):
        title += f", {summary['executions']} executions"
    lines = ["=" * (12 + width * len(columns)), title,
             " " * 12 + "".join(TITLES[c].rjust(width) for c in columns),
             " " * 12 + "".join(("-" * len(TITLES[c])).rjust(width) for c in columns)]

    def cell(value, star=False):
        return ("n/a " if value is None else f"{value:.2f}" + ("*" if star else " ")).rjust(width)
    for layer, row in summary["layers"].items():
        lines.append(ROW_TITLES[layer].ljust(12) + "".join(cell(row.get(c)) for c in columns))
    lines.append("")
    lines.append("Total".ljust(12) + "".join(cell(summary["total"].get(c), summary["incomplete"].get(c, False))
                                             for c in columns))
    lines.append("=" * (12 + width * len(columns)))
    if any(summary["incomplete"].get(c) for c in columns):
        lines.append("* This total ignores missing (n/a) values and thus is not necessarily consistent with "
                     "the rest of the numbers")
    return "\n".join(lines)


def format_detail(spans: list[dict]) -> str:
    lines = [f"{'start ms':>12} {'dur ms':>10}  {'layer':<12}{'phase':<15}{'pid':>8}{'tid':>8}  name"]
    for s in sorted(spans, key=lambda s: (s["start"], -s["end"])):
        lines.append(f"{s['start'] / 1000:12.3f} {(s['end'] - s['start']) / 1000:10.3f}  {s['layer']:<12}"
                     f"{s['phase']:<15}{s['pid']:>8}{s['tid']:>8}  {s['name']}")
    return "\n".join(lines)


def operation_times(spans: list[dict]) -> list[dict]:
    """Per operation of the CPU executor: count, total and mean ms, share of the CPU time (the
    way TFLite's benchmark_model --enable_op_profiling lists operators)."""
    by_name: dict[str, list[float]] = {}
    for s in spans:
        if s["layer"] == "cpu" and s["phase"] == "compute":
            by_name.setdefault(s["name"], []).append((s["end"] - s["start"]) / 1000)
    grand = sum(sum(v) for v in by_name.values()) or 1.0
    rows = [{"operation": name, "count": len(v), "total_ms": sum(v), "mean_ms": sum(v) / len(v),
             "percent": 100 * sum(v) / grand} for name, v in by_name.items()]
    return sorted(rows, key=lambda r: -r["total_ms"])


def window(start_ns: int, end_ns: int) -> dict:
    """The summary (self times) and the per-operation table of the spans recorded so far that lie
    within [start_ns, end_ns] of :func:`trace.now` (one model of ``nnts bench --trace``)."""
    lo, hi = (start_ns - trace.origin()) / 1000, (end_ns - trace.origin()) / 1000
    spans = [s for s in spans_of_events(trace.events()) if lo <= s["start"] and s["end"] <= hi]
    return {"summary": summarize(spans), "operations": operation_times(spans)}


def html_tables(rows: list[dict]) -> str:
    """The bench page's section: per model, the timing summary and the CPU executor's operations."""
    parts = []
    for row in rows:
        traced = row.get("trace")
        if not traced:
            continue
        summary = traced["summary"]
        columns = tuple(COLUMNS) + ("total",)
        head = "".join(f"<th>{TITLES[c]}</th>" for c in columns)
        body = []
        for layer, values in list(summary["layers"].items()) + [("total", summary["total"])]:
            cells = "".join(f"<td>{'n/a' if values.get(c) is None else f'{values[c]:.2f}'}"
                            f"{'*' if layer == 'total' and values.get(c) is not None and summary['incomplete'].get(c) else ''}</td>"
                            for c in columns)
            body.append(f"<tr><th class=\"l\">{ROW_TITLES.get(layer, 'Total')}</th>{cells}</tr>")
        parts.append(f"<h3 data-trace-model=\"{escape(row['model'])}\">{escape(row['model'])}</h3>"
                     f"<p>{summary['executions']} executions; milliseconds of wall time per layer, its own time "
                     f"(without the time it waits on deeper layers); * the total ignores n/a values.</p>"
                     f"<table class=\"trace\"><tr><th class=\"l\">layer</th>{head}</tr>{''.join(body)}</table>")
        operations = traced["operations"]
        if operations:
            op_rows = "".join(f"<tr><td class=\"l\">{escape(o['operation'])}</td><td>{o['count']}</td>"
                              f"<td>{o['total_ms']:.2f}</td><td>{o['mean_ms'] * 1000:.1f}</td>"
                              f"<td>{o['percent']:.1f}</td></tr>" for o in operations)
            parts.append("<table class=\"ops\"><tr><th class=\"l\">operation (reference CPU executor)</th>"
                         "<th>runs</th><th>total ms</th><th>mean µs</th><th>% of CPU time</th></tr>"
                         f"{op_rows}</table>")
    if not parts:
        return ""
    return ("<h2>Where the time goes (nnts bench --trace)</h2><p>From the run's trace: NNAPI's timing summary "
            "per model (nnts trace summary), then the time per operation of the reference executor.</p>"
            + "".join(parts))


def main(paths, total_times: bool = False, per_exec: bool = False, detail: bool = False,
         as_json: bool = False) -> int:
    """``nnts trace summary``: print the table (or JSON) of one or more trace files (one run's:
    the files of xdist workers, say); 2 with one line for a bad file."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    spans = []
    for path in paths:
        if not os.path.exists(path):
            print(f"nnts trace summary: {path}: no such file")
            return 2
        try:
            spans += load_spans(path)
        except TraceError as e:
            print(f"nnts trace summary: {e}")
            return 2
    path = ", ".join(paths)
    summary = summarize(spans, total_times)
    if per_exec:
        summary = per_execution(summary)
    if as_json:
        out = dict(summary)
        out["operations"] = operation_times(spans)
        if detail:
            out["spans"] = spans
        print(json.dumps(out, indent=1))
        return 0
    if not spans:
        print(f"{path}: no NNAPI spans (names tagged [NN_Lx_Px])")
        return 0
    if detail:
        print(format_detail(spans))
        print()
    print(format_table(summary, PER_EXECUTION_COLUMNS if per_exec else None))
    return 0
