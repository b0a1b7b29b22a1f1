"""Fuzz luminal's commands with damaged model files, tuning caches and command-line values.

    python benchmarks/fuzz.py [--seed 0] [--count 100] [--workers 2] [--families model,cache,cli]
                              [--timeout 60] [--max-memory 4G] [--out DIR] [--json FILE]

Each case is one ``luminal`` command (check, inspect, compile, tune, bench, cache ...) on a mutant: a model
with flipped bytes or a bent graph (odd names, attribute types, dims, dtypes, ops, opsets, bombs), a cache
with damaged rows or pages (or a FIFO, a folder, a read-only folder), or odd option values. A case ends as
ok (exit 0 or 1), refusal (exit 2, one line on stderr), or a failure: noisy_refusal (exit 2 with another
number of stderr lines), traceback, signal, timeout or other_exit. Each failure is saved under --out with
its files, a cmd.sh that runs it again, and its output; the summary groups failures by signature (command,
exception, innermost luminal frame). Exit status: 0 when every case was clean, 1 otherwise.

Cases run in forked children of workers that imported luminal once, so a case costs its command's own
work, not an interpreter start; the summary gives cases per second.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzz_cases import FAMILIES
from fuzz_runner import Limits, Outcome
from fuzzing import FuzzConfig, Summary, run_fuzz

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _bytes(text: str) -> int:
    text = text.strip().upper().removesuffix("B")
    unit = text[-1] if text and text[-1] in UNITS else ""
    return int(float(text[: len(text) - len(unit)]) * UNITS[unit])


def _families(text: str) -> tuple[str, ...]:
    names = tuple(f.strip() for f in text.split(",") if f.strip())
    unknown = [f for f in names if f not in FAMILIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"families are {', '.join(FAMILIES)}; got {text!r}")
    return names


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0, help="a case is a function of (seed, family, index)")
    p.add_argument("--count", type=int, default=100, help="cases per family")
    p.add_argument("--workers", type=int, default=1, help="processes running cases side by side")
    p.add_argument("--families", type=_families, default=FAMILIES)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    p.add_argument("--max-memory", type=_bytes, default=4 << 30, help="address space per case, e.g. 4G")
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "luminal-fuzz-out",
                   help="folder for failing cases (default: luminal-fuzz-out in the system's temp)")
    p.add_argument("--json", type=Path, default=None, help="summary file (default: OUT/summary.json)")
    p.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: the system's temp)")
    return p.parse_args(argv)


def report(summary: Summary) -> str:
    lines = [f"{summary.cases} cases in {summary.seconds:.1f} s "
             f"({summary.cases / max(summary.seconds, 1e-9):.2f} cases/s, {summary.config.workers} workers)"]
    outcomes = sorted({o for c in summary.counts.values() for o in c})
    lines.append(f"{'family':8} " + " ".join(f"{o:>14}" for o in outcomes))
    for family, counts in summary.counts.items():
        lines.append(f"{family:8} " + " ".join(f"{counts.get(o, 0):>14}" for o in outcomes))
    for sig, failures in summary.signatures().items():
        first = failures[0]
        lines.append(f"{len(failures):5}  {first.outcome:13} {sig}   e.g. {first.saved or first.index}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    config = FuzzConfig(seed=args.seed, count=args.count, workers=args.workers, families=args.families,
                        limits=Limits(timeout=args.timeout, max_memory=args.max_memory), out=args.out.resolve(),
                        workdir=args.workdir)
    args.out.mkdir(parents=True, exist_ok=True)
    for outcome in Outcome:  # the failures of an earlier run into this folder
        shutil.rmtree(args.out / outcome.value, ignore_errors=True)

    def progress(done: int, total: int) -> None:
        if done % 50 == 0 or done == total:
            print(f"  {done}/{total}", file=sys.stderr, flush=True)

    summary = run_fuzz(config, progress)
    path = args.json or args.out / "summary.json"
    path.write_text(json.dumps(summary.to_json(), indent=2, default=str) + "\n")
    print(report(summary))
    print(f"summary: {path}")
    return 0 if not summary.failures else 1


if __name__ == "__main__":
    sys.exit(main())
