# Sourced by the GPU lease scripts (tools/gpu-sweep-check.sh, tools/gpu-sweep-chunk.sh), from the repository root:
# unpacks what $PACK holds into .gpucache/ once (a warm machine keeps it between calls, with the kernel cache) and
# points Python and fda-ray at it. $PACK (optional) may hold site.tar.xz (Ray and the packages it needs beyond the
# GPU machine's own, as a site-packages folder), fashion-mnist.tar.xz and mnist.tar.xz (each dataset's four IDX
# files); the datasets land in fda-ray's standard layout under .gpucache/data ($FDA_DATA_DIR).
C=$PWD/.gpucache
mkdir -p "$C/data"
_unpack() {  # _unpack NAME FILE FOLDER: once per machine
  [ -f "$C/$1.ok" ] && return 0
  [ -f "$PACK/$2" ] || return 0
  mkdir -p "$3" && tar -xJf "$PACK/$2" -C "$3" && touch "$C/$1.ok"
}
if [ -n "${PACK:-}" ]; then
  _unpack site site.tar.xz "$C/site"
  _unpack fashion-mnist fashion-mnist.tar.xz "$C/data/fashion-mnist"
  _unpack mnist mnist.tar.xz "$C/data/MNIST/raw"
  export PYTHONPATH=$PWD:$C/site FDA_DATA_DIR=$C/data
fi
export FDA_RAY_KERNEL_CACHE=$C/kcache MAX_JOBS=${MAX_JOBS:-16} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} PYTHONUNBUFFERED=1
# lease_step NAME LIMIT COMMAND...: one bounded step, its output in $R/NAME.txt, its start, exit code and seconds
# in $R/steps.txt (relative to $T0); skipped when the limit is under 15 s.
lease_step() {
  local name=$1 lim=$2 s; shift 2; s=$(date +%s)
  echo "== $name start $(( s - T0 )) s (limit $lim)" >> "$R/steps.txt"
  [ "$lim" -gt 15 ] && timeout -s INT -k 30 "$lim" "$@" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $(( $(date +%s) - s )) s" >> "$R/steps.txt"
}
lease_left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lease_cap() { local l; l=$(( $(lease_left) - 40 )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }  # a step's limit
# The GPU's busy share and memory once a second from now on (steps.txt's times line up with setup.txt's seconds).
lease_sampler() {
  echo "setup $(( $(date +%s) - T0 )) s" > "$R/setup.txt"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -l 1 > "$R/smi.csv" 2>&1 &
    LEASE_SMI=$!
    nvidia-smi dmon -s u -d 1 -o T > "$R/dmon.txt" 2>&1 &  # the SMs' activity (sm column), with each sample's time
    LEASE_DMON=$!
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$R/gpu.csv" 2>&1
  fi
  { python -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__)"; nproc
    git log -1 --format=%h; } >> "$R/setup.txt" 2>&1
}
# lease_finish: stop the sampler; everything but the unfinished trials' round checkpoints (state.pt, megabytes
# each) in results.tgz, and those in states.tgz, cut into parts of 15 MiB (states.tgz.part-aa, -ab, ...: a lease
# brings back 8 files of 16 MiB, 64 MiB in all) when it is larger, so that the next chunk goes on from their last
# round (`cat states.tgz.part-* | tar -xz`). Past 3 parts they are left out: those trials start again.
lease_finish() {
  [ -n "${LEASE_SMI:-}" ] && kill "$LEASE_SMI" 2>/dev/null
  [ -n "${LEASE_DMON:-}" ] && kill "$LEASE_DMON" 2>/dev/null
  echo "done $(( $(date +%s) - T0 )) s" >> "$R/steps.txt"
  (cd "$OUT" && for d in r/*/trials/*/; do [ -f "$d/state.pt" ] && [ ! -f "$d/rows.json" ] && echo "${d%/}/state.pt"; done \
    | tar -czf states.tgz -T - \
    && if [ "$(stat -c %s states.tgz)" -gt $(( 15 * 1024 * 1024 )) ]; then
         split -b 15M states.tgz states.tgz.part- && rm -f states.tgz
         [ "$(ls states.tgz.part-* | wc -l)" -le 3 ] || rm -f states.tgz.part-*
       fi)
  tar -czf "$OUT/results.tgz" --exclude state.pt -C "$OUT" r && rm -rf "$R"
}
