"""The FDA methods by name: which clients train each round and which aggregation rule makes the update.

  source_only       FedAvg of the sources (the target never trains)
  target_only       the target's own delta (beta = 0)
  fedda, fedgp      the static rules with cfg.beta (seed 001)
  fedda_auto        FedDA with beta_i from the estimators (seed 004), rule "fedda"
  fedgp_auto        FedGP with beta_i from the estimators, rule cfg.auto_beta_rule ("fedgp_thresh" or "fedgp")
  finetune_offline  FedAvg for all rounds, then cfg.finetune_epochs epochs of fine-tuning on the target
  oracle            target_only trained on all of the target's training-domain data
Warm-up rounds are FedAvg over the sources for every method (REFERENCE.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fda_ray.aggregation import fedavg, fedda, fedgp
from fda_ray.registry import Registry


@dataclass(frozen=True)
class Method:
    name: str
    rule: str  # "fedavg" | "target" | "fedda" | "fedgp"
    train_sources: bool
    train_target: bool
    auto_rule: str | None = None  # "fedda" | "fedgp" (the config may refine fedgp to fedgp_thresh)
    finetune: bool = False
    oracle: bool = False

    @property
    def uses_beta(self) -> bool:
        return self.rule in ("fedda", "fedgp")


METHODS: Registry[Method] = Registry("method")
for _m in (
    Method("source_only", "fedavg", train_sources=True, train_target=False),
    Method("target_only", "target", train_sources=False, train_target=True),
    Method("fedda", "fedda", train_sources=True, train_target=True),
    Method("fedgp", "fedgp", train_sources=True, train_target=True),
    Method("fedda_auto", "fedda", train_sources=True, train_target=True, auto_rule="fedda"),
    Method("fedgp_auto", "fedgp", train_sources=True, train_target=True, auto_rule="fedgp"),
    Method("finetune_offline", "fedavg", train_sources=True, train_target=False, finetune=True),
    Method("oracle", "target", train_sources=False, train_target=True, oracle=True),
):
    METHODS.add(_m.name, _m)


def combine(method: Method, target: torch.Tensor | None, sources: torch.Tensor | None, offsets: torch.Tensor, *,
            weights: torch.Tensor, beta: float | torch.Tensor, align: torch.Tensor | None,
            filter: bool = True, projection: str = "cosine", impl: str | None = None,
            stats: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """The update (M,) of one round of `method` from the round's target delta (M,) and source deltas (N, M);
    stats: their layer_stats, if already computed (FedGP uses them)."""
    if method.rule == "fedavg":
        assert sources is not None
        return fedavg(sources, weights=weights, impl=impl)
    if method.rule == "target":
        assert target is not None
        return target.clone()
    assert target is not None and sources is not None
    if method.rule == "fedda":
        return fedda(target, sources, beta=beta, weights=weights, impl=impl)
    return fedgp(target, sources, offsets, beta=beta, weights=weights, align=align, filter=filter, projection=projection,
                 impl=impl, stats=stats)
