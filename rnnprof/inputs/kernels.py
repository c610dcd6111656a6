"""The installed TensorFlow's kernel registry, read for the placement audit (PA007's input).

Which device types have a kernel for each op type is a fact of the TensorFlow build, not of the run,
so it is read here, from the TensorFlow that is installed, and handed to the audit as data
(``rnnprof.analyzers.placement.KernelList``). TensorFlow is imported only when a graph asks for it.
"""

from __future__ import annotations

import collections

from rnnprof.analyzers.placement import KernelList
from rnnprof.frameworks.tensorflow import import_tensorflow


def read_kernels():
    """Every registered kernel's op type and device type; None when TensorFlow cannot be imported."""
    try:
        tf = import_tensorflow()  # importing TensorFlow registers its kernels; Keras adds none
    except ImportError:
        return None
    from tensorflow.python.framework import kernels

    by_op: dict[str, set[str]] = collections.defaultdict(set)
    for kernel in kernels.get_all_registered_kernels().kernel:
        by_op[kernel.op].add(kernel.device_type)
    gpu = tf.test.is_built_with_cuda() or tf.test.is_built_with_rocm()
    return KernelList(version=tf.__version__, device_types=frozenset({"CPU", "GPU"} if gpu else {"CPU"}),
                      by_op={op: frozenset(types) for op, types in by_op.items()})


def kernels_for(graph):
    """``read_kernels()`` when ``graph`` has ops that request a device (PA007's question), else None."""
    if graph is None or not any(data.get("requested_device") for _, data in graph.nodes(data=True)):
        return None
    return read_kernels()
