"""What one FDA run's data is once it is partitioned: the `Setting` (who holds which samples). The partitions
that build it from a dataset and a config are fda_ray.runtime.partitions.
"""
from __future__ import annotations

from dataclasses import dataclass

from fda_ray.core.multitask import AuxTasks
from fda_ray.data.base import Pair


@dataclass(frozen=True)
class Setting:
    """The data of one FDA run: source shards, the target's labelled set, its whole pool, its test set."""

    sources: tuple[Pair, ...]
    target_train: Pair  # labelled target samples
    target_pool: Pair  # all of the target's training-domain data (the oracle trains on it)
    target_test: Pair
    noise: float
    num_outputs: int  # the main head's width (1 for a binary task)
    input_shape: tuple[int, ...]
    task: str
    aux_tasks: AuxTasks = ()  # Healthcare FDA's auxiliary labels: y is (n, 1 + K) (fda_ray.core.multitask)
    # partition domain_shards (FSSDA): per source client, one Pair per source domain; per device, its target
    # shard with label -1 on the unlabelled samples
    source_parts: tuple[tuple[Pair, ...], ...] = ()
    target_parts: tuple[Pair, ...] = ()
    # partition domain_clients (FedWCA): per target client, (train with label -1, validation, test), and its domain
    client_parts: tuple[tuple[Pair, Pair, Pair], ...] = ()
    client_domains: tuple[int, ...] = ()
    # model selection (cfg.val_share, cfg.source_val_share): held-out labelled target samples, and the sources'
    # held-out samples together; never trained on
    target_val: Pair | None = None
    source_val: Pair | None = None
