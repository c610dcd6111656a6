"""ResNet-50 (and ResNet-18) image classification from raw TensorFlow ops, in graph mode, on synthetic images.

The model is tf_cnn_benchmarks' ResNet v1.5 (a bottleneck block's stride in its 3x3 convolution): a 7x7/2
convolution, batch norm, relu and 3x3/2 max pooling; four stages of bottleneck blocks (ResNet-50: 3, 4, 6, 3)
or basic blocks (ResNet-18: 2, 2, 2, 2) with projection shortcuts; global average pooling, a fully connected
layer, softmax cross-entropy plus L2 weight decay. Batch norm keeps moving averages (decay 0.9) updated every
step. Images are NHWC on a CPU and NCHW on a GPU.

``--fake-location`` picks where the synthetic images are made: ``device`` (one batch in a variable on each
tower), ``cpu`` (a TF op on the host every step, copied to the tower) or ``python`` (numpy batches through
``tf.data`` with prefetch). Throughput counts images: a tower's ``words`` is its batch size.
The workload as the user sees it: docs/workloads.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf
from rnnprof.models.tensorflow.base import TowerOutput

tf1 = tf.compat.v1

FAKE_LOCATIONS = ("device", "cpu", "python")
BN_DECAY = 0.9
BN_EPSILON = 1e-5
WEIGHT_DECAY = 1e-4
PREFETCH_BATCHES = 2


@dataclass(frozen=True)
class Shape:
    """An architecture at a size: blocks per stage, the first stage's width, the input and the classes."""

    blocks: tuple[int, ...]
    bottleneck: bool
    width: int  # filters of the stem and the first stage (64 in the paper)
    image_size: int
    classes: int


ARCHITECTURES = {"resnet50": ((3, 4, 6, 3), True), "resnet18": ((2, 2, 2, 2), False)}
FULL = {"width": 64, "image_size": 224, "classes": 1000}
SMALL = {"width": 8, "image_size": 32, "classes": 10}


def shape_of(model: str, preset: str | None) -> Shape:
    blocks, bottleneck = ARCHITECTURES[model]
    return Shape(blocks, bottleneck, **(SMALL if preset == "small" else FULL))


def _uses_gpu() -> bool:
    return bool(tf.config.list_physical_devices("GPU"))


class ResNetWorkload:
    words_definition = "images"
    unit = "images"

    def __init__(self, config):
        self.config = config
        self.name = config.model
        self.shape = shape_of(config.model, config.preset)
        self.location = config.fake_location or "device"
        self.data_format = "NCHW" if _uses_gpu() else "NHWC"
        self.batch = config.per_device_batch()

    # -- inputs ---------------------------------------------------------------

    def _image_shape(self, batch: int) -> list[int]:
        size = self.shape.image_size
        return [batch, 3, size, size] if self.data_format == "NCHW" else [batch, size, size, 3]

    def make_inputs(self, tower: int) -> dict:
        """The tower's images and labels as tensors: nothing is fed (``batches`` yields empty feeds)."""
        shape = self._image_shape(self.batch)
        classes = self.shape.classes
        with tf.name_scope("inputs"):
            if self.location == "device":
                # Plain variables (not get_variable): they stay on the tower's device whatever the variable update.
                images = tf1.Variable(tf1.random_uniform(shape, seed=self.config.seed + tower), trainable=False,
                                      name="fake_images")
                labels = tf1.Variable(tf1.random_uniform([self.batch], maxval=classes, dtype=tf.int32,
                                                         seed=self.config.seed + tower),
                                      trainable=False, name="fake_labels")
                return {"images": tf.identity(images.read_value()), "labels": tf.identity(labels.read_value())}
            if self.location == "cpu":
                with tf.device("/device:CPU:0"):
                    images = tf1.random_uniform(shape, name="fake_images")
                    labels = tf1.random_uniform([self.batch], maxval=classes, dtype=tf.int32, name="fake_labels")
                return {"images": images, "labels": labels}
            return self._pipeline(tower, shape)

    def _pipeline(self, tower: int, shape: list[int]) -> dict:
        classes, seed = self.shape.classes, self.config.seed + tower

        def generate():
            rng = np.random.default_rng(seed)
            while True:
                yield (rng.random(shape, dtype=np.float32),
                       rng.integers(0, classes, size=shape[0], dtype=np.int32))

        with tf.device("/device:CPU:0"):
            dataset = tf.data.Dataset.from_generator(
                generate, output_signature=(tf.TensorSpec(shape, tf.float32), tf.TensorSpec([shape[0]], tf.int32)))
            dataset = dataset.prefetch(PREFETCH_BATCHES)
            iterator = tf1.data.make_one_shot_iterator(dataset)
            images, labels = iterator.get_next(name="python_batch")
        return {"images": images, "labels": labels}

    def batches(self, batch_size: int, tower: int, seed: int):
        while True:
            yield {}

    # -- the model ------------------------------------------------------------

    def build_tower(self, inputs: Mapping[str, object], tower: int, device_names: Sequence[str]):
        net = _Net(self.data_format)
        x = inputs["images"]
        with tf1.variable_scope("stem"):
            x = net.conv_bn(x, self.shape.width, 7, 2, relu=True)
            x = net.max_pool(x)
        filters = self.shape.width
        for stage, blocks in enumerate(self.shape.blocks):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                with tf1.variable_scope(f"stage{stage + 1}/block{block + 1}"):
                    x = (net.bottleneck(x, filters, stride) if self.shape.bottleneck
                         else net.basic(x, filters, stride))
            filters *= 2
        with tf1.variable_scope("head"):
            axes = [2, 3] if self.data_format == "NCHW" else [1, 2]
            x = tf.reduce_mean(x, axes, name="global_average_pool")
            logits = net.dense(x, self.shape.classes)
        with tf.name_scope("loss"):
            labels = inputs["labels"]
            cross_entropy = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            decay = WEIGHT_DECAY * tf.add_n([tf.nn.l2_loss(k) for k in net.kernels])
            with tf.control_dependencies(net.updates):  # batch norm's moving averages move every step
                loss = tf.identity(cross_entropy + decay, name="total")
        with tf.name_scope("words"):
            images = tf.identity(tf.shape(labels)[0], name="images")
        return TowerOutput(loss=loss, words=images)


class _Net:
    """Layers that record what the loss needs: the kernels (for weight decay) and batch norm's updates."""

    def __init__(self, data_format: str):
        self.data_format = data_format
        self.channel_axis = 1 if data_format == "NCHW" else 3
        self.kernels: list = []
        self.updates: list = []
        self._count = 0

    def _scope(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def _strides(self, stride: int) -> list[int]:
        return [1, 1, stride, stride] if self.data_format == "NCHW" else [1, stride, stride, 1]

    def conv(self, x, filters: int, size: int, stride: int):
        channels = int(x.shape[self.channel_axis])
        fan_in = size * size * channels
        kernel = tf1.get_variable("kernel", [size, size, channels, filters],
                                  initializer=tf1.random_normal_initializer(stddev=float(np.sqrt(2.0 / fan_in))))
        self.kernels.append(kernel)
        return tf.nn.conv2d(x, kernel, self._strides(stride), "SAME", data_format=self.data_format)

    def batch_norm(self, x):
        channels = int(x.shape[self.channel_axis])
        scale = tf1.get_variable("gamma", [channels], initializer=tf1.ones_initializer())
        offset = tf1.get_variable("beta", [channels], initializer=tf1.zeros_initializer())
        # MEAN: under tf.distribute, a replica's update of a shared average is averaged over the replicas
        # (rnnprof's own trainer keeps plain variables, where the aggregation means nothing).
        moving_mean = tf1.get_variable("moving_mean", [channels], initializer=tf1.zeros_initializer(),
                                       trainable=False, aggregation=tf.VariableAggregation.MEAN)
        moving_variance = tf1.get_variable("moving_variance", [channels], initializer=tf1.ones_initializer(),
                                           trainable=False, aggregation=tf.VariableAggregation.MEAN)
        y, mean, variance = tf1.nn.fused_batch_norm(x, scale, offset, epsilon=BN_EPSILON,
                                                    data_format=self.data_format, is_training=True)
        with tf.name_scope("moving_averages"):
            self.updates.append(tf1.assign_sub(moving_mean, (moving_mean - mean) * (1 - BN_DECAY)))
            self.updates.append(tf1.assign_sub(moving_variance, (moving_variance - variance) * (1 - BN_DECAY)))
        return y

    def conv_bn(self, x, filters: int, size: int, stride: int, relu: bool):
        with tf1.variable_scope(self._scope("conv")):
            x = self.batch_norm(self.conv(x, filters, size, stride))
        return tf.nn.relu(x) if relu else x

    def max_pool(self, x):
        return tf.nn.max_pool2d(x, 3, self._strides(2), "SAME", data_format=self.data_format)

    def shortcut(self, x, filters: int, stride: int):
        if int(x.shape[self.channel_axis]) == filters and stride == 1:
            return x
        with tf1.variable_scope("projection"):
            return self.conv_bn(x, filters, 1, stride, relu=False)

    def bottleneck(self, x, filters: int, stride: int):
        shortcut = self.shortcut(x, filters * 4, stride)
        y = self.conv_bn(x, filters, 1, 1, relu=True)
        y = self.conv_bn(y, filters, 3, stride, relu=True)  # v1.5: the stride in the 3x3
        y = self.conv_bn(y, filters * 4, 1, 1, relu=False)
        return tf.nn.relu(y + shortcut)

    def basic(self, x, filters: int, stride: int):
        shortcut = self.shortcut(x, filters, stride)
        y = self.conv_bn(x, filters, 3, stride, relu=True)
        y = self.conv_bn(y, filters, 3, 1, relu=False)
        return tf.nn.relu(y + shortcut)

    def dense(self, x, classes: int):
        units = int(x.shape[1])
        kernel = tf1.get_variable("kernel", [units, classes],
                                  initializer=tf1.random_normal_initializer(stddev=0.01))
        bias = tf1.get_variable("bias", [classes], initializer=tf1.zeros_initializer())
        self.kernels.append(kernel)
        return tf.nn.bias_add(tf.matmul(x, kernel), bias)
