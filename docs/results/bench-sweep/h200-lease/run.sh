#!/usr/bin/env bash
# GPU lease script (not committed): set-up from .whl, then the sweep-path checks, everything tarred into $OUT.
set -uo pipefail
T0=$(date +%s); BUDGET=${BUDGET:-555}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
cap() { local l; l=$(( $(left) - 20 )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
C=$PWD/.gpucache; mkdir -p $C; R=$OUT/r; mkdir -p $R
[ -f $C/site.ok ] || { mkdir -p $C/site && tar -xJf .whl/site.tar.xz -C $C/site && touch $C/site.ok; }
[ -f $C/fm.ok ] || { mkdir -p $C/fm && tar -xJf .whl/fashion-mnist.tar.xz -C $C/fm && touch $C/fm.ok; }
export PYTHONPATH=$PWD:$C/site FDA_RAY_KERNEL_CACHE=$C/kcache MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 PYTHONUNBUFFERED=1
export RAY_DEDUP_LOGS=0 FDA_DATA_DIR=$C/fm
echo "setup $(( $(date +%s) - T0 )) s" > $R/setup.txt
python -c "import ray, torch, sys; print(sys.version.split()[0], 'ray', ray.__version__, 'torch', torch.__version__, torch.cuda.get_device_name())" >> $R/setup.txt 2>&1
nproc >> $R/setup.txt; git log -1 --format=%h >> $R/setup.txt 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.csv 2>&1
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -l 1 > $R/smi.csv 2>&1 &
SMI=$!
step() { local name=$1 lim=$2; shift 2; local s=$(date +%s); echo "== $name start $(( s - T0 )) s (limit $lim)" >> $R/steps.txt
  [ "$lim" -gt 15 ] && timeout -s INT -k 10 "$lim" "$@" > $R/$name.txt 2>&1; echo "== $name rc=$? $(( $(date +%s) - s )) s" >> $R/steps.txt; }
step kernels "$(cap 220)" python -m fda_ray.kernels --build --cuda --check
step pytest-gpu "$(cap 150)" python -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels.py tests/test_engine.py tests/test_cohort.py tests/test_placement.py tests/test_startup.py
bs() { step bench-sweep-$1 "$(cap 200)" python -m benchmarks.sweep --profile paper --device cuda --data-dir $C/fm --backends $1 --json $R/bench-sweep-$1.json; }
bs local; bs tune-actors
step share-cnn8 "$(cap 120)" python -m benchmarks.sweep --grid domainbed-colored-fmnist --profile paper --values 0 --methods fedgp --seeds 8 --backends local --workers 8 --device cuda --data-dir $C/fm --json $R/share-cnn8.json -- --rounds 4
step share-cnn1 "$(cap 90)" python -m benchmarks.sweep --grid domainbed-colored-fmnist --profile paper --values 0 --methods fedgp --seeds 1 --backends local --workers 1 --device cuda --data-dir $C/fm --json $R/share-cnn1.json -- --rounds 4
bs tune
kill $SMI 2>/dev/null
echo "done $(( $(date +%s) - T0 )) s" >> $R/steps.txt
tar -czf $OUT/results.tgz -C $OUT r && rm -rf $R
