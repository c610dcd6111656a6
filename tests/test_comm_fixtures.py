"""rnnprof comm on real Kineto traces, checked against holistictraceanalysis (HTA).

HTA's temporal breakdown and comm/comp overlap use the same definitions as rnnprof
comm on GPU streams. HTA by default rounds every event inward to whole µs and drops
the kernels launched in the last ProfilerStep; both are compared here.
"""

import json
import shutil
from pathlib import Path

import pytest

from rnnprof.analyzers.comm import analyze_comm
from rnnprof.cli import main
from rnnprof.events import Device
from rnnprof.traces import load_events

from fixtures import FIXTURES
NCCL = FIXTURES / "kineto-2rank-nccl-rank0.json.gz"
SAMPLED = [FIXTURES / "kineto-sampled-rank0.json.gz", FIXTURES / "kineto-sampled-rank1.json.gz"]
TOLERANCE_PP = 0.5

# HTA calls pandas APIs that pandas 3 deprecates; its warnings are not ours.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning",
                                        "ignore:.*inplace keyword:Warning")


def hta_figures(trace_dir: Path, *, include_last_step: bool) -> dict[int, dict[str, float]]:
    from hta.common.trace import Trace
    from hta.trace_analysis import TraceAnalysis

    # TraceAnalysis(trace_dir) parses the ranks in a pool forked from this process, which runs other modules'
    # threads (TensorFlow's, a chart converter's): a fork can inherit a lock one of them holds, and the pool's
    # worker then hangs. The same parse, in this process:
    trace = Trace(trace_dir=str(trace_dir))
    trace.load_traces(include_last_step, use_multiprocessing=False)
    analysis = TraceAnalysis.__new__(TraceAnalysis)
    analysis.t = trace
    breakdown = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    overlap = analysis.get_comm_comp_overlap(visualize=False).set_index("rank")
    return {
        int(rank): {
            "idle_pct": 100 * row["idle_time(us)"] / row["kernel_time(us)"],
            "compute_pct": 100 * row["compute_time(us)"] / row["kernel_time(us)"],
            "non_compute_pct": 100 * row["non_compute_time(us)"] / row["kernel_time(us)"],
            "span_us": row["kernel_time(us)"],
            "overlap_pct": overlap.loc[rank, "comp_comm_overlap_pctg"],
        }
        for rank, row in breakdown.iterrows()
    }


def ours(breakdown) -> dict[str, float]:
    return {
        "idle_pct": breakdown.pct(breakdown.idle_us),
        "compute_pct": breakdown.pct(breakdown.compute_us),
        "non_compute_pct": breakdown.pct(breakdown.non_compute_us),
        "span_us": breakdown.span_us,
        "overlap_pct": breakdown.overlap_pct,
    }


def assert_agree(mine: dict, hta: dict, tolerance_pp: float) -> None:
    for key in ("idle_pct", "compute_pct", "non_compute_pct", "overlap_pct"):
        assert mine[key] == pytest.approx(hta[key], abs=tolerance_pp), key
    assert mine["span_us"] == pytest.approx(hta["span_us"], rel=1e-4)


@pytest.fixture(scope="module")
def nccl_table():
    return load_events(NCCL)


@pytest.fixture
def nccl_dir(tmp_path):
    shutil.copy(NCCL, tmp_path)
    return tmp_path


def only_device(report) -> "DeviceComm":  # noqa: F821
    (device,) = report.devices
    return device


def test_agrees_with_hta_on_the_whole_trace(nccl_table, nccl_dir, monkeypatch):
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")  # compare definitions, not HTA's µs rounding
    hta = hta_figures(nccl_dir, include_last_step=True)[0]
    device = only_device(analyze_comm(nccl_table))
    assert device.device == Device("gpu", 0, "rank0")
    assert device.total.communication_us > 0 and 0 < device.total.overlap_us < device.total.communication_us
    assert_agree(ours(device.total), hta, TOLERANCE_PP)


def test_agrees_with_hta_default_which_drops_the_last_step(nccl_table, nccl_dir, monkeypatch):
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    hta = hta_figures(nccl_dir, include_last_step=False)[0]
    last = nccl_table.steps()[-1]
    device = only_device(analyze_comm(nccl_table.select(nccl_table.step != last)))
    assert_agree(ours(device.total), hta, TOLERANCE_PP)


def test_hta_rounding_to_whole_microseconds_moves_figures_by_under_a_point(nccl_table, nccl_dir, monkeypatch):
    monkeypatch.delenv("HTA_DISABLE_NS_ROUNDING", raising=False)
    hta = hta_figures(nccl_dir, include_last_step=True)[0]
    assert_agree(ours(only_device(analyze_comm(nccl_table)).total), hta, 1.0)


def test_steps_of_the_nccl_trace(nccl_table):
    device = only_device(analyze_comm(nccl_table))
    assert sorted(device.steps) == [4, 5, 6]
    # Steps do not overlap on the GPU, so their busy and class times add up to the whole trace.
    for field in ("busy_us", "compute_us", "communication_us", "overlap_us"):
        assert sum(getattr(b, field) for b in device.steps.values()) == pytest.approx(getattr(device.total, field))
    assert all(b.communication_us > 0 for b in device.steps.values())


def test_two_rank_files_report_each_rank_and_agree_with_hta(tmp_path, monkeypatch):
    for path in SAMPLED:
        shutil.copy(path, tmp_path)
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    hta = hta_figures(tmp_path, include_last_step=True)
    report = analyze_comm(load_events(SAMPLED))
    assert [d.device.label for d in report.devices] == ["rank0/gpu:0", "rank1/gpu:1"]
    for rank, device in enumerate(report.devices):
        assert_agree(ours(device.total), hta[rank], TOLERANCE_PP)
    # One straggler line per step seen on both ranks, naming the rank whose step ends last.
    assert [s.step for s in report.stragglers] == list(report.steps) == [551, 552]
    for straggler in report.stragglers:
        ends = {d.device: d.steps[straggler.step].work_end_us for d in report.devices}
        assert straggler.last_to_finish == max(ends, key=ends.get)
        assert straggler.finish_lag_vs_earliest_us == pytest.approx(max(ends.values()) - min(ends.values()))
        assert straggler.last_comm_start is not None and straggler.comm_start_lag_vs_earliest_us >= 0


def test_cli_two_ranks_table_and_json(capsys):
    assert main(["comm", *map(str, SAMPLED), "--per-step"]) == 0
    out = capsys.readouterr().out
    assert "rank0/gpu:0" in out and "rank1/gpu:1" in out
    assert "finished last" in out and "idle = span - busy" in out.replace("\n", " ")

    assert main(["comm", *map(str, SAMPLED), "--json", "--per-step"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["device"] for d in doc["devices"]] == ["rank0/gpu:0", "rank1/gpu:1"]
    assert set(doc["devices"][0]["steps"]) == {"551", "552"}
    assert len(doc["stragglers"]) == 2
    assert doc["communication_events"] and all(n.startswith("ncclKernel_SendRecv") for n in doc["communication_events"])


def test_cli_comm_pattern_moves_time_into_communication(capsys):
    assert main(["comm", str(NCCL), "--json"]) == 0
    before = json.loads(capsys.readouterr().out)["devices"][0]["total"]
    assert main(["comm", str(NCCL), "--json", "--comm-pattern", "^Memcpy DtoD"]) == 0
    after = json.loads(capsys.readouterr().out)["devices"][0]["total"]
    assert after["communication_us"] > before["communication_us"]
    assert after["busy_us"] == pytest.approx(before["busy_us"])
