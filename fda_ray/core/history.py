"""History of one run: the resolved config, one metrics row per round, the final global weights.

Rows hold scalars and per-source lists (beta_i, cosines, estimates); `to_parquet` writes one row per round
with the config's hyper-parameters as columns (atomically: a temporary file renamed into place).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch


def config_columns(config: dict[str, Any], rows: list[dict[str, Any]], skip: Any = (), clash: Any = ()
                   ) -> dict[str, Any]:
    """A run's config as columns beside its rounds, the fields but those in `skip`: a field named like a column some
    round logs (FedWCA's beta and alpha, lists per round), or in `clash`, is config_<name> in every row, so that one
    column never holds the config's number in some rows and the metric in others (pyarrow refuses the mix, and a
    reader would take one for the other). A run's --parquet and a sweep's results.parquet alike."""
    renamed = {k for r in rows for k in r} | set(clash)
    return {(f"config_{k}" if k in renamed else k): v for k, v in config.items() if k not in skip}


@dataclass
class History:
    config: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    final_weights: torch.Tensor | None = None  # (M,) flat global weights after the last row
    seconds: float = 0.0
    startup: dict[str, float] = field(default_factory=dict)  # seconds by start-up phase (fda_ray.runtime.startup)
    # what computed the rows (fda_ray.experiments.records.environment: torch, numpy, code version, aggregation, ...):
    # to_parquet writes it as build_<name> columns, as a sweep's results.parquet has them; None: not recorded
    build: dict[str, Any] | None = None

    @property
    def final_accuracy(self) -> float:
        return float(self.rows[-1]["accuracy"]) if self.rows else float("nan")

    def last_accuracy(self, k: int = 5) -> float:
        """Mean target accuracy of the last k rows (Auto-weighted FDA reports its DomainBed numbers this way)."""
        accs = [float(r["accuracy"]) for r in self.rows[-k:]]
        return sum(accs) / len(accs) if accs else float("nan")

    @property
    def final_loss(self) -> float:
        return float(self.rows[-1]["loss"]) if self.rows else float("nan")

    def column(self, name: str) -> list[Any]:
        return [r.get(name) for r in self.rows]

    def to_records(self) -> list[dict[str, Any]]:
        """Rows with the config's scalar fields as columns (config_columns), then the build's as build_<name> when
        it is known."""
        cfg = {k: (json.dumps(v) if isinstance(v, (list, tuple, dict)) else v)
               for k, v in config_columns(self.config, self.rows).items()}
        cfg.update({f"build_{k}": v for k, v in (self.build or {}).items()})
        return [{**cfg, **row} for row in self.rows]

    def to_parquet(self, path: str | os.PathLike) -> Path:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        records = self.to_records()
        # from_pylist infers the columns from the first row alone: warm-up rows lack beta_i and friends,
        # so give it the union of the keys in first-seen order.
        keys = list(dict.fromkeys(k for r in records for k in r))
        table = pa.Table.from_pydict({k: [r.get(k) for r in records] for k in keys})
        from fda_ray.core.storage import atomic_local

        with atomic_local(path) as tmp:  # a killed run keeps the previous file whole; a symlink stays a link
            pq.write_table(table, tmp)
        return path

    def to_json(self) -> dict[str, Any]:
        def clean(v: Any) -> Any:
            if isinstance(v, float) and not math.isfinite(v):
                return None
            if isinstance(v, list):
                return [clean(x) for x in v]
            return v

        return {"config": self.config, "seconds": self.seconds,
                "final_accuracy": clean(self.final_accuracy), "last5_accuracy": clean(self.last_accuracy(5)),
                "rounds": [{k: clean(v) for k, v in r.items()} for r in self.rows]}
