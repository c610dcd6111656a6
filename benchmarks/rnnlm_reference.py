"""The built-in RNNLM against a plain TensorFlow implementation of the same model and size.

The reference is what a user would write without rnnprof: Keras Embedding -> LSTM layers ->
Dense over the vocabulary, a masked softmax cross-entropy and SGD, trained by a
``tf.function`` step. It is fed the same batches (numpy arrays) as the built-in workload, and
words are counted the same way (non-padding target tokens). Each side runs in its own process
with the same protocol (warm-up batches untimed, then timed batches), alternately, ``--repeat``
times; the ratio is built-in words/s ÷ reference words/s, target >= 1.0.

    python benchmarks/rnnlm_reference.py                    # the small preset, 1 device, loop encoder
    python benchmarks/rnnlm_reference.py --preset rnn_benchmark --batches 5 --warmup 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from _measure import Targets, ratio_spread

SIDES = ("builtin", "reference")


def _config(args):
    from rnnprof.config import WorkloadConfig, model_defaults

    sizes = model_defaults("rnnlm", args.preset)
    return WorkloadConfig(model="rnnlm", preset=args.preset, encoder=args.encoder, devices=1,
                          variable_update="independent", warmup=args.warmup, batches=args.batches,
                          optimizer="sgd", **sizes)


def _builtin(args) -> dict:
    from rnnprof.profiler.run.runner import DataParallelRun
    from rnnprof.profiler.run.measure import measure

    with DataParallelRun(_config(args)) as run:
        timed = measure(run, args.warmup, args.batches).timed
    return {"words_per_second": timed.words_per_second, "seconds": timed.total_seconds}


def _reference(args) -> dict:
    """Plain Keras/TF2 code; rnnprof only supplies the same numpy batches."""
    config = _config(args)
    from rnnprof.models import get_workload

    batches = get_workload(config).batches(config.batch_size, tower=0, seed=config.seed)
    import keras
    import tensorflow as tf

    layers = [keras.layers.Embedding(config.vocab_size, config.embedding, mask_zero=True)]
    layers += [keras.layers.LSTM(config.units, return_sequences=True) for _ in range(config.layers)]
    layers += [keras.layers.Dense(config.vocab_size)]
    model = keras.Sequential(layers)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.SGD(config.learning_rate)

    @tf.function
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

    for _ in range(args.warmup):
        step()
    seconds = words = 0
    for _ in range(args.batches):
        s, w = step()
        seconds += s
        words += w
    return {"words_per_second": words / seconds, "seconds": seconds}


def _run_side(side: str, argv: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--side", side, *argv], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{side} run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=("small", "rnn_benchmark"), default="small")
    # Keras's LSTM on CPU is a while loop, like rnnprof's loop encoder; the fused encoder's
    # BlockLSTM stands in for cuDNN and its CPU gradient kernel is slower (try --encoder fused).
    parser.add_argument("--encoder", choices=("fused", "loop"), default="loop")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps((_builtin if args.side == "builtin" else _reference)(args)))
        return 0

    argv = ["--preset", args.preset, "--encoder", args.encoder, "--warmup", str(args.warmup),
            "--batches", str(args.batches)]
    rates = {side: [] for side in SIDES}
    for _ in range(args.repeat):
        for side in SIDES:  # alternate, so machine load hits both alike
            rates[side].append(_run_side(side, argv)["words_per_second"])
    config = _config(args)
    print(f"RNNLM {args.preset}: {config.layers} layer(s), embedding {config.embedding}, {config.units} units, "
          f"vocab {config.vocab_size}, seq {config.src_max_len}, batch {config.batch_size}, 1 device; "
          f"{args.warmup} warm-up + {args.batches} timed batches, {args.repeat} runs each")
    print("words = non-padding target tokens")
    for side in SIDES:
        name = f"rnnprof ({args.encoder} LSTM)" if side == "builtin" else "reference (Keras LSTM, tf.function)"
        print(f"  {name:<38} best {max(rates[side]):>10,.0f} words/s, median {statistics.median(rates[side]):>10,.0f}")
    ratio, spread = ratio_spread(rates["builtin"], rates["reference"])
    targets = Targets()
    targets.at_least(f"rnnprof / reference words/s (medians; {spread})", ratio, 1.0, "x")
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
