"""``nnts gate``: exit non-zero when bench results miss their accuracy criteria or regress (mlts/bench_gate.py)."""
from __future__ import annotations

from nnts.formats import files
from nnts.mlts import bench_gate


def register(sub) -> None:
    p = sub.add_parser("gate", help="exit non-zero when bench results miss accuracy criteria or regress")
    p.add_argument("results", help="nnts bench --json output")
    p.add_argument("--baseline", help="earlier results to compare latency medians with")
    p.add_argument("--thresholds", help="TOML thresholds file: [accuracy] top1_agreement_min, top5_agreement_min, "
                                        "max_error_steps, snr_db_min, frame_cosine_min; [latency] median_regression_max, "
                                        "noise_floor_ms; [models.\"GLOB\"] per-model [accuracy] overrides")
    p.set_defaults(func=run, check_args=check)


def check(args) -> None:
    files.input_file("results", args.results)
    files.input_file("--baseline", args.baseline)
    files.input_file("--thresholds", args.thresholds)


def run(args) -> int:
    return bench_gate.main(args.results, args.baseline, args.thresholds)
