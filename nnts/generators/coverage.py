"""Which signature forms of each operation the random-graph generator draws.

A *form* is one way the registry (:mod:`nnapi_ref.ops`) lets an operation be written: the operand
types of one of its signatures, with each number of trailing optional inputs it may leave out (a
convolution's layout and dilation tail present or not, implicit or explicit padding being two
signatures). Its level is the lowest feature level that declares it. Besides forms, some meanings
live in the values of scalar inputs, which the types cannot tell apart: the NCHW layout, dilation
factors above 1 (with a depth multiplier above 1, for DEPTHWISE_CONV_2D), each fused activation,
an omittable input present or omitted, the detection operations' NMS kernel, layout and NMS
form. :func:`features` names them.

``python -m nnts.generators.coverage --seeds N`` generates the graphs of the random-graph test's seeds
0..N-1 (``cts/test_random_graph.py``: the same sizes, at the highest feature level, and the same
number again at each lower level) and reports, per operation, the forms drawn out of those
declared, the forms never drawn, and the value features seen. With ``--single`` it measures the
single-operation cases instead (``cts/test_random_operation.py``: seeds 0..N-1 at each level),
which also draw the operations random graphs leave out (recurrent, control flow, detection).
"""
from __future__ import annotations

import argparse
import collections
import sys
from dataclasses import dataclass, field

from nnapi_ref import ops
from nnapi_ref.types import Lifetime, OperandCode as T, OperationCode as Op
from nnts.generators import single
from nnts.generators.families import FAMILIES, SINGLE_FAMILIES
from nnts.generators.forms import LEVELS, Form, declared_forms, form_of
from nnts.generators.graphs import DATA_TYPES
from nnts.generators.random_graphs import case_size, generate

ACTIVATIONS = ("NONE", "RELU", "RELU1", "RELU6")


def drawable_forms(code: Op) -> dict[Form, int]:
    """The declared forms whose first tensor (the one the generator starts an operation from, at
    the family's position) is of a type graph tensors have: no graph holds a quant16 or
    TENSOR_QUANT8_SYMM tensor, so DEQUANTIZE from TENSOR_QUANT8_SYMM, say, is not drawn."""
    family = FAMILIES.get(code) or SINGLE_FAMILIES.get(code)
    position = family.position if family is not None else 0
    return {f: level for f, level in declared_forms(code).items()
            if len(f.inputs) <= position or f.inputs[position] in DATA_TYPES}


def _scalar(operands, k):
    o = operands[k]
    return None if o.value is None or o.lifetime != Lifetime.CONSTANT_COPY else o.value.item()


def features(operation, operands) -> set[str]:
    """The value features of one operation (see the module docstring), found at the scalar
    positions its declaration gives (a window operation's form is implicit when it has no input at
    the implicit layout's position, or a BOOL there)."""
    code, n = Op(operation.type), len(operation.inputs)
    declaration = ops.load_all()[code]
    found = set()
    sig = declaration.match([operands[k].type for k in operation.inputs],
                            [operands[k].type for k in operation.outputs])
    for k in sorted(sig.omittable) if sig is not None else ():
        if k < n:
            found.add(f"input {k} {'omitted' if operands[operation.inputs[k]].lifetime == Lifetime.NO_VALUE else 'present'}")
    activation = declaration.fused_activation
    layout = dilation = multiplier = None
    if declaration.window_inputs:
        probe = declaration.window_inputs[0].layout
        explicit = n > probe and operands[operation.inputs[probe]].type != T.BOOL
        inputs = declaration.window_inputs[explicit]
        activation, layout, dilation, multiplier = inputs.activation, inputs.layout, inputs.dilation, inputs.multiplier
        found.add("explicit padding" if explicit else "implicit padding")
    value = lambda i: _scalar(operands, operation.inputs[i]) if i is not None and i < n else None
    for position, names in declaration.choices.items():
        if value(position) in names:
            found.add(names[value(position)])
    if value(activation) in range(4):
        found.add(f"activation {ACTIVATIONS[value(activation)]}")
    if declaration.window_inputs:
        found.add("NCHW" if value(layout) else "NHWC")
    dilated = max(value(dilation) or 1, value(dilation and dilation + 1) or 1) > 1
    if dilated:
        found.add("dilation > 1")
    if multiplier is not None and (value(multiplier) or 1) > 1:
        found.add("depth multiplier > 1")
        if dilated:
            found.add("depth multiplier > 1 with dilation > 1")
    return found


def expected_features(code: Op) -> set[str]:
    """Features the draws of ``code`` should show, beyond its forms: those its declaration's
    scalar inputs can choose."""
    declaration = ops.load_all()[code]
    expected = {name for names in declaration.choices.values() for name in names.values()}
    if declaration.fused_activation is not None or declaration.window_inputs:
        expected |= {f"activation {a}" for a in ACTIVATIONS}
    if declaration.window_inputs:
        expected |= {"explicit padding", "implicit padding", "NCHW", "NHWC"}
        if declaration.window_inputs[0].dilation is not None:
            expected.add("dilation > 1")
        if declaration.window_inputs[0].multiplier is not None:
            expected |= {"depth multiplier > 1", "depth multiplier > 1 with dilation > 1"}
    return expected


@dataclass
class Coverage:
    graphs: int = 0
    forms: dict = field(default_factory=lambda: collections.defaultdict(collections.Counter))
    features: dict = field(default_factory=lambda: collections.defaultdict(collections.Counter))

    def add(self, graph) -> None:
        self.graphs += 1
        for op in graph.operations:
            code = Op(op.type)
            form = form_of(op, graph.operands)
            if form is not None:
                self.forms[code][form] += 1
            self.features[code].update(features(op, graph.operands))

    def missing_forms(self, code: Op) -> list[Form]:
        return [f for f in drawable_forms(code) if f not in self.forms[code]]

    def missing_features(self, code: Op) -> list[str]:
        return sorted(expected_features(code) - set(self.features[code]))


def measure(seeds: int, start: int = 0, levels=LEVELS) -> Coverage:
    """The coverage of the random-graph cases ``start`` .. ``start + seeds - 1`` at each level."""
    coverage = Coverage()
    for level in levels:
        for seed in range(start, start + seeds):
            coverage.add(generate(seed, case_size(seed), level=level))
    return coverage


def measure_single(seeds: int, start: int = 0, levels=LEVELS) -> Coverage:
    """The coverage of the single-operation cases ``start`` .. ``start + seeds - 1`` at each level."""
    coverage = Coverage()
    for level in levels:
        for seed in range(start, start + seeds):
            coverage.add(single.generate_case(seed, level))
    return coverage


def report(coverage: Coverage, codes=None) -> str:
    lines = [f"{coverage.graphs} graphs"]
    total = drawn = 0
    for code in sorted(codes or FAMILIES):
        declared = drawable_forms(code)
        missing = coverage.missing_forms(code)
        total, drawn = total + len(declared), drawn + len(declared) - len(missing)
        lines.append(f"{code.name}: {len(declared) - len(missing)}/{len(declared)} forms, "
                     f"{sum(coverage.forms[code].values())} drawn")
        lines += [f"  never drawn (level {declared[f]}): {f}" for f in missing]
        if coverage.features[code]:
            lines.append("  features: " + ", ".join(f"{name} x{n}" for name, n in sorted(coverage.features[code].items())))
        lines += [f"  feature never drawn: {name}" for name in coverage.missing_features(code)]
        lines += [f"  not drawable (no graph tensor of its first type): {f}"
                  for f in declared_forms(code) if f not in declared]
    lines.append(f"total: {drawn}/{total} forms drawn")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m nnts.generators.coverage", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=2000, help="random-graph seeds per feature level (default 2000)")
    p.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--operation", action="append", help="report only this operation (repeatable)")
    p.add_argument("--single", action="store_true",
                   help="measure the single-operation cases (every operation they draw) instead of random graphs")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error("--seeds must be at least 1")
    codes = None
    if args.operation:
        try:
            codes = [Op[name.upper()] for name in args.operation]
        except KeyError as e:
            p.error(f"unknown operation {e.args[0]}")
    if args.single:
        print(report(measure_single(args.seeds, args.start), codes or single.operations()))
    else:
        print(report(measure(args.seeds, args.start), codes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
