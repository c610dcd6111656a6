"""NVTX ranges for Nsight Systems, which never fail.

Ranges cost nothing without a CUDA profiler attached; if the ``nvtx`` package is
missing or broken they are plain no-ops, so capture code can use them everywhere.
"""

from __future__ import annotations

import contextlib

DOMAIN = "rnnprof"
_nvtx = None
_tried = False


def _module():
    global _nvtx, _tried
    if not _tried:
        _tried = True
        try:
            import nvtx  # type: ignore

            _nvtx = nvtx
        except Exception:  # any import problem means: no ranges
            _nvtx = None
    return _nvtx


@contextlib.contextmanager
def nvtx_range(name: str, color: str | None = None):
    """``with nvtx_range("step 3"):`` -> an NVTX push/pop in the rnnprof domain."""
    nvtx = _module()
    handle = None
    if nvtx is not None:
        try:
            handle = nvtx.start_range(message=name, color=color, domain=DOMAIN)
        except Exception:
            handle = None
    try:
        yield
    finally:
        if handle is not None:
            try:
                nvtx.end_range(handle)
            except Exception:
                pass


class NvtxSpan:
    """A range opened and closed at different places (warm-up: before ``measure``, ended from its callback)."""

    def __init__(self, name: str):
        self._cm = nvtx_range(name)
        self._cm.__enter__()
        self._open = True

    def end(self) -> None:
        if self._open:
            self._open = False
            self._cm.__exit__(None, None, None)


class NvtxSteps:
    """The run, with NVTX ranges for Nsight Systems: "warm-up" and "timed" around the two phases of
    ``measure`` and "step N" around each step. Forward, backward and update run inside one
    ``Session.run``, so no range can separate them; their op name scopes do (see the README)."""

    def __init__(self, run, warmup: int):
        self._run = run
        self._warmup = warmup
        self._n = 0
        self._phase = None

    def step(self):
        if self._n == 0 and self._warmup or self._n == self._warmup:
            self.end()
            self._phase = NvtxSpan("warm-up" if self._n < self._warmup else "timed")
        with nvtx_range(f"step {self._n}"):
            self._n += 1
            return self._run.step()

    def end(self) -> None:
        if self._phase is not None:
            self._phase.end()
            self._phase = None
