"""The capture of TensorFlow code (``TensorFlowCapture``; ``rnnprof.Capture`` is its name for users).

* TF2 (eager, tf.function): tf.profiler records the window (xplane with step markers); function graphs
  (pre-optimization, post-optimization, partitions) are kept under ``graphs/functions/``. Run metadata is enabled
  as soon as the eager runtime is initialized, because TF records a function's graphs only when it is first
  instantiated.
* TF1 (graph-mode ``Session.run``): runs inside the window get RunOptions FULL_TRACE; each step's step_stats
  become a timeline, plus RunMetadata, partition graphs and the per-device XSpace.

Without step markers, a step is one call of a top-level ``tf.function`` (Keras ``fit`` runs one per batch) or
one ``Session.run``.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from rnnprof import rundir
from rnnprof.recording.active import StepContext, clear_active_capture, set_active_capture
from rnnprof.recording.interrupt import interrupts_deferred
from rnnprof.recording.nvtx import nvtx_range
from rnnprof.rundir.manifest import session_config_fields
from rnnprof.rundir.writer import RunWriter
from rnnprof.recording.session import write_device_xspace
from rnnprof.training.runner import LOCAL


class TensorFlowCapture:
    """A capture of TensorFlow code (TF2 eager and tf.function, or TF1 sessions) into a run directory."""


    def __init__(self, out_dir: str | Path, steps: int | None = None, skip_steps: int = 0, delay: float = 0.0,
                 force: bool = False, command=None, config: dict | None = None, auto_steps: bool = True,
                 _writer: RunWriter | None = None, _probe=None):
        if steps is not None and steps < 1:
            raise ValueError("steps must be at least 1 or None")
        self.out_dir = Path(out_dir)
        self.steps = steps
        self.skip_steps = max(0, int(skip_steps))
        self.delay = max(0.0, float(delay))
        self.auto_steps = auto_steps
        self._force = force
        self._command = command
        self._config = config
        self.writer = _writer
        self.mode: str | None = None  # "tf2" | "tf1" once the window opens
        self._lock = threading.RLock()
        self._started = 0.0
        self._seen_steps = 0
        self._marked = False  # the user marks steps: automatic detection stops
        self._window_open = False
        self._window_done = False
        self._window_steps: list[int] = []
        self._current: int | None = None
        self._trace_ctx = None
        self._step_range = None
        self._runs: list = []  # RunMetadata of the Session.run calls of the current step
        self._traced: list = []  # (step, merged RunMetadata)
        self._profile_scratch: Path | None = None
        self._eager_metadata = False
        self._hooked_context = None  # the eager context whose initialization enables run metadata
        self._unhooks: list = []
        self._function_depth = threading.local()
        self._probe = _probe  # under ``rnnprof trace``: stacks and finished steps for its hang watch (hang_probe)
        self._unfinished = False  # a step has begun and not finished (for the probe's count)

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> "TensorFlowCapture":
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        interrupted = exc_type is not None and issubclass(exc_type, (KeyboardInterrupt, Exception))
        self.close(rundir.STATUS_INTERRUPTED if interrupted else rundir.STATUS_COMPLETE)

    def start(self) -> "TensorFlowCapture":
        if self.writer is None:
            self.writer = RunWriter(self.out_dir, command=self._command, force=self._force,
                                    config=self._config if self._config is not None else {"script": list(sys.argv)})
        self._started = time.monotonic()
        tf = _tensorflow()
        if tf is not None and tf.executing_eagerly():
            self._enable_eager_metadata()
        if tf is not None:
            self._install_hooks(tf)
        if self._probe is not None:
            self._probe.install()
        set_active_capture(self)
        if self.steps is None and not self.auto_steps and self.delay == 0 and self.skip_steps == 0:
            self._open_window()
        return self

    def close(self, status: str = rundir.STATUS_COMPLETE) -> None:
        with self._lock:
            try:
                if self._current is not None:
                    self._end_step()
                if self._window_open:
                    self._close_window()
            finally:
                for unhook in reversed(self._unhooks):
                    unhook()
                self._unhooks.clear()
                self._disable_eager_metadata()
                clear_active_capture(self)
                if self._probe is not None:
                    self._probe.close()
                if self.writer is not None:
                    self.writer.manifest["steps_seen"] = self._seen_steps  # tells an empty window apart
                    self.writer.finish(status)

    # -- steps -----------------------------------------------------------------------------------

    def step(self, n: int | None = None):
        """Mark the start of a step (ending the previous one); usable as ``with cap.step():``."""
        with self._lock:
            self._marked = True
            self._begin_step(n)
        return StepContext(self)

    def end_step(self) -> None:
        """End the current step (the end of ``with cap.step():``, or a Keras batch's end)."""
        with self._lock:
            self._finished()
            self._end_step()

    def _finished(self) -> None:
        """The step begun last has finished: counted once for the hang watch."""
        if self._unfinished and self._probe is not None:
            self._probe.tick()
        self._unfinished = False

    def _begin_step(self, n: int | None) -> None:
        self._finished()  # the step before, when nothing ended it
        self._unfinished = True
        if self._current is not None:
            self._end_step()
        number = self._seen_steps if n is None else int(n)
        self._seen_steps += 1
        if (not self._window_open and not self._window_done and self._seen_steps > self.skip_steps
                and time.monotonic() - self._started >= self.delay):
            self._open_window()
        if self._window_open:
            self._current = number
            self._runs = []
            self._step_range = nvtx_range(f"step {number}")
            self._step_range.__enter__()
            if self.mode == "tf2":
                import tensorflow as tf

                self._trace_ctx = tf.profiler.experimental.Trace("train", step_num=number, _r=1)
                self._trace_ctx.__enter__()

    def _end_step(self) -> None:
        number, self._current = self._current, None
        if number is None:
            return
        if self._trace_ctx is not None:
            self._trace_ctx.__exit__(None, None, None)
            self._trace_ctx = None
        if self._step_range is not None:
            self._step_range.__exit__(None, None, None)
            self._step_range = None
        if self.mode == "tf1" and self._runs:
            merged = _merge_run_metadata(self._runs)
            self.writer.write_step(number, merged)
            self._traced.append((number, merged))
        self._runs = []
        self._window_steps.append(number)
        if self.steps is not None and len(self._window_steps) >= self.steps:
            self._close_window()

    # -- window ----------------------------------------------------------------------------------

    def _open_window(self) -> None:
        tf = _tensorflow()
        if tf is None:
            import tensorflow as tf  # noqa: F811  the user's code imported nothing yet
        self.mode = "tf2" if tf.executing_eagerly() else "tf1"
        self._window_open = True
        self._record_devices(tf)
        if self.mode == "tf2":
            self._profile_scratch = self.writer.scratch_dir("profile")
            tf.profiler.experimental.start(str(self._profile_scratch))

    def _close_window(self) -> None:
        with interrupts_deferred():  # a Ctrl-C while the window is written comes once it is written
            self._write_window()

    def _write_window(self) -> None:
        self._window_open = False
        self._window_done = True
        manifest = self.writer.manifest
        if self.mode == "tf2":
            import tensorflow as tf

            try:
                tf.profiler.experimental.stop()
            finally:
                self.writer.adopt_profile(self._profile_scratch)
                manifest["profiled_steps"] = list(self._window_steps)
            self._write_function_graphs()
        elif self.mode == "tf1" and self._traced:
            name = time.strftime("%Y_%m_%d_%H_%M_%S")
            write_device_xspace(self.writer, self._traced, name)
        self.writer.save_manifest()

    def _record_devices(self, tf) -> None:
        try:
            devices = [_full_device(d.name) for d in tf.config.list_logical_devices()]
        except Exception:
            devices = []
        if devices:
            self.writer.set_devices(devices)

    def _write_function_graphs(self) -> None:
        if not self._eager_metadata:
            return
        from tensorflow.python.eager import context

        metadata = context.context().export_run_metadata()
        if metadata is None or not metadata.function_graphs:
            return
        base = f"{rundir.GRAPHS_DIR}/{rundir.FUNCTIONS_DIR}"
        for k, fg in enumerate(metadata.function_graphs):
            folder = f"{base}/{k}"
            if fg.pre_optimization_graph.node:
                self.writer.write_graph(fg.pre_optimization_graph, folder, "pre_optimization")
            if fg.post_optimization_graph.node:
                self.writer.write_graph(fg.post_optimization_graph, folder, "post_optimization")
            self.writer.write_partition_graphs(fg.partition_graphs, f"{folder}/{rundir.PARTITIONS_DIR}")
        self.writer.write_run_metadata("functions.pb", metadata.SerializeToString())
        self.writer.save_manifest()

    def _enable_eager_metadata(self) -> None:
        """Run metadata (function graphs) from the moment TensorFlow's eager runtime exists.

        Enabling it initializes the runtime, after which a script can no longer set its threads or
        logical devices (``tf.config.threading.*``, ``tf.config.set_logical_device_configuration``).
        An uninitialized runtime is left alone: the metadata is enabled right after the runtime
        initializes itself (its first op, function or device query), which is before any function runs.
        """
        from tensorflow.python.eager import context

        ctx = context.context()
        if ctx._initialized:
            ctx.enable_run_metadata()
            self._eager_metadata = True
            return
        original = ctx.ensure_initialized  # the bound method; the hook shadows it on this one context
        capture = self

        def ensure_initialized():
            original()
            if vars(ctx).get("ensure_initialized") is ensure_initialized and ctx._initialized:
                if vars(ctx).pop("ensure_initialized", None) is ensure_initialized:  # once, in one thread
                    with capture._lock:
                        if capture._hooked_context is ctx:
                            capture._hooked_context = None
                            ctx.enable_run_metadata()
                            capture._eager_metadata = True

        def unhook():
            if vars(ctx).get("ensure_initialized") is ensure_initialized:
                vars(ctx).pop("ensure_initialized", None)
            self._hooked_context = None

        self._hooked_context = ctx
        ctx.ensure_initialized = ensure_initialized
        self._unhooks.append(unhook)

    def _disable_eager_metadata(self) -> None:
        if self._eager_metadata:
            self._eager_metadata = False
            try:
                from tensorflow.python.eager import context

                context.context().disable_run_metadata()
            except Exception:
                pass

    # -- hooks -----------------------------------------------------------------------------------

    def _install_hooks(self, tf) -> None:
        self._hook_session_run()
        self._hook_functions()

    def _hook_session_run(self) -> None:
        from tensorflow.python.client import session as session_lib

        original = session_lib.BaseSession.run
        capture = self

        def run(sess, fetches, feed_dict=None, options=None, run_metadata=None):
            return capture._session_run(original, sess, fetches, feed_dict, options, run_metadata)

        session_lib.BaseSession.run = run
        self._unhooks.append(lambda: setattr(session_lib.BaseSession, "run", original))

    def _session_run(self, original, sess, fetches, feed_dict, options, run_metadata):
        with self._lock:
            auto = self.auto_steps and not self._marked
            if auto:
                self._begin_step(None)
            tracing = self._window_open and self.mode == "tf1" and self._current is not None
            if tracing and not self.writer.session_config:
                self._record_session(sess)
        try:
            if not tracing:
                return original(sess, fetches, feed_dict, options, run_metadata)
            import tensorflow as tf

            traced_options = tf.compat.v1.RunOptions()
            if options is not None:
                traced_options.CopyFrom(options)
            traced_options.trace_level = tf.compat.v1.RunOptions.FULL_TRACE
            traced_options.output_partition_graphs = True
            metadata = tf.compat.v1.RunMetadata()
            result = original(sess, fetches, feed_dict, traced_options, metadata)
            if run_metadata is not None:
                run_metadata.MergeFrom(metadata)
            with self._lock:
                self._runs.append(metadata)
            return result
        finally:
            if auto:
                with self._lock:
                    self._finished()
                    self._end_step()

    def _record_session(self, sess) -> None:
        config = getattr(sess, "_config", None)
        if config is not None:
            self.writer.manifest["session_config"] = session_config_fields(config)
        try:
            self.writer.set_devices([d.name for d in sess.list_devices()])
            self.writer.write_graph(sess.graph.as_graph_def(add_shapes=True))
        except Exception:
            pass

    def _hook_functions(self) -> None:
        from tensorflow.python.eager.polymorphic_function import polymorphic_function as pf

        original = pf.Function.__call__
        capture = self
        depth = self._function_depth

        def call(fn, *args, **kwargs):
            level = getattr(depth, "value", 0)
            auto = level == 0 and capture.auto_steps and not capture._marked and _eager()
            depth.value = level + 1
            try:
                if auto:
                    with capture._lock:
                        capture._begin_step(None)
                return original(fn, *args, **kwargs)
            finally:
                depth.value = level
                if auto:
                    with capture._lock:
                        capture._finished()
                        capture._end_step()

        pf.Function.__call__ = call
        self._unhooks.append(lambda: setattr(pf.Function, "__call__", original))


def _full_device(name: str) -> str:
    return name if name.startswith("/job:") else LOCAL + name


def _tensorflow():
    return sys.modules.get("tensorflow")


def _eager() -> bool:
    tf = _tensorflow()
    return bool(tf is not None and tf.executing_eagerly())


def _merge_run_metadata(runs: list):
    """One RunMetadata for a step made of several ``Session.run`` calls."""
    if len(runs) == 1:
        return runs[0]
    merged = type(runs[0])()
    seen_partitions = set()
    for rm in runs:
        merged.step_stats.dev_stats.extend(rm.step_stats.dev_stats)
        for graph in rm.partition_graphs:
            key = graph.SerializeToString(deterministic=True)
            if key not in seen_partitions:
                seen_partitions.add(key)
                merged.partition_graphs.add().CopyFrom(graph)
    return merged
