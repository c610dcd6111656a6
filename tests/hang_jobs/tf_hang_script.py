"""A tiny TensorFlow 2 training script with one planted hang, for `rnnprof trace -- python tf_hang_script.py MODE`.

Each step loads a batch (``load_batch``) and runs a ``tf.function`` training step (what `rnnprof trace` counts as a
step). At step 5 ("data") load_batch sleeps forever; ("pause") it sleeps PAUSE_S seconds, then goes on; ("healthy")
nothing is planted. A script that ends prints `done at TIME`. The verdict must name the line marked `# plant: data`.
As step 5 begins a planted script prints `planted at TIME` (time.time(), its own clock)."""

import sys
import time

import tensorflow as tf

MODE = sys.argv[1]
STEPS = 8
FAULT_STEP = 5
PAUSE_S = float(sys.argv[2]) if len(sys.argv) > 2 else 12.0

weight = tf.Variable(tf.ones([8]))
optimizer = tf.keras.optimizers.SGD(0.01)


def load_batch(step):
    if step == FAULT_STEP and MODE != "healthy":
        time.sleep(3600 if MODE == "data" else PAUSE_S)  # plant: data
    return tf.ones([8])


@tf.function
def train_step(batch):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(weight * batch)
    optimizer.apply_gradients([(tape.gradient(loss, weight), weight)])
    return loss


for step in range(STEPS):
    if step == FAULT_STEP and MODE != "healthy":
        print(f"planted at {time.time()!r}", file=sys.stderr, flush=True)
    train_step(load_batch(step))
print(f"done at {time.time()!r}", file=sys.stderr, flush=True)
