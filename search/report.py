"""What a tuning run found, as plain data (the CLI renders it; --json writes it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class KernelReport:
    signature: str
    form: str
    count: int  # occurrences in the model
    trials: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    default_ns: float | None = None
    best_ns: float | None = None
    best_config: dict[str, Any] | None = None
    sampler_note: str | None = None
    cached: int = 0  # proposals answered from earlier measurements
    pruned: int = 0  # invalid points rejected before compiling
    nodes: list[list[str]] = field(default_factory=list)  # the model nodes [name, op type] fused into it

    @property
    def speedup(self) -> float | None:
        return self.default_ns / self.best_ns if self.default_ns and self.best_ns else None


@dataclass
class FusionReport:
    edges: int
    trials: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    default_ns: float | None = None
    best_ns: float | None = None
    unfused: list[list[int]] = field(default_factory=list)  # edges the best plan leaves unfused
    convs: int = 0  # convolutions with an algorithm to choose
    winograd: list[list[int]] = field(default_factory=list)  # [node, tile] of those the best plan computes by Winograd
    layouts: int = 0  # convolutions that may store their output channels-last
    channels_last: list[int] = field(default_factory=list)  # those the best plan stores so
    images: int = 0  # convolutions over a batch that Winograd may take image by image
    by_image: list[int] = field(default_factory=list)  # those the best plan takes so


@dataclass
class TuneReport:
    model: str
    backend: str
    device: str
    toolchain: str
    sampler: str
    seed: int
    budget_s: float
    storage: str
    cache: str
    shapes: dict[str, Any] = field(default_factory=dict)  # the sizes the model was tuned at (--shape)
    elapsed_s: float = 0.0
    reserve_s: float = 0.0  # the end of the budget kept for re-timing the finalists and the model before and after
    timeout_s: float = 0.0  # a candidate that takes longer counts as a timeout
    current: str = ""  # the task worked on last: a kernel's signature, or "fusion"
    stopped: str = ""  # budget | trials | patience | exhausted | interrupted
    kernels: list[KernelReport] = field(default_factory=list)
    fusion: FusionReport | None = None
    e2e_default_ns: float | None = None
    e2e_tuned_ns: float | None = None
    winners_written: int = 0
    winners_pulled: int = 0  # winners of a shared storage's other machines written into the cache at the end
    notes: list[str] = field(default_factory=list)

    @property
    def trials(self) -> int:
        return sum(k.trials for k in self.kernels) + (self.fusion.trials if self.fusion else 0)

    @property
    def statuses(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in [k.statuses for k in self.kernels] + ([self.fusion.statuses] if self.fusion else []):
            for k, v in s.items():
                out[k] = out.get(k, 0) + v
        return out

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["trials"] = self.trials
        d["statuses"] = self.statuses
        for k, kr in zip(d["kernels"], self.kernels):
            k["speedup"] = kr.speedup
        if self.e2e_default_ns and self.e2e_tuned_ns:
            d["e2e_speedup"] = self.e2e_default_ns / self.e2e_tuned_ns
        return d
