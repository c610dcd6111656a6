"""Import TensorFlow without its C++ start-up chatter.

TF writes oneDNN notices and "All log messages before absl::InitializeLog()" to file
descriptor 2 before TF_CPP_MIN_LOG_LEVEL applies; for rnnprof users they are noise in
front of every report. Every in-process TensorFlow import goes through here.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

from rnnprof.errors import TENSORFLOW_EXTRAS, MissingDependency, is_missing

# TF's C++ start-up lines (oneDNN notices, "All log messages before absl::InitializeLog()") are
# written before TF_CPP_MIN_LOG_LEVEL applies: info and warning lines of that form are dropped.
_STARTUP_NOISE = re.compile(rb"^(?:WARNING: All log messages before absl::InitializeLog|[IW]\d{4} [\d:.]+ +\d+ \S+\] )")


# Graph optimization at the first run of a graph logs this notice as an error line
# ("E0000 ... oneDNN supports DT_INT32 only on platforms with AVX-512. Falling back ..."):
# TF then uses its default kernels, nothing fails. Only this exact notice is dropped.
_FIRST_RUN_NOISE = re.compile(rb"^E\d{4} [\d:.]+ +\d+ util\.cc:\d+\] oneDNN supports DT_INT32 only on platforms with AVX-512")


@contextlib.contextmanager
def quiet_first_run():
    """Around the first ``Session.run`` of a graph: drop TF's oneDNN fallback notice."""
    with _native_stderr_filtered(_FIRST_RUN_NOISE):
        yield


# What TensorFlow's import loads last, "so that any function/method that needs to happen at load time will trigger"
# (Keras 3's, or tf_keras's with TF_USE_LEGACY_KERAS): through Keras, pandas and IPython too, a third of the import's
# CPU time. TensorFlow passes over it when it cannot be imported.
_KERAS_EAGER_LOADS = ("keras.src.optimizers", "tf_keras.src.optimizers")


def import_tensorflow(needed_for: str = "this command"):
    """Import TensorFlow quietly (its C++ start-up log is noise for rnnprof users), for rnnprof's own work: its
    workloads, a cluster's tasks, the kernel registry. None of it uses Keras, so the Keras that TensorFlow's import
    loads eagerly is left out (a later ``import keras`` or ``tf.keras`` still loads it). A user's script always
    gets TensorFlow as it imports itself.
    Without TensorFlow: ``MissingDependency`` (one line, exit 2) naming the extras that install it.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if sys.modules.get("tensorflow") is None:
        skipped = [name for name in _KERAS_EAGER_LOADS if name not in sys.modules]
        for name in skipped:
            sys.modules[name] = None  # an import of it fails at once, before its package's own import
        try:
            with _native_stderr_filtered(_STARTUP_NOISE):
                import tensorflow  # noqa: F401
        except ImportError as exc:
            if not is_missing(exc, "tensorflow"):
                raise
            raise MissingDependency("TensorFlow", needed_for, TENSORFLOW_EXTRAS) from None
        finally:
            for name in skipped:
                if name in sys.modules and sys.modules[name] is None:
                    del sys.modules[name]
    return sys.modules["tensorflow"]


@contextlib.contextmanager
def _native_stderr_filtered(noise: re.Pattern):
    """Route file descriptor 2 (where C++ logs go) to a file meanwhile, then pass on all but ``noise``."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to filter
        yield
        return
    with tempfile.TemporaryFile() as held:
        sys.stderr.flush()
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = b"".join(line for line in held if not noise.match(line))
            if kept:
                os.write(2, kept)
