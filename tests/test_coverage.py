"""The random-graph generator draws every form the registry declares (nnts/generators/coverage.py): each
operation's forms (padding kinds, optional layout and dilation tails, optional axes and flags,
every operand type a form allows, every feature level) and value features (NCHW, dilation above
1 with a depth multiplier above 1, each fused activation).

Minimum: ``SEEDS_PER_OPERATION`` graphs of 3 operations of one operation each (360 draws) show
every form of it; over the default sample of ``python -m nnts.generators.coverage`` (2000 mixed graphs
per feature level) every form appears as well (measured: 2000 seeds per level)."""
from __future__ import annotations

import pytest

from nnapi_ref import hal
from nnapi_ref.types import Lifetime, OperandCode as T, OperationCode as Op
from nnts.generators import coverage
from nnts.generators.families import FAMILIES
from nnts.generators.random_graphs import generate

SEEDS_PER_OPERATION = 120


@pytest.mark.parametrize("code", sorted(FAMILIES), ids=lambda c: c.name)
def test_every_form_of_each_operation_is_drawn(code):
    drawn = coverage.Coverage()
    for seed in range(SEEDS_PER_OPERATION):
        drawn.add(generate(seed, 3, operations=[code]))
    assert not drawn.missing_forms(code), "\n".join(map(str, drawn.missing_forms(code)))
    assert not drawn.missing_features(code)


def test_declared_forms_follow_the_optional_inputs():
    """CONV_2D: two paddings x (no tail, layout, layout and dilation) x six type triples from
    level 29 (F32, Q8 at level 27 without a tail); the layout alone is not a level-27 form."""
    forms = coverage.declared_forms(Op.CONV_2D)
    assert len(forms) == 36
    assert coverage.declared_forms(Op.CONV_2D, 27) == {f: 27 for f, level in forms.items() if level == 27}
    assert len(coverage.declared_forms(Op.CONV_2D, 27)) == 4
    explicit_dilated = [f for f in forms if len(f.inputs) == 13]
    assert len(explicit_dilated) == 6 and all(f.inputs[10] == T.BOOL for f in explicit_dilated)
    assert "(FLOAT32, FLOAT32, FLOAT32, int32, int32, int32, int32, int32, int32, int32) -> (FLOAT32)" in map(str, forms)


def _operand(type_, value=None):
    if value is None:
        return hal.Operand(type_, (1, 4, 4, 2))
    return hal.Operand(type_, (), lifetime=Lifetime.CONSTANT_COPY, value=hal_value(type_, value))


def hal_value(type_, value):
    import numpy as np
    return np.asarray(value, np.bool_ if type_ == T.BOOL else np.int32)


def test_features_read_the_scalars():
    """DEPTHWISE_CONV_2D with implicit padding, NCHW, dilation 2 and depth multiplier 2 (11
    inputs, as many as the explicit form without its tail: told apart by the BOOL at 8)."""
    scalars = [(T.INT32, 1), (T.INT32, 1), (T.INT32, 1), (T.INT32, 2), (T.INT32, 3), (T.BOOL, True),
               (T.INT32, 2), (T.INT32, 1)]
    operands = [_operand(T.TENSOR_FLOAT32), hal.Operand(T.TENSOR_FLOAT32, (1, 2, 2, 4)),
                hal.Operand(T.TENSOR_FLOAT32, (4,))] + [_operand(t, v) for t, v in scalars] \
        + [_operand(T.TENSOR_FLOAT32)]
    op = hal.Operation(Op.DEPTHWISE_CONV_2D, tuple(range(11)), (11,))
    assert coverage.features(op, operands) == {"implicit padding", "NCHW", "activation RELU6", "dilation > 1",
                                               "depth multiplier > 1", "depth multiplier > 1 with dilation > 1"}
    scalars = [(T.INT32, 0)] * 4 + [(T.INT32, 1)] * 2 + [(T.INT32, 1), (T.INT32, 0)]
    operands = operands[:3] + [_operand(t, v) for t, v in scalars] + [_operand(T.TENSOR_FLOAT32)]
    assert coverage.features(op, operands) == {"explicit padding", "NHWC", "activation NONE"}


def test_coverage_command(capsys):
    assert coverage.main(["--seeds", "3", "--operation", "conv_2d"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("15 graphs\nCONV_2D: ") and "/36 forms" in out and "never drawn" in out
    with pytest.raises(SystemExit):
        coverage.main(["--seeds", "3", "--operation", "NOPE"])
    assert "unknown operation NOPE" in capsys.readouterr().err
