"""The active capture: the one that ``rnnprof.step()`` marks (a ``TensorFlowCapture``, or a ``TorchScriptCapture``
in PyTorch code), read through ``active_capture()`` as viztracer's ``get_tracer()``; and ``StepContext``, what a
capture's ``step()`` returns so that ``with cap.step():`` ends the step at the block's end."""

from __future__ import annotations

from typing import Protocol

from rnnprof import rundir


class Steppable(Protocol):
    """What a capture offers ``rnnprof.step()`` and ``StepContext``."""

    def step(self, n: int | None = None) -> "StepContext": ...

    def end_step(self) -> None: ...


_active: Steppable | None = None


def active_capture() -> Steppable | None:
    """The capture that ``rnnprof.step()`` marks, or None."""
    return _active


def set_active_capture(capture: Steppable) -> None:
    global _active
    _active = capture


def clear_active_capture(capture: Steppable) -> None:
    """No capture is active any more, if ``capture`` was."""
    global _active
    if _active is capture:
        _active = None


class ClosedAsItEnded:
    """``with capture:``: ``start()`` on entry; on exit, ``close()`` with how the block ended: normally (or a zero
    ``SystemExit``), interrupted by Ctrl-C (exit code 130, stopped), or with the exception as the error (exit code
    1). For the captures of a rank of a user's script (``TorchScriptCapture``, ``TorchRankWatch``)."""

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None or (issubclass(exc_type, SystemExit) and not exc.code):
            self.close()
        elif issubclass(exc_type, KeyboardInterrupt):
            self.close(rundir.STATUS_INTERRUPTED, exit_code=130, stopped=True)
        else:
            self.close(rundir.STATUS_INTERRUPTED, exit_code=1, error=f"the script raised {exc_type.__name__}: {exc}")


class StepContext:
    """``with cap.step():``: the step ends at the block's end."""

    def __init__(self, capture: Steppable):
        self._capture = capture

    def __enter__(self) -> Steppable:
        return self._capture

    def __exit__(self, *exc) -> None:
        self._capture.end_step()
