"""EventTable.metadata is a TableMetadata: named, typed fields that the loaders fill on real traces, merged field by
field when tables merge, and no other name (a typo is an error)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil

import numpy as np
import pytest

from fixtures import FIXTURES, with_header
from rnnprof.events import (CONCAT, OUTSIDE_REASONS, SHARED, SUM, UNION, Alignment, ClockOffset, CollectiveArgs,
                            Device, EventTableBuilder, JsonCuts, Kind, TableMetadata, concat, merge_metadata)
from rnnprof.traces import load_aligned, load_events
from rnnprof.traces.left_out import REASONS

NCCL_RANK0 = FIXTURES / "kineto-2rank-nccl-rank0.json.gz"
GLOO = [FIXTURES / "torch-gloo-rank0.json.gz", FIXTURES / "torch-gloo-rank1.json.gz"]


def _header(path) -> dict:
    with gzip.open(path, "rt") as f:
        return {k: v for k, v in json.load(f).items() if k != "traceEvents"}


def test_a_kineto_trace_fills_its_fields_from_the_document():
    table = load_events(NCCL_RANK0)
    metadata, header = table.metadata, _header(NCCL_RANK0)
    assert isinstance(metadata, TableMetadata)
    assert metadata.base_time_ns == header["baseTimeNanoseconds"] == 1711964646000000000
    assert metadata.distributed == (header["distributedInfo"],)
    assert metadata.devices_properties == tuple(header["deviceProperties"]) and len(metadata.devices_properties) == 8
    assert metadata.hostnames == () and metadata.worker_hosts == ()  # the file names no host
    assert metadata.json_bytes > 0 and metadata.json_cuts.exact >= 1
    assert set(metadata.outside_steps) == set(OUTSIDE_REASONS)
    gpu = np.isin(table.device, [i for i, d in enumerate(table.devices) if d.kind == "gpu"])
    work = gpu & ~np.isin(table.kind, (Kind.RUNTIME, Kind.ANNOTATION))
    assert sum(metadata.outside_steps.values()) == int((work & (table.step < 0)).sum())
    (args,) = metadata.collective_args
    assert isinstance(args, CollectiveArgs) and args.worker == "rank0" and len(args.correlation) == 21
    assert metadata.left_out == {r: 0 for r in REASONS} and metadata.left_out_examples == ()
    # Not a merged table, no run directory, no TensorFlow timeline: those fields keep their empty defaults.
    assert metadata.alignment is None and metadata.job_notes == () and metadata.manifest is None
    assert metadata.ran_as == {} and metadata.dropped_stream_all == 0 and metadata.other_data == {}


def test_a_gloo_rank_names_its_host_and_its_cpu_device():
    metadata = load_events(GLOO[0]).metadata
    header = _header(GLOO[0])
    assert metadata.hostnames == (header["host_name"],) == ("vm",)
    assert metadata.worker_hosts == (("rank0", "vm"),)
    assert metadata.distributed == (header["distributedInfo"],)
    assert metadata.host_operator_devices == (Device("cpu", 0, "rank0"),)
    assert metadata.collective_args == () and metadata.devices_properties == ()


def _folder(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    for f in GLOO:
        shutil.copy(f, folder / f.name)
    return folder


def test_a_rank_folder_merges_its_ranks_records_and_says_how_it_aligned(tmp_path):
    ranks = [load_events(f).metadata for f in GLOO]
    metadata = load_events(_folder(tmp_path)).metadata
    assert metadata.alignment == Alignment("absolute")  # one field, no offsets: the recorded clocks
    assert not hasattr(metadata, "align")
    assert metadata.distributed == (ranks[0].distributed[0], ranks[1].distributed[0])
    assert metadata.host_operator_devices == (Device("cpu", 0, "rank0"), Device("cpu", 0, "rank1"))
    assert metadata.hostnames == ("vm",)  # both ranks ran there: named once
    assert metadata.worker_hosts == (("rank0", "vm"), ("rank1", "vm"))  # and which rank ran where
    assert metadata.base_time_ns == ranks[0].base_time_ns == ranks[1].base_time_ns  # one job's base, shared
    assert metadata.json_bytes == ranks[0].json_bytes + ranks[1].json_bytes
    assert metadata.left_out == {r: 0 for r in REASONS}
    assert isinstance(metadata.job_notes, tuple)


@pytest.mark.parametrize("method", ["none", "collectives"])
def test_the_gloo_pair_aligned_records_the_method_and_each_offset_in_the_same_field(method):
    metadata = load_aligned(GLOO, method).metadata
    assert metadata.alignment.method == method
    offsets = metadata.alignment.offsets
    assert len(offsets) == 2 and all(isinstance(o, ClockOffset) for o in offsets)
    assert [o.workers for o in offsets] == [("rank0",), ("rank1",)] and offsets[0].offset_us == 0
    if method == "collectives":
        assert offsets[1].samples > 0
    document = metadata.alignment.as_dict()
    assert list(document) == ["method", "offsets"]
    assert list(document["offsets"][0]) == ["source", "ranks", "offset_us", "spread_us", "collectives"]


def test_an_unknown_name_cannot_be_set_or_given():
    metadata = load_events(GLOO[0]).metadata
    with pytest.raises(AttributeError):
        metadata.aligment = Alignment("none")  # a typo of alignment
    with pytest.raises(AttributeError):
        metadata.host_name = "vm"  # a name the record does not have (hostnames)
    with pytest.raises(TypeError):
        TableMetadata(outside_step={})
    assert not hasattr(metadata, "__dict__")


def _table(metadata: TableMetadata, worker: str):
    builder = EventTableBuilder("test", [f"{worker}.json"])
    builder.add(0.0, 1.0, "op", "op", Device("gpu", 0, worker), "lane", Kind.KERNEL)
    builder.metadata = metadata
    return builder.build()


def test_concat_merges_each_field_by_its_rule():
    a = TableMetadata(json_bytes=10, json_cuts=JsonCuts(3, 1), outside_steps={"no_launch_in_trace": 2},
                      distributed=({"rank": 0},), hostnames=("h1",), ran_as={"Conv2D": ("_MklB",)},
                      host_operator_devices=(Device("cpu", 0, "rank0"),), base_time_ns=5, status="ok",
                      other_data={"v": 1}, warnings=("first",))
    b = TableMetadata(json_bytes=7, json_cuts=JsonCuts(0, 2), outside_steps={"no_launch_in_trace": 1,
                                                                             "launched_outside_steps": 4},
                      distributed=({"rank": 1},), hostnames=("h2", "h1"), ran_as={"Conv2D": ("_MklA",), "MatMul": ("x",)},
                      host_operator_devices=(Device("cpu", 0, "rank0"),), base_time_ns=6, status="ok",
                      other_data={"v": 1}, warnings=("second",))
    merged = concat([_table(a, "rank0"), _table(b, "rank1")]).metadata
    assert merged.json_bytes == 17 and merged.json_cuts == JsonCuts(3, 3)  # SUM
    assert merged.outside_steps == {"no_launch_in_trace": 3, "launched_outside_steps": 4}  # SUM by key
    assert merged.distributed == ({"rank": 0}, {"rank": 1}) and merged.warnings == ("first", "second")  # CONCAT
    assert merged.hostnames == ("h1", "h2") and merged.host_operator_devices == (Device("cpu", 0, "rank0"),)  # UNION
    assert merged.ran_as == {"Conv2D": ("_MklA", "_MklB"), "MatMul": ("x",)}  # UNION per op, sorted
    assert merged.status == "ok" and merged.other_data == {"v": 1}  # SHARED: the same on both
    assert merged.base_time_ns is None  # SHARED: they differ
    assert merge_metadata([a]) == a and merge_metadata([]) == TableMetadata()


def test_every_field_has_a_merge_rule():
    rules = {f.name: f.metadata.get("merge") for f in dataclasses.fields(TableMetadata)}
    assert set(rules.values()) <= {SUM, CONCAT, UNION, SHARED}
    assert rules["alignment"] == SHARED and rules["left_out"] == SUM and rules["left_out_examples"] == CONCAT


def test_what_is_left_out_of_a_merged_table_is_counted():
    """A run directory merges its timelines first and leaves out impossible events after: the merged record holds
    the counts (a tree of parts held them only where each part was counted)."""
    from rnnprof.traces.left_out import NEGATIVE, leave_out, left_out_of

    tables = []
    for worker, dur in (("a", 1.0), ("b", -1.0)):
        builder = EventTableBuilder("test", [f"{worker}.json"])
        builder.add(0.0, 1.0, "op", "op", Device("cpu", 0, worker), "lane", Kind.HOST_OP)
        builder.add(2.0, dur, "late", "late", Device("cpu", 0, worker), "lane", Kind.HOST_OP)
        tables.append(builder.build())
    table = leave_out(concat(tables))
    assert len(table) == 3 and left_out_of(table.metadata)[NEGATIVE] == 1
    assert [e.name for e in table.metadata.left_out_examples] == ["late"]


def test_a_rank_file_without_distributed_info_is_on_the_machine_it_names_under_its_files_rank(tmp_path):
    """A folder's rank file without ``distributedInfo`` takes its rank from its name (rank_folder): the machine its
    header names is that rank's."""
    folder = tmp_path / "job"
    folder.mkdir()
    for rank, f in enumerate(GLOO):
        with_header(f, folder / f"rank{rank}.json.gz", drop=("distributedInfo",), host_name=f"node-{rank}")
    metadata = load_events(folder).metadata
    assert metadata.worker_hosts == (("rank0", "node-0"), ("rank1", "node-1"))
