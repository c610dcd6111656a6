"""The profiler's own cost per rank (``analyzers.profiler_cost``) and PF006's tiny-operator saving net of it, on
hand-built step times and tables whose results are worked out by hand below."""

from __future__ import annotations

import pytest

from rnnprof.events import names
from rnnprof.analyzers.audit import audit
from rnnprof.analyzers.placement import AuditInput
from rnnprof.analyzers.profiler_cost import profiler_cost
from rnnprof.events import Device, EventTableBuilder, Kind, Manifest


def _table(per_step_ops, steps, step_len=10_000.0, worker="rank0"):
    """One gloo CPU rank: ``per_step_ops`` (name, start, dur) host operators repeated in each of ``steps``."""
    cpu = Device("cpu", 0, worker=worker)
    b = EventTableBuilder("test")
    for step in steps:
        for name, start, dur in per_step_ops:
            b.add(step * step_len + start, dur, name, name, cpu, "1", Kind.HOST_OP, step=step)
    table = b.build()
    table.metadata.host_operator_devices = (cpu,)
    return table


def _record(rank, seconds, traced, warmup=(), export=()):
    return {"rank": rank, "steps": list(traced), names.RANK_STEP_SECONDS: list(seconds),
            names.RANK_PROFILER_WARMUP_STEPS: list(warmup), names.RANK_EXPORT_STEPS: list(export)}


def test_the_profiler_cost_is_the_median_traced_step_less_the_median_untraced_one_per_recorded_operator():
    # rank0: step 0 (the start), 2 (the profiler's warm-up), 3-5 (traced), 6 (its export) are not untraced;
    # step 7 is rank1's export, which slows rank0 too: untraced = steps 1, 8, 9 = 10, 9, 12 ms -> median 10 ms
    # (with step 7's 30 ms it would be 11). Traced: 20, 22, 21 -> 21 ms. Cost 11 ms per step, over the 1,100
    # host operators of each traced step: 10 µs each.
    seconds = [0.5, 0.010, 0.011, 0.020, 0.022, 0.021, 1.0, 0.030, 0.009, 0.012]
    ops = [(f"op{k}", 5 * k, 2) for k in range(1_100)]
    manifest = Manifest.from_dict({"ranks": [_record(0, seconds, [3, 4, 5], [2], [6]),
                                             _record(1, [0.5, 0.01], [], [], [7])]})
    costs = profiler_cost(_table(ops, [3, 4, 5]), manifest)
    rank0 = costs["rank0"]
    assert (rank0.traced_steps, rank0.untraced_steps) == (3, 3)
    assert rank0.untraced_median_us == pytest.approx(10_000) and rank0.traced_median_us == pytest.approx(21_000)
    assert rank0.step_cost_us == pytest.approx(11_000) and rank0.per_op_us == pytest.approx(10.0)
    assert rank0.unknown is None
    # rank1 has no traced step; with two untraced steps only, rank0's cost is unknown, and said why
    assert costs["rank1"].per_op_us is None and "no traced step" in costs["rank1"].unknown
    short = profiler_cost(None, Manifest.from_dict({"ranks": [_record(0, [*seconds[:6], 0.009], [3, 4, 5], [2])]}))
    short = short["rank0"]  # untraced: steps 1 and 6
    assert short.per_op_us is None and "2 untraced step(s)" in short.unknown and "3 needed" in short.unknown
    # a record without step times (an older capture): unknown
    assert profiler_cost(None, Manifest.from_dict({"ranks": [{"rank": 0, "steps": [1]}]}))["rank0"].unknown


# 200 selects of 10 µs, 5 µs apart, each with a nested 2 µs operator, after a 3 ms LSTM: 200 * 10 + 199 * 5 =
# 2,995 µs of tiny operators per 10 ms step, 400 operators recorded in them
SELECTS = [("aten::lstm", 0, 3000)] + [op for k in range(200) for op in
                                       (("aten::select", 3000 + 15 * k, 10), ("aten::as_strided", 3001 + 15 * k, 2))]


def _pf006(table, seconds, traced, thread_cpu=None):
    record = _record(0, seconds, traced)
    if thread_cpu is not None:
        record[names.RANK_STEP_THREAD_CPU_SECONDS] = list(thread_cpu)
    job = AuditInput(events=table, manifest=Manifest.from_dict({"ranks": [record]}))
    (finding,) = [f for f in audit(job).findings if f.rule == "PF006"]
    return finding


def test_pf006_takes_the_profilers_share_of_each_step_off_the_tiny_operators_time():
    # traced steps 1-4 take 10 ms, the untraced ones (5-8) 8 ms: the profiler's 2 ms are 20% of a traced step;
    # the tiny operators' share of them is 20% of their 2,995 µs, 599 µs, less than the operators recorded in
    # them cost (400 x 2 ms / 401 operators a step = 1,995 µs): 2,995 - 599 = 2,396 µs.
    seconds = [0.1] + [0.010] * 4 + [0.008] * 4
    finding = _pf006(_table(SELECTS, [1, 2, 3, 4]), seconds, [1, 2, 3, 4])
    assert finding.saving_us == pytest.approx(2_396)
    assert finding.evidence["tiny_ms_per_step"] == pytest.approx(2.995)
    assert finding.evidence["profiler_ms_in_tiny_per_step"] == pytest.approx(0.599)
    assert finding.evidence["recorded_ops_in_tiny_per_step"] == 400
    assert finding.evidence["profiler_us_per_op"] == {"rank0": pytest.approx(2_000 / 401, abs=1e-3)}
    assert "less the profiler's cost" in finding.saving_basis


def test_pf006_measures_the_profilers_share_in_the_training_threads_cpu_time_where_the_capture_has_it():
    # Load came after the window: the untraced steps took 20 ms of wall (twice the traced 10), so by wall time
    # the profiler cost nothing and the whole 2,995 µs would stay. The training thread's CPU time: traced steps
    # 8 ms, untraced 6 ms, so the profiler is 25% of a traced step: 749 µs of the tiny time. The other bound,
    # the 400 recorded operators at 2 ms / 401 operators a step, stretched by the step's wall over its CPU time
    # (10 / 8): 2,494 µs. 2,995 - 748.75 = 2,246.25 µs.
    seconds = [0.1] + [0.010] * 4 + [0.020] * 4
    thread_cpu = [0.1] + [0.008] * 4 + [0.006] * 4
    finding = _pf006(_table(SELECTS, [1, 2, 3, 4]), seconds, [1, 2, 3, 4], thread_cpu)
    assert finding.saving_us == pytest.approx(2_995 - 0.25 * 2_995)
    assert finding.evidence["profiler_cost_by"] == "the training thread's CPU time"
    rank0 = finding.evidence["profiler_cost_per_rank"]["rank0"]
    assert rank0["profiler_ms_per_step"] == 0 and rank0["profiler_thread_cpu_ms_per_step"] == pytest.approx(2.0)
    assert "the training thread's CPU time" in finding.saving_basis
    # the same steps without the thread's clock (an older capture): by wall time, nothing is taken off
    assert _pf006(_table(SELECTS, [1, 2, 3, 4]), seconds, [1, 2, 3, 4]).saving_us == pytest.approx(2_995)
    # a heavier profiler, 75% of the thread's traced step (2 ms untraced): 0.75 x 2,995 = 2,246 µs, against the
    # operators' bound 400 x 6 ms / 401 x 10 / 8 = 7,481 µs; the smaller goes
    heavy = [0.1] + [0.008] * 4 + [0.002] * 4
    finding = _pf006(_table(SELECTS, [1, 2, 3, 4]), seconds, [1, 2, 3, 4], heavy)
    assert finding.saving_us == pytest.approx(2_995 - min(0.75 * 2_995, 400 * 6_000 / 401 * 1.25))


def test_pf006_takes_off_no_more_than_the_recorded_operators_cost():
    # untraced steps of 2 ms: the profiler's 8 ms are 80% of a traced step (2,396 µs of the tiny time), but the
    # step also records 3,960 operators outside the tiny ones (40 names x 99 runs, inside the LSTM): 8 ms over
    # 4,361 operators, 400 of them in the tiny time: 733.8 µs. 2,995 - 733.8 = 2,261.2 µs.
    inside_lstm = [(f"op{n}", 1 + 0.5 * k, 0.2) for n in range(40) for k in range(99)]
    seconds = [0.1] + [0.010] * 4 + [0.002] * 4
    finding = _pf006(_table(SELECTS + inside_lstm, [1, 2, 3, 4]), seconds, [1, 2, 3, 4])
    assert finding.saving_us == pytest.approx(2_995 - 400 * 8_000 / 4_361)


def test_pf006_says_the_profilers_cost_is_included_where_it_is_unknown():
    # two untraced steps only: the figure is the tiny operators' time, said to include the profiler's cost
    finding = _pf006(_table(SELECTS, [1, 2, 3, 4]), [0.1] + [0.010] * 4 + [0.008] * 2, [1, 2, 3, 4])
    assert finding.saving_us == pytest.approx(2_995)
    assert finding.evidence["profiler_cost"].startswith("unknown")
    assert "profiler's cost of recording each operator included" in finding.saving_basis
    assert finding.title.endswith("the profiler's cost included")
