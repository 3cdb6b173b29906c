"""Search definitions: which hyper-parameters a named search draws, in which settings, selected how.

A search is plain data, like a grid (fda_ray.papers.grids): the dataset, the searched methods, the space (one `Dim` per
searched knob: a RunConfig field, or a family parameter as "family.name"), the settings around the search (the
values of one variable, e.g. noise 0.2 and 0.6: every setting x method is its own study, searched and selected on
its own), the fields every trial sets (`fixed`: the validation shares among them), the reference rows that run
beside the selected configurations in the rerun (the auto-weighted methods), and the selection rules reported
(fda_ray.papers.selection). `python -m fda_ray.sweep --search <name>` runs one (fda_ray.experiments.search).

The spaces follow docs/sweeps-and-searches.md (the knobs and their sensible ranges): beta in [0, 1] (FedGP/Auto-weighted FDA), the
auxiliary-loss weight aux_alpha in [0, 2] (Healthcare FDA Eq. 3; Healthcare FDA Fig. 6 tries 0.2 ... 1), FSSDA's distillation temperature
T log-uniform in [1, 10] (FSSDA Eq. 1; no value given), FedWCA's T_a and T_b over FedWCA App. C.2's set {0.001, ..., 0.1}, and
the learning rates log-uniform over two decades around the defaults.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from fda_ray.papers.grids import (
    FEDWCA_FMNIST5, FEDWCA_QUICK, FEDWCA_SOURCE, FEDWCA_TEMPERATURES, FSSDA_QUICK, CONDITIONS_QUICK, QUICK_NOISE,
    Profile, Row, _FM_FIELDS, _FM_TEACHER, FMNIST5_FSSDA, _SOURCE_FIELDS, _rows)

KINDS = ("uniform", "loguniform", "choice")


@dataclass(frozen=True)
class Dim:
    """One searched knob: `name` a RunConfig field (beta) or a family's parameter (fssda.kd_temperature); drawn
    uniform or log-uniform in [low, high], or from `values` (choice)."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    values: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"dim {self.name!r}: kind={self.kind!r} is invalid: one of {', '.join(KINDS)}")
        if self.kind == "choice":
            if not self.values:
                raise ValueError(f"dim {self.name!r}: a choice needs values")
        elif self.low is None or self.high is None or not self.low < self.high or (
                self.kind == "loguniform" and self.low <= 0):
            raise ValueError(f"dim {self.name!r}: low < high (> 0 for loguniform), got {self.low}, {self.high}")

    def sample(self, rng: np.random.Generator) -> Any:
        if self.kind == "choice":
            return self.values[int(rng.integers(len(self.values)))]
        if self.kind == "uniform":
            return float(rng.uniform(self.low, self.high))
        return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))

    def describe(self) -> str:
        if self.kind == "choice":
            return f"{self.name} in {{{', '.join(f'{v:g}' if isinstance(v, float) else str(v) for v in self.values)}}}"
        return f"{self.name} ~ {self.kind}[{self.low:g}, {self.high:g}]"

    def fields(self, value: Any) -> dict[str, Any]:
        """The RunConfig fields that set this knob to `value` (a family parameter under "params")."""
        if "." in self.name:
            family, name = self.name.split(".", 1)
            return {"params": {family: {name: value}}}
        return {self.name: value}


@dataclass(frozen=True)
class Search:
    name: str
    dataset: str
    methods: tuple[str, ...]  # each searched on its own (a study per setting and method)
    space: tuple[Dim, ...]
    variable: str  # the settings' variable (a RunConfig field, or a name when `value_fields` gives the fields)
    values: tuple[float, ...]
    rules: tuple[str, ...]  # selection rules reported (fda_ray.papers.selection.RULES); the first is what ASHA optimises
    profiles: dict[str, Profile]  # "quick", "paper": fields over the fixed ones
    fixed: Mapping[str, Any] = field(default_factory=dict)
    references: tuple[Row, ...] = ()  # run beside the selected configurations, on the rerun's seeds
    num_samples: Mapping[str, int] = field(default_factory=lambda: {"quick": 8, "paper": 24})  # per study
    rerun_seeds: int = 3
    grace_period: int = 10  # ASHA: reports (rounds) before a trial can be stopped
    reduction_factor: int = 2
    value_fields: Mapping[float, Mapping[str, Any]] = field(default_factory=dict)
    value_labels: Mapping[float, str] = field(default_factory=dict)
    note: str = ""  # what the search asks, in a line (the summary's first paragraph)

    def __post_init__(self) -> None:
        from fda_ray.papers.selection import RULES

        bad = [r for r in self.rules if r not in RULES]
        if bad or not self.rules:
            raise ValueError(f"search {self.name!r}: rules {list(self.rules)}: each one of {', '.join(RULES)}")
        if any(RULES[r].oracle for r in self.rules[:1]):
            raise ValueError(f"search {self.name!r}: the first rule is what the scheduler optimises: not the oracle")
        names = [d.name for d in self.space]
        if len(set(names)) != len(names):
            raise ValueError(f"search {self.name!r}: a knob searched twice: {names}")
        # a study, a setting and a reference row are found by their key: two alike would be pooled into one cell
        for what, keys in (("methods", list(self.methods)), ("values", list(self.values)),
                           ("references", [r.key for r in self.references])):
            seen = set()
            for i, k in enumerate(keys):
                if k in seen:
                    raise ValueError(f"search {self.name!r}: {what}[{i}]{'.key' if what == 'references' else ''}="
                                     f"{k!r} is invalid: given twice (each one names its own "
                                     f"{'row' if what == 'references' else 'study'})")
                seen.add(k)
        if self.value_fields and set(self.value_fields) != set(self.values):
            raise ValueError(f"search {self.name!r}: value_fields must give the fields of every value")

    def value_label(self, value: float) -> str:
        return self.value_labels.get(value, f"{self.variable} {value:g}")

    def value_fields_of(self, value: float) -> dict[str, Any]:
        return dict(self.value_fields.get(value, {self.variable: value}))

    def samples(self, method: str, value: float, n: int) -> list[dict[str, Any]]:
        """The first n points of this study's random search: a generator seeded by (search, method, value), so
        the same points come back on --resume, and asking for more (--num-samples) extends the list. A space of
        choices alone is drawn without replacement (at most its size)."""
        from fda_ray.core.seeding import np_rng

        rng = np_rng(0, purpose=f"search/{self.name}/{method}/{value:g}")
        if all(d.kind == "choice" for d in self.space):
            # a finite grid (FedWCA's T_a x T_b): distinct points, in a seeded order (a repeat would only rerun a trial)
            grid = [dict(zip([d.name for d in self.space], combo))
                    for combo in itertools.product(*(d.values for d in self.space))]
            return [grid[i] for i in rng.permutation(len(grid))[:n]]
        return [{d.name: d.sample(rng) for d in self.space} for _ in range(n)]


# Every search holds out a fifth of the target's labelled samples as its validation set (20 of Fashion-MNIST's
# 100), and a tenth of every source's samples (the training-domain validation): the trials of a search train on the
# rest, the reruns likewise (so the selected configuration is scored as it was selected).
VALIDATION = {"val_share": 0.2, "source_val_share": 0.1}
_AUTO_REFS = _rows(("fedda_auto", "FedDA_Auto", "fedda_auto", {}), ("fedgp_auto", "FedGP_Auto", "fedgp_auto", {}))
_NOISE_QUICK = Profile({k: v for k, v in QUICK_NOISE.fields.items()}, note=QUICK_NOISE.note.split(", noise")[0] + ".")

SEARCHES: dict[str, Search] = {
    # Does an auto-weighted beta match a tuned static one? (Auto-weighted FDA Fig. 4 sweeps beta on the test set.)
    "beta": Search(
        name="beta", dataset="fashion-mnist", methods=("fedgp", "fedda"), space=(Dim("beta", "uniform", 0.0, 1.0),),
        variable="noise", values=(0.2, 0.6), rules=("target_val", "source_val", "oracle"),
        profiles={"quick": _NOISE_QUICK, "paper": Profile()}, fixed=VALIDATION, references=_AUTO_REFS,
        note="static beta of FedGP and FedDA on Fashion-MNIST with target noise, beside the auto-weighted rules"),
    # Learning rates of the FDA rules (the sources' and the target's Adam), log-uniform around 1e-3.
    "lr": Search(
        name="lr", dataset="fashion-mnist", methods=("fedgp", "fedda"),
        space=(Dim("lr_source", "loguniform", 1e-4, 1e-2), Dim("lr_target", "loguniform", 1e-4, 1e-2)),
        variable="noise", values=(0.2, 0.6), rules=("target_val", "source_val", "oracle"),
        profiles={"quick": _NOISE_QUICK, "paper": Profile()}, fixed=VALIDATION,
        note="the sources' and the target's learning rates of FedGP and FedDA (beta 0.5)"),
    # Healthcare FDA Eq. 3's alpha for the auxiliary-label methods, on the CheXpert-like FMNIST construction (the aux-alpha
    # grid's setting: Healthcare FDA Fig. 6 tries 0.2 ... 1 on MIMIC).
    "aux-alpha": Search(
        name="aux-alpha", dataset="fmnist-conditions", methods=("fedavg_finetune_auxinfo", "fedavg_finetune_auxinfo_gp"),
        space=(Dim("aux_alpha", "uniform", 0.0, 2.0),), variable="test_env", values=(0.0,),
        rules=("target_val", "source_val", "oracle"), fixed=VALIDATION,
        profiles={"quick": Profile(dict(CONDITIONS_QUICK.fields)), "paper": Profile()},
        value_labels={0.0: "shirt held out (test_env 0)"}, grace_period=3,
        note="the auxiliary-loss weight alpha of Healthcare FDA's AuxInfo methods"),
    # FSSDA Eq. 1's T (the paper gives none) on fmnist-m -> invert, the fssda-temperature grid's pair.
    "fssda-temperature": Search(
        name="fssda-temperature", dataset="fmnist-5", methods=("fssda",),
        space=(Dim("fssda.kd_temperature", "loguniform", 1.0, 10.0),), variable="transfer", values=(_FM_TEACHER,),
        # Adam, as the FSSDA grids' rows (fda_ray.papers.grids._fssda_adam: under the paper's SGD a CNN from scratch
        # stays at chance here, and the search would choose among trials that learn nothing)
        rules=("target_val", "oracle"), fixed={**FMNIST5_FSSDA, "val_share": 0.2,
                                               "params": {"fssda": {"optimizer": "adam"}}},
        profiles={"quick": Profile(dict(FSSDA_QUICK.fields)), "paper": Profile()},
        value_fields={_FM_TEACHER: _FM_FIELDS[_FM_TEACHER]}, value_labels={_FM_TEACHER: "fmnist-m->invert"},
        grace_period=5, note="FSSDA's distillation temperature T (FSSDA Eq. 1)"),
    # FedWCA App. C.2's T_a x T_b, selected on the clients' own validation splits (source-free: no labelled target set).
    "fedwca-temperatures": Search(
        name="fedwca-temperatures", dataset="fmnist-5", methods=("fedwca",),
        space=(Dim("fedwca.temp_a", "choice", values=FEDWCA_TEMPERATURES),
               Dim("fedwca.temp_b", "choice", values=FEDWCA_TEMPERATURES)),
        variable="source", values=(FEDWCA_SOURCE,), rules=("client_val", "oracle"),
        fixed=FEDWCA_FMNIST5, profiles={"quick": Profile(dict(FEDWCA_QUICK.fields)), "paper": Profile()},
        value_fields={FEDWCA_SOURCE: _SOURCE_FIELDS[FEDWCA_SOURCE]}, value_labels={FEDWCA_SOURCE: "source fmnist-m"},
        num_samples={"quick": 4, "paper": 12}, grace_period=3,
        note="FedWCA's temperatures T_a (Eq. 1) and T_b (Eq. 3) on FedWCA App. C.2's set"),
}
