"""The ``--json`` documents' shapes, one type per command, and their JSON Schemas (docs/json.md).

Each document type names the document's top-level keys as its code builds them; a part that is a result
dataclass as it is (``dataclasses.asdict``) is typed by that dataclass, so its schema follows the result type.
A key of a document's type without a default is always there; one defaulting to ``UNSET`` is there only for
some inputs. ``input_notes``: the notes the command said on stderr about its input (a partial capture, files
skipped, what the trace lacks). ``docs/schemas/generate.py`` writes ``docs/schemas/<command>.schema.json`` from these types.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from rnnprof.analyzers.audit.finding import Subject
from rnnprof.analyzers.critical_path import StepPath
from rnnprof.analyzers.groups import GroupStraggler
from rnnprof.analyzers.memory import DeviceMemory, Imbalance, PipelineMemory
from rnnprof.analyzers.hang import Culprit, Waiter
from rnnprof.analyzers.opcount import GraphOpCounts, KernelCounts
from rnnprof.analyzers.peaks import Peaks
from rnnprof.analyzers.replay import ChainLink, RankWaits
from rnnprof.analyzers.roofline import StepRow
from rnnprof.events import ProcessGroup
from rnnprof.reports.layout import SCHEMA_VERSION

Version = Literal[SCHEMA_VERSION]  # type: ignore[valid-type]
Object = dict[str, Any]


class _Part(msgspec.Struct, forbid_unknown_fields=True):
    pass


class KernelPair(_Part, kw_only=True):
    """Kernels of one op type, or of one step, by where they ran."""

    cpu_kernels: int
    gpu_kernels: int


class OpCounts(_Part, kw_only=True):
    """One input's counts (``reports.opcount.to_document``): ``kernels`` is a ``KernelCounts`` whose pairs are
    objects (``KernelPair``), with per-step averages (``per_step``) and, for a gRPC cluster, ``by_task``."""

    source: str
    source_format: str
    user_graph: GraphOpCounts
    runtime_graph: GraphOpCounts
    kernels: KernelCounts
    definitions: dict[str, str]
    launches: Object | UnsetType = UNSET
    copies: Object | UnsetType = UNSET


class CountOpsDocument(OpCounts, kw_only=True):
    """``rnnprof count-ops --json`` of one input."""

    schema_version: Version
    left_out: dict[str, int]
    input_notes: list[str]


class RatioRow(_Part, kw_only=True):
    metric: str
    left: float | None
    right: float | None
    ratio: float | None


class CountOpsComparisonDocument(_Part, kw_only=True):
    """``rnnprof count-ops --json`` of two inputs (``--compare``): each side's counts and their ratios."""

    schema_version: Version
    left: OpCounts
    right: OpCounts
    ratios: list[RatioRow]
    left_out: dict[str, int]
    input_notes: list[str]


class JobStepTimesPart(_Part, kw_only=True):
    """Each step's time as every command gives it (``steps.JobStepTimes.as_dict``)."""

    basis: str  # a key of steps.STEP_TIME_DEFINITIONS
    definition: str
    step_us: dict[str, float]  # step number -> µs


class GroupRankTraffic(_Part, kw_only=True):
    """One rank's calls of a (group, collective, phase): ``GroupTraffic.as_dict``."""

    calls: int
    bytes: int
    sized_calls: int
    time_us: float
    exposed_us: float
    hidden_us: float


class GroupTrafficRow(_Part, kw_only=True):
    """One (process group, collective, phase) over its ranks (``analyzers.groups.GroupRow.as_dict``)."""

    group: str
    collective: str
    phase: str | None
    members: int | None
    ranks: int
    calls: int
    calls_per_rank: float
    bytes: int
    sized_calls: int
    time_us: float
    exposed_us: float
    hidden_us: float
    algbw_gbps: float | None
    busbw_gbps: float | None
    per_rank: dict[str, GroupRankTraffic]


class ProcessGroups(_Part, kw_only=True):
    """``comm --json``'s ``process_groups`` (``analyzers.groups.GroupsReport.as_dict``): the groups the traces
    name, the traffic per group, collective and phase, each group's straggler, and how many collectives had their
    group, message or phase inferred (by what) or not known."""

    groups: list[ProcessGroup]
    collectives: int
    traffic: list[GroupTrafficRow]
    stragglers: list[GroupStraggler]
    inferred: dict[str, int]
    unknown: dict[str, int]


class CommDocument(_Part, kw_only=True):
    """``rnnprof comm --json`` (``reports.comm.json_document``): ``CommReport.as_dict`` with its definitions, a
    note on ranks without a GPU, and the per-task figures of a gRPC cluster."""

    schema_version: Version
    source_format: str
    sources: list[str]
    extra_comm_patterns: list[str]
    steps: list[int]
    step_time: JobStepTimesPart
    step_selection: str | None
    outside_steps: Object
    kernel_wait_us: float
    devices: list[Object]
    stragglers: list[Object]
    communication_events: list[str]
    communication_ops: list[Object]
    copies: Object | UnsetType = UNSET
    alignment: Object | UnsetType = UNSET
    process_groups: ProcessGroups | UnsetType = UNSET
    collectives: Object | UnsetType = UNSET
    notes: list[str] | UnsetType = UNSET
    definitions: str
    left_out: dict[str, int]
    tasks: list[Object] | UnsetType = UNSET
    straggler_workers: list[Object] | UnsetType = UNSET
    input_notes: list[str]


class CriticalPathDocument(_Part, kw_only=True):
    """``rnnprof critical-path --json`` (``reports.critical_path.to_document``): each step's path (a
    ``StepPath``, its links without their event rows)."""

    schema_version: Version
    steps: list[StepPath]
    lacks: list[str]
    workers: list[str]
    overlay: str | None
    step_time: JobStepTimesPart | None  # None: a trace without steps
    notes: list[str]  # the steps whose window is apart from their step time, and why
    definitions: str
    what_if_is_estimate: bool
    left_out: dict[str, int]
    input_notes: list[str]


class WhatIfChange(_Part, kw_only=True):
    kind: str  # analyzers.replay.CHANGE_KINDS
    subject: str
    factor: float
    delay_ms: float  # a delay's host time (kind "delay"), else 0
    before: str  # a delay's place: the regex of the operator it comes before ("": the step's start)
    description: str


class WhatIfStep(_Part, kw_only=True):
    """A ``StepReplay`` with its change and its unchanged replay's error."""

    step: int
    measured_us: float
    replayed_us: float
    predicted_us: float
    change_us: float  # predicted_us - measured_us
    replay_error_pct: float  # (replayed_us - measured_us) / measured_us, in %
    chain: list[ChainLink]
    chain_links: int
    chain_by_device: dict[str, float]
    waits: list[RankWaits]
    reasons: list[str]
    step_us: float | None  # the step's time as every command gives it; None: not known


class WhatIfMedian(_Part, kw_only=True):
    measured_us: float
    replayed_us: float
    predicted_us: float


class WhatIfDocument(_Part, kw_only=True):
    """``rnnprof whatif --json`` (``reports.whatif.to_document``)."""

    schema_version: Version
    changes: list[WhatIfChange]
    changed_nodes: dict[str, int]
    steps: list[WhatIfStep]
    median: WhatIfMedian
    step_time: JobStepTimesPart | None
    notes: list[str]
    lacks: list[str]
    definitions: str
    left_out: dict[str, int]
    input_notes: list[str]


class RooflineRank(_Part, kw_only=True):
    """One rank's roofline (``RooflineReport.as_dict`` with its worker)."""

    worker: str
    peaks: Peaks | None
    has_shapes: bool
    step_selection: str
    counts: dict[str, float | str]  # figures, and what the time is (``time_basis``)
    families: dict[str, Object]
    ops: list[Object]
    steps: list[StepRow]
    collectives: list[Object]


class RooflineDocument(_Part, kw_only=True):
    """``rnnprof roofline --json`` (``reports.roofline.to_document``); when the input has nothing to model,
    ``available`` is false and ``reason`` says why."""

    schema_version: Version
    available: bool
    reason: str | UnsetType = UNSET
    ranks: list[RooflineRank] | UnsetType = UNSET
    collectives_per_group: list[Object] | UnsetType = UNSET
    left_out: dict[str, int] | UnsetType = UNSET
    input_notes: list[str]


class PlacementFindingRow(_Part, kw_only=True):
    """A placement finding (``reports.placement.finding_document``)."""

    rule: str
    severity: Literal["info", "warning", "error"]
    title: str
    devices: list[str]
    ops: list[str]
    evidence: Object
    cost_us_per_step: float | None
    cost_basis: str
    fix: str


class RuleReason(_Part, kw_only=True):
    rule: str
    reason: str


class PlacementAuditDocument(_Part, kw_only=True):
    """``rnnprof placement-audit --json`` (``reports.placement.to_document``); ``framework`` and
    ``rules_not_applicable`` for a PyTorch input."""

    schema_version: Version
    sources: list[str]
    fail_on: str
    counts: dict[str, int]
    findings: list[PlacementFindingRow]
    rules_checked: list[str]
    rules_not_checked: list[RuleReason]
    framework: str | UnsetType = UNSET
    rules_not_applicable: list[RuleReason] | UnsetType = UNSET
    left_out: dict[str, int]
    input_notes: list[str]


class AuditFindingRow(_Part, kw_only=True):
    """An audit finding (``Finding.as_dict``): its saving in ms per step and % of the median step."""

    rule: str
    severity: Literal["info", "warning", "error"]
    title: str
    saving_ms: float | None
    saving_pct: float | None
    saving_basis: str
    confidence: float
    evidence: Object
    subject: Subject


class Noise(_Part, kw_only=True):
    """The run's step time and its jitter (``StepNoise.as_dict``)."""

    step_ms_median: float
    step_ms_mad: float
    steps: int


class TopFixesRow(_Part, kw_only=True):
    """The top findings' fixes replayed together (``TopFixes.as_dict``): ``findings`` are their places in the
    document's findings (from 0); ``whatif --fix F ...`` with ``fixes`` (and ``--steps`` with ``steps``, the
    steps replayed where the audit replayed some of the run's) predicts the same step."""

    findings: list[int]
    labels: list[str]
    fixes: list[str]
    steps: str | None
    saving_ms: float
    predicted_step_ms: float


class AuditDocument(_Part, kw_only=True):
    """``rnnprof audit --json`` (``AuditResult.as_dict``); ``top_fixes`` is null where no fix could be replayed."""

    schema_version: Version
    findings: list[AuditFindingRow]
    noise: Noise
    left_out: dict[str, int]
    notes: list[str]
    top_fixes: TopFixesRow | None
    input_notes: list[str]


class HangDocument(_Part, kw_only=True):
    """``rnnprof hang --json`` (``reports.hang.hang_document``)."""

    schema_version: Version
    kind: str
    summary: str
    culprits: list[Culprit]
    waiters: list[Waiter]
    ranks: list[int]
    notes: list[str]
    input_notes: list[str]


class DiffSide(_Part, kw_only=True):
    source: str
    kind: str


class DiffDocument(_Part, kw_only=True):
    """``rnnprof diff --json`` (``reports.diff.to_document``): each section says whether it is ``available``
    (else its ``reason``); each list holds the first ``top`` rows and ``<list>_total`` says how many there are."""

    schema_version: Version
    a: DiffSide
    b: DiffSide
    identical: bool
    top: int
    step_time: Object | None
    time: Object
    ops: Object
    graphs: Object
    copies: Object
    rates: Object
    config: Object
    definitions: dict[str, str]
    left_out: dict[str, dict[str, int]]
    input_notes: list[str]


class ExplainDocument(_Part, kw_only=True):
    """``rnnprof explain --json`` (``reports.explain.to_document``: ``ExplainReport.as_dict`` with the loaders'
    notes and what they left out)."""

    schema_version: Version
    format: Literal["rnnprof-explain"]
    scaling: str
    scaling_source: str
    ideal: str
    parts: dict[str, str]
    definitions: dict[str, str]
    rows: list[Object]
    notes: list[str]
    left_out: dict[str, int]


class ScaleDocument(_Part, kw_only=True):
    """``rnnprof scale --json`` (``reports.scale.to_document``; what ``--out`` saves): a row per configuration,
    whose throughput keys are named by ``unit``; ``trainers`` with ``--trainer``, ``explain`` with ``--explain``."""

    schema_version: Version
    config: Object
    device_kind: str
    unit: str
    rows: list[Object]
    definitions: dict[str, str]
    notes: list[str]
    trainers: Object | UnsetType = UNSET
    explain: Object | UnsetType = UNSET


class MemoryDocument(_Part, kw_only=True):
    """``rnnprof memory --json``: each device's memory (``analyzers.memory.DeviceMemory``; a timeline point's
    ``bytes`` has one figure per entry of ``categories``) and the devices above the others' median."""

    schema_version: Version
    source: str
    steps: str
    unusable: int
    categories: list[str]
    devices: list[DeviceMemory]
    imbalances: list[Imbalance]
    pipeline: PipelineMemory | None
    definitions: dict[str, str]
    left_out: dict[str, int]
    input_notes: list[str]


class PipelineScheduleDoc(_Part, kw_only=True):
    """``pipeline --json``'s ``schedule`` (``analyzers.pipeline.PipelineSchedule.as_dict``): its kind (None: not
    told), ranks (p), micro-batches (m), stages per rank (v), where they came from, and the theory's bubble."""

    kind: str | None
    ranks: int
    micro_batches: int
    stages_per_rank: int
    stages: int
    source: str
    theory_bubble_pct: float | None


class PipelineFigures(_Part, kw_only=True):
    """A rank's window, busy time, bubble and its five parts, and its forward and backward work, in µs
    (``analyzers.pipeline.StageStep``), of one step or, summed, of every step."""

    window_us: float
    busy_us: float
    bubble_us: float
    warm_up_us: float
    cool_down_us: float
    neighbour_us: float
    transfer_us: float
    other_us: float
    forward_us: float
    backward_us: float


class PipelineStepDoc(PipelineFigures, kw_only=True):
    """One rank's step (``analyzers.pipeline.StageStep.as_dict``)."""

    step: int


class PipelineRankDoc(PipelineFigures, kw_only=True):
    """One rank of the pipeline (``analyzers.pipeline.Stage.as_dict``): its place, stage indices, figures over
    every step, whom it waited on and its busy time per stage index."""

    rank: str
    position: int
    stages: list[int]
    bubble_pct: float
    waited_on_us: dict[str, float]
    stage_busy_us: dict[str, float]
    steps: list[PipelineStepDoc]


class StageImbalanceDoc(_Part, kw_only=True):
    """The busiest stage against the others (``analyzers.pipeline.StageImbalance.as_dict``), per step."""

    stage: int
    rank: str
    busy_us: float
    others_median_us: float
    excess_us: float
    excess_pct: float
    saving_bound_us: float


class PipelineSegmentDoc(_Part, kw_only=True):
    """A piece of the chart's step (``analyzers.pipeline.Segment.as_dict``): work or a bubble's part."""

    rank: str
    step: int
    kind: str
    start_us: float
    end_us: float
    micro_batch: int
    stage: int


class PipelineDocument(_Part, kw_only=True):
    """``rnnprof pipeline --json``: the schedule and its theory, the measured bubble (over every step and per
    step), each rank, the imbalance, and the segments of the step the chart shows."""

    schema_version: Version
    schedule: PipelineScheduleDoc
    steps: list[int]
    bubble_pct: float
    step_bubble_pct: dict[str, float]
    stages: list[PipelineRankDoc]
    imbalance: StageImbalanceDoc | None
    segments: list[PipelineSegmentDoc]
    definitions: dict[str, str]
    left_out: dict[str, int]
    input_notes: list[str]


# Each command's document types: a document is one of them.
DOCUMENTS: dict[str, tuple[type, ...]] = {
    "count-ops": (CountOpsDocument, CountOpsComparisonDocument),
    "comm": (CommDocument,),
    "memory": (MemoryDocument,),
    "pipeline": (PipelineDocument,),
    "critical-path": (CriticalPathDocument,),
    "roofline": (RooflineDocument,),
    "placement-audit": (PlacementAuditDocument,),
    "audit": (AuditDocument,),
    "diff": (DiffDocument,),
    "explain": (ExplainDocument,),
    "scale": (ScaleDocument,),
    "whatif": (WhatIfDocument,),
    "hang": (HangDocument,),
}

# Where a document reshapes a result dataclass: (component, property) -> the type of what it holds instead
# (None: the key is left out of the document).
RESHAPED: dict[tuple[str, str], Any] = {
    ("KernelCounts", "by_type"): dict[str, KernelPair],  # op type -> kernels, for (cpu, gpu)
    ("DeviceKernels", "per_step"): dict[str, KernelPair],  # step -> kernels, for (cpu, gpu)
    ("Link", "event"): None,  # the event's row in the table, internal
}


def json_schema(command: str) -> dict:
    """The JSON Schema (draft 2020-12) of ``rnnprof COMMAND --json``'s document."""
    types = DOCUMENTS[command]
    (*roots,), components = msgspec.json.schema_components(types, ref_template="#/$defs/{name}")
    for (name, key), reshaped in RESHAPED.items():
        if name in components:
            _reshape(components[name], key, reshaped, components)
    root = roots[0] if len(roots) == 1 else {"oneOf": roots}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://rnnprof.invalid/schemas/{command}.schema.json",
            "title": f"rnnprof {command} --json", "schema_version": SCHEMA_VERSION, **root,
            "$defs": dict(sorted(components.items()))}


def _reshape(component: dict, key: str, reshaped: Any, components: dict) -> None:
    if reshaped is None:
        component["properties"].pop(key)
        component["required"] = [k for k in component.get("required", []) if k != key]
        return
    (schema,), more = msgspec.json.schema_components((reshaped,), ref_template="#/$defs/{name}")
    component["properties"][key] = schema
    components.update(more)
