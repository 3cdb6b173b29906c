"""Healthcare FDA (weakly-supervised FDA for healthcare): auxiliary-label training and gradient projection (GP).

Roles (Healthcare FDA Secs. 2-3): N labelled sources, one target with n_l labelled samples; a multi-head model (a
shared trunk, a 128-d layer, the main head and one head per auxiliary task, fda_ray.train.models.MultiHead). The
sources train on L_main + alpha L_aux (Eq. 3, RunConfig.aux_alpha; fda_ray.core.multitask), the target on L_main
only. Every round, with theta = the global model the sources start from (docs/methods.md):

  fedavg_finetune[_auxinfo]   (Alg. 1, *online* fine-tuning; not finetune_offline) step 0: the sources train
                              one epoch, theta_bar = sum_i (n_i / n) theta_i; step 1: the target trains theta_bar
                              one epoch on its labelled samples, and that is the new global model
  fedavg_finetune_gp[_auxinfo]  (Alg. 3) the sources and the target train from theta in parallel;
                              G_T = theta'_T - theta, Delta_i = theta_i - theta; per layer l (every flat tensor
                              but the auxiliary heads, which keep their value):
                                  c_il = cos(Delta_i^l, G_T^l), kept where > 0               (Eqs. 4-5)
                                  P^l = sum_i c_il (n_i / n) A_i Delta_i^l                    (Eq. 6 with Eq. 8)
                                  theta^l <- theta^l + beta P^l + (1 - beta) G_T^l            (Eq. 7, beta = 0.5)
                              = fda_ray.algorithms.aggregation.fedgp with the cosine projection, the layer mask and A_i
  The _auxinfo names differ only in aux_alpha's default (1, the paper's; the plain names: 0).
  Table 2's other rows: FedAvg = `source_only`, Oracle = `oracle` (fda_ray.algorithms.fda).

Traps (docs/methods.md, docs/authors-code.md): Healthcare FDA's Eq. 7 puts its letter beta on G_T; fda-ray's `beta` is the source
weight (the text's and the code's reading; at 0.5 the same). The alignment A_i (Eq. 8): "paper" (lr_T / lr_S) (1 / r_S)
(n_l / bs_T) / (n_i / bs_S) with r_S = 1 local epoch, or "code" (lr_T / lr_S) (n_l / bs_T) / len(loader_i).

The paper (HealthcareParams' defaults) against the authors' code (enyijiang/MIDRC at 95291b2, federated/
federated_{chexpert,mimic,midrc}_multi.py and models/resnet_mlt.py; each a HealthcareParams field or a RunConfig field,
and all of them together the `code` profile of the Healthcare FDA grids, fda_ray/papers/grids.py):
  GP warm-up (Alg. 3 has none): in the first gp_warmup_rounds rounds the server first averages the sources
      (theta := theta_bar), the target then trains from theta_bar and Delta_i is taken relative to it. The scripts
      at 95291b2: `if i < 5` on every dataset (their first commit, 5ee9f7f: num_global_epochs // 5 = 16 on MIMIC,
      5 on MIDRC, none on CheXpert).
  Learning rates: the paper's 1e-3 / 2e-4 (the datasets' defaults) or the code's 1e-4 / 2e-5 (`learning_rates code`).
  Head outputs (`head_activation`): the paper's heads "output several classification logits" (A.1; linear); the
      code applies LeakyReLU(0.2) to every head's output, so the auxiliary cross-entropies read leaky_relu(logits)
      and the main output is leaky_relu(logit) (monotone in the logit: accuracy and AUC read it as the logit).
  The main loss (`binary_loss`): BCE-with-logits on the logit, or the code's BCEWithLogitsLoss()(sigmoid(output),
      labels), a double sigmoid (fda_ray.core.multitask), on the sources and in the target's fine-tuning.
  Rounds and batches (RunConfig): the scripts' defaults at 95291b2 are CheXpert 80 rounds, MIMIC 60, MIDRC 50
      (Healthcare FDA App. A.3: 50, 80, 50); batch 32 / 32 on CheXpert and MIMIC, source 8 / target 16 on MIDRC.
head_activation and binary_loss reach the healthcare methods only: the grids' FedAvg (source_only) and Oracle rows keep
the linear heads and the plain loss (in the authors' code those baselines have the leaky output and the double sigmoid
too).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import torch

from fda_ray.algorithms.aggregation import (fedavg, fedgp, frozen_layers_mask, layer_cosines, layer_stats,
                                            source_weights)
from fda_ray.algorithms.base import Algorithm, Params, param
from fda_ray.core.contract import ClientResult, ClientTask, Round, ServerState
from fda_ray.core.multitask import BINARY_LOSSES
from fda_ray.train.client import epoch_steps
from fda_ray.train.models import HEAD_ACTIVATIONS, MultiHead

CODE_LEARNING_RATES = (1e-4, 2e-5)  # the authors' code defaults (lr_S, lr_T); the paper's are 1e-3 / 2e-4


@dataclass(frozen=True)
class HealthcareParams(Params):
    family = "healthcare"
    gp_warmup_rounds: int = param(0, "GP methods: the first rounds in which the server averages the sources "
                                     "before the target trains and GP runs (the authors' scripts at 95291b2: 5 on "
                                     "every dataset; the paper: 0)", low=0, integer=True)
    alignment: str = param("paper", "GP's magnitude alignment A_i: paper (Eq. 8: (lr_T/lr_S)(n_l/bs_T)/(n_i/bs_S)) "
                                    "or code ((lr_T/lr_S)(n_l/bs_T)/source steps per epoch)", choices=("paper", "code"))
    learning_rates: str = param("paper", "lr_source / lr_target where unset: paper (the dataset's: 1e-3 / 2e-4 on "
                                         "Healthcare FDA's datasets) or code (the authors' code: 1e-4 / 2e-5)",
                                choices=("paper", "code"))
    head_activation: str = param("linear", "the multi-head model's head outputs: linear (the paper's logits) or "
                                           "leaky_relu (the authors' code: LeakyReLU(0.2) on every head's output)",
                                 choices=HEAD_ACTIVATIONS)
    binary_loss: str = param("logit", "a binary main task's training loss: logit (BCE-with-logits on the logit) or "
                                      "sigmoid (the authors' code: BCE-with-logits on sigmoid(output), a double "
                                      "sigmoid); evaluation is the same for both", choices=BINARY_LOSSES)



class Healthcare(Algorithm):
    """Healthcare FDA's FedAvg Finetune and FedAvg Finetune GP; the variants set the class attributes."""

    family = "healthcare"
    Params = HealthcareParams
    gp: ClassVar[bool] = False

    @classmethod
    def resolve(cls, cfg, defaults: Mapping[str, Any]) -> dict[str, Any]:
        fill: dict[str, Any] = {}
        if cfg.warmup_rounds is None:
            fill["warmup_rounds"] = 0  # Healthcare FDA's own warm-up is gp_warmup_rounds, inside the rounds
        p = HealthcareParams.build(cfg.params.get("healthcare", {}))
        if p.learning_rates == "code":
            if cfg.lr_source is None:
                fill["lr_source"] = CODE_LEARNING_RATES[0]
            if cfg.lr_target is None:
                fill["lr_target"] = CODE_LEARNING_RATES[1]
        return fill

    @classmethod
    def uses(cls, cfg) -> dict[str, bool]:
        return {"beta": cls.gp, "projection": cls.gp, "filter": cls.gp, "lr_source": True, "batch_source": True,
                "aux_alpha": True}

    @classmethod
    def planned_rounds(cls, cfg) -> int:
        return cfg.rounds

    def __init__(self, cfg, setting, layout, model=None) -> None:
        super().__init__(cfg, setting, layout, model)
        if cfg.warmup_rounds:
            raise ValueError(f"warmup_rounds={cfg.warmup_rounds} is invalid for method {self.name}: Healthcare FDA's "
                             "warm-up is --healthcare-gp-warmup-rounds (FedAvg inside the rounds), not extra rounds")
        self._configure_model(cfg, setting, model)
        if cfg.aux_alpha and not setting.aux_tasks:
            raise ValueError(f"aux_alpha={cfg.aux_alpha} is invalid: dataset {cfg.dataset!r} has no auxiliary labels "
                             "(datasets with them: fmnist-conditions, the medical CSV datasets); use aux_alpha 0")
        counts = [len(x) for x, _ in setting.sources]
        self.weights = source_weights(counts)  # (N,) n_i / sum n
        # (L,) the auxiliary heads: GP leaves them at their value (the authors' update_global)
        self.frozen = frozen_layers_mask(layout.names, (MultiHead.AUX_PREFIX,))
        n_l = len(setting.target_train[0])
        ratio = (cfg.lr_target / cfg.lr_source) * (n_l / cfg.batch_target)
        if self.params.alignment == "paper":  # Eq. 8 with r_S = 1: n_i / bs_S as a real number
            per = torch.tensor([c / cfg.batch_source for c in counts], dtype=torch.float64)
        else:  # the code: len(source loader)
            per = torch.tensor([epoch_steps(c, cfg.batch_source, cfg.drop_last) for c in counts], dtype=torch.float64)
        self.align = ratio / per  # (N,) A_i
        self._pending: torch.Tensor | None = None  # a warm-up round's Delta_i relative to theta_bar (N, M)

    def _configure_model(self, cfg, setting, model) -> None:
        """head_activation on the initial model, which the experiment builds before the algorithm and copies
        into every client and the evaluator after it (fda_ray.runtime.experiment); a plain attribute of MultiHead,
        so the flat layout and the initial weights do not change. binary_loss needs a binary task."""
        act, bl = self.params.head_activation, self.params.binary_loss
        if isinstance(model, MultiHead):
            model.head_activation = act
        elif act != "linear":
            raise ValueError(f"healthcare.head_activation={act!r} is invalid for model={cfg.model!r}: it needs a "
                             "multi-head model (multitask_cnn, resnet18_multitask); use linear")
        if bl != "logit" and setting.task != "binary":
            raise ValueError(f"healthcare.binary_loss={bl!r} is invalid for dataset {cfg.dataset!r}: its main task is "
                             f"{setting.task}, not binary; use logit")

    # ---------------------------------------------------------------- one round

    def _source_tasks(self, r: int) -> tuple[ClientTask, ...]:
        cfg = self.cfg
        return tuple(ClientTask(i, "epoch", r, {"lr": cfg.lr_source, "batch": cfg.batch_source,
                                                "aux_alpha": float(cfg.aux_alpha),
                                                "binary_loss": self.params.binary_loss})
                     for i in range(self.num_sources))

    def _target_task(self, r: int, purpose: str) -> ClientTask:
        cfg = self.cfg  # the target fine-tunes on the main task only (Healthcare FDA section 3), with the sources' loss l
        return ClientTask(self.target, "epoch", r, {"lr": cfg.lr_target, "batch": cfg.batch_target,
                                                    "binary_loss": self.params.binary_loss}, purpose=purpose)

    def _warmup(self, r: int) -> bool:
        return self.gp and r < self.params.gp_warmup_rounds

    def plan_round(self, r: int, state: ServerState) -> Round | None:
        if r >= self.cfg.rounds:
            return None
        if self.gp and not self._warmup(r):
            return Round("main", (*self._source_tasks(r), self._target_task(r, "train")))
        return Round("warmup" if self.gp else "main", self._source_tasks(r))

    def plan_step(self, r: int, step: int, state: ServerState) -> Round | None:
        if step == 1 and (not self.gp or self._warmup(r)):
            return Round("finetune", (self._target_task(r, "finetune"),))
        return None

    def _sources(self, results: Mapping[int, ClientResult]) -> torch.Tensor:
        return torch.stack([results[i].tensors["delta"] for i in range(self.num_sources)])  # (N, M)

    def aggregate(self, r: int, state: ServerState, results: Mapping[int, ClientResult]
                  ) -> tuple[ServerState, dict[str, Any]]:
        src = self._sources(results)  # (N, M)
        avg = fedavg(src, weights=self.weights, impl=self.cfg.aggregation_impl)  # (M,) sum_i (n_i/n) Delta_i
        metrics = {"train_loss_sources": float(sum(results[i].scalars["loss"] for i in range(self.num_sources))
                                               / self.num_sources)}
        if not self.gp or self._warmup(r):
            if self.gp:  # Delta_i relative to theta_bar, for this round's GP after the target's step
                self._pending = src - avg.unsqueeze(0)
            return {"global": state["global"] + avg}, metrics  # theta_bar, which the target fine-tunes next
        update, gp_metrics = self._gp(results[self.target].tensors["delta"], src)
        metrics.update(gp_metrics, train_loss_target=results[self.target].scalars["loss"])
        return {"global": state["global"] + update}, metrics

    def aggregate_step(self, r: int, step: int, state: ServerState, results: Mapping[int, ClientResult]
                       ) -> tuple[ServerState, dict[str, Any]]:
        res = results[self.target]
        metrics: dict[str, Any] = {"train_loss_target": res.scalars["loss"]}
        if not self.gp:  # FedAvg Finetune: the fine-tuned average is the model
            return {"global": state["global"] + res.tensors["delta"]}, metrics
        assert self._pending is not None
        update, gp_metrics = self._gp(res.tensors["delta"], self._pending)
        self._pending = None
        metrics.update(gp_metrics)
        return {"global": state["global"] + update}, metrics

    def _gp(self, target: torch.Tensor, sources: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        """GP's update (M,) from G_T (M,) and the Delta_i (N, M), and its logged numbers."""
        cfg, offsets = self.cfg, self.layout.offsets
        stats = layer_stats(target, sources, offsets, impl=cfg.aggregation_impl)
        update = fedgp(target, sources, offsets, beta=cfg.beta, weights=self.weights, align=self.align,
                       filter=cfg.filter, projection=cfg.projection, impl=cfg.aggregation_impl, stats=stats,
                       frozen=self.frozen)
        cos = layer_cosines(*stats)[:, ~self.frozen]  # (N, L') the projected layers
        return update, {"cosine_mean_i": cos.mean(1).tolist(), "filtered_share_i": (cos <= 0).double().mean(1).tolist()}


class FedAvgFinetune(Healthcare):
    name = "fedavg_finetune"


class FedAvgFinetuneAuxInfo(Healthcare):
    name, default_aux_alpha = "fedavg_finetune_auxinfo", 1.0


class FedAvgFinetuneGP(Healthcare):
    name, gp = "fedavg_finetune_gp", True


class FedAvgFinetuneAuxInfoGP(Healthcare):
    name, gp, default_aux_alpha = "fedavg_finetune_auxinfo_gp", True, 1.0


FAMILY: tuple[type[Healthcare], ...] = (FedAvgFinetune, FedAvgFinetuneAuxInfo, FedAvgFinetuneGP, FedAvgFinetuneAuxInfoGP)
