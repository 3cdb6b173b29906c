"""The FDA family of the FedGP and Auto-weighted FDA papers (Algorithm 1, App. C.1) and its baselines, on the algorithm contract.

    warm-up rounds (r < warmup_rounds): the sources train one epoch; FedAvg of their deltas
    main rounds: sources and target train one local epoch from the global weights; beta_i = the static beta,
        or auto-weighted from the estimators (Auto-weighted FDA Eq. 7-8 on the target's per-step deltas); the method's
        rule makes the update (FedDA, FedGP Def. 3.2; FedGP, Def. 3.1, layer by layer; the rule table
        fda_ray.algorithms.aggregation.RULES); global += update
    fine-tuning (finetune_offline): after the rounds, epochs of the target alone from the FedAvg weights

  source_only       FedAvg of the sources (the target never trains)
  target_only       the target's own delta (beta = 0)
  fedda, fedgp      the static rules with beta (FedGP)
  fedda_auto        FedDA with beta_i from the estimators (Auto-weighted FDA), rule "fedda"
  fedgp_auto        FedGP with beta_i from the estimators, rule auto_beta_rule ("fedgp_thresh" or "fedgp")
  finetune_offline  FedAvg for all rounds, then finetune_epochs epochs of fine-tuning on the target
  oracle            target_only trained on all of the target's training-domain data (its "pool" view)

The family's hyper-parameters are its Params (fda_ray.algorithms.fda.params.FDAParams: beta, projection, filter,
auto_beta_rule, auto_lr_factor, finetune_epochs, baseline_protocol, log_estimates, faithful_domainbed_auto,
estimate_scale), which are RunConfig keywords under their own names; the learning rates, batches and warmup_rounds
are the run config's.
The estimates of every main round are logged (log_estimates): the side a method does not use trains too, on its
own seeds, for the estimates only.
"""
from __future__ import annotations

from typing import Any, ClassVar, Mapping

import torch

from fda_ray.algorithms.aggregation import RULES, fedavg, layer_cosines, layer_stats, source_weights
from fda_ray.algorithms.base import Algorithm
from fda_ray.core.contract import ClientResult, ClientTask, Round, ServerState
from fda_ray.train.client import epoch_steps
from fda_ray.algorithms.fda.diagnostics import round_estimates
from fda_ray.algorithms.fda.estimators import auto_beta, estimate
from fda_ray.algorithms.fda.params import FDAParams


def _domainbed(cfg) -> bool:
    from fda_ray.core.registry import DATASETS

    return (cfg.partition or DATASETS.get(cfg.dataset).defaults["partition"]) == "domainbed"


class FDA(Algorithm):
    """FedDA / FedGP with static or auto-weighted beta; the variants below set the class attributes."""

    fuses = True  # local training: the "epoch" recipe (the fine-tuning phase's carried-over Adam runs alone)

    family = "fda"
    Params = FDAParams
    rule: ClassVar[str] = "fedgp"  # a name in aggregation.RULES: source_only, target_only, fedda, fedgp
    train_sources: ClassVar[bool] = True
    train_target: ClassVar[bool] = True
    auto_rule: ClassVar[str | None] = None  # "fedda" | "fedgp" (the config may refine fedgp to fedgp_thresh)
    finetune: ClassVar[bool] = False
    oracle: ClassVar[bool] = False

    @classmethod
    def uses_beta(cls) -> bool:
        return cls.rule in ("fedda", "fedgp")

    # ---------------------------------------------------------------- the config

    @classmethod
    def resolve(cls, cfg, defaults: Mapping[str, Any]) -> dict[str, Any]:
        fill: dict[str, Any] = {}
        # The authors' oracle (docs/authors-code.md): from scratch, its script's lr, the source batch size.
        if cls.oracle and cfg.baseline_protocol == "authors":
            if cfg.warmup_rounds is None:
                fill["warmup_rounds"] = 0
            if cfg.lr_target is None:
                fill["lr_target"] = defaults["oracle_lr_target"]
            if cfg.batch_target is None:
                fill["batch_target"] = cfg.batch_source or defaults["batch_source"]
        if cls.auto_rule is not None and cfg.batch_target is None and "batch_target" not in fill:
            # The authors' Fashion-MNIST auto script passes --target_batch_size 4 in its covariate-shift loop only:
            # its label-shift runs keep the default batch (16; records.MOVED_DEFAULTS: 4 before 2026-11-30).
            label_shift = (cfg.partition or defaults["partition"]) == "label_shift"
            fill["batch_target"] = defaults["batch_target"] if label_shift else defaults["auto_batch_target"]
        # The authors' static DomainBed script warms up only when the sources take part (proj_w > 0): target only
        # trains from the initial model.
        if _domainbed(cfg) and cls.rule == "target_only" and not cls.oracle and cfg.warmup_rounds is None:
            fill["warmup_rounds"] = 0
        return fill

    @classmethod
    def param_defaults(cls, cfg) -> dict[str, Any]:
        # The estimates are logged wherever the sources train; the authors' auto script's DomainBed split is the
        # default of the auto-weighted methods there (the published auto rows came from it).
        # FedDA_Auto on DomainBed: the authors' DomainBed auto script scales only the target's per-step deltas
        # (FedGP_Auto's beta is the same either way: its estimates keep the other script's convention).
        return {"log_estimates": cls.train_sources,
                "faithful_domainbed_auto": _domainbed(cfg) and cls.auto_rule is not None,
                "estimate_scale": "target" if _domainbed(cfg) and cls.auto_rule == "fedda" else "both"}

    @classmethod
    def uses(cls, cfg) -> dict[str, bool]:
        sources = cls.train_sources or cfg.warmup_rounds > 0 or bool(cfg.log_estimates)
        return {"beta": cls.uses_beta() and cls.auto_rule is None, "projection": cls.rule == "fedgp",
                "filter": cls.rule == "fedgp", "auto_lr_factor": cls.auto_rule is not None,
                "auto_beta_rule": cls.auto_rule == "fedgp", "finetune_epochs": cls.finetune,
                "baseline_protocol": cls.finetune or cls.oracle, "lr_source": sources, "batch_source": sources,
                "log_estimates": True, "faithful_domainbed_auto": cls.auto_rule is not None, "aux_alpha": sources,
                "estimate_scale": cls.auto_rule is not None or sources}

    @classmethod
    def planned_rounds(cls, cfg) -> int:
        return cfg.warmup_rounds + cfg.rounds + (cfg.finetune_epochs if cls.finetune else 0)

    @classmethod
    def min_target_steps(cls) -> int:
        return 2 if cls.auto_rule is not None else 1  # the estimators need two per-step deltas

    # ---------------------------------------------------------------- the experiment

    def __init__(self, cfg, setting, layout, model=None) -> None:
        super().__init__(cfg, setting, layout, model)
        if cfg.aux_alpha and not setting.aux_tasks:
            raise ValueError(f"aux_alpha={cfg.aux_alpha} is invalid: dataset {cfg.dataset!r} has no auxiliary labels "
                             "(datasets with them: fmnist-conditions, the medical CSV datasets); use aux_alpha 0")
        self.warmup = cfg.warmup_rounds
        self.total = cfg.warmup_rounds + cfg.rounds
        self.weights = source_weights([len(x) for x, _ in setting.sources])  # (N,)
        # (N,) source steps per local epoch: full batches where the sources' loaders drop the last partial batch
        # (the noise grids), every batch where they keep it (the authors' DomainBed loaders)
        self.src_steps = torch.tensor([epoch_steps(len(x), cfg.batch_source, cfg.drop_last) for x, _ in setting.sources],
                                      dtype=torch.float32)
        self.lr_ratio = cfg.lr_target / cfg.lr_source
        # (N,) magnitude alignment of each source delta to the target's (docs/authors-code.md): (lr_T / lr_S) *
        # (target steps per round, n_target / batch_T as a float) / (source full batches per round).
        n_t = len(self.target_data()[0])
        self.align = self.lr_ratio * (n_t / cfg.batch_target) / self.src_steps

    def target_data(self):
        return self.setting.target_pool if self.oracle else self.setting.target_train

    def views(self):
        views = [{"train": s} for s in self.setting.sources]
        views.append({"pool": self.setting.target_pool} if self.oracle else {"train": self.setting.target_train})
        return views

    # ---------------------------------------------------------------- one round

    def plan_round(self, r: int, state: ServerState) -> Round | None:
        cfg, p = self.cfg, self.params
        t_data = "pool" if self.oracle else "train"
        if r < self.warmup:
            return Round("warmup", self._source_tasks(r, cfg.lr_source))
        if r < self.total:
            scale = p.auto_lr_factor if self.auto_rule else 1.0
            tasks = self._source_tasks(r, cfg.lr_source * scale) if (self.train_sources or p.log_estimates) else ()
            if self.train_target or p.log_estimates:
                hp = {"lr": cfg.lr_target * scale, "batch": cfg.batch_target,
                      "record_steps": self.auto_rule is not None or bool(p.log_estimates)}
                tasks += (ClientTask(self.target, "epoch", r, hp, data=t_data),)
            return Round("main", tasks)
        if self.finetune and r < self.total + p.finetune_epochs:
            # The authors' script makes a fresh Adam every epoch; the loop protocol carries one across epochs.
            authors = p.baseline_protocol == "authors"
            first = r == self.total
            hp = {"lr": cfg.lr_target, "batch": cfg.batch_target, "send": "weights",
                  "fresh_optimizer": authors or first, "keep_optimizer": not authors}
            return Round("finetune", (ClientTask(self.target, "epoch", r, hp, data=t_data, purpose="finetune"),))
        return None

    def _source_tasks(self, r: int, lr: float) -> tuple[ClientTask, ...]:
        hp: dict[str, Any] = {"lr": lr, "batch": self.cfg.batch_source}
        if self.cfg.aux_alpha:  # Healthcare FDA's auxiliary labels on the sources (Eq. 3)
            hp["aux_alpha"] = float(self.cfg.aux_alpha)
        return tuple(ClientTask(i, "epoch", r, dict(hp)) for i in range(self.num_sources))

    def aggregate(self, r: int, state: ServerState, results: Mapping[int, ClientResult]
                  ) -> tuple[ServerState, dict[str, Any]]:
        cfg, p, n, t = self.cfg, self.params, self.num_sources, self.target
        tres = results.get(t)
        metrics: dict[str, Any] = {}
        if r >= self.total:  # fine-tuning: the target's new weights are the model
            assert tres is not None
            return {"global": tres.tensors["weights"]}, {"train_loss_target": tres.scalars["loss"]}
        src = torch.stack([results[i].tensors["delta"] for i in range(n)]) if 0 in results else None  # (N, M)
        tgt = tres.tensors["delta"] if tres is not None else None  # (M,)
        offsets = self.layout.offsets
        if r < self.warmup:
            update = fedavg(src, weights=self.weights, impl=cfg.aggregation_impl)
        else:
            beta: float | torch.Tensor = p.beta
            steps = tres.tensors.get("step_deltas") if tres is not None else None  # (B, M)
            if self.auto_rule is not None or (p.log_estimates and src is not None and steps is not None
                                              and steps.shape[0] >= 2):
                # Per-step deltas (a source's: its round delta over its steps), the target's scaled by lr_T / lr_S,
                # the sources' too unless estimate_scale is "target" (the two authors' scripts differ:
                # docs/authors-code.md); with both scaled the factor cancels in beta and the logged estimates carry it.
                src_scale = self.lr_ratio if p.estimate_scale == "both" else 1.0
                aligned = src / self.src_steps.to(src.device).unsqueeze(1) * src_scale  # (N, M)
                stats = estimate(steps * self.lr_ratio, aligned, impl=cfg.aggregation_impl)
                metrics.update(round_estimates(stats, self.weights, self.layout.size, steps.shape[0], p.beta))
                if self.auto_rule is not None:
                    beta = auto_beta(stats, p.auto_beta_rule if self.auto_rule == "fedgp" else "fedda")  # (N,)
            # One pass for the layer statistics: FedGP's projections and the logged cosines share it.
            lstats = layer_stats(tgt, src, offsets, impl=cfg.aggregation_impl) \
                if src is not None and tgt is not None else None
            # The rule by name from the one table (fda_ray.algorithms.aggregation.RULES); each reads what it needs.
            update = RULES.get(self.rule)(tgt, src, offsets, beta=beta, weights=self.weights,
                                          impl=cfg.aggregation_impl, align=self.align,
                                          filter=p.filter, projection=p.projection, stats=lstats)
            if lstats is not None:
                cos = layer_cosines(*lstats)  # (N, L)
                metrics["cosine_mean_i"] = cos.mean(1).tolist()
                metrics["filtered_share_i"] = (cos <= 0).double().mean(1).tolist()
            if self.uses_beta():
                metrics["beta_i"] = beta.tolist() if isinstance(beta, torch.Tensor) else [float(beta)] * n
        metrics["train_loss_target"] = tres.scalars["loss"] if tres is not None else None
        return {"global": state["global"] + update}, metrics


class SourceOnly(FDA):
    name, rule, train_target = "source_only", "source_only", False


class TargetOnly(FDA):
    name, rule, train_sources = "target_only", "target_only", False


class FedDA(FDA):
    name, rule = "fedda", "fedda"


class FedGP(FDA):
    name, rule = "fedgp", "fedgp"


class FedDAAuto(FDA):
    name, rule, auto_rule = "fedda_auto", "fedda", "fedda"


class FedGPAuto(FDA):
    name, rule, auto_rule = "fedgp_auto", "fedgp", "fedgp"


class FinetuneOffline(FDA):
    name, rule, train_target, finetune = "finetune_offline", "source_only", False, True


class Oracle(FDA):
    name, rule, train_sources, oracle, oracle_split = "oracle", "target_only", False, True, True


VARIANTS: tuple[type[FDA], ...] = (SourceOnly, TargetOnly, FedDA, FedGP, FedDAAuto, FedGPAuto, FinetuneOffline, Oracle)
