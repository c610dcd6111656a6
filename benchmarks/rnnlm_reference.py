"""The built-in RNNLM against a plain TensorFlow implementation of the same model and size.

The reference is what a user would write without rnnprof: Keras Embedding -> LSTM layers ->
Dense over the vocabulary, a masked softmax cross-entropy and SGD, trained by a
``tf.function`` step. It is fed the same batches (numpy arrays) as the built-in workload, and
words are counted the same way (non-padding target tokens). Same execution settings on both
sides: no XLA (the built-in's Session has no JIT level set; the reference's step is
``tf.function(jit_compile=False)``), and the same inter-/intra-op thread counts (the workload's,
0 = TensorFlow's default, given to the Session's ConfigProto and to ``tf.config.threading``).

Each side runs in its own process. Both processes are built first; then they take turns step by
step (``_lockstep``): warm-up rounds untimed, then timed rounds, who goes first alternating, so
both meet the same machine load. Each side times its own training call (``session.run`` /
the ``tf.function`` call). ``--repeat`` pairs of fresh processes; the ratio is built-in words/s ÷
reference words/s (medians over repeats), target >= 1.0, with each repeat's ratio as its spread.

    python benchmarks/rnnlm_reference.py                    # the small preset, 1 device, loop encoder
    python benchmarks/rnnlm_reference.py --preset rnn_benchmark --batches 5 --warmup 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from _lockstep import lockstep, serve
from _measure import Targets, ratio_spread

SIDES = ("builtin", "reference")


def _config(args):
    from rnnprof.config import WorkloadConfig, model_defaults

    sizes = model_defaults("rnnlm", args.preset)
    return WorkloadConfig(model="rnnlm", preset=args.preset, encoder=args.encoder, devices=1,
                          variable_update="independent", warmup=args.warmup, batches=args.batches,
                          optimizer="sgd", **sizes)


def _builtin(args):
    """rnnprof's graph-mode trainer, one tower: its own ``step()`` (only session.run is timed)."""
    from rnnprof.training.runner import DataParallelRun

    run = DataParallelRun(_config(args))

    def step():
        result = run.step()
        return result.seconds, result.words
    return step


def _reference(args):
    """Plain Keras/TF2 code; rnnprof only supplies the same numpy batches."""
    config = _config(args)
    from rnnprof.models import get_workload

    batches = get_workload(config).batches(config.batch_size, tower=0, seed=config.seed)
    import keras
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(config.inter_op_threads)
    tf.config.threading.set_intra_op_parallelism_threads(config.intra_op_threads)
    layers = [keras.layers.Embedding(config.vocab_size, config.embedding, mask_zero=True)]
    layers += [keras.layers.LSTM(config.units, return_sequences=True) for _ in range(config.layers)]
    layers += [keras.layers.Dense(config.vocab_size)]
    model = keras.Sequential(layers)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.SGD(config.learning_rate)

    @tf.function(jit_compile=False)
    def train_step(inputs, targets, mask):
        with tf.GradientTape() as tape:
            loss = loss_fn(targets, model(inputs, training=True), sample_weight=mask)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def step():
        batch = next(batches)
        mask = tf.sequence_mask(batch["lengths"], batch["targets"].shape[1], dtype=tf.float32)
        start = time.perf_counter()
        train_step(batch["inputs"], batch["targets"], mask).numpy()
        return time.perf_counter() - start, int(batch["lengths"].sum())

    return step


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=("small", "rnn_benchmark"), default="small")
    # Keras's LSTM on CPU is a while loop, like rnnprof's loop encoder; the fused encoder's
    # BlockLSTM stands in for cuDNN and its CPU gradient kernel is slower (try --encoder fused).
    parser.add_argument("--encoder", choices=("fused", "loop"), default="loop")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        serve(lambda: (_builtin if args.side == "builtin" else _reference)(args))
        return 0

    argv = [__file__, "--preset", args.preset, "--encoder", args.encoder]
    rates = {side: [] for side in SIDES}
    cpu = {side: [] for side in SIDES}
    for k in range(args.repeat):
        order = SIDES if k % 2 == 0 else SIDES[::-1]  # who starts first, too, alternates
        results = lockstep({side: [*argv, "--side", side] for side in order}, args.warmup, args.batches)
        for side in SIDES:
            rates[side].append(results[side]["words_per_second"])
            cpu[side].append(results[side]["cpu_seconds"] / args.batches * 1000)
    config = _config(args)
    print(f"RNNLM {args.preset}: {config.layers} layer(s), embedding {config.embedding}, {config.units} units, "
          f"vocab {config.vocab_size}, seq {config.src_max_len}, batch {config.batch_size}, 1 device; "
          f"{args.warmup} warm-up + {args.batches} timed batches, {args.repeat} runs each, the sides taking "
          f"turns step by step; no XLA on either side; inter/intra-op threads {config.inter_op_threads}/"
          f"{config.intra_op_threads} on both (0: TensorFlow's default)")
    print("words = non-padding target tokens")
    for side in SIDES:
        name = f"rnnprof ({args.encoder} LSTM)" if side == "builtin" else "reference (Keras LSTM, tf.function)"
        print(f"  {name:<38} best {max(rates[side]):>10,.0f} words/s, median {statistics.median(rates[side]):>10,.0f}; "
              f"CPU {statistics.median(cpu[side]):,.1f} ms/step (median)")
    ratio, spread = ratio_spread(rates["builtin"], rates["reference"])
    targets = Targets()
    targets.at_least(f"rnnprof / reference words/s (medians; {spread})", ratio, 1.0, "x")
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
