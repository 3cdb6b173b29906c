#!/usr/bin/env bash
# Puts the four Fashion-MNIST IDX files in /usr/share/datasets/fashion-mnist (Debian/Ubuntu package
# dataset-fashion-mnist), where fda_ray finds them. Does nothing if they are already there.
set -euo pipefail
dir=/usr/share/datasets/fashion-mnist
if [ -f "$dir/train-images-idx3-ubyte.gz" ] || [ -f "$dir/train-images-idx3-ubyte" ]; then
  exit 0
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq dataset-fashion-mnist >/dev/null
ls "$dir"
