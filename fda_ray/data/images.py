"""Images read from their files when a batch is drawn (`ImageFiles`), with DomainBed's transforms (resize to
224 x 224, ImageNet normalisation; on a source's training read, DomainBed's augmentation), and the helpers
that index, join and re-flag tensors and image lists alike (`take`, `concat`, `with_augmentation`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import torch

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")  # torchvision's
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_SIZE = 224


class ImageFileError(ValueError):
    """An image file of a dataset that cannot be decoded (not an image, cut short): one line naming the file. It is
    met when a batch is drawn, during the work (a run stops with its finished rounds kept, exit 1)."""


def _pil_loader(path: str):
    from PIL import Image

    try:
        with open(path, "rb") as f:
            return Image.open(f).convert("RGB")
    except (OSError, SyntaxError, ValueError) as e:  # PIL: UnidentifiedImageError (an OSError), a cut-short file
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        if why.startswith(("image file is truncated", "Truncated File Read")):  # (PIL says either, by where it ends)
            return _truncated(path)
        if "cannot identify image file" in why:  # PIL's text names a file object, not the path
            why = "not an image PIL can read"
        raise ImageFileError(f"image={path!r} is invalid: {why}") from None


def _truncated(path: str):
    """A file cut short, read as DomainBed reads every image (domainbed/datasets.py sets PIL's
    LOAD_TRUNCATED_IMAGES: the part the file lacks is left blank), with one warning a file: DomainBed trains and
    tests on such files, so a copy of a dataset that DomainBed runs on runs here too, and says which files."""
    import warnings

    from PIL import Image, ImageFile

    from fda_ray.core.notices import RunWarning

    before = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = True  # (PIL reads it as a module setting; put back at once)
    try:
        with open(path, "rb") as f:
            image = Image.open(f).convert("RGB")
    except (OSError, SyntaxError, ValueError) as e:  # cut inside its headers: DomainBed cannot read it either
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ImageFileError(f"image={path!r} is invalid: cut short before its image data ({why})") from None
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = before
    if path not in _WARNED:
        _WARNED.add(path)
        warnings.warn(f"image {path!r} is cut short; read as DomainBed reads it, the missing part blank", RunWarning,
                      stacklevel=2)
    return image


_WARNED: set[str] = set()  # the truncated files this process has warned of (a file is read every epoch)


@dataclass(frozen=True)
class ImageFiles:
    """Images (n, 3, size, size) float32 read from files on demand, duck-typing the tensors of a data view.

    x[i] / x[slice] / x[index array] decode with the evaluation transform (resize, normalise); `read(idx, gen)`
    is a training read, augmented when `augment` (the generator seeds the random transforms); `subset(idx)`
    selects files without reading them; `to(device)` says where decoded batches go."""

    paths: tuple[str, ...]
    augment: bool = False
    size: int = IMAGE_SIZE
    device: str = "cpu"
    recipe: str = "domainbed"  # the transforms: DomainBed's, or Healthcare FDA's ("healthcare", fda_ray.data.medical_csv)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self.paths), 3, self.size, self.size)

    def __len__(self) -> int:
        return len(self.paths)

    def to(self, device: str | torch.device, *args, **kwargs) -> "ImageFiles":
        return replace(self, device=str(torch.device(device)))

    def subset(self, idx: Sequence[int] | np.ndarray | torch.Tensor) -> "ImageFiles":
        return replace(self, paths=tuple(self.paths[int(i)] for i in _as_list(idx)))

    def _decode(self, idx: list[int], augment: bool) -> torch.Tensor:
        tf = _transform(self.size, augment, self.recipe)
        out = torch.stack([tf(_pil_loader(self.paths[i])) for i in idx]) if idx else \
            torch.zeros(0, 3, self.size, self.size)
        return out.to(self.device)  # (b, 3, size, size)

    def __getitem__(self, key) -> torch.Tensor:
        if isinstance(key, slice):
            return self._decode(list(range(len(self.paths)))[key], False)
        if isinstance(key, int):
            return self._decode([key], False)[0]
        return self._decode(_as_list(key), False)

    def read(self, idx, gen: torch.Generator) -> torch.Tensor:
        """A training batch: augmented if this environment is, with torch's RNG seeded from `gen` while the
        random transforms draw (torchvision's transforms take no generator)."""
        if not self.augment:
            return self[idx]
        seed = int(torch.randint(0, 2 ** 62, (1,), generator=gen))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self._decode(_as_list(idx), True)


@functools.lru_cache(maxsize=None)
def _transform(size: int, augment: bool, recipe: str = "domainbed"):
    """DomainBed's evaluation or augmentation transform (built once per process, not per batch), or Healthcare FDA's
    (the authors' code, docs/authors-code.md): training reads Resize(256, 256) -> RandomResizedCrop(224, scale 0.9-1)
    -> horizontal flip, evaluation Resize(224, 224) (their code evaluates at 256: a faithful-mode detail not
    kept), both normalised by (0.5, 0.5, 0.5)."""
    from torchvision import transforms

    if recipe == "digits":  # FedWCA's Digit-Five: SHOT's digit transforms (resize, normalise by 0.5), no augmentation
        return transforms.Compose([transforms.Resize((size, size)), transforms.ToTensor(),
                                   transforms.Normalize((0.5,) * 3, (0.5,) * 3)])
    if recipe == "healthcare":
        norm = [transforms.ToTensor(), transforms.Normalize((0.5,) * 3, (0.5,) * 3)]
        if not augment:
            return transforms.Compose([transforms.Resize((size, size)), *norm])
        return transforms.Compose([transforms.Resize((256, 256)), transforms.RandomResizedCrop(size, scale=(0.9, 1.0)),
                                   transforms.RandomHorizontalFlip(), *norm])
    norm = [transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    if not augment:
        return transforms.Compose([transforms.Resize((size, size)), *norm])
    return transforms.Compose([transforms.RandomResizedCrop(size, scale=(0.7, 1.0)), transforms.RandomHorizontalFlip(),
                               transforms.ColorJitter(0.3, 0.3, 0.3, 0.3), transforms.RandomGrayscale(), *norm])


def _as_list(idx) -> list[int]:
    if isinstance(idx, torch.Tensor):
        return idx.detach().cpu().reshape(-1).tolist()
    return [int(i) for i in np.asarray(idx).reshape(-1)]


def take(x: torch.Tensor | ImageFiles, idx: np.ndarray) -> torch.Tensor | ImageFiles:
    """Rows idx of a data view's x: a tensor's rows, or an ImageFiles' files (unread)."""
    if isinstance(x, ImageFiles):
        return x.subset(idx)
    return x[torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64))]


def concat(xs: Sequence[torch.Tensor | ImageFiles]) -> torch.Tensor | ImageFiles:
    """Data views' x one after the other: tensors concatenated, or one ImageFiles of every file (unread; the
    first's transforms)."""
    if isinstance(xs[0], ImageFiles):
        return replace(xs[0], paths=tuple(p for x in xs for p in x.paths))
    return torch.cat(list(xs))


def with_augmentation(x: torch.Tensor | ImageFiles, on: bool) -> torch.Tensor | ImageFiles:
    return replace(x, augment=on) if isinstance(x, ImageFiles) else x
