"""DomainBed (issue 17; docs/methods.md and docs/datasets.md): the constructions, the loaders on generated trees, the
leave-one-domain-out partition, the seeds' DomainBed settings, every method on them, and the grids."""
from __future__ import annotations

import hashlib
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import TEST_THREADS, write_idx
from fda_ray.core.config import RunConfig
from fda_ray.data.base import DatasetNotFound
from fda_ray.data import load
from fda_ray.data.domainbed import (COLORED_FLIP, colored_environments, load_pool, rotated_environments, seed_hash,
                                    split_indices)
from fda_ray.data.images import ImageFiles
from fda_ray.runtime.partitions import build_setting

# What each DomainBed grid's paper profile must set (docs/methods.md, DomainBed protocol), checked on every planned trial.
DOMAINBED_SETTINGS = {
    "domainbed-colored": dict(dataset="colored-mnist", lr_source=1e-3, lr_target=2e-4, batch_source=64,
                              target_fraction=0.001, warmup_rounds=2, model="mnist_cnn", num_sources=2),
    "domainbed-colored-beta": dict(dataset="colored-mnist", lr_source=1e-3, lr_target=2e-4, batch_source=64,
                                   target_fraction=0.001, warmup_rounds=2, model="mnist_cnn", num_sources=2),
    "domainbed-rotated": dict(dataset="rotated-mnist", lr_source=1e-3, lr_target=2e-4, batch_source=64,
                              target_fraction=0.01, warmup_rounds=2, model="mnist_cnn", num_sources=5),
    "domainbed-vlcs": dict(dataset="vlcs", lr_source=5e-5, lr_target=1e-5, batch_source=32, target_fraction=0.05,
                           warmup_rounds=2, model="resnet18", model_weights="imagenet", num_sources=3),
    "domainbed-terra": dict(dataset="terra-incognita", lr_source=5e-5, lr_target=1e-5, batch_source=32,
                            target_fraction=0.05, warmup_rounds=10, model="resnet18", model_weights="imagenet",
                            num_sources=3),
}

# The Fashion-MNIST twins: the same settings on the same construction of Fashion-MNIST's pool.
DOMAINBED_SETTINGS.update({f"{name}-fmnist": {**DOMAINBED_SETTINGS[name], "dataset": DOMAINBED_SETTINGS[name][
    "dataset"].replace("-mnist", "-fmnist")} for name in ("domainbed-colored", "domainbed-colored-beta",
                                                            "domainbed-rotated")})


# ---------------------------------------------------------------- DomainBed's split and seeds

def test_seed_hash_is_domainbeds_md5_of_the_tuple_text():
    # DomainBed misc.seed_hash: int(md5(str(args)).hexdigest(), 16) % 2**31; str((0, 1)) == "(0, 1)"
    assert seed_hash(0, 1) == int(hashlib.md5(b"(0, 1)").hexdigest(), 16) % 2 ** 31
    assert seed_hash(0, 1) != seed_hash(1, 0) and seed_hash(3, 2) == seed_hash(3, 2)


def test_split_indices_is_a_randomstate_shuffle_cut_in_two():
    first, rest = split_indices(10, 2, 7)
    keys = list(range(10))
    np.random.RandomState(7).shuffle(keys)
    assert first.tolist() == keys[:2] and rest.tolist() == keys[2:]
    with pytest.raises(ValueError):
        split_indices(3, 4, 0)


def _pool(n: int = 6000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 images whose first pixel row encodes their pool index (to trace them into the environments)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(1, 256, (n, 28, 28), generator=g, dtype=torch.uint8)
    x[:, 0, 0] = torch.arange(n) % 256
    x[:, 0, 1] = torch.arange(n) // 256
    return x, torch.randint(0, 10, (n,), generator=g)


def test_colored_environments_follow_domainbeds_recipe():
    images, labels = _pool()
    envs = colored_environments(images, labels, seed=0)
    assert [len(y) for _, y in envs] == [2000, 2000, 2000]
    # the environments are disjoint slices of one permutation of the pool: every image in exactly one
    ids = [(x.amax(1)[:, 0, 0] * 255).round().long() + 256 * (x.amax(1)[:, 0, 1] * 255).round().long() for x, _ in envs]
    assert sorted(torch.cat(ids).tolist()) == list(range(6000))
    shuffle = torch.randperm(6000, generator=torch.Generator().manual_seed(0))
    assert torch.equal(ids[1], shuffle[1::3])
    for (x, y), p, idx in zip(envs, COLORED_FLIP, ids):
        assert x.shape[1:] == (2, 28, 28) and x.min() >= 0 and x.max() <= 1
        # exactly one channel kept, and it is the image
        kept = (x.flatten(2).amax(2) > 0).long()  # (n, 2)
        assert torch.equal(kept.sum(1), torch.ones(len(x), dtype=torch.long))
        colour = kept[:, 1]  # channel 1 kept <=> colour 1 (channel 1 - colour is zeroed)
        assert torch.allclose(x.amax(1), images[idx].float() / 255)
        # binary label 1[class < 5] flipped with probability 0.25; colour = label flipped with probability p
        clean = (labels[idx] < 5).long()
        n = len(y)
        tol = 4 * math.sqrt(0.25 * 0.75 / n)  # 4 standard errors
        assert abs((clean != y).double().mean() - 0.25) < tol
        assert abs((colour != y).double().mean() - p) < 4 * math.sqrt(p * (1 - p) / n)


def test_rotated_environments_rotate_disjoint_slices():
    from torchvision import transforms
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.functional import rotate

    images, labels = _pool(600)
    envs = rotated_environments(images, labels, seed=0)
    shuffle = torch.randperm(600, generator=torch.Generator().manual_seed(0))
    assert [len(y) for _, y in envs] == [100] * 6
    assert torch.equal(envs[0][0], images[shuffle[0::6]].unsqueeze(1).float() / 255)  # 0 degrees: the images
    # DomainBed's rotate_dataset: ToPILImage, rotate(angle, fill=(0,), BILINEAR), ToTensor, image by image
    domainbed = transforms.Compose([transforms.ToPILImage(), transforms.Lambda(
        lambda im: rotate(im, 45, fill=(0,), interpolation=InterpolationMode.BILINEAR)), transforms.ToTensor()])
    want = torch.stack([domainbed(im) for im in images[shuffle[3::6]]])
    assert torch.equal(envs[3][0], want) and torch.equal(envs[3][1], labels[shuffle[3::6]])
    assert not torch.equal(envs[3][0], envs[0][0])


def test_environment_seed_trial_builds_the_environments_from_the_trial_seed(tmp_path, monkeypatch):
    """environment_seed "trial": the loader gets the trial's seed as its construction seed (DomainBed's --seed); the
    default keeps DomainBed's seed 0 for every trial, and the trial keys recorded before the option existed."""
    import fda_ray.runtime.experiment as ex
    from fda_ray.experiments.records import trial_key
    from fda_ray.core.config import RunConfig

    root = _mnist_tree(tmp_path / "data")
    images, labels = load_pool("mnist", str(root))
    for seed in (0, 3):
        built = load("colored-mnist", str(root), construction_seed=seed).environments
        want = colored_environments(images, labels, seed=seed)
        assert all(torch.equal(x, wx) and torch.equal(y, wy) for (x, y), (wx, wy) in zip(built, want))
    asked: list[dict] = []
    real = ex.load_dataset
    monkeypatch.setattr(ex, "load_dataset", lambda *a, **kw: asked.append(kw) or real(*a, **kw))
    base = dict(dataset="colored-mnist", data_dir=str(root), method="target_only", rounds=1, test_samples=50,
                samples_per_client=50, seed=3, threads=1, target_fraction=0.05)
    ex.build_experiment(RunConfig(**base, environment_seed="trial"))
    ex.build_experiment(RunConfig(**base))
    assert asked == [{"construction_seed": 3}, {}]
    assert trial_key("r", "noise", 0.0, 0, {"dataset": "colored-mnist"}) == \
        trial_key("r", "noise", 0.0, 0, {"dataset": "colored-mnist", "environment_seed": "domainbed"}) != \
        trial_key("r", "noise", 0.0, 0, {"dataset": "colored-mnist", "environment_seed": "trial"})
    with pytest.raises(ValueError, match="environment_seed='trial' is invalid: trial only for the datasets built"):
        RunConfig(dataset="fashion-mnist", environment_seed="trial")


# ---------------------------------------------------------------- loaders

def _mnist_tree(root: Path, n_train: int = 900, n_test: int = 300) -> Path:
    raw = root / "MNIST" / "raw"  # torchvision's layout, as DomainBed's download script leaves it
    raw.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)).astype(np.uint8))
        write_idx(raw / f"{prefix}-labels-idx1-ubyte.gz", rng.integers(0, 10, n).astype(np.uint8))
    return root


def test_colored_and_rotated_mnist_read_torchvisions_mnist_layout(tmp_path):
    root = _mnist_tree(tmp_path / "data")
    c = load("colored-mnist", str(root))
    assert c.env_names == ("+90%", "+80%", "-90%") and c.num_classes == 2
    assert [len(y) for _, y in c.environments] == [400, 400, 400] and c.input_shape == (2, 28, 28)
    r = load("rotated-mnist", str(root))
    assert r.env_names == ("0", "15", "30", "45", "60", "75") and r.input_shape == (1, 28, 28)
    with pytest.raises(DatasetNotFound, match=r"MNIST not found in data_dir=.*searched: .*MNIST/raw"):
        load("colored-mnist", str(tmp_path / "empty"))
    # DomainBed's download script: torchvision's MNIST(<data_dir>/MNIST) writes <data_dir>/MNIST/MNIST/raw
    _mnist_tree(tmp_path / "domainbed" / "MNIST")
    d = load("colored-mnist", str(tmp_path / "domainbed"))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(d.environments, c.environments))


def test_a_cut_short_image_is_read_as_domainbed_reads_it_with_one_warning(tmp_path):
    """DomainBed sets PIL's LOAD_TRUNCATED_IMAGES, so a cut-short JPEG trains there; here it reads the same way, with
    one warning naming the file (once, though a file is read every epoch); a file that is no image stays refused."""
    from PIL import Image, ImageFile

    from fda_ray.core.notices import RunWarning
    from fda_ray.data.images import ImageFileError, _pil_loader

    path = tmp_path / "cut.jpg"
    pixels = np.random.default_rng(0).integers(0, 256, (128, 128, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, quality=95)
    whole = np.asarray(_pil_loader(str(path)), dtype=np.float64)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # the headers whole, half the scan
    with pytest.warns(RunWarning, match=r"image '.*cut.jpg' is cut short; read as DomainBed reads it") as seen:
        cut = np.asarray(_pil_loader(str(path)), dtype=np.float64)
        _pil_loader(str(path))
    assert len(seen) == 1 and cut.shape == whole.shape and ImageFile.LOAD_TRUNCATED_IMAGES is False
    assert np.array_equal(cut[:8], whole[:8]) and not np.array_equal(cut[-8:], whole[-8:])  # the top was read
    (tmp_path / "no.jpg").write_bytes(b"not an image")
    with pytest.raises(ImageFileError, match="not an image PIL can read"):
        _pil_loader(str(tmp_path / "no.jpg"))
    (tmp_path / "head.jpg").write_bytes(data[:100])  # cut inside its headers: no image to read, as in DomainBed
    with pytest.raises(ImageFileError, match=r"head.jpg' is invalid: cut short"):
        _pil_loader(str(tmp_path / "head.jpg"))


def _png(path: Path, colour: tuple[int, int, int], size: int = 12) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (size, size + 3), colour).save(path)


def _folder_tree(root: Path, envs: list[str], classes: list[str], per: int = 3) -> Path:
    for e, env in enumerate(envs):
        for c, cls in enumerate(classes):
            for i in range(per):
                _png(root / env / cls / f"img{i}.png", (40 * e + 20, 60 * c + 10, 10 * i + 5))
    return root


@pytest.fixture(scope="module")
def vlcs_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("domainbed")
    # written in an order unlike the sorted one: DomainBed's index is the sorted folder order
    _folder_tree(root / "VLCS", ["VOC2007", "SUN09", "LabelMe", "Caltech101"], ["person", "bird", "car"], per=5)
    return root


def test_vlcs_environments_are_the_sorted_folders(vlcs_root):
    s = load("vlcs", str(vlcs_root))
    assert s.env_names == ("C", "L", "S", "V") and s.num_classes == 3 and s.input_shape == (3, 224, 224)
    x, y = s.environments[2]  # SUN09, not VOC2007 (DomainBed's sorted folder order)
    assert isinstance(x, ImageFiles) and all("/SUN09/" in p for p in x.paths)
    assert y.tolist() == [0] * 5 + [1] * 5 + [2] * 5  # classes sorted: bird, car, person
    img = x[0]  # bird img0 of SUN09 (written second, class written second): colour (60, 70, 5), normalised
    assert img.shape == (3, 224, 224)
    want = (torch.tensor([60, 70, 5]) / 255 - torch.tensor([0.485, 0.456, 0.406])) / torch.tensor([0.229, 0.224, 0.225])
    assert torch.allclose(img[:, 100, 100], want, atol=1e-5)
    assert x[1:3].shape == (2, 3, 224, 224) and torch.equal(x[torch.tensor([0])][0], img)


def test_augmented_reads_are_seeded_and_evaluation_reads_are_not_augmented(vlcs_root):
    x, _ = load("vlcs", str(vlcs_root)).environments[0]
    aug = x.subset([0, 4, 7]).to("cpu")
    aug = type(aug)(aug.paths, augment=True)
    a = aug.read(torch.tensor([0, 1, 2]), torch.Generator().manual_seed(5))
    b = aug.read(torch.tensor([0, 1, 2]), torch.Generator().manual_seed(5))
    c = aug.read(torch.tensor([0, 1, 2]), torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    plain = aug[[0, 1, 2]]  # indexing is the evaluation transform
    assert torch.equal(plain, x[[0, 4, 7]]) and not torch.equal(plain, a)


def test_class_folders_spelled_in_other_code_points_are_named_apart(tmp_path):
    """"café" composed (NFC, U+00E9) and decomposed (NFD, e + U+0301) print alike: in one environment they were two
    classes no table could tell apart, across environments the mismatch line named a class "missing" that the
    other environment visibly has. Both are now one line that spells each with its code points."""
    import unicodedata

    nfc, nfd = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
    assert nfc != nfd and str(nfc) == "café"
    _folder_tree(tmp_path / "VLCS", ["Caltech101", "LabelMe", "SUN09", "VOC2007"], ["bird", nfc], per=1)
    _folder_tree(tmp_path / "VLCS", ["VOC2007"], [nfd], per=1)  # VOC2007 now holds both spellings
    with pytest.raises(DatasetNotFound, match=r"in environment 'VOC2007' .* class folders 'cafe\\u0301' and "
                                              r"'caf\\xe9' print alike"):
        load("vlcs", str(tmp_path))
    import shutil

    shutil.rmtree(tmp_path / "VLCS" / "VOC2007" / nfc)  # VOC2007: the decomposed spelling only
    with pytest.raises(DatasetNotFound, match=r"class 'cafe\\u0301' is 'caf\\xe9' in 'Caltech101': they print "
                                              r"alike .* \(composed and decomposed accents"):
        load("vlcs", str(tmp_path))


def test_folder_loaders_name_what_is_missing(tmp_path):
    _folder_tree(tmp_path / "VLCS", ["Caltech101", "LabelMe", "VOC2007"], ["bird", "car"], per=1)
    with pytest.raises(DatasetNotFound, match=r"vlcs: environment folder 'SUN09' is missing in .*VLCS"):
        load("vlcs", str(tmp_path))
    _folder_tree(tmp_path / "VLCS", ["SUN09"], ["bird"], per=1)
    with pytest.raises(DatasetNotFound, match=r"in environment 'SUN09' .* class 'car' is missing"):
        load("vlcs", str(tmp_path))
    with pytest.raises(DatasetNotFound, match=r"PACS \(pacs\) not found in data_dir=.*searched: .*PACS.*"
                                              r"Put DomainBed's PACS/ folder"):
        load("pacs", str(tmp_path))
    with pytest.raises(DatasetNotFound, match=r"Put the digit_five/ folder") as e:  # not one of DomainBed's
        load("digit-five", str(tmp_path))
    assert "DomainBed" not in str(e.value)
    (tmp_path / "mnist" / "raw").mkdir(parents=True)  # MNIST's own folder is not Digit-Five's root
    with pytest.raises(DatasetNotFound, match=r"digit_five \(digit-five\) not found"):
        load("digit-five", str(tmp_path))
    # Office-Home's "Real World" folder has a space
    _folder_tree(tmp_path / "office_home", ["Art", "Clipart", "Product", "Real World"], ["Alarm_Clock", "Bike"], per=1)
    s = load("office-home", str(tmp_path))
    assert s.env_names == ("A", "C", "P", "R") and "/Real World/" in s.environments[3][0].paths[0]


def test_generic_imagefolder(tmp_path):
    _folder_tree(tmp_path / "mine", ["winter", "autumn", "summer"], ["a", "b"], per=2)
    s = load("imagefolder", str(tmp_path / "mine"))
    assert s.env_names == ("autumn", "summer", "winter") and s.num_classes == 2
    cfg = RunConfig(dataset="imagefolder", data_dir=str(tmp_path / "mine"), model="simple_cnn").resolved()
    assert cfg.num_sources == 2 and cfg.partition == "domainbed" and cfg.model_weights is None
    with pytest.raises(DatasetNotFound, match="imagefolder needs --data-dir"):
        load("imagefolder", None)


def test_a_relative_data_dir_gives_absolute_image_paths(tmp_path, monkeypatch):
    """Images are read where a batch is drawn: an actor on another node, whose working directory is not the
    command's. A relative --data-dir's files are named absolutely, as the command meant them."""
    _folder_tree(tmp_path / "mine", ["winter", "autumn"], ["a", "b"], per=1)
    _folder_tree(tmp_path / "VLCS", ["Caltech101", "LabelMe", "SUN09", "VOC2007"], ["bird", "car"], per=1)
    monkeypatch.chdir(tmp_path)
    for name, data_dir in (("imagefolder", "mine"), ("vlcs", "."), ("vlcs", "VLCS")):
        paths = [p for x, _ in load(name, data_dir).environments for p in x.paths]
        assert paths and all(Path(p).is_absolute() and Path(p).is_file() for p in paths), (name, data_dir)


def test_hidden_files_and_folders_are_no_domain_class_or_image(tmp_path):
    """A copy unzipped from a Mac holds __MACOSX/ and a ._name AppleDouble file beside each image (not images: a
    batch that drew one stopped the run); a notebook leaves .ipynb_checkpoints/ anywhere. None is a domain, a class
    or an image; the images and their labels are those of the clean tree."""
    clean = _folder_tree(tmp_path / "clean", ["winter", "autumn"], ["a", "b"], per=2)
    mac = _folder_tree(tmp_path / "mac", ["winter", "autumn"], ["a", "b"], per=2)
    (mac / "__MACOSX" / "winter").mkdir(parents=True)
    (mac / ".ipynb_checkpoints").mkdir()
    (mac / "autumn" / ".ipynb_checkpoints").mkdir()
    (mac / "autumn" / "a" / ".thumbs").mkdir()
    _png(mac / "autumn" / "a" / ".thumbs" / "x.png", (1, 2, 3))
    for img in list(mac.glob("*/*/img*.png")):
        (img.parent / f"._{img.name}").write_bytes(b"\x00\x05\x16\x07")  # AppleDouble's magic, not an image
    want, got = load("imagefolder", str(clean)), load("imagefolder", str(mac))
    assert got.env_names == want.env_names == ("autumn", "winter") and got.num_classes == 2
    for (x, y), (wx, wy) in zip(got.environments, want.environments):
        assert [p.replace("/mac/", "/clean/") for p in x.paths] == list(wx.paths) and torch.equal(y, wy)
    assert RunConfig(dataset="imagefolder", data_dir=str(mac), model="simple_cnn").resolved().num_sources == 1


def test_a_link_that_loops_back_is_not_followed_and_linked_folders_are(tmp_path):
    """A class folder holding `up -> ..` (a loop) read every other class's images as its own; a link to a folder
    elsewhere (a class kept on another disk) is read as torchvision reads it."""
    root = _folder_tree(tmp_path / "t", ["winter", "autumn"], ["a", "b"], per=2)
    (root / "autumn" / "a" / "up").symlink_to("..")
    elsewhere = _folder_tree(tmp_path / "disk2", ["x"], ["more"], per=1) / "x" / "more"
    (root / "winter" / "b" / "more").symlink_to(elsewhere)
    (x_autumn, y_autumn), (x_winter, y_winter) = load("imagefolder", str(root)).environments
    assert len(x_autumn) == 4 and y_autumn.tolist() == [0, 0, 1, 1]
    assert len(x_winter) == 5 and x_winter.paths[-1].endswith("/winter/b/more/img0.png")


@pytest.mark.parametrize("domains", [0, 1])
def test_an_imagefolder_of_fewer_than_two_domains_is_the_loaders_line_not_a_source_count(tmp_path, domains):
    """Its config counts the sources as the domains less one: "num_sources=-1 is invalid" named neither the dataset
    nor the folder."""
    root = _folder_tree(tmp_path / "one", ["photo"][:domains], ["a", "b"], per=1)
    root.mkdir(exist_ok=True)
    with pytest.raises(DatasetNotFound, match=rf"^imagefolder: .*one holds {domains} domain folder\(s\) "
                                              r"\((photo|none)\); leave-one-domain-out needs at least 2"):
        RunConfig(dataset="imagefolder", data_dir=str(root), model="simple_cnn").resolved()


# ---------------------------------------------------------------- the protocol

@pytest.fixture
def colored(fmnist_dir):
    def make(**kw) -> RunConfig:
        base = dict(dataset="colored-fmnist", data_dir=str(fmnist_dir), rounds=1, warmup_rounds=1,
                    target_fraction=0.05, samples_per_client=96, test_samples=64, threads=TEST_THREADS)
        base.update(kw)
        return RunConfig(**base)
    return make


def test_paper_settings_per_dataset_and_held_out_environment():
    for env, factor in enumerate((0.1, 0.5, 0.25)):  # Auto-weighted FDA App. C.3: +90 %, +80 %, -90 %
        cfg = RunConfig(dataset="colored-fmnist", method="fedgp_auto", test_env=env).resolved()
        assert (cfg.auto_lr_factor, cfg.batch_target, cfg.auto_beta_rule) == (factor, 2, "fedgp")
    cfg = RunConfig(dataset="colored-fmnist", method="fedgp").resolved()
    assert (cfg.batch_target, cfg.shuffle, cfg.drop_last, cfg.model, cfg.model_weights) == (16, False, False,
                                                                                          "mnist_cnn", None)
    terra = RunConfig(dataset="terra-incognita", method="fedda_auto", test_env=3).resolved()
    assert (terra.warmup_rounds, terra.batch_target, terra.auto_lr_factor, terra.lr_target) == (10, 8, 0.25, 1e-5)
    assert RunConfig(dataset="pacs").resolved().target_fraction == 0.15
    assert RunConfig(dataset="vlcs", method="fedavg_all").resolved().warmup_rounds == 0  # personalised: none
    oracle = RunConfig(dataset="colored-fmnist", method="oracle").resolved()
    assert (oracle.warmup_rounds, oracle.lr_target, oracle.batch_target) == (0, 1e-3 / 4, 64)  # the authors: lr / 4
    # the Fashion-MNIST grids keep their loaders
    fm = RunConfig().resolved()
    assert (fm.shuffle, fm.drop_last, fm.data_augmentation, fm.warmup_rounds) == (True, True, False, 2)


def test_leave_one_domain_out_split(colored):
    cfg = colored(test_env=1, samples_per_client=None, test_samples=None).resolved()
    split = load(cfg.dataset, cfg.data_dir)
    s = build_setting(split, cfg.resolved())
    n = [len(y) for _, y in split.environments]  # 500 each (1500 pooled images)
    out1, in1 = split_indices(n[1], int(0.2 * n[1]), seed_hash(cfg.seed, 1))
    uda, _ = split_indices(len(in1), int(0.05 * len(in1)), seed_hash(cfg.seed, 1))
    x1, y1 = split.environments[1]
    assert torch.equal(s.target_test[0], x1[torch.from_numpy(out1)])  # the test set: env 1's 20 % out-split
    assert torch.equal(s.target_train[0], x1[torch.from_numpy(in1[uda])]) and len(s.target_train[0]) == 20
    assert torch.equal(s.target_pool[0], x1[torch.from_numpy(in1)])  # the oracle's data: env 1's in-split
    # sources: env 0 and env 2 in index order, their 80 % in-splits
    for (sx, sy), e in zip(s.sources, (0, 2)):
        _, in_e = split_indices(n[e], int(0.2 * n[e]), seed_hash(cfg.seed, e))
        assert torch.equal(sx, split.environments[e][0][torch.from_numpy(in_e)])
    # another trial seed draws other splits of the same environments
    other = build_setting(split, cfg.replace(seed=1).resolved())
    assert not torch.equal(other.target_test[0], s.target_test[0])
    # ColoredMNIST's size: 0.1 % of an in-split of 18 667 images is 18 labelled images (docs/methods.md, DomainBed protocol)
    assert int(18667 * 0.001) == 18
    # training-domain validation (model selection): a share of the sources' out-splits, their in-splits untouched
    held = build_setting(split, cfg.replace(source_val_share=0.5).resolved())
    for (hx, _), (sx, _) in zip(held.sources, s.sources):
        assert torch.equal(hx, sx)
    outs = torch.cat([split.environments[e][0][torch.from_numpy(split_indices(n[e], int(0.2 * n[e]),
                                                                              seed_hash(cfg.seed, e))[0])]
                      for e in (0, 2)])
    flat = lambda t: {bytes(r.numpy().tobytes()) for r in t}  # noqa: E731
    assert flat(held.source_val[0]) <= flat(outs) and len(held.source_val[1]) == sum(round(0.5 * int(0.2 * n[e]))
                                                                                      for e in (0, 2))


def test_bad_environment_choices_are_one_line_errors(colored):
    split = load("colored-fmnist", colored().data_dir)
    with pytest.raises(ValueError, match=r"test_env=3 is invalid: .* environments 0 \+90%, 1 \+80%, 2 -90%"):
        build_setting(split, colored(test_env=3).resolved())
    with pytest.raises(ValueError, match="num_sources=1 is invalid: holding out one of .* leaves 2 sources"):
        build_setting(split, colored(num_sources=1).resolved())
    with pytest.raises(ValueError, match=r"target_fraction=0.001 is invalid: it labels 400 x 0.001 < 1 sample"):
        build_setting(split, colored(target_fraction=None).resolved())
    with pytest.raises(ValueError, match=r"partition='homo' is invalid for dataset 'colored-fmnist': .* use "
                                         r"partition 'domainbed'"):
        build_setting(split, colored(partition="homo", target_fraction=None, target_labelled=5).resolved())
    with pytest.raises(ValueError, match="test_env=-1 is invalid"):
        RunConfig(dataset="colored-fmnist", test_env=-1)
    with pytest.raises(ValueError, match="partition='domainbed' is invalid for dataset 'fashion-mnist'"):
        build_setting(load("fashion-mnist", colored().data_dir), colored(dataset="fashion-mnist",
                                                                         partition="domainbed").resolved())


def test_pretrained_model_without_its_weights_file_is_one_line(vlcs_root, monkeypatch, tmp_path):
    from fda_ray.runtime.experiment import build_experiment

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    with pytest.raises(ValueError, match=r"model_weights='imagenet' is invalid: torchvision's cache file "
                                         r".*resnet18-f37072fd.pth is absent; .*--model-weights PATH") as e:
        build_experiment(RunConfig(dataset="vlcs", data_dir=str(vlcs_root)))
    assert "\n" not in str(e.value)


def test_unshuffled_loaders_keep_the_last_partial_batch(colored):
    from fda_ray.runtime.experiment import build_experiment

    exp = build_experiment(colored(method="fedgp", samples_per_client=100))
    src = exp.clients[0]
    assert not src.shuffle and not src.drop_last and src.steps_per_epoch(64) == 2  # 64 + 36
    batches = list(src.batches(64, 0, "train"))
    assert [len(b[1]) for b in batches] == [64, 36]
    assert torch.equal(torch.cat([b[0] for b in batches]), exp.setting.sources[0][0])  # the stored order
    assert exp.algorithm.src_steps.tolist() == [2.0, 2.0]  # the alignment counts the partial batch


@pytest.mark.slow  # (5-26 s: the fast tier stays within 8 minutes on 2 cores)
def test_vlcs_run_on_generated_images(vlcs_root, tmp_path):
    """One round of FedGP on the generated VLCS tree with a (random) local ResNet-18 file: image files are read,
    the sources' reads augmented, the pretrained BatchNorm statistics unchanged by training."""
    import torchvision

    from fda_ray.runtime.engine import run

    torch.manual_seed(0)
    weights = tmp_path / "resnet18.pth"
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), weights)
    cfg = RunConfig(dataset="vlcs", data_dir=str(vlcs_root), method="fedgp", model_weights=str(weights),
                    test_env=2, rounds=1, warmup_rounds=0, target_fraction=0.25, batch_source=8, batch_target=2,
                    threads=TEST_THREADS)
    hist = run(cfg)
    assert len(hist.rows) == 1 and 0 <= hist.rows[0]["accuracy"] <= 1
    from fda_ray.runtime.experiment import build_experiment

    exp = build_experiment(cfg)
    assert [x.augment for x, _ in exp.setting.sources] == [True, True, True]
    assert not exp.setting.target_train[0].augment and len(exp.setting.target_test[1]) == 3  # 20 % of 15
    state = torch.load(weights)
    w = hist.final_weights
    for name in ("bn1.running_mean", "layer2.0.bn1.running_var"):
        assert torch.equal(w[exp.layout.layer_of(name)], state[name].reshape(-1))


# ---------------------------------------------------------------- every method

def _every_method(colored, name: str, **kw) -> RunConfig:
    """One round of `name` leave-one-domain-out on the tiny ColoredFMNIST, in the settings its family needs."""
    from fda_ray.algorithms import ALGORITHMS

    family = ALGORITHMS.get(name).family
    # (the personalised baselines have no warm-up; Healthcare FDA's methods: ColoredMNIST has no auxiliary labels,
    # so the AuxInfo ones run at alpha 0; FSSDA's split the environments over devices instead of holding one out)
    extra = {"partition": "domain_shards", "num_sources": 2, "target_fraction": None,
             "params": {"fssda": {"serial_source_rounds": 1}}} if family == "fssda" else {}
    if family == "fedwca":  # FedWCA: one source domain, clients of the others
        extra = {"partition": "domain_clients", "clients_per_domain": 2, "source_envs": (0,), "model": "shot_lenet",
                 "target_fraction": None, "params": {"fedwca": {"source_epochs": 1, "local_epochs": 1}}}
    return colored(method=name, test_env=2, finetune_epochs=1, warmup_rounds=1 if family == "fda" else None,
                   aux_alpha=0.0 if family == "healthcare" else None, **extra, **kw)


@pytest.mark.slow  # (5-26 s: the fast tier stays within 8 minutes on 2 cores)
def test_every_registered_method_runs_leave_one_domain_out(colored):
    from fda_ray.algorithms import ALGORITHMS
    from fda_ray.runtime.engine import run

    finals = {}
    for name in ALGORITHMS.names():  # (32 images a client and for the test: one batch; every method still trains)
        hist = run(_every_method(colored, name, samples_per_client=32, test_samples=32))
        assert hist.rows and all(0 <= r["accuracy"] <= 1 for r in hist.rows), name
        finals[name] = hist.final_weights
    # Auto-weighted FDA's "FedAvg" has the target as a client: not the sources' FedAvg (FedGP's "FedAvg" = source_only)
    assert not torch.equal(finals["fedavg_all"], finals["source_only"])
    assert len(ALGORITHMS.names()) == 25


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: run on a GPU machine (pytest -m gpu)")
def test_every_registered_method_runs_on_cuda(colored):
    """--device cuda for every method: the clients' state crosses to the driver on the CPU while the server state is
    on the GPU (APFL's and FedRep's evaluation mixed the two and failed on an H200 before Evaluator.client_state moved
    it); each run gives the CPU run's rounds, with accuracies in [0, 1]."""
    from fda_ray.algorithms import ALGORITHMS
    from fda_ray.runtime.engine import run

    for name in ALGORITHMS.names():
        cpu, gpu = run(_every_method(colored, name)), run(_every_method(colored, name, device="cuda"))
        assert [r["round"] for r in gpu.rows] == [r["round"] for r in cpu.rows], name
        assert all(0 <= r["accuracy"] <= 1 for r in gpu.rows), name


def test_the_evaluator_hands_client_state_over_on_its_models_device():
    """A client's state comes back on the CPU; the evaluator gives it on the device its model (and the server
    state) is on. The meta device stands in for a GPU here: without the move the tensor stays on the CPU."""
    from types import SimpleNamespace

    from torch import nn

    from fda_ray.train.evaluation import Evaluator

    built = SimpleNamespace(cfg=None, setting=None, layout=None, target_index=0, model=nn.Linear(2, 2, device="meta"))
    ev = Evaluator(built, client_state=lambda k: {"personal": torch.ones(3) * k, "rounds": 4})
    got = ev.client_state(2)
    assert got["personal"].device.type == "meta" and got["personal"].shape == (3,)
    assert got["rounds"] == 4
    with pytest.raises(RuntimeError, match="reads no client states"):
        Evaluator(built).client_state(0)


def test_fedavg_all_weighs_the_target_by_its_samples(colored):
    """fedavg_all after one round = sum_k n_k w_k / sum n over sources and the target (plain arithmetic)."""
    from fda_ray.runtime.engine import run

    cfg = colored(method="fedavg_all", rounds=1, warmup_rounds=None)
    from fda_ray.runtime.experiment import build_experiment
    from fda_ray.runtime.executors import SerialExecutor

    exp = build_experiment(cfg)
    w0 = exp.initial_weights()
    ex = SerialExecutor(exp.clients)
    plan = exp.algorithm.plan_round(0, {"global": w0})
    res = {r.client: r for r in ex.collect(ex.submit({"global": w0}, plan.tasks))}
    n = torch.tensor([float(res[k].scalars["num_samples"]) for k in sorted(res)], dtype=torch.float64)
    deltas = torch.stack([res[k].tensors["delta"] for k in sorted(res)]).double()
    want = w0.double() + (n / n.sum()) @ deltas
    got = run(cfg).final_weights.double()
    # float32 sums of 3 deltas: a few ulps of the largest weight
    assert torch.allclose(got, want, atol=1e-5 * float(w0.abs().max()), rtol=0)
    assert n.tolist() == [96.0, 96.0, 20.0]


# ---------------------------------------------------------------- grids and metrics

def row_is_auto(row: str) -> bool:
    return row in ("fedda_auto", "fedgp_auto")


@pytest.mark.parametrize("name", sorted(DOMAINBED_SETTINGS))
def test_domainbed_grids_plan_the_papers_settings(name):
    from fda_ray.experiments.trials import plan
    from fda_ray.papers.grids import GRIDS, PERSONALISED_ROW_KEYS

    grid = GRIDS[name]
    trials = plan(grid, "paper")
    want = {(r.key, v, s) for r in grid.rows for v in grid.values for s in range(grid.seeds_for(v))}
    assert {(t.row, t.value, t.seed) for t in trials} == want and len({t.key for t in trials}) == len(trials)
    for t in trials:
        cfg = t.config().resolved()
        personalised = t.row in PERSONALISED_ROW_KEYS
        expect = dict(DOMAINBED_SETTINGS[name])
        if personalised or t.row == "target_only":  # no warm-up: docs/authors-code.md; the authors' static script
            expect["warmup_rounds"] = 0
        if t.row == "oracle":
            # the authors' oracle_domain_bed.py trains in its target phase, at hparams["lr"] / 4
            expect.update(warmup_rounds=0, lr_target=expect["lr_source"] / 4)
        for field, value in expect.items():
            assert getattr(cfg, field) == value, (t.key, field)
        assert cfg.partition == "domainbed" and cfg.samples_per_client is None and cfg.test_samples is None
        assert cfg.rounds == (150 if personalised else 50)
        assert cfg.faithful_domainbed_auto == row_is_auto(t.row) and cfg.auto_beta_rule == "fedgp"
        assert float(getattr(cfg, grid.variable)) == t.value
    if grid.variable == "test_env":
        algorithms = __import__("fda_ray.algorithms", fromlist=["x"]).ALGORITHMS
        other_seeds = ("healthcare", "fssda", "fedwca")  # every method of FedGP/Auto-weighted FDA, none of Healthcare FDA's, FSSDA's, FedWCA's
        assert {r.method for r in grid.rows} == {m for m in algorithms.names()
                                                 if algorithms.get(m).family not in other_seeds}
        assert all(grid.seeds_for(v) == 5 for v in grid.values)


@pytest.mark.parametrize("name", ["domainbed-colored", "domainbed-colored-beta", "domainbed-rotated", "noniid-000"])
def test_a_grid_on_mnist_and_its_fashion_mnist_twin_plan_the_same_trials_on_other_images(name):
    """The papers' grids run real MNIST; their "-fmnist" twins the same trials on Fashion-MNIST (the committed
    records): the same rows, values, seeds and settings, only the dataset differs, so the keys do too; and on MNIST
    each trial builds its own environments, as the FedGP authors' scripts did (DomainBed's one construction on
    Fashion-MNIST, as the records were made)."""
    from fda_ray.experiments.trials import plan
    from fda_ray.papers.grids import GRIDS

    for profile in GRIDS[name].profiles:
        mnist, fmnist = plan(GRIDS[name], profile), plan(GRIDS[name + "-fmnist"], profile)
        assert [(t.row, t.value, t.seed) for t in mnist] == [(t.row, t.value, t.seed) for t in fmnist]
        for a, b in zip(mnist, fmnist):
            ca, cb = a.config().resolved().to_dict(), b.config().resolved().to_dict()
            assert (ca.pop("dataset"), cb.pop("dataset")) in (("mnist", "fashion-mnist"),
                                                              ("colored-mnist", "colored-fmnist"),
                                                              ("rotated-mnist", "rotated-fmnist"))
            built = ca.pop("environment_seed"), cb.pop("environment_seed")
            assert built == (("domainbed", "domainbed") if name == "noniid-000" else ("trial", "domainbed"))
            assert ca == cb and a.key != b.key


def test_published_domainbed_numbers_are_keyed_by_environment_index():
    from fda_ray.papers.grids import GRIDS
    from fda_ray.papers.paper import TABLE1_CMNIST, TABLE3_CMNIST

    vlcs = GRIDS["domainbed-vlcs"].paper
    assert vlcs["fedgp"] == {0.0: 99.43, 1.0: 71.09, 2.0: 78.70, 3.0: 73.65}  # S (SUN09) is index 2, V index 3
    assert statistics.fmean(vlcs["fedgp"].values()) == pytest.approx(80.72, abs=0.01)  # the paper's Avg
    colored = GRIDS["domainbed-colored"].paper
    assert colored["fedgp"] == TABLE3_CMNIST["fedgp"] and colored["ditto"] == TABLE1_CMNIST["ditto"]
    assert statistics.fmean(TABLE1_CMNIST["fedgp"].values()) == pytest.approx(84.76, abs=0.01)
    assert statistics.fmean(TABLE3_CMNIST["fedgp"].values()) == pytest.approx(82.62, abs=0.01)
    assert GRIDS["domainbed-terra"].paper["fedrep"][1.0] == 6.15
    beta = GRIDS["domainbed-colored-beta"]
    assert beta.paper["fedgp_env2"][1.0] == 9.85 and beta.row("fedgp_env2").params == {"test_env": 2}


def test_quick_profile_gives_the_personalised_rows_the_fda_budget():
    from fda_ray.experiments.trials import plan
    from fda_ray.papers.grids import GRIDS

    trials = plan(GRIDS["domainbed-colored"], "quick")
    rounds = {t.row: t.config().resolved().rounds for t in trials}
    assert set(rounds.values()) == {50} and len(trials) == 13 * 3


def test_last_five_rounds_metric():
    from fda_ray.experiments.tables import final_accuracies

    rows = [{"row": "fedgp", "grid_value": 0.0, "trial": "t", "seed": 0, "round": r, "phase": "main",
             "accuracy": a} for r, a in enumerate([0.1, 0.2, 0.5, 0.6, 0.7, 0.8, 0.9])]
    rows += [{"row": "knn_per", "grid_value": 0.0, "trial": "k", "seed": 0, "round": r, "phase": ph, "accuracy": a}
             for r, (ph, a) in enumerate([("main", 0.5), ("main", 0.6), ("knn", 0.75)])]
    assert final_accuracies(rows)[("fedgp", 0.0)] == {0: pytest.approx(90.0)}
    assert final_accuracies(rows, last=5)[("fedgp", 0.0)] == {0: pytest.approx(70.0)}
    assert final_accuracies(rows, last=5)[("knn_per", 0.0)] == {0: pytest.approx(75.0)}  # its kNN evaluation


def test_zero_dim_state_tensors_change_no_number(tmp_path):
    """The authors' DomainBed code averages 0-dim state tensors over the sources (docs/authors-code.md); fda-ray's flat
    layout leaves them to the global model. Equal numbers, because in every registered model the only 0-dim
    tensors are BatchNorm's num_batches_tracked, which no forward pass reads while the momentum is set, and
    which frozen (pretrained) BatchNorm never changes: the sources' average is the global model's value."""
    import torchvision
    from torch import nn

    from fda_ray.train.models import MODELS, build_model
    from test_models import TINY_INPUTS

    for name in MODELS.names():
        model = build_model(name, TINY_INPUTS[name][0], 3)
        for mod_name, mod in model.named_modules():
            scalars = [n for n, t in mod.state_dict().items() if t.dim() == 0 and "." not in n]
            if scalars:
                assert isinstance(mod, nn.modules.batchnorm._BatchNorm) and scalars == ["num_batches_tracked"]
                assert mod.momentum is not None, (name, mod_name)
    weights = tmp_path / "r18.pth"
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), weights)
    model = build_model("resnet18", (3, 32, 32), 3, weights_path=str(weights))
    before = {n: t.clone() for n, t in model.state_dict().items() if t.dim() == 0}
    model.train()
    torch.nn.functional.cross_entropy(model(torch.rand(4, 3, 32, 32)), torch.tensor([0, 1, 2, 0])).backward()
    assert all(torch.equal(model.state_dict()[n], t) for n, t in before.items()) and len(before) == 20


def test_history_reports_the_mean_of_the_last_five_rounds():
    from fda_ray.core.history import History

    h = History(config={}, rows=[{"accuracy": a, "loss": 0.0} for a in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)])
    assert h.final_accuracy == pytest.approx(0.7) and h.last_accuracy(5) == pytest.approx(0.5)
    assert h.to_json()["last5_accuracy"] == pytest.approx(0.5)


# ---------------------------------------------------------------- the authors' scripts' two DomainBed protocols

def test_target_only_and_auto_runs_follow_the_authors_domainbed_scripts():
    # static script: no warm-up without sources (proj_w = 0); auto script: faithful_domainbed_auto on
    assert RunConfig(dataset="colored-fmnist", method="target_only").resolved().warmup_rounds == 0
    assert RunConfig(dataset="fashion-mnist", method="target_only").resolved().warmup_rounds == 2
    for method, faithful in (("fedgp_auto", True), ("fedda_auto", True), ("fedgp", False), ("ditto", False)):
        assert RunConfig(dataset="vlcs", method=method).resolved().faithful_domainbed_auto is faithful
    assert RunConfig(dataset="fashion-mnist", method="fedgp_auto").resolved().faithful_domainbed_auto is False


def test_faithful_auto_split_draws_the_labelled_set_from_the_environment(colored):
    cfg = colored(method="fedgp_auto", test_env=0, samples_per_client=None, test_samples=None).resolved()
    assert cfg.faithful_domainbed_auto
    split = load(cfg.dataset, cfg.data_dir)
    s = build_setting(split, cfg.resolved())
    static = build_setting(split, cfg.replace(faithful_domainbed_auto=False).resolved())
    x0, _ = split.environments[0]
    n = len(x0)
    out0, in0 = split_indices(n, int(0.2 * n), seed_hash(cfg.seed, 0))
    k = int(len(in0) * 0.05)
    labelled, rest = split_indices(n, k, seed_hash(cfg.seed, 0))
    test_pos, _ = split_indices(len(rest), int(0.2 * len(rest)), seed_hash(cfg.seed, 0))
    assert torch.equal(s.target_train[0], x0[torch.from_numpy(labelled)]) and len(labelled) == 20
    assert torch.equal(s.target_test[0], x0[torch.from_numpy(rest[test_pos])])
    assert set(labelled.tolist()) <= set(out0.tolist())  # the static runs' test images (same permutation)
    assert not set(labelled.tolist()) & set(rest[test_pos].tolist())
    assert len(static.target_train[0]) == 20 and not torch.equal(static.target_test[0], s.target_test[0])


def test_auto_rules_weigh_the_target_as_the_authors_final_auto_script():
    """jackyzyb/AutoFedGP at 7b10ca9, main_domain_bed_auto_beta.py update_global / update_global_convex: per layer and
    source, + beta_i align_i frac_i cos g_i where cos > 0 (FedDA: + beta_i frac_i g_i), and + (1 - beta_i) frac_i g_T
    inside the loop, so g_T's weight is sum_i frac_i (1 - beta_i) (an earlier commit added it once with 1 - beta of the
    last source, which fda-ray followed before). Transcribed here layer by layer against the rules."""
    from fda_ray.algorithms.aggregation import fedda, fedgp

    g = torch.Generator().manual_seed(0)
    tgt, src = torch.randn(40, generator=g, dtype=torch.float64), torch.randn(3, 40, generator=g, dtype=torch.float64)
    offsets = torch.tensor([0, 10, 25, 40])
    frac = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    beta = torch.tensor([0.2, 0.6, 0.9], dtype=torch.float64)
    align = torch.tensor([0.7, 1.3, 0.4], dtype=torch.float64)
    gp, da = torch.zeros(40, dtype=torch.float64), torch.zeros(40, dtype=torch.float64)
    for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        t = tgt[a:b]
        for i in range(3):
            s_i = src[i, a:b]
            cos = torch.nn.functional.cosine_similarity(t.reshape(1, -1), s_i.reshape(1, -1))
            if cos > 0:
                gp[a:b] += beta[i] * align[i] * frac[i] * cos * s_i
            gp[a:b] += (1 - beta[i]) * t * frac[i]
            da[a:b] += beta[i] * frac[i] * s_i + (1 - beta[i]) * t * frac[i]
    torch.testing.assert_close(fedgp(tgt, src, offsets, beta=beta, weights=frac, align=align, impl="reference"), gp,
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fedda(tgt, src, beta=beta, weights=frac, impl="reference"), da, rtol=1e-12, atol=1e-12)


def test_office31_reads_the_archives_images_level_and_the_flat_layout(tmp_path):
    """FSSDA's Office-31: <root>/office31/<domain>/images/<class>/ (the archive) or without images/."""
    from fda_ray.data import load

    for domain, inner in (("amazon", "images"), ("dslr", ""), ("webcam", "images")):
        _folder_tree(tmp_path / "office31" / domain / inner if inner else tmp_path / "office31" / domain,
                     [""], ["back_pack", "bike"], per=2)
    s = load("office31", str(tmp_path))
    assert s.env_names == ("A", "D", "W") and s.num_classes == 2
    assert [len(y) for _, y in s.environments] == [4, 4, 4]
    assert all("/images/" in p for p in s.environments[0][0].paths) and s.environments[0][1].tolist() == [0, 0, 1, 1]
    # FSSDA's protocol: the domains split over 5 devices, ResNet-101 (the paper's)
    cfg = RunConfig(dataset="office31", test_env=2).resolved()
    assert (cfg.partition, cfg.num_sources, cfg.source_envs, cfg.model) == ("domain_shards", 5, (0, 1), "resnet101")
