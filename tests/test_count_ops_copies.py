"""Copies by kind and CUDA/HIP graph launches (rnnprof.analyzers.copies) in count-ops, comm and diff, against
counts made here from the raw JSON: copy kinds from the Kineto memcpy names (or TF's MEMCPY op), steps from the
ProfilerStep ranges, a GPU event's step from the runtime call with its correlation id."""

import functools
import json
import re
from collections import Counter, defaultdict

import pytest
from rich.console import Console

from fixtures import FIXTURES
from rnnprof.cli import main
from test_loaders import raw_events

PAIR_A = FIXTURES / "kineto-8rank-rank3-a100.json.gz"
PAIR_B = FIXTURES / "kineto-2rank-rank1-v100-cudagraph.json.gz"
HIPGRAPH = FIXTURES / "kineto-mi300x-hipgraph.json.gz"
TF1_GPU_LOOP = FIXTURES / "tf1-timeline-gpu-loop-step0.json"


def cli(command, *args, width=10_000):
    console = Console(record=True, width=width)
    with console.capture() as capture:
        assert main([command, *map(str, args)], console=console) == 0
    return capture.get()


def cli_json(command, *args):
    return json.loads(cli(command, "--json", *args))


def shown(value: float) -> str:
    """A per-step mean as the tables print it: whole numbers without decimals."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


@functools.cache
def raw_copies_and_graphs(path):
    """From the raw Kineto JSON: the step numbers, and per step (None: no step markers) a Counter of copies
    ``(kind, "count" | "bytes" | "us")`` and of ``graph launches`` / ``graph kernels`` / ``gpu kernels``
    (worked out once a trace for the module's tests, which only read it)."""
    events = [e for e in raw_events(path) if e.get("ph") == "X"]
    marks = [(e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1])) for e in events
             if re.fullmatch(r"ProfilerStep#\d+", e.get("name", "")) and e.get("cat") != "gpu_user_annotation"]

    def step_at(ts):
        if not marks:
            return None
        return next((n for start, end, n in marks if start <= ts < end), "outside")

    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}
    graph_calls = {c for c, e in calls.items() if e["name"] in ("cudaGraphLaunch", "hipGraphLaunch")}
    out = defaultdict(Counter)
    for e in events:
        cat, args = e.get("cat"), e.get("args", {})
        if cat in ("cuda_runtime", "cuda_driver") and e["name"] in ("cudaGraphLaunch", "hipGraphLaunch"):
            out[step_at(e["ts"])]["graph launches"] += 1
        if cat not in ("kernel", "gpu_memcpy"):
            continue
        call = calls.get(args.get("correlation"))
        # the step of its launch call; without its call in the trace, in no step
        step = step_at(call["ts"]) if call is not None else (None if not marks else "outside")
        if cat == "gpu_memcpy":
            kind = e["name"].split()[1]  # "Memcpy DtoD (Device -> Device)"
            assert kind == args.get("kind", kind)  # ROCm also writes it as an arg
            out[step][(kind, "count")] += 1
            out[step][(kind, "bytes")] += args.get("bytes", 0)
            out[step][(kind, "us")] += e["dur"]
        else:
            out[step]["gpu kernels"] += 1
            if args.get("correlation") in graph_calls:
                out[step]["graph kernels"] += 1
    return sorted(n for _, _, n in marks), out


def _check_against_raw(copies, steps, raw):
    assert copies["steps"] == (steps or [-1])
    assert copies["outside_steps"] == sum(v for k, v in raw.get("outside", Counter()).items()
                                          if k in ("graph launches", "gpu kernels") or k[1:] == ("count",))
    for step in steps or [None]:
        expected = raw[step]
        got = copies["per_step"][str(-1 if step is None else step)]
        kinds = {k for k, _ in (key for key in expected if isinstance(key, tuple))}
        assert set(got["copies"]) == kinds
        for kind in kinds:
            c = got["copies"][kind]
            assert (c["count"], c["bytes"]) == (expected[(kind, "count")], expected[(kind, "bytes")])
            assert c["time_us"] == pytest.approx(expected[(kind, "us")])
        g = got["graphs"]
        assert (g["launches"], g["kernels"], g["all_gpu_kernels"]) == (
            expected["graph launches"], expected["graph kernels"], expected["gpu kernels"])


def test_count_ops_counts_copy_kinds_and_graph_launches_per_step_as_the_raw_json_says():
    steps, raw = raw_copies_and_graphs(PAIR_B)
    assert len(steps) == 6
    doc = cli_json("count-ops", PAIR_B)["copies"]
    _check_against_raw(doc, steps, raw)
    # what changed in this trace: ~774 device-to-device copies and ~45% of the kernels through graphs per step
    dtod = sum(raw[s][("DtoD", "count")] for s in steps)
    assert doc["total"]["copies"]["DtoD"]["count"] == dtod
    assert doc["per_step_mean"]["copies"]["DtoD"]["count"] == pytest.approx(dtod / 6)
    graph_kernels = sum(raw[s]["graph kernels"] for s in steps)
    all_kernels = sum(raw[s]["gpu kernels"] for s in steps)
    assert doc["total"]["graphs"]["kernel_share"] == pytest.approx(graph_kernels / all_kernels)
    assert 0.4 < graph_kernels / all_kernels < 0.5
    assert doc["graph_launch_names"] == ["cudaGraphLaunch"]
    text = cli("count-ops", PAIR_B)
    assert re.search(r"rank1/gpu:1\s+DtoD\s+" + re.escape(shown(dtod / 6)), text)
    assert f"{graph_kernels / 6:,.0f} GPU kernels per step ({graph_kernels:,} in all" in text


def test_hip_graph_launch_and_its_kernels_without_step_markers():
    steps, raw = raw_copies_and_graphs(HIPGRAPH)
    assert steps == [] and raw[None]["graph launches"] == 1 and raw[None]["graph kernels"] > 400
    doc = cli_json("count-ops", HIPGRAPH)["copies"]
    _check_against_raw(doc, steps, raw)
    assert doc["graph_launch_names"] == ["hipGraphLaunch"]
    assert "Graph launches (hipGraphLaunch)" in cli("count-ops", HIPGRAPH)


def test_comm_reports_the_same_copies_per_step():
    steps, raw = raw_copies_and_graphs(PAIR_B)
    doc = cli_json("comm", "--per-step", PAIR_B)["copies"]
    _check_against_raw(doc, steps, raw)
    assert "per_step" not in cli_json("comm", PAIR_B)["copies"]  # per-step figures only with --per-step
    text = cli("comm", "--per-step", PAIR_B)
    assert "Copies by kind per step" in text and "Copies and graph launches in each step" in text


def test_a_selection_counts_the_copies_of_the_selected_steps():
    steps, raw = raw_copies_and_graphs(PAIR_B)
    doc = cli_json("count-ops", "--steps", "1010:1012", PAIR_B)["copies"]
    assert doc["steps"] == [1010, 1011, 1012]
    assert doc["total"]["copies"]["DtoD"]["count"] == sum(raw[s][("DtoD", "count")] for s in (1010, 1011, 1012))
    assert doc["total"]["graphs"]["kernels"] == sum(raw[s]["graph kernels"] for s in (1010, 1011, 1012))


def test_tf_copy_kinds_come_from_the_memcpy_lane_ops():
    with open(TF1_GPU_LOOP) as f:
        events = json.load(f)["traceEvents"]
    lanes = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
             and e["args"]["name"].endswith("/memcpy Compute")}
    expected = Counter()
    for e in events:
        if e.get("ph") == "X" and e["pid"] in lanes:
            op = e.get("args", {}).get("op", "")
            expected[op[len("MEMCPY"):] if op.startswith("MEMCPY") else "other"] += 1
    assert expected["HtoD"] and expected["DtoH"]
    doc = cli_json("count-ops", TF1_GPU_LOOP)["copies"]
    assert {k: c["count"] for k, c in doc["total"]["copies"].items()} == dict(expected)
    assert all(c["copies_without_bytes"] == c["count"] for c in doc["total"]["copies"].values())


def test_diff_names_the_copy_kinds_and_graph_launches_that_changed_most():
    steps_a, raw_a = raw_copies_and_graphs(PAIR_A)
    steps_b, raw_b = raw_copies_and_graphs(PAIR_B)
    dtod_a = sum(raw_a[s][("DtoD", "count")] for s in steps_a) / len(steps_a)
    dtod_b = sum(raw_b[s][("DtoD", "count")] for s in steps_b) / len(steps_b)
    ms_a = sum(raw_a[s][("DtoD", "us")] for s in steps_a) / len(steps_a) / 1000
    ms_b = sum(raw_b[s][("DtoD", "us")] for s in steps_b) / len(steps_b) / 1000
    assert (dtod_a, round(dtod_b)) == (3, 768)  # B's 37 DtoD copies with no launch in the trace are in no step
    doc = cli_json("diff", "--top", "0", PAIR_A, PAIR_B)["copies"]
    kinds = {k["kind"]: k for k in doc["kinds"]}
    assert (kinds["DtoD"]["count_a_per_step"], kinds["DtoD"]["count_b_per_step"]) == pytest.approx((dtod_a, dtod_b))
    assert kinds["DtoD"]["notable"] and not kinds["DtoH"]["notable"]
    assert set(doc["notable"]) == {"DtoD", "graph launches"}
    graphs = doc["graphs"]
    assert (graphs["launches_a_per_step"], graphs["kernels_b_per_step"]) == pytest.approx(
        (0, sum(raw_b[s]["graph kernels"] for s in steps_b) / len(steps_b)))
    text = cli("diff", PAIR_A, PAIR_B)
    line = f"DtoD copies: 3 -> {shown(dtod_b)} per step"
    assert line in text and f"{ms_a:,.3f} -> {ms_b:,.3f} ms per step" in text
    # among the first things a user reads: under the step time, before the tables
    assert text.index(line) < text.index("Time per device")
    assert text.index("cudaGraphLaunch: 0 -> 2 per step") < text.index("Time per device")
    # count-ops B --vs A shows the same per-step counts as ratios
    ratios = {r["metric"]: r for r in cli_json("count-ops", PAIR_B, "--vs", PAIR_A)["ratios"]}
    assert (ratios["DtoD copies per step"]["right"], ratios["DtoD copies per step"]["left"]) == pytest.approx(
        (dtod_a, dtod_b))


def test_an_input_against_itself_has_no_notable_copy_change():
    doc = cli_json("diff", PAIR_B, PAIR_B)
    assert doc["identical"] is True and doc["copies"]["notable"] == []


def test_a_graphs_work_belongs_to_the_step_of_its_launch_whatever_step_the_table_gave_it():
    """A table whose GPU events carry no step (-1), or another step than their launch: a graph's kernels and
    copies count in the step of the cudaGraphLaunch with their correlation id, within the launch's worker."""
    from rnnprof.analyzers.copies import count_copies
    from rnnprof.events import Device, EventTableBuilder, Kind

    b = EventTableBuilder("kineto")
    for rank, launch_step in (("rank0", 5), ("rank1", 6)):
        host, gpu = Device("host", 0, rank), Device("gpu", 0, rank)
        b.add(0, 100, "ProfilerStep#5", "ProfilerStep#5", host, "1", Kind.ANNOTATION, step=5)
        b.add(100, 100, "ProfilerStep#6", "ProfilerStep#6", host, "1", Kind.ANNOTATION, step=6)
        start = 10 if launch_step == 5 else 110
        b.add(start, 5, "cudaGraphLaunch", "cudaGraphLaunch", host, "1", Kind.RUNTIME, step=launch_step, correlation=7)
        for k in range(3):  # the graph's kernels run after the step's range: the table gives them no step
            b.add(250 + k, 1, "gemm", "gemm", gpu, "stream:7", Kind.KERNEL, step=-1, correlation=7)
        b.add(260, 2, "Memcpy DtoD (Device -> Device)", "Memcpy DtoD (Device -> Device)", gpu, "stream:7",
              Kind.MEMCPY, step=6 if launch_step == 5 else 5, correlation=7, nbytes=64)
        b.add(270, 1, "Memcpy PtoP (Device -> Device)", "Memcpy PtoP (Device -> Device)", gpu, "stream:7",
              Kind.MEMCPY, step=launch_step, correlation=-1, nbytes=-1)
    report = count_copies(b.build())
    assert report.steps == (5, 6)
    by_device = {d.device: d for d in report.devices}
    for rank, step, other in (("rank0", 5, 6), ("rank1", 6, 5)):
        gpu = by_device[f"{rank}/gpu:0"]
        assert gpu.graphs_per_step[step].launches == 1 and gpu.graphs_per_step[step].kernels == 3
        assert gpu.graphs_per_step[step].other_work == 1 and gpu.graphs_per_step[other].kernels == 0
        assert gpu.per_step[step]["DtoD"].count == 1 and "DtoD" not in gpu.per_step[other]
        assert gpu.per_step[step]["PtoP"].unknown_bytes == 1 and gpu.per_step[step]["DtoD"].bytes == 64
    assert report.graphs.kernel_share == 1.0 and report.outside_steps == 0


def test_the_graph_kernels_definition_says_what_the_share_is_of(capsys):
    """The last line of count-ops' definitions reads as a sentence naming the share's denominator."""
    assert main(["count-ops", str(PAIR_B)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    line = out[out.index("graph kernels:"):]
    assert "= of" not in line and "(count-ops')" not in line
    assert "their share is of every GPU kernel in the same steps" in line
