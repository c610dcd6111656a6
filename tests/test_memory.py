"""rnnprof's memory analysis: invariants from the raw JSON of every real trace with allocator records, and the
analysis's rules on small tables made here."""

import gzip
import re
import json
from pathlib import Path

import numpy as np
import pytest

from fixtures import FIXTURES
from rnnprof.analyzers.memory import analyze_memory
from rnnprof.events import Device, EventTableBuilder, Kind
from rnnprof.events.memory import memory_records
from rnnprof.traces import load_events


def _with_memory() -> list[Path]:
    """Every trace in tests/data that holds ``[memory]`` events (found by reading them, not listed by hand)."""
    found = []
    for path in sorted(FIXTURES.glob("*.json*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            if b'"[memory]"' in f.read():
                found.append(path)
    return found


MEMORY_TRACES = _with_memory()


def test_the_real_traces_with_memory_events_are_found():
    """NVIDIA and AMD traces (TraceLens's H100 and MI300X) and a rank of HTA's 2-GPU V100 training."""
    names = {p.name for p in MEMORY_TRACES}
    assert {"kineto-h100-bert-small-shapes.json.gz", "kineto-h100-vit-shapes.json.gz",
            "kineto-h100-qwen-shapes.json.gz", "kineto-mi300x-vit-shapes.json.gz", "kineto-mi300x-qwen-shapes.json.gz",
            "kineto-normalization-shapes.json.gz", "kineto-2rank-rank1-v100-memory.json.gz"} <= names


def test_each_steps_gpu_peak_is_the_caching_allocators_own_maximum():
    """rnnprof's H200 capture of benchmarks/gpu_checks.py: the script read torch.cuda.max_memory_allocated()
    at the end of each step, after reset_peak_memory_stats() at its start (h200-gpu-checks-clock.json)."""
    clock = json.loads((FIXTURES / "h200-gpu-checks-clock.json").read_text())
    allocator = {r["step"]: r["max_allocated"] for r in clock["steps"]}
    result = analyze_memory(load_events(str(FIXTURES / "kineto-h200-gpu-checks.json.gz")))
    gpu = next(d for d in result.devices if d.device.endswith("gpu:0"))
    peaks = dict(gpu.step_peaks)
    assert sorted(peaks) == [3, 4, 5, 6]
    for step, peak in peaks.items():
        assert peak == allocator[step], (step, peak, allocator[step])


def _raw_series(path: Path) -> dict[str, dict]:
    """From the file alone: per device (labelled as rnnprof labels it), the records in time order: their times,
    the running sum from the first record's Total Allocated less its Bytes, the allocator's own Total Allocated
    (from 0 for a CPU, whose total counts only what profiling saw, as rnnprof's CPU series does) and Total
    Reserved, and each record's step (the host's ``ProfilerStep#N`` range holding its time, -1: none)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    events = [e for e in doc["traceEvents"] if e.get("name") == "[memory]" and e.get("ph") == "i"]
    events.sort(key=lambda e: e["ts"])  # a stable sort: file order among equal times
    steps = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1])) for e in doc["traceEvents"]
                   if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
                   and e.get("cat") != "gpu_user_annotation")  # the host's ranges, not their GPU spans
    rank = doc.get("distributedInfo", {}).get("rank")
    worker = f"rank{rank}/" if rank is not None else ""  # a rank's trace: its devices named with the rank
    by_device: dict[str, list] = {}
    for e in events:
        a = e["args"]
        label = worker + ("host" if a["Device Type"] == 0 else f"gpu:{a['Device Id']}")
        by_device.setdefault(label, []).append(e)
    out = {}
    for label, records in by_device.items():
        args = [e["args"] for e in records]
        base = args[0]["Total Allocated"] - args[0]["Bytes"]
        running = base + np.cumsum([r["Bytes"] for r in args])
        total = np.array([r["Total Allocated"] for r in args])
        zero = base if label.endswith("host") else 0
        out[label] = {"running": running, "from_zero": running - zero, "total": total,
                      "allocator": total - zero, "ts": np.array([e["ts"] for e in records]),
                      "step": np.array([next((n for a, b, n in steps if a <= e["ts"] < b), -1) for e in records]),
                      "reserved": np.array([r["Total Reserved"] for r in args])}
    return out


@pytest.mark.parametrize("path", MEMORY_TRACES, ids=lambda p: p.name)
def test_invariants_from_the_raw_json(path, capsys):
    """``rnnprof memory --json`` on the trace against the file's own ``[memory]`` events: its allocated bytes at
    every moment it reports against the allocator's own count there (Total Allocated, which rnnprof's series
    sums the records' Bytes to reach, not reads)."""
    from rnnprof.cli import main

    raw = _raw_series(path)
    assert main(["memory", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    analysed = {d["device"]: d for d in doc["devices"]}
    assert set(analysed) == set(raw)
    for label, series in raw.items():
        device, peak = analysed[label], analysed[label]["peak"]
        assert device["mismatches"] == 0 and device["records"] == len(series["running"])
        # allocated at each moment of the timeline is the allocator's own total after a record of that moment
        assert device["timeline"]
        for point in device["timeline"]:
            at = series["allocator"][series["ts"] == point["ts_us"]]
            assert sum(point["bytes"]) in set(at.tolist()), (label, point["ts_us"], sum(point["bytes"]), at)
        # the peak is the allocator's largest total, and the running sum of the records reaches it too
        assert peak["allocated"] == series["allocator"].max() == series["from_zero"].max()
        # each step's peak and end: the allocator's largest total in the step's range, its total after the last
        stepped = series["step"] >= 0
        assert [tuple(p) for p in device["step_peaks"]] == [
            (n, int(series["allocator"][series["step"] == n].max())) for n in np.unique(series["step"][stepped])]
        if not device["growth"]["reason"]:
            assert [tuple(p) for p in device["growth"]["step_end"]] == [
                (n, int(series["allocator"][series["step"] == n][-1])) for n in np.unique(series["step"][stepped])]
        if (series["reserved"] > 0).any():
            assert device["peak_reserved"] == series["reserved"].max()
            assert peak["reserved"] == series["reserved"][int(np.argmax(series["running"]))]
        # categories, and operators, add up to the total at the peak
        assert sum(s["bytes"] for s in peak["by_category"]) == peak["allocated"]
        assert sum(s["bytes"] for s in peak["by_operator"]) == peak["allocated"]
    assert doc["unusable"] == 0


def test_memory_records_leave_every_event_column_unchanged(tmp_path):
    """The loader reads the [memory] events beside the events; the events and devices are as without them."""
    path = FIXTURES / "kineto-h100-bert-small-shapes.json.gz"
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "[memory]"]
    table = load_events(path)
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(doc))
    without = load_events(plain)
    assert len(without.memory) == 0 and len(table.memory) == 236
    assert table.devices == without.devices
    for column in table.COLUMNS:  # strings by their text: codes follow the order the stream's pieces met them
        if column in ("name", "op_type", "lane"):
            assert (table.text(getattr(table, column)) == without.text(getattr(without, column))).all(), column
        else:
            assert np.array_equal(getattr(table, column), getattr(without, column)), column


def _table(records, ops=(), steps=()):
    """A CPU table: host operators ``(name, ts, dur)``, step markers ``(n, ts, dur)`` and memory records
    ``(ts, bytes, addr)`` on thread 1 of ``cpu:0``."""
    b = EventTableBuilder("test")
    cpu = Device("cpu", 0)
    for name, ts, dur in ops:
        b.add(ts, dur, name, name, cpu, "1", Kind.HOST_OP)
    step_of = {}
    for n, ts, dur in steps:
        b.add(ts, dur, f"ProfilerStep#{n}", "", cpu, "1", Kind.ANNOTATION, step=n)
        step_of[n] = (ts, ts + dur)
    code = b.device_code(cpu)
    lane = b.strings.code("1")
    ts = [r[0] for r in records]
    running = np.cumsum([r[1] for r in records])
    step = [next((n for n, (s, e) in step_of.items() if s <= t < e), -1) for t in ts]
    b.memory = memory_records(ts=ts, device=[code] * len(ts), lane=[lane] * len(ts), nbytes=[r[1] for r in records],
                              addr=[r[2] for r in records], total_allocated=running, total_reserved=[0] * len(ts),
                              step=step)
    return b.build()


def test_a_leak_is_growth_per_step_and_a_steady_run_is_none():
    mb = 1 << 20
    steps = [(n, 100 * n, 100) for n in range(6)]
    leak, steady = [], []
    for n in range(6):
        t = 100 * n
        leak += [(t + 10, 3 * mb, 1000 + n), (t + 20, -3 * mb, 1000 + n), (t + 30, mb, 5000 + n)]
        steady += [(t + 10, 3 * mb, 1000 + n), (t + 20, -3 * mb, 1000 + n)]
    grew = analyze_memory(_table(leak, steps=steps)).devices[0].growth
    assert grew.leak and grew.per_step == mb and grew.jitter == 0
    kept = analyze_memory(_table(steady, steps=steps)).devices[0].growth
    assert not kept.leak and kept.per_step == 0


def test_a_first_step_that_makes_state_is_no_leak():
    mb = 1 << 20
    steps = [(n, 100 * n, 100) for n in range(5)]
    records = [(5, 4 * mb, 1)]  # optimizer state made once
    for n in range(5):
        records += [(100 * n + 10, mb, 100 + n), (100 * n + 20, -mb, 100 + n)]
    assert not analyze_memory(_table(records, steps=steps)).devices[0].growth.leak


def test_temporaries_and_operators_at_the_peak():
    records = [(1, 100, 1), (2, 50, 2), (3, -50, 2), (11, 30, 3), (12, 1000, 4), (13, -1000, 4)]
    table = _table(records, ops=[("aten::linear", 0, 5), ("aten::relu", 10, 5)], steps=[(0, 0, 20)])
    peak = analyze_memory(table).devices[0].peak
    assert peak.allocated == 1130 and peak.operator == "aten::relu" and peak.step == 0
    assert {s.name: s.bytes for s in peak.by_category} == {"temporary": 1000, "activation": 130}
    assert {s.name: s.bytes for s in peak.by_operator} == {"aten::relu": 1030, "aten::linear": 100}


def test_the_command_on_a_trace_without_memory_events_says_how_to_record_them(capsys):
    from rnnprof.cli import main

    assert main(["memory", str(FIXTURES / "torch-gloo-rank0.json.gz")]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1
    assert "profile_memory=True" in out.err


def test_the_command_prints_the_peak_and_plots_it(tmp_path, capsys):
    from rnnprof.cli import main

    plot = tmp_path / "memory.svg"
    path = FIXTURES / "kineto-h100-vit-shapes.json.gz"
    assert main(["memory", str(path), "--plot", str(plot)]) == 0
    text = capsys.readouterr().out
    peak = _raw_series(path)["gpu:0"]["running"].max()
    assert f"{peak / 1e6:,.2f}" in text and "aten::gelu" in text
    assert plot.stat().st_size > 1000 and b"<svg" in plot.read_bytes()[:200]


def test_the_html_report_has_the_memory_section_and_chart(tmp_path):
    from rnnprof.cli import main

    out = tmp_path / "report.html"
    path = FIXTURES / "kineto-h100-vit-shapes.json.gz"
    assert main(["report", str(path), "-o", str(out)]) == 0
    html = out.read_text()
    section = html[html.index("Memory</h2>"):]
    peak = _raw_series(path)["gpu:0"]["running"].max()
    assert f"{peak / 1e6:,.2f}" in section[:3000]
    assert '"data":{"name":"memory"}' in section and '"category":"activation"' in section


def test_tensorflow_allocation_records_become_memory_records_with_their_node():
    """Step stats as TensorFlow writes them (built here with its protos): each node's allocation records, an
    allocation and its free, and a free of what an earlier step allocated."""
    from tensorboard.compat.proto import step_stats_pb2

    from rnnprof.rundir.chrome_trace import step_stats_to_chrome
    from rnnprof.traces.tf_chrome import load_doc

    stats = step_stats_pb2.StepStats()
    for index, node_name, records in ((0, "tower_0/MatMul", [(100, 4096), (180, -4096), (150, -64)]),
                                      (1, "tower_1/MatMul", [(110, 4096)])):
        dev = stats.dev_stats.add(device=f"/job:localhost/replica:0/task:0/device:CPU:{index}")
        node = dev.node_stats.add(node_name=node_name, all_start_micros=90, all_end_rel_micros=20,
                                  timeline_label=f"{node_name} = MatMul(a, b)")
        used = node.memory.add(allocator_name="cpu")
        for micros, size in records:
            used.allocation_records.add(alloc_micros=micros, alloc_bytes=size)
    table = load_doc(Path("step-3.trace.json"), step_stats_to_chrome(stats, 3), "rnnprof")
    mem = table.memory
    assert len(mem) == 4 and mem.unusable == 0
    assert list(mem.nbytes) == [4096, 4096, -64, -4096]  # in time order
    assert [table.strings[c] for c in mem.operator] == ["tower_0/MatMul", "tower_1/MatMul", "tower_0/MatMul",
                                                        "tower_0/MatMul"]
    assert mem.addr[0] == mem.addr[3] != mem.addr[1] and mem.addr[2] == -1 and set(mem.step) == {3}
    report = analyze_memory(table)
    peaks = {d.device: d.peak for d in report.devices}
    assert peaks["cpu:0"].allocated == 4096 and peaks["cpu:1"].allocated == 4096
    assert peaks["cpu:0"].by_operator[0].name == "tower_0/MatMul"


def test_the_manifest_gives_each_ranks_memory_at_the_window_start():
    from rnnprof.events import Manifest

    manifest = Manifest.from_dict({"ranks": [
        {"rank": 0, "memory": {"profile_memory": True, "baseline": {"source": "process_rss", "allocated": 5000,
                                                                    "reserved": None},
                               "max_allocated": None, "max_reserved": None}},
        {"rank": 1, "memory": "not a record"}]})
    (memory,) = manifest.rank_memory.values()
    assert list(manifest.rank_memory) == ["rank0"]
    assert memory.profile_memory and memory.baseline_source == "process_rss" and memory.baseline_allocated == 5000
    assert memory.max_allocated is None


def _gpu_table(reserved: int):
    """One GPU: 100 MB allocated then freed, the allocator reserving ``reserved`` bytes; its memory size 1 GB."""
    b = EventTableBuilder("test")
    gpu, host = Device("gpu", 0), Device("host")
    b.add(0, 10, "aten::empty", "aten::empty", host, "1", Kind.HOST_OP)
    b.add(0, 10, "kernel", "kernel", gpu, "stream:7", Kind.KERNEL)
    code, lane = b.device_code(gpu), b.strings.code("1")
    b.memory = memory_records(ts=[1, 2], device=[code, code], lane=[lane, lane], nbytes=[100_000_000, -100_000_000],
                              addr=[5, 5], total_allocated=[100_000_000, 0], total_reserved=[reserved, reserved],
                              step=[-1, -1])
    b.metadata.devices_properties = ({"id": 0, "totalGlobalMem": 1_000_000_000},)
    return b.build()


def test_reserved_but_unused_memory_is_a_finding_in_bytes_with_the_headroom():
    from rnnprof.analyzers.audit import audit

    found = [f for f in audit(_gpu_table(300_000_000)).findings if f.rule == "PF010"]
    (finding,) = found
    assert finding.evidence["freed_at_peak_bytes"] == 200_000_000 and finding.saving_us is None
    assert finding.evidence["headroom_bytes"] == 700_000_000
    assert finding.evidence["headroom_after_bytes"] == 900_000_000
    assert not [f for f in audit(_gpu_table(110_000_000)).findings if f.rule == "PF010"]


def _two_devices(peaks0, peaks1, tensors=None):
    """A CPU table of ``cpu:0`` and ``cpu:1``: in step n each device allocates, then frees, its n-th bytes of
    ``peaks0`` / ``peaks1`` (so its step peak is that figure). ``tensors``: instead, for each device its tensors of
    every step, ``(start, end, bytes)`` within the step's 100 us, recorded as TensorFlow's step stats are (each
    named by its node, each step apart)."""
    b = EventTableBuilder("test")
    cpus = [Device("cpu", 0), Device("cpu", 1)]
    steps = len(peaks0) if tensors is None else tensors[2]
    for n in range(steps):
        b.add(100 * n, 100, f"ProfilerStep#{n}", "", cpus[0], "1", Kind.ANNOTATION, step=n)
    codes = [b.device_code(c) for c in cpus]
    lane = b.strings.code("1")
    node = b.strings.code("tower_0/MatMul")
    rows = []
    for n in range(steps):
        for d in (0, 1):
            made = [(10 + d, 50 + d, (peaks0, peaks1)[d][n])] if tensors is None else tensors[d]
            for k, (start, end, nbytes) in enumerate(made):
                addr = 1000 * n + 10 * k + d
                rows += [(100 * n + start, codes[d], nbytes, addr, n), (100 * n + end, codes[d], -nbytes, addr, n)]
    ts, device, nbytes, addr, step = (list(c) for c in zip(*rows))
    b.memory = memory_records(ts=ts, device=device, lane=[lane] * len(ts), nbytes=nbytes, addr=addr,
                              total_allocated=[0] * len(ts), total_reserved=[0] * len(ts), step=step,
                              operator=[-1 if tensors is None else node] * len(ts))
    return b.build()


def test_an_imbalance_is_judged_by_the_median_step_with_the_device_above_in_every_step():
    mb = 1 << 20
    # 3 steps 30 % above the other device and one 2 % above (under the 5 % share): the median step decides
    (found,) = analyze_memory(_two_devices([13 * mb, 13 * mb, 102 * mb // 10, 13 * mb], [10 * mb] * 4)).imbalances
    assert found.device == "cpu:0" and found.excess == 3 * mb and found.others_median == 10 * mb
    assert found.threshold == int(0.05 * 10 * mb)
    # 50 % above in 3 steps but below the other device in one: which device stands higher is not settled
    assert analyze_memory(_two_devices([15 * mb, 15 * mb, 15 * mb, 9 * mb], [10 * mb] * 4)).imbalances == ()
    # above in every step, but the median step only 4 % above: within the share
    assert analyze_memory(_two_devices([104 * mb // 10, 104 * mb // 10, 13 * mb, 101 * mb // 10],
                                       [10 * mb] * 4)).imbalances == ()
    # balanced: neither device
    assert analyze_memory(_two_devices([10 * mb] * 4, [10 * mb] * 4)).imbalances == ()


def test_on_steps_recorded_apart_a_peak_from_the_order_alone_is_no_imbalance():
    mb = 1 << 20
    apart, together = [(10, 20, 5 * mb), (30, 40, 4 * mb)], [(10, 40, 5 * mb), (20, 30, 4 * mb)]
    # the same tensors on both devices, alive together only on cpu:1: its peak 80 % above in every step, by the
    # order its operators ran in; what each allocates in a step is the same
    report = analyze_memory(_two_devices(None, None, (apart, together, 4)))
    assert [d.peak.allocated for d in report.devices] == [5 * mb, 9 * mb]
    assert report.imbalances == ()
    # cpu:0 also runs another replica's 5 MB operator each step, alive with its own: placed there
    (found,) = analyze_memory(_two_devices(None, None, (apart + [(15, 25, 5 * mb)], apart, 4))).imbalances
    assert found.device == "cpu:0" and found.allocates_more == 5 * mb and found.excess == 5 * mb
    # placed there but never alive with the rest: the peak stands no higher, and no imbalance is said
    assert analyze_memory(_two_devices(None, None, (apart + [(50, 60, 5 * mb)], apart, 4))).imbalances == ()


def test_an_imbalance_that_starts_mid_window_is_judged_from_the_step_it_starts_at():
    mb = 1 << 20
    # cpu:0 takes 8 MB at step 2 and keeps it: equal before, 8 MB above in the 4 steps from it
    (found,) = analyze_memory(_two_devices([10 * mb] * 2 + [18 * mb] * 4, [10 * mb] * 6)).imbalances
    assert (found.device, found.from_step, found.last_step) == ("cpu:0", 2, 5)
    assert found.excess == 8 * mb and found.taken == 8 * mb
    # every device took it at step 2: no device stands above the others
    assert analyze_memory(_two_devices([10 * mb] * 2 + [18 * mb] * 4, [10 * mb] * 2 + [18 * mb] * 4)).imbalances == ()
    # above from step 4 on only: 2 steps are too few to tell a kept buffer from a passing one
    assert analyze_memory(_two_devices([10 * mb] * 4 + [18 * mb] * 2, [10 * mb] * 6)).imbalances == ()
    # above in the last 4 steps, by 4 % of the others' median: within the share
    assert analyze_memory(_two_devices([10 * mb] * 2 + [104 * mb // 10] * 4, [10 * mb] * 6)).imbalances == ()
    # 30 % above in every step but one in the middle: the step from which it stands above took nothing
    assert analyze_memory(_two_devices([13 * mb] * 2 + [9 * mb] + [13 * mb] * 3, [10 * mb] * 6)).imbalances == ()


HELD = FIXTURES / "torch-memory-held-from-step5"


def test_a_buffer_one_rank_takes_mid_window_and_keeps_is_named_with_its_step_operator_and_size(capsys):
    """rnnprof trace of a 2-rank gloo job over steps 3-10 whose rank 0 takes a 64 MiB buffer (torch.ones) at step 5
    and keeps it (tests/data/make_torch_memory_held_trace.py): its size, step and rank are the script's own
    account of the buffer (planted-rank<r>.json), not rnnprof's."""
    from rnnprof.cli import main

    planted = {r: json.loads((HELD / f"planted-rank{r}.json").read_text()) for r in (0, 1)}
    assert planted[0]["took"] and not planted[1]["took"]
    size, step = planted[0]["bytes"], planted[0]["step"]
    run = str(HELD / "run")
    assert main(["memory", run, "--json"]) == 0
    (found,) = json.loads(capsys.readouterr().out)["imbalances"]
    assert found["device"] == "rank0/cpu:0" and found["from_step"] == step and found["last_step"] == 10
    assert abs(found["taken"] - size) <= 0.05 * size and abs(found["excess"] - size) <= 0.05 * size
    assert found["operators"][0]["name"] == "aten::ones"
    assert abs(found["operators"][0]["bytes"] - size) <= 0.05 * size
    assert main(["memory", run]) == 0
    text = " ".join(capsys.readouterr().out.split())
    said = re.search(r"imbalance: rank0/cpu:0 .* from step (\d+) to step 10: it took ([\d.,]+) MB at step (\d+) and "
                     r"kept it; most of it: aten::ones", text)
    assert said and int(said[1]) == int(said[3]) == step
    assert abs(float(said[2].replace(",", "")) * 1e6 - size) <= 0.05 * size
    assert main(["audit", run, "--json", "--fail-on", "never"]) == 0
    findings = json.loads(capsys.readouterr().out)["findings"]
    (finding,) = [f for f in findings if f["rule"] in ("PF008", "PF009", "PF010")]
    assert finding["rule"] == "PF008" and finding["subject"] == {**finding["subject"], "rank": "rank0",
                                                                 "device": "rank0/cpu:0", "op": "aten::ones"}
    assert finding["evidence"]["from_step"] == step and f"at step {step} and kept it" in finding["title"]
    assert abs(finding["evidence"]["taken_bytes"] - size) <= 0.05 * size
    assert abs(finding["evidence"]["freed_at_peak_bytes"] - size) <= 0.05 * size


def _memory_inputs() -> list[Path]:
    """Every input in tests/data that holds allocator records, as the commands take it: each run directory (its
    ranks together), each trace file outside one."""
    runs = sorted(p.parent for p in FIXTURES.rglob("manifest.json"))
    found = []
    for path in [*runs, *sorted(FIXTURES.rglob("*.json*"))]:
        if path.is_file() and any(run in path.parents for run in runs):
            continue
        files = sorted(path.rglob("*.json*")) if path.is_dir() else [path]
        for f in files:
            with (gzip.open if f.suffix == ".gz" else open)(f, "rb") as stream:
                if b'"[memory]"' in stream.read():
                    found.append(path)
                    break
    return found


def test_no_memory_rule_fires_on_an_input_without_a_planted_fault():
    """PF008 (imbalance) and PF009 (growth) over every input with allocator records in tests/data: the balanced
    gloo runs, the single GPU ranks, TensorFlow's two replicas (whose peaks move with the order its executor ran
    operators in); only the planted buffer is found."""
    from rnnprof.analyzers.audit import memory_growth, memory_imbalance
    from rnnprof.analyzers.audit.context import AuditContext
    from rnnprof.analyzers.placement.inputs import AuditInput

    inputs = _memory_inputs()
    assert {FIXTURES / "tf-run-nmt-tiny", FIXTURES / "torch-two-faults" / "run", HELD / "run"} <= set(inputs)
    assert len(inputs) >= len(MEMORY_TRACES) + 7  # the memory traces, 6 gloo runs and TensorFlow's
    for path in inputs:
        ctx = AuditContext(AuditInput(events=load_events(str(path))))
        found = [f for rule in (memory_imbalance, memory_growth) for f in _findings(rule.check(ctx))]
        expected = [("PF008", "rank0/cpu:0")] if path == HELD / "run" else []
        assert [(f.rule, f.subject.device) for f in found] == expected, (path, [f.title for f in found])


def _findings(result) -> list:
    return result if isinstance(result, list) else []


def test_a_block_whose_address_is_allocated_again_was_freed_without_a_record():
    """Address 7 allocated at 10 and again at 30 with no free between: the allocator had released the first block by
    30 (it never hands out an address it holds), the records only missed its free."""
    mb = 1 << 20
    steps = [(n, 100 * n, 100) for n in range(5)]
    records = [(10, mb, 7), (20, 2 * mb, 8), (30, mb, 7), (40, -2 * mb, 8)]
    records += [(100 * n + 10, 3 * mb, 100 + n) for n in range(1, 5)]  # a leak of 3 MB a step, freed never
    device = analyze_memory(_table(records, steps=steps)).devices[0]
    assert device.missing_frees == 1 and device.left_out_sizes == (mb,) and device.missing_step_bytes == mb
    assert device.peak.allocated == 12 * mb + mb  # the four leaked blocks and the second 1 MB one, not the first
    # the leak is still found: growth leaves out the blocks of 1 MB, and 3 MB a step exceeds the 1 MB step 0 lost
    assert device.growth.leak and device.growth.per_step == 3 * mb
    assert [b for _, b in device.growth.step_end] == [0, 3 * mb, 6 * mb, 9 * mb, 12 * mb]
    # each step a 1 MB block and a 0.5 MB one whose frees go unrecorded; the 1 MB ones' addresses come round again,
    # the 0.5 MB ones' never: their 0.5 MB a step is within what a step is shown to lose (1 MB), so no leak
    records = []
    for n in range(5):
        records += [(100 * n + 10, mb, 7), (100 * n + 20, mb // 2, 200 + n)]
    device = analyze_memory(_table(records, steps=steps)).devices[0]
    assert device.missing_frees == 4 and device.missing_step_bytes == mb
    assert device.growth.per_step == mb // 2 and not device.growth.leak


FSDP2 = FIXTURES / "torch-fsdp2-gloo"


def _addresses_allocated_again(path: Path) -> int:
    """From the file alone: allocations at an address the records still hold (allocated, and no free since)."""
    with gzip.open(path, "rt") as f:
        events = sorted((e for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    held, again = set(), 0
    for e in events:
        addr, nbytes = e["args"]["Addr"], e["args"]["Bytes"]
        if nbytes > 0:
            again += addr in held
            held.add(addr)
        else:
            held.discard(addr)
    return again


def test_fsdp2_on_gloo_holds_the_same_tensors_every_step_and_no_leak_or_imbalance_is_said(capsys):
    """rnnprof trace of a 2-rank FSDP2 (fully_shard per block and at the root) Transformer LM on gloo, steps 3-8
    (tests/data/make_torch_fsdp2_trace.py). The script counted, after every step, the bytes of every tensor it
    could reach: the same in each step on both ranks. The profiler missed frees (of the copies its reduce-scatters
    all-reduce and its all-gathers' outputs): the records' running sum grows, and PF009 once
    called it a leak, PF008 an imbalance. rnnprof counts the frees missed, as the file shows them (an address
    allocated again while held), and says neither."""
    from rnnprof.cli import main

    run = FSDP2 / "run"
    for rank in (0, 1):
        held = json.loads((FSDP2 / f"held-rank{rank}.json").read_text())
        assert len({held[str(s)]["tensors"] for s in range(3, 9)}) == 1
        raw = _raw_series(run / "torch" / f"rank{rank}.json.gz")[f"rank{rank}/host"]
        ends = [raw["running"][raw["step"] == s][-1] for s in range(3, 9)]
        assert ends[-1] > ends[0]  # the records alone hold more at the end
    assert main(["memory", str(run), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["imbalances"] == []
    for device in doc["devices"]:
        rank = device["device"].split("/")[0]
        assert not device["growth"]["leak"], device["growth"]
        assert device["missing_frees"] == _addresses_allocated_again(run / "torch" / f"{rank}.json.gz") > 0
    assert main(["audit", str(run), "--json", "--fail-on", "never"]) == 0
    rules = [f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]]
    assert not {"PF008", "PF009"} & set(rules), rules
    assert main(["memory", str(run)]) == 0
    assert "free(s) missing from the records" in capsys.readouterr().out
