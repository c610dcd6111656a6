"""A job's rank parts kept in a scratch folder between the rounds of its analysis, one folder per rank.

A part is what an analysis keeps of a rank for a later round (``critical_path.job.RankPart``: named arrays with
the strings and devices their codes refer to). Each array is a ``.npy`` file of its own, read back piece by piece
(``StoredArray``): a step's task reads the rows of its window only. The strings, devices and the arrays' headers
are one JSON file: plain data, so nothing in a scratch folder is unpickled.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from rnnprof.analyzers.critical_path.job import RankPart
from rnnprof.events import Device
from rnnprof.files import atomic_write_bytes

PART_TABLES = "tables.json"  # a part's strings, devices and array headers


def save_parts(parts: dict[str, RankPart], folder: Path) -> None:
    """Each of a rank's ``parts`` (name -> part) in a folder of its name under ``folder``."""
    for name, part in parts.items():
        _save_part(part, folder / name)


def open_parts(folder: Path) -> dict[str, RankPart]:
    """The parts ``save_parts`` saved under ``folder``, by name, their arrays read as they are indexed."""
    return {path.name: _open_part(path) for path in sorted(folder.iterdir()) if (path / PART_TABLES).exists()}


def _save_part(part: RankPart, folder: Path) -> None:
    """One part: its arrays, each in a ``.npy`` file, and its strings, devices and array headers in JSON."""
    folder.mkdir(parents=True, exist_ok=True)
    headers = _save_arrays(part.arrays, folder)
    atomic_write_bytes(folder / PART_TABLES, msgspec.json.encode(
        {"strings": list(part.strings), "devices": [[d.kind, d.index, d.worker] for d in part.devices],
         "headers": headers}))


def _open_part(folder: Path) -> RankPart:
    """A part ``_save_part`` wrote, its arrays read from the files as they are indexed (a step reads the rows of
    its window only)."""
    tables = msgspec.json.decode((folder / PART_TABLES).read_bytes())
    return RankPart(_open_arrays(folder, tables["headers"]), tuple(tables["strings"]),
                    tuple(Device(kind, index, worker) for kind, index, worker in tables["devices"]))


def _save_arrays(arrays: dict, folder: Path) -> dict:
    """``arrays`` (name -> array) each saved by ``numpy.save`` in ``folder``; their headers, as plain data."""
    headers = {}
    for name, values in arrays.items():
        np.save(folder / f"{name}.npy", np.asarray(values))
        shape, dtype, offset = StoredArray(folder / f"{name}.npy").header
        headers[name] = [list(shape), dtype.str, offset]
    return headers


def _open_arrays(folder: Path, headers: dict) -> dict:
    """The arrays ``_save_arrays`` saved, each a ``StoredArray`` read as it is indexed."""
    return {name: StoredArray(folder / f"{name}.npy", (tuple(shape), np.dtype(dtype), offset))
            for name, (shape, dtype, offset) in headers.items()}


class StoredArray:
    """An array saved by ``numpy.save``, read piece by piece: an item, a slice or a set of rows reads only the
    bytes from the first to the last (a memory map would map far more than that: the kernel reads ahead and
    maps the pages around each fault, so a binary search alone mapped most of a file)."""

    def __init__(self, path: Path, header: tuple | None = None):
        self.path = path
        if header is None:  # (shape, dtype, where the data starts), read from the file's header
            with open(path, "rb") as f:
                version = np.lib.format.read_magic(f)
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                    np.lib.format.read_array_header_2_0
                shape, _, dtype = read(f)
                header = (shape, dtype, f.tell())
        self.header = header
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
