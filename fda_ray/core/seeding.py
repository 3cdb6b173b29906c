"""Seeds derived per (trial seed, round, client, purpose), so every random draw is reproducible.

Two draws that differ in any coordinate get independent streams; the same coordinates always give the
same stream, whichever executor (serial or Ray) or process makes the draw. (numpy's generators use the 63 bits
derived; torch's CPU generator keeps the low 32, so two coordinates share a torch stream with probability 2^-32 a
pair: docs/design.md, "Seeding".)
"""
from __future__ import annotations

import zlib

import numpy as np
import torch

# Round / client coordinates for draws that belong to no round or no client.
NO_ROUND = -1
NO_CLIENT = -1


def derive_seed(seed: int, round_idx: int = NO_ROUND, client: int = NO_CLIENT, purpose: str = "") -> int:
    """A 63-bit seed for one (trial seed, round, client, purpose) coordinate."""
    # crc32 gives a stable integer for the purpose on every platform and Python run (hash() does not).
    words = [seed & 0xFFFFFFFF, seed >> 32, round_idx + 2, client + 2, zlib.crc32(purpose.encode())]
    state = np.random.SeedSequence([w & 0xFFFFFFFF for w in words]).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1])) & ((1 << 63) - 1)


def generator(seed: int, round_idx: int = NO_ROUND, client: int = NO_CLIENT, purpose: str = "",
              device: str | torch.device = "cpu") -> torch.Generator:
    """A torch.Generator on `device` seeded for one coordinate."""
    g = torch.Generator(device=device)
    g.manual_seed(derive_seed(seed, round_idx, client, purpose))
    return g


def np_rng(seed: int, round_idx: int = NO_ROUND, client: int = NO_CLIENT, purpose: str = "") -> np.random.Generator:
    """A numpy Generator seeded for one coordinate (data partitions, synthetic data)."""
    return np.random.default_rng(derive_seed(seed, round_idx, client, purpose))
