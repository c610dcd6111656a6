"""The audit rules of sharded and sliced jobs' collectives (PF011 all-gathers not prefetched, PF012 exposed
reduce-scatters, PF013 tensor parallelism's all-reduces, PF016 a slow link): quiet on every replicated or
balanced trace of tests/data, firing on the runs that have what they look for, each saving the replay of its fix."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from fixtures import FIXTURES, GLOO_PAIRS
from rnnprof.analyzers.audit.finding import Severity
from rnnprof.analyzers.audit.registry import RULES, audit
from rnnprof.analyzers.replay import OVERLAP, Change, Replayer
from rnnprof.analyzers.replay.audit_savings import audit_replayer, fix_of, replayed_savings
from rnnprof.traces import load_events

NEW = tuple(r for r in RULES if r.id in ("PF011", "PF012", "PF013", "PF016"))
SHARDED = ("fsdp", "hsdp", "-tp", "-pp")  # the jobs that shard, slice or split: not controls of these rules
CONTROLS = ([p for p in sorted(FIXTURES.glob("*.json.gz")) if not any(s in p.name for s in SHARDED)]
            + [p for p in sorted(FIXTURES.glob("*/run")) if not any(s in str(p) for s in SHARDED)]
            + [FIXTURES / "tf-run-nmt-tiny", *sorted(FIXTURES.glob("h200-memory-oracle/*.trace.json.gz"))])


def _new_rules(paths) -> tuple[list, dict]:
    result = audit(load_events(paths if len(paths) > 1 else paths[0]), rules=NEW)
    return list(result.findings), {n.rule_id: n.reason for n in result.not_checked}


def test_the_rules_are_quiet_on_every_replicated_or_balanced_trace():
    """Every trace and run of tests/data that is no sharded, sliced or split job: single GPUs, DDP ranks on GPUs
    and gloo, TensorFlow: no finding of the four rules, at any severity."""
    inputs = [[str(p)] for p in CONTROLS] + [[str(FIXTURES / a), str(FIXTURES / b)] for a, b in GLOO_PAIRS]
    assert len(inputs) > 40
    for paths in inputs:
        findings, _ = _new_rules(paths)
        assert findings == [], (paths, [f.title for f in findings])


def test_tensor_parallel_all_reduces_are_named_with_their_group_and_their_fix_is_the_groups_overlap():
    table = load_events(str(FIXTURES / "torch-gloo-tp"))
    result = audit(table, rules=NEW)
    (found,) = [f for f in result.findings if f.rule == "PF013"]
    assert found.evidence["group"] == "0" and found.evidence["all_reduces_per_step"] == 18  # 6 forward, 12 backward
    replayed = replayed_savings(result, audit_replayer(table))
    (fixed,) = [f for f in replayed.findings if f.rule == "PF013"]
    assert fix_of(fixed) == "PF013:0" and fixed.saving_basis.startswith("replay")
    saved = Replayer(table).savings_us([Change(OVERLAP, "group:0")])
    assert fixed.saving_us == pytest.approx(max(0.0, statistics.median(saved)))
    assert fixed.saving_us > 0.1 * result.noise.median_us  # its collectives sit inside every layer
    for run in ("torch-gloo-fsdp", "torch-gloo-pp"):  # no all-reduce in a forward: no tensor-parallel group
        assert "PF013" in _new_rules([str(FIXTURES / run)])[1]


def test_fsdps_reduce_scatters_and_unprefetched_all_gathers_are_checked_on_its_runs_only():
    findings, not_checked = _new_rules([str(FIXTURES / "torch-gloo-fsdp")])
    assert {"PF011", "PF012"} <= {f.rule for f in findings} and "PF013" in not_checked
    for f in findings:
        per_step = f.evidence.get("reduce_scatter_ms_per_step", f.evidence.get("their_ms_per_step"))
        assert 0 < f.evidence["exposed_ms_per_step"] <= per_step  # exposed: a part of their time
    assert {"PF011", "PF012"} <= set(_new_rules([str(FIXTURES / "torch-gloo-tp")])[1])


def _slow_link_rank(folder: Path, rank: int, slow: float) -> str:
    """A GPU rank of a 4-rank job in two process groups, A (ranks 0, 1) and B (2, 3), each all-reducing 4 MiB
    twice a step (800 µs a call), group B's calls ``slow`` times as long, every collective's message recorded."""
    group, members = ("A", [0, 1]) if rank < 2 else ("B", [2, 3])
    events, correlation = [], 1000
    for step in range(6):
        start = step * 10_000.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": start, "dur": 9000})
        for k in range(2):
            correlation += 1
            launch = start + 100 + 4000 * k
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": launch, "dur": 10, "args": {"correlation": correlation}})
            events.append({"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": launch + 20,
                           "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgs)",
                           "dur": 800.0 * (slow if group == "B" else 1.0),
                           "args": {"device": rank, "stream": 7, "correlation": correlation,
                                    "Process Group Name": group, "Process Group Ranks": str(members),
                                    "Group size": 2, "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20,
                                    "dtype": "Float", "Collective name": "allreduce", "Seq": 2 * step + k}})
    path = folder / f"rank{rank}.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events,
                                "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 4}}))
    return str(path)


@pytest.mark.parametrize("slow", [4.0, 1.0], ids=["group B 4x slower", "control"])
def test_a_group_slower_per_byte_than_the_others_is_a_slow_link_and_its_fix_its_speed_at_theirs(tmp_path, slow):
    table = load_events([_slow_link_rank(tmp_path, r, slow) for r in range(4)])
    result = audit(table, rules=NEW)
    found = [f for f in result.findings if f.rule == "PF016"]
    if slow == 1.0:
        assert found == [] and "PF016" not in {n.rule_id for n in result.not_checked}  # compared, and quiet
        return
    (finding,) = found
    assert finding.evidence["group"] == "B" and finding.evidence["ratio"] == pytest.approx(1 / slow, rel=0.02)
    assert finding.subject.rank in ("rank2", "rank3") and finding.severity >= Severity.WARNING
    excess_us = 2 * 800.0 * (slow - 1)  # two calls a step, each 2,400 µs longer than group A's
    assert finding.saving_us == pytest.approx(excess_us, rel=0.02)
    # replayed, only the second call's excess shortens the step: the first is followed by idle time until the
    # second is launched, 4 ms after it, which no faster link brings forward
    (fixed,) = [f for f in replayed_savings(result, audit_replayer(table)).findings if f.rule == "PF016"]
    assert fix_of(fixed) == "PF016:B=0.25" and fixed.saving_us == pytest.approx(800.0 * (slow - 1), rel=0.02)


def test_slow_link_is_not_checked_without_two_groups_of_one_collective():
    _, not_checked = _new_rules([str(FIXTURES / "torch-gloo-fsdp")])
    assert "no collective type that two or more named process groups run" in not_checked["PF016"]
