"""Grid definitions: which runs reproduce which published table."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuning.paper import TABLE10_FMNIST


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

    def seeds_for(self, value: float) -> int:
        return self.seeds.get(value, 1)


PAPER_LABELS = {"source_only": "Source Only", "finetune_offline": "Finetune_Offline", "fedda": "FedDA_0.5",
                "fedgp": "FedGP_0.5", "fedda_auto": "FedDA_Auto", "fedgp_auto": "FedGP_Auto",
                "target_only": "Target Only", "oracle": "Oracle"}

GRIDS: dict[str, Grid] = {
    "noise": Grid(
        name="noise", dataset="fashion-mnist", variable="noise", values=(0.0, 0.2, 0.4, 0.6, 0.8),
        methods=tuple(PAPER_LABELS), seeds={0.4: 3},
        profiles={"paper": {}, "quick": {"rounds": 10, "samples_per_client": 1000, "test_samples": 2000}},
        labels=PAPER_LABELS, paper=TABLE10_FMNIST, paper_ref="seed 004, Table 10 (Fashion-MNIST)"),
}
