"""Collectives matched across ranks, arrival skew, the straggler rank, and ``comm --align``.

Expected values come from the raw JSON of the real rank traces, read here without rnnprof: a rank's
collectives are its NCCL kernels (per stream and name, in start order) or, on a gloo CPU rank, its
``gloo:*`` ranges (per name, in start order); the k-th of each on one rank is the k-th on the other.
"""

import gzip
import json

import numpy as np
import pytest

from rnnprof.analyzers.align import (ClockOffset, align, offsets_from_collectives, offsets_from_start,
                                     weighted_median)
from rnnprof.analyzers import noise
from rnnprof.analyzers.collectives import BY_ORDER, Instance, analyze_collectives, collectives_report
from rnnprof.cli import main
from rnnprof.traces import load_aligned, load_events

from fixtures import FIXTURES, nccl_rank

SAMPLED = [FIXTURES / "kineto-sampled-rank0.json.gz", FIXTURES / "kineto-sampled-rank1.json.gz"]
GLOO = [FIXTURES / "torch-gloo-rank0.json.gz", FIXTURES / "torch-gloo-rank1.json.gz"]
SHIFT_US = 37_000.0
MS = 1000.0


def raw_document(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def raw_collectives(path) -> dict[tuple, tuple[float, float]]:
    """``(group, name, k) -> (start, end)`` of a rank's collectives, from its raw JSON (a gloo rank's group: the one
    process group its ``distributedInfo`` lists)."""
    document = raw_document(path)
    events = [e for e in document["traceEvents"] if e.get("ph") == "X"]
    kernels = [e for e in events if e.get("cat") == "kernel" and e["name"].lower().startswith("nccl")]
    if kernels:
        keyed = [(f"stream:{e['args']['stream']}", e) for e in kernels]
    else:
        (only,) = document["distributedInfo"]["pg_config"]
        keyed = [(only["pg_name"], e) for e in events if e["name"].startswith("gloo:")]
    found, count = {}, {}
    for group, e in sorted(keyed, key=lambda g_e: (g_e[1]["ts"], g_e[1]["ts"] + g_e[1]["dur"])):
        k = count.get((group, e["name"]), 0)
        count[(group, e["name"])] = k + 1
        found[(group, e["name"], k)] = (e["ts"], e["ts"] + e["dur"])
    return found


def expected_skews(paths) -> dict[tuple, tuple[str, float]]:
    """``key -> (last rank, skew)`` for the collectives both ranks hold."""
    first, second = (raw_collectives(p) for p in paths)
    return {key: (("rank1", second[key][0] - first[key][0]) if second[key][0] > first[key][0]
                  else ("rank0", first[key][0] - second[key][0]))
            for key in first if key in second}


def shifted_copy(path, tmp_path, shift_us=SHIFT_US):
    """The rank's trace with every timestamp moved by ``shift_us`` (its clock running ahead)."""
    document = raw_document(path)
    for event in document["traceEvents"]:
        if "ts" in event:
            event["ts"] = event["ts"] + shift_us
    out = tmp_path / f"shifted-{path.name}"
    with gzip.open(out, "wt") as f:
        json.dump(document, f)
    return out


def comm_json(capsys, *argv) -> dict:
    code = main(["comm", *map(str, argv), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def by_key(document) -> dict[tuple, dict]:
    return {(c["group"], c["name"], c["index"]): c for c in document["collectives"]["collectives"]}


# -- matching, skew and straggler on the real traces, shared clock ------------------------------------------------

@pytest.mark.parametrize("paths", [SAMPLED, GLOO], ids=["nccl-sampled", "gloo"])
def test_skew_and_last_rank_of_every_collective_match_the_raw_traces(paths):
    report = analyze_collectives(load_events(paths))
    expected = expected_skews(paths)
    assert len(expected) >= 2
    got = {(c.group, c.name, c.index): (c.last.worker, c.skew_us) for c in report.collectives}
    assert set(got) == set(expected)
    for key, (last, skew) in expected.items():
        assert got[key][0] == last, key
        assert got[key][1] == pytest.approx(skew, abs=1e-6), key


@pytest.mark.parametrize("paths", [SAMPLED, GLOO], ids=["nccl-sampled", "gloo"])
def test_the_straggler_arrives_last_most_often_and_its_waits_add_up(paths):
    report = analyze_collectives(load_events(paths))
    expected = expected_skews(paths)
    last_counts = {r: sum(1 for last, _ in expected.values() if last == r) for r in ("rank0", "rank1")}
    caused = {r: sum(s for last, s in expected.values() if last == r) for r in ("rank0", "rank1")}
    ranks = {r.worker: r for r in report.ranks}
    for rank in ("rank0", "rank1"):
        assert ranks[rank].collectives == len(expected)
        assert ranks[rank].arrived_last == last_counts[rank]
        assert ranks[rank].caused_wait_us == pytest.approx(caused[rank], abs=1e-6)
        # With two ranks, what one waits is what the other caused.
        assert ranks[rank].waited_us == pytest.approx(caused["rank1" if rank == "rank0" else "rank0"], abs=1e-6)
    straggler = max(("rank0", "rank1"), key=lambda r: (last_counts[r], caused[r]))
    assert report.straggler == straggler


def test_the_sampled_straggler_is_rank1():
    # Independent of the code's tie-breaking: rank 1 arrives last at 8 of the 10 matched kernels.
    report = analyze_collectives(load_events(SAMPLED))
    assert report.straggler == "rank1" and {r.worker: r.arrived_last for r in report.ranks} == {"rank0": 2,
                                                                                               "rank1": 8}


# -- the done-when: a rank's clock 37 ms ahead, aligned on collectives ------------------------------------------------

@pytest.mark.parametrize("paths", [SAMPLED, GLOO], ids=["nccl-sampled", "gloo"])
def test_align_collectives_measures_a_37ms_shift_and_restores_the_straggler_figures(paths, tmp_path, capsys):
    shifted = shifted_copy(paths[1], tmp_path)
    truth = comm_json(capsys, *paths, "--align", "none")
    unaligned = comm_json(capsys, paths[0], shifted, "--align", "none")
    aligned = comm_json(capsys, paths[0], shifted, "--align", "collectives")

    assert aligned["alignment"]["method"] == "collectives" and truth["alignment"]["method"] == "none"
    offsets = aligned["alignment"]["offsets"]
    assert [o["ranks"] for o in offsets] == [["rank0"], ["rank1"]]
    assert offsets[0]["offset_us"] == 0
    assert offsets[1]["offset_us"] == pytest.approx(SHIFT_US, abs=1 * MS)
    assert offsets[1]["collectives"] == len(expected_skews(paths))

    # Without alignment the shift shows up as a straggler that is not there.
    assert any(abs(c["skew_us"] - by_key(truth)[k]["skew_us"]) > 10 * MS for k, c in by_key(unaligned).items())

    # Aligned: the figures of the unshifted pair, and those computed from the raw JSON, within 1 ms.
    expected = expected_skews(paths)
    got, want = by_key(aligned), by_key(truth)
    assert set(got) == set(want) == set(expected)
    for key, (last, skew) in expected.items():
        assert got[key]["last_rank"] == want[key]["last_rank"] == last, key
        assert got[key]["skew_us"] == pytest.approx(skew, abs=1 * MS), key
        assert got[key]["skew_us"] == pytest.approx(want[key]["skew_us"], abs=1 * MS), key
    assert aligned["collectives"]["straggler"] == truth["collectives"]["straggler"]
    for mine, theirs in zip(aligned["collectives"]["ranks"], truth["collectives"]["ranks"]):
        assert mine["rank"] == theirs["rank"] and mine["arrived_last"] == theirs["arrived_last"]
        for figure in ("caused_wait_us", "waited_us"):
            assert mine[figure] == pytest.approx(theirs[figure], abs=1 * MS)
    # The per-step stragglers (who finished last, who started communicating last) too.
    assert len(aligned["stragglers"]) == len(truth["stragglers"]) > 0
    for mine, theirs in zip(aligned["stragglers"], truth["stragglers"]):
        assert mine["step"] == theirs["step"] and mine["last_to_finish"] == theirs["last_to_finish"]
        for figure in ("finish_lag_vs_earliest_us", "comm_start_lag_vs_earliest_us"):
            assert mine[figure] == pytest.approx(theirs[figure], abs=1 * MS)


def test_the_table_says_which_alignment_it_used_and_the_measured_offset(tmp_path, capsys):
    shifted = shifted_copy(SAMPLED[1], tmp_path)
    code = main(["comm", str(SAMPLED[0]), str(shifted), "--align", "collectives"])
    out, err = capsys.readouterr()
    assert code == 0, err
    flat = " ".join(out.split())
    assert "aligned on the end times of collectives" in flat
    assert "clock offsets against rank0: rank1 +37.0" in flat
    assert "collectives across ranks" in flat and "ranks at collectives" in flat
    # rank1 arrives last at 8 of 10, but by 0.08 to 164 ms (spread 41 ms, median 12.8 ms): not beyond the jitter
    assert "straggler: no straggler beyond the run's jitter (rank1 arrived last at 8 of 10 collectives" in flat


def test_align_start_puts_the_first_events_together(tmp_path):
    shifted = shifted_copy(GLOO[1], tmp_path)
    table = load_aligned([GLOO[0], shifted], "start")
    # The first event of the program (the profiler's own "Trace" span is no event of it).
    firsts = [min(e["ts"] for e in raw_document(p)["traceEvents"] if e.get("ph") == "X" and e["cat"] != "Trace")
              for p in GLOO]
    assert table.metadata.alignment.method == "start"
    (zero, offset) = table.metadata.alignment.offsets
    assert zero.offset_us == 0
    assert offset.offset_us == pytest.approx(firsts[1] + SHIFT_US - firsts[0], abs=1e-3)
    per_rank = {w: table.ts[np.isin(table.device, [i for i, d in enumerate(table.devices) if d.worker == w])].min()
                for w in ("rank0", "rank1")}
    assert per_rank["rank0"] == pytest.approx(per_rank["rank1"], abs=1e-3)


# -- the alignment step itself ------------------------------------------------------------------------------------

def test_align_subtracts_each_offset_and_leaves_its_input_alone():
    tables = [load_events(p) for p in GLOO]
    before = tables[1].ts.copy()
    out = align(tables, [0.0, ClockOffset("b", ("rank1",), 250.0)])
    assert out[0] is tables[0]
    np.testing.assert_array_equal(out[1].ts, before - 250.0)
    np.testing.assert_array_equal(tables[1].ts, before)
    with pytest.raises(ValueError):
        align(tables, [0.0])


def test_offsets_from_collectives_follow_a_shift_exactly():
    tables = [load_events(p) for p in SAMPLED]
    base = offsets_from_collectives(tables)
    moved = offsets_from_collectives([tables[0], align([tables[1]], [-1234.5])[0]])
    assert moved[1].offset_us == pytest.approx(base[1].offset_us + 1234.5, abs=1e-6)
    assert moved[1].spread_us == pytest.approx(base[1].spread_us, abs=1e-6)
    assert offsets_from_start(tables)[0].offset_us == 0


def test_weighted_median_follows_the_weight():
    values = np.array([0.0, 10.0, 3600.0])
    assert weighted_median(values, np.ones(3)) == 10.0
    assert weighted_median(values, np.array([5.0, 1.0, 1.0])) == 0.0
    assert weighted_median(values, np.array([1.0, 1.0, 5.0])) == 3600.0


# -- matching by process group and sequence number ----------------------------------------------------------------

def test_collectives_with_a_sequence_number_match_by_group_and_seq(tmp_path):
    # Two process groups whose kernels interleave differently and run on other stream numbers on each rank:
    # only (group, seq) pairs them right.
    r0 = nccl_rank(tmp_path, 0, [("0", 1, 7, 100, 50), ("1", 1, 9, 200, 50), ("0", 2, 7, 300, 50)])
    r1 = nccl_rank(tmp_path, 1, [("1", 1, 13, 170, 80), ("0", 1, 11, 120, 30), ("0", 2, 11, 330, 20)])
    report = analyze_collectives(load_events([r0, r1]))
    got = {(c.group, c.index): (c.matched_by, c.last.worker, c.skew_us) for c in report.collectives}
    assert got == {("0", 1): ("seq", "rank1", 20.0), ("1", 1): ("seq", "rank0", 30.0),
                   ("0", 2): ("seq", "rank1", 30.0)}
    assert report.unmatched == 0 and report.straggler == "rank1"


def test_align_collectives_uses_the_seq_matches(tmp_path):
    # rank1's clock is 1000 µs ahead; every collective ends at the same instant on both ranks.
    r0 = nccl_rank(tmp_path, 0, [("0", 1, 7, 100, 50), ("0", 2, 7, 300, 50)])
    r1 = nccl_rank(tmp_path, 1, [("0", 2, 11, 1320, 30), ("0", 1, 11, 1110, 40)])
    offsets = offsets_from_collectives([load_events(r0), load_events(r1)])
    assert offsets[1].offset_us == 1000.0 and offsets[1].spread_us == 0.0 and offsets[1].samples == 2


# -- what stays as it was, and bad input ----------------------------------------------------------------------------

def test_one_file_has_no_alignment_or_cross_rank_section(capsys):
    document = comm_json(capsys, FIXTURES / "kineto-2rank-nccl-rank0.json.gz")
    assert "alignment" not in document and "collectives" not in document


def test_an_unknown_alignment_is_one_line_and_exit_2(capsys):
    code = main(["comm", *map(str, GLOO), "--align", "clocks"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--align" in err and "collectives" in err


def test_align_collectives_without_a_common_collective_is_one_line_and_exit_2(capsys):
    other = FIXTURES / "tf1-timeline-gpu-matmul.json"
    code = main(["comm", str(SAMPLED[0]), str(other), "--align", "collectives"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert str(other) in err and "no collective in common" in err


def test_a_tight_collective_outweighs_long_ones_whose_ends_lag(tmp_path):
    # rank1's clock is 1000 µs ahead. Seq 1 is short on both ranks: its ends meet. Seqs 2 and 3 are long, and
    # rank1 leaves them 3000 µs after the common instant (work after the sync inside the range): their end
    # differences say 4000. A member's end lies within its own duration of the instant, so the short one rules.
    r0 = nccl_rank(tmp_path, 0, [("0", 1, 7, 100, 20), ("0", 2, 7, 5000, 5000), ("0", 3, 7, 20000, 5000)])
    r1 = nccl_rank(tmp_path, 1, [("0", 1, 7, 1110, 10), ("0", 2, 7, 6500, 7500), ("0", 3, 7, 21500, 7500)])
    offsets = offsets_from_collectives([load_events(r0), load_events(r1)])
    assert offsets[1].offset_us == 1000.0 and offsets[1].samples == 3
    # Spread: the weighted median of the distances (0, 3000, 3000) from the offset, the short one weighing most.
    assert offsets[1].spread_us == 0.0


def test_the_loader_keeps_the_process_group_of_nccl_kernels():
    path = FIXTURES / "kineto-2rank-nccl-rank0.json.gz"
    kernels = [e for e in raw_document(path)["traceEvents"]
               if e.get("ph") == "X" and e.get("cat") == "kernel" and "Process Group Name" in e.get("args", {})]
    (args,) = load_events(path).metadata.collective_args
    assert args.worker == "rank0" and len(kernels) == 21
    assert list(args.correlation) == [e["args"]["correlation"] for e in kernels]
    assert list(args.group) == [e["args"]["Process Group Name"] for e in kernels] and set(args.seq) == {-1}


# -- collective types ---------------------------------------------------------------------------------------------

# What the raw names say: NCCL's SendRecv kernels, gloo's all_reduce ranges.
RAW_TYPES = {"ncclKernel_SendRecv": "send/recv", "gloo:all_reduce": "all-reduce"}


@pytest.mark.parametrize("paths", [SAMPLED, GLOO], ids=["nccl-sampled", "gloo"])
def test_every_matched_collective_has_the_type_its_raw_name_says(paths, capsys):
    doc = comm_json(capsys, *paths)
    collectives = doc["collectives"]["collectives"]
    assert len(collectives) == len(expected_skews(paths))
    for c in collectives:
        (kind,) = [t for prefix, t in RAW_TYPES.items() if c["name"].startswith(prefix)]
        assert c["collective_type"] == kind, c["name"]


def test_a_member_that_names_the_collective_types_it_for_all(tmp_path):
    """RCCL's generic kernel on two ranks: only rank 0 recorded the nccl:all_reduce range around it; the second
    collective has no range on either rank."""
    generic = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
    paths = []
    for rank in (0, 1):
        events = [{"ph": "X", "cat": "kernel", "name": generic, "pid": rank, "tid": 4, "ts": ts + rank, "dur": 10,
                   "args": {"device": rank, "stream": 4, "correlation": ts}} for ts in (100, 300)]
        if rank == 0:
            events.append({"ph": "X", "cat": "gpu_user_annotation", "name": "nccl:all_reduce", "pid": 0, "tid": 4,
                           "ts": 99, "dur": 12, "args": {"device": 0, "stream": 4}})
        path = tmp_path / f"rank{rank}.json"
        path.write_text(json.dumps({"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
                                    "traceEvents": events}))
        paths.append(path)
    report = analyze_collectives(load_events(paths))
    assert [(c.index, c.collective_type) for c in report.collectives] == [(0, "all-reduce"), (1, "unknown")]


def _gloo_ranks(lateness_ms: list[list[float]], name: str = "gloo:all_reduce"):
    """A 2-rank job with, per step, one collective per value: rank1 starts that many ms after rank0."""
    found: dict[str, list[Instance]] = {"rank0": [], "rank1": []}
    for step, values in enumerate(lateness_ms):
        for k, late in enumerate(values):
            t0 = 50_000.0 * step + 10_000.0 * k
            index = len(found["rank0"])
            for worker, start in (("rank0", t0), ("rank1", t0 + 1000 * late)):
                found[worker].append(Instance((BY_ORDER, "", name, index), name, "", start, max(t0, start) + 300,
                                              step=step))
    return collectives_report(found)


def test_a_cpu_rank_waiting_a_time_slice_for_a_core_is_no_straggler_and_a_sleeping_one_is():
    # a balanced control on two busy cores (diagnosis benchmark, slow-loader --control): rank1's lateness at its
    # one all-reduce per step; 2 ms waits for a core at 4 of 6 steps, a median of 2.0 ms, above the 2 ms floor
    measured = [[0.17], [2.08], [0.19], [2.29], [1.97], [2.33]]
    verdict = _gloo_ranks(measured).lateness_verdict("rank1")[1]
    assert verdict.difference_us > noise.CROSS_RANK_FLOOR_US and not verdict.significant
    assert verdict.threshold_us == noise.CPU_RANK_FLOOR_US
    # the same waits at each of two collectives per step sum to 4 ms: still a slice per collective
    assert not _gloo_ranks([v * 2 for v in measured]).lateness_verdict("rank1")[1].significant
    # a rank sleeping 40 ms before its all-reduce (the planted straggler) is one
    verdict = _gloo_ranks([[40.1], [39.8], [40.3], [40.0], [41.2], [40.2]]).lateness_verdict("rank1")[1]
    assert verdict.significant and verdict.difference_us == pytest.approx(40_150)
    # NCCL kernels keep the 2 ms floor
    assert _gloo_ranks(measured, "ncclDevKernel_AllReduce_Sum_f32_RING_LL").lateness_verdict("rank1")[1].significant
