"""A job's rank parts kept in a scratch folder between the rounds of its analysis, two files per rank.

A part is what an analysis keeps of a rank for a later round (``critical_path.job.RankPart``: named arrays with
the strings and devices their codes refer to). Every array of a rank's parts is written, one after another, into
the rank's data file (``PART_DATA``) and read back piece by piece (``StoredArray``): a step's task reads the rows
of its window only. The parts' strings, devices and their arrays' headers (shape, dtype, where in the data file)
are the rank's JSON file (``PART_TABLES``): plain data, so nothing in a scratch folder is unpickled. Two files a
rank, whatever its parts hold: removing a file costs about a millisecond where the disk discards freed blocks as
it goes (ext4's ``discard``), so a 64-rank job's scratch of an array a file took seconds to remove.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from rnnprof.analyzers.critical_path.job import RankPart
from rnnprof.events import Device
from rnnprof.files import atomic_write_bytes

PART_DATA = ".parts"  # a rank's arrays, one after another
PART_TABLES = ".json"  # its parts' strings, devices and array headers


def part_files(stem: Path) -> tuple[Path, Path]:
    """The data file and the JSON file of the rank whose parts are kept at ``stem`` (``scratch/rank3``)."""
    return stem.with_name(stem.name + PART_DATA), stem.with_name(stem.name + PART_TABLES)


def save_parts(parts: dict[str, RankPart], stem: Path) -> None:
    """A rank's ``parts`` (name -> part) in its two files at ``stem``; the JSON file last, once the data is whole."""
    data, tables = part_files(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    found = {}
    with open(data, "wb") as f:
        for name, part in parts.items():
            found[name] = {"strings": list(part.strings),
                           "devices": [[d.kind, d.index, d.worker] for d in part.devices],
                           "headers": _write_arrays(part.arrays, f)}
    atomic_write_bytes(tables, msgspec.json.encode(found))


def open_parts(stem: Path) -> dict[str, RankPart]:
    """The parts ``save_parts`` saved at ``stem``, by name, their arrays read as they are indexed."""
    data, tables = part_files(stem)
    found = msgspec.json.decode(tables.read_bytes())
    return {name: RankPart({key: StoredArray(data, (tuple(shape), np.dtype(dtype), offset))
                            for key, (shape, dtype, offset) in part["headers"].items()},
                           tuple(part["strings"]),
                           tuple(Device(kind, index, worker) for kind, index, worker in part["devices"]))
            for name, part in found.items()}


def _write_arrays(arrays: dict, f) -> dict:
    """``arrays`` (name -> array) written one after another at ``f``'s end; their headers, as plain data."""
    headers = {}
    for name, values in arrays.items():
        values = np.ascontiguousarray(values)
        if values.dtype.hasobject:
            raise TypeError(f"{name}: a part's arrays hold numbers, not objects")
        headers[name] = [list(values.shape), values.dtype.str, f.tell()]
        f.write(values.tobytes())
    return headers


class StoredArray:
    """An array kept in a data file at ``offset`` (``header``: shape, dtype, offset), read piece by piece: an item,
    a slice or a set of rows reads only the bytes from the first to the last (a memory map would map far more than
    that: the kernel reads ahead and maps the pages around each fault, so a binary search alone mapped most of a
    file)."""

    def __init__(self, path: Path, header: tuple):
        self.path, self.header = path, header
        self.shape, self.dtype, self.offset = header

    def __len__(self) -> int:
        return self.shape[0]

    def _read(self, start: int, count: int) -> np.ndarray:
        return np.fromfile(self.path, dtype=self.dtype, count=max(count, 0),
                           offset=self.offset + start * self.dtype.itemsize)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        values = self._read(0, int(np.prod(self.shape))).reshape(self.shape)
        return values if dtype is None else values.astype(dtype)

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            return self._read(start, stop - start)[::step]
        if isinstance(key, (int, np.integer)):
            return self._read(int(key) % len(self), 1)[0]
        rows = np.asarray(key, dtype=np.int64)
        if not len(rows):
            return np.zeros(0, dtype=self.dtype)
        lo = int(rows.min())
        return self._read(lo, int(rows.max()) + 1 - lo)[rows - lo]
