"""Capturing a user's own training code into a run directory.

    with rnnprof.capture("runs/mine", steps=3) as cap:
        for batch in data:
            with cap.step():          # or rnnprof.step(n) at the start of each step
                train_step(batch)

The window opens after ``skip_steps`` steps and ``delay`` seconds and closes after ``steps`` steps
(``steps=None``: when the capture ends). TF2 (eager, tf.function): tf.profiler records the window and the
function graphs are kept under ``graphs/functions/`` (run metadata is enabled as soon as the eager runtime
exists, since TF records a function's graphs only when it is first instantiated). TF1 (``Session.run``):
runs in the window get FULL_TRACE, giving timelines, RunMetadata, partition graphs and the per-device XSpace.
Without step markers a step is one top-level ``tf.function`` call or one ``Session.run``.
See docs/commands/trace.md.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from rnnprof.recording.active import active_capture
from rnnprof.recording.tf_capture import TensorFlowCapture
from rnnprof.recording.torch_script import TorchScriptCapture

Capture = TensorFlowCapture  # the name users know (``rnnprof.Capture``); PyTorch code gets a TorchScriptCapture


def capture(out_dir: str | Path, steps: int | None = None, skip_steps: int = 0, delay: float = 0.0,
            force: bool = False, framework: str | None = None,
            **kwargs) -> TensorFlowCapture | TorchScriptCapture:
    """A capture of the user's own code into the run directory ``out_dir`` (use as ``with``).

    In PyTorch code it is a ``TorchScriptCapture`` (``capture.torch_script``): a step is one
    ``optimizer.step()`` or one ``rnnprof.step()``. ``framework`` ("tensorflow" or "torch") says which
    code it is; by default PyTorch code is a process that imported torch and not TensorFlow (one that
    imported both should say).
    """
    if framework not in (None, "tensorflow", "torch"):
        raise ValueError(f"framework must be 'tensorflow' or 'torch', got {framework!r}")
    if framework is None:
        framework = "torch" if "torch" in sys.modules and "tensorflow" not in sys.modules else "tensorflow"
    if framework == "torch":
        if delay:
            raise ValueError("delay applies to TensorFlow code; in PyTorch code the window is set by skip_steps "
                             "and steps")

        return TorchScriptCapture(out_dir, steps=steps, skip_steps=skip_steps, force=force,
                                  command=kwargs.get("command"))
    return TensorFlowCapture(out_dir, steps=steps, skip_steps=skip_steps, delay=delay, force=force, **kwargs)


def step(n: int | None = None):
    """Mark the start of step ``n`` in the active capture; a no-op without one."""
    current = active_capture()
    if current is None:
        return contextlib.nullcontext()
    return current.step(n)


_keras_class = None


def _keras_callback_class():
    global _keras_class
    if _keras_class is None:
        import keras

        class KerasCaptureCallback(keras.callbacks.Callback):
            """Captures ``steps`` training batches of ``fit`` after ``skip_steps`` into ``out_dir``."""

            def __init__(self, out_dir, steps: int | None = 3, skip_steps: int = 1, delay: float = 0.0,
                         force: bool = False, **kwargs):
                super().__init__()
                self.capture = TensorFlowCapture(out_dir, steps=steps, skip_steps=skip_steps, delay=delay, force=force,
                                       auto_steps=False, **kwargs)
                self._global_step = 0

            def on_train_begin(self, logs=None):
                self.capture.start()

            def on_train_batch_begin(self, batch, logs=None):
                self.capture.step(self._global_step)
                self._global_step += 1

            def on_train_batch_end(self, batch, logs=None):
                self.capture.end_step()

            def on_train_end(self, logs=None):
                self.capture.close()

        _keras_class = KerasCaptureCallback
    return _keras_class


def __getattr__(name: str):
    if name == "KerasCaptureCallback":
        return _keras_callback_class()
    raise AttributeError(name)
