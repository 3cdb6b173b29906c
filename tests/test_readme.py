"""The "Adding a method family" example (docs/adding-a-method-family.md) runs as written: registered, its flag
generated, its parameters validated, and with momentum 0 it is FedAvg over the sources (source_only without warm-up)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "docs" / "adding-a-method-family.md"


@pytest.fixture
def fedavgm():
    from fda_ray.algorithms import ALGORITHMS

    text = README.read_text()
    block = re.search(r"<!-- example: add-a-family[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert block, "docs/adding-a-method-family.md lost its add-a-family example"
    namespace: dict = {}
    exec(compile(block.group(1), "docs/adding-a-method-family.md (add-a-family)", "exec"), namespace)
    try:
        yield namespace["FedAvgM"]
    finally:
        ALGORITHMS._items.pop("fedavgm", None)  # the other tests see the shipped registry


def test_the_readme_family_example_runs(fedavgm, tiny):
    from fda_ray import run
    from fda_ray.experiments.cli import config_from_args, parser

    a = parser().parse_args(["--method", "fedavgm", "--fedavgm-momentum", "0.5"])
    assert config_from_args(a).params == {"fedavgm": {"momentum": 0.5}}
    with pytest.raises(ValueError, match=r"fedavgm.momentum=1.5 is invalid: a number in \[0.0, 1.0\]"):
        tiny(method="fedavgm", params={"fedavgm": {"momentum": 1.5}})
    plain = run(tiny(method="fedavgm", warmup_rounds=None, rounds=3, params={"fedavgm": {"momentum": 0.0}}))
    fedavg = run(tiny(method="source_only", warmup_rounds=0, rounds=3, log_estimates=False))
    assert [r["phase"] for r in plain.rows] == ["main"] * 3 and plain.rows[-1]["momentum_norm"] > 0
    # the same local epochs and the same average, summed in another order (a float32 Python sum against the
    # kernel's float64 coefficients): ~1e-7 relative per round, which three rounds of Adam keep below 1e-4
    torch.testing.assert_close(plain.final_weights, fedavg.final_weights, rtol=1e-4, atol=1e-4)
    heavy = run(tiny(method="fedavgm", warmup_rounds=None, rounds=3, params={"fedavgm": {"momentum": 0.9}}))
    assert not torch.allclose(heavy.final_weights, plain.final_weights, rtol=1e-3, atol=1e-3)


def test_a_familys_own_error_in_aggregate_names_its_class_and_where(fedavgm, tiny, monkeypatch):
    """A plug-in family's ValueError in its server step stops the run in one line with the error's class and where
    it was raised (as a recipe's error does), the finished rounds kept; fda-ray's own refusals keep their words."""
    from fda_ray import run
    from fda_ray.runtime.failures import RunFailed

    def aggregate(self, r, state, results):
        if r == 1:
            raise ValueError("boom in aggregate")
        return original(self, r, state, results)

    original = fedavgm.aggregate
    monkeypatch.setattr(fedavgm, "aggregate", aggregate)
    with pytest.raises(RunFailed) as e:
        run(tiny(method="fedavgm", warmup_rounds=None, rounds=3))
    assert re.fullmatch(r"run stopped in round 1: ValueError: boom in aggregate \(test_readme\.py:\d+\); "
                        r"1 finished rounds kept", str(e.value)), str(e.value)
    assert len(e.value.history.rows) == 1
