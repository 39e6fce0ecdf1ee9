"""``nnts report merge`` and ``nnts report page``: conformance reports from the JSON of shards or runs."""
from __future__ import annotations

from nnts.reports.conformance import main_merge
from nnts.reports.driver_page import main_page


def register(sub) -> None:
    parser = sub.add_parser("report", help="conformance reports: merge the JSON of shards or runs into one report")
    rsub = parser.add_subparsers(dest="report_command", required=True)
    m = rsub.add_parser("merge", help="one conformance report of several --report JSON files (shards: counts add up)")
    m.add_argument("results", nargs="+", metavar="RESULTS.json", help="conformance JSON files (schema 2)")
    m.add_argument("--html", help="write the merged page to this file")
    m.add_argument("--json", help="write the merged JSON to this file")
    m.add_argument("--baseline", metavar="EARLIER.json", help="compare with an earlier run")
    m.set_defaults(func=lambda args: main_merge(args.results, args.html, args.json, args.baseline))
    p = rsub.add_parser("page", help="one page of a driver: its conformance results with its stress, vectors/fuzz "
                                     "and bench results summarized at the top")
    p.add_argument("results", nargs="+", metavar="RESULTS.json",
                   help="conformance JSON (several are merged), nnts stress/vectors run/bench --json files")
    p.add_argument("--html", required=True, help="write the page to this file")
    p.add_argument("--baseline", metavar="EARLIER.json", help="compare the conformance results with an earlier run")
    p.set_defaults(func=lambda args: main_page(args.results, args.html, args.baseline))
