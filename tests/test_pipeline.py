"""rnnprof pipeline: a pipeline's bubble against its schedule's theory, on pipelines run exactly by their schedule
(``pipeline_traces``: equal stages and free transfers leave the theory's bubble, (p-1)/(m+p-1), stage s waiting
s forwards before its first work and s backwards after its last); the schedule told by the trace as the run's
manifest records it; the parts of every real pipeline's steps adding up; a planted slow stage named, by its size."""

from __future__ import annotations

import json

import pytest

from fixtures import FIXTURES
from pipeline_traces import write_job
from rnnprof.analyzers.pipeline import Given, analyze_pipeline
from rnnprof.analyzers.pipeline.schedule import MANIFEST
from rnnprof.cli import main
from rnnprof.traces import load_events

FORWARD_US, BACKWARD_US = 100.0, 250.0
PP_RUN = FIXTURES / "torch-gloo-pp"
PP_TRACES = [FIXTURES / f"torch-gloo-pp-collectives-rank{r}.json.gz" for r in (0, 1)]
# the same script's pipeline on one H200 over nccl: torch fuses a send and a receive into one SendRecv kernel
NCCL_PP_TRACES = [FIXTURES / f"torch-nccl-pp-collectives-rank{r}.json.gz" for r in (0, 1)]


def _job(tmp_path, kind, stages, micro, forward=None, backward=None, **options):
    paths = write_job(tmp_path, kind, stages, micro, forward or [FORWARD_US] * stages,
                      backward or [BACKWARD_US] * stages, **options)
    return analyze_pipeline(load_events([str(p) for p in paths]))


@pytest.mark.parametrize("kind, stages, micro", [("1f1b", 2, 4), ("1f1b", 4, 8), ("1f1b", 4, 2), ("gpipe", 2, 4),
                                                 ("gpipe", 3, 6)])
def test_a_pipeline_run_by_its_schedule_has_the_theorys_bubble(tmp_path, kind, stages, micro):
    report = _job(tmp_path, kind, stages, micro)
    theory = (stages - 1) / (micro + stages - 1)
    assert report.schedule.theory == pytest.approx(theory, rel=1e-12)
    assert report.bubble_fraction == pytest.approx(theory, abs=1e-9)
    assert (report.schedule.kind, report.schedule.ranks, report.schedule.micro_batches) == (kind, stages, micro)
    assert "inferred from the trace" in report.schedule.source and len(report.steps) == 3
    for s in report.stages:  # stage s: s forwards of warm-up, s backwards of cool-down, the rest waiting
        position = s.position
        assert s.per_step("warm_up_us") == pytest.approx(position * FORWARD_US)
        assert s.per_step("cool_down_us") == pytest.approx(position * BACKWARD_US)
        assert s.per_step("neighbour_us") == pytest.approx((stages - 1 - position) * (FORWARD_US + BACKWARD_US))
        assert s.per_step("transfer_us") == pytest.approx(0.0) and s.per_step("other_us") == pytest.approx(0.0)
        assert s.per_step("busy_us") == pytest.approx(micro * (FORWARD_US + BACKWARD_US))
    assert report.imbalance.excess_us == pytest.approx(0.0) and report.imbalance.bound_us == pytest.approx(0.0)
    assert report.excess_bubble_us == pytest.approx([0.0] * 3, abs=1e-6)


@pytest.mark.parametrize("kind", ["1f1b", "gpipe"])
def test_without_ranges_the_schedule_is_told_by_the_sends_and_the_backward_functions(tmp_path, kind):
    """No range around a micro-batch: its work is its operators, a backward's inside autograd's backward functions;
    the micro-batches are the first rank's sends. What is not work, each send's and receive's call and gloo run,
    costs about 1 µs each here: within 1 % of the window."""
    report = _job(tmp_path, kind, 3, 6, ranges=False)
    assert (report.schedule.kind, report.schedule.micro_batches) == (kind, 6)
    assert "the first rank's sends" in report.schedule.source
    assert report.bubble_fraction == pytest.approx(2 / 8, abs=0.01)


def test_a_transfer_that_takes_time_is_bubble_above_the_theory(tmp_path):
    """Each send reaches its stage 40 µs after it was posted: the step grows by the transfers on its critical
    chain, and the bubble with it, above the theory; the ranks' time in them is told as transfer."""
    report = _job(tmp_path, "1f1b", 2, 4, latency_us=40.0)
    assert report.bubble_fraction > report.schedule.theory + 0.05
    assert all(s.per_step("transfer_us") > 0 for s in report.stages)
    assert min(report.excess_bubble_us) > 0


def test_a_planted_slow_stage_is_the_imbalance_by_its_size(tmp_path):
    """Stage 2 of 4 takes 60 µs more per forward: it is named, its busy time 4 x 60 µs a step above the others'."""
    forward = [FORWARD_US, FORWARD_US, FORWARD_US + 60.0, FORWARD_US]
    report = _job(tmp_path, "1f1b", 4, 4, forward=forward)
    found = report.imbalance
    assert (found.stage, found.worker) == (2, "rank2")
    assert found.excess_us == pytest.approx(4 * 60.0)
    assert found.per_step_excess_us == pytest.approx((240.0, 240.0, 240.0))
    mean = 4 * (FORWARD_US + BACKWARD_US) + 60.0
    assert found.bound_us == pytest.approx((4 + 4 - 1) / 4 * (4 * (FORWARD_US + BACKWARD_US + 60.0) - mean))
    assert report.stages[1].waited_on == pytest.approx({"rank2": report.stages[1].total("neighbour_us")})


def test_given_flags_stand_and_the_trace_tells_the_rest(tmp_path):
    paths = write_job(tmp_path, "1f1b", 2, 4, [FORWARD_US] * 2, [BACKWARD_US] * 2)
    table = load_events([str(p) for p in paths])
    report = analyze_pipeline(table, Given(micro_batches=8))
    assert (report.schedule.kind, report.schedule.micro_batches) == ("1f1b", 8)
    assert report.schedule.source.startswith("given: --micro-batches; inferred from the trace: schedule:")
    assert report.schedule.theory == pytest.approx(1 / 9)


def test_the_schedule_the_trace_tells_is_the_one_the_run_recorded():
    """tests/data/torch-gloo-pp: rnnprof's 1F1B on 2 ranks, 4 micro-batches, as its manifest records it; its rank
    files read without the manifest, and a user's script of the same schedule (no ranges), tell the same; so does
    that script on a GPU over nccl, whose steady state sends and receives in one kernel each time."""
    recorded = analyze_pipeline(load_events(str(PP_RUN))).schedule
    assert (recorded.kind, recorded.ranks, recorded.micro_batches, recorded.source) == ("1f1b", 2, 4, MANIFEST)
    for paths in ([str(p) for p in sorted((PP_RUN / "torch").glob("rank*.json.gz"))], [str(p) for p in PP_TRACES],
                  [str(p) for p in NCCL_PP_TRACES]):
        told = analyze_pipeline(load_events(paths)).schedule
        assert (told.kind, told.ranks, told.micro_batches) == ("1f1b", 2, 4), paths


@pytest.mark.parametrize("paths", [[PP_RUN], PP_TRACES, NCCL_PP_TRACES], ids=["run", "user-traces", "nccl-gpu"])
def test_a_real_pipelines_parts_add_up_step_by_step(paths):
    """busy + warm-up + cool-down + waiting + transfer + other = the window, for each rank and step; the chart's
    segments cover each rank's window of its step once."""
    report = analyze_pipeline(load_events([str(p) for p in paths] if len(paths) > 1 else str(paths[0])))
    assert len(report.steps) >= 2 and len(report.stages) == 2
    for s in report.stages:
        for x in s.steps:
            assert x.busy_us + x.bubble_us == pytest.approx(x.window_us, rel=1e-9)
            assert min(x.busy_us, x.warm_up_us, x.cool_down_us, x.neighbour_us, x.transfer_us, x.other_us) >= 0
            assert x.forward_us + x.backward_us <= x.busy_us + 1e-6
    shown = report.segments[0].step
    for s in report.stages:
        mine = [x for x in report.segments if x.worker == s.worker]
        window = next(x.window_us for x in s.steps if x.step == shown)
        assert sum(x.end_us - x.start_us for x in mine) == pytest.approx(window, rel=1e-9)


def test_a_folder_of_rank_files_gives_what_the_ranks_merged_give(tmp_path):
    from rnnprof.job.pipeline import job_pipeline
    from rnnprof.traces.rank_folder import job_of

    merged = analyze_pipeline(load_events([str(p) for p in PP_TRACES]))
    found, _, _ = job_pipeline(job_of([str(p) for p in PP_TRACES]), jobs=1)
    assert found.as_dict() == merged.as_dict()


def test_the_command_refuses_an_input_with_no_pipeline_in_one_line(capsys):
    code = main(["pipeline", str(FIXTURES / "torch-gloo-fsdp")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "holds no pipeline" in err


def test_the_commands_json_is_the_analysis(capsys):
    assert main(["pipeline", str(PP_RUN), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    report = analyze_pipeline(load_events(str(PP_RUN)))
    assert document["bubble_pct"] == pytest.approx(100 * report.bubble_fraction)
    assert document["schedule"]["theory_bubble_pct"] == pytest.approx(20.0)
    assert [s["rank"] for s in document["stages"]] == ["rank0", "rank1"]
    assert [s["bubble_pct"] for s in document["stages"]] == pytest.approx([100 * s.bubble_fraction
                                                                          for s in report.stages])


# -- the audit's rules: PF014 (a bubble above the theory), PF015 (a stage busier than the others) -------------------

MS = 1000.0


def _audit(tmp_path, **options):
    from rnnprof.analyzers.audit import audit

    stages = options.pop("stages", 3)
    paths = write_job(tmp_path, "1f1b", stages, 6, options.pop("forward", [10 * MS] * stages),
                      options.pop("backward", [20 * MS] * stages), steps=5, **options)
    result = audit(load_events([str(p) for p in paths]))
    return {f.rule: f for f in result.findings if f.rule in ("PF014", "PF015")}, result


def test_a_pipeline_run_by_its_schedule_raises_neither_pipeline_rule(tmp_path):
    found, result = _audit(tmp_path)
    assert found == {} and {"PF014", "PF015"} <= set(result.checked)


def test_slow_transfers_are_a_bubble_above_the_theory_bounded_by_what_the_theory_leaves(tmp_path):
    """Each send takes 5 ms to arrive: the step grows by the transfers on its chain, the bubble above the theory,
    most of it waiting; no stage is busier than another."""
    found, _ = _audit(tmp_path, latency_us=5 * MS)
    bubble = found["PF014"]
    assert bubble.severity.label in ("warning", "error") and "PF015" not in found
    report = analyze_pipeline(load_events([str(p) for p in sorted(tmp_path.glob("rank*.json.gz"))]))
    assert bubble.saving_us == pytest.approx(report.excess_bubble_us[0]) and bubble.saving_us > 0
    assert bubble.saving_basis.startswith("bound:") and "theory 25.0%" in bubble.title


def test_a_slow_stage_is_raised_with_its_bound(tmp_path):
    found, _ = _audit(tmp_path, forward=[10 * MS, 20 * MS, 10 * MS])
    stage = found["PF015"]
    assert stage.subject.rank == "rank1" and stage.severity.label in ("warning", "error")
    assert stage.evidence["excess_us"] == pytest.approx(6 * 10 * MS)
    mean = (6 * 30 * MS * 2 + 6 * 40 * MS) / 3
    assert stage.saving_us == pytest.approx((6 + 3 - 1) / 6 * (6 * 40 * MS - mean))
    assert "keeps its bound" not in stage.saving_basis and stage.saving_basis.startswith("bound:")


def test_a_step_some_ranks_did_not_record_is_left_out_and_said(tmp_path):
    """Rank 1's trace lacks step 3 (its profiler stopped a step early): the pipeline is measured over steps 1 and
    2, and a note says step 3 was left out."""
    import gzip

    paths = write_job(tmp_path, "1f1b", 2, 4, [FORWARD_US] * 2, [BACKWARD_US] * 2)
    document = json.loads(gzip.decompress(paths[1].read_bytes()))
    last = max(e["ts"] for e in document["traceEvents"] if e["name"] == "ProfilerStep#3")
    document["traceEvents"] = [e for e in document["traceEvents"] if e["ts"] < last]
    paths[1].write_bytes(gzip.compress(json.dumps(document).encode()))
    report = analyze_pipeline(load_events([str(p) for p in paths]))
    assert report.steps == (1, 2)
    assert any("1 step(s) left out" in note and "steps 3" in note for note in report.notes), report.notes
    assert report.bubble_fraction == pytest.approx(1 / 5, abs=1e-9)
