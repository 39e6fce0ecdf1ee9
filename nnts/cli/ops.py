"""``nnts ops``: the operations the reference implements, per feature level and data type."""
from __future__ import annotations

from nnapi_ref import ops
from nnapi_ref.types import OperationCode, type_name


def register(sub) -> None:
    p = sub.add_parser("ops", help="list the operations the reference implements, per feature level and type")
    p.set_defaults(func=run)


def run(args) -> int:
    registry = ops.load_all()
    missing = [code.name for code in OperationCode if code not in registry]
    for code in OperationCode:
        impl = registry.get(code)
        if impl is None:
            continue
        by_level: dict[int, set[str]] = {}
        for sig in impl.signatures:
            # The data type: the first input whose type an output has (EMBEDDING_LOOKUP's values, not its indexes).
            main = next((t for t in sig.inputs if t in sig.outputs), sig.inputs[0] if sig.inputs else None)
            by_level.setdefault(sig.level, set()).add(type_name(main) if main is not None else "-")
        levels = "; ".join(f"{level}: {', '.join(sorted(types))}" for level, types in sorted(by_level.items()))
        print(f"{code.value:4d} {code.name:32s} {levels}")
    print(f"{len(registry)} of {len(OperationCode)} operations implemented" +
          (f"; missing: {', '.join(missing)}" if missing else ""))
    return 0
