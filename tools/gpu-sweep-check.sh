#!/usr/bin/env bash
# One GPU lease's checks of the sweep path in one command, each step bounded in time, every output in one archive
# ($OUT/results.tgz: a lease brings back few files). Steps, most wanted first:
#   kernels          the C++ and CUDA kernels built and checked
#   pytest-gpu       the GPU tests of the files that have them
#   probe-*          one in-process paper trial with its GPU clients side by side and one after the other: PyTorch's
#                    peak memory each (tools/gpu_memory_probe.py; a stall prints its stacks)
#   bench-sweep-*    Table 10's paper noise-0.4 column through Ray Tune with each trial's clients in its process, the
#                    local backend, and Ray Tune with client actors (python -m benchmarks.sweep, one backend at a time
#                    so a failed one keeps the others)
#   noise-paper      Table 10's paper noise grid through Ray Tune for what is left of $BUDGET (resumable)
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
  tests/test_engine.py tests/test_cohort.py tests/test_placement.py tests/test_startup.py tests/test_domainbed.py
for c in 1 0; do
  lease_step probe-concurrent$c "$(lease_cap 70)" python tools/gpu_memory_probe.py fashion-mnist fedgp --concurrent $c \
    --rounds 3 --stall 55 --set noise=0.4
done
for b in tune local tune-actors; do
  lease_step "bench-sweep-$b" "$(lease_cap 200)" python -m benchmarks.sweep --profile paper --device cuda --backends "$b" \
    --json "$R/bench-sweep-$b.json"
done
[ "$(lease_left)" -gt 60 ] && lease_step noise-paper "$(lease_cap 600)" python -m fda_ray.sweep --grid noise \
  --profile paper --gpus-per-client 0.1 --out "$R/noise-paper" --no-figures --track none --resume auto
lease_finish
