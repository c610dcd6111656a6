"""What the audits read of one run (``rnnprof.analyzers.placement.AuditInput``), for the commands that audit:
audit, placement-audit and report."""

from __future__ import annotations

import argparse

from rnnprof.commands import step_flags
from rnnprof.analyzers.placement import AuditInput
from rnnprof.inputs.kernels import kernels_for
from rnnprof.inputs.read import read_inputs

NOTHING_TO_AUDIT = "the input holds neither a graph nor trace events"


def audit_input(inputs, events=None):
    """The ``AuditInput`` of inputs already read (``rnnprof.inputs.read.Inputs``): their graph, trace
    events (``events``: those of the selected steps; by default all of them) and manifest, with TensorFlow's kernel
    list when the graph requests devices; None when the inputs hold neither a graph nor trace events."""

    events = inputs.events if events is None else events
    if inputs.graph is None and events is None:
        return None
    return AuditInput(inputs.graph, events, inputs.manifest, kernels_for(inputs.graph))


def read_audit_input(paths: list[str], args: argparse.Namespace | None = None):
    """``audit_input`` of one run read from ``paths`` (its run directory, trace and graph files), its events
    restricted to the steps ``args``' step flags select when ``args`` is given."""

    inputs = read_inputs(paths, one_run=True)
    return audit_input(inputs, step_flags.select(inputs.events, args) if args is not None else None)
