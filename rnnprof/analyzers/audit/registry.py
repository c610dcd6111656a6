"""One registry of audit rules: the placement rules (PA001-PA008, ``rnnprof.analyzers.placement``) and the
performance rules (PF001-...), in report order, and the function that runs them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from rnnprof.analyzers.placement import frameworks, imbalance
from rnnprof.analyzers.placement import registry as placement_registry
from rnnprof.analyzers.placement.finding import PlacementFinding, run_checks
from rnnprof.analyzers.placement.inputs import TOWER_RAN_ON, AuditInput
from rnnprof.analyzers.noise import StepNoise
from rnnprof.events import EventTable, concat

from . import copy_churn, cuda_graphs, exposed_comm, gpu_idle, host_overhead, input_stalls, straggler
from . import collective_exposure, exposed_all_gather, exposed_reduce_scatter, slow_link, tensor_parallel
from . import memory_fragmentation, memory_growth, memory_imbalance, pipeline_bubble, stage_imbalance
from .context import HOST_OPS, AuditContext, Known
from .finding import Finding, NotChecked, Severity, Subject
from .top_fixes import TopFixes

PLACEMENT = "placement"
PERFORMANCE = "performance"


@dataclass(frozen=True)
class Rule:
    id: str  # short id, e.g. "PF001", "PA004"
    title: str
    family: str  # PLACEMENT or PERFORMANCE
    check: Callable[[AuditContext], "list[Finding] | NotChecked"]


def _placement_rule(rule: placement_registry.PlacementRule) -> Rule:
    short = rule.id.split("-")[0]

    def check(ctx: AuditContext):
        outcome = _placement_outcome(ctx, rule)
        if isinstance(outcome, NotChecked):
            return NotChecked(short, outcome.reason)
        return [from_placement(f) for f in outcome]

    return Rule(short, rule.title, PLACEMENT, check)


def _placement_outcome(ctx: AuditContext, rule: placement_registry.PlacementRule):
    """The placement rule's findings or ``NotChecked`` on the context's input: from the caller's result of the
    placement rules (``Known.placement``) where it holds the rule, else by running it."""
    given = ctx.known.placement
    if given is not None:
        for n in (*given.not_applicable, *given.not_checked):
            if n.rule_id == rule.id:
                return n
        if rule.id in given.checked:
            return [f for f in given.findings if f.rule_id == rule.id]
    excluded = frameworks.not_applicable(ctx.placement)
    if rule.id in excluded:
        return NotChecked(rule.id, excluded[rule.id])
    return rule.check(ctx.placement)


def from_placement(f: PlacementFinding) -> Finding:
    """A placement finding as an audit finding: the device its title names first (else its first device) is the
    subject, its cost the saving."""
    named = sorted((f.title.find(d), d) for d in f.devices if d in f.title)
    device = named[0][1] if named else f.devices[0] if f.devices else None  # the one its title names first
    rank = device.split("/")[0] if device and device.startswith("rank") else None
    return Finding(rule=f.rule_id.split("-")[0], severity=f.severity, title=f.title,
                   subject=Subject(rank=rank, device=device, op=f.ops[0] if f.ops else None),
                   evidence={**f.evidence, "devices": list(f.devices), "ops": list(f.ops)},
                   saving_us=f.cost_us_per_step, saving_basis=f.cost_basis,
                   confidence=float(f.evidence.get("confidence", 1.0)), fix=f.fix)


PERFORMANCE_MODULES = (straggler, exposed_comm, gpu_idle, copy_churn, input_stalls, host_overhead, cuda_graphs,
                       memory_imbalance, memory_growth, memory_fragmentation, exposed_all_gather,
                       exposed_reduce_scatter, tensor_parallel, pipeline_bubble, stage_imbalance, slow_link)
RULES: tuple[Rule, ...] = (
    tuple(Rule(m.RULE_ID, m.TITLE, PERFORMANCE, m.check) for m in PERFORMANCE_MODULES)
    + tuple(_placement_rule(r) for r in placement_registry.RULES)
)


# What the rules read of the events beyond comm's report, launch statistics and memory (``AuditInput.figure``): a
# whole job's ranks give each apart (``rnnprof.job.audit``)
FIGURES = (straggler.INPUT_OPS, exposed_comm.BESIDE, copy_churn.EXPOSED, copy_churn.SYNCS, input_stalls.RANGES,
           host_overhead.LAUNCHING, host_overhead.TINY, HOST_OPS, imbalance.PRESENT, imbalance.BUSY, imbalance.WORK,
           TOWER_RAN_ON, collective_exposure.EXPOSURE)


def rank_key(f: Finding) -> tuple:
    """Alarms (warning or above) first, then by saving, largest first (unknown savings last): a figure the rule
    could not tell from the run's jitter, or too small a share of the step (info), never outranks one it could."""
    return (f.severity < Severity.WARNING, f.saving_us is None, -(f.saving_us or 0.0), -int(f.severity), f.rule)


@dataclass(frozen=True)
class AuditResult:
    findings: tuple[Finding, ...]  # alarms first, each group by estimated saving, largest first (``rank_key``)
    not_checked: tuple[NotChecked, ...]
    checked: tuple[str, ...]
    noise: StepNoise
    notes: tuple[str, ...] = ()
    rules: tuple[Rule, ...] = field(default=RULES, repr=False)
    top_fixes: TopFixes | None = None  # the top findings' fixes replayed together (``replay.audit_savings``)
    held_back: tuple[Finding, ...] = ()  # findings within the jitter that a replay may bring out (``AuditContext``)

    def at_or_above(self, severity: Severity) -> list[Finding]:
        return [f for f in self.findings if f.severity >= severity]

    @property
    def worst(self) -> Severity | None:
        return max((f.severity for f in self.findings), default=None)

    def as_dict(self, left_out: dict | None = None) -> dict:
        """The document ``rnnprof audit --json`` prints."""
        step = self.noise.median_us
        notes = [*self.notes, f"rules checked: {', '.join(self.checked) or 'none'}",
                 *(f"{n.rule_id} not checked: {n.reason}" for n in self.not_checked)]
        return {"findings": [f.as_dict(step) for f in self.findings], "noise": self.noise.as_dict(),
                "left_out": dict(left_out or {}), "notes": notes,
                "top_fixes": self.top_fixes.as_dict() if self.top_fixes is not None else None}


def audit(table_or_job: "EventTable | AuditInput | Sequence[EventTable]", rules: tuple[Rule, ...] = RULES,
          known: Known = Known()) -> AuditResult:
    """Run every rule on one run: an ``EventTable``, a placement ``AuditInput`` (graph, events, manifest), or
    the tables of a job's ranks (merged on their common clock, ``events.concat``); ``known``: analyses of the
    same events the caller has computed already."""
    if isinstance(table_or_job, AuditInput):
        inp = table_or_job
    elif isinstance(table_or_job, EventTable):
        inp = AuditInput(events=table_or_job)
    else:
        tables = list(table_or_job)
        inp = AuditInput(events=tables[0] if len(tables) == 1 else concat(tables, align="absolute"))
    ctx = AuditContext(inp, known=known)
    findings, not_checked, checked = run_checks(rules, ctx)
    findings.sort(key=rank_key)
    return AuditResult(tuple(findings), tuple(not_checked), tuple(checked), ctx.noise, tuple(ctx.notes), rules,
                       held_back=tuple(ctx.held_back))
