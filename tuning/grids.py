"""Grid definitions: which runs reproduce which published table."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuning.paper import TABLE10_FMNIST, TABLE11_FMNIST_LABEL_SHIFT, TABLE13_14_FMNIST_TARGET_SIZE


@dataclass(frozen=True)
class Grid:
    name: str
    dataset: str
    variable: str  # the RunConfig field the grid varies
    values: tuple[float, ...]
    methods: tuple[str, ...]
    seeds: dict[float, int]  # seeds per grid value (missing: 1)
    profiles: dict[str, dict[str, Any]]  # profile name -> RunConfig overrides
    labels: dict[str, str] = field(default_factory=dict)  # method -> the paper's row name
    paper: dict[str, dict[float, float]] = field(default_factory=dict)
    paper_ref: str = ""
    fixed: dict[str, Any] = field(default_factory=dict)  # RunConfig fields every run of the grid sets

    def seeds_for(self, value: float) -> int:
        return self.seeds.get(value, 1)


PAPER_LABELS = {"source_only": "Source Only", "finetune_offline": "Finetune_Offline", "fedda": "FedDA_0.5",
                "fedgp": "FedGP_0.5", "fedda_auto": "FedDA_Auto", "fedgp_auto": "FedGP_Auto",
                "target_only": "Target Only", "oracle": "Oracle"}

# Laptop profile: fewer rounds and samples (the quick noise sweep finishes in minutes on 2 cores).
QUICK = {"rounds": 10, "samples_per_client": 1000, "test_samples": 2000}

GRIDS: dict[str, Grid] = {
    "noise": Grid(
        name="noise", dataset="fashion-mnist", variable="noise", values=(0.0, 0.2, 0.4, 0.6, 0.8),
        methods=tuple(PAPER_LABELS), seeds={0.4: 3},
        profiles={"paper": {}, "quick": dict(QUICK)},
        labels=PAPER_LABELS, paper=TABLE10_FMNIST, paper_ref="seed 004, Table 10 (Fashion-MNIST)"),
    "beta": Grid(
        name="beta", dataset="fashion-mnist", variable="beta", values=(0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
        methods=("fedda", "fedgp"), seeds={}, fixed={"noise": 0.4},
        profiles={"paper": {}, "quick": dict(QUICK)},
        labels={"fedda": "FedDA", "fedgp": "FedGP"}, paper_ref="seed 004, Figure 4 (Fashion-MNIST, noise 0.4)"),
    "label-shift": Grid(
        name="label-shift", dataset="fashion-mnist", variable="eta", values=(0.45, 0.3, 0.15, 0.1, 0.05, 0.0),
        methods=tuple(PAPER_LABELS), seeds={}, fixed={"partition": "label_shift"},
        profiles={"paper": {}, "quick": dict(QUICK)},
        labels=PAPER_LABELS, paper=TABLE11_FMNIST_LABEL_SHIFT, paper_ref="seed 004, Table 11 (Fashion-MNIST label shift)"),
    "target-size": Grid(
        name="target-size", dataset="fashion-mnist", variable="target_labelled", values=(100, 200, 500, 1000),
        methods=("fedda", "fedgp", "fedda_auto", "fedgp_auto"), seeds={}, fixed={"noise": 0.4},
        profiles={"paper": {}, "quick": dict(QUICK)},
        labels={"fedda": "FedDA_0.5", "fedgp": "FedGP_0.5", "fedda_auto": "FedDA_Auto", "fedgp_auto": "FedGP_Auto"},
        paper={m: {int(k): v for k, v in row.items()} for m, row in TABLE13_14_FMNIST_TARGET_SIZE.items()},
        paper_ref="seed 004, Tables 13-14 (Fashion-MNIST, noise 0.4)"),
}
