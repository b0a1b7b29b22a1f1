#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: the cuda tests, the MatMul table against cuBLAS (benchmarks/gpu_gemm.py) and the
# example models against onnxruntime (benchmarks/gpu_bench.py), all in under 8 minutes; writes one JSON file.
#   benchmarks/gpu_check.sh [OUT.json] [TUNE_S]
# TUNE_S: seconds of `luminal tune` per tuned MatMul case (0: none). Where wheels lie in .whl/ (a machine that reaches
# no package index: optuna, sqlite-utils and what they need), they are installed into a folder of their own and the
# checkout is imported as `luminal` through a link; else a venv is set up with pip.
set -u
cd "$(dirname "$0")/.."
OUT="${1:-gpu_check.json}"
TUNE_S="${2:-0}"
START=$(date +%s)
left() { echo $(( 470 - ($(date +%s) - START) )); }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo '{"error": "no NVIDIA GPU visible"}' > "$OUT"; echo "no NVIDIA GPU visible"; exit 2
fi
if compgen -G ".whl/*.whl" >/dev/null; then
  SITE=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/*.whl || exit 2
  mkdir -p "$SITE/link" && ln -sfn "$PWD" "$SITE/link/luminal"
  export PYTHONPATH="$SITE:$SITE/link"
  PY=python3
else
  VENV="${LUMINAL_GPU_VENV:-.venv-gpu}"
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv --system-site-packages "$VENV"
    "$VENV/bin/pip" install -q -e ".[dev]" onnxruntime-gpu || echo "pip install failed; using what is there"
  fi
  PY="$VENV/bin/python"
fi
export PYTHONUNBUFFERED=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

timeout 120 "$PY" -m pytest -q -p no:cacheprovider -n 8 -k cuda --tb=short -rf \
  tests/test_triton_emit.py tests/test_runtime_session.py --junitxml="$TMP/tests.xml" > "$TMP/tests.txt" 2>&1
TEST_RC=$?
grep -E "^(FAILED|ERROR)|passed|failed" "$TMP/tests.txt" | tail -30
timeout $(( $(left) / 2 )) "$PY" benchmarks/gpu_gemm.py --rounds 5 --sweep --tune-s "$TUNE_S" --json "$TMP/gemm.json"
GEMM_RC=$?
BUDGET=$(( $(left) - 20 )); [ "$BUDGET" -lt 30 ] && BUDGET=30
timeout $(( $(left) - 5 )) "$PY" benchmarks/gpu_bench.py --budget-s "$BUDGET" --json "$TMP/bench.json"
BENCH_RC=$?

"$PY" - "$OUT" "$TMP" "$TEST_RC" "$GEMM_RC" "$BENCH_RC" "$START" <<'PYEOF'
import json, sys, time, xml.etree.ElementTree as ET
from pathlib import Path
out, tmp, start = sys.argv[1], Path(sys.argv[2]), int(sys.argv[6])
test_rc, gemm_rc, bench_rc = (int(a) for a in sys.argv[3:6])
tests = {}
if (tmp / "tests.xml").is_file():
    s = ET.parse(tmp / "tests.xml").getroot()
    s = s if s.tag == "testsuite" else s[0]
    tests = {k: int(s.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
def read(name):
    return json.loads((tmp / name).read_text()) if (tmp / name).is_file() else None
tail = (tmp / "tests.txt").read_text()[-4000:] if (tmp / "tests.txt").is_file() else ""
Path(out).write_text(json.dumps({"tests_rc": test_rc, "tests": tests, "tests_tail": tail, "gemm_rc": gemm_rc,
                                 "gemm": read("gemm.json"), "bench_rc": bench_rc, "bench": read("bench.json"),
                                 "wall_s": int(time.time()) - start}, indent=1))
print("wrote", out)
PYEOF
[ "$TEST_RC" -eq 0 ] && [ "$GEMM_RC" -eq 0 ] && [ "$BENCH_RC" -eq 0 ]
