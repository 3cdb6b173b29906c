#!/usr/bin/env bash
# One GPU lease's checks of the sweep path in one command, each step bounded in time, every output in one archive
# ($OUT/results.tgz: a lease brings back few files). Steps, most wanted first:
#   kernels          the C++ and CUDA kernels built and checked
#   pytest-gpu       the GPU tests of the files that have them
#   probe-*          one in-process paper trial with its GPU clients side by side and one after the other: PyTorch's
#                    peak memory each (tools/gpu_memory_probe.py; a stall prints its stacks)
#   bench-sweep-*    Table 10's paper noise-0.4 column through the local backend, Ray Tune with client actors, and
#                    Ray Tune with each trial's clients in its process (python -m benchmarks.sweep, one backend at a
#                    time so a failed one keeps the others)
#   noise-paper      Table 10's paper noise grid through Ray Tune for what is left of $BUDGET (resumable)
# steps.txt holds each step's start, exit code and seconds, setup.txt the set-up's seconds (nvidia-smi's samples,
# smi.csv, start right after it): tools.pages' gpu-lease generator reads the three.
# Usage: OUT=/tmp/out [PACK=folder] [BUDGET=555] bash tools/gpu-sweep-check.sh
#   PACK (optional) holds what the GPU machine lacks: site.tar.xz (Ray and the packages it needs beyond the
#   machine's own, unpacked as a site-packages folder) and fashion-mnist.tar.xz (the four IDX files); unpacked once
#   into .gpucache/ (keep it out of what a call carries: a warm machine keeps it, and the kernel cache, between
#   calls).
set -uo pipefail
: "${OUT:?set OUT to a folder for the results}"
T0=$(date +%s); BUDGET=${BUDGET:-555}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
cap() { local l; l=$(( $(left) - 20 )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }  # a step's limit
C=$PWD/.gpucache; R=$OUT/r; mkdir -p "$C" "$R"
DATA_ARGS=()
if [ -n "${PACK:-}" ]; then
  [ -f "$C/site.ok" ] || { mkdir -p "$C/site" && tar -xJf "$PACK/site.tar.xz" -C "$C/site" && touch "$C/site.ok"; }
  [ -f "$C/fm.ok" ] || { mkdir -p "$C/fm" && tar -xJf "$PACK/fashion-mnist.tar.xz" -C "$C/fm" && touch "$C/fm.ok"; }
  export PYTHONPATH=$PWD:$C/site FDA_DATA_DIR=$C/fm
  DATA_ARGS=(--data-dir "$C/fm")
fi
export FDA_RAY_KERNEL_CACHE=$C/kcache MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} PYTHONUNBUFFERED=1
echo "setup $(( $(date +%s) - T0 )) s" > "$R/setup.txt"
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -l 1 > "$R/smi.csv" 2>&1 &
SMI=$!
python -c "import sys, ray, torch; print(sys.version.split()[0], 'ray', ray.__version__, 'torch', torch.__version__)" \
  >> "$R/setup.txt" 2>&1
{ nproc; git log -1 --format=%h; } >> "$R/setup.txt" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$R/gpu.csv" 2>&1
step() {  # step NAME LIMIT COMMAND...: skipped when under 15 s are left
  local name=$1 lim=$2 s; shift 2; s=$(date +%s)
  echo "== $name start $(( s - T0 )) s (limit $lim)" >> "$R/steps.txt"
  [ "$lim" -gt 15 ] && timeout -s INT -k 10 "$lim" "$@" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $(( $(date +%s) - s )) s" >> "$R/steps.txt"
}
step kernels "$(cap 220)" python -m fda_ray.kernels --build --cuda --check
step pytest-gpu "$(cap 150)" python -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels.py tests/test_engine.py \
  tests/test_cohort.py tests/test_placement.py tests/test_startup.py
for c in 1 0; do
  step probe-concurrent$c "$(cap 70)" python tools/gpu_memory_probe.py fashion-mnist fedgp --concurrent $c --rounds 3 \
    --stall 55 --set noise=0.4
done
bs() { step "bench-sweep-$1" "$(cap 200)" python -m benchmarks.sweep --profile paper --device cuda "${DATA_ARGS[@]}" \
  --backends "$1" --json "$R/bench-sweep-$1.json"; }
bs tune; bs local; bs tune-actors
[ "$(left)" -gt 60 ] && step noise-paper "$(cap 600)" python -m fda_ray.sweep --grid noise --profile paper \
  --gpus-per-client 0.1 "${DATA_ARGS[@]}" --out "$R/noise-paper" --no-figures --track none --resume auto
kill "$SMI" 2>/dev/null
echo "done $(( $(date +%s) - T0 )) s" >> "$R/steps.txt"
tar -czf "$OUT/results.tgz" -C "$OUT" r && rm -rf "$R"
