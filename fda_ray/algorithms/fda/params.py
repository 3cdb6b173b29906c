"""The FDA family's hyper-parameters (FedGP Def. 3.1-3.2 and Algorithm 1; Auto-weighted FDA Eq. 7-8 and App. C.1):
its `Params`, stored in RunConfig.params["fda"] like every family's.

    beta                      the static weight of the source side of FedDA / FedGP, in [0, 1]
    projection, filter        FedGP's source term: the authors' cosine scaling or the paper's exact projection;
                              whether a layer with cosine <= 0 is dropped
    auto_beta_rule            fedgp_auto's estimated rule (fedgp_thresh or fedgp)
    auto_lr_factor            the auto-weighted methods' learning-rate factor after warm-up
    finetune_epochs           finetune_offline's epochs after FedAvg
    baseline_protocol         how oracle and finetune_offline run (the authors' scripts, or the round loop)
    log_estimates             log the estimators every main round
    estimate_scale            which side's per-step deltas the estimators scale by lr_T / lr_S (the authors' scripts
                              differ: both in the Fashion-MNIST/CIFAR-10 one, the target's only in the DomainBed one)
    faithful_domainbed_auto   the authors' auto script's DomainBed data split

The seed papers, every recorded grid and every committed trial name them on their own (beta, not fda.beta), so
they are RunConfig keywords and flags under those names (`keywords`): RunConfig(beta=0.3) and --beta 0.3 set
params["fda"]["beta"], and a config reads cfg.beta. A record keeps them at the top level of its config, where every
record since the first has them (RunConfig.to_dict), so committed trial keys are unchanged.

Every resolved config carries them, whatever its method: the FedGP rule that the Healthcare FDA family runs reads
beta, projection and filter, the data setting reads baseline_protocol and faithful_domainbed_auto, and a trial's
identity has always held them (fda_ray.experiments.records.trial_key). Left unset (None), the optional ones take
the dataset's setting (fda_ray.data.paper_defaults) or the method's (FDA.param_defaults) when the config resolves.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from fda_ray.algorithms.aggregation import PROJECTIONS
from fda_ray.algorithms.base import Params, param
from fda_ray.algorithms.fda.estimators import AUTO_RULES

if TYPE_CHECKING:
    from fda_ray.core.config import RunConfig

# How the oracle and finetune_offline baselines run (docs/authors-code.md, "Oracle and Finetune_Offline").
BASELINE_PROTOCOLS = ("authors", "loop")
# Which per-step deltas the auto-weighted estimators scale by lr_T / lr_S (docs/authors-code.md, "The estimators'
# scale").
ESTIMATE_SCALES = ("both", "target")


@dataclass(frozen=True)
class FDAParams(Params):
    family: ClassVar[str] = "fda"
    keywords: ClassVar[bool] = True

    beta: float = param(0.5, "static beta of fedda / fedgp: the weight of the source side, in [0, 1] (Healthcare FDA's "
                             "GP puts its letter beta on the target side: the same rule, Healthcare FDA's beta = 1 - "
                             "this)", low=0, high=1)
    projection: str = param("cosine", "fedgp's source term: cosine (authors' code) or exact (the paper's "
                                      "<g_T, g_i>/|g_i|^2 g_i)", choices=PROJECTIONS)
    filter: bool = param(True, "fedgp: drop a source's layer where its cosine with the target is <= 0", boolean=True)
    faithful_domainbed_auto: bool | None = param(
        None, "fedda_auto / fedgp_auto on DomainBed datasets as the authors' auto script runs them "
              "(docs/authors-code.md): the target's labelled set drawn first from the environment, its test set "
              "20 % of the rest; default on there (the published auto rows came from that code), off elsewhere",
        boolean=True, optional=True)
    auto_lr_factor: float | None = param(None, "auto-weighted methods: both learning rates times this after warm-up; "
                                               "default per dataset (fashion-mnist 0.1)", positive=True, optional=True)
    auto_beta_rule: str | None = param(None, "fedgp_auto's estimated rule: fedgp_thresh (default) or fedgp; "
                                             "fedda_auto always uses fedda", choices=AUTO_RULES, optional=True)
    finetune_epochs: int | None = param(None, "finetune_offline: fine-tuning epochs after FedAvg (default: rounds)",
                                        integer=True, low=0, optional=True)
    baseline_protocol: str = param("authors", "how oracle and finetune_offline run: authors (their scripts: the "
                                              "oracle trains from scratch on 90 % of the target's data and is tested "
                                              "on the other 10 %, lr 0.003, batch 64; fine-tuning makes a fresh Adam "
                                              "every epoch) or loop (the round loop: warm-up, the target's lr and "
                                              "batch, the target test set; one Adam across fine-tuning epochs)",
                                   choices=BASELINE_PROTOCOLS)
    # Needs the target's steps and the sources' updates: methods that do not use one side train it anyway (on its
    # own seeds, so the run's numbers do not change).
    log_estimates: bool | None = param(None, "log the estimators' sigma^2, d_i^2, tau^2 d_i^2 and every rule's "
                                             "Delta^2 each main round; default on for methods that train sources",
                                       boolean=True, optional=True)

    estimate_scale: str | None = param(
        None, "which per-step deltas the estimators scale by lr_T / lr_S: both (the authors' Fashion-MNIST/CIFAR-10 "
              "auto script) or target (their DomainBed auto script, whose sources' deltas enter unscaled); it moves "
              "fedda_auto's beta_i (fedgp_auto's depends only on the sources' directions) and the logged estimates; "
              "default target for fedda_auto on DomainBed datasets, both elsewhere", choices=ESTIMATE_SCALES,
        optional=True)

    @classmethod
    def resolved(cls, cfg: "RunConfig", defaults: Mapping[str, Any], method: Mapping[str, Any]) -> "FDAParams":
        """Every field filled: the config's own values, then `method` (an FDA method's per-config settings,
        FDA.param_defaults; empty for the other families), then the dataset's settings and the neutral ones (no
        estimates logged, the DomainBed split of every other method)."""
        given = {k: v for k, v in cfg.params.get(cls.family, {}).items() if v is not None}
        factor = defaults["auto_lr_factor"]
        if isinstance(factor, tuple):  # one per held-out environment (ColoredMNIST, Auto-weighted FDA App. C.3)
            factor = factor[min(cfg.test_env, len(factor) - 1)]
        fill = {"auto_lr_factor": factor, "auto_beta_rule": defaults["auto_beta_rule"],
                "finetune_epochs": cfg.rounds, "log_estimates": False, "faithful_domainbed_auto": False,
                "estimate_scale": "both"}
        return cls.build({**fill, **{k: v for k, v in method.items() if v is not None}, **given})
