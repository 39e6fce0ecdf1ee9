#!/usr/bin/env python3
"""Coverage of the corpus: for every NNAPI operation, the tensor types it supports (as listed in
generate.LEVELS) and how many corpus models exercise each. A model counts for a type when the
operation's first tensor input, or one of its outputs, has that type (so index and shape tensors
do not count as INT32 coverage). Prints a Markdown table.

    python cts/corpus/coverage.py
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from generate import LEVELS  # noqa: E402


def main():
    seen = defaultdict(lambda: defaultdict(int))
    models = relaxed = failing = 0
    for path in sorted(HERE.glob("*.json")):
        for test in json.load(open(path))["tests"]:
            models += 1
            relaxed += bool(test.get("is_relaxed"))
            failing += bool(test.get("expect_failure"))
            for sg in [test["main"]] + list(test.get("referenced") or []):
                ops = sg["operands"]
                for op in sg["operations"]:
                    tensors = [k for k in op["inputs"] if ops[k]["type"].startswith("TENSOR_")]
                    types = {ops[k]["type"].replace("TENSOR_", "") for k in tensors[:1] + op["outputs"]
                             if ops[k]["type"].startswith("TENSOR_")}
                    for t in types:
                        seen[op["type"]][t] += 1
                    if test.get("is_relaxed"):
                        seen[op["type"]]["relaxed"] += 1
                    if test.get("expect_failure"):
                        seen[op["type"]]["invalid"] += 1
    print(f"{models} models ({relaxed} relaxed, {failing} expect_failure).\n")
    print("| # | operation | types covered (models) | not covered |")
    print("|---|---|---|---|")
    full = 0
    for code, (op, levels) in enumerate(LEVELS.items()):
        got = seen.get(op, {})
        covered = [f"{t} ({got[t]})" for t in levels if got.get(t)]
        covered += [f"{extra} ({got[extra]})" for extra in ("relaxed", "invalid") if got.get(extra)]
        missing = [t for t in levels if not got.get(t)]
        full += not missing
        print(f"| {code} | {op} | {', '.join(covered) or '-'} | {', '.join(missing)} |")
    print(f"\n{full} of {len(LEVELS)} operations have every listed type covered; "
          f"{sum(1 for op in LEVELS if seen.get(op))} have at least one model.")


if __name__ == "__main__":
    main()
