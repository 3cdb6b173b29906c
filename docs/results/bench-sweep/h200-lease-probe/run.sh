#!/usr/bin/env bash
set -uo pipefail
T0=$(date +%s)
C=$PWD/.gpucache; mkdir -p $C
[ -f $C/site.ok ] || { mkdir -p $C/site && tar -xJf .whl/site.tar.xz -C $C/site && touch $C/site.ok; }
[ -f $C/fm.ok ] || { mkdir -p $C/fm && tar -xJf .whl/fashion-mnist.tar.xz -C $C/fm && touch $C/fm.ok; }
export PYTHONPATH=$PWD:$C/site FDA_DATA_DIR=$C/fm FDA_RAY_KERNELS=reference PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 > $OUT/smi2.csv 2>&1 &
SMI=$!
echo "setup $(( $(date +%s) - T0 )) s" > $OUT/mem.txt
for a in "fashion-mnist fedgp 1 3 {\"noise\":0.4}" "fashion-mnist fedgp 0 3 {\"noise\":0.4}" \
         "colored-fmnist fedgp 1 3 {\"test_env\":0}" "colored-fmnist fedgp 0 3 {\"test_env\":0}"; do
  [ $(( $(date +%s) - T0 )) -gt 170 ] && break
  echo "== $(( $(date +%s) - T0 )) s: $a" >> $OUT/mem.txt
  timeout 60 python .whl/mem.py $a >> $OUT/mem.txt 2> $OUT/last-err.txt; echo "rc=$?" >> $OUT/mem.txt
  tail -3 $OUT/last-err.txt >> $OUT/mem.txt
done
kill $SMI; echo "done $(( $(date +%s) - T0 )) s" >> $OUT/mem.txt
