"""[tool.luminal] / luminal.toml: parsing, defaults, paths relative to the file, one-line errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from luminal.config import (
    configured_models,
    find_config_file,
    load_config,
    parse_duration,
    parse_fraction,
)
from luminal.errors import LuminalError


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not read by the config loader")
    return path


def _pyproject(folder: Path, body: str) -> Path:
    p = folder / "pyproject.toml"
    p.write_text('[project]\nname = "demo"\n\n' + body)
    return p


def test_full_pyproject(tmp_path):
    _touch(tmp_path / "models" / "bert.onnx")
    _touch(tmp_path / "models" / "vit.onnx")
    _pyproject(tmp_path, """
[tool.luminal]
backend = "cpu"
cache = ".luminal/tuning.db"
budget = "1h30m"
max_regression = "5%"
baseline = "bench/baseline.json"
atol = 1e-3
rtol = 1e-2
threads = 4

[[tool.luminal.models]]
path = "models/bert.onnx"
shapes = { batch = 1, seq = 128 }

[[tool.luminal.models]]
path = "models/vit.onnx"
name = "vit-b"
shapes = { pixel_values = "1x3x224x224", mask = [1, 197] }
atol = 5e-2
""")
    cfg = load_config(tmp_path)
    assert cfg.source == (tmp_path / "pyproject.toml").resolve()
    assert cfg.backend == "cpu" and cfg.threads == 4
    assert cfg.cache == (tmp_path / ".luminal" / "tuning.db").resolve()
    assert cfg.baseline == (tmp_path / "bench" / "baseline.json").resolve()
    assert cfg.budget == 5400.0
    assert cfg.max_regression == pytest.approx(0.05)
    bert, vit = cfg.models
    assert bert.name == "bert" and bert.path == (tmp_path / "models" / "bert.onnx").resolve()
    assert bert.shapes == {"batch": 1, "seq": 128}
    assert (bert.atol, bert.rtol) == (1e-3, 1e-2)  # project-wide defaults
    assert vit.name == "vit-b" and vit.shapes == {"pixel_values": (1, 3, 224, 224), "mask": (1, 197)}
    assert (vit.atol, vit.rtol) == (5e-2, 1e-2)


def test_luminal_toml_top_level_keys_and_search_from_subfolder(tmp_path):
    _touch(tmp_path / "m.onnx")
    (tmp_path / "luminal.toml").write_text('max_regression = 0.1\n[[models]]\npath = "m.onnx"\n')
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    assert find_config_file(sub) == tmp_path / "luminal.toml"
    models = configured_models(sub)
    assert [m.name for m in models] == ["m"]
    assert models[0].atol is None and models[0].rtol is None
    assert load_config(sub).max_regression == pytest.approx(0.1)


def test_pyproject_without_section_is_no_config_and_search_stops_at_repo_root(tmp_path):
    _pyproject(tmp_path, "")
    assert load_config(tmp_path) is None
    outer = tmp_path / "outer"
    repo = outer / "repo"
    repo.mkdir(parents=True)
    _touch(outer / "m.onnx")
    (outer / "luminal.toml").write_text('[[models]]\npath = "m.onnx"\n')
    (repo / ".git").mkdir()
    assert find_config_file(repo) is None
    with pytest.raises(LuminalError, match=r"no MODEL given and no \[tool.luminal\]"):
        configured_models(repo)


def test_explicit_path(tmp_path):
    _touch(tmp_path / "m.onnx")
    p = tmp_path / "custom.toml"
    p.write_text('backend = "reference"\n[[models]]\npath = "m.onnx"\nname = "x"\n')
    cfg = load_config(path=p)
    assert cfg.backend == "reference" and cfg.models[0].name == "x"
    with pytest.raises(LuminalError, match="not found"):
        load_config(path=tmp_path / "missing.toml")


@pytest.mark.parametrize("body, message", [
    ("bogus = 1", r"^\[tool.luminal\] bogus: unknown key"),
    ('backend = "tpu"', r"^\[tool.luminal\] backend: expected one of auto, cuda"),
    ("threads = 0", r"^\[tool.luminal\] threads: must be at least 1"),
    ('threads = "4"', r"^\[tool.luminal\] threads: expected an integer, got a string"),
    ("atol = true", r"^\[tool.luminal\] atol: expected a number, got a boolean"),
    ('budget = "soon"', r"^\[tool.luminal\] budget: expected seconds or a duration"),
    ('max_regression = "five"', r"^\[tool.luminal\] max_regression: expected a percentage"),
    ("cache = 3", r"^\[tool.luminal\] cache: expected a path string, got an integer"),
    ('models = "m.onnx"', r"^\[tool.luminal\] models: expected an array of tables, got a string"),
    ('models = ["m.onnx"]', r"^\[tool.luminal\] models\[0\]: expected a table, got a string"),
    ('[[tool.luminal.models]]\npath = "m.onnx"\n[[tool.luminal.models]]\npath = "m.onnx"\nshapes = [1]',
     r"^\[tool.luminal\] models\[1\].shapes: expected a table"),
    ('[[tool.luminal.models]]\npath = "m.onnx"\nshapes = { x = "1xax3" }',
     r"^\[tool.luminal\] models\[0\].shapes.x: expected an integer or a shape"),
    ('[[tool.luminal.models]]\npath = "m.onnx"\nshapes = { x = -1 }',
     r"^\[tool.luminal\] models\[0\].shapes.x: dimensions must be non-negative"),
    ('[[tool.luminal.models]]\npath = "m.onnx"\nweights = 1', r"^\[tool.luminal\] models\[0\].weights: unknown key"),
    ('[[tool.luminal.models]]\nname = "m"', r"^\[tool.luminal\] models\[0\].path: missing"),
    ('[[tool.luminal.models]]\npath = "gone.onnx"',
     r"^\[tool.luminal\] models\[0\].path: model file 'gone.onnx' not found"),
    ('[[tool.luminal.models]]\npath = "m.onnx"\n[[tool.luminal.models]]\npath = "m.onnx"',
     r"^\[tool.luminal\] models\[1\].name: duplicate model name 'm'"),
    ("[tool.luminal\n", r"not valid TOML"),
])
def test_errors_name_the_key(tmp_path, body, message):
    _touch(tmp_path / "m.onnx")
    text = body if body.startswith("[") else "[tool.luminal]\n" + body
    _pyproject(tmp_path, text + "\n")
    with pytest.raises(LuminalError, match=message) as info:
        load_config(tmp_path)
    assert "\n" not in str(info.value)


def test_no_models_listed(tmp_path):
    _pyproject(tmp_path, '[tool.luminal]\nbackend = "cpu"\n')
    with pytest.raises(LuminalError, match="lists no models"):
        configured_models(tmp_path)


def test_value_parsers():
    assert parse_duration(90) == 90.0
    assert parse_duration("90s") == 90.0
    assert parse_duration("20m") == 1200.0
    assert parse_duration("1h") == 3600.0
    assert parse_duration("1.5h") == 5400.0
    for bad in ("", "h", "-5", 0, "1d", True):
        with pytest.raises(LuminalError):
            parse_duration(bad)
    assert parse_fraction("5%") == pytest.approx(0.05)
    assert parse_fraction("0.5%") == pytest.approx(0.005)
    assert parse_fraction(0.1) == pytest.approx(0.1)
    for bad in ("-5%", "x%", None, False):
        with pytest.raises(LuminalError):
            parse_fraction(bad)


@pytest.mark.parametrize("doc", ["README.md", "docs/ci.md"])
def test_documented_examples_parse(tmp_path, doc):
    import re
    import tomllib

    from luminal.config import parse_config

    text = (Path(__file__).resolve().parent.parent / doc).read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        table = tomllib.loads(block)["tool"]["luminal"]
        for m in table.get("models", []):
            _touch(tmp_path / m["path"])
        cfg = parse_config(table, tmp_path / "pyproject.toml")
        assert cfg.models and cfg.max_regression == pytest.approx(0.05)


def test_ci_example_configuration(small_models):
    """.ci/luminal.toml, which .ci/run checks, names example models that exist (small_models exports them)."""
    import subprocess

    repo = Path(__file__).resolve().parent.parent
    models = configured_models(path=repo / ".ci" / "luminal.toml")
    assert {m.path.name for m in models} <= set(small_models)
    assert all(m.shapes for m in models)
    assert find_config_file(repo / ".ci") == repo / ".ci" / "luminal.toml"
    assert subprocess.run(["bash", "-n", str(repo / ".ci" / "run")]).returncode == 0
