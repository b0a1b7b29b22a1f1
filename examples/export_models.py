"""Export the example models to ONNX with torch, randomly initialised and seeded.

    python examples/export_models.py [--out examples/models] [--small-only] [--sizes small,full,cnn]
                                     [--only bert,gpt2] [--exporters torchscript,dynamo]

Four architectures, each written here from torch.nn modules (no downloads):
a BERT-style encoder, a GPT-2-style decoder producing logits (causal mask, no KV
cache), a ViT and a ResNet-style CNN with BatchNorm. Each comes in a ``full``
size (BERT-base, GPT-2 small, ViT-B/16 at 224, ResNet-18) and a ``small`` size
for fast tests, and is exported with the TorchScript exporter and with the
default (dynamo) exporter. Batch and sequence dims are symbolic (dim_param), so
``--shape batch=1,seq=128`` chooses them. A ``manifest.json`` next to the
models lists each file with the shapes its checks use.

``--sizes vision`` (not exported by default; needs torchvision, which luminal does not install) writes
torchvision's classifiers and segmenters with seeded weights, at opsets 9 to 17.

``--sizes cnn`` (not exported by default) writes the CNN benchmark group of
benchmarks/cpu_models.py: ResNet-50, a MobileNetV3-Large, a YOLOv8n-style detector,
a DB-style text detector, a CRNN-style text recogniser (bidirectional LSTMs) and a DeepLabV3-style
segmenter (atrous pyramid, bilinear upsampling; TorchScript exporter only, BatchNorm statistics
calibrated on a seeded batch), and the onnx wheel's light model-zoo graphs with
seeded weights in place of their constant fills (``seeded_light_model``).

``--sizes quant`` (after ``cnn``) writes CNNs of that group quantized by onnxruntime's own quantizer, as users
ship them: QDQ (int8 weights per channel, uint8 activations, calibrated on seeded inputs), QOperator
(QLinearConv and onnxruntime's contrib ops) and dynamic (ConvInteger, MatMulInteger).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx.version_converter
import torch
from onnx import numpy_helper
from torch import nn
from torch.nn import functional as F

HERE = Path(__file__).resolve().parent


# ---------------------------------------------------------------- transformer parts

class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if bias is not None:
            scores = scores + bias
        out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, hidden: int, approximate: str = "none"):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class PostLNBlock(nn.Module):
    """BERT's layer: attention and MLP, each followed by add & LayerNorm."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.attn, self.mlp = Attention(hidden, heads), MLP(hidden)
        self.ln1, self.ln2 = nn.LayerNorm(hidden, eps=1e-12), nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x, bias))
        return self.ln2(x + self.mlp(x))


class PreLNBlock(nn.Module):
    """GPT-2's and ViT's layer: LayerNorm before attention and MLP, residual after."""

    def __init__(self, hidden: int, heads: int, approximate: str = "none"):
        super().__init__()
        self.attn, self.mlp = Attention(hidden, heads), MLP(hidden, approximate)
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), bias)
        return x + self.mlp(self.ln2(x))


class Bert(nn.Module):
    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, max_pos: int, type_vocab: int = 2):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(max_pos, hidden)
        self.token_type = nn.Embedding(type_vocab, hidden)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(PostLNBlock(hidden, heads) for _ in range(layers))
        self.pool = nn.Linear(hidden, hidden)

    def forward(self, input_ids, attention_mask, token_type_ids):
        t = input_ids.shape[1]
        pos = torch.arange(t, device=input_ids.device).unsqueeze(0)
        x = self.ln(self.word(input_ids) + self.pos(pos) + self.token_type(token_type_ids))
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        return x, torch.tanh(self.pool(x[:, 0]))


class GPT2(nn.Module):
    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, max_pos: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(max_pos, hidden)
        self.layers = nn.ModuleList(PreLNBlock(hidden, heads, "tanh") for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.register_buffer("causal", torch.tril(torch.ones(max_pos, max_pos, dtype=torch.bool)), persistent=False)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        pos = torch.arange(t, device=input_ids.device).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        bias = torch.zeros(t, t).masked_fill(~self.causal[:t, :t], float("-inf"))
        for layer in self.layers:
            x = layer(x, bias)
        return self.ln_f(x) @ self.wte.weight.t()


class ViT(nn.Module):
    def __init__(self, image: int, patch: int, hidden: int, layers: int, heads: int, classes: int):
        super().__init__()
        self.patch = nn.Conv2d(3, hidden, patch, stride=patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.randn(1, 1, hidden) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, hidden) * 0.02)
        self.layers = nn.ModuleList(PreLNBlock(hidden, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, pixels):
        x = self.patch(pixels).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln(x)[:, 0])


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self, widths: tuple[int, ...], blocks: tuple[int, ...], classes: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], widths[0]
        for i, (w, n) in enumerate(zip(widths, blocks)):
            for j in range(n):
                layers.append(BasicBlock(cin, w, 2 if j == 0 and i > 0 else 1))
                cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---------------------------------------------------------------- the CNN benchmark group

def conv_bn(cin: int, cout: int, k: int = 1, s: int = 1, groups: int = 1,
            act: nn.Module | None = None) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, act if act is not None else nn.Identity())


class Bottleneck(nn.Module):
    """ResNet-50's block: 1x1 reduce, 3x3 (stride here, as torchvision), 1x1 expand by 4."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, width, 1, act=nn.ReLU()),
                                  conv_bn(width, width, 3, stride, act=nn.ReLU()), conv_bn(width, 4 * width, 1))
        self.down = conv_bn(cin, 4 * width, 1, stride) if stride != 1 or cin != 4 * width else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.down(x))


class ResNet50(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 64, 7, 2, act=nn.ReLU()), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for i, (width, n) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
            for j in range(n):
                blocks.append(Bottleneck(cin, width, 2 if j == 0 and i > 0 else 1))
                cin = 4 * width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        mid = max(8, (c // 4 + 4) // 8 * 8)
        self.fc1, self.fc2 = nn.Conv2d(c, mid, 1), nn.Conv2d(mid, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))


class InvertedResidual(nn.Module):
    """MobileNetV3's block: 1x1 expand, depthwise kxk, optional squeeze-excitation, 1x1 project."""

    def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, hs: bool, stride: int):
        super().__init__()

        def act() -> nn.Module:
            return nn.Hardswish() if hs else nn.ReLU()

        layers = [] if exp == cin else [conv_bn(cin, exp, 1, act=act())]
        layers += [conv_bn(exp, exp, k, stride, groups=exp, act=act())]
        layers += [SqueezeExcite(exp)] if se else []
        layers += [conv_bn(exp, cout, 1)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


# MobileNetV3-Large's table: kernel, expansion, out channels, squeeze-excitation, hardswish, stride
MBV3_LARGE = ((3, 16, 16, False, False, 1), (3, 64, 24, False, False, 2), (3, 72, 24, False, False, 1),
              (5, 72, 40, True, False, 2), (5, 120, 40, True, False, 1), (5, 120, 40, True, False, 1),
              (3, 240, 80, False, True, 2), (3, 200, 80, False, True, 1), (3, 184, 80, False, True, 1),
              (3, 184, 80, False, True, 1), (3, 480, 112, True, True, 1), (3, 672, 112, True, True, 1),
              (5, 672, 160, True, True, 2), (5, 960, 160, True, True, 1), (5, 960, 160, True, True, 1))


class MobileNetV3(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        blocks, cin = [conv_bn(3, 16, 3, 2, act=nn.Hardswish())], 16
        for k, exp, cout, se, hs, s in MBV3_LARGE:
            blocks.append(InvertedResidual(cin, k, exp, cout, se, hs, s))
            cin = cout
        blocks.append(conv_bn(cin, 960, 1, act=nn.Hardswish()))
        self.features = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.Linear(960, 1280), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def silu_conv(cin: int, cout: int, k: int = 1, s: int = 1) -> nn.Sequential:
    return conv_bn(cin, cout, k, s, act=nn.SiLU())


class C2f(nn.Module):
    """YOLOv8's CSP block: split in two, a chain of 3x3 bottlenecks on one half, concat every stage."""

    def __init__(self, cin: int, cout: int, n: int, shortcut: bool):
        super().__init__()
        self.c = cout // 2
        self.cv1, self.cv2 = silu_conv(cin, 2 * self.c), silu_conv((2 + n) * self.c, cout)
        self.m = nn.ModuleList(nn.Sequential(silu_conv(self.c, self.c, 3), silu_conv(self.c, self.c, 3))
                               for _ in range(n))
        self.shortcut = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ys = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            ys.append(ys[-1] + m(ys[-1]) if self.shortcut else m(ys[-1]))
        return self.cv2(torch.cat(ys, 1))


class SPPF(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.cv1, self.cv2 = silu_conv(c, c // 2), silu_conv(2 * c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ys = [self.cv1(x)]
        for _ in range(3):
            ys.append(F.max_pool2d(ys[-1], 5, 1, 2))
        return self.cv2(torch.cat(ys, 1))


class Yolo(nn.Module):
    """A YOLOv8n-style detector: stride-2 convs and C2f blocks down to 1/32, SPPF, a nearest-upsample and
    concat neck (top-down then bottom-up), and per-level box (4x16 bins) and class (80) heads, flattened and
    concatenated to [batch, 144, anchors]."""

    def __init__(self, classes: int = 80):
        super().__init__()
        self.down = nn.ModuleList([
            nn.Sequential(silu_conv(3, 16, 3, 2), silu_conv(16, 32, 3, 2), C2f(32, 32, 1, True),
                          silu_conv(32, 64, 3, 2), C2f(64, 64, 2, True)),
            nn.Sequential(silu_conv(64, 128, 3, 2), C2f(128, 128, 2, True)),
            nn.Sequential(silu_conv(128, 256, 3, 2), C2f(256, 256, 1, True), SPPF(256)),
        ])
        self.up4, self.up3 = C2f(384, 128, 1, False), C2f(192, 64, 1, False)
        self.down3, self.out4 = silu_conv(64, 64, 3, 2), C2f(192, 128, 1, False)
        self.down4, self.out5 = silu_conv(128, 128, 3, 2), C2f(384, 256, 1, False)
        self.box = nn.ModuleList(nn.Sequential(silu_conv(c, 64, 3), silu_conv(64, 64, 3), nn.Conv2d(64, 64, 1))
                                 for c in (64, 128, 256))
        self.cls = nn.ModuleList(nn.Sequential(silu_conv(c, 80, 3), silu_conv(80, 80, 3), nn.Conv2d(80, classes, 1))
                                 for c in (64, 128, 256))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.down[0](x)
        p4 = self.down[1](p3)
        p5 = self.down[2](p4)
        n4 = self.up4(torch.cat([F.interpolate(p5, scale_factor=2.0, mode="nearest"), p4], 1))
        n3 = self.up3(torch.cat([F.interpolate(n4, scale_factor=2.0, mode="nearest"), p3], 1))
        m4 = self.out4(torch.cat([self.down3(n3), n4], 1))
        m5 = self.out5(torch.cat([self.down4(m4), p5], 1))
        levels = [torch.cat([b(f), c(f)], 1).flatten(2) for f, b, c in zip((n3, m4, m5), self.box, self.cls)]
        return torch.cat(levels, 2)


class DBNet(nn.Module):
    """A DB-style text detector (PaddleOCR's mobile det layout): a MobileNetV3-small-style backbone at half
    width (8-48 channels at 1/2-1/32), an FPN neck (1x1 laterals to 64, nearest-upsample adds, 3x3 convs to 16,
    upsampled to 1/4 and concatenated), and the DB head: 3x3 conv 64 -> 16 at 1/4 resolution, two 2x2 stride-2
    ConvTransposes back to full resolution, sigmoid."""

    STAGES = (  # kernel, expansion, out channels, squeeze-excitation, hardswish, stride
        ((3, 8, 8, True, False, 2),),
        ((3, 36, 12, False, False, 2), (3, 44, 12, False, False, 1)),
        ((5, 48, 20, True, True, 2), (5, 120, 20, True, True, 1), (5, 120, 20, True, True, 1),
         (5, 60, 24, True, True, 1), (5, 72, 24, True, True, 1)),
        ((5, 144, 48, True, True, 2), (5, 288, 48, True, True, 1), (5, 288, 48, True, True, 1)),
    )

    def __init__(self, inner: int = 64):
        super().__init__()
        self.stem = conv_bn(3, 8, 3, 2, act=nn.Hardswish())
        stages, cin, outs = [], 8, []
        for stage in self.STAGES:
            blocks = []
            for k, exp, cout, se, hs, s in stage:
                blocks.append(InvertedResidual(cin, k, exp, cout, se, hs, s))
                cin = cout
            stages.append(nn.Sequential(*blocks))
            outs.append(cin)
        self.stages = nn.ModuleList(stages)
        self.lateral = nn.ModuleList(nn.Conv2d(c, inner, 1, bias=False) for c in outs)
        self.smooth = nn.ModuleList(nn.Conv2d(inner, inner // 4, 3, padding=1, bias=False) for _ in outs)
        q = inner // 4
        self.head = nn.Sequential(conv_bn(inner, q, 3, act=nn.ReLU()), nn.ConvTranspose2d(q, q, 2, 2),
                                  nn.BatchNorm2d(q), nn.ReLU(), nn.ConvTranspose2d(q, 1, 2, 2), nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats, y = [], self.stem(x)
        for stage in self.stages:
            y = stage(y)
            feats.append(y)
        lat = [m(f) for m, f in zip(self.lateral, feats)]
        for i in range(len(lat) - 2, -1, -1):
            lat[i] = lat[i] + F.interpolate(lat[i + 1], scale_factor=2.0, mode="nearest")
        fused = [F.interpolate(s(t), scale_factor=float(2 ** i), mode="nearest") if i else s(t)
                 for i, (s, t) in enumerate(zip(self.smooth, lat))]
        return self.head(torch.cat(fused[::-1], 1))


class CRNN(nn.Module):
    """A CRNN-style text recogniser (the layout of PaddleOCR's recognition models): convolutions turn a 32-pixel
    text line into one row of 80 columns, two bidirectional LSTM layers read the columns, and a classifier gives
    each column's probabilities over 6625 characters and the blank (PaddleOCR's Chinese dictionary)."""

    def __init__(self, classes: int = 6626, hidden: int = 96):
        super().__init__()
        relu = nn.ReLU
        self.features = nn.Sequential(
            conv_bn(3, 32, 3, act=relu()), nn.MaxPool2d(2), conv_bn(32, 64, 3, act=relu()), nn.MaxPool2d(2),
            conv_bn(64, 128, 3, act=relu()), conv_bn(128, 128, 3, act=relu()), nn.MaxPool2d((2, 1)),
            conv_bn(128, 256, 3, act=relu()), nn.MaxPool2d((4, 1)))
        self.rnn = nn.LSTM(256, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        columns = self.features(x).squeeze(2).permute(0, 2, 1)
        return self.head(self.rnn(columns)[0]).softmax(-1)


class DeepLabV3(nn.Module):
    """A DeepLabV3-style segmenter: MobileNetV3-Large's features (stride 32), an atrous spatial pyramid (1x1, 3x3
    at rates 6, 12 and 18, an image pool upsampled back) and a head, upsampled to the input by bilinear
    interpolation (half-pixel centres)."""

    def __init__(self, classes: int = 21, rates: tuple[int, ...] = (6, 12, 18), width: int = 256):
        super().__init__()
        self.features = MobileNetV3().features
        c = 960

        def atrous(r: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(c, width, 3, padding=r, dilation=r, bias=False), nn.BatchNorm2d(width),
                                 nn.ReLU())

        self.branches = nn.ModuleList([conv_bn(c, width, act=nn.ReLU()), *(atrous(r) for r in rates)])
        self.pool = nn.Sequential(nn.Conv2d(c, width, 1), nn.ReLU())  # one pixel: no batch statistics
        self.project = conv_bn(width * (len(rates) + 2), width, act=nn.ReLU())
        self.head = nn.Sequential(conv_bn(width, width, 3, act=nn.ReLU()), nn.Conv2d(width, classes, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.features(x)
        pooled = F.interpolate(self.pool(F.adaptive_avg_pool2d(f, 1)), size=f.shape[-2:], mode="bilinear",
                               align_corners=False)
        y = self.project(torch.cat([b(f) for b in self.branches] + [pooled], 1))
        return F.interpolate(self.head(y), size=x.shape[-2:], mode="bilinear", align_corners=False)


# ---------------------------------------------------------------- the catalogue

@dataclass
class Spec:
    name: str
    size: str
    build: object  # () -> nn.Module
    inputs: dict  # input name -> (dtype, shape, high for ints)
    outputs: list[str]
    dims: dict  # input name -> {axis: dim name}
    shapes: dict  # dim name -> value used by the checks
    exporters: tuple[str, ...] = ("torchscript", "dynamo")
    opset: int = 17


class _Tensor(nn.Module):
    """A torchvision model whose output is one tensor (a segmenter's {"out": ...})."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.model(x)
        return y["out"] if isinstance(y, dict) else y


def _torchvision(name: str) -> nn.Module:
    import torchvision  # not a dependency of luminal: only ``--sizes vision`` needs it

    seg = name in VISION_SEGMENTERS
    kw: dict = {"weights": None, **({"weights_backbone": None} if seg else {})}
    if name in ("googlenet", "inception_v3"):
        kw.update(aux_logits=False, init_weights=True)
    return _Tensor(getattr(torchvision.models.segmentation if seg else torchvision.models, name)(**kw))


# ``--sizes vision``: torchvision's own architectures (another project's code, its exporter's output) with seeded
# weights, each at the opset its users might pick: name -> (image size, opset)
VISION = {"resnet18": (224, 13), "mobilenet_v2": (224, 11), "mobilenet_v3_large": (224, 17),
          "efficientnet_b0": (224, 13), "efficientnet_v2_s": (224, 17), "shufflenet_v2_x1_0": (224, 13),
          "squeezenet1_1": (224, 9), "googlenet": (224, 13), "densenet121": (224, 13), "regnet_y_400mf": (224, 13),
          "mnasnet1_0": (224, 12), "resnext50_32x4d": (224, 13), "convnext_tiny": (224, 17),
          "lraspp_mobilenet_v3_large": (320, 13), "deeplabv3_mobilenet_v3_large": (320, 13),
          "regnet_x_400mf": (224, 15), "inception_v3": (299, 13)}
VISION_SEGMENTERS = ("lraspp_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large")

CNNS = {"resnet50": (ResNet50, 224, ["logits"]), "mobilenetv3": (MobileNetV3, 224, ["logits"]),
        "yolo": (Yolo, 640, ["detections"]), "dbnet": (DBNet, 640, ["probability_map"]),
        "deeplab": (DeepLabV3, 512, ["segmentation"]), "crnn": (CRNN, (32, 320), ["probabilities"])}


def _specs() -> list[Spec]:
    out = []
    for size, (vocab, hidden, layers, heads, seq, batch) in {
        "small": (1000, 64, 2, 4, 16, 2), "full": (30522, 768, 12, 12, 128, 1),
    }.items():
        out.append(Spec("bert", size, lambda v=vocab, h=hidden, n=layers, a=heads: Bert(v, h, n, a, 512),
                        {"input_ids": ("int64", (batch, seq), vocab), "attention_mask": ("int64", (batch, seq), 2),
                         "token_type_ids": ("int64", (batch, seq), 2)},
                        ["last_hidden_state", "pooler_output"],
                        {k: {0: "batch", 1: "seq"} for k in ("input_ids", "attention_mask", "token_type_ids")},
                        {"batch": batch, "seq": seq}))
    for size, (vocab, hidden, layers, heads, seq, batch) in {
        "small": (1000, 64, 2, 4, 16, 2), "full": (50257, 768, 12, 12, 128, 1),
    }.items():
        out.append(Spec("gpt2", size, lambda v=vocab, h=hidden, n=layers, a=heads: GPT2(v, h, n, a, 1024),
                        {"input_ids": ("int64", (batch, seq), vocab)}, ["logits"],
                        {"input_ids": {0: "batch", 1: "seq"}}, {"batch": batch, "seq": seq}))
    for size, (image, patch, hidden, layers, heads, classes, batch) in {
        "small": (32, 8, 64, 2, 4, 10, 2), "full": (224, 16, 768, 12, 12, 1000, 1),
    }.items():
        out.append(Spec("vit", size,
                        lambda i=image, p=patch, h=hidden, n=layers, a=heads, c=classes: ViT(i, p, h, n, a, c),
                        {"pixel_values": ("float32", (batch, 3, image, image), None)}, ["logits"],
                        {"pixel_values": {0: "batch"}}, {"batch": batch}))
    for size, (widths, blocks, classes, image, batch) in {
        "small": ((8, 16, 32, 64), (1, 1, 1, 1), 10, 32, 2), "full": ((64, 128, 256, 512), (2, 2, 2, 2), 1000, 224, 1),
    }.items():
        out.append(Spec("resnet", size, lambda w=widths, b=blocks, c=classes: ResNet(w, b, c),
                        {"images": ("float32", (batch, 3, image, image), None)}, ["logits"],
                        {"images": {0: "batch"}}, {"batch": batch}))
    for name, (cls, image, outputs) in CNNS.items():
        hw = image if isinstance(image, tuple) else (image, image)
        out.append(Spec(name, "cnn", cls, {"images": ("float32", (1, 3, *hw), None)}, outputs,
                        {"images": {0: "batch"}}, {"batch": 1}, ("torchscript",)))
    for name, (image, opset) in VISION.items():
        # traced and calibrated on a batch of two: a segmenter's pooled branch normalises single pixels
        out.append(Spec(name, "vision", lambda n=name: _torchvision(n),
                        {"images": ("float32", (2, 3, image, image), None)}, ["out"], {"images": {0: "batch"}},
                        {"batch": 1}, ("torchscript",), opset))
    return out


def _randomise_batchnorm(model: nn.Module, gen: torch.Generator) -> None:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.1)


def example_inputs(spec: Spec, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    xs = []
    for dtype, shape, high in spec.inputs.values():
        if dtype == "int64":
            xs.append(torch.randint(0, high, shape, generator=gen))
        else:
            xs.append(torch.randn(shape, generator=gen))
    return tuple(xs)


def build(spec: Spec, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = spec.build()
    _randomise_batchnorm(model, torch.Generator().manual_seed(seed + 1))
    if spec.size in ("cnn", "vision"):
        _calibrate_batchnorm(model, example_inputs(spec, seed + 2))
    return model.eval()


def _calibrate_batchnorm(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
    """Running statistics measured on one seeded batch, as training would leave them: deep nets with
    random weights then keep their activations near unit scale instead of vanishing or overflowing."""
    model.eval()
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a plain average over the batches seen: here the one batch
        m.train()
    with torch.no_grad():
        model(*inputs)


def export(spec: Spec, exporter: str, path: Path) -> None:
    model = build(spec)
    args = example_inputs(spec)
    names = list(spec.inputs)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(model, args, str(path), input_names=names, output_names=spec.outputs,
                              dynamic_axes={**spec.dims, **{o: {} for o in spec.outputs}},
                              opset_version=spec.opset, dynamo=False,
                              # keep BatchNormalization nodes in the CNN instead of folding them into Conv
                              do_constant_folding=spec.name != "resnet")
        else:
            dims: dict[str, torch.export.Dim] = {}
            dyn = tuple({ax: dims.setdefault(d, torch.export.Dim(d, min=1, max=4096) if d == "batch"
                                             else torch.export.Dim(d, min=2, max=512))
                         for ax, d in spec.dims[k].items()} for k in names)
            prog = torch.onnx.export(model, args, input_names=names, output_names=spec.outputs,
                                     dynamic_shapes=dyn, dynamo=True, verbose=False)
            prog.save(str(path))


def light_models() -> list[Path]:
    """The model-zoo graphs shipped in the onnx wheel (weights filled by ConstantOfShape)."""
    return sorted((Path(onnx.__file__).parent / "backend" / "test" / "data" / "light").glob("*.onnx"))


def _weight_values(role: tuple[str, int], shape: tuple[int, ...], transposed: bool,
                   rng: np.random.Generator) -> np.ndarray:
    """Seeded values for a weight, by the (op, input index) that consumes it: He-initialised Conv weights,
    LeCun-initialised Gemm and MatMul weights, BatchNormalization scales and variances (and Mul factors)
    around 1, small biases and means, so activations keep their scale through a deep net."""
    op, i = role
    if op in ("Conv", "ConvTranspose") and i == 1 and len(shape) >= 2:
        fan_in = math.prod(shape[1:]) if op == "Conv" else shape[0] * math.prod(shape[2:])
        return rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)
    if op in ("Gemm", "MatMul") and i == 1 and len(shape) == 2:  # classifiers: LeCun, logits of unit scale
        return rng.standard_normal(shape) * math.sqrt(1.0 / shape[1 if transposed else 0])
    if (op == "BatchNormalization" and i in (1, 4)) or op == "Mul":
        return rng.uniform(0.5, 1.5, shape)
    return rng.standard_normal(shape) * 0.1


def seeded_light_model(path: Path, seed: int = 0) -> onnx.ModelProto:
    """A light model-zoo graph with seeded weights instead of its fills: every ConstantOfShape of a constant
    shape and every float initializer of one repeated value becomes an initializer of the same name, shape
    and dtype holding values from ``_weight_values``. The weights stop being graph inputs (IR 4), so both
    runtimes may treat them as constants."""
    m = onnx.load(str(path))
    g = m.graph
    rng = np.random.default_rng(seed)
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for name in n.input:
            consumers.setdefault(name, []).append(n)

    def role(name: str) -> tuple[tuple[str, int], bool]:
        for n in consumers.get(name, []):
            if n.op_type == "Unsqueeze":  # a per-channel vector broadcast into a Mul or an Add
                return role(n.output[0])
            transposed = any(a.name == "transB" and a.i for a in n.attribute)
            return (n.op_type, list(n.input).index(name)), transposed
        return ("", 0), False

    seeded: dict[str, np.ndarray] = {}
    nodes = []
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            fill = numpy_helper.to_array(n.attribute[0].t) if n.attribute else np.zeros(1, np.float32)
            shape = tuple(int(d) for d in inits[n.input[0]])
            r, t = role(n.output[0])
            seeded[n.output[0]] = _weight_values(r, shape, t, rng).astype(fill.dtype)
        else:
            nodes.append(n)
    for name, a in inits.items():
        if a.dtype.kind == "f" and a.size > 1 and (a == a.flat[0]).all():
            r, t = role(name)
            seeded[name] = _weight_values(r, a.shape, t, rng).astype(a.dtype)
    used = {name for n in nodes for name in n.input} | {o.name for o in g.output}
    kept = [t for t in g.initializer if t.name in used and t.name not in seeded]
    weights = kept + [numpy_helper.from_array(v, k) for k, v in seeded.items() if k in used]
    constant = {t.name for t in weights}
    inputs = [i for i in g.input if i.name not in constant and i.name not in inits]
    del g.node[:], g.initializer[:], g.input[:]
    g.node.extend(nodes)
    g.initializer.extend(weights)
    g.input.extend(inputs)
    m.ir_version = max(m.ir_version, 4)
    _calibrate_batchnorm_stats(m, np.random.default_rng(seed + 1))
    return m


def _calibrate_batchnorm_stats(m: onnx.ModelProto, rng: np.random.Generator) -> None:
    """Every BatchNormalization's mean and variance set to its input's per-channel statistics on one
    seeded standard-normal input (onnxruntime, one pass per level of BatchNormalization depth), as
    ``_calibrate_batchnorm`` does for the torch CNNs: residual nets keep their activations near unit scale
    and their softmax unsaturated."""
    import onnxruntime as ort

    g = m.graph
    inits = {t.name: t for t in g.initializer}
    norms = [n for n in g.node if n.op_type == "BatchNormalization" and n.input[3] in inits and n.input[4] in inits]
    if not norms:
        return
    stats = {k: numpy_helper.to_array(inits[k]) for n in norms for k in n.input[3:5]}
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    kept = [t for t in probe.graph.initializer if t.name not in stats]
    del probe.graph.initializer[:]
    probe.graph.initializer.extend(kept)
    probe.graph.input.extend(onnx.helper.make_tensor_value_info(k, onnx.TensorProto.FLOAT, list(v.shape))
                             for k, v in stats.items())
    xs = list(dict.fromkeys(n.input[0] for n in norms))
    probe.graph.output.extend(onnx.helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None) for x in xs)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs() if i.name not in stats}
    for _ in range(len(norms) + 1):
        got = dict(zip(xs, sess.run(xs, {**feeds, **stats})))
        before = dict(stats)
        with np.errstate(all="ignore"):  # deeper levels may overflow until the levels above them are set
            for n in norms:
                x = got[n.input[0]].astype(np.float64)
                axes = (0, *range(2, x.ndim))
                stats[n.input[3]] = x.mean(axes).astype(np.float32)
                stats[n.input[4]] = np.maximum(x.var(axes), 1e-4).astype(np.float32)
        if all(np.allclose(stats[k], before[k], rtol=1e-5, atol=1e-7) for k in stats):
            break
    if not all(np.isfinite(v).all() for v in stats.values()):
        raise RuntimeError(f"{g.name}: BatchNormalization statistics did not settle to finite values")
    for k, v in stats.items():
        inits[k].CopyFrom(numpy_helper.from_array(v, k))


QUANT_SOURCES = ("mobilenetv3-cnn-torchscript.onnx", "light_squeezenet-cnn-seeded.onnx",
                 "resnet50-cnn-torchscript.onnx")
QUANT_KINDS = ("qdq", "qoperator", "dynamic")


def quantize(src: Path, shapes: dict[str, int], kind: str, path: Path) -> None:
    """``src`` quantized by onnxruntime's quantizer (``kind``: qdq, qoperator or dynamic), calibrated on four
    seeded inputs at ``shapes`` (its symbolic dims)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = path.with_suffix(".pre.onnx")
    quant_pre_process(str(src), str(pre))
    try:
        if kind == "dynamic":
            quantize_dynamic(str(pre), str(path))
            return
        model = onnx.load(str(pre))
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        if kind == "qdq" and opset < 13:  # the quantizer writes per-channel axes, which need opset 13
            model = onnx.version_converter.convert_version(model, 13)
            onnx.save(model, str(pre))
        graph = model.graph
        inits = {t.name for t in graph.initializer}
        inputs = {i.name: [d.dim_value or shapes[d.dim_param] for d in i.type.tensor_type.shape.dim]
                  for i in graph.input if i.name not in inits}
        rng = np.random.default_rng(0)

        class Calibration(CalibrationDataReader):
            def __init__(self) -> None:
                self.feeds = iter([{n: rng.standard_normal(sh).astype(np.float32) for n, sh in inputs.items()}
                                   for _ in range(4)])

            def get_next(self):
                return next(self.feeds, None)

        quantize_static(str(pre), str(path), Calibration(), activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, per_channel=kind == "qdq",
                        quant_format=QuantFormat.QDQ if kind == "qdq" else QuantFormat.QOperator)
    finally:
        pre.unlink(missing_ok=True)


def main(argv=None) -> int:
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(HERE / "models"), help="output folder (default examples/models)")
    p.add_argument("--small-only", action="store_true", help="only the small versions (--sizes small)")
    p.add_argument("--sizes", default="small,full",
                   help="small,full,cnn,vision,quant (cnn: the CNN benchmark group; vision: torchvision's models; "
                        "quant: the cnn group's CNNs quantized by onnxruntime)")
    p.add_argument("--only", default="", help="comma-separated model names (bert,gpt2,vit,resnet,resnet50,"
                                               "mobilenetv3,yolo,dbnet,light_resnet50,...)")
    p.add_argument("--exporters", default="torchscript,dynamo", help="torchscript,dynamo")
    p.add_argument("--force", action="store_true", help="re-export files that exist")
    p.add_argument("--list-light", action="store_true", help="print the light model-zoo graphs shipped with onnx")
    a = p.parse_args(argv)
    if a.list_light:
        print("\n".join(str(x) for x in light_models()))
        return 0
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    only = {x for x in a.only.split(",") if x}
    sizes = {"small"} if a.small_only else set(a.sizes.split(","))
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for spec in _specs():
        if spec.size not in sizes or (only and spec.name not in only):
            continue
        for exporter in a.exporters.split(","):
            if exporter not in spec.exporters:
                continue
            fname = f"{spec.name}-{spec.size}-{exporter}.onnx"
            path = out / fname
            if a.force or not path.exists():
                t0 = time.perf_counter()
                export(spec, exporter, path)
                print(f"{fname}: exported in {time.perf_counter() - t0:.1f} s", flush=True)
            manifest[fname] = {"model": spec.name, "size": spec.size, "exporter": exporter,
                               "shapes": spec.shapes, "outputs": spec.outputs}
    for light in light_models() if "cnn" in sizes else []:
        if only and light.stem not in only:
            continue
        fname = f"{light.stem}-cnn-seeded.onnx"
        if a.force or not (out / fname).exists():
            onnx.save(seeded_light_model(light), str(out / fname))
            print(f"{fname}: written", flush=True)
        manifest[fname] = {"model": light.stem, "size": "cnn", "exporter": "seeded", "shapes": {},
                           "outputs": [o.name for o in onnx.load(str(light), load_external_data=False).graph.output]}
    for src in QUANT_SOURCES if "quant" in sizes else ():
        if src not in manifest or not (out / src).exists():
            print(f"{src}: not there to quantize (export --sizes cnn first)", flush=True)
            continue
        stem = src.split("-")[0]
        for kind in QUANT_KINDS if not only or stem in only else ():
            fname = f"{stem}-quant-{kind}.onnx"
            if a.force or not (out / fname).exists():
                t0 = time.perf_counter()
                quantize(out / src, manifest[src]["shapes"], kind, out / fname)
                print(f"{fname}: quantized in {time.perf_counter() - t0:.1f} s", flush=True)
            manifest[fname] = {**manifest[src], "size": "quant", "exporter": f"onnxruntime-{kind}"}
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
