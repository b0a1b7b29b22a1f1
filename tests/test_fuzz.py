"""The fuzzer's CI slice: a fixed-seed sample of damaged models, caches and option values through the CLI.

Every case must end cleanly: exit 0 or 1, or exit 2 with exactly one line on stderr; never a traceback, a
signal, a hang or another exit code. A failure's files and command are kept under the test's tmp_path.
The full run is ``python benchmarks/fuzz.py --count 3334 --workers N``.
"""

from __future__ import annotations

from pathlib import Path

from fuzz_cases import Base, Context, make_case
from fuzz_runner import Case, Limits, Outcome, classify, oracles, signature
from fuzz_seeds import load_seeds
from fuzzing import FuzzConfig, Summary, run_fuzz

CASES_PER_FAMILY = 80


def _describe(summary: Summary) -> str:
    lines = [f"{summary.cases} cases: {summary.counts}"]
    for sig, failures in summary.signatures().items():
        f = failures[0]
        lines.append(f"{len(failures)} x {f.outcome}: {sig}\n    e.g. {f.saved} ({f.how[:100]})")
    return "\n".join(lines)


def test_outcomes_are_classified():
    assert classify(0, "warning: x\nwarning: y\n") is Outcome.OK
    assert classify(2, "error: bad\n") is Outcome.REFUSAL
    assert classify(2, "Usage: luminal x\n╭─ Error ─╮\n") is Outcome.NOISY_REFUSAL
    assert classify(2, "") is Outcome.NOISY_REFUSAL
    assert classify(1, 'Traceback (most recent call last):\n  File "x", line 1\nKeyError: 1\n') is Outcome.TRACEBACK
    assert classify(-11, "") is Outcome.SIGNAL
    assert classify(None, "") is Outcome.TIMEOUT
    assert classify(3, "error: internal error\n") is Outcome.OTHER_EXIT
    trace = ('Traceback (most recent call last):\n  File "/usr/lib/python3/x.py", line 3, in f\n'
             f'  File "{Path(__file__).parent.parent}/ir/passes.py", line 42, in g\n    x[k]\nKeyError: \'a\'\n')
    case = Case("model", 0, "", ("check", "m.onnx"))
    assert signature(case, Outcome.TRACEBACK, 1, trace) == "check | KeyError | ir/passes.py:42"


def test_a_case_is_made_again_from_its_seed_and_index(tmp_path: Path):
    seeds = tuple(load_seeds())
    ctx = Context(7, seeds, seeds[0], Base(b"", b"{}\n", b"{}", "0000"), {}, tmp_path)
    first = [make_case("model", i, ctx) for i in range(30)]
    assert first == [make_case("model", i, ctx) for i in range(30)]
    assert len({c.files for c in first}) > 25  # and the cases differ from one another


def test_oracles_see_what_exit_codes_hide(tmp_path: Path):
    case = Case("model", 0, "", ("inspect", "m.onnx"), (("m.onnx", b"model"),), untouched=("m.onnx",),
                names_from_files=True)
    (tmp_path / "m.onnx").write_bytes(b"model")
    assert oracles(case, tmp_path, "a table\n  with 'names'\t\n") is None
    assert oracles(case, tmp_path, "name \x1b[2J here\n") is Outcome.RAW_CONTROL
    assert oracles(case, tmp_path, "name \u202e here\n") is Outcome.RAW_CONTROL
    (tmp_path / "m.onnx-wal").write_bytes(b"")
    assert oracles(case, tmp_path, "") is Outcome.CHANGED_INPUT
    (tmp_path / "m.onnx-wal").unlink()
    (tmp_path / "m.onnx").write_bytes(b"changed")
    assert oracles(case, tmp_path, "") is Outcome.CHANGED_INPUT
    (tmp_path / "m.onnx").write_bytes(b"model")
    (tmp_path / "-").write_text("{}")
    assert oracles(case, tmp_path, "") is Outcome.CHANGED_INPUT
    (tmp_path / "-").unlink()
    refuse = Case("cli", 0, "", ("bench", "m.onnx", "--baseline", "broken.json"), must_refuse=True)
    assert oracles(refuse, tmp_path, "", 0) is Outcome.NOT_REFUSED
    assert oracles(refuse, tmp_path, "", 2) is None


def test_fuzz_slice_has_no_unclean_outcome(tmp_path: Path):
    config = FuzzConfig(seed=20, count=CASES_PER_FAMILY, workers=2, limits=Limits(timeout=120, max_memory=4 << 30),
                        out=tmp_path / "fuzz-out")
    summary = run_fuzz(config)
    assert summary.cases == CASES_PER_FAMILY * len(config.families)
    assert summary.total(Outcome.OK) > 0 and summary.total(Outcome.REFUSAL) > 0  # the cases reach the commands
    unclean = len(summary.failures)
    assert unclean == 0, _describe(summary)
