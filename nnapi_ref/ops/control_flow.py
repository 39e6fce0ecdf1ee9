"""Control flow: IF and WHILE (feature level 4), which run referenced subgraphs.

IF runs its then- or else-model on its remaining inputs. WHILE keeps m input-output and k
state-only loop variables, plus n input-only values: while cond(vars, inputs) holds,
vars = body(vars, inputs); its outputs are the first m variables. A loop running longer than
the execution's loop timeout fails with MISSED_DEADLINE_TRANSIENT.
"""
from __future__ import annotations

import time

from nnapi_ref.errors import NnapiError
from nnapi_ref.hal import Model, Operation, Subgraph
from nnapi_ref.ops.base import Call, OperationCode, OperationRegistration, Signature, T, check, register
from nnapi_ref.types import Lifetime, ResultCode, type_name


def _referenced(model: Model, sg: Subgraph, operand_index: int, what: str) -> Subgraph:
    operand = sg.operands[operand_index]
    check(operand.type == T.SUBGRAPH and operand.lifetime == Lifetime.SUBGRAPH,
          f"{what} must be a SUBGRAPH operand")
    return model.referenced[operand.value]


def _check_operands(outer: Subgraph, outer_indexes, inner: Subgraph, inner_indexes, what: str) -> None:
    """A referenced model's inputs/outputs must match the operation's operands in type,
    quantization and rank (dimensions may be left unspecified on either side)."""
    check(len(outer_indexes) == len(inner_indexes),
          f"{what}: {len(inner_indexes)} operands in the referenced model, {len(outer_indexes)} expected")
    for n, (a, b) in enumerate(zip(outer_indexes, inner_indexes)):
        # The referenced model may not be validated yet: its indexes are checked here too.
        check(0 <= a < len(outer.operands) and 0 <= b < len(inner.operands),
              f"{what} {n}: operand index out of range")
        x, y = outer.operands[a], inner.operands[b]
        check(x.type == y.type and x.scale == y.scale and x.zero_point == y.zero_point,
              f"{what} {n}: type {type_name(y.type)} (scale {y.scale}, zero point {y.zero_point}) does not "
              f"match {type_name(x.type)} (scale {x.scale}, zero point {x.zero_point})")
        if x.dimensions and y.dimensions:
            check(len(x.dimensions) == len(y.dimensions), f"{what} {n}: rank {len(y.dimensions)}, expected "
                                                          f"{len(x.dimensions)}")
            check(all(not p or not q or p == q for p, q in zip(x.dimensions, y.dimensions)),
                  f"{what} {n}: dimensions {list(y.dimensions)} conflict with {list(x.dimensions)}")


def _is_condition(sg: Subgraph, k: int) -> bool:
    if not 0 <= k < len(sg.operands):  # a referenced model not validated yet
        return False
    o = sg.operands[k]
    return o.type == T.TENSOR_BOOL8 and (not o.dimensions or tuple(o.dimensions) in ((1,), (0,)))


class _ControlFlow(OperationRegistration):
    signatures = ()

    def infer(self, call: Call):
        return [None] * len(call.outs)  # only running the referenced model tells


@register
class If(_ControlFlow):
    code = OperationCode.IF
    zero_sized_inputs = None
    parameters = {0: "condition", 1: "then model", 2: "else model"}
    accuracy = "relaxed"
    signatures = [Signature(30, [T.TENSOR_BOOL8, T.SUBGRAPH, T.SUBGRAPH], [T.TENSOR_FLOAT32])]

    def match(self, in_types, out_types):
        if len(in_types) >= 3 and in_types[0] == T.TENSOR_BOOL8 and in_types[1] == in_types[2] == T.SUBGRAPH \
                and T.SUBGRAPH not in in_types[3:] and out_types:
            return self.signatures[0]
        return None

    def check_references(self, model: Model, sg: Subgraph, operation: Operation) -> int:
        check(_is_condition(sg, operation.inputs[0]), "IF condition must be a TENSOR_BOOL8 of shape [1]")
        for n, which in ((1, "then"), (2, "else")):
            branch = _referenced(model, sg, operation.inputs[n], f"IF {which} model")
            _check_operands(sg, operation.inputs[3:], branch, branch.input_indexes, f"IF {which} model input")
            _check_operands(sg, operation.outputs, branch, branch.output_indexes, f"IF {which} model output")
        return 30

    def execute(self, call: Call):
        condition = call.ins[0].value
        check(condition.size == 1, f"IF condition has {condition.size} elements, must have 1")
        branch = call.ins[1].scalar() if bool(condition.reshape(-1)[0]) else call.ins[2].scalar()
        return call.runner.run([a.value for a in call.ins[3:]], branch + 1)


@register
class While(_ControlFlow):
    code = OperationCode.WHILE
    zero_sized_inputs = None
    parameters = {0: "condition model", 1: "body model"}
    accuracy = "relaxed"
    signatures = [Signature(30, [T.SUBGRAPH, T.SUBGRAPH, T.TENSOR_FLOAT32], [T.TENSOR_FLOAT32])]

    def match(self, in_types, out_types):
        if len(in_types) >= 3 and in_types[0] == in_types[1] == T.SUBGRAPH and T.SUBGRAPH not in in_types[2:] \
                and out_types and len(out_types) <= len(in_types) - 2:
            return self.signatures[0]
        return None

    def check_references(self, model: Model, sg: Subgraph, operation: Operation) -> int:
        cond = _referenced(model, sg, operation.inputs[0], "WHILE condition model")
        body = _referenced(model, sg, operation.inputs[1], "WHILE body model")
        loop_inputs = operation.inputs[2:]
        _check_operands(sg, loop_inputs, cond, cond.input_indexes, "WHILE condition model input")
        check(len(cond.output_indexes) == 1 and _is_condition(cond, cond.output_indexes[0]),
              "WHILE condition model must have one TENSOR_BOOL8 output of shape [1]")
        _check_operands(sg, loop_inputs, body, body.input_indexes, "WHILE body model input")
        m = len(operation.outputs)
        check(m <= len(body.output_indexes) <= len(loop_inputs),
              f"WHILE body model has {len(body.output_indexes)} outputs; needs between {m} and {len(loop_inputs)}")
        _check_operands(sg, loop_inputs[:len(body.output_indexes)], body, body.output_indexes,
                        "WHILE body model output")
        _check_operands(sg, operation.outputs, body, body.output_indexes[:m], "WHILE output")
        return 30

    def execute(self, call: Call):
        runner = call.runner
        cond_plan, body_plan = call.ins[0].scalar() + 1, call.ins[1].scalar() + 1
        values = [a.value for a in call.ins[2:]]
        state_count = len(runner.plans[body_plan].subgraph.output_indexes)
        start = time.monotonic_ns()
        while True:
            condition = runner.run(values, cond_plan)[0]
            if not bool(condition.reshape(-1)[0]):
                break
            if time.monotonic_ns() - start > runner.loop_timeout_ns:
                raise NnapiError(ResultCode.MISSED_DEADLINE_TRANSIENT,
                                 f"WHILE loop ran longer than the loop timeout of {runner.loop_timeout_ns / 1e9:g} s")
            values = runner.run(values, body_plan) + values[state_count:]
        return values[:len(call.outs)]
