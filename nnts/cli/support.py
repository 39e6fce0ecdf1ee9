"""``nnts support``: what a driver supports, asked of it with one probe model per operation and
operand-type signature (:mod:`nnts.runners.support`), as a table of operation x data type x
feature level (supported / unsupported and why), or as JSON."""
from __future__ import annotations

import json

from nnts.cli.common import add_driver_options


def register(sub) -> None:
    p = sub.add_parser("support", help="ask a driver what it supports: operation x data type x feature level")
    add_driver_options(p)
    p.add_argument("--json", action="store_true", help="print the facts as JSON (nnts-support/1)")
    p.add_argument("--feature-level", type=int, default=None,
                   help="probe at this feature level (default: the driver's)")
    p.add_argument("--unsupported", action="store_true", help="list only what is not supported")
    p.add_argument("--refresh", action="store_true", help="ask the driver again instead of reading the cache")
    p.set_defaults(func=run, check_args=check)


def check(args) -> None:
    from nnts.formats.files import UsageError
    if args.feature_level is not None and args.feature_level < 27:
        raise UsageError(f"--feature-level {args.feature_level}: feature levels start at 27")


def run(args) -> int:
    from nnts.runners.drivers import load_drivers
    from nnts.runners.support import SUPPORTED, learn
    drivers = load_drivers(args.driver, isolate=args.isolate, settings=args.settings)
    try:
        level = min(int(d.get_feature_level()) for d in drivers)
        if args.feature_level is not None:
            level = min(level, args.feature_level)
        support = learn(drivers, level, args.settings.cache_dir, refresh=args.refresh)
    finally:
        for d in drivers:
            if hasattr(d, "close"):
                d.close()
    if args.json:
        print(json.dumps(support.to_json(), indent=1))
        return 0
    rows = [r for r in support.rows if not (args.unsupported and r.status == SUPPORTED)]
    print(f"{support.summary()}")
    print(f"{'operation':32s} {'data type':30s} {'level':>7s}  status")
    for r in rows:
        status = r.status + (f" ({r.reason})" if r.reason else "")
        if 0 < r.supported_signatures < r.signatures:
            status += f", {r.supported_signatures} of {r.signatures} signatures supported"
        print(f"{r.operation:32s} {r.data_type:30s} {r.level:>7d}  {status}")
    counts = {s: sum(r.status == s for r in support.rows) for s in ("supported", "unsupported", "unknown")}
    print(", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" (operation x data type, {len(support.signatures)} "
          "signatures probed)")
    return 0
