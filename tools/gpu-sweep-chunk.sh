#!/usr/bin/env bash
# One chunk of a long sweep on a lent GPU, in one command: the sweep runs with --resume auto into $R/$NAME for what
# is left of $BUDGET seconds, is stopped like Ctrl-C at the end (finished trials whole, unfinished ones at their last
# finished round: state.pt), and the folder comes back in one archive ($OUT/results.tgz) with the lease's steps and
# nvidia-smi's samples. The next lease carries the folder back (PREV) and goes on.
# Usage: OUT=/tmp/out [PACK=folder] [BUDGET=555] [NAME=sweep] [PREV=folder of an earlier chunk] \
#          bash tools/gpu-sweep-chunk.sh SWEEP-FLAGS...
#   e.g. ... bash tools/gpu-sweep-chunk.sh --grid domainbed-colored --profile paper --values 0 --device cuda
# The sweep's own --out, --resume, --no-figures and --track are set here. PACK: tools/gpu-lease-setup.sh.
# A PREV recorded by another build (fda_ray.core.build: the code version moves with any change to number-changing
# code, e.g. the committed docs/results folders) is refused by the resume's build check in one line, before the
# lease trains anything: pass --mix-builds among SWEEP-FLAGS to go on beside it (summary.md names both builds).
# A PREV whose trials were planned under an earlier default (the DomainBed oracle's lr before 2026-11-29) is refused
# by the resume's settings check the same way: --new-settings runs today's trials beside them.
set -uo pipefail
: "${OUT:?set OUT to a folder for the results}"
T0=$(date +%s); BUDGET=${BUDGET:-555}; NAME=${NAME:-sweep}
R=$OUT/r; mkdir -p "$R"
. tools/gpu-lease-setup.sh
if [ -n "${PREV:-}" ]; then
  [ -d "$PREV" ] || { echo "error: PREV=$PREV is not a folder" >&2; exit 2; }
  cp -a "$PREV" "$R/$NAME"
fi
lease_sampler
lease_step kernels "$(lease_cap 220)" python -m fda_ray.kernels --build --cuda --check
lease_step "$NAME" "$(lease_cap 100000)" python -m fda_ray.sweep "$@" --out "$R/$NAME" --resume auto --no-figures \
  --track none
lease_finish
