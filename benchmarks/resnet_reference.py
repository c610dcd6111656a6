"""The built-in ResNet-50 against ``keras.applications.ResNet50(weights=None)`` at the same size.

Both sides train one device on one synthetic batch kept on the device (the built-in's
``--fake-location device``; the reference's batch is a tensor made once), with momentum SGD
(0.9) and the same L2 weight decay (1e-4 over the kernels) added to the loss, NHWC on a CPU. The
built-in is rnnprof's graph-mode trainer (``DataParallelRun``, one tower); the reference is plain
Keras/TF2 code: the Keras model trained by a ``tf.function`` step. Sizes: Keras' ResNet50 has
the paper's widths (64 filters in the stem), so the built-in runs at that width too, on small
images (``--image-size``, default 32 and 64) with 10 classes. Keras' ResNet50 is v1 (the stride of
a bottleneck in its first 1x1 convolution); the built-in is v1.5 (the stride in the 3x3, as
tf_cnn_benchmarks), which does somewhat more work per image.

Each side runs in its own process with the same protocol (warm-up batches untimed, then timed
batches), alternately, ``--repeat`` times; the ratio is built-in images/s ÷ reference images/s
(medians), target >= 1.0, with each repeat's own ratio as its spread.

    python benchmarks/resnet_reference.py                   # 32x32 and 64x64 images, batch 16
    python benchmarks/resnet_reference.py --image-size 96 --batch-size 8 --repeat 3
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
WIDTH, CLASSES, MOMENTUM, WEIGHT_DECAY, LEARNING_RATE = 64, 10, 0.9, 1e-4, 0.01


def _builtin(args) -> dict:
    from rnnprof.config import WorkloadConfig
    from rnnprof.models.tensorflow.resnet import ResNetWorkload, Shape, ARCHITECTURES
    from rnnprof.training.measure import measure
    from rnnprof.training.runner import DataParallelRun

    config = WorkloadConfig(model="resnet50", devices=1, variable_update="independent", batch_size=args.batch_size,
                            optimizer="momentum", learning_rate=LEARNING_RATE, fake_location="device",
                            warmup=args.warmup, batches=args.batches)
    workload = ResNetWorkload(config)
    blocks, bottleneck = ARCHITECTURES["resnet50"]
    workload.shape = Shape(blocks, bottleneck, WIDTH, args.image_size, CLASSES)
    with DataParallelRun(config, workload=workload) as run:
        timed = measure(run, args.warmup, args.batches).timed
    return {"images_per_second": timed.words_per_second}


def _reference(args) -> dict:
    """Plain Keras/TF2 code."""
    import keras
    import tensorflow as tf

    tf.random.set_seed(1)
    model = keras.applications.ResNet50(weights=None, input_shape=(args.image_size, args.image_size, 3),
                                        classes=CLASSES, classifier_activation=None)
    kernels = [w for w in model.trainable_weights if "kernel" in w.path]
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.SGD(LEARNING_RATE, momentum=MOMENTUM)
    images = tf.random.uniform([args.batch_size, args.image_size, args.image_size, 3])
    labels = tf.random.uniform([args.batch_size], maxval=CLASSES, dtype=tf.int32)

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
            loss += WEIGHT_DECAY * tf.add_n([tf.nn.l2_loss(k) for k in kernels])
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def step():
        start = time.perf_counter()
        train_step().numpy()
        return time.perf_counter() - start

    for _ in range(args.warmup):
        step()
    seconds = sum(step() for _ in range(args.batches))
    return {"images_per_second": args.batch_size * args.batches / seconds}


def _run_side(side: str, argv: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--side", side, *argv], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{side} run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, action="append", default=None,
                        help="image side in pixels; repeat for several sizes (default: 32 and 64)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        args.image_size = args.image_size[0]
        print(json.dumps((_builtin if args.side == "builtin" else _reference)(args)))
        return 0

    sizes = args.image_size or [32, 64]
    print(f"ResNet-50 (width {WIDTH}, {CLASSES} classes), batch {args.batch_size}, 1 device, momentum SGD; "
          f"{args.warmup} warm-up + {args.batches} timed batches, {args.repeat} runs each")
    targets = Targets()
    for size in sizes:
        argv = ["--image-size", str(size), "--batch-size", str(args.batch_size), "--warmup", str(args.warmup),
                "--batches", str(args.batches)]
        rates = {side: [] for side in SIDES}
        for _ in range(args.repeat):
            for side in SIDES:  # alternate, so machine load hits both alike
                rates[side].append(_run_side(side, argv)["images_per_second"])
        print(f"{size}x{size} images:")
        for side in SIDES:
            name = "rnnprof (graph mode, v1.5)" if side == "builtin" else "keras.applications.ResNet50 (v1)"
            print(f"  {name:<34} best {max(rates[side]):>8,.1f} images/s, "
                  f"median {statistics.median(rates[side]):>8,.1f}")
        ratio, spread = ratio_spread(rates["builtin"], rates["reference"])
        targets.at_least(f"{size}x{size}: rnnprof / Keras images/s (medians; {spread})", ratio, 1.0, "x")
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())
