"""A watched job's step series as TensorBoard scalars (``rnnprof watch --tensorboard DIR``), beside the loss a user
already watches there: one run per rank (``DIR/rank<r>/``), tags ``rnnprof/step_ms``, ``rnnprof/<part>_ms`` (data
wait, forward, backward, optimizer), ``rnnprof/comm_wait_ms``, ``rnnprof/cpu_ms`` and ``rnnprof/memory_mb``, at the
job's step numbers and the steps' wall times.

Written with TensorBoard's own record writer and protos (``tensorboard.summary.writer.record_writer``,
``tensorboard.compat.proto``) into a plain file: no TensorFlow is imported, nor TensorBoard's ``SummaryWriter``.
A write that fails is returned as the reason, never raised: the watch goes on without scalars.
"""

from __future__ import annotations

import math
import os
import socket
import time
from pathlib import Path

from rnnprof.events.series import PARTS, RankSeries

TAGS = {"step_s": "rnnprof/step_ms", **{p: f"rnnprof/{p.removesuffix('_s')}_ms" for p in PARTS},
        "comm_wait_s": "rnnprof/comm_wait_ms", "cpu_s": "rnnprof/cpu_ms"}
MEMORY_TAG = "rnnprof/memory_mb"


class ScalarWriter:
    """Event files of the ranks' scalars under ``folder`` (see the module)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self._files: dict[int, object] = {}

    def _writer(self, rank: int):
        from tensorboard.compat.proto import event_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        if rank not in self._files:
            folder = self.folder / f"rank{rank}"
            folder.mkdir(parents=True, exist_ok=True)
            name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.rnnprof"
            writer = RecordWriter(open(folder / name, "ab"))
            writer.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
            self._files[rank] = writer
        return self._files[rank]

    def add(self, series: RankSeries) -> str | None:
        """Write ``series``' steps; the reason where they could not be written."""
        from tensorboard.compat.proto import event_pb2, summary_pb2

        try:
            writer = self._writer(series.rank)
            for i in range(len(series)):
                values = [summary_pb2.Summary.Value(tag=tag, simple_value=series[name][i] * 1e3)
                          for name, tag in TAGS.items() if math.isfinite(series[name][i])]
                if math.isfinite(series["memory"][i]):
                    values.append(summary_pb2.Summary.Value(tag=MEMORY_TAG, simple_value=series["memory"][i] / 1e6))
                event = event_pb2.Event(wall_time=float(series["end"][i]), step=int(series["step"][i]),
                                        summary=summary_pb2.Summary(value=values))
                writer.write(event.SerializeToString())
            writer.flush()
        except OSError as exc:
            self.close()
            return f"cannot write under {self.folder}: {exc.strerror or exc}"
        return None

    def close(self) -> None:
        for writer in self._files.values():
            try:
                writer.close()
            except OSError:
                pass
        self._files.clear()
