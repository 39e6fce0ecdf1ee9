"""Family declarations (:mod:`nnts.generators.families`) for the control-flow operations:

* IF with generated branches: the then-branch is a random graph of 1-3 operations of the
  random-graph generator (float inputs; the convolutions, with their looser tier, left out), the
  else-branch the same graph with each output negated (NEG, LOGICAL_NOT for booleans), so that a
  driver taking the wrong branch, or passing operands to it wrongly, shows. The condition is a
  random TENSOR_BOOL8 [1].
* WHILE with a terminating condition: a counter from 0 below a limit of 0-4, the body stepping a
  float32 state through x + c and TANH or LOGISTIC (in range however often it runs).

Declared ``single_only``: the single-operation tests draw it by name; the random-graph generator
(every existing seed) does not. Not shrunk by dimension cuts (a cut reruns operations one at a
time, without their subgraphs).
"""
from __future__ import annotations

import numpy as np

from nnapi_ref import hal
from nnapi_ref.types import DTYPES, Lifetime, OperandCode as T, OperationCode as Op
from nnts.generators.families import FAMILIES, SINGLE_FAMILIES, declare
from nnts.generators.graphs import BOOL8, F16, F32, I32, Builder, Reject, Tensor, generate_from

CONVOLUTIONS = {Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.GROUPED_CONV_2D, Op.TRANSPOSE_CONV_2D}
NEGATION = {F32: Op.NEG, F16: Op.NEG, I32: Op.NEG, BOOL8: Op.LOGICAL_NOT}


def _condition(b: Builder, code: Op) -> Tensor:
    return b.fresh(BOOL8, (1,))


def _branches(b: Builder) -> tuple[hal.Subgraph, hal.Subgraph, list[np.ndarray], list[np.ndarray], list]:
    """The then- and else-subgraphs, their inputs' values, the then-branch's output values, and
    its graph (for the operands' types)."""
    body = generate_from(FAMILIES, SINGLE_FAMILIES, int(b.rng.integers(1 << 31)), int(b.rng.integers(1, 4)),
                         types=[F32, F16], level=b.level,
                         operations=sorted(c for c in FAMILIES if c not in CONVOLUTIONS), relaxed=False)
    if not body.operations or any(body.operands[k].type not in NEGATION for k in body.outputs):
        raise Reject("IF: the branch drawn has no operation, or an output NEG cannot negate")
    then = body.to_test("then").model.main
    operands = [hal.Operand(o.type, o.dimensions, o.scale, o.zero_point,
                            Lifetime.TEMPORARY_VARIABLE if o.lifetime == Lifetime.SUBGRAPH_OUTPUT else o.lifetime,
                            o.value, o.channel_quant) for o in then.operands]
    operations, outputs = list(then.operations), []
    for k in then.output_indexes:
        o = then.operands[k]
        operands.append(hal.Operand(o.type, body.values[k].shape, o.scale, o.zero_point, Lifetime.SUBGRAPH_OUTPUT))
        outputs.append(len(operands) - 1)
        operations.append(hal.Operation(NEGATION[o.type], (k,), (outputs[-1],)))
    otherwise = hal.Subgraph(operands, operations, then.input_indexes, tuple(outputs))
    return then, otherwise, [body.values[k] for k in body.inputs], [body.values[k] for k in body.outputs], body


def _operand_like(b: Builder, o: hal.Operand, value: np.ndarray, as_input: bool) -> int:
    """A main-graph operand of ``o``'s type and quantization holding ``value``: a model input or
    a constant (``as_input`` False), or a temporary (``value`` None: an output)."""
    if as_input and b.chance(0.3):
        return b.constant(o.type, value, o.scale, o.zero_point)
    k = b._operand(o.type, value.shape, o.scale, o.zero_point)
    if as_input:
        b.inputs.append(k)
    b.values[k] = value
    return k


@declare([Op.IF], ranks=(1,), single_only=True, start=_condition, domain=lambda x: x.shape == (1,))
def if_(b: Builder, x: Tensor, code: Op) -> None:
    if b.level < 30:
        raise Reject("IF: feature level 30")
    then, otherwise, inputs, outputs, body = _branches(b)
    b.referenced += [then, otherwise]
    first = len(b.referenced) - 2
    branches = [b._operand(T.SUBGRAPH, ()) for _ in range(2)]
    for k, index in zip(branches, (first, first + 1)):
        b.operands[k] = hal.Operand(T.SUBGRAPH, (), 0.0, 0, Lifetime.SUBGRAPH, index)
    ins = [_operand_like(b, body.operands[k], v, True) for k, v in zip(body.inputs, inputs)]
    taken = bool(x.value.reshape(-1)[0])
    results = [v if taken else (~v if v.dtype == np.bool_ else (-v).astype(DTYPES[body.operands[k].type]))
               for k, v in zip(body.outputs, outputs)]
    outs = [_operand_like(b, body.operands[k], v, False) for k, v in zip(body.outputs, results)]
    b.operations.append(hal.Operation(code, tuple([x.index] + branches + ins), tuple(outs)))
    b.tensors += [Tensor(k, b.operands[k].type, b.values[k], b.operands[k].scale, b.operands[k].zero_point)
                  for k in outs]


# -- WHILE ------------------------------------------------------------------------------------------

BOUNDED = (Op.TANH, Op.LOGISTIC)  # a body step whose result stays in range however many times it runs
MAX_ITERATIONS = 4


def _state(b: Builder, code: Op) -> Tensor:
    return b.fresh(F32, b.start_shape(int(b.rng.integers(1, 5))), low=-1.0, high=1.0)


def _operand(type_: T, dims: tuple, lifetime: Lifetime, value=None) -> hal.Operand:
    return hal.Operand(type_, tuple(dims), 0.0, 0, lifetime, value)


@declare([Op.WHILE], single_only=True, start=_state, position=2)
def while_(b: Builder, x: Tensor, code: Op) -> None:
    """Loop variables: the state x and a counter from 0; the condition: counter < a limit of 0-4
    (so the body runs 0-4 times); the body: x + c (a random constant) through TANH or LOGISTIC, and
    counter + 1. Outputs: the final state, and sometimes the final counter."""
    if b.level < 30:
        raise Reject("WHILE: feature level 30")
    iterations = int(b.rng.integers(0, MAX_ITERATIONS + 1))
    step = b.pick(list(BOUNDED))
    c = b.rng.uniform(-1.0, 1.0, x.shape).astype(np.float32)
    IN, OUT, TMP, CONST = Lifetime.SUBGRAPH_INPUT, Lifetime.SUBGRAPH_OUTPUT, Lifetime.TEMPORARY_VARIABLE, \
        Lifetime.CONSTANT_COPY
    one = np.ones(1, np.int32)
    body = hal.Subgraph(
        [_operand(F32, x.shape, IN), _operand(I32, (1,), IN), _operand(F32, x.shape, CONST, c),
         _operand(T.INT32, (), CONST, np.array(0, np.int32)), _operand(F32, x.shape, TMP), _operand(F32, x.shape, OUT),
         _operand(I32, (1,), CONST, one), _operand(I32, (1,), OUT)],
        [hal.Operation(Op.ADD, (0, 2, 3), (4,)), hal.Operation(step, (4,), (5,)), hal.Operation(Op.ADD, (1, 6, 3), (7,))],
        (0, 1), (5, 7))
    condition = hal.Subgraph(
        [_operand(F32, x.shape, IN), _operand(I32, (1,), IN), _operand(I32, (1,), CONST, np.array([iterations], np.int32)),
         _operand(BOOL8, (1,), OUT)],
        [hal.Operation(Op.LESS, (1, 2), (3,))], (0, 1), (3,))
    b.referenced += [condition, body]
    first = len(b.referenced) - 2
    subgraphs = []
    for index in (first, first + 1):
        b.operands.append(hal.Operand(T.SUBGRAPH, (), 0.0, 0, Lifetime.SUBGRAPH, index))
        subgraphs.append(len(b.operands) - 1)
    counter = _operand_like(b, _operand(I32, (1,), IN), np.zeros(1, np.int32), True)
    state = x.value.astype(np.float64)
    for _ in range(iterations):
        state = np.tanh(state + c) if step == Op.TANH else 1.0 / (1.0 + np.exp(-(state + c)))
    finals = [state.astype(np.float32), np.array([iterations], np.int32)][:int(b.rng.integers(1, 3))]
    outs = [_operand_like(b, _operand(t, v.shape, OUT), v, False) for t, v in zip((F32, I32), finals)]
    b.operations.append(hal.Operation(code, tuple(subgraphs + [x.index, counter]), tuple(outs)))
    b.tensors += [Tensor(k, b.operands[k].type, b.values[k]) for k in outs]
