#!/usr/bin/env bash
# GPU evidence in one script, under 9 minutes, on a host with an NVIDIA GPU and PyTorch (TensorFlow optional):
#   1. kit selftest (GPU by UUID, timers, NVML sampling rate, energy counter, TF32, clocks), its JSON kept;
#   2. the LeNet paper profile's PyTorch arm run natively with fewer repetitions (benchmarks/gpu_evidence_lenet.py),
#      then NVML sampling and energy checks on its raw samples; the run directory is kept as a tarball;
#   3. the tests marked gpu (real NVML through the kit's session).
# Everything lands in docs/evidence/gpu-DATE-GPU/ (and in $OUT where that is set: the device tool's return folder).
# Missing small wheels (docker, ruptures) are installed from .whl/ when that folder exists.
# Exit status: the number of the three steps that failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
REPS=${REPS:-8}
export PYTHONUNBUFFERED=1

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "installing the carried wheels failed"; exit 9; }
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi

gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
[ -n "$gpu_name" ] || { echo "no NVIDIA GPU (nvidia-smi -L printed nothing): this script is for GPU hosts"; exit 9; }
slug=$(echo "$gpu_name" | tr -cs 'A-Za-z0-9' '-' | sed 's/-*$//')
dest=docs/evidence/gpu-$(date -u +%F)-$slug
mkdir -p "$dest"
log=$dest/log.txt
say() { echo "== [$(date -u +%T)] $*" | tee -a "$log"; }

say "host"
{
    nvidia-smi
    nvidia-smi --query-gpu=name,uuid,driver_version,persistence_mode,clocks.sm,clocks.max.sm,power.limit --format=csv
    "$PY" -c 'import sys, torch, pynvml; print("python", sys.version.split()[0], "| torch", torch.__version__, "cuda", torch.version.cuda, "| nvidia-ml-py", getattr(pynvml, "__version__", "?"))'
    "$PY" -c 'import tensorflow as tf; print("tensorflow", tf.__version__)' 2>/dev/null || echo "tensorflow: not installed here (the selftest's TensorFlow child fails for that reason alone)"
    git log -1 --format='kit commit %H %s' 2>/dev/null || true
} >>"$log" 2>&1

failed=0
say "1/3 kit selftest"
timeout 120 "$PY" -m kit selftest --json-file "$dest/selftest.json" >>"$log" 2>&1
rc=$?; say "selftest exit $rc"
# TensorFlow is absent on the device image: its child failing is expected; every other check must pass.
if [ -f "$dest/selftest.json" ]; then
    "$PY" - "$dest/selftest.json" >>"$log" 2>&1 <<'EOF' || failed=$((failed + 1))
import json, sys
rec = json.load(open(sys.argv[1]))
bad = [c for c in rec["checks"] if c["status"] == "fail"
       and not (c["name"] == "framework tensorflow" and "No module named 'tensorflow'" in c["detail"])]
for c in rec["checks"]:
    print(f"  {c['status']:5} {c['name']}: {c['detail'][:200]}")
print("selftest failures other than the missing TensorFlow:", [c["name"] for c in bad] or "none")
sys.exit(1 if bad else 0)
EOF
else
    failed=$((failed + 1))
fi

say "2/3 LeNet paper profile, PyTorch arm, $REPS repetitions, NVML sampling and energy checks"
runs=/tmp/gpu-evidence-runs
rm -rf "$runs"
timeout 360 "$PY" benchmarks/gpu_evidence_lenet.py --reps "$REPS" --runs-dir "$runs" --out "$dest/lenet-pytorch.json" \
    >>"$log" 2>&1
rc=$?; say "LeNet PyTorch arm exit $rc"; [ $rc -eq 0 ] || failed=$((failed + 1))
run_dir=$(ls -d "$runs"/2*/ 2>/dev/null | tail -n1)
[ -n "$run_dir" ] && tar czf "$dest/lenet-pytorch-run.tar.gz" -C "$(dirname "$run_dir")" "$(basename "$run_dir")"

say "3/3 tests marked gpu (real NVML)"
timeout 90 "$PY" -m pytest -m gpu -p no:cacheprovider -q -s tests/test_nvml_gpu.py >"$dest/gpu-tests.txt" 2>&1
rc=$?; cat "$dest/gpu-tests.txt" >>"$log"
# On a GPU host a skip is a failure: the tests exist to run here.
grep -q " passed" "$dest/gpu-tests.txt" && ! grep -q " skipped" "$dest/gpu-tests.txt" || rc=${rc/#0/5}
say "gpu tests exit $rc"; [ "$rc" -eq 0 ] || failed=$((failed + 1))

say "done: $failed step(s) failed; evidence in $dest"
if [ -n "${OUT:-}" ]; then cp "$dest"/* "$OUT"/; fi
exit "$failed"
