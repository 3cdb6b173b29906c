"""The round's contract: what the server half of an algorithm sends a client (`ClientTask`, with the named
`ServerState` tensors it reads), what comes back (`ClientResult`), and one round's plan (`Round`). These types
are shared by the algorithms (which plan and aggregate), the client runtime (which runs tasks) and the
executors (which ship them); see docs/design.md for the whole loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

ServerState = dict[str, torch.Tensor]  # named flat vectors: {"global"} | {"global", "source", ...}


@dataclass(frozen=True)
class ClientTask:
    """What one client does in one round (Flower's FitIns): a registered recipe, its inputs and settings."""

    client: int  # sources 0..N-1, the target N
    recipe: str  # a local recipe of fda_ray.train.client.RECIPES: "epoch", ...
    round: int  # the round it belongs to: seeds its draws
    hparams: Mapping[str, Any] = field(default_factory=dict)  # lr, batch, ...
    inputs: tuple[str, ...] = ("global",)  # the ServerState entries it starts from (shipped once per round)
    data: str = "train"  # which of the client's data views it trains on ("train", "pool", ...)
    purpose: str = "train"  # seeds: (seed, round, client, purpose + "/shuffle" | "/noise")


@dataclass
class ClientResult:
    """What a task sends back: tensors for the server half, scalars for the logs."""

    client: int
    tensors: dict[str, torch.Tensor]  # "delta" (M,), "step_deltas" (B, M), "weights" (M,), ...
    scalars: dict[str, float]  # "num_samples", "num_steps", "loss", ...
    seconds: float = 0.0  # wall time of the task where the client runs


@dataclass(frozen=True)
class Round:
    """One round's plan: its phase (a row's "phase" column) and the clients' tasks."""

    phase: str
    tasks: tuple[ClientTask, ...]


def input_names(state: ServerState, tasks: Sequence[ClientTask]) -> list[str]:
    """The server-state entries a round's tasks read, each once; a missing one is an error naming the task."""
    for t in tasks:
        for name in t.inputs:
            if name not in state:
                raise ValueError(f"client {t.client}'s task {t.recipe!r} needs server state {name!r}; the state "
                                 f"holds {', '.join(state)}")
    return list(dict.fromkeys(n for t in tasks for n in t.inputs))
