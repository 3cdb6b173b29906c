"""Domains built from Fashion-MNIST by image transforms (docs/datasets.md), pure functions.

The FSSDA paper (FSSDA: Office-31 pairs) and FedWCA (FedWCA: Digit-Five) need several visual domains; here they are
Fashion-MNIST images put through one transform each, every domain on its own disjoint slice of the pool
(docs/datasets.md). Images are (n, 1, 28, 28) in [0, 1]; a domain's images are a deterministic function of
(construction seed, domain, index).

  clean          the image
  rotate-<deg>   rotated by deg degrees, DomainBed's PIL path (bilinear, fill 0)
  invert         1 - x
  noise-<std>    x + N(0, std^2), drawn once per image (a fixed domain, unlike the noise grid's per-read noise)
  edges          Sobel gradient magnitude, scaled to [0, 1] per image (sketch-like)
  lowcontrast    0.3 x + 0.35
  fmnist-m       MNIST-M-like, 3 channels: |texture - x| with a per-image colour texture (a smooth random
                 colour field: bilinear upsampling of 4 x 4 random colours), as MNIST-M blends digits with
                 BSDS500 photo patches we do not have

`apply_domain(name, x, gen)` runs one; `to_rgb` replicates a grey domain to 3 channels (FMNIST-5 mixes them with
fmnist-m). Names are parsed by `parse_domain` with a one-line error on a bad one.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

FIXED = ("clean", "invert", "edges", "lowcontrast", "fmnist-m")
PARAMETRIC = ("rotate", "noise")


def parse_domain(name: str) -> tuple[str, float | None]:
    """('rotate', 30.0) from 'rotate-30', ('clean', None) from 'clean'."""
    if name in FIXED:
        return name, None
    kind, _, value = name.partition("-")
    if kind in PARAMETRIC and value:
        try:
            return kind, float(value)
        except ValueError:
            pass
    raise ValueError(f"domain={name!r} is invalid: one of {', '.join(FIXED)}, rotate-<degrees>, noise-<std>")


def rotate(x: torch.Tensor, degrees: float) -> torch.Tensor:
    """DomainBed's rotation: each image as an 8-bit PIL image, torchvision's rotate (bilinear, fill 0)."""
    from PIL import Image
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.functional import rotate as tv_rotate

    u8 = (x[:, 0] * 255).round().clamp(0, 255).to(torch.uint8).numpy()
    out = [np.asarray(tv_rotate(Image.fromarray(a), float(degrees), interpolation=InterpolationMode.BILINEAR,
                                fill=(0,))) for a in u8]
    return torch.from_numpy(np.stack(out) if out else np.zeros((0,) + u8.shape[1:], np.uint8)).unsqueeze(1).float() / 255


def edges(x: torch.Tensor) -> torch.Tensor:
    """Sobel magnitude (n, 1, H, W), each image divided by its maximum (an empty image stays 0)."""
    kx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]).view(1, 1, 3, 3)
    gx = F.conv2d(x, kx, padding=1)
    gy = F.conv2d(x, kx.transpose(2, 3), padding=1)
    mag = torch.sqrt(gx ** 2 + gy ** 2)  # (n, 1, H, W)
    peak = mag.flatten(1).max(1).values.clamp_min(1e-12).view(-1, 1, 1, 1)
    return mag / peak


def textures(n: int, size: int, gen: torch.Generator) -> torch.Tensor:
    """(n, 3, size, size) smooth random colour fields in [0, 1]."""
    coarse = torch.rand(n, 3, 4, 4, generator=gen)
    return F.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=True)


def to_rgb(x: torch.Tensor) -> torch.Tensor:
    return x if x.shape[1] == 3 else x.expand(-1, 3, -1, -1).contiguous()


def apply_domain(name: str, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The domain `name`'s images from clean images x (n, 1, H, W) in [0, 1]; gen draws what the domain draws."""
    kind, value = parse_domain(name)
    if kind == "clean":
        return x.clone()
    if kind == "rotate":
        return rotate(x, value)
    if kind == "invert":
        return 1.0 - x
    if kind == "noise":
        return x + value * torch.randn(x.shape, generator=gen)
    if kind == "edges":
        return edges(x)
    if kind == "lowcontrast":
        return 0.3 * x + 0.35
    return (textures(len(x), x.shape[-1], gen) - x).abs()  # fmnist-m: (n, 3, H, W)
