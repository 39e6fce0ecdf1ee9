"""Time to first failure of the default ``nnts test`` against every broken driver restricted to each
partial support (``nnapi_ref.drivers.partial``): one ``nnts test -x`` run per (support, fault),
measured as :mod:`nnts.mlts.bench_suite` measures (wall seconds from the start, CPU seconds of the
run's processes), printed as a Markdown table with the test that caught the fault.

    nice python -m nnts.mlts.ttff_partial [--supports npu13,quant8_only,float32_level27]
                                          [--faults a,b] [--timeout S] [--json FILE]

A fault whose operation, data types or feature level the support excludes is not run: its row
says "not applicable" and why (``SCOPE``). A run that finds nothing within ``--timeout`` reads
"not caught in N s". CPU heavy (minutes per support): not a CI step.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from nnapi_ref.drivers.broken import ALL
from nnapi_ref.drivers.partial import SUPPORTS
from nnapi_ref.types import OperandCode as T, OperationCode as Op
from nnts.mlts.bench_suite import run_once

F32, F16, Q8, Q8S = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
Q16A, Q16S, BOOL8 = T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM, T.TENSOR_BOOL8
# Where each fault is: (the operations it is in, None for any; the data types of a model it shows in,
# as alternatives each of which the support must hold whole, None for any; the lowest feature level).
SCOPE = {
    "wrong_add_quant8": ({Op.ADD}, [{Q8}], 27),
    "wrong_add_quant8_by_one": ({Op.ADD}, [{Q8}], 27),
    "wrong_add_quant8_sparse": ({Op.ADD}, [{Q8}], 27),
    "add_quant8_truncating": ({Op.ADD}, [{Q8}], 27),
    "off_by_one_rounding": ({Op.AVERAGE_POOL_2D}, [{Q8}, {Q8S}], 27),
    "float16_arithmetic": (None, [{F32}], 27),
    "wrong_output_shape": ({Op.CONV_2D}, None, 27),
    "dilated_depthwise_multiplier": ({Op.DEPTHWISE_CONV_2D}, None, 29),
    "relaxed_bfloat16": (None, [{F32}], 27),  # random cases draw relaxed models at every level
    "nms_limit_per_class": ({Op.BOX_WITH_NMS_LIMIT}, [{F32}, {F16}, {Q8, Q16A}, {Q8S, Q16A}], 29),
    "proposals_clip_last_pixel": ({Op.GENERATE_PROPOSALS}, [{F32}, {F16}, {Q8, Q16A, Q16S}, {Q8S, Q16A, Q16S}], 29),
    "flushes_constant_memory": (None, [{F32}], 27),
    "replays_first_path": ({Op.IF, Op.WHILE}, [{BOOL8}], 30),  # conditions are TENSOR_BOOL8
    "float16_accumulator": (None, [{F16}], 29),
    # The extension tests hand their models straight to the driver, whatever its feature level; the
    # example extension's one operation, DEQUANTIZE64, outputs TENSOR_FLOAT32.
    "ignores_extension_prefix": ("extension", None, 27),
    "crashes_on_extension_data": ("extension", [{F32}], 27),
    "accepts_unsupported_extension": ("extension", [{F32}], 27),
    "extension_column_major": ("extension", [{F32}], 27),
}


def not_applicable(support: str, fault: str) -> str | None:
    """Why ``fault`` cannot show on a driver of ``support``, or None."""
    operations, types, level = SCOPE.get(fault, (None, None, 27))
    s = SUPPORTS[support]
    if operations == "extension" and s.operations is not None:
        return "not applicable: the fault is in extension operations, outside the support"
    if operations not in (None, "extension") and s.operations is not None and not operations & s.operations:
        return f"not applicable: the fault is in {'/'.join(sorted(o.name for o in operations))}, outside the support"
    if types is not None and not any(alternative <= s.types for alternative in types):
        if operations == "extension":
            return ("not applicable: the fault is in the example extension, whose one operation (DEQUANTIZE64) "
                    "outputs TENSOR_FLOAT32, outside the support: the driver refuses every use of the extension")
        return "not applicable: the fault needs data types outside the support"
    if level > s.feature_level:
        return f"not applicable: the fault needs feature level {level}, the support is at {s.feature_level}"
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--supports", default=",".join(SUPPORTS), help="partial supports, comma-separated")
    parser.add_argument("--faults", default=",".join(ALL), help="broken drivers, comma-separated (default: all)")
    parser.add_argument("--timeout", type=float, default=180, help="seconds one run may take (default 180)")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    supports = [s for s in args.supports.split(",") if s]
    faults = [f for f in args.faults.split(",") if f]
    unknown = [s for s in supports if s not in SUPPORTS] + [f for f in faults if f not in ALL]
    nnts = shutil.which("nnts", path=str(Path(sys.executable).parent)) or shutil.which("nnts")
    problem = (f"unknown {', '.join(unknown)}" if unknown else "--timeout must be positive" if args.timeout <= 0
               else "no nnts command beside this Python" if nnts is None else None)
    if problem:
        print(f"ttff_partial: {problem}", file=sys.stderr)
        return 2
    rows = []
    print("| support | broken driver | wall s | CPU s | first failing test |\n|---|---|---|---|---|", flush=True)
    for support in supports:
        for fault in faults:
            why = not_applicable(support, fault)
            if why is None:
                with open(os.devnull, "w") as quiet:
                    run = run_once(f"nnapi_ref.drivers.partial:{support}__{fault}", None, False, args.timeout, 2, [],
                                   stream=quiet, runner=[nnts, "test"])
                caught = run["seconds_to_first_failure"] is not None
                row = {"support": support, "fault": fault, "wall_s": run["seconds_to_first_failure"],
                       "cpu_s": run["cpu_seconds_to_first_failure"],
                       "caught_by": run["first_failure"] if caught else
                       f"not caught in {min(run['run_seconds'], args.timeout):.0f} s ({run['summary']})"}
            else:
                row = {"support": support, "fault": fault, "wall_s": None, "cpu_s": None, "caught_by": why}
            rows.append(row)
            wall = "" if row["wall_s"] is None else f"{row['wall_s']:.1f}"
            cpu = "" if row["cpu_s"] is None else f"{row['cpu_s']:.1f}"
            print(f"| {support} | {fault} | {wall} | {cpu} | {row['caught_by']} |", flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
