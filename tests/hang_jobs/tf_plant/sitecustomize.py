"""A TensorFlow cluster task that blocks before it serves, for the hang watch's test (on PYTHONPATH, with
RNNPROF_PLANT_TASK=job:index and RNNPROF_PLANT_MARK=FILE): that task of a cluster `rnnprof trace --workers N`
starts opens its port (the chief sees it listen), writes `time.time() pid` to FILE and blocks at the line marked
`# plant: task`, never starting its server. Every other process runs unchanged (but see ``blocked_step``)."""

import os
import socket
import threading
import time


def blocked_serve(spec, job, task, devices=1, on_ready=lambda: None, timeout_s=None):
    host, _, port = spec.jobs[job][task].rpartition(":")
    listener = socket.create_server((host, int(port)))  # accepts connections, answers none
    on_ready()
    with open(os.environ["RNNPROF_PLANT_MARK"], "w") as mark:
        mark.write(f"{time.time()!r} {os.getpid()}\n")  # the task's own clock
    threading.Event().wait()  # plant: task
    listener.close()


def blocked_step(original, wanted):
    """With RNNPROF_PLANT_STEP=N instead, the built-in TensorFlow workload of `rnnprof trace` (its own devices, no
    cluster) blocks inside TensorFlow's runtime at its Nth step: the step runs a dequeue from a queue nothing fills
    (a Session.run that never returns, as one waiting on input that never comes), at the line marked
    `# plant: step`, after writing `time.time() pid` to FILE."""
    calls = []

    def step(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == wanted:
            import tensorflow as tf

            with tf.Graph().as_default():
                empty, fill = _queue(tf)
                session = _session(tf, fill)
            with open(os.environ["RNNPROF_PLANT_MARK"], "w") as mark:
                mark.write(f"{time.time()!r} {os.getpid()}\n")  # the process's own clock
            session.run(empty)  # plant: step
        return original(self, *args, **kwargs)

    return step


def _queue(tf):
    """A queue of one value that nothing fills: its dequeue op, and the enqueue op that would fill it."""
    queue = tf.queue.FIFOQueue(1, tf.float32)
    return queue.dequeue(), queue.enqueue(0.0)


def _session(tf, fill):
    """The blocked step's session. With RNNPROF_PLANT_PAUSE_S=S, another thread fills the queue S seconds later:
    the input comes late, and the workload goes on to its end."""
    session = tf.compat.v1.Session()
    pause_s = os.environ.get("RNNPROF_PLANT_PAUSE_S")
    if pause_s:
        threading.Timer(float(pause_s), session.run, (fill,)).start()
    return session


def _plant_step(args) -> None:
    wanted = os.environ.get("RNNPROF_PLANT_STEP")
    if not wanted or "trace" not in args:
        return
    from rnnprof.training.runner import DataParallelRun

    DataParallelRun.step = blocked_step(DataParallelRun.step, int(wanted))


def _plant() -> None:
    wanted = os.environ.get("RNNPROF_PLANT_TASK")
    try:
        args = open("/proc/self/cmdline", "rb").read().decode().split("\0")
    except OSError:
        return
    _plant_step(args)
    if not wanted or "worker" not in args or "--job" not in args or "--task" not in args:
        return
    if f"{args[args.index('--job') + 1]}:{args[args.index('--task') + 1]}" != wanted:
        return
    from rnnprof.training import cluster

    cluster.serve = blocked_serve


_plant()
