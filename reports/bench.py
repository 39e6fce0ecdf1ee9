"""The benchmark report: ``nnts bench --html``, one self-contained page (inline SVG charts, no
script, nothing fetched) with the conformance, stress and vectors/fuzz results of the same driver
when their JSON is given (``--include``)."""
from __future__ import annotations

import itertools
import math
from html import escape
from pathlib import Path

import jinja2

from nnts.formats.files import write_atomic
from nnts.formats.results import earlier_status, included
from nnts.formats.trace_summary import html_tables
from nnts.reports.conformance import published

DRIVER_COLOUR, BASELINE_COLOUR = "#3465a4", "#f57900"


def _svg(width: int, height: int, kind: str, bars: int, body: list[str], label: str) -> str:
    return (f'<svg class="chart {kind}" data-bars="{bars}" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}" '
            f'xmlns="http://www.w3.org/2000/svg">' + "".join(body) + "</svg>")


def histogram_svg(model: str, series: list[tuple[str, str, dict]]) -> str:
    """Latency histograms of one model, one row of bars per runtime (``series``: name, colour,
    histogram of mlts.bench), each on its own millisecond axis."""
    width, row_h, pad = 420, 70, 4
    body = []
    bars = 0
    for k, (name, colour, hist) in enumerate(series):
        top = k * (row_h + 24)
        counts, edges = hist["counts"], hist["edges"]
        peak = max(counts) or 1
        w = (width - 2 * pad) / len(counts)
        for i, c in enumerate(counts):
            h = row_h * c / peak
            body.append(f'<rect class="bar" x="{pad + i * w:.1f}" y="{top + row_h - h:.1f}" width="{max(w - 1, 1):.1f}" '
                        f'height="{h:.1f}" fill="{colour}"><title>{name}: {c} runs in '
                        f'{edges[i]:.3f}-{edges[i + 1]:.3f} ms</title></rect>')
            bars += 1
        body.append(f'<text x="{pad}" y="{top + row_h + 14}" font-size="11">{escape(name)}: {edges[0]:.2f} ms</text>'
                    f'<text x="{width - pad}" y="{top + row_h + 14}" font-size="11" text-anchor="end">'
                    f'{edges[-1]:.2f} ms</text>')
    return _svg(width, len(series) * (row_h + 24), "histogram", bars, body, f"latency histogram of {model}")


def percentile_svg(model: str, series: list[tuple[str, str, dict]]) -> str:
    """p50 / p90 / p99 of each runtime as horizontal bars on one millisecond scale."""
    width, bar_h, label_w = 420, 14, 110
    rows = [(f"{name} {p}", colour, lat[p]) for name, colour, lat in series for p in ("p50", "p90", "p99")]
    top = max(v for _, _, v in rows) or 1
    body = []
    for i, (label, colour, v) in enumerate(rows):
        y = i * (bar_h + 4)
        w = (width - label_w - 70) * v / top
        body.append(f'<text x="0" y="{y + bar_h - 3}" font-size="11">{escape(label)}</text>'
                    f'<rect class="bar" x="{label_w}" y="{y}" width="{max(w, 1):.1f}" height="{bar_h}" fill="{colour}">'
                    f'<title>{escape(label)}: {v:.3f} ms</title></rect>'
                    f'<text x="{label_w + w + 4:.1f}" y="{y + bar_h - 3}" font-size="11">{v:.2f} ms</text>')
    return _svg(width, len(rows) * (bar_h + 4), "percentiles", len(rows), body, f"latency percentiles of {model}")


def ratio_svg(rows: list[dict]) -> str:
    """Driver / TFLite median ratio per model, log scale (1 = as fast as TFLite)."""
    items = [(r["model"], r["ratio"]) for r in rows if r.get("ratio") and not r.get("fallback")]  # the driver's own
    width, bar_h, label_w = 640, 14, 290
    if not items:
        return ""
    top = max(math.log10(max(v, 1)) for _, v in items) or 1
    body = []
    for i, (name, v) in enumerate(items):
        y = i * (bar_h + 4)
        w = (width - label_w - 60) * math.log10(max(v, 1)) / top
        colour = DRIVER_COLOUR if v > 1 else "#4e9a06"
        body.append(f'<text x="0" y="{y + bar_h - 3}" font-size="11">{escape(name)}</text>'
                    f'<rect class="bar" x="{label_w}" y="{y}" width="{max(w, 1):.1f}" height="{bar_h}" fill="{colour}">'
                    f'<title>{escape(name)}: x{v:.2f}</title></rect>'
                    f'<text x="{label_w + w + 4:.1f}" y="{y + bar_h - 3}" font-size="11">x{v:.1f}</text>')
    return _svg(width, len(items) * (bar_h + 4), "ratios", len(items), body, "driver / TFLite median latency")


def render(results: dict, includes: list[str], folder: str | Path | None = None) -> str:
    """The page; ``folder``: where it goes (the paths of the machine are taken out: :func:`published`)."""
    folder = Path(folder).resolve() if folder is not None else None
    results = published(results, folder)
    rows = results["models"]
    charts = {}
    for r in rows:
        series = [(n, c, r[k]) for n, c, k in (("driver", DRIVER_COLOUR, "driver"), ("TFLite", BASELINE_COLOUR,
                                                                                      "baseline")) if r.get(k)]
        if series:
            charts[r["model"]] = (histogram_svg(r["model"], [(n, c, s["histogram"]) for n, c, s in series]),
                                  percentile_svg(r["model"], [(n, c, s["latency_ms"]) for n, c, s in series]))
    families = [(f, list(g)) for f, g in itertools.groupby(sorted(rows, key=lambda r: (r["family"], r["model"])),
                                                           key=lambda r: r["family"])]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]), undefined=jinja2.StrictUndefined)
    return env.get_template("bench.html.j2").render(
        r=results, families=families, charts=charts, ratio_chart=ratio_svg(rows),
        includes=[published(included(p), folder) for p in includes], failing=_failing, trace_html=html_tables(rows))


def _failing(row: dict) -> bool:
    return earlier_status(row["status"]) == "failed" or bool((row.get("accuracy") or {}).get("failures"))


def write_report(path: str, results: dict, includes: list[str]) -> None:
    page = render(results, includes, Path(path).parent)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, page)
