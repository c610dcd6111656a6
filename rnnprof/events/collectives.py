"""What each collective of an event table is: its process group, message, phase and the operation it implements.

``CollectiveRecords`` is a side table beside the events, one row per event that *is* a collective as the
analyses count it (a GPU's NCCL kernel; a CPU rank's run of a collective on gloo's worker thread, else its
``c10d::*`` call), pointing at it by ``row``. Strings (the group's name, the operation, the call, the dtype,
the phase) are codes into the table's ``strings``, so that merging tables remaps them as it remaps the
events'. A process group's description and members are in ``TableMetadata.process_groups`` (``ProcessGroup``),
by name.

``inferred`` says, bit by bit (``INFERRED``), what the trace did not record and the loader inferred: the
group from the rank's flight-recorder entries (joined to its calls), its only group or its size, the message from the operators' recorded shapes, the phase from
what the libraries mark (autograd, torch.optim, FSDP) or from the operators around the call, the operation from the call that launched a worker thread's
run, a peer from a send's or receive's arguments. The loaders fill the records (``traces.kineto_collectives``);
the meaning of each field: docs/commands/comm.md, "Process groups".
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Sequence

import numpy as np

_DTYPES = {"row": np.int64, "group": np.int32, "collective": np.int32, "call": np.int32, "phase": np.int32,
           "in_nelems": np.int64, "out_nelems": np.int64, "dtype": np.int32, "group_size": np.int32,
           "peer": np.int32, "seq": np.int64, "inferred": np.int32}
_STRING_COLUMNS = ("group", "collective", "call", "phase", "dtype")
_ZERO_DEFAULT = (*_STRING_COLUMNS, "inferred")  # code 0 is "" in every table's strings

# What the loader inferred of a record (bits of ``inferred``); the trace recorded everything else it has.
GROUP_ONLY_ONE = 1  # the group: the only process group the rank's trace lists
GROUP_BY_SIZE = 2  # the group: the only one of the rank's groups with the message's member count
SHAPES = 4  # the message (elements, dtype): the operators' recorded input shapes, not Kineto's collective args
PHASE_LIBRARY = 8  # the phase: what the libraries mark (autograd's backward functions, torch.optim's, FSDP's ranges)
PHASE_NEIGHBOURS = 16  # the phase: the operators run just before (a receive: just after) the call on its thread
OPERATION_FROM_CALL = 32  # the operation: the c10d call that launched the worker thread's run (matched by order)
PEER_FROM_ARGS = 64  # a send's or receive's peer: the call's arguments (its group-local rank)
GROUP_BY_THREAD = 128  # the group: that of the other collectives its gloo worker thread ran (a group's own threads)
GROUP_FROM_RECORDER = 256  # the group: the flight-recorder entry its call was joined to (the rank's file beside its trace)
INFERRED = {GROUP_ONLY_ONE: "group: the rank's only process group", GROUP_BY_SIZE: "group: the only one of its size",
            SHAPES: "message: recorded operator shapes", PHASE_LIBRARY: "phase: autograd, torch.optim or FSDP ranges",
            PHASE_NEIGHBOURS: "phase: the operators around the call",
            OPERATION_FROM_CALL: "operation: the call that launched the run",
            PEER_FROM_ARGS: "peer: the call's arguments", GROUP_BY_THREAD: "group: its worker thread's",
            GROUP_FROM_RECORDER: "group: the flight recorder"}


def _empty(column: str):
    return field(default_factory=lambda: np.zeros(0, dtype=_DTYPES[column]))


@dataclass(frozen=True)
class ProcessGroup:
    """A process group as a trace names it: Kineto's ``Process Group Name`` (``pg_name``), its description
    (``pg_desc``: ``default_pg``, ``mesh_shard``, ``undefined``) and its members' global ranks (empty: unknown)."""

    name: str
    description: str = ""
    ranks: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        return len(self.ranks)

    def label(self) -> str:
        """``name (description)``, the description left out where it says nothing."""
        return self.name if self.description in ("", "undefined") else f"{self.name} ({self.description})"

    def as_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "ranks": list(self.ranks)}


@dataclass(frozen=True)
class CollectiveRecords:
    """One row per collective event of the table: parallel arrays (strings: codes into the table's, 0 is "";
    numbers: -1 unknown)."""

    row: np.ndarray = _empty("row")  # the event's row in the table
    group: np.ndarray = _empty("group")  # its process group's name ("" where unknown)
    collective: np.ndarray = _empty("collective")  # the operation it implements (names.COLLECTIVE_TYPES)
    call: np.ndarray = _empty("call")  # the collective as called (Kineto's Collective name, or the c10d operator)
    phase: np.ndarray = _empty("phase")  # forward, backward, optimizer, "" (not known)
    in_nelems: np.ndarray = _empty("in_nelems")  # elements in and out on this rank
    out_nelems: np.ndarray = _empty("out_nelems")
    dtype: np.ndarray = _empty("dtype")  # the element type as recorded ("Float", "float", "c10::BFloat16")
    group_size: np.ndarray = _empty("group_size")  # the group's member count
    peer: np.ndarray = _empty("peer")  # a send's or receive's peer (its global rank)
    seq: np.ndarray = _empty("seq")  # the group's sequence number of the collective, where recorded
    inferred: np.ndarray = _empty("inferred")  # bits of INFERRED

    COLUMNS = tuple(_DTYPES)

    def __len__(self) -> int:
        return len(self.row)

    def selected(self, mask: np.ndarray, rows: int) -> "CollectiveRecords":
        """The records of the events a selection keeps (``mask``: a boolean mask or row indices of a table of
        ``rows`` events), pointing at the rows they have among them."""
        if not len(self):
            return self
        mask = np.asarray(mask)
        kept = np.flatnonzero(mask) if mask.dtype == bool else mask.astype(np.int64)
        new_row = np.full(rows, -1, dtype=np.int64)
        new_row[kept] = np.arange(len(kept))
        columns = {c: getattr(self, c) for c in self.COLUMNS}
        columns["row"] = new_row[self.row]
        keep = columns["row"] >= 0
        return collective_records(**{c: values[keep] for c, values in columns.items()})

    def remapped(self, row_offset: int, string_map: np.ndarray) -> "CollectiveRecords":
        """The records with rows moved by ``row_offset`` and string codes translated (into a merged table's)."""
        if not len(self):
            return self
        return replace(self, row=self.row + row_offset,
                       **{c: string_map[getattr(self, c)].astype(np.int32) for c in _STRING_COLUMNS})

    def of_rows(self) -> dict[int, int]:
        """The record's index of each event row that has one."""
        return dict(zip(self.row.tolist(), range(len(self))))


def collective_records(**columns) -> CollectiveRecords:
    """Records from columns of equal length (lists or arrays), each cast to its type, in row order; a column not
    given is unknown (-1; a string's code and ``inferred``: 0)."""
    arrays = {c: np.asarray(columns[c], dtype=_DTYPES[c]) for c in CollectiveRecords.COLUMNS if c in columns}
    n = len(arrays["row"])
    for c in CollectiveRecords.COLUMNS:
        arrays.setdefault(c, np.full(n, 0 if c in _ZERO_DEFAULT else -1, dtype=_DTYPES[c]))
        if len(arrays[c]) != n:
            raise ValueError(f"collective column {c} has {len(arrays[c])} rows, expected {n}")
    order = np.argsort(arrays["row"], kind="stable")
    return CollectiveRecords(**{c: a[order] for c, a in arrays.items()})


def concat_collectives(parts: Sequence[CollectiveRecords]) -> CollectiveRecords:
    """Several tables' records (already remapped) as one."""
    parts = [p for p in parts if len(p)]
    if len(parts) <= 1:
        return parts[0] if parts else CollectiveRecords()
    return CollectiveRecords(**{f.name: np.concatenate([getattr(p, f.name) for p in parts])
                                for f in fields(CollectiveRecords)})
