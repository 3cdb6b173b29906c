"""tools/authors_fedgp.py (the runner of the authors' main_noniid.py) and the pages' authors-* generators that read
what it records. The authors' code itself is not here (it is not a dependency), so the runner's own parts are
tested: the Fashion-MNIST layout torchvision reads, the modules it supplies, its errors; and the generators on
records written by the test."""
from __future__ import annotations

import gzip
import importlib.util
import json
import random
import statistics
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tools import pages
from fda_ray.experiments.tables import t975

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("authors_fedgp", ROOT / "tools" / "authors_fedgp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _idx_files(folder: Path, n_train: int, n_test: int, gz: bool) -> tuple[np.ndarray, np.ndarray]:
    """Small files in the idx format of Fashion-MNIST (magic 2051 images, 2049 labels, big-endian sizes)."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n_train, dtype=np.uint8)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        img = struct.pack(">IIII", 2051, n, 28, 28) + images[:n].tobytes()
        lab = struct.pack(">II", 2049, n) + labels[:n].tobytes()
        for name, data in ((f"{prefix}-images-idx3-ubyte", img), (f"{prefix}-labels-idx1-ubyte", lab)):
            if gz:
                with gzip.open(folder / f"{name}.gz", "wb") as f:
                    f.write(data)
            else:
                (folder / name).write_bytes(data)
    return images, labels


@pytest.mark.parametrize("gz", [True, False])
def test_the_data_folder_is_what_torchvisions_fashion_mnist_reads_without_downloading(tmp_path, gz):
    from torchvision.datasets import FashionMNIST

    src = tmp_path / "src"
    src.mkdir()
    images, labels = _idx_files(src, 12, 5, gz)
    raw = _tool().prepare_datadir(src, tmp_path / "data")
    assert sorted(p.name for p in raw.iterdir()) == sorted(_tool().FASHION_FILES)  # no .part left behind
    train = FashionMNIST(str(tmp_path / "data"), train=True, download=False)
    test = FashionMNIST(str(tmp_path / "data"), train=False, download=False)
    assert torch.equal(train.data, torch.from_numpy(images))
    assert torch.equal(train.targets, torch.from_numpy(labels).long())
    assert len(test) == 5


def test_a_missing_idx_file_names_the_folder_and_how_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"train-images-idx3-ubyte\.gz is there .*dataset-fashion-mnist"):
        _tool().prepare_datadir(tmp_path, tmp_path / "data")


def test_the_supplied_deterministic_seeds_python_numpy_and_torch(tmp_path):
    _tool().write_shims(tmp_path)
    code = ("from utils.utils import deterministic\nimport random, numpy, torch\n"
            "deterministic(8); print(random.random(), numpy.random.rand(), torch.rand(1).item())\n"
            "import utils.constants, utils.data_sampler, imgaug, imgaug.augmenters\n")
    # the two runs side by side (each imports torch: ~1.5 s)
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:  # (as check=True)
            raise subprocess.CalledProcessError(p.returncode, p.args, out, err)
        outs.append(out)
    assert outs[0] == outs[1]  # the same seed, the same draws: the script's runs are repeatable
    random.seed(8)
    np.random.seed(8)
    torch.manual_seed(8)
    assert [float(x) for x in outs[0].split()] == [random.random(), np.random.rand(), torch.rand(1).item()]


def test_the_runner_refuses_a_folder_without_the_script_and_the_arguments_it_sets(tmp_path, capsys):
    tool = _tool()
    assert tool.main(["--repo", str(tmp_path), "--out", str(tmp_path / "o"), "--iter", "a"]) == 2
    assert "has no main_noniid.py" in capsys.readouterr().err
    (tmp_path / "main_noniid.py").write_text("")
    assert tool.main(["--repo", str(tmp_path), "--out", str(tmp_path / "o"), "--iter", "a", "--",
                      "--iter_idx", "b"]) == 2
    assert "--iter_idx is set by this runner" in capsys.readouterr().err


def _records(folder: Path, runs: dict[str, list[float]], torch_version: str = "2.15.0") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for it, acc in runs.items():
        (folder / f"server_results_{it}.json").write_text(json.dumps({"test": {"acc": acc, "loss": [0.0] * len(acc)}}))
        (folder / f"run_{it}.json").write_text(json.dumps({
            "repository": "jackyzyb/AutoFedGP", "commit": "7b10ca9" + "0" * 33,
            "environment": {"torch": torch_version, "numpy": "2.4.6"}}))


def test_the_authors_generators_read_the_scripts_accuracies(tmp_path, monkeypatch):
    monkeypatch.setattr(pages.records, "RESULTS", tmp_path)
    runs = {"noise_0.6_seed8": [0.6273, 0.6301, 0.6288], "noise_0.6_seed9": [0.5911, 0.6012],
            "noise_0.8_seed8": [0.5102, 0.5200]}
    _records(tmp_path / "authors", runs)
    assert pages.render("authors-run authors noise_0.6_seed8") == "62.9"
    assert pages.render("authors-run authors noise_0.6_seed8 what=peak digits=2") == "63.01"
    assert pages.render("authors-run authors noise_0.6_seed9 what=at round=1 digits=2") == "59.11"
    firsts = [62.73, 59.11]
    mean = statistics.fmean(firsts)
    half = t975(1) * statistics.stdev(firsts) / 2 ** 0.5  # t(0.975, 1 dof), the table fda-ray prints with
    assert pages.render("authors-ci authors noise_0.6_* what=at round=1 digits=2") == \
        f"{mean:.2f} ± {half:.2f} (n = 2)"
    assert pages.render("authors-list authors noise_0.6_* what=at round=1 digits=2") == "62.73, 59.11"
    assert pages.render("authors-build authors") == "jackyzyb/AutoFedGP 7b10ca9, torch 2.15.0, NumPy 2.4.6"
    with pytest.raises(ValueError, match="rounds 1-2, not 3"):
        pages.render("authors-run authors noise_0.8_seed8 what=at round=3")
    with pytest.raises(ValueError, match="no run of 'authors' matches 'noise_0.4_\\*'"):
        pages.render("authors-ci authors noise_0.4_*")
    _records(tmp_path / "authors", {"noise_0.4_seed8": [0.7]}, torch_version="2.14.0")
    with pytest.raises(ValueError, match="has 2 builds"):
        pages.render("authors-build authors")
