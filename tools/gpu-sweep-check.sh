#!/usr/bin/env bash
# One GPU lease's checks of the sweep path, each step bounded in time, every output under $OUT:
#   1. the kernels built and checked, the GPU tests of the files that have them;
#   2. the sweep benchmark on Table 10's paper noise-0.4 column through both backends (bench-sweep.json: wall
#      time, trials at once, nvidia-smi's busy share, the first round's start-up phases);
#   3. the engine benchmark's GPU rows: one actor per client, the pooled actor with its clients side by side
#      (the default) and one after the other, and the vectorised cohort;
#   4. Table 10's paper noise grid through Ray Tune into $OUT/noise-paper, resumable (run again with the same
#      $OUT to go on), for what is left of $BUDGET seconds.
# Usage: OUT=/tmp/out [DATA=/path/to/fashion-mnist] [BUDGET=540] bash tools/gpu-sweep-check.sh
set -uo pipefail
: "${OUT:?set OUT to a folder for the results}"
BUDGET=${BUDGET:-540}
DATA_ARGS=(); [ -n "${DATA:-}" ] && DATA_ARGS=(--data-dir "$DATA")
start=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - start) )); }
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
timeout 240 python -m fda_ray.kernels --build --cuda --check > "$OUT/kernels.txt" 2>&1
timeout 180 python -m pytest -q -m gpu tests/test_kernels.py tests/test_engine.py tests/test_cohort.py tests/test_placement.py \
  tests/test_startup.py > "$OUT/pytest-gpu.txt" 2>&1
timeout "$(left)" python -m benchmarks.sweep --profile paper --device cuda "${DATA_ARGS[@]}" \
  --json "$OUT/bench-sweep.json" > "$OUT/bench-sweep.txt" 2>&1
timeout "$(left)" python -m benchmarks.engine --rounds 3 --settings ray,ray-pool,ray-pool-turns,ray-pool-vec \
  --gpus-per-client 0.1 --device cuda "${DATA_ARGS[@]}" > "$OUT/bench-engine.txt" 2>&1
resume=(); [ -d "$OUT/noise-paper/trials" ] && resume=(--resume)
[ "$(left)" -gt 30 ] && timeout -s INT "$(left)" python -m fda_ray.sweep --grid noise --profile paper \
  --gpus-per-client 0.1 "${DATA_ARGS[@]}" --out "$OUT/noise-paper" --no-figures --track none "${resume[@]}" \
  > "$OUT/noise-paper.txt" 2>&1
echo "done in $(( $(date +%s) - start )) s" > "$OUT/done.txt"
