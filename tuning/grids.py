"""Grid definitions: which trials reproduce which published table.

A grid is plain data: the dataset, the rows of the paper's table (a method, possibly with settings: FedGP_1 is
`fedgp` with beta = 1), the values of the grid variable, the seeds per value, the RunConfig fields every
trial sets (`fixed`), and the fields of each profile. `fda_ray.trials.plan` turns a grid into trials;
`python -m fda_ray.sweep --grid <name>` runs them.

share_source_only: the grid's variable changes nothing Source Only computes (target noise: the sources never
see the target), so one source_only trial per seed is evaluated at every value of the grid (RunConfig.
eval_noise draws the same noise a run at that level would), and finetune_offline fine-tunes from its final
weights per value (the FedAvg phase of finetune_offline is that same run). Equal to running every cell, for
a fifth of the source training; tests/test_trials.py checks both equalities.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from tuning.paper import (TABLE2_FMNIST_ABLATION, TABLE10_FMNIST, TABLE11_FMNIST_LABEL_SHIFT,
                          TABLE12_FMNIST_SOURCE_CLASSES, TABLE13_14_FMNIST_TARGET_SIZE,
                          TABLE13_14_FMNIST_TARGET_SIZE_02, TABLE13_14_FMNIST_TARGET_SIZE_06)


@dataclass(frozen=True)
class Row:
    """One row of a paper's table: `method` with `params` (RunConfig fields), shown as `label`."""

    key: str  # unique within a grid; the key of the paper's numbers (tuning.paper)
    label: str  # the paper's row name
    method: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Grid:
    name: str
    dataset: str
    variable: str  # the RunConfig field the grid varies
    values: tuple[float, ...]
    rows: tuple[Row, ...]
    seeds: dict[float, int]  # seeds per grid value (missing: 1)
    profiles: dict[str, dict[str, Any]]  # profile name -> RunConfig overrides
    paper: dict[str, dict[float, float]] = field(default_factory=dict)  # row key -> value -> accuracy (%)
    paper_ref: str = ""
    fixed: dict[str, Any] = field(default_factory=dict)  # RunConfig fields every trial of the grid sets
    share_source_only: bool = False  # see the module docstring

    def __post_init__(self) -> None:
        keys = [r.key for r in self.rows]
        if len(set(keys)) != len(keys):
            raise ValueError(f"grid {self.name!r}: row keys must be unique, got {keys}")
        if self.share_source_only and self.variable != "noise":
            raise ValueError(f"grid {self.name!r}: share_source_only needs variable 'noise' (source_only must not "
                             f"depend on the variable), got {self.variable!r}")
        if self.variable in self.fixed:
            raise ValueError(f"grid {self.name!r}: the variable {self.variable!r} cannot also be fixed")

    def seeds_for(self, value: float) -> int:
        return self.seeds.get(value, 1)

    def row(self, key: str) -> Row:
        for r in self.rows:
            if r.key == key:
                return r
        raise KeyError(key)

    @property
    def labels(self) -> dict[str, str]:
        return {r.key: r.label for r in self.rows}


def _rows(*spec: tuple[str, str, str, dict[str, Any]]) -> tuple[Row, ...]:
    return tuple(Row(key, label, method, params) for key, label, method, params in spec)


# The rows of seed 004's Tables 10 and 11 (Fashion-MNIST), in the paper's order.
TABLE_ROWS = _rows(
    ("source_only", "Source Only", "source_only", {}),
    ("finetune_offline", "Finetune_Offline", "finetune_offline", {}),
    ("fedda", "FedDA_0.5", "fedda", {"beta": 0.5}),
    ("fedgp", "FedGP_0.5", "fedgp", {"beta": 0.5}),
    ("fedgp_beta1", "FedGP_1", "fedgp", {"beta": 1.0}),
    ("fedda_auto", "FedDA_Auto", "fedda_auto", {}),
    ("fedgp_auto", "FedGP_Auto", "fedgp_auto", {}),
    ("target_only", "Target Only", "target_only", {}),
    ("oracle", "Oracle", "oracle", {}),
)
AUTO_ROWS = tuple(r for r in TABLE_ROWS if r.key in ("fedda", "fedgp", "fedda_auto", "fedgp_auto"))
# Seed 004 Table 12 has no auto rows.
STATIC_ROWS = tuple(r for r in TABLE_ROWS if r.key not in ("fedda_auto", "fedgp_auto"))
ABLATION_ROWS = _rows(
    ("fedda", "FedDA (w/o projection)", "fedda", {"beta": 0.5}),
    ("fedgp_no_filter", "FedGP (w/o filter)", "fedgp", {"beta": 0.5, "filter": False}),
    ("fedgp", "FedGP (w filter)", "fedgp", {"beta": 0.5}),
)


def _target_size(noise: float, paper: Mapping[str, Mapping[float, float]]) -> Grid:
    """Seed 004 Tables 13-14 (Fashion-MNIST) at one noise level: one grid per column pair of the tables."""
    return Grid(
        name="target-size" if noise == 0.4 else f"target-size-noise{noise:g}", dataset="fashion-mnist",
        variable="target_labelled", values=(100, 200, 500, 1000), rows=AUTO_ROWS, seeds={}, fixed={"noise": noise},
        profiles={"paper": {}, "quick": dict(QUICK)},
        paper={m: {int(k): v for k, v in row.items()} for m, row in paper.items()},
        paper_ref=f"seed 004, Tables 13-14 (Fashion-MNIST, noise {noise:g})")

# Laptop profile: fewer rounds and samples (the quick noise sweep finishes in minutes on 2 cores).
QUICK = {"rounds": 10, "samples_per_client": 1000, "test_samples": 2000}

GRIDS: dict[str, Grid] = {
    "noise": Grid(
        name="noise", dataset="fashion-mnist", variable="noise", values=(0.0, 0.2, 0.4, 0.6, 0.8),
        rows=TABLE_ROWS, seeds={0.4: 3}, profiles={"paper": {}, "quick": dict(QUICK)},
        paper=TABLE10_FMNIST, paper_ref="seed 004, Table 10 (Fashion-MNIST)", share_source_only=True),
    "beta": Grid(
        name="beta", dataset="fashion-mnist", variable="beta", values=(0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
        rows=_rows(("fedda", "FedDA", "fedda", {}), ("fedgp", "FedGP", "fedgp", {})), seeds={},
        fixed={"noise": 0.4}, profiles={"paper": {}, "quick": dict(QUICK)},
        paper_ref="seed 004, Figure 4 (Fashion-MNIST, noise 0.4)"),
    "label-shift": Grid(
        name="label-shift", dataset="fashion-mnist", variable="eta", values=(0.45, 0.3, 0.15, 0.1, 0.05, 0.0),
        rows=TABLE_ROWS, seeds={}, fixed={"partition": "label_shift"},
        profiles={"paper": {}, "quick": dict(QUICK)},
        paper=TABLE11_FMNIST_LABEL_SHIFT, paper_ref="seed 004, Table 11 (Fashion-MNIST label shift)"),
    "target-size": _target_size(0.4, TABLE13_14_FMNIST_TARGET_SIZE),
    "target-size-noise0.2": _target_size(0.2, TABLE13_14_FMNIST_TARGET_SIZE_02),
    "target-size-noise0.6": _target_size(0.6, TABLE13_14_FMNIST_TARGET_SIZE_06),
    "source-classes": Grid(
        name="source-classes", dataset="fashion-mnist", variable="source_classes", values=(9, 7, 3, 5),
        rows=STATIC_ROWS, seeds={}, fixed={"partition": "source_classes", "noise": 0.4},
        profiles={"paper": {}, "quick": dict(QUICK)}, paper=TABLE12_FMNIST_SOURCE_CLASSES,
        paper_ref="seed 004, Table 12 (Fashion-MNIST, sources holding k classes, noise 0.4)"),
    "ablation": Grid(
        name="ablation", dataset="fashion-mnist", variable="noise", values=(0.2, 0.4, 0.6, 0.8),
        rows=ABLATION_ROWS, seeds={}, profiles={"paper": {}, "quick": dict(QUICK)}, paper=TABLE2_FMNIST_ABLATION,
        paper_ref="seed 004, Table 2 (Fashion-MNIST: projection and filter ablation)"),
}
