"""Run configuration: one frozen, validated dataclass, and the seeds' settings per dataset and method.

Fields left as None take the authors' settings for the dataset and method (PAPER_DEFAULTS, REFERENCE.md)
when the config is resolved; `RunConfig.resolved()` returns the fully specified config that a run uses and
records. Invalid values raise ValueError naming the field, the value and what is allowed.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

PARTITIONS = ("homo", "label_shift", "classes4", "domains")
PROJECTIONS = ("cosine", "exact")
EXECUTORS = ("serial", "ray")
AUTO_BETA_RULES = ("fedda", "fedgp", "fedgp_thresh")

# The authors' settings (REFERENCE.md, seed 004 C.6): Adam, 1 local epoch, 2 warm-up rounds, 50 rounds.
PAPER_DEFAULTS: dict[str, dict[str, Any]] = {
    "fashion-mnist": dict(model="simple_cnn", partition="homo", lr_source=0.01, lr_target=0.005,
                          batch_source=64, batch_target=16, auto_batch_target=4, auto_lr_factor=0.1,
                          target_labelled=100, target_fraction=None, auto_beta_rule="fedgp_thresh", num_sources=9),
    "cifar10": dict(model="simple_cnn", partition="classes4", lr_source=0.005, lr_target=0.0025,
                    batch_source=64, batch_target=16, auto_batch_target=16, auto_lr_factor=0.35,
                    target_labelled=None, target_fraction=0.1, auto_beta_rule="fedgp_thresh", num_sources=9),
    # Not in the papers' tables: the synthetic data is run by the diagnostics experiment; these make
    # the engine usable on it.
    "synthetic": dict(model="mlp_sigmoid", partition="domains", lr_source=0.01, lr_target=0.01,
                      batch_source=64, batch_target=16, auto_batch_target=4, auto_lr_factor=1.0,
                      target_labelled=100, target_fraction=None, auto_beta_rule="fedgp", num_sources=8),
}
# The labelled target share of the partitions whose target test set is the rest of the target's part.
PARTITION_LABELLED_FRACTION: dict[str, float] = {"label_shift": 0.15, "classes4": 0.10}


def _err(field: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{field}={value!r} is invalid: {allowed}")


@dataclass(frozen=True)
class RunConfig:
    """One federated domain adaptation run (one trial)."""

    dataset: str = "fashion-mnist"
    method: str = "fedgp"
    seed: int = 0
    noise: float = 0.0  # std of Gaussian noise on target train and test images (in [0, 1] pixel units)
    eta: float = 0.5  # label-shift share (partition="label_shift"); 0.5 = no shift
    rounds: int = 50
    warmup_rounds: int = 2
    num_sources: int | None = None  # None: 9 (8 for synthetic: D_2..D_9)
    beta: float = 0.5  # static beta of fedda / fedgp (weight of the source side)
    projection: str = "cosine"
    filter: bool = True
    partition: str | None = None
    model: str | None = None
    model_weights: str | None = None  # resnet18: a local ImageNet state-dict file (no hub download)
    lr_source: float | None = None
    lr_target: float | None = None
    batch_source: int | None = None
    batch_target: int | None = None
    auto_lr_factor: float | None = None  # both lrs are multiplied by it after warm-up in auto methods
    auto_beta_rule: str | None = None  # fedgp_auto: "fedgp" (plain) or "fedgp_thresh"
    target_labelled: int | None = None  # labelled target samples (count) ...
    target_fraction: float | None = None  # ... or share of the target's data
    finetune_epochs: int | None = None  # finetune_offline: epochs after FedAvg (default: rounds)
    samples_per_client: int | None = None  # cap on each source's shard (quick runs, tests); None = all
    test_samples: int | None = None  # cap on the target test set; None = all
    eval_noise: tuple[float, ...] = ()  # extra noise levels at which the global model is also evaluated
    # Log the estimators' sigma^2, d_i^2, tau^2 d_i^2 and every rule's Delta^2 each main round. Needs the
    # target's steps and the sources' updates: methods that do not use one side train it anyway (its own
    # seeds, so the run's numbers do not change). None: on, except where that means training every source
    # each round for a method that uses none (target_only, oracle).
    log_estimates: bool | None = None
    data_dir: str | None = None
    download: bool = False
    threads: int | None = None  # torch threads in this process; None = torch's default
    aggregation_impl: str = "kernel"  # "kernel" (C++/CUDA, fda_ray.kernels) or "reference" (the PyTorch specification)
    device: str = "cpu"  # the driver's device (evaluation); under Ray clients use a GPU iff gpus_per_client > 0
    # Execution: where clients train. None of these changes the numbers a run produces.
    executor: str = "serial"  # "serial" (in this process) or "ray" (one actor per client)
    cpus_per_client: float | None = None  # Ray: CPUs reserved per client actor; None = share the cluster's CPUs
    gpus_per_client: float = 0.0  # Ray: fraction of a GPU per client actor (0 = CPU clients)
    clients_per_actor: int = 1  # Ray: clients hosted (and trained in turn) by one actor; >1 for fewer cores than clients
    ray_address: str | None = None  # Ray: an existing cluster ("auto", "ray://..."); None = $RAY_ADDRESS or local
    client_retries: int = 3  # Ray: times a failed client round is redone (on a new actor) before the run stops

    def __post_init__(self) -> None:
        from fda_ray.data import DATASETS
        from fda_ray.methods import METHODS
        from fda_ray.models import MODELS

        if self.dataset not in DATASETS:
            raise _err("dataset", self.dataset, f"known datasets: {', '.join(DATASETS.names())}")
        if self.method not in METHODS:
            raise _err("method", self.method, f"known methods: {', '.join(METHODS.names())}")
        if self.model is not None and self.model not in MODELS:
            raise _err("model", self.model, f"known models: {', '.join(MODELS.names())}")
        if self.model_weights is not None and self.model not in (None, "resnet18"):
            raise _err("model_weights", self.model_weights, "only model='resnet18' loads pretrained weights")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise _err("seed", self.seed, "an integer >= 0")
        for name in ("noise",):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise _err(name, v, "a finite number >= 0")
        if not (0.0 <= self.eta <= 0.5):
            raise _err("eta", self.eta, "a share in [0, 0.5]")
        if not (0.0 <= self.beta <= 1.0):
            raise _err("beta", self.beta, "a number in [0, 1]")
        for name, lo in (("rounds", 1), ("warmup_rounds", 0), ("num_sources", 1)):
            v = getattr(self, name)
            if v is None and name == "num_sources":
                continue
            if not isinstance(v, int) or v < lo:
                raise _err(name, v, f"an integer >= {lo}")
        if self.projection not in PROJECTIONS:
            raise _err("projection", self.projection, f"one of {', '.join(PROJECTIONS)}")
        if self.partition is not None and self.partition not in PARTITIONS:
            raise _err("partition", self.partition, f"one of {', '.join(PARTITIONS)}")
        if self.auto_beta_rule is not None and self.auto_beta_rule not in AUTO_BETA_RULES:
            raise _err("auto_beta_rule", self.auto_beta_rule, f"one of {', '.join(AUTO_BETA_RULES)}")
        for name in ("lr_source", "lr_target", "auto_lr_factor"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise _err(name, v, "a finite number > 0")
        for name in ("batch_source", "batch_target", "target_labelled", "finetune_epochs", "samples_per_client",
                     "test_samples", "threads"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < (0 if name == "finetune_epochs" else 1)):
                raise _err(name, v, "a positive integer" if name != "finetune_epochs" else "an integer >= 0")
        if self.target_fraction is not None and not (0.0 < self.target_fraction <= 1.0):
            raise _err("target_fraction", self.target_fraction, "a share in (0, 1]")
        if self.target_labelled is not None and self.target_fraction is not None:
            raise _err("target_labelled", self.target_labelled, "give target_labelled or target_fraction, not both")
        if self.log_estimates not in (None, True, False):
            raise _err("log_estimates", self.log_estimates, "true, false or None (on unless the method trains no source)")
        for v in self.eval_noise:
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise _err("eval_noise", self.eval_noise, "finite noise levels >= 0")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise _err("device", self.device, "'cpu' or 'cuda[:i]'")
        if self.aggregation_impl not in ("kernel", "reference"):
            raise _err("aggregation_impl", self.aggregation_impl, "one of kernel, reference")
        if self.executor not in EXECUTORS:
            raise _err("executor", self.executor, f"one of {', '.join(EXECUTORS)}")
        if self.cpus_per_client is not None and not (
                isinstance(self.cpus_per_client, (int, float)) and 0 < self.cpus_per_client <= 1024):
            raise _err("cpus_per_client", self.cpus_per_client, "a number of CPUs > 0 (fractions allowed)")
        g = self.gpus_per_client
        if not (isinstance(g, (int, float)) and (0 <= g <= 1 or (g > 1 and float(g).is_integer()))):
            raise _err("gpus_per_client", g, "a fraction in [0, 1] or a whole number of GPUs")
        if not isinstance(self.clients_per_actor, int) or self.clients_per_actor < 1:
            raise _err("clients_per_actor", self.clients_per_actor, "an integer >= 1")
        if not isinstance(self.client_retries, int) or self.client_retries < 0:
            raise _err("client_retries", self.client_retries, "an integer >= 0")

    def replace(self, **changes: Any) -> "RunConfig":
        return dataclasses.replace(self, **changes)

    def resolved(self) -> "RunConfig":
        """This config with every None filled from PAPER_DEFAULTS for its dataset and method."""
        from fda_ray.methods import METHODS

        d = PAPER_DEFAULTS[self.dataset]
        auto = METHODS.get(self.method).auto_rule is not None
        fill: dict[str, Any] = {}
        for name in ("model", "partition", "lr_source", "lr_target", "batch_source", "auto_lr_factor", "auto_beta_rule",
                     "num_sources"):
            if getattr(self, name) is None:
                fill[name] = d[name]
        partition = self.partition or d["partition"]
        if self.batch_target is None:
            fill["batch_target"] = d["auto_batch_target"] if auto else d["batch_target"]
        if self.target_labelled is None and self.target_fraction is None:
            if partition in PARTITION_LABELLED_FRACTION:
                fill["target_fraction"] = PARTITION_LABELLED_FRACTION[partition]
            else:
                fill["target_labelled"] = d["target_labelled"]
                fill["target_fraction"] = d["target_fraction"]
        if self.finetune_epochs is None:
            fill["finetune_epochs"] = self.rounds
        if self.log_estimates is None:
            fill["log_estimates"] = METHODS.get(self.method).train_sources
        return dataclasses.replace(self, **fill) if fill else self

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["eval_noise"] = list(self.eval_noise)
        return out
