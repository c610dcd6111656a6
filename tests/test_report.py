"""rnnprof report (one self-contained HTML page) and --plot on scale, comm and count-ops.

Pages are opened in headless Chromium (tests/browser.py): no console error, no network request, every
chart drawn, and the bars and points each chart drew counted against figures taken from the raw input.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from browser import open_page
from rnnprof.cli import main

DATA = Path(__file__).parent / "data"
RANKS = [DATA / "kineto-sampled-rank0.json.gz", DATA / "kineto-sampled-rank1.json.gz"]
TF1 = DATA / "tf1-timeline-gpu-loop-step0.json"
SEGMENTS = 5  # compute, compute + communication, communication, copies/other, idle: drawn even when 0
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _kineto(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _steps(events: list[dict]) -> dict[int, tuple[float, float]]:
    return {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in events
            if e.get("name", "").startswith("ProfilerStep#") and e.get("ph") == "X"}


def _gpu_events_in_step(events: list[dict], step: int) -> int:
    """GPU events launched by a runtime call inside ProfilerStep#step (matched by correlation id)."""
    start, end = _steps(events)[step]
    launched = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and start <= e["ts"] < end and "correlation" in e.get("args", {})}
    return sum(1 for e in events if e.get("cat") in GPU_CATS and e.get("args", {}).get("correlation") in launched)


def _specs(page: str) -> dict[str, dict]:
    """The Vega-Lite spec of each chart on a page, by chart name."""
    specs = dict(re.findall(r'<script type="application/json" id="(spec-\d+)">(.*?)</script>', page, re.S))
    return {name: json.loads(specs[spec_id]) for name, spec_id in
            re.findall(r'<div class="chart" data-chart="([\w-]+)" data-spec="(spec-\d+)">', page)}


def _svg_marks(path: Path) -> dict[str, int]:
    """Items per Vega mark type in an SVG that vl-convert wrote."""
    counts: dict[str, int] = {}
    for group in ET.parse(path).getroot().iter("{http://www.w3.org/2000/svg}g"):
        classes = group.get("class", "").split()
        if "role-mark" in classes:
            kind = next(c[5:] for c in classes if c.startswith("mark-"))
            counts[kind] = counts.get(kind, 0) + len(list(group))
    return counts


def _report(paths, out: Path, capsys, *extra) -> str:
    code = main(["report", *map(str, paths), "-o", str(out), *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return out.read_text()


def _check_page(visit, title_has: str) -> None:
    assert visit.console_errors == []
    assert visit.network_requests() == [], visit.requests
    assert title_has in visit.title
    assert all(c["drawn"] for c in visit.charts), visit.charts
    assert visit.charts_drawn == str(len(visit.charts))
    assert visit.screenshot.startswith(b"\x89PNG") and len(visit.screenshot) > 20_000


# -- Kineto rank files ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kineto_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("kineto") / "ranks.html"
    assert main(["report", *map(str, RANKS), "-o", str(out)]) == 0
    return out


def test_kineto_report_draws_every_chart_offline_in_chromium(kineto_page, tmp_path, capsys):
    visit = open_page(kineto_page)
    (tmp_path / "kineto-report.png").write_bytes(visit.screenshot)
    _check_page(visit, "kineto-sampled-rank0.json.gz")
    raw = [_kineto(p) for p in RANKS]
    gpus = {(r, e["args"]["device"]) for r, events in enumerate(raw) for e in events if e.get("cat") in GPU_CATS}
    steps = sum(len(_steps(events)) for events in raw)  # each rank's GPU works in each of its steps
    assert visit.marks("breakdown") == {"rect": len(gpus) * SEGMENTS}
    assert visit.marks("step-breakdown") == {"rect": steps * SEGMENTS}
    names = {e["name"] for events in raw for e in events if e.get("cat") in GPU_CATS}
    assert visit.marks("top-device") == {"rect": min(15, len(names))}
    host_ops = {e["name"] for events in raw for e in events if e.get("cat") == "cpu_op"}
    assert visit.marks("top-host") == {"rect": min(15, len(host_ops))}
    step = int(re.search(r"Timeline of step (\d+)", kineto_page.read_text()).group(1))
    assert visit.marks("timeline") == {"rect": sum(_gpu_events_in_step(events, step) for events in raw)}
    # the critical path of the timeline's step: a bar per event of the chain rnnprof critical-path reports
    capsys.readouterr()
    assert main(["critical-path", *map(str, RANKS), "--step", str(step), "--json"]) == 0
    (path,) = json.loads(capsys.readouterr().out)["steps"]
    assert visit.marks("critical-path") == {"rect": len(path["links"])} and len(path["links"]) > 1
    assert f"Critical path of step {step}" in json.dumps(_specs(kineto_page.read_text())["critical-path"])


def test_kineto_report_is_self_contained_and_says_what_it_cannot_show(kineto_page):
    page = kineto_page.read_text()
    assert not re.search(r"""<(script|link|img)[^>]+(src|href)=["']?https?:""", page)
    (left_out,) = re.findall(r'<p class="left-out sub" id="left-out">(.*?)</p>', page)  # the line at the end
    assert "Configuration and environment (kineto input carries no run manifest" in left_out
    assert "<h2>Throughput</h2>" in page and "Throughput (" not in left_out  # from the ProfilerStep ranges
    assert "The user graph (graphs are read from one run directory" in left_out
    assert "The placement audit" not in page  # the audit runs on the trace alone
    assert "Rules checked:" in page


def test_a_name_from_the_input_cannot_break_out_of_the_page(tmp_path, capsys):
    events = _kineto(RANKS[0])
    longest = max((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["dur"])["name"]
    for e in events:
        if e.get("name") == longest:  # so that it is among the top kernels in the tables
            e["name"] = "</script><script>alert(1)</script><b>k"
    path = tmp_path / "evil.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events}))
    page = _report([path], tmp_path / "evil.html", capsys)
    assert "<script>alert(1)" not in page and "<b>k" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page  # in the tables, escaped
    assert _specs(page)  # and the specs still parse


# -- a TF1 timeline ------------------------------------------------------------------------------------

def test_tf1_timeline_report_has_a_bar_per_device_and_no_step_chart(tmp_path, capsys):
    page = _report([TF1], tmp_path / "tf1.html", capsys)
    trace = json.loads(TF1.read_text())
    devices = {m.group(0).lower() for e in trace["traceEvents"] if e.get("name") == "process_name"
               for m in [re.search(r"(gpu|cpu):\d+", e["args"]["name"], re.I)] if m}
    specs = _specs(page)
    assert len(specs["breakdown"]["datasets"]["breakdown"]) == len(devices) * SEGMENTS
    assert "step-breakdown" not in specs and "Per-step bars (the trace has no step markers)" in page
    assert "<title>rnnprof report: tf1-timeline-gpu-loop-step0.json</title>" in page
    assert "Timeline of the whole trace" in json.dumps(specs["timeline"])
    assert "Critical path of the whole trace" in json.dumps(specs["critical-path"])
    assert "a TF1 timeline holds no graph" in page.split("Critical path</h2>")[1]


# -- the timeline stays bounded ----------------------------------------------------------------------

def test_a_step_with_more_events_than_the_bound_is_merged_without_losing_busy_time():
    from rnnprof.analyzers.classify import classify
    from rnnprof.analyzers.device_work import device_work_mask
    from rnnprof.analyzers.timeline import CLASS_NAMES, step_timeline
    from rnnprof.traces import load_events

    table = load_events([str(p) for p in RANKS])
    classes = classify(table)
    work, _ = device_work_mask(table, classes)
    timeline = step_timeline(table, classes, work, max_bars=100)
    assert len(timeline.bars) <= 100 < timeline.events
    assert "drawn as" in timeline.note and f"{timeline.events:,} events" in timeline.note
    rows = np.flatnonzero(work & (table.step == timeline.step))
    origin = table.ts[rows].min()
    assert sum(b.events for b in timeline.bars) == len(rows)
    for i in rows:  # every event lies inside a bar of its device and class
        device, cls = table.devices[table.device[i]].label, CLASS_NAMES[classes[i]]
        start, end = table.ts[i] - origin, table.ts[i] + table.dur[i] - origin
        assert any(b.device == device and b.cls == cls and b.start_us <= start + 1e-6 and end <= b.end_us + 1e-6
                   for b in timeline.bars), (device, cls, start, end)


# -- what the report computes --------------------------------------------------------------------------

def test_the_report_classifies_the_events_once_and_computes_launch_statistics_once(tmp_path, capsys, monkeypatch):
    """comm, the timeline and the critical path read one classification of the events; count-ops' launch
    statistics are computed once, their launch-bound shares taken from comm's idle time by cause (not by
    classifying the events again)."""
    import rnnprof.analyzers.classify as classify_module
    import rnnprof.analyzers.comm as comm_module
    import rnnprof.analyzers.critical_path.analysis as critical_path_module
    import rnnprof.analyzers.launches as launches_module
    import rnnprof.analyzers.opcount as opcount_module
    import rnnprof.analyzers.run_report as run_report_module

    real = classify_module.classify
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    def refused(*args, **kwargs):
        raise AssertionError("the report computed launch statistics twice")

    for module in (classify_module, comm_module, critical_path_module, run_report_module):
        monkeypatch.setattr(module, "classify", counted)
    monkeypatch.setattr(opcount_module, "launch_stats", refused)
    monkeypatch.setattr(launches_module, "host_wait_shares", refused)
    page = _report(RANKS[:1], tmp_path / "r.html", capsys)  # a trace whose kernels have launch calls
    assert len(calls) == 1
    specs = _specs(page)
    assert {"breakdown", "step-breakdown", "timeline", "opcount", "top-device", "top-host",
            "critical-path"} <= set(specs)
    assert "<h2>Kernel launches</h2>" in page


def test_a_jobs_report_finds_each_steps_critical_path_once(tmp_path, capsys, monkeypatch):
    """A job with a straggler: PF001 reads every step's critical path (its cause's time on the path), the page the
    typical step's; the typical step's path is found once, for both."""
    import rnnprof.job.audit as job_audit

    real = job_audit.path_of_step
    steps = []

    def counted(parts, context, step):
        steps.append(step)
        return real(parts, context, step)

    monkeypatch.setattr(job_audit, "path_of_step", counted)
    page = _report([DATA / "torch-two-faults" / "run"], tmp_path / "r.html", capsys, "--jobs", "1")
    assert "rank1 arrives last at collectives" in page  # PF001, which asked for every step's path
    assert "critical-path" in _specs(page)  # the typical step's
    assert len(steps) > 1 and sorted(steps) == sorted(set(steps)), steps


def test_altair_is_imported_without_format_checkers_it_never_uses():
    """jsonschema imports its optional format checkers with altair; rfc3986_validator builds a large regular
    expression and isoduration imports arrow, which the report's start-up would pay for."""
    probe = ("import sys\nfrom rnnprof.reports.charts import altair\naltair()\n"
             "print(sorted(m for m in ('rfc3987_syntax', 'rfc3986_validator', 'isoduration', 'arrow') "
             "if sys.modules.get(m) is not None))\nprint('jsonschema' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[]", "True"]


# -- refusals ------------------------------------------------------------------------------------------

def test_report_refuses_to_overwrite_and_bad_outputs_in_one_line(tmp_path, capsys):
    existing = tmp_path / "r.html"
    existing.write_text("keep me")
    assert main(["report", str(TF1), "-o", str(existing)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"rnnprof report: error: -o {existing} exists; pass --force to replace it or choose another file name"
    assert existing.read_text() == "keep me"
    assert main(["report", str(TF1), "-o", str(existing), "--force"]) == 0
    assert existing.read_text().startswith("<!DOCTYPE html>")
    capsys.readouterr()
    assert main(["report", str(TF1), "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main(["report", str(TF1), "-o", str(tmp_path / "no" / "r.html")]) == 2
    assert "does not exist" in capsys.readouterr().err
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    assert main(["report", str(garbage), "-o", str(tmp_path / "g.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rnnprof report: error:") and not (tmp_path / "g.html").exists()


def test_a_broken_sweep_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "sweep.json").write_text(json.dumps({"format": "rnnprof-sweep", "rows": []}))
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"rnnprof report: error: {tmp_path / 'sweep.json'}: the sweep has no rows "
                   "(expected a folder written by rnnprof scale --out)"]


@pytest.mark.parametrize("command", [["comm", str(TF1)], ["count-ops", str(TF1)], ["scale", "--devices", "1"]])
def test_plot_needs_a_png_or_svg_name_before_any_work(command, tmp_path, capsys):
    assert main([*command, "--plot", str(tmp_path / "chart.pdf")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("the file name must end in .png or .svg (the image format)") and "\n" not in err


def test_scale_out_refuses_a_folder_that_holds_anything_before_training(tmp_path, capsys):
    (tmp_path / "x").write_text("")
    assert main(["scale", "--devices", "1", "--out", str(tmp_path)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]


# -- --plot on comm and count-ops ----------------------------------------------------------------------

def test_comm_plot_svg_has_a_bar_segment_per_device_and_step(tmp_path, capsys):
    raw = [_kineto(p) for p in RANKS]
    gpus = len({(r, e["args"]["device"]) for r, ev in enumerate(raw) for e in ev if e.get("cat") in GPU_CATS})
    steps = sum(len(_steps(ev)) for ev in raw)
    whole, per_step = tmp_path / "comm.svg", tmp_path / "comm-steps.svg"
    assert main(["comm", *map(str, RANKS), "--plot", str(whole)]) == 0
    assert main(["comm", *map(str, RANKS), "--per-step", "--plot", str(per_step)]) == 0
    capsys.readouterr()
    assert _svg_marks(whole) == {"rect": gpus * SEGMENTS}
    assert _svg_marks(per_step) == {"rect": gpus * SEGMENTS + steps * SEGMENTS}


def test_count_ops_plot_png_and_svg(tmp_path, capsys):
    raw = [_kineto(p) for p in RANKS]
    svg, png = tmp_path / "ops.svg", tmp_path / "ops.png"
    assert main(["count-ops", *map(str, RANKS), "--plot", str(svg)]) == 0
    assert main(["count-ops", *map(str, RANKS), "--plot", str(png)]) == 0
    capsys.readouterr()
    # a bar per device and kernel kind (CPU, GPU): each rank's GPU and its host
    devices = 2 * len(raw)
    assert _svg_marks(svg) == {"rect": devices * 2}
    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 5_000


# -- a real capture and a real sweep (TensorFlow) ------------------------------------------------------

TINY_RNNLM = ["--model", "rnnlm", "--encoder", "fused", "--layers", "1", "--units", "16", "--vocab-size", "50",
              "--src-max-len", "6", "--tgt-max-len", "6", "--batch-size", "4", "--warmup", "2", "--batches", "3"]
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def _rnnprof(*argv: str) -> None:
    done = subprocess.run([sys.executable, "-m", "rnnprof", *argv], capture_output=True, text=True, timeout=600,
                          env=ENV)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def captured_run(tiny_nmt_run):
    return tiny_nmt_run  # a small NMT run in a folder named nmt2, captured once for the session (conftest)


@pytest.mark.slow
def test_report_of_a_real_capture_in_chromium(captured_run, tmp_path, capsys):
    page = tmp_path / "nmt2.html"
    _report([captured_run], page, capsys)
    visit = open_page(page)
    (tmp_path / "nmt2-report.png").write_bytes(visit.screenshot)
    _check_page(visit, "nmt2")
    manifest = json.loads((captured_run / "manifest.json").read_text())
    devices, traced = len(manifest["devices"]), len(manifest["traced_steps"])
    assert visit.marks("breakdown") == {"rect": devices * SEGMENTS}
    assert visit.marks("step-breakdown") == {"rect": devices * traced * SEGMENTS}
    times = manifest["step_times"]
    assert visit.marks("step-times") == {"symbol": len(times["warmup"]) + len(times["timed"])}
    html = page.read_text()
    for heading in ("The run", "Throughput", "Time per device", "Timeline of one step", "Ops", "Placement findings"):
        assert f"<h2>{heading}</h2>" in html
    assert "logical CPU devices sharing" in html  # the shared-cores note
    assert f"{manifest['throughput']['words_per_second']:,.0f}" in html
    assert 'id="left-out"' not in html.split("<h2>Ops</h2>")[0]  # run, throughput, time, timeline all there
    left_out = "".join(re.findall(r'<p class="left-out sub" id="left-out">(.*?)</p>', html))
    assert "Throughput (" not in left_out and "Time per device (" not in left_out


@pytest.mark.slow
def test_scale_out_and_plot_then_report_of_the_sweep(tmp_path, capsys):
    sweep, plot = tmp_path / "sweep", tmp_path / "scaling.svg"
    _rnnprof("scale", *TINY_RNNLM, "--devices", "1,2", "--out", str(sweep), "--plot", str(plot))
    document = json.loads((sweep / "sweep.json").read_text())
    rows = document["rows"]
    assert [r["devices"] for r in rows] == [1, 2]
    assert sorted(p.name for p in (sweep / "configs").iterdir()) == ["replicated-1dev.json", "replicated-2dev.json"]
    saved = json.loads((sweep / "configs" / "replicated-2dev.json").read_text())
    assert saved["config"]["devices"] == 2 and saved["result"] == rows[1]
    # measured line + ideal line, one point per configuration
    assert _svg_marks(plot) == {"line": 2, "symbol": len(rows)}
    page = tmp_path / "sweep.html"
    _report([sweep], page, capsys)
    visit = open_page(page)
    (tmp_path / "sweep-report.png").write_bytes(visit.screenshot)
    _check_page(visit, "sweep")
    assert visit.marks("scaling") == {"line": 2, "symbol": len(rows)}
    steps = sum(len(r["warmup_step_seconds"]) + len(r["step_seconds"]) for r in rows)
    assert visit.marks("warmup") == {"symbol": steps}
    assert f"{rows[1]['speedup']:.2f}x" in page.read_text()
