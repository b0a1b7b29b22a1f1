#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: set up a venv, run the GPU tests and the GPU benchmark
# (example models vs onnxruntime's CUDA EP), all in under 8 minutes; writes one JSON file.
#   benchmarks/gpu_check.sh [OUT.json]
set -u
cd "$(dirname "$0")/.."
OUT="${1:-gpu_check.json}"
VENV="${LUMINAL_GPU_VENV:-.venv-gpu}"
START=$(date +%s)
left() { echo $(( 470 - ($(date +%s) - START) )); }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo '{"error": "no NVIDIA GPU visible"}' > "$OUT"; echo "no NVIDIA GPU visible"; exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv --system-site-packages "$VENV"
  "$VENV/bin/pip" install -q -e ".[dev]" onnxruntime-gpu || echo "pip install failed; using what is there"
fi
PY="$VENV/bin/python"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

timeout $(( $(left) / 2 )) "$PY" -m pytest -q -p no:cacheprovider -n 4 -k cuda \
  tests/test_triton_emit.py tests/test_runtime_session.py --junitxml="$TMP/tests.xml" > "$TMP/tests.txt" 2>&1
TEST_RC=$?
tail -3 "$TMP/tests.txt"
BUDGET=$(( $(left) - 20 )); [ "$BUDGET" -lt 30 ] && BUDGET=30
timeout $(( $(left) - 5 )) "$PY" benchmarks/gpu_bench.py --budget-s "$BUDGET" --json "$TMP/bench.json"
BENCH_RC=$?

"$PY" - "$OUT" "$TMP" "$TEST_RC" "$BENCH_RC" "$START" <<'PYEOF'
import json, sys, time, xml.etree.ElementTree as ET
from pathlib import Path
out, tmp, test_rc, bench_rc, start = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
tests = {}
if (tmp / "tests.xml").is_file():
    s = ET.parse(tmp / "tests.xml").getroot()
    s = s if s.tag == "testsuite" else s[0]
    tests = {k: int(s.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
bench = json.loads((tmp / "bench.json").read_text()) if (tmp / "bench.json").is_file() else None
tail = (tmp / "tests.txt").read_text()[-4000:] if (tmp / "tests.txt").is_file() else ""
Path(out).write_text(json.dumps({"tests_rc": test_rc, "tests": tests, "tests_tail": tail, "bench_rc": bench_rc,
                                 "bench": bench, "wall_s": int(time.time()) - start}, indent=1))
print("wrote", out)
PYEOF
[ "$TEST_RC" -eq 0 ] && [ "$BENCH_RC" -eq 0 ]
