"""Training workloads built from raw TensorFlow ops (graph mode).

``get_workload(config)`` returns an object following ``rnnprof.models.tensorflow.base.Workload``.
TensorFlow is imported only when a workload is built, so importing this package is cheap.
"""

from __future__ import annotations

from rnnprof.errors import UsageError


def get_workload(config):
    """The workload for ``config.model``; a bad ``--data`` file raises ``InputError`` here."""
    if config.model == "nmt":
        from rnnprof.models.tensorflow.nmt import NMTWorkload
        return NMTWorkload(config)
    if config.model == "rnnlm":
        from rnnprof.models.tensorflow.rnnlm import RNNLMWorkload
        return RNNLMWorkload(config)
    if config.model in ("resnet50", "resnet18"):
        from rnnprof.models.tensorflow.resnet import ResNetWorkload
        return ResNetWorkload(config)
    raise UsageError(f"unknown --model {config.model!r} (expected nmt, rnnlm, resnet50 or resnet18)")
