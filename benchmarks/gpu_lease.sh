#!/usr/bin/env bash
# One pass over a lent NVIDIA machine that cannot reach a package index: the cuda tests, the GEMM table against
# cuBLAS and the example models, each under its own time limit, results as files in OUTDIR.
#   benchmarks/gpu_lease.sh OUTDIR [TUNE_S]
# Packages the machine lacks travel as wheels in .whl/ (optuna, sqlite-utils and what they need), the example models
# that fit as carried files under examples/models/; the checkout is imported as `luminal` through a link, so nothing
# is built there.
set -u
cd "$(dirname "$0")/.."
OUTDIR="${1:?usage: gpu_lease.sh OUTDIR [TUNE_S]}"
TUNE_S="${2:-0}"
mkdir -p "$OUTDIR" /tmp/luminal-pkg
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/luminal-site \
    .whl/*.whl || exit 2
fi
ln -sfn "$PWD" /tmp/luminal-pkg/luminal
export PYTHONPATH="/tmp/luminal-site:/tmp/luminal-pkg" PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import luminal, torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" || exit 2

timeout 90 python3 -m pytest -q -n 8 -k cuda --tb=short -rf tests/test_triton_emit.py tests/test_runtime_session.py \
  > "$OUTDIR/tests.txt" 2>&1
echo "tests rc $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUTDIR/tests.txt" | tail -30
timeout 240 python3 benchmarks/gpu_gemm.py --dtypes float16,bfloat16,float32 --rounds 5 --sweep --tune-s "$TUNE_S" --json "$OUTDIR/gpu_gemm.json"
echo "gemm rc $?"
timeout 120 python3 benchmarks/gpu_bench.py --models all --budget-s 105 --json "$OUTDIR/gpu_bench.json"
echo "bench rc $?"
