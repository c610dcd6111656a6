"""Data-parallel training of one workload on N devices, in graph mode.

``DataParallelRun`` builds one tower per device in a fresh ``tf.Graph``, wires
the gradient exchange that ``--variable-update`` asks for, opens a Session and
initializes the variables. Its graph scopes (``tower_k/...``, ``allreduce/...``,
``gradient_aggregation/...``, ``update/...``) are named in ``rnnprof.events.names``, where the
analyses read them.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from rnnprof.models.config import FEW_INTER_OP_THREADS, MOMENTUM, UPDATES_ON_DEVICE0, WorkloadConfig, validate
from rnnprof.events import names
from rnnprof.errors import UsageError
from rnnprof.training.cpu_clock import CpuClock, CpuTimes
from rnnprof.training.measure import StepResult
from rnnprof.frameworks.tensorflow import import_tensorflow, quiet_first_run
from rnnprof.models import get_workload
from rnnprof.training.allreduce import all_reduce_sum
from rnnprof.training.clock import clock_ops
from rnnprof.training.cluster import PS_JOB, WORKER_JOB, task_name

LOCAL = "/job:localhost/replica:0/task:0"
HOST_DEVICE = f"{LOCAL}/device:CPU:0"  # without a cluster; ``DataParallelRun.host_device`` in general


def visible_gpus() -> int:
    """GPUs TensorFlow sees."""
    tf = import_tensorflow()
    return len(tf.config.list_physical_devices("GPU"))


def thread_warnings(config: WorkloadConfig) -> list[str]:
    """Thread settings that make a multi-device measurement misleading.

    One inter-op thread runs one op at a time, so towers cannot overlap. (Ring
    and hierarchical collectives do complete with one thread on TF 2.21, checked
    on up to 4 logical CPU devices.)
    """
    if config.devices > 1 and config.inter_op_threads == 1:
        return [f"--inter-op-threads 1 runs one op at a time: the {config.devices} towers cannot "
                "overlap, so the timing shows serialized towers; use 0 (TF default) or more threads"]
    return []


def device_plan(config: WorkloadConfig, gpus: int, prefixes: list[str]) -> tuple[list[str], str]:
    """Tower devices: ``config.devices`` on each task prefix (one prefix, ``LOCAL``, without a cluster)."""
    if gpus:
        if config.devices > gpus:
            raise UsageError(f"--devices {config.devices} but only {gpus} GPU(s) are visible")
        kind, device_kind = "GPU", "gpu"
    else:
        # No GPU: soft placement moves requested GPU towers to the CPU; a placement audit shows where.
        kind, device_kind = ("GPU" if config.request_gpu else "CPU"), "logical-cpu"
    return [f"{prefix}/device:{kind}:{k}" for prefix in prefixes for k in range(config.devices)], device_kind


def _reduce_devices(device_names: list[str], gpus: int) -> list[str]:
    """Where each tower's share of the all-reduce runs.

    Requested GPUs that do not exist all fall back to one CPU device, and a
    collective whose members share a device never completes; the exchange then
    runs on the matching logical CPU devices instead.
    """
    if gpus or "GPU" not in device_names[0]:
        return list(device_names)
    return [name.replace("/device:GPU:", "/device:CPU:") for name in device_names]


def session_config(config: WorkloadConfig, device_kind: str, leader: str = LOCAL):
    """The session's ConfigProto; ``--plant few-inter-op-threads`` gives it one inter-op thread."""
    tf = import_tensorflow()
    proto = tf.compat.v1.ConfigProto(
        allow_soft_placement=config.soft_placement or config.request_gpu,
        inter_op_parallelism_threads=1 if config.plant == FEW_INTER_OP_THREADS else config.inter_op_threads,
        intra_op_parallelism_threads=config.intra_op_threads,
    )
    if device_kind == "logical-cpu":
        proto.device_count["CPU"] = config.devices
    else:
        proto.gpu_options.allow_growth = True
    proto.experimental.collective_group_leader = leader
    return proto


def make_optimizer(config: WorkloadConfig, name: str):
    tf = import_tensorflow()
    if config.optimizer == "adam":
        return tf.compat.v1.train.AdamOptimizer(config.learning_rate, name=name)
    if config.optimizer == "momentum":
        return tf.compat.v1.train.MomentumOptimizer(config.learning_rate, MOMENTUM, name=name)
    return tf.compat.v1.train.GradientDescentOptimizer(config.learning_rate, name=name)


def _exchangeable(grad, variable, dense: bool):
    """A missing gradient is zero. All-reduce and add_n need dense gradients; a tower that
    exchanges nothing keeps an embedding's sparse gradient, so only looked-up rows are updated."""
    tf = import_tensorflow()
    if grad is None:
        return tf.zeros_like(variable)
    return tf.convert_to_tensor(grad) if dense else grad


class DataParallelRun:
    """One training graph with a tower per device, ready to ``step()``.

    Use as a context manager, or call ``close()``.
    """

    def __init__(self, config: WorkloadConfig, workload=None, cluster=None):
        tf = import_tensorflow()
        tf1 = tf.compat.v1
        gpus = visible_gpus()
        validate(config, gpus)
        self.config = config
        self.cluster = cluster  # a cluster.ClusterSpec whose tasks run; None: every tower in this process
        self.warnings = thread_warnings(config)
        if cluster is None:
            self.worker_prefixes, leader, target = [LOCAL], LOCAL, ""
        else:
            self.worker_prefixes = [task_name(WORKER_JOB, t) for t in range(cluster.workers)]
            self.ps_devices = [f"{task_name(PS_JOB, t)}/device:CPU:0" for t in range(cluster.ps_tasks)]
            leader, target = self.worker_prefixes[0], cluster.master()
        self.host_device = f"{self.worker_prefixes[0]}/device:CPU:0"  # the chief's: metrics, pscpu sums
        self.device_names, self.device_kind = device_plan(config, gpus, self.worker_prefixes)
        self.reduce_devices = _reduce_devices(self.device_names, gpus)
        self.workload = workload = workload_of(config, workload)
        self.steps_run = 0
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf1.set_random_seed(config.seed)
            self._build(tf, tf1)
            init = tf1.global_variables_initializer()
            if cluster is not None:
                self.clock_ops = clock_ops(cluster)
        # the ConfigProto the session runs with
        self.session_proto = session_config(config, self.device_kind, leader)
        self.session = tf1.Session(target, graph=self.graph, config=self.session_proto)
        try:
            self.session.run(init)
            if self._sync_op is not None:
                self.session.run(self._sync_op)
            self.graph.finalize()
        except BaseException:
            self.session.close()
            raise
        batch = config.per_device_batch()
        self._batches = [workload.batches(batch, k, config.seed) for k in range(len(self.device_names))]

    # -- graph construction -------------------------------------------------

    def _build(self, tf, tf1) -> None:
        """Each tower's loss and gradients, the updates of the variable-update mode, then the metrics."""
        config = self.config
        chief = self.worker_prefixes[0]
        ps_device = self.host_device if config.local_parameter_device == "cpu" else f"{chief}/device:GPU:0"
        self.parameter_device = ps_device if config.variable_update == "parameter_server" else None
        self.parameter_spread = ParameterSpread(getattr(self, "ps_devices", None) or [ps_device], config.ps_placement)
        losses, words, grads = self._build_towers(tf, tf1)
        n = len(self.device_names)
        self._sync_op = None
        if config.variable_update == "independent":
            updates = self._independent_updates(tf, tf1, grads)
        elif config.variable_update == "parameter_server":
            updates = self._parameter_server_updates(tf, tf1, grads)
        else:
            updates = self._all_reduce_updates(tf, tf1, grads)
        with tf1.name_scope(names.METRICS_SCOPE), tf.device(self.host_device):
            self.loss = tf.add_n(losses) / n if n > 1 else tf.identity(losses[0])
            self.words = tf.add_n([tf.cast(w, tf.int64) for w in words])
        self.train_op = tf.group(*updates, name="train_op")

    def _build_towers(self, tf, tf1) -> tuple[list, list, list]:
        """One tower per device: its inputs, model and gradients (its trainable variables in ``_tower_vars``);
        returns the towers' losses, word counts and gradients."""
        mode = self.config.variable_update
        exchange = mode != "independent" and len(self.device_names) > 1
        self._inputs, self._tower_vars, losses, words, grads = [], [], [], [], []
        for k, device in enumerate(self.device_names):
            created: list = []
            with tf.device(device), self._variable_scope(tf, tf1, k, created), tf1.name_scope(names.tower_scope(k)):
                inputs = self.workload.make_inputs(k)
                out = self.workload.build_tower(inputs, k, self.device_names)
                with tf1.name_scope(names.GRADIENTS_SCOPE):
                    tower_grads = tf1.gradients(out.loss, created, colocate_gradients_with_ops=True)
                    tower_grads = [_exchangeable(g, v, dense=exchange) for g, v in zip(tower_grads, created)]
            self._inputs.append(inputs)
            self._tower_vars.append(created)
            losses.append(out.loss)
            words.append(out.words)
            grads.append(tower_grads)
        return losses, words, grads

    def _variable_scope(self, tf, tf1, k: int, created: list):
        """Tower ``k``'s variable scope, recording its trainable variables in ``created``: shared variables
        placed by the parameter spread (parameter server), else the tower's own."""
        mode, spread = self.config.variable_update, self.parameter_spread
        # --plant updates-on-device0: every tower's variables on device 0, so their updates (colocated with
        # them) all run there, as a stray device scope around variable creation would do.
        variables_on = self.device_names[0] if self.config.plant == UPDATES_ON_DEVICE0 else None

        def record(getter, *args, **kwargs):
            if variables_on is not None:
                with tf.device(variables_on):
                    variable = getter(*args, **kwargs)
            elif mode == "parameter_server":
                with tf.device(spread.device_for(kwargs.get("name", ""), kwargs.get("shape"), kwargs.get("dtype"))):
                    variable = getter(*args, **kwargs)
            else:
                variable = getter(*args, **kwargs)
            if kwargs.get("trainable", True) and all(variable is not v for v in created):
                created.append(variable)
            return variable

        if mode == "parameter_server":
            return tf1.variable_scope(names.SHARED_SCOPE, reuse=tf1.AUTO_REUSE, custom_getter=record,
                                      auxiliary_name_scope=False)
        return tf1.variable_scope(names.tower_scope(k), custom_getter=record, auxiliary_name_scope=False)

    def _independent_updates(self, tf, tf1, grads: list) -> list:
        """Each tower updates its own variables with its own gradients."""
        config, updates = self.config, []
        with tf1.name_scope(names.UPDATE_SCOPE):
            for k, device in enumerate(self.device_names):
                with tf.device(device):
                    opt = make_optimizer(config, f"{config.optimizer}_{names.tower_scope(k)}")
                    updates.append(opt.apply_gradients(zip(grads[k], self._tower_vars[k])))
        return updates

    def _parameter_server_updates(self, tf, tf1, grads: list) -> list:
        """Each gradient is averaged, and its variable updated, on the task holding the variable."""
        config, n, averaged = self.config, len(self.device_names), []
        with tf1.name_scope(names.AGGREGATION_SCOPE):
            for i, variable in enumerate(self._tower_vars[0]):
                with tf.device(variable.device):
                    averaged.append(tf.add_n([g[i] for g in grads]) / n if n > 1 else grads[0][i])
        with tf1.name_scope(names.UPDATE_SCOPE), tf.device(self.parameter_spread.devices[0]):
            opt = make_optimizer(config, config.optimizer)
            return [opt.apply_gradients(zip(averaged, self._tower_vars[0]))]

    def _all_reduce_updates(self, tf, tf1, grads: list) -> list:
        """The gradients summed across towers by all-reduce, each tower updating its replica with their average;
        ``_sync_op`` copies tower 0's initial values to the other replicas."""

        config, n, updates = self.config, len(self.device_names), []
        with tf1.name_scope(names.ALLREDUCE_SCOPE):
            summed = all_reduce_sum(grads, self.reduce_devices, config.all_reduce, self.host_device,
                                    config.gradient_repacking)
        with tf1.name_scope(names.UPDATE_SCOPE):
            for k, device in enumerate(self.device_names):
                with tf.device(device):
                    averaged = [g / n for g in summed[k]] if n > 1 else summed[k]
                    opt = make_optimizer(config, f"{config.optimizer}_{names.tower_scope(k)}")
                    updates.append(opt.apply_gradients(zip(averaged, self._tower_vars[k])))
        if n > 1:
            # Replicas must start equal: copy tower 0's initial values to the others.
            with tf1.name_scope(names.INIT_SYNC_SCOPE):
                assigns = [tf1.assign(v, v0) for k in range(1, n)
                           for v, v0 in zip(self._tower_vars[k], self._tower_vars[0])]
                self._sync_op = tf.group(*assigns)
        return updates

    # -- running --------------------------------------------------------------

    def step(self, options=None, run_metadata=None) -> StepResult:
        """Run one training step on every tower; only session.run is timed."""
        (_, loss, words), seconds, cpu = timed_run(self.session, [self.train_op, self.loss, self.words],
                                                   feed_of(self._inputs, self._batches), self.steps_run == 0,
                                                   options, run_metadata)
        self.steps_run += 1
        return StepResult(seconds=seconds, words=int(words), loss=float(loss), cpu=cpu)

    def tower_variables(self) -> list[dict[str, np.ndarray]]:
        """Each tower's trainable variables by name without the tower prefix."""
        values = self.session.run(self._tower_vars)
        result = []
        for k, (variables, arrays) in enumerate(zip(self._tower_vars, values)):
            result.append({_strip_scope(v.op.name, k): a for v, a in zip(variables, arrays)})
        return result

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "DataParallelRun":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ParameterSpread:
    """Which parameter device holds each shared variable.

    ``greedy``: the device holding the fewest bytes so far, as tf_cnn_benchmarks' greedy load
    balancing over ps tasks does (variables arrive in creation order); ``first``: always device 0.
    ``bytes`` is each device's load.
    """

    def __init__(self, devices: list[str], placement: str = "greedy"):
        self.devices = list(devices)
        self.placement = placement
        self.bytes = [0] * len(self.devices)
        self._placed: dict[str, int] = {}

    def device_for(self, name: str, shape, dtype) -> str:
        if name in self._placed:  # the same variable asked for again (reuse across towers)
            return self.devices[self._placed[name]]
        k = 0 if self.placement == "first" else min(range(len(self.devices)), key=lambda d: self.bytes[d])
        self.bytes[k] += _byte_size(shape, dtype)
        self._placed[name] = k
        return self.devices[k]


def _byte_size(shape, dtype) -> int:
    """Bytes of a variable of ``shape`` (a list or TensorShape) and ``dtype`` (a tf.DType; float32 when None)."""
    dims = shape.as_list() if hasattr(shape, "as_list") else list(shape or [])
    if any(d is None for d in dims):
        return 0
    return int(np.prod(dims, dtype=np.int64)) * int(getattr(dtype, "size", 4) or 4)


def workload_of(config: WorkloadConfig, workload=None):
    """``workload`` when given, else the built-in workload ``config`` names."""
    if workload is not None:
        return workload

    return get_workload(config)


def feed_of(inputs_per_tower, batches_per_tower) -> dict:
    """The next batch of every tower, keyed by its placeholders (inputs made inside the graph are not fed)."""
    feed = {}
    for inputs, batches in zip(inputs_per_tower, batches_per_tower):
        for key, value in next(batches).items():
            feed[inputs[key]] = value
    return feed


def timed_run(session, fetches, feed: dict, first: bool, options=None, run_metadata=None
              ) -> tuple[list, float, CpuTimes]:
    """``session.run(fetches)``, its wall time and its CPU times (``cpu_clock``): the one timed call of a
    training step (the first one quiet)."""
    clock = CpuClock()
    with quiet_first_run() if first else contextlib.nullcontext():
        clock.start()
        start = time.perf_counter()
        values = session.run(fetches, feed_dict=feed, options=options, run_metadata=run_metadata)
        seconds = time.perf_counter() - start
        return values, seconds, clock.stop()


def _strip_scope(name: str, tower: int) -> str:
    for prefix in (f"{names.tower_scope(tower)}/", f"{names.SHARED_SCOPE}/"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name
