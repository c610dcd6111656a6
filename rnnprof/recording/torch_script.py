"""Capturing one rank of a user's own PyTorch code, with no change to the training loop.

    with rnnprof.capture("runs/mine", steps=3, skip_steps=1):   # in torch code, or run by `rnnprof trace`
        for batch in data:
            ...
            optimizer.step()          # a step ends after each optimizer step

A step is one ``optimizer.step()`` of any optimizer (torch's global optimizer step hooks), or, once the
script calls ``rnnprof.step()``, the stretch from one such call to the next. The profiler (``TorchCapture``)
starts at the first step's start and records steps ``skip_steps`` .. ``skip_steps + steps - 1`` into
``torch/rank<r>.json.gz``; after the window one hook stays, which only times the steps for the rank's record.
The rank is ``RANK`` from the environment (0 without). Each rank records itself and rebuilds the manifest
(``capture.ranks``); details: docs/commands/trace.md.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from rnnprof import rundir
from rnnprof.recording import ranks
from rnnprof.recording.hang_probe import RankProbe
from rnnprof.recording.active import ClosedAsItEnded, StepContext, clear_active_capture, set_active_capture
from rnnprof.rundir.manifest import process_versions
from rnnprof.rundir.writer import prepare_out_dir
from rnnprof.recording.torch_profiler import TorchCapture

_BIG = 2**31 - 1  # steps=None: the window lasts until the capture closes


class TorchScriptCapture(ClosedAsItEnded):
    """One rank's capture of the user's torch code (see the module); ``start``/``close`` or ``with``."""

    def __init__(self, out_dir: str | Path, steps: int | None = 3, skip_steps: int = 1, force: bool = False,
                 command=None, _prepared: bool = False):
        if steps is not None and steps < 1:
            raise ValueError("steps must be at least 1 or None")
        self.out_dir = Path(out_dir)
        self.steps = steps
        self.skip_steps = max(0, int(skip_steps))
        self.rank = ranks.env_int("RANK", 0)
        self.world_size = ranks.env_int("WORLD_SIZE", 1)
        self._force = force
        self._prepared = _prepared
        self._command = command
        self._profiler = None  # TorchCapture, from the first step's start
        self._finished = None  # the TorchCapture whose window ended, its trace maybe still being written
        self._marked = False  # the script calls rnnprof.step(): optimizer steps no longer count
        self._open = False  # a marked step has begun and not ended
        self._handles: list = []  # the optimizer hooks of the window
        self._after_window = None  # the hook that times the steps after it
        self._backend: str | None = None
        self._facts: dict = {}
        self._window_done = False  # the window was written: no profiler again
        self._closed = False
        self._probe: RankProbe | None = None  # stacks, flight recorder and steps for the hang watch

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> "TorchScriptCapture":
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        if not self._prepared:
            if self.world_size == 1:
                prepare_out_dir(self.out_dir, force=self._force)
            else:  # the ranks of one job share the folder; each writes only its own files
                self.out_dir.mkdir(parents=True, exist_ok=True)
        if self._prepared:  # under `rnnprof trace`, which watches for hangs; before the window's hooks, which
            self._probe = RankProbe(self.out_dir, self.rank).install()  # remove themselves as they run
            self._progress = register_optimizer_step_post_hook(self._count_step)
        self._handles = [register_optimizer_step_pre_hook(self._before_optimizer),
                         register_optimizer_step_post_hook(self._after_optimizer)]
        set_active_capture(self)
        self._record(rundir.STATUS_RUNNING)
        return self

    def close(self, status: str = rundir.STATUS_COMPLETE, exit_code: int = 0, error: str | None = None,
              stopped: bool = False) -> dict:
        """End the capture (writing a window cut short) and record how this rank ended; returns the manifest."""
        if self._closed:
            return {}
        self._closed = True
        self._end_window()
        if self._probe is not None:
            self._progress.remove()
            self._probe.close()
        clear_active_capture(self)
        return self._record(status, exit_code=exit_code, error=error, stopped=stopped, ended=time.time())

    # -- steps -----------------------------------------------------------------------------------

    def step(self, n: int | None = None):
        """``rnnprof.step()``: a step begins here (ending the one before); ``with`` ends it at the block's end.
        Steps are numbered by the profiler, from 0; ``n`` is not used."""
        self._marked = True
        if self._probe is not None:
            self._probe.tick()
        if self._profiler is None and self._finished is None:
            self._begin()
        elif self._open:
            self._step_done()
        self._open = self._profiler is not None or self._finished is not None
        return StepContext(self)

    def end_step(self) -> None:
        """The end of ``with rnnprof.step():``."""
        if self._open:
            self._open = False
            self._step_done()

    def _count_step(self, optimizer, args, kwargs) -> None:
        if not self._marked:
            self._probe.tick()

    def _before_optimizer(self, optimizer, args, kwargs) -> None:
        if self._profiler is None and not self._marked:
            self._begin()

    def _after_optimizer(self, optimizer, args, kwargs) -> None:
        if not self._marked:
            self._step_done()

    def _begin(self) -> None:
        if self._closed or self._window_done:
            return

        self._profiler = TorchCapture(self.out_dir, self.rank, skip_steps=self.skip_steps,
                                      steps=self.steps or _BIG)

    def _step_done(self) -> None:
        if self._profiler is None and self._finished is not None and not self._closed:
            self._finished.step()  # after the window: the step's wall time only
        profiler = self._profiler
        if profiler is None or self._closed:
            return
        if self._backend is None:
            self._backend = ranks.process_group_backend()
        profiler.step()
        if profiler.captured_steps and len(profiler.captured_steps) >= profiler.steps:
            self._end_window(wait=False)  # the hooks go; the trace is written beside the training

    def _end_window(self, wait: bool = True) -> None:
        """Stop profiling; ``wait=False`` (the window's last step): the trace is written beside the training."""
        from torch.optim.optimizer import register_optimizer_step_post_hook

        for handle in [*self._handles, *filter(None, [self._after_window])]:
            handle.remove()
        self._handles.clear()
        self._after_window = None
        if self._profiler is not None:
            self._window_done = True
            self._finished = self._profiler
            self._profiler = None
            self._open = False
            self._finished.close(wait=False)
            if not wait:  # the run goes on: its steps are timed until the capture closes
                self._after_window = register_optimizer_step_post_hook(self._after_optimizer)
        if wait and self._finished is not None:
            finished, self._finished = self._finished, None
            self._facts = finished.close()

    # -- record ----------------------------------------------------------------------------------

    def _record(self, status: str, **fields) -> dict:
        record = {"rank": self.rank, "local_rank": ranks.env_int("LOCAL_RANK", self.rank), "pid": os.getpid(),
                  "trace": None, "steps": [], "steps_run": 0, "skip_steps": self.skip_steps,
                  "window_steps": self.steps, **self._facts, "status": status,
                  "world_size": self.world_size, "backend": self._facts.get("backend") or self._backend,
                  "versions": process_versions()}
        record.update({k: v for k, v in fields.items() if v is not None})
        return ranks.write_record(self.out_dir, record, self._command)

