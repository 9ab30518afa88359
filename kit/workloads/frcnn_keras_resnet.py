"""ResNet-50 body and FPN in Keras 3, layer for layer as torchvision's (runs inside the framework image).

torchvision's ``fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None)`` trains the whole ResNet-50
(trainable_backbone_layers=5) with ordinary BatchNorm2d, so here every layer is trainable and BatchNorm is
Keras's, with PyTorch's constants rather than Keras's defaults (the DLBench study otherwise keeps each
framework's defaults, but this model is a transcription of torchvision's): PyTorch momentum 0.1 is Keras
momentum 0.9 (the weight of the old moving value), eps 1e-5. One difference stays: PyTorch updates the running
variance with the unbiased batch variance, Keras with the biased one (a factor n/(n-1), n = N*H*W).

The layout is NHWC. Stride-1 3x3 convolutions use ``same`` (one pixel on every side, PyTorch's padding=1);
stride-2 ones have PyTorch's symmetric padding written out (ZeroPadding2D + ``valid``), because ``same``
pads them on the bottom/right only. The 3x3 max pool pads with
zeros, which equals PyTorch's -inf padding after a ReLU. Bottlenecks stride on the 3x3 convolution (ResNet
v1.5, torchvision's). Initialisers as torchvision's: convolutions of the body kaiming-normal fan_out (ReLU
gain; Keras's fan_out of a kernel is kh*kw*out, the same number), BN gamma 1 / beta 0; FPN convolutions
kaiming-uniform with a=1 (bound sqrt(3/fan_in)) and zero bias.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

BN_MOMENTUM = 0.9  # PyTorch's momentum=0.1 in Keras's convention
BN_EPSILON = 1e-5
LAYERS = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, stride) of layer1..layer4
FPN_CHANNELS = 256


def kaiming_fan_out(seed: keras.random.SeedGenerator) -> keras.initializers.Initializer:
    return keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal", seed=seed)


def kaiming_uniform_a1(seed: keras.random.SeedGenerator) -> keras.initializers.Initializer:
    return keras.initializers.VarianceScaling(1.0, "fan_in", "uniform", seed=seed)


def _bn(name: str) -> keras.layers.BatchNormalization:
    return keras.layers.BatchNormalization(momentum=BN_MOMENTUM, epsilon=BN_EPSILON, name=name)


class Bottleneck(keras.layers.Layer):
    """1x1 -> 3x3 (stride here) -> 1x1 (4x wider), each with BN; the shortcut is 1x1 conv + BN on a change."""

    def __init__(self, width: int, stride: int, downsample: bool, seed: keras.random.SeedGenerator,
                 **kw: Any) -> None:
        super().__init__(**kw)
        init = kaiming_fan_out
        self.conv1 = keras.layers.Conv2D(width, 1, use_bias=False, kernel_initializer=init(seed), name="conv1")
        self.bn1 = _bn("bn1")
        # stride 1: TF's "same" pads a 3x3 kernel by 1 on every side, as PyTorch; stride 2: written out
        self.pad2 = keras.layers.ZeroPadding2D(1) if stride != 1 else None
        self.conv2 = keras.layers.Conv2D(width, 3, strides=stride, use_bias=False, kernel_initializer=init(seed),
                                         padding="same" if stride == 1 else "valid", name="conv2")
        self.bn2 = _bn("bn2")
        self.conv3 = keras.layers.Conv2D(width * 4, 1, use_bias=False, kernel_initializer=init(seed), name="conv3")
        self.bn3 = _bn("bn3")
        self.down_conv = (keras.layers.Conv2D(width * 4, 1, strides=stride, use_bias=False,
                                              kernel_initializer=init(seed), name="downsample_conv")
                          if downsample else None)
        self.down_bn = _bn("downsample_bn") if downsample else None

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        y = tf.nn.relu(self.bn1(self.conv1(x), training=training))
        y = tf.nn.relu(self.bn2(self.conv2(self.pad2(y) if self.pad2 is not None else y), training=training))
        y = self.bn3(self.conv3(y), training=training)
        if self.down_conv is not None and self.down_bn is not None:
            x = self.down_bn(self.down_conv(x), training=training)
        return tf.nn.relu(y + x)


class ResNet50Body(keras.layers.Layer):
    """torchvision's resnet50 without avgpool/fc; returns C2..C5 (layer1..layer4)."""

    def __init__(self, seed: keras.random.SeedGenerator, **kw: Any) -> None:
        super().__init__(**kw)
        self.pad1 = keras.layers.ZeroPadding2D(3)
        self.conv1 = keras.layers.Conv2D(64, 7, strides=2, use_bias=False, kernel_initializer=kaiming_fan_out(seed),
                                         name="conv1")
        self.bn1 = _bn("bn1")
        self.pool_pad = keras.layers.ZeroPadding2D(1)
        self.pool = keras.layers.MaxPooling2D(3, strides=2)
        self.stages: list[list[Bottleneck]] = []
        in_ch = 64
        for i, (width, blocks, stride) in enumerate(LAYERS):
            stage = []
            for b in range(blocks):
                s = stride if b == 0 else 1
                stage.append(Bottleneck(width, s, b == 0 and (s != 1 or in_ch != width * 4), seed,
                                        name=f"layer{i + 1}_{b}"))
                in_ch = width * 4
            self.stages.append(stage)

    def call(self, x: tf.Tensor, training: bool = False) -> list[tf.Tensor]:
        x = tf.nn.relu(self.bn1(self.conv1(self.pad1(x)), training=training))
        x = self.pool(self.pool_pad(x))
        out = []
        for stage in self.stages:
            for block in stage:
                x = block(x, training=training)
            out.append(x)
        return out


class FPN(keras.layers.Layer):
    """FeaturePyramidNetwork(in [256, 512, 1024, 2048] -> 256) + LastLevelMaxPool: P2..P5 and P6."""

    def __init__(self, seed: keras.random.SeedGenerator, **kw: Any) -> None:
        super().__init__(**kw)
        self.inner = [keras.layers.Conv2D(FPN_CHANNELS, 1, kernel_initializer=kaiming_uniform_a1(seed),
                                          name=f"inner_{i}") for i in range(4)]
        self.outer = [keras.layers.Conv2D(FPN_CHANNELS, 3, padding="same", kernel_initializer=kaiming_uniform_a1(seed),
                                          name=f"layer_{i}") for i in range(4)]

    def call(self, feats: list[tf.Tensor]) -> list[tf.Tensor]:
        last = self.inner[3](feats[3])
        results = [self.outer[3](last)]
        for i in (2, 1, 0):
            lateral = self.inner[i](feats[i])
            # nearest upsampling to the lateral's size; sizes are exact halves (the batch is padded to a
            # multiple of 32), where TF's and PyTorch's nearest rules pick the same pixels
            top_down = tf.image.resize(last, tf.shape(lateral)[1:3], method="nearest")
            last = lateral + top_down
            results.insert(0, self.outer[i](last))
        results.append(results[-1][:, ::2, ::2, :])  # max_pool2d(kernel 1, stride 2) is a stride-2 subsample
        return results


class Backbone(keras.layers.Layer):
    """BackboneWithFPN: the body's C2..C5 through the FPN; returns [P2, P3, P4, P5, P6]."""

    def __init__(self, seed: keras.random.SeedGenerator, **kw: Any) -> None:
        super().__init__(**kw)
        self.body = ResNet50Body(seed, name="body")
        self.fpn = FPN(seed, name="fpn")

    def call(self, x: tf.Tensor, training: bool = False) -> list[tf.Tensor]:
        return self.fpn(self.body(x, training=training))
