"""Verbose logs per component, as NNAPI's ``debug.nn.vlog`` property switches them on.

``configure("model,compilation,execution,cpuexe,manager")`` (``all`` or ``1`` for all; separated
by spaces, colons or commas; nnts's entry points pass ``NNTS_VLOG``) sets the components' loggers
to INFO. The loggers are named after the
runtime's tags under the project's root logger ``nnts`` (``nnts.ModelBuilder``,
``nnts.CompilationBuilder``, ``nnts.ExecutionPlan``, ``nnts.ExecutionBuilder``,
``nnts.CpuExecutor``, ``nnts.Manager``), so the usual ``logging`` configuration filters and
routes them; when nothing is configured, they go to stderr. Call sites test the flag of their
component (``if vlog.on["compilation"]:``) before formatting anything.
"""
from __future__ import annotations

import logging
import re

COMPONENTS = {"model": ("ModelBuilder",), "compilation": ("CompilationBuilder", "ExecutionPlan"),
              "execution": ("ExecutionBuilder", "ExecutionPlan"), "cpuexe": ("CpuExecutor",),
              "manager": ("Manager",)}
on = {component: False for component in COMPONENTS}


def parse(spec: str) -> set[str]:
    """The components a ``debug.nn.vlog``-style value names; ValueError for an unknown one."""
    words = {w for w in re.split(r"[\s,:]+", spec.strip().lower()) if w}
    if words & {"1", "all"}:
        return set(COMPONENTS)
    unknown = words - set(COMPONENTS)
    if unknown:
        raise ValueError(f"unknown NNTS_VLOG component(s) {', '.join(sorted(unknown))} "
                         f"(known: {', '.join(COMPONENTS)}, all, 1)")
    return words


def configure(spec: str) -> set[str]:
    """Switch on the components ``spec`` names (and off the others); returns them."""
    chosen = parse(spec)
    tags = {tag for c in chosen for tag in COMPONENTS[c]}
    for component, component_tags in COMPONENTS.items():
        on[component] = component in chosen
        for tag in component_tags:
            logging.getLogger(f"nnts.{tag}").setLevel(logging.INFO if tag in tags else logging.NOTSET)
    root = logging.getLogger("nnts")
    if chosen and not root.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname).1s %(name)s: %(message)s"))
        root.addHandler(handler)
    return chosen


def info(tag: str, message: str, *args) -> None:
    logging.getLogger(f"nnts.{tag}").info(message, *args)

