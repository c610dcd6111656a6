"""rnnprof: run, instrument and explain multi-device data-parallel training (TensorFlow and PyTorch)."""

from rnnprof.version import __version__

_CAPTURE_API = ("capture", "step", "Capture", "KerasCaptureCallback")


def __getattr__(name: str):
    # The capture API pulls in TensorFlow only when used, never at ``import rnnprof``.
    if name in _CAPTURE_API:
        from rnnprof.recording import api

        return getattr(api, name)
    raise AttributeError(f"module 'rnnprof' has no attribute {name!r}")
