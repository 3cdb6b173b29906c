#!/usr/bin/env bash
# The personalised-FL baselines of Auto-weighted FDA on Fashion-MNIST, noise 0.4, seed 0, the FDA runs' settings
# (lr 0.01 / 0.005, batch 64 / 16, Adam, one local epoch) for 150 rounds (Auto-weighted FDA App. C.2), one thread each,
# two at a time: FedRep (10 head epochs a round) on one core, the others one after the other on the other.
set -euo pipefail
out=$(dirname "$0")
run() {  # method, name, extra flags...
  local m=$1 name=$2; shift 2
  python -m fda_ray --method "$m" --noise 0.4 --seed 0 --rounds 150 --parquet "$out/$name.parquet" "$@" > "$out/$name.log" 2>&1
}
run fedrep fedrep &
(run fedavg_all fedavg_all; run ditto ditto; run apfl apfl; run knn_per knn_per_test;
 run knn_per knn_per_validation --knn-per-selection validation) &
wait
