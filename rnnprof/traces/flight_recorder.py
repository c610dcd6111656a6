"""A PyTorch flight-recorder dump (``_dump_fr_trace()``, or a ``TORCH_FR_DUMP_TEMP_FILE`` file written by NCCL's
watchdog) into a ``RankRecorder``, read without unpickling any object.

A dump is a pickle of dicts, lists, tuples, strings, numbers and None. It is untrusted input, so it is read by
an unpickler whose ``find_class`` refuses every name: a pickle that names a class or function (the only way a
pickle runs code) is refused with one line, before anything is built from it (docs/security.md)."""

from __future__ import annotations

import io
import pickle
import re
from collections import Counter
from pathlib import Path

from rnnprof.analyzers.hang import RecordedCollective, Frame, RankRecorder, own_frame
from rnnprof.errors import InputError
from rnnprof.limits import read_bytes

EXPECTED = "a PyTorch flight-recorder dump: a pickle of plain dicts and lists with an 'entries' list"
DEFAULT_GROUP = "0"


class _PlainOnly(pickle.Unpickler):
    """Builds only what a pickle holds as plain data; any named class or function is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names {module}.{name}, which rnnprof refuses to load")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("it holds a persistent reference, which rnnprof refuses to load")


def plain_unpickle(data: bytes, source: object) -> object:
    """The plain data a pickle holds; ``InputError`` when it is not a pickle or names any class or function."""
    try:
        return _PlainOnly(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        raise InputError(source, f"not read: {exc}", EXPECTED) from None
    except (EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError,
            MemoryError, RecursionError) as exc:
        raise InputError(source, f"not a readable pickle ({type(exc).__name__})", EXPECTED) from None


def read_flight_recorder(path: Path, rank: int | None = None) -> tuple[RankRecorder, list[str]]:
    """One rank's dump from ``path`` (its rank from the name's last number unless given) and notes on what was
    left out (other process groups)."""
    path = Path(path)
    if rank is None:
        rank = rank_of(path)
    return parse_flight_recorder(plain_unpickle(read_bytes(path), path), path, rank)


def rank_of(path: Path) -> int:
    numbers = re.findall(r"\d+", path.name)
    if not numbers:
        raise InputError(path, "its name holds no rank number", "one dump per rank, named with its rank "
                                                                 "(TORCH_FR_DUMP_TEMP_FILE's <prefix><rank>)")
    return int(numbers[-1])


def parse_flight_recorder(dump: object, source: object, rank: int) -> tuple[RankRecorder, list[str]]:
    """The default process group's collectives of a parsed dump, and a note per other group left out."""
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        raise InputError(source, "no 'entries' list", EXPECTED)
    entries = [e for e in dump["entries"] if isinstance(e, dict) and isinstance(e.get("collective_seq_id"), int)]
    groups = Counter(_group(e) for e in entries)
    group = DEFAULT_GROUP if DEFAULT_GROUP in groups or not groups else groups.most_common(1)[0][0]
    status = dump.get("pg_status") if isinstance(dump.get("pg_status"), dict) else {}
    last = (status.get(group) or {}).get("last_completed_collective") if isinstance(status.get(group), dict) else None
    last = last if isinstance(last, int) and last >= 0 else None
    collectives = tuple(sorted((_collective(e, group, last) for e in entries
                                if _group(e) == group and not e.get("is_p2p")), key=lambda c: c.seq))
    notes = [f"rank {rank}: left out {n} flight-recorder entries of process group {g}"
             for g, n in sorted(groups.items()) if g != group]
    return RankRecorder(rank, collectives, last), notes


def _group(entry: dict) -> str:
    return str(entry.get("pg_id", DEFAULT_GROUP))


def _collective(entry: dict, group: str, last_completed: int | None) -> RecordedCollective:
    seq = entry["collective_seq_id"]
    # gloo marks an entry retired when its work ends, and moves the group's last completed number later
    completed = (bool(entry.get("retired")) or entry.get("state") == "completed"
                 or (last_completed is not None and seq <= last_completed))
    created = entry.get("time_created_ns")
    return RecordedCollective(seq=seq, op=str(entry.get("profiling_name") or "?"),
                      input_sizes=_sizes(entry.get("input_sizes")), output_sizes=_sizes(entry.get("output_sizes")),
                      completed=completed, created_ns=created if isinstance(created, int) else None,
                      frame=own_frame(_frames(entry.get("frames"))), group=group)


def _frames(frames) -> list[Frame]:
    if not isinstance(frames, list):
        return []
    return [Frame(str(f.get("filename", "?")), f["line"] if isinstance(f.get("line"), int) else 0,
                  str(f.get("name", "?"))) for f in frames if isinstance(f, dict)]


def _sizes(sizes) -> tuple:
    if not isinstance(sizes, (list, tuple)):
        return ()
    return tuple(tuple(s) if isinstance(s, (list, tuple)) else (s,) for s in sizes)
