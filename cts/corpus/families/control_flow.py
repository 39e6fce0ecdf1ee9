"""IF and WHILE with their subgraphs, and the random-operand models."""
from __future__ import annotations

import numpy as np

from .common import B8, F16, F32, I32, C, Graph, I, O, Spec, T, ci32, emit, family, i32, short


def sg_in(code, dims):
    return Spec("SUBGRAPH_INPUT", code, dims)


def sg_out(code, dims):
    return Spec("SUBGRAPH_OUTPUT", code, dims)


def subgraph_ref(k):
    return Spec("SUBGRAPH", "SUBGRAPH", [], [k])


def gen_control_flow():
    family("control_flow")
    # IF: cond ? x + y : x * y
    then_g, else_g = Graph(), Graph()
    for g, op in ((then_g, "ADD"), (else_g, "MUL")):
        a, b = g.add(sg_in(F32, [3])), g.add(sg_in(F32, [3]))
        g.op(op, [a, b, i32(0)], [sg_out(F32, [3])])
    x, y = np.array([1.0, -2.0, 3.5]), np.array([0.5, 4.0, -1.0])
    for cond in (True, False):
        g = Graph()
        g.op("IF", [I(T(B8), [cond]), subgraph_ref(0), subgraph_ref(1), I(T(F32), x), I(T(F32), y)],
             [O(T(F32), x + y if cond else x * y)])
        emit(f"if_float32_{'then' if cond else 'else'}", 30, g, referenced=[then_g, else_g])
    # WHILE: while x < limit: x = x * 2 + inc  (limit and inc are loop-invariant state/inputs)
    cond_g, body_g = Graph(), Graph()
    a, lim, inc = (cond_g.add(sg_in(F32, [1])) for _ in range(3))
    cond_g.op("LESS", [a, lim], [sg_out(B8, [1])])
    a, lim, inc = (body_g.add(sg_in(F32, [1])) for _ in range(3))
    tmp = body_g.temp(T(F32), [1])
    body_g.op("MUL", [a, C(T(F32), [2.0]), i32(0)], [tmp])
    body_g.op("ADD", [tmp, inc, i32(0)], [sg_out(F32, [1])])
    v = 1.0
    while v < 50.0:
        v = v * 2 + 0.5
    g = Graph()
    g.op("WHILE", [subgraph_ref(0), subgraph_ref(1), I(T(F32), [1.0]), C(T(F32), [50.0]), I(T(F32), [0.5])],
         [O(T(F32), [v])])
    emit("while_float32_double_until", 30, g, referenced=[cond_g, body_g])
    g = Graph()  # zero iterations
    g.op("WHILE", [subgraph_ref(0), subgraph_ref(1), I(T(F32), [60.0]), C(T(F32), [50.0]), I(T(F32), [0.5])],
         [O(T(F32), [60.0])])
    emit("while_float32_no_iteration", 30, g, referenced=[cond_g, body_g])
    # invalid: IF condition with more than one element
    g = Graph()
    g.op("IF", [I(T(B8), [True, False]), subgraph_ref(0), subgraph_ref(1), I(T(F32), x), I(T(F32), y)],
         [O(T(F32), x + y)])
    emit("if_float32_bad_condition", 30, g, referenced=[then_g, else_g], fail=True)


def gen_random():
    family("random")
    # RANDOM_MULTINOMIAL: class frequencies must match softmax(logits) within the tolerance
    for code in (F32, F16):
        logits = np.log(np.array([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]]))
        g = Graph()
        g.op("RANDOM_MULTINOMIAL", [I(T(code), logits), i32(1000), ci32([37, 42])],
             [O(T(I32), stored=np.zeros((2, 1000), np.int64))])
        emit(f"random_multinomial_{short(code).lower()}", 29, g, multinomial=0.06)
