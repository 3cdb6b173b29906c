#!/usr/bin/env bash
# One GPU lease's checks of the sweep path in one command, each step bounded in time, every output in one archive
# ($OUT/results.tgz: a lease brings back few files). Steps, most wanted first:
#   kernels          the C++ and CUDA kernels built and checked
#   pytest-gpu       the GPU tests of the files that have them
#   fused-ops        a round of 8 of the main job's trials on the GPU, fused and one after the other, and the operators
#                    a trial-step dispatches (python -m benchmarks.fused_ops --device cuda)
#   compiled-step    a fused step of 8 trials eager, under torch.compile and as CUDA graphs (reduce-overhead)
#                    (python -m benchmarks.compiled_step --device cuda)
#   grid-fused       Table 10's whole paper noise grid (59 trials) fused (--fuse auto, local backend: one process, one
#                    CUDA context): the issue's <= 60 s target (python -m benchmarks.sweep --values all)
#   column-*         the paper noise-0.4 column (9 trials) side by side: fused through Ray Tune, unfused through Ray Tune
#                    (each trial's clients in its process: 144 s on an H200 before fusing) and unfused with client
#                    actors; one backend at a time so a failed one keeps the others
#   served           the paper noise-0.4 column's FDA rows through Ray Tune as trials of their own, unfused and on a
#                    fusion server (the shape a search under ASHA or Optuna fuses in; python -m benchmarks.served)
#   noise-paper      Table 10's paper noise grid through Ray Tune, fused, for what is left of $BUDGET (resumable)
# (The side-by-side clients' memory probe, tools/gpu_memory_probe.py, left this list for the fused steps' time: run it
# by hand after the kernels' step when that question is next; tests/test_lease_scripts.py checks every step here.)
# The SMs' activity (nvidia-smi dmon -s u's sm column) is sampled beside utilization.gpu: dmon.txt, and each
# benchmark's "SM active" column.
# steps.txt holds each step's start, exit code and seconds, setup.txt the set-up's seconds (nvidia-smi's samples,
# smi.csv, start right after it): tools.pages' gpu-lease generator reads the three.
# Usage: OUT=/tmp/out [PACK=folder] [BUDGET=555] bash tools/gpu-sweep-check.sh   (PACK: tools/gpu-lease-setup.sh)
set -uo pipefail
: "${OUT:?set OUT to a folder for the results}"
T0=$(date +%s); BUDGET=${BUDGET:-555}
R=$OUT/r; mkdir -p "$R"
. tools/gpu-lease-setup.sh
lease_sampler
lease_step kernels "$(lease_cap 220)" python -m fda_ray.kernels --build --cuda --check
lease_step pytest-gpu "$(lease_cap 150)" python -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels.py \
  tests/test_engine.py tests/test_cohort.py tests/test_fusion.py tests/test_placement.py tests/test_startup.py \
  tests/test_domainbed.py
lease_step fused-ops "$(lease_cap 120)" python -m benchmarks.fused_ops --device cuda --trials 8 --repeats 3 \
  --json "$R/fused-ops-cuda.json"
lease_step compiled-step "$(lease_cap 90)" python -m benchmarks.compiled_step --device cuda --trials 8 \
  --json "$R/compiled-step-cuda.json"
lease_step grid-fused "$(lease_cap 240)" python -m benchmarks.sweep --profile paper --device cuda --values all \
  --seeds 0 --backends local-fused --json "$R/bench-grid-fused.json"
for b in tune-fused tune tune-actors; do
  lease_step "column-$b" "$(lease_cap 200)" python -m benchmarks.sweep --profile paper --device cuda --backends "$b" \
    --json "$R/bench-sweep-$b.json"
done
lease_step served "$(lease_cap 200)" python -m benchmarks.served --device cuda --profile paper --seeds 1 --fuse 32 \
  --json "$R/bench-served-cuda.json"
[ "$(lease_left)" -gt 60 ] && lease_step noise-paper "$(lease_cap 600)" python -m fda_ray.sweep --grid noise \
  --profile paper --device cuda --vectorise on --fuse auto --out "$R/noise-paper" --no-figures --track none \
  --resume auto
lease_finish
