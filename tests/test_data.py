"""Dataset loaders on tiny files generated in the exact on-disk formats (IDX, torchvision CIFAR pickles),
the missing-dataset errors, and the synthetic regression data."""
from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

import fda_ray.data as data
from fda_ray.data import standard, synthetic
from fda_ray.data.base import DATASETS, DatasetNotFound, Split

IDX_IMAGES_MAGIC = 0x00000803  # unsigned byte, 3 dimensions
IDX_LABELS_MAGIC = 0x00000801  # unsigned byte, 1 dimension
APT_HINT = "apt-get install -y dataset-fashion-mnist"


# ---------------------------------------------------------------- generators of the on-disk formats

def idx_bytes(array: np.ndarray) -> bytes:
    magic = {3: IDX_IMAGES_MAGIC, 1: IDX_LABELS_MAGIC}[array.ndim]
    header = struct.pack(">I", magic) + struct.pack(">" + "I" * array.ndim, *array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_bytes(path: Path, raw: bytes, gz: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wb") as f:
            f.write(raw)
    else:
        path.write_bytes(raw)
    return path


def make_fmnist(d: Path, gz: bool, n_train: int = 12, n_test: int = 5, seed: int = 0) -> dict[str, np.ndarray]:
    """The four Fashion-MNIST IDX files in `d`; returns the arrays written."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, size=(n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, size=n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, size=(n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, size=n_test, dtype=np.uint8),
    }
    # make sure both ends of the byte range occur, so the [0, 1] scaling is checked at its ends
    arrays["train-images-idx3-ubyte"][0, 0, 0] = 0
    arrays["train-images-idx3-ubyte"][0, 0, 1] = 255
    for name, a in arrays.items():
        write_bytes(d / name, idx_bytes(a), gz)
    return arrays


CIFAR_BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


def cifar_pattern(n: int, offset: int) -> np.ndarray:
    """(n, 3072) uint8 with value (c*50 + h*3 + w + 7*i + offset) % 256 at c*1024 + h*32 + w of row i."""
    i = np.arange(n)[:, None, None, None]
    c = np.arange(3)[None, :, None, None]
    h = np.arange(32)[None, None, :, None]
    w = np.arange(32)[None, None, None, :]
    vals = (c * 50 + h * 3 + w + 7 * i + offset) % 256
    return vals.reshape(n, 3072).astype(np.uint8)


def make_cifar(root: Path, n_per_batch: int = 3, n_test: int = 4) -> dict[str, tuple[np.ndarray, list[int]]]:
    """torchvision's <root>/cifar-10-batches-py/ with tiny batches, pickled with protocol 2 like the originals."""
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    for b, name in enumerate(CIFAR_BATCHES):
        n = n_test if name == "test_batch" else n_per_batch
        x = cifar_pattern(n, offset=11 * b)
        labels = [int((3 * b + j) % 10) for j in range(n)]
        batch = {b"batch_label": name.encode(), b"labels": labels, b"data": x,
                 b"filenames": [f"img_{b}_{j}.png".encode() for j in range(n)]}
        with open(d / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
        out[name] = (x, labels)
    return out


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No copy of any dataset can be found: empty cwd and home, no FDA_DATA_DIR, no system directory."""
    work = tmp_path / "cwd"
    home = tmp_path / "home"
    work.mkdir()
    home.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("FDA_DATA_DIR", raising=False)
    monkeypatch.setattr(standard, "FMNIST_SYSTEM_DIR", str(tmp_path / "no-such-system-dir"))
    return tmp_path


def check_fmnist(split: Split, arrays: dict[str, np.ndarray]) -> None:
    xtr, ytr = arrays["train-images-idx3-ubyte"], arrays["train-labels-idx1-ubyte"]
    xte, yte = arrays["t10k-images-idx3-ubyte"], arrays["t10k-labels-idx1-ubyte"]
    assert split.x_train.shape == (len(xtr), 1, 28, 28)
    assert split.x_test.shape == (len(xte), 1, 28, 28)
    assert split.x_train.dtype == torch.float32 and split.x_test.dtype == torch.float32
    assert split.y_train.dtype == torch.int64 and split.y_test.dtype == torch.int64
    # exactly byte / 255
    assert torch.equal(split.x_train, torch.from_numpy(xtr.astype(np.float32) / 255.0).unsqueeze(1))
    assert torch.equal(split.x_test, torch.from_numpy(xte.astype(np.float32) / 255.0).unsqueeze(1))
    assert float(split.x_train.min()) == 0.0 and float(split.x_train.max()) == 1.0
    assert torch.equal(split.y_train, torch.from_numpy(ytr.astype(np.int64)))
    assert torch.equal(split.y_test, torch.from_numpy(yte.astype(np.int64)))
    assert split.num_classes == 10 and split.task == "classification" and split.domains == ()
    assert split.input_shape == (1, 28, 28)


# ---------------------------------------------------------------- Fashion-MNIST

def test_idx_writer_uses_the_standard_magic_numbers():
    raw = idx_bytes(np.zeros((2, 28, 28), np.uint8))
    assert raw[:4] == b"\x00\x00\x08\x03" and struct.unpack(">III", raw[4:16]) == (2, 28, 28)
    assert idx_bytes(np.zeros(2, np.uint8))[:8] == b"\x00\x00\x08\x01\x00\x00\x00\x02"


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_fmnist_from_data_dir(isolated, gz):
    d = isolated / "fm"
    arrays = make_fmnist(d, gz=gz)
    check_fmnist(data.load_fashion_mnist(data_dir=str(d)), arrays)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_fmnist_from_env_var(isolated, monkeypatch, gz):
    d = isolated / "env"
    arrays = make_fmnist(d, gz=gz, seed=1)
    monkeypatch.setenv("FDA_DATA_DIR", str(d))
    check_fmnist(data.load_fashion_mnist(), arrays)
    # and through the generic entry point
    check_fmnist(data.load("fashion-mnist"), arrays)


def test_fmnist_torchvision_layout(isolated):
    root = isolated / "tv"
    arrays = make_fmnist(root / "FashionMNIST" / "raw", gz=False, seed=2)
    check_fmnist(data.load_fashion_mnist(data_dir=str(root)), arrays)


def test_fmnist_fashion_mnist_subdir_of_env_root(isolated, monkeypatch):
    root = isolated / "envroot"
    arrays = make_fmnist(root / "fashion-mnist", gz=True, seed=3)
    monkeypatch.setenv("FDA_DATA_DIR", str(root))
    check_fmnist(data.load_fashion_mnist(), arrays)


def test_fmnist_data_dir_takes_precedence_over_env(isolated, monkeypatch):
    a = make_fmnist(isolated / "a", gz=False, seed=4, n_train=7)
    make_fmnist(isolated / "b", gz=False, seed=5, n_train=9)
    monkeypatch.setenv("FDA_DATA_DIR", str(isolated / "b"))
    check_fmnist(data.load_fashion_mnist(data_dir=str(isolated / "a")), a)


def test_fmnist_missing_names_searched_paths(isolated):
    empty = isolated / "empty"
    empty.mkdir()
    with pytest.raises(DatasetNotFound) as info:
        data.load_fashion_mnist()
    msg = str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert str(isolated / "no-such-system-dir") in msg
    assert str(isolated / "home" / ".cache" / "fda_ray") in msg
    assert APT_HINT in msg
    # a named directory is the only place searched: no silent fallback to another copy
    (isolated / "cwd" / "data").mkdir()
    make_fmnist(isolated / "cwd" / "data", gz=True)  # ./data, a default place, holds a copy
    assert data.load_fashion_mnist().num_classes == 10
    with pytest.raises(DatasetNotFound) as info:
        data.load_fashion_mnist(data_dir=str(empty))
    msg = str(info.value)
    assert f"data_dir={str(empty)!r}" in msg and "only the named directory is searched" in msg
    assert str(empty / "FashionMNIST" / "raw") in msg and "no-such-system-dir" not in msg and ".cache" not in msg
    assert APT_HINT in msg
    with pytest.raises(DatasetNotFound, match="no such directory"):
        data.load_fashion_mnist(data_dir=str(isolated / "typo"))


def test_fmnist_incomplete_copy_is_not_found(isolated):
    d = isolated / "partial"
    make_fmnist(d, gz=False)
    (d / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DatasetNotFound, match="searched"):
        data.load_fashion_mnist(data_dir=str(d))


def test_read_idx_bad_magic(tmp_path):
    raw = bytearray(idx_bytes(np.zeros((2, 28, 28), np.uint8)))
    raw[0] = 0x12  # not 0x0000 ....
    p = write_bytes(tmp_path / "bad-magic-idx3-ubyte", bytes(raw), gz=False)
    with pytest.raises(ValueError) as info:
        standard.read_idx(p)
    assert str(p) in str(info.value) and "magic" in str(info.value)


def test_read_idx_unsupported_type(tmp_path):
    raw = bytearray(idx_bytes(np.zeros((2, 28, 28), np.uint8)))
    raw[2] = 0x0D  # float
    p = write_bytes(tmp_path / "float-idx3-ubyte", bytes(raw), gz=False)
    with pytest.raises(ValueError, match="float-idx3-ubyte"):
        standard.read_idx(p)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_read_idx_truncated_body(tmp_path, gz):
    raw = idx_bytes(np.zeros((3, 28, 28), np.uint8))[:-10]
    p = write_bytes(tmp_path / "short-idx3-ubyte", raw, gz=gz)
    with pytest.raises(ValueError) as info:
        standard.read_idx(p)
    assert str(p) in str(info.value)


def test_read_idx_roundtrip(tmp_path):
    a = np.arange(2 * 28 * 28, dtype=np.int64).reshape(2, 28, 28).astype(np.uint8)
    p = write_bytes(tmp_path / "ok-idx3-ubyte", idx_bytes(a), gz=True)
    out = standard.read_idx(p)
    assert out.dtype == np.uint8 and out.shape == (2, 28, 28) and np.array_equal(out, a)


def test_read_idx_truncated_header(tmp_path):
    raw = idx_bytes(np.zeros((3, 28, 28), np.uint8))[:9]
    p = write_bytes(tmp_path / "short-header-idx3-ubyte", raw, gz=False)
    with pytest.raises(ValueError, match="short-header-idx3-ubyte"):
        standard.read_idx(p)


def test_fmnist_corrupt_file_named_by_loader(isolated):
    d = isolated / "corrupt"
    make_fmnist(d, gz=False)
    p = d / "train-labels-idx1-ubyte"
    p.write_bytes(p.read_bytes()[:-3])  # truncated body
    with pytest.raises(ValueError) as info:
        data.load_fashion_mnist(data_dir=str(d))
    assert str(p) in str(info.value)


# ---------------------------------------------------------------- CIFAR-10

def test_cifar_writer_matches_format(tmp_path):
    make_cifar(tmp_path)
    with open(tmp_path / "cifar-10-batches-py" / "data_batch_1", "rb") as f:
        raw = f.read()
    assert raw[:2] == b"\x80\x02"  # pickle protocol 2
    d = pickle.loads(raw, encoding="bytes")
    assert d[b"data"].shape == (3, 3072) and d[b"data"].dtype == np.uint8 and isinstance(d[b"labels"], list)


@pytest.mark.parametrize("via", ["data_dir", "env", "cifar10_subdir"])
def test_cifar10_loader(isolated, monkeypatch, via):
    root = isolated / "c"
    if via == "cifar10_subdir":
        written = make_cifar(root / "cifar10")
    else:
        written = make_cifar(root)
    if via == "data_dir":
        split = data.load_cifar10(data_dir=str(root))
    else:
        monkeypatch.setenv("FDA_DATA_DIR", str(root))
        split = data.load_cifar10()
    n_tr, n_te = 5 * 3, 4
    assert split.x_train.shape == (n_tr, 3, 32, 32) and split.x_test.shape == (n_te, 3, 32, 32)
    assert split.x_train.dtype == torch.float32 and split.y_train.dtype == torch.int64
    assert split.y_test.dtype == torch.int64 and split.num_classes == 10 and split.input_shape == (3, 32, 32)
    # labels in batch order, then test_batch
    ytr = [l for name in CIFAR_BATCHES[:5] for l in written[name][1]]
    assert split.y_train.tolist() == ytr
    assert split.y_test.tolist() == written["test_batch"][1]
    # channel layout: row-major 3072 = 3 x 32 x 32, value (c*50 + h*3 + w + 7*i + 11*b) % 256
    for (i, c, h, w) in [(0, 0, 0, 0), (0, 1, 0, 0), (0, 2, 5, 7), (1, 0, 31, 0), (2, 2, 31, 31), (0, 1, 3, 30)]:
        expected = (c * 50 + h * 3 + w + 7 * i) % 256  # batch 1: offset 0
        assert round(float(split.x_train[i, c, h, w]) * 255) == expected
    # the second batch starts at index 3 with offset 11
    assert round(float(split.x_train[3, 2, 1, 2]) * 255) == (2 * 50 + 3 + 2 + 11) % 256
    # the test batch (b = 5, offset 55)
    assert round(float(split.x_test[1, 1, 4, 9]) * 255) == (50 + 12 + 9 + 7 + 55) % 256
    # exactly byte / 255, whole tensors
    x1 = written["data_batch_1"][0].reshape(-1, 3, 32, 32).astype(np.float32) / 255.0
    assert torch.equal(split.x_train[:3], torch.from_numpy(x1))
    assert 0.0 <= float(split.x_train.min()) and float(split.x_train.max()) <= 1.0


def test_cifar10_missing_names_searched_paths(isolated):
    empty = isolated / "empty"
    empty.mkdir()
    with pytest.raises(DatasetNotFound) as info:
        data.load_cifar10(data_dir=str(empty))
    msg = str(info.value)
    assert str(empty / "cifar-10-batches-py") in msg
    assert str(empty / "cifar10" / "cifar-10-batches-py") in msg
    assert "only the named directory is searched" in msg
    with pytest.raises(DatasetNotFound) as info:
        data.load_cifar10()
    assert str(isolated / "home" / ".cache" / "fda_ray" / "cifar-10-batches-py") in str(info.value)


def test_cifar10_incomplete_copy_is_not_found(isolated):
    make_cifar(isolated / "c")
    (isolated / "c" / "cifar-10-batches-py" / "data_batch_4").unlink()
    with pytest.raises(DatasetNotFound):
        data.load_cifar10(data_dir=str(isolated / "c"))


# ---------------------------------------------------------------- synthetic

@pytest.fixture(scope="module")
def syn200():
    return data.synthetic_domains(seed=0, n=200)


@pytest.fixture(scope="module")
def syn_split():
    return synthetic.load_synthetic(n=200)


def test_synthetic_domains_shapes(syn200):
    assert len(syn200) == 9
    for x, y in syn200:
        assert x.shape == (200, 50) and y.shape == (200, 10)
        assert x.dtype == torch.float32 and y.dtype == torch.float32
        assert torch.isfinite(x).all() and torch.isfinite(y).all()
        assert float(y.std(dim=0).min()) > 1e-3  # every output varies over the samples


def test_synthetic_domains_reproducible():
    a = data.synthetic_domains(seed=3, n=20)
    b = data.synthetic_domains(seed=3, n=20)
    c = data.synthetic_domains(seed=4, n=20)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(a[0][0], c[0][0]) and not torch.equal(a[0][1], c[0][1])


def test_synthetic_domains_differ(syn200):
    """The authors' domain shift (synthetic_exp/generate_data.py): every domain labels the same inputs, its basis
    functions moved further from D_1's the larger its index; the ten outputs are ten different functions (the first
    build's were 0.97 correlated: one function ten times)."""
    x1, y1 = syn200[0]
    assert all(torch.equal(x, x1) for x, _ in syn200)
    gap = [float(((y - y1) ** 2).sum(1).mean()) for _, y in syn200]  # (9,) mean squared label difference to D_1
    assert gap[0] == 0 and 0 < gap[1] < gap[4] < gap[8]
    corr = torch.corrcoef(y1.T.double())  # (10, 10)
    off = corr[~torch.eye(10, dtype=torch.bool)]
    assert float(off.mean()) < 0.6  # 0.36 on these 200 samples, 0.10 on 5000


def test_load_synthetic(syn_split, syn200):
    s = syn_split
    assert s.task == "regression" and s.num_classes == 10
    assert s.x_train.shape == (160, 50) and s.y_train.shape == (160, 10)
    assert s.x_test.shape == (40, 50) and s.y_test.shape == (40, 10)
    assert len(s.domains) == 8
    assert all(x.shape == (200, 50) and y.shape == (200, 10) for x, y in s.domains)
    # D_1 is the target (train + test), D_2..D_9 the sources
    assert torch.equal(torch.cat([s.x_train, s.x_test]), syn200[0][0])
    assert torch.equal(s.domains[-1][1], syn200[8][1])


# ---------------------------------------------------------------- every registered dataset

def _tiny_fmnist(root: Path) -> Split:
    make_fmnist(root / "fm", gz=True)
    return DATASETS.get("fashion-mnist")(data_dir=str(root / "fm"))


def _tiny_cifar(root: Path) -> Split:
    make_cifar(root / "c")
    return DATASETS.get("cifar10")(data_dir=str(root / "c"))


def _tiny_synthetic(root: Path) -> Split:
    return DATASETS.get("synthetic")(n=30)


def _tiny_mnist_construction(name: str):
    def build(root: Path) -> Split:
        from test_domainbed import _mnist_tree

        return DATASETS.get(name)(data_dir=str(_mnist_tree(root / "mnist", 60, 30)))
    return build


def _tiny_fmnist_construction(name: str):
    def build(root: Path) -> Split:
        make_fmnist(root / "fm", gz=True)
        return DATASETS.get(name)(data_dir=str(root / "fm"))
    return build


def _tiny_folders(name: str):
    def build(root: Path) -> Split:
        from fda_ray.data.domainbed import FOLDER_DATASETS
        from test_domainbed import _folder_tree

        if name == "imagefolder":
            return DATASETS.get(name)(data_dir=str(_folder_tree(root / "mine", ["a", "b"], ["x", "y"], per=1)))
        lay = FOLDER_DATASETS[name]
        _folder_tree(root / lay.folder, list(lay.environments), ["c0", "c1"], per=1)
        return DATASETS.get(name)(data_dir=str(root))
    return build


def _tiny_conditions(root: Path) -> Split:
    make_fmnist(root / "fm", gz=True, n_train=1200, n_test=300)  # 150 images a class: the recipe, scaled down
    return DATASETS.get("fmnist-conditions")(data_dir=str(root / "fm"))


def _tiny_medical(name: str):
    def build(root: Path) -> Split:
        from test_medical_csv import _authors_tables, generic_table

        if name == "medical-csv":
            generic_table(root)
        else:
            _authors_tables(root, name)
        return DATASETS.get(name)(data_dir=str(root))
    return build


TINY_BUILDERS = {"fashion-mnist": _tiny_fmnist, "fmnist-conditions": _tiny_conditions,
                 **{n: _tiny_medical(n) for n in ("medical-csv", "chexpert", "mimic-cxr", "midrc")}, "cifar10": _tiny_cifar, "synthetic": _tiny_synthetic,
                 "mnist": _tiny_mnist_construction("mnist"),
                 "colored-mnist": _tiny_mnist_construction("colored-mnist"),
                 "rotated-mnist": _tiny_mnist_construction("rotated-mnist"),
                 "colored-fmnist": _tiny_fmnist_construction("colored-fmnist"),
                 "rotated-fmnist": _tiny_fmnist_construction("rotated-fmnist"),
                 "fmnist-5": _tiny_fmnist_construction("fmnist-5"),
                 **{n: _tiny_folders(n) for n in ("vlcs", "pacs", "office-home", "office31", "digit-five",
                                                  "terra-incognita", "domain-net", "imagefolder")}}


def test_every_tiny_builder_is_registered():
    assert set(TINY_BUILDERS) <= set(DATASETS.names())


@pytest.mark.parametrize("name", DATASETS.names())
def test_registered_dataset_smoke(isolated, name):
    if name not in TINY_BUILDERS:
        pytest.fail(f"dataset {name!r} is registered but tests/test_data.py has no tiny-data builder for it")
    s = TINY_BUILDERS[name](isolated)
    assert isinstance(s, Split)
    entry = DATASETS.get(name)  # registered once: its loader, the authors' settings, its environment count
    assert entry.defaults is not None and {"model", "partition", "lr_source", "batch_source"} <= set(entry.defaults)
    assert entry.environments is None or s.environments  # (fmnist-conditions has domains but no count: heldout_domain)
    if isinstance(entry.environments, int):  # a fixed count: what the loader gives
        assert entry.environments == len(s.environments)
    if s.environments:  # a DomainBed dataset (fda_ray.domainbed): one (x, y) per environment
        assert len(s.environments) == len(s.env_names) >= 2 and len(s.x_train) == 0
        tables = list(s.environments) + [t for t in s.env_tests if t is not None]
        assert not s.env_tests or len(s.env_tests) == len(s.environments)
        for x, y in tables:
            assert len(x) == len(y) > 0 and tuple(x[:2].shape[1:]) == s.input_shape
            assert x[:2].dtype == torch.float32 and torch.isfinite(x[:2]).all()
            main = y[:, 0] if s.aux_tasks else y  # Healthcare FDA's datasets: (main, auxiliary labels...)
            assert y.dtype == torch.int64 and int(main.min()) >= 0 and int(main.max()) < s.num_classes
            for k, (_, classes) in enumerate(s.aux_tasks, start=1):
                assert int(y[:, k].min()) >= -1 and int(y[:, k].max()) < classes
        return
    assert len(s.x_train) == len(s.y_train) > 0 and len(s.x_test) == len(s.y_test) > 0
    assert s.x_train.shape[1:] == s.x_test.shape[1:] == s.input_shape
    assert s.x_train.dtype == torch.float32 and torch.isfinite(s.x_train).all()
    if s.task == "classification":
        assert s.y_train.dtype == torch.int64
        assert int(s.y_train.min()) >= 0 and int(s.y_train.max()) < s.num_classes
        assert 0.0 <= float(s.x_train.min()) and float(s.x_train.max()) <= 1.0
    else:
        assert s.task == "regression" and s.y_train.shape[1] == s.num_classes


@pytest.mark.parametrize("name,dataset,what", [("cifar10", "CIFAR10", "CIFAR-10"),
                                               ("fashion-mnist", "FashionMNIST", "Fashion-MNIST")])
def test_a_download_that_fails_is_the_not_found_line_and_why(name, dataset, what, tmp_path, monkeypatch):
    """--download with no network: the usual not-found line (the paths searched, how to get the data) and why the
    download failed, not urllib's traceback."""
    import urllib.error

    import torchvision

    from fda_ray.data import load
    from fda_ray.data.base import DatasetNotFound

    def offline(*a, **k):
        raise urllib.error.URLError(OSError(-2, "Name or service not known"))

    monkeypatch.setattr(torchvision.datasets, dataset, offline)
    with pytest.raises(DatasetNotFound) as e:
        load(name, str(tmp_path / "data"), download=True)
    line = str(e.value)
    assert line.startswith(f"{what} not found in data_dir=") and "searched: " in line and "\n" not in line
    assert line.endswith("; --download failed (Name or service not known)")
