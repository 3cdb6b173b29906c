#!/usr/bin/env bash
# Puts the four Fashion-MNIST IDX files in /usr/share/datasets/fashion-mnist (Debian/Ubuntu package
# dataset-fashion-mnist), where fda_ray finds them; with --out DIR, also copies them (as raw IDX files) into DIR.
#
#   bash datasets/fashion-mnist.sh [--out DIR] [--check]
#
# Files already there are checked against Zalando's release (sizes and sha256 of the uncompressed files,
# fda_ray/data/releases.py, the one place the numbers are written): the release -> nothing done; a file damaged
# (tampered, cut short, another dataset's) -> one line naming it and what is wrong, then the package is reinstalled
# (apt-get install --reinstall) or DIR's files written again; --check only checks (exit 0 the release, 1 damaged,
# 3 missing) and never writes. A target that cannot be written, no apt-get, no root and no sudo -> one line, exit 1.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
releases="$here/../fda_ray/data/releases.py"  # run by path: standard library only (this runs before pip install)
[ -f "$releases" ] || releases="$here/releases.py"  # a copy beside the script (deploy/docker/Dockerfile)
[ -f "$releases" ] || { echo "error: fda_ray/data/releases.py (the releases' sizes and sha256) is not beside $here;" \
                             "run this script from an fda-ray checkout" >&2; exit 1; }
dir=/usr/share/datasets/fashion-mnist
pkg=dataset-fashion-mnist
usage="usage: bash datasets/fashion-mnist.sh [--out DIR] [--check]"
out="" check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "error: --out needs a folder; $usage" >&2; exit 2; }; out="$2"; shift 2 ;;
    --out=*) out="${1#--out=}"; shift ;;
    --check) check=1; shift ;;
    -h|--help) echo "$usage  (Debian's $pkg into $dir; --out DIR: a copy there too)"; exit 0 ;;
    *) echo "error: unknown argument '$1'; $usage" >&2; exit 2 ;;
  esac
done

# The system copy: checked, installed if missing, reinstalled if damaged.
state=0
line="$("$python" "$releases" check Fashion-MNIST "$dir")" || state=$?
case "$state" in
  0) echo "$line" ;;
  1|3)
    if [ "$check" = 1 ]; then
      [ "$state" = 1 ] && line="$line; \`bash datasets/fashion-mnist.sh\` reinstalls $pkg"
      echo "error: $line" >&2; exit "$state"
    fi
    if ! command -v apt-get >/dev/null; then
      echo "error: $line; apt-get not found: $pkg is a Debian/Ubuntu package; elsewhere put the four IDX files in" \
           "\$FDA_DATA_DIR/fashion-mnist (or pass --download to fda-ray)" >&2
      exit 1
    fi
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
      command -v sudo >/dev/null || { echo "error: $line; installing $pkg into $dir needs root: run this as root" \
                                           "or install sudo" >&2; exit 1; }
      sudo="sudo"
    fi
    export DEBIAN_FRONTEND=noninteractive
    reinstall=""
    if [ "$state" = 1 ]; then
      echo "$line: reinstalling $pkg"
      reinstall="--reinstall"
    fi
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq $reinstall "$pkg" >/dev/null
    if ! line="$("$python" "$releases" check Fashion-MNIST "$dir")"; then
      echo "error: $line (after installing $pkg)" >&2
      exit 1
    fi
    ls "$dir" ;;
  *) echo "error: could not check $dir ($python $releases exited $state)" >&2; exit 1 ;;
esac
[ -n "$out" ] || exit 0

# A copy in DIR: checked, written (again) from the system copy unless it is already the release.
state=0
line="$("$python" "$releases" check Fashion-MNIST "$out")" || state=$?
case "$state" in
  0) echo "$line"; exit 0 ;;
  1) if [ "$check" = 1 ]; then
       echo "error: $line; \`bash datasets/fashion-mnist.sh --out $(printf %q "$out")\` writes the release again" >&2
       exit 1
     fi
     echo "$line: writing Fashion-MNIST's files again" ;;
  3) if [ "$check" = 1 ]; then echo "error: $line" >&2; exit 3; fi ;;
  *) echo "error: could not check $out ($python $releases exited $state)" >&2; exit 1 ;;
esac
"$python" "$releases" writable "$out" || exit 1
"$python" "$releases" install Fashion-MNIST "$dir" "$out"
