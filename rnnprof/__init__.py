"""rnnprof: run, instrument and explain multi-device data-parallel training (TensorFlow and PyTorch).

``rnnprof.open(path)`` analyses a run from Python (``rnnprof.api``); ``rnnprof.capture``, ``rnnprof.step`` and
``rnnprof.Capture`` record one (``rnnprof.recording.api``). Each loads when first used, so ``import rnnprof``
imports neither TensorFlow, torch nor the analyses.
"""

from rnnprof.version import __version__

_CAPTURE_API = ("capture", "step", "Capture", "KerasCaptureCallback")
_ANALYSIS_API = ("open", "Run")


def __getattr__(name: str):
    # The capture API pulls in TensorFlow only when used, never at ``import rnnprof``; the analysis API pulls in
    # numpy and the analyzers.
    if name in _CAPTURE_API:
        from rnnprof.recording import api

        return getattr(api, name)
    if name in _ANALYSIS_API:
        from rnnprof import api as analysis

        return getattr(analysis, name)
    raise AttributeError(f"module 'rnnprof' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_CAPTURE_API, *_ANALYSIS_API])
