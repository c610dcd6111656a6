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
