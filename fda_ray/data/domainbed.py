"""DomainBed's datasets: environments (domains) from the layouts users have, and the ones built here.

The FedGP and Auto-weighted FDA papers run FedDA / FedGP on DomainBed (Gulrajani & Lopez-Paz 2021) with one held-out environment
as the target (docs/methods.md). An environment dataset is a `Split` whose `environments` holds one
(x, y) per environment, in DomainBed's order (the position in the *sorted* folder list), and whose
`env_names` holds DomainBed's letters for them; fda_ray.runtime.partitions makes the leave-one-domain-out partition.

Constructions (DomainBed's recipes; `fashion-mnist` swaps Fashion-MNIST in for MNIST, docs/datasets.md):
  colored-{f}mnist   70 000 pooled images, shuffled (torch.randperm under the construction seed), env e =
                     pool[e::3]; y = 1[class < 5] flipped with probability 0.25; colour = y XOR Bernoulli(p_e),
                     p = 0.1, 0.2, 0.9 for +90%, +80%, -90%; 2 x 28 x 28, channel 1 - colour zeroed
  rotated-{f}mnist   env e = pool[e::6] rotated by 0, 15, ..., 75 degrees (bilinear, fill 0); 1 x 28 x 28
The construction seed is DomainBed's `--seed` (0): with MNIST present (datasets/mnist.sh), colored-mnist is
DomainBed's own ColoredMNIST of seed 0, image for image. The trial seed draws the splits (fda_ray.runtime.partitions),
as DomainBed's `--trial_seed` does. RunConfig.environment_seed "trial" builds the environments from the trial's seed
instead (the loaders' construction_seed), as the FedGP authors' scripts ran them (--seed s --trial_seed s).

Image-folder datasets under a DomainBed data root (docs/datasets.md): VLCS, PACS, office_home,
terra_incognita, domain_net, each `<root>/<Name>/<environment>/<class>/*.jpg`, and the generic `imagefolder`
(`<data_dir>/<domain>/<class>/`). Images are read from their files when a batch is drawn (`ImageFiles`),
with DomainBed's transforms: resize to 224 x 224 and ImageNet normalisation; a training read of a source
environment adds DomainBed's augmentation (RandomResizedCrop(224, scale 0.7-1), horizontal flip,
ColorJitter(0.3, 0.3, 0.3, 0.3), RandomGrayscale), seeded by (seed, round, client, purpose).
"""
from __future__ import annotations

import hashlib
import os
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from fda_ray.data.base import DATASETS, DatasetNotFound, Pair, Split, _candidate_dirs, _not_found
from fda_ray.data.paper_defaults import PAPER_DEFAULTS
from fda_ray.data.images import IMAGE_SIZE, IMG_EXTENSIONS, ImageFiles
from fda_ray.data.standard import MNIST_HOW, find_mnist, read_idx_quad

CONSTRUCTION_SEED = 0  # DomainBed's --seed, which builds ColoredMNIST / RotatedMNIST

COLORED_ENVS = ("+90%", "+80%", "-90%")
COLORED_FLIP = (0.1, 0.2, 0.9)  # colour-flip probability per environment
COLORED_LABEL_NOISE = 0.25
ROTATED_ANGLES = (0, 15, 30, 45, 60, 75)


def seed_hash(*args) -> int:
    """DomainBed's misc.seed_hash: an integer in [0, 2^31) from the tuple's text (the same on every machine)."""
    return int(hashlib.md5(str(args).encode("utf-8")).hexdigest(), 16) % (2 ** 31)


def split_indices(n: int, n_first: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """DomainBed's misc.split_dataset on range(n): keys shuffled by RandomState(seed); (first n_first, rest)."""
    if not 0 <= n_first <= n:
        raise ValueError(f"cannot split {n} samples into {n_first} and the rest")
    keys = list(range(n))
    np.random.RandomState(seed).shuffle(keys)
    keys_arr = np.asarray(keys, dtype=np.int64)
    return keys_arr[:n_first], keys_arr[n_first:]


# ---------------------------------------------------------------- image folders

@dataclass(frozen=True)
class FolderLayout:
    """A DomainBed image dataset: its folder under the data root, its environments' folders (sorted: the
    index order DomainBed uses) and the letters the papers print for them."""

    folder: str
    environments: tuple[str, ...]
    letters: tuple[str, ...]
    how: str  # where users get it
    size: int = IMAGE_SIZE  # the decoded images' side
    recipe: str = "domainbed"  # the transforms (_transform)
    domainbed: bool = True  # one of DomainBed's datasets (Office-31 and Digit-Five are not: the messages say so)


# DomainBed's download script, as one runnable line (it downloads every DomainBed dataset into --data_dir; on a
# machine without internet run it elsewhere and copy the folder over).
DOMAINBED_DOWNLOAD = ("DomainBed's download script writes it: git clone https://github.com/facebookresearch/DomainBed "
                      "&& cd DomainBed && python -m domainbed.scripts.download --data_dir=DATA_ROOT (every DomainBed "
                      "dataset; without internet here, run it elsewhere and copy DATA_ROOT/{folder} over)")

FOLDER_DATASETS: dict[str, FolderLayout] = {
    "vlcs": FolderLayout("VLCS", ("Caltech101", "LabelMe", "SUN09", "VOC2007"), ("C", "L", "S", "V"),
                         DOMAINBED_DOWNLOAD.format(folder="VLCS")),
    "pacs": FolderLayout("PACS", ("art_painting", "cartoon", "photo", "sketch"), ("A", "C", "P", "S"),
                         DOMAINBED_DOWNLOAD.format(folder="PACS")),
    "office-home": FolderLayout("office_home", ("Art", "Clipart", "Product", "Real World"), ("A", "C", "P", "R"),
                                DOMAINBED_DOWNLOAD.format(folder="office_home") + "; note the space in 'Real World'"),
    "terra-incognita": FolderLayout("terra_incognita", ("location_100", "location_38", "location_43", "location_46"),
                                    ("L100", "L38", "L43", "L46"),
                                    DOMAINBED_DOWNLOAD.format(folder="terra_incognita") + "; it builds it from the "
                                    "Caltech Camera Traps release"),
    # FSSDA's Office-31 (not a DomainBed dataset; the same layout, docs/datasets.md): the original archive
    # puts an images/ folder between each domain and its classes, which read_environments steps into.
    "office31": FolderLayout("office31", ("amazon", "dslr", "webcam"), ("A", "D", "W"),
                             "unpack the Office-31 archive (domain_adaptation_images) as <root>/office31/",
                             domainbed=False),
    # FedWCA's Digit-Five (docs/datasets.md): per-domain class folders 0..9 of 32 x 32 digits, normalised by 0.5
    # (SHOT's digit transforms), no augmentation; the .mat bundles people share need converting to this layout.
    "digit-five": FolderLayout("digit_five", ("mnist", "mnistm", "svhn", "syn", "usps"), ("MN", "MN-M", "SV", "SY", "US"),
                               "write each domain's images as PNG files into <root>/digit_five/<domain>/<digit>/ (the "
                               "usual .mat / pickle bundles: convert them with their own readers)",
                               size=32, recipe="digits", domainbed=False),
    "domain-net": FolderLayout("domain_net", ("clipart", "infograph", "painting", "quickdraw", "real", "sketch"),
                               ("clip", "info", "paint", "quick", "real", "sketch"),
                               DOMAINBED_DOWNLOAD.format(folder="domain_net")),
}


def _hidden(name: str) -> bool:
    """A file or folder no dataset means: a dot name (.ipynb_checkpoints, .git, macOS's ._photo.jpg AppleDouble
    files, which every archive made on a Mac holds beside each image: not images, they stopped a run when a batch
    drew one) or a Mac archive's __MACOSX folder."""
    return name.startswith(".") or name == "__MACOSX"


def _subfolders(d: Path) -> list[str]:
    """The sorted names of `d`'s folders that are not hidden (domains, classes)."""
    return sorted(p.name for p in d.iterdir() if p.is_dir() and not _hidden(p.name))


def _unicode_twins(names: Sequence[str]) -> tuple[str, str] | None:
    """Two names equal once normalised (NFC), if any: "café" composed and decomposed print alike but are two
    folders, two classes."""
    seen: dict[str, str] = {}
    for n in names:
        key = unicodedata.normalize("NFC", n)
        if key in seen:
            return seen[key], n
        seen[key] = n
    return None


def _image_files(d: Path) -> list[str]:
    """torchvision ImageFolder's order: sorted os.walk, sorted file names, known extensions only; hidden files and
    folders left out (torchvision keeps them: a ._x.jpg is drawn as an image, and fails)."""
    top = os.path.realpath(d)
    seen: set[str] = set()
    walked = []
    for root, dirs, names in os.walk(d, followlinks=True):
        real = os.path.realpath(root)
        # a link back to a folder already walked, or up to the class folder or above it (`up -> ..`): a loop, whose
        # walk read the other classes' images under this class (torchvision's does); not followed
        if real in seen or (root != str(d) and (top == real or top.startswith(real.rstrip(os.sep) + os.sep))):
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = [x for x in dirs if not _hidden(x)]
        walked.append((root, names))
    out = []
    for root, names in sorted(walked):  # (torchvision: sorted(os.walk(...)), roots then names in order)
        out += [os.path.join(root, n) for n in sorted(names) if n.lower().endswith(IMG_EXTENSIONS) and not _hidden(n)]
    return out


def read_environments(root: Path, envs: Sequence[str], dataset: str, size: int = IMAGE_SIZE,
                      recipe: str = "domainbed") -> tuple[list[Pair], list[str]]:
    """(per environment (ImageFiles, labels), class names) from <root>/<env>/<class>/...; the classes must be
    the same in every environment (a class index means one class everywhere)."""
    classes: list[str] | None = None
    first = ""
    out: list[Pair] = []
    for env in envs:
        d = root / env
        if (d / "images").is_dir() and _subfolders(d) == ["images"]:
            d = d / "images"  # Office-31's archive: <domain>/images/<class>/
        if not d.is_dir():
            found = _subfolders(root) if root.is_dir() else []
            raise DatasetNotFound(f"{dataset}: environment folder {env!r} is missing in {root} (found: "
                                  f"{', '.join(found) or 'no folders'})")
        env_classes = _subfolders(d)
        twins = _unicode_twins(env_classes)
        if twins:  # two folders that print alike: two classes a user cannot tell apart in any table
            a, b = twins
            raise DatasetNotFound(f"{dataset}: in environment {env!r} ({d}) the class folders {ascii(a)} and "
                                  f"{ascii(b)} print alike ({a!r}) but are spelled with other Unicode code points "
                                  "(composed and decomposed accents: a copy from macOS?); merge or rename one")
        if not env_classes:
            raise DatasetNotFound(f"{dataset}: environment {env!r} ({d}) has no class folders; expected "
                                  f"{d}/<class>/<image files>")
        if classes is None:
            classes, first = env_classes, env
        elif env_classes != classes:
            missing = sorted(set(classes) - set(env_classes))
            extra = sorted(set(env_classes) - set(classes))
            what = (f"class {missing[0]!r} is missing" if missing else f"class {extra[0]!r} is not in {first!r}")
            spelled = {unicodedata.normalize("NFC", c): c for c in classes}
            for c in extra:  # the same name in other code points: the line would name two classes that print alike
                if unicodedata.normalize("NFC", c) in spelled:
                    what = (f"class {ascii(c)} is {ascii(spelled[unicodedata.normalize('NFC', c)])} in {first!r}: "
                            f"they print alike ({c!r}) but are spelled with other Unicode code points (composed and "
                            "decomposed accents: a copy from macOS?); rename one so both are spelled alike")
                    break
            raise DatasetNotFound(f"{dataset}: in environment {env!r} ({d}) {what}; every environment needs the "
                                  f"same class folders ({first!r} has {', '.join(classes)})")
        paths: list[str] = []
        labels: list[int] = []
        for c, name in enumerate(classes):
            files = _image_files(d / name)
            if not files:
                raise DatasetNotFound(f"{dataset}: environment {env!r}, class {name!r} ({d / name}) holds no "
                                      f"images ({', '.join(IMG_EXTENSIONS)})")
            paths += files
            labels += [c] * len(files)
        out.append((ImageFiles(tuple(paths), size=size, recipe=recipe), torch.tensor(labels, dtype=torch.int64)))
    return out, classes or []


def _env_split(envs: list[Pair], names: Sequence[str], classes: int, input_shape=(3, IMAGE_SIZE, IMAGE_SIZE)) -> Split:
    empty = torch.zeros(0, *input_shape)
    none = torch.zeros(0, dtype=torch.int64)
    return Split(empty, none, empty, none, classes, environments=tuple(envs), env_names=tuple(names))


def _folder_loader(name: str):
    lay = FOLDER_DATASETS[name]
    whose = "DomainBed's" if lay.domainbed else "the"

    def load(data_dir: str | None = None, download: bool = False) -> Split:
        dirs = _candidate_dirs(data_dir, [lay.folder, ""], [])
        # the dataset's folder, or a root that holds its environments' folders itself: two at least (one alone is
        # a neighbour's: an MNIST folder `mnist/` beside the data was taken for Digit-Five's root)
        found = next((d for d in dirs if d.is_dir() and d.name == lay.folder), None) or \
            next((d for d in dirs if d.is_dir() and sum((d / e).is_dir() for e in lay.environments) >= 2), None)
        if found is None:
            raise _not_found(f"{lay.folder} ({name})", data_dir, dirs,
                             f"Put {whose} {lay.folder}/ folder ({'/'.join(lay.environments)}, each with one "
                             f"folder per class) under the data root and pass it as --data-dir; {lay.how}")
        envs, classes = read_environments(found, lay.environments, name, lay.size, lay.recipe)
        return _env_split(envs, lay.letters, len(classes), (3, lay.size, lay.size))

    load.__doc__ = f"{whose[0].upper() + whose[1:]} {lay.folder}: environments {', '.join(lay.letters)} ({', '.join(lay.environments)})."
    return load


for _name in FOLDER_DATASETS:
    DATASETS.add(_name, _folder_loader(_name), defaults=PAPER_DEFAULTS[_name],
                 environments=len(FOLDER_DATASETS[_name].environments))


def _imagefolder_domains(data_dir: str | None) -> tuple[Path, list[str]]:
    """An imagefolder tree's root and its domains (the sorted subfolders, hidden ones left out), without reading
    the images; fewer than 2 is refused here, where a config counts its sources (it read as "num_sources=-1 is
    invalid", naming neither the dataset nor the folder)."""
    if not data_dir:
        raise DatasetNotFound("imagefolder needs --data-dir: a folder holding <domain>/<class>/<image files>")
    root = Path(data_dir).expanduser().absolute()  # (its images are read on other nodes too: fda_ray.data.base)
    if not root.is_dir():
        raise DatasetNotFound(f"imagefolder: data_dir={data_dir!r} is not a directory; expected "
                              "<data_dir>/<domain>/<class>/<image files>")
    domains = _subfolders(root)
    if len(domains) < 2:
        raise DatasetNotFound(f"imagefolder: {root} holds {len(domains)} domain folder(s) "
                              f"({', '.join(domains) or 'none'}); leave-one-domain-out needs at least 2, each "
                              "<domain>/<class>/<image files>")
    return root, domains


@DATASETS.register("imagefolder", defaults=PAPER_DEFAULTS["imagefolder"],
                   environments=lambda data_dir: len(_imagefolder_domains(data_dir)[1]))
def load_imagefolder(data_dir: str | None = None, download: bool = False) -> Split:
    """Any `<data_dir>/<domain>/<class>/*.{jpg,png,...}` tree: domains = the sorted subfolders, classes the same
    in every domain."""
    root, domains = _imagefolder_domains(data_dir)
    envs, classes = read_environments(root, domains, "imagefolder")
    return _env_split(envs, domains, len(classes))


# ---------------------------------------------------------------- MNIST-style constructions

def load_pool(base: str, data_dir: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The 70 000 images (uint8 (n, 28, 28)) and labels of MNIST or Fashion-MNIST, train then test, as
    DomainBed concatenates them."""
    if base == "fashion-mnist":
        from fda_ray.data.standard import load_fashion_mnist

        s = load_fashion_mnist(data_dir)
        x = torch.cat([s.x_train, s.x_test])[:, 0]
        return (x * 255).round().to(torch.uint8), torch.cat([s.y_train, s.y_test])
    arrays = read_idx_quad(find_mnist(data_dir), "MNIST", MNIST_HOW)
    x = torch.from_numpy(np.concatenate([arrays[0], arrays[2]]))
    y = torch.from_numpy(np.concatenate([arrays[1], arrays[3]]).astype(np.int64))
    return x, y


def _bernoulli(p: float, n: int, gen: torch.Generator) -> torch.Tensor:
    return (torch.rand(n, generator=gen) < p).float()  # DomainBed's torch_bernoulli_


def colored_environments(images: torch.Tensor, labels: torch.Tensor, seed: int = CONSTRUCTION_SEED) -> list[Pair]:
    """DomainBed ColoredMNIST on a pool of uint8 images (n, 28, 28) and class labels (n,): [(x (m, 2, 28, 28)
    float in [0, 1], y (m,) binary)] for +90%, +80%, -90%. The draws follow DomainBed's order under
    torch.manual_seed(seed): the pool's randperm, then per environment the label flips and the colour flips."""
    gen = torch.Generator().manual_seed(seed)
    shuffle = torch.randperm(len(images), generator=gen)
    images, labels = images[shuffle], labels[shuffle]
    out = []
    for e, p in enumerate(COLORED_FLIP):
        im, lab = images[e::3], labels[e::3]
        y = (lab < 5).float()
        y = (y - _bernoulli(COLORED_LABEL_NOISE, len(y), gen)).abs()  # xor: 25 % label noise
        colors = (y - _bernoulli(p, len(y), gen)).abs()
        x = torch.stack([im, im], dim=1).float()  # (m, 2, 28, 28)
        x[torch.arange(len(x)), (1 - colors).long(), :, :] *= 0
        out.append((x.div_(255.0), y.long()))
    return out


def rotated_environments(images: torch.Tensor, labels: torch.Tensor, seed: int = CONSTRUCTION_SEED,
                         angles: Sequence[int] = ROTATED_ANGLES) -> list[Pair]:
    """DomainBed RotatedMNIST: env e = pool[e::len(angles)] rotated by angles[e]; x (m, 1, 28, 28) in [0, 1].
    DomainBed's path exactly: each uint8 image as a PIL image, torchvision's rotate (bilinear, fill 0), then
    to [0, 1] (torchvision's tensor rotate samples differently: pixels differ by up to 32 of 255)."""
    from PIL import Image
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.functional import rotate

    gen = torch.Generator().manual_seed(seed)
    shuffle = torch.randperm(len(images), generator=gen)
    images, labels = images[shuffle], labels[shuffle]
    out = []
    for e, angle in enumerate(angles):
        rotated = [np.asarray(rotate(Image.fromarray(a), float(angle), interpolation=InterpolationMode.BILINEAR,
                                     fill=(0,)))
                   for a in images[e::len(angles)].numpy()]
        x = torch.from_numpy(np.stack(rotated) if rotated else np.zeros((0, 28, 28), np.uint8))
        out.append((x.unsqueeze(1).float().div_(255.0), labels[e::len(angles)].clone()))
    return out


def _construction(kind: str, base: str):
    def load(data_dir: str | None = None, download: bool = False, construction_seed: int = CONSTRUCTION_SEED
             ) -> Split:
        images, labels = load_pool(base, data_dir)
        if kind == "colored":
            return _env_split(colored_environments(images, labels, construction_seed), COLORED_ENVS, 2, (2, 28, 28))
        return _env_split(rotated_environments(images, labels, construction_seed),
                          tuple(str(a) for a in ROTATED_ANGLES), 10, (1, 28, 28))

    load.__doc__ = f"DomainBed's {kind.capitalize()}MNIST recipe on {base}."
    return load


for _kind in ("colored", "rotated"):
    for _base, _short in (("mnist", "mnist"), ("fashion-mnist", "fmnist")):
        DATASETS.add(f"{_kind}-{_short}", _construction(_kind, _base), defaults=PAPER_DEFAULTS[f"{_kind}-{_short}"],
                     environments=len(COLORED_ENVS) if _kind == "colored" else len(ROTATED_ANGLES))

