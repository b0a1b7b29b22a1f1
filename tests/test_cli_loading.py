"""One road for every command: the same model loader and unbound-dim rule, one shape grammar, one duration
grammar, one "option, else configuration, else default" rule, and commands as module-level functions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_util import invoke, needs_cpu
from runtime_util import make_model

from luminal.cli import bench_cmd, cache_cmd, check_cmd, compile_cmd, doctor_cmd, inspect_cmd, tune_cmd
from luminal.cli.project import chosen_models
from luminal.config import load_config, parse_config, resolve
from luminal.errors import LuminalError
from luminal.frontend_onnx.loader import Unbound, load_model
from luminal.values import format_duration, parse_duration, parse_shape_args, parse_shape_value

ALL = (bench_cmd, cache_cmd, check_cmd, compile_cmd, doctor_cmd, inspect_cmd, tune_cmd)



@pytest.fixture
def dynamic(tmp_path: Path) -> Path:
    """x[batch, 8] -> ... : a model whose batch only a --shape binds."""
    return make_model(tmp_path / "dyn.onnx")


@pytest.fixture
def no_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with no configuration above it (the search stops at .git)."""
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _error_line(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.strip()]
    assert len(lines) == 1, output
    return " ".join(lines[0].split())


# ---------------------------------------------------------------- one loader, one unbound-dim rule

@needs_cpu
def test_tune_of_a_dynamic_model_without_shape_refuses_as_compile_does(dynamic, no_project):
    compiled = invoke(compile_cmd, args=["compile", str(dynamic), "--backend", "cpu"])
    tuned = invoke(tune_cmd, args=["tune", str(dynamic), "--backend", "cpu", "--budget", "30s",
                                   "--cache", str(no_project / "t.db"),
                                   "--storage", f"sqlite:///{no_project / 'studies.db'}"])
    assert compiled.exit_code == tuned.exit_code == 2, (compiled.output, tuned.output)
    line = _error_line(tuned.output)
    assert line == _error_line(compiled.output)
    assert "unbound dimensions batch" in line and "--shape" in line
    assert not (no_project / "t.db").exists() and "tuning" not in tuned.output  # refused before anything ran


@needs_cpu
def test_tune_library_call_refuses_unbound_dims(dynamic, tmp_path):
    from luminal.search.tuner import tune

    with pytest.raises(LuminalError, match="unbound dimensions batch"):
        tune(str(dynamic), "cpu", 5.0, cache=tmp_path / "t.db", storage=f"sqlite:///{tmp_path / 's.db'}")


def test_one_off_runs_warn_with_the_dims_names(dynamic, no_project):
    r = invoke(check_cmd, args=["check", str(dynamic), "--json", "-"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["inputs"]["x"]["shape"] == [1, 8]
    assert any("unbound" in w and "batch" in w for w in report["warnings"])
    r = invoke(inspect_cmd, args=["inspect", str(dynamic), "--json", "-"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["unbound"] == ["batch"] and any("batch" in w for w in data["warnings"])


def test_the_loader_refuses_or_warns_and_names_a_missing_file(dynamic, tmp_path):
    with pytest.raises(LuminalError, match="unbound dimensions batch"):
        load_model(dynamic, {}, Unbound.REFUSE)
    assert load_model(dynamic, {}, Unbound.WARN).unbound == ["batch"]
    bound = load_model(dynamic, {"batch": 8}, Unbound.REFUSE)
    assert bound.inputs[0].shape == (8, 8) and not bound.unbound
    with pytest.raises(LuminalError, match=r"model '.*gone\.onnx' not found"):
        load_model(tmp_path / "gone.onnx", {}, Unbound.WARN)


def test_every_command_names_a_missing_model_alike(no_project):
    lines = set()
    for module, args in ((compile_cmd, ["compile", "gone.onnx", "--backend", "interpret"]),
                         (check_cmd, ["check", "gone.onnx"]), (inspect_cmd, ["inspect", "gone.onnx"]),
                         (bench_cmd, ["bench", "gone.onnx", "--backend", "reference", "--runs", "2"])):
        r = invoke(module, args=args)
        assert r.exit_code == 2, (args, r.output)
        lines.add(_error_line(r.output))
    assert lines == {"error: model 'gone.onnx' not found"}


# ---------------------------------------------------------------- one shape grammar

@pytest.mark.parametrize("toml, cli", [
    ("8", "8"), ('"8"', "8"), ("[8]", "8"), ('"1x3x224x224"', "1x3x224x224"), ("[1, 3, 224, 224]", "1X3x224x224"),
    ("0", "0"),
])
def test_shape_on_the_command_line_and_in_the_configuration_mean_the_same(tmp_path, toml, cli):
    (tmp_path / "m.onnx").write_bytes(b"")
    cfg = parse_config({"models": [{"path": "m.onnx", "shapes": {"x": _toml_value(toml)}}]}, tmp_path / "p.toml")
    assert cfg.models[0].shapes == parse_shape_args([f"x={cli}"])
    value, given = cfg.models[0].shapes["x"], parse_shape_args([f"x={cli}"])["x"]
    assert value == parse_shape_value(_toml_value(toml), "x") and type(value) is type(given)


def _toml_value(text: str) -> object:
    import tomllib

    return tomllib.loads(f"v = {text}")["v"]


@pytest.mark.parametrize("bad", ["two", "1x", "-1", "1x-3", "", "x8"])
def test_bad_shapes_are_refused_alike(tmp_path, bad):
    with pytest.raises(LuminalError, match=r"expected an integer or a shape|must be non-negative"):
        parse_shape_args([f"x={bad}"])
    (tmp_path / "m.onnx").write_bytes(b"")
    with pytest.raises(LuminalError, match=r"models\[0\]\.shapes\.x: (expected an integer or a shape|dimensions "
                                           r"must be non-negative)"):
        parse_config({"models": [{"path": "m.onnx", "shapes": {"x": bad}}]}, tmp_path / "p.toml")


def test_a_configured_model_and_the_same_model_with_shape_bind_the_same(dynamic, tmp_path, monkeypatch):
    (tmp_path / "luminal.toml").write_text(f'[[models]]\npath = "{dynamic.name}"\nshapes = {{ batch = "3" }}\n')
    monkeypatch.chdir(tmp_path)
    config = load_config()
    (configured,) = chosen_models(None, None, config)
    (given,) = chosen_models(str(dynamic), ["batch=3"], None)
    assert configured.shapes == given.shapes == {"batch": 3}
    (named,) = chosen_models(dynamic.name, None, config)  # MODEL listed in the configuration: its shapes
    assert named.shapes == {"batch": 3}
    graphs = [load_model(m.path, m.shapes, Unbound.REFUSE) for m in (configured, given)]
    assert graphs[0].inputs[0].shape == graphs[1].inputs[0].shape == (3, 8)
    with pytest.raises(LuminalError, match="--shape needs a MODEL"):
        chosen_models(None, ["batch=3"], config)


# ---------------------------------------------------------------- one duration grammar and formatter

def test_one_duration_grammar():
    assert parse_duration("1h30m") == parse_duration("90m") == parse_duration(5400) == parse_duration("5400") == 5400
    assert parse_duration("1h 30m 15s") == 5415
    assert parse_duration("2w 3d", units="wdhms") == (14 + 3) * 86400
    assert parse_duration("30d", units="wdhms") == parse_duration("720h")
    for bad in ("30m1h", "1m1m", "5ms", "1.h", "h", "-1s", "0s"):
        with pytest.raises(LuminalError):
            parse_duration(bad, units="wdhms")
    with pytest.raises(LuminalError, match="budget: expected seconds or a duration in h, m, s"):
        parse_duration("1d", "budget")


def test_the_budget_reads_alike_from_the_command_line_and_the_configuration(tmp_path):
    cfg = parse_config({"budget": "1h30m"}, tmp_path / "p.toml")
    assert cfg.budget == parse_duration("1h30m", "--budget") == 5400


def test_cache_prune_takes_the_same_grammar(tmp_path, no_project):
    from luminal.cache import TuningCache

    db = str(tmp_path / "c.db")
    TuningCache(db).close()  # an empty cache: prune refuses a missing one
    for text in ("1w 2d", "36h", "90m", "3600"):
        r = invoke(cache_cmd, args=["cache", "prune", "--older-than", text, "--cache", db, "--json", "--dry-run"])
        assert r.exit_code == 0, (text, r.output)
        assert json.loads(r.stdout)["dry_run"] is True
    r = invoke(cache_cmd, args=["cache", "prune", "--older-than", "a while", "--cache", db])
    assert r.exit_code == 2 and "bad duration for --older-than" in r.output


def test_format_duration():
    assert [format_duration(s) for s in (None, 5e-9, 12.5e-6, 0.41, 2.345, 99.94, 125.4, 3600)] == [
        "-", "5 ns", "12.5 µs", "410 ms", "2.35 s", "99.9 s", "125 s", "3600 s"]


# ---------------------------------------------------------------- one "option, else config, else default"

def test_resolve_takes_the_option_then_the_configuration_then_the_default(tmp_path):
    cfg = parse_config({"backend": "cpu", "threads": 3}, tmp_path / "p.toml")
    assert resolve("cuda", cfg, lambda c: c.backend, "auto") == "cuda"
    assert resolve(None, cfg, lambda c: c.backend, "auto") == "cpu"
    assert resolve(None, None, lambda c: c.backend, "auto") == "auto"
    assert resolve(None, cfg, lambda c: c.budget, 60.0) == 60.0  # not configured
    assert resolve(0, cfg, lambda c: c.threads, 1) == 0  # a given falsy value is still given


def test_compile_and_check_with_a_model_follow_the_configuration(dynamic, tmp_path, monkeypatch):
    """A MODEL given on the command line takes the configured backend and shapes, as every command does."""
    (tmp_path / "luminal.toml").write_text(
        f'backend = "interpret"\natol = 0.5\n[[models]]\npath = "{dynamic.name}"\nshapes = {{ batch = 2 }}\n')
    monkeypatch.chdir(tmp_path)
    r = invoke(compile_cmd, args=["compile", dynamic.name, "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["backend"] == "interpret" and data["inputs"][0]["shape"] == [2, 8]
    r = invoke(check_cmd, args=["check", dynamic.name, "--backend", "reference", "--json", "-"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["backend"] == "reference" and report["atol"] == 0.5 and report["inputs"]["x"]["shape"] == [2, 8]
    r = invoke(doctor_cmd, args=["doctor", "--json"])
    assert json.loads(r.stdout)["checked_backend"] == "interpret"


# ---------------------------------------------------------------- commands are module-level functions

def test_commands_are_module_level_functions():
    import typer

    app = typer.Typer()
    for module in ALL:
        module.register(app)
    callbacks = [c.callback for c in app.registered_commands]
    callbacks += [c.callback for g in app.registered_groups for c in g.typer_instance.registered_commands]
    assert len(callbacks) >= 11
    for cb in callbacks:
        fn = getattr(cb, "__wrapped__", cb)
        assert "<locals>" not in fn.__qualname__, fn.__qualname__
        assert getattr(fn.__module__ and __import__(fn.__module__, fromlist=["x"]), fn.__name__) is fn
