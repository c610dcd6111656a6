"""The same workload trained by TensorFlow's own ``tf.distribute`` (``--trainer distribute``).

A baseline for rnnprof's trainer (``runner.DataParallelRun``): the same towers (the workload's
``build_tower``), devices, optimizer, batches and session settings, but the variables, the gradient
exchange and the update are the strategy's:

* ``replicated``: ``MirroredStrategy`` over the towers' devices; a mirrored copy of every variable
  on each device, gradients all-reduced by the strategy's own choice of cross-device ops;
* ``parameter_server``: ``CentralStorageStrategy``: the variables on the parameter device
  (``--local-parameter-device``), the towers compute on their devices, the update runs once.

The graph is built in graph mode: each replica runs the workload inside
``strategy.extended.call_for_each_replica`` and minimizes its loss with the tf.compat.v1 optimizer,
which aggregates gradients across replicas. ``step()`` times one ``session.run`` like
``DataParallelRun.step``, so ``measure`` applies the same warm-up and timing protocol.
"""

from __future__ import annotations

import numpy as np

from rnnprof.models.config import WorkloadConfig, validate
from rnnprof.errors import UsageError
from rnnprof.training.measure import StepResult
from rnnprof.training.runner import (HOST_DEVICE, LOCAL, device_plan, feed_of, make_optimizer, session_config,
                                     thread_warnings, timed_run, visible_gpus, workload_of)
from rnnprof.frameworks.tensorflow import import_tensorflow

TRAINERS = ("rnnprof", "distribute")
STRATEGIES = {"replicated": "MirroredStrategy", "parameter_server": "CentralStorageStrategy"}


def check_trainer(trainer: str, variable_update: str) -> None:
    """Refuse a variable update that ``tf.distribute`` has no strategy for."""
    if trainer == "distribute" and variable_update not in STRATEGIES:
        raise UsageError(f"--trainer distribute runs --variable-update replicated (MirroredStrategy) or "
                         f"parameter_server (CentralStorageStrategy), not {variable_update}")


def _strategy(tf, config: WorkloadConfig, device_names: list[str], gpus: int):
    tf1 = tf.compat.v1
    if config.variable_update == "replicated":
        return tf1.distribute.MirroredStrategy(devices=device_names)
    parameter_device = HOST_DEVICE if config.local_parameter_device == "cpu" or not gpus else f"{LOCAL}/device:GPU:0"
    return tf1.distribute.experimental.CentralStorageStrategy(compute_devices=device_names,
                                                              parameter_device=parameter_device)


class DistributeRun:
    """One training graph built by a ``tf.distribute`` strategy, ready to ``step()``."""

    trainer = "distribute"

    def __init__(self, config: WorkloadConfig, workload=None):
        tf = import_tensorflow()
        tf1 = tf.compat.v1
        gpus = visible_gpus()
        validate(config, gpus)
        check_trainer("distribute", config.variable_update)
        self.config = config
        self.warnings = thread_warnings(config)
        self.device_names, self.device_kind = device_plan(config, gpus, [LOCAL])
        self.workload = workload = workload_of(config, workload)
        self.steps_run = 0
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf1.set_random_seed(config.seed)
            self.strategy = _strategy(tf, config, self.device_names, gpus)
            self.strategy_name = STRATEGIES[config.variable_update]
            self._build(tf, tf1)
            init = tf1.global_variables_initializer()
        self.session_proto = session_config(config, self.device_kind)
        self.session = tf1.Session(graph=self.graph, config=self.session_proto)
        try:
            self.session.run(init)
            self.graph.finalize()
        except BaseException:
            self.session.close()
            raise
        batch = config.per_device_batch()
        self._batches = [workload.batches(batch, k, config.seed) for k in range(config.devices)]

    def _build(self, tf, tf1) -> None:
        inputs: dict[int, dict] = {}
        strategy = self.strategy
        with strategy.scope():
            optimizer = make_optimizer(self.config, self.config.optimizer)

            @tf.autograph.experimental.do_not_convert  # plain graph code: nothing for autograph to convert
            def replica_step():
                context = tf.distribute.get_replica_context()
                k = int(tf.get_static_value(context.replica_id_in_sync_group))
                inputs[k] = self.workload.make_inputs(k)
                out = self.workload.build_tower(inputs[k], k, self.device_names)
                update = optimizer.minimize(out.loss, colocate_gradients_with_ops=True)
                with tf.control_dependencies([update]):
                    return tf.identity(out.loss), tf.cast(out.words, tf.int64)

            losses, words = strategy.extended.call_for_each_replica(replica_step)
            self.loss = strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)
            self.words = strategy.reduce(tf.distribute.ReduceOp.SUM, words, axis=None)
        self._inputs = [inputs[k] for k in range(len(self.device_names))]
        self._variables = tf1.trainable_variables()

    def step(self, options=None, run_metadata=None) -> StepResult:
        """Run one training step on every replica; only session.run is timed."""
        (loss, words), seconds, cpu = timed_run(self.session, [self.loss, self.words],
                                                feed_of(self._inputs, self._batches), self.steps_run == 0,
                                                options, run_metadata)
        self.steps_run += 1
        return StepResult(seconds=seconds, words=int(words), loss=float(loss), cpu=cpu)

    def replica_variables(self) -> list[dict[str, np.ndarray]]:
        """Each copy's trainable variables by name (one copy under CentralStorageStrategy), with its device."""
        copies = [self.strategy.experimental_local_results(v) for v in self._variables]
        result = []
        for k in range(max(len(c) for c in copies)):
            values = self.session.run([c[k] for c in copies])
            result.append({v.name.split(":")[0]: a for v, a in zip(self._variables, values)})
        return result

    def replica_devices(self) -> list[str]:
        return [copy.device for copy in self.strategy.experimental_local_results(self._variables[0])]

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "DistributeRun":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
