"""Export the example models to ONNX with torch, randomly initialised and seeded.

    python examples/export_models.py [--out examples/models] [--small-only] [--only bert,gpt2]
                                     [--exporters torchscript,dynamo]

Four architectures, each written here from torch.nn modules (no downloads):
a BERT-style encoder, a GPT-2-style decoder producing logits (causal mask, no KV
cache), a ViT and a ResNet-style CNN with BatchNorm. Each comes in a ``full``
size (BERT-base, GPT-2 small, ViT-B/16 at 224, ResNet-18) and a ``small`` size
for fast tests, and is exported with the TorchScript exporter and with the
default (dynamo) exporter. Batch and sequence dims are symbolic (dim_param), so
``--shape batch=1,seq=128`` chooses them. A ``manifest.json`` next to the
models lists each file with the shapes its checks use.
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

import torch
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
    return model.eval()


def export(spec: Spec, exporter: str, path: Path) -> None:
    model = build(spec)
    args = example_inputs(spec)
    names = list(spec.inputs)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(model, args, str(path), input_names=names, output_names=spec.outputs,
                              dynamic_axes={**spec.dims, **{o: {} for o in spec.outputs}},
                              opset_version=17, dynamo=False,
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
    import onnx

    return sorted((Path(onnx.__file__).parent / "backend" / "test" / "data" / "light").glob("*.onnx"))


def main(argv=None) -> int:
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(HERE / "models"), help="output folder (default examples/models)")
    p.add_argument("--small-only", action="store_true", help="only the small versions")
    p.add_argument("--only", default="", help="comma-separated model names (bert,gpt2,vit,resnet)")
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
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for spec in _specs():
        if (a.small_only and spec.size != "small") or (only and spec.name not in only):
            continue
        for exporter in a.exporters.split(","):
            fname = f"{spec.name}-{spec.size}-{exporter}.onnx"
            path = out / fname
            if a.force or not path.exists():
                t0 = time.perf_counter()
                export(spec, exporter, path)
                print(f"{fname}: exported in {time.perf_counter() - t0:.1f} s", flush=True)
            manifest[fname] = {"model": spec.name, "size": spec.size, "exporter": exporter,
                               "shapes": spec.shapes, "outputs": spec.outputs}
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
