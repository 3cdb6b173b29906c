"""Golden numbers of the FDA methods: per-round rows and final weights, recorded before the round loop was
rebuilt on the algorithm contract (issue 15), kept within float tolerance on any machine.

The fixture (golden/fda_methods.json) holds, per case, the config, every row's numbers (timings left out)
and a summary of the final weights: each layer's L2 norm and 16 fixed coordinates. It was written from
the runs of the code before the port (commit eedeb91); the port gave identical rows and weights on the
same machine. Re-recorded on 2026-11-23 under torch 2.15.0 (CI installs the newest torch): the code at a40ad7e,
before that session's changes, failed the old fixture there in the same 5 cases and by the same amounts
(finetune_offline's training loss 3.7 %, fedda_label_shift's 1.5 %), so the difference is the torch build. On another CPU the float sums run in another order (SIMD width), and another torch build runs
other kernels (torch 2.15 moved a weight by 2.3e-5 and an estimate by 0.5 % against the recording), so the
comparison allows what that can move in four rounds of Adam (lr 1e-3) on tiny data: a weight a tenth of one
Adam step (1e-4) or 1e-3 relative, a layer norm 1e-3 relative, a loss or estimate 1 % relative, an accuracy
one test sample of 100. A change of the code that is meant to keep the numbers moves none of them by more.

To re-record after a change that is meant to change the numbers: python tests/test_golden.py --record [CASE ...]
(the named cases only; none: all). fedgp_exact_nofilter was re-recorded alone on 2026-11-29, when the exact
projection stopped reading the cosine form's alignment factor (FedGP Def. 3.1 has none; the other cases unchanged).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

FIXTURE = Path(__file__).parent / "golden" / "fda_methods.json"
TIMING = {"seconds", "client_seconds_max", "client_seconds_sum", "client_seconds_i", "driver_seconds"}
BASE = dict(dataset="fashion-mnist", num_sources=3, rounds=3, warmup_rounds=1, samples_per_client=128,
            test_samples=100, target_labelled=32, threads=1)
CASES: dict[str, dict] = {
    **{m: {"method": m} for m in ("source_only", "target_only", "fedda", "fedgp", "fedda_auto", "fedgp_auto",
                                  "finetune_offline", "oracle")},
    "fedgp_exact_nofilter": dict(method="fedgp", projection="exact", filter=False, beta=0.3, eval_noise=(0.2, 0.5),
                                 noise=0.3),
    "fedgp_auto_rule_fedgp": dict(method="fedgp_auto", auto_beta_rule="fedgp", noise=0.2),
    "target_only_log": dict(method="target_only", log_estimates=True),
    "finetune_loop": dict(method="finetune_offline", baseline_protocol="loop", finetune_epochs=2),
    "fedda_label_shift": dict(method="fedda", partition="label_shift", eta=0.2, target_labelled=None, target_fraction=0.3,
                              samples_per_client=200),
}
COORDS = 16
# Cases whose numbers do not hold across machines within float tolerance: on an AMD EPYC (same torch 2.15.0 build
# as the recording) finetune_offline's training loss moved 2.5 % and fedda_label_shift's logged cosine 0.087 ->
# 0.101 and its layer norms 0.4 %, already at the commit before the package moved (found 2026-11-24; issue 38,
# results that hold on another machine). Tiny data and Adam amplify another summation order; until that is
# understood these two are checked for determinism on the running machine (two runs, identical numbers) and
# their fixture entries are kept for the record.
MACHINE_SENSITIVE = ("finetune_offline", "fedda_label_shift")


def summary(weights: torch.Tensor, offsets: list[int]) -> dict:
    """Each layer's L2 norm and COORDS evenly spaced coordinates of the flat weights (M,)."""
    w = weights.double()
    idx = torch.linspace(0, w.numel() - 1, COORDS).round().long()
    return {"layer_norms": [float(w[a:b].norm()) for a, b in zip(offsets[:-1], offsets[1:])],
            "coords": w[idx].tolist()}


def run_case(name: str, data_dir: Path) -> dict:
    from fda_ray import RunConfig, run
    from fda_ray.runtime.experiment import build_experiment

    cfg = RunConfig(**{**BASE, **CASES[name], "data_dir": str(data_dir)})
    hist = run(cfg)
    offsets = build_experiment(cfg).layout.offsets.tolist()
    return {"rows": [{k: v for k, v in r.items() if k not in TIMING} for r in hist.rows],
            "weights": summary(hist.final_weights, offsets)}


def close(name: str, col: str, want, got) -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (name, col, want, got)
        for w, g in zip(want, got):
            close(name, col, w, g)
    elif isinstance(want, float) and isinstance(got, float):
        if col == "accuracy" or col == "eval_noise_accuracy":
            assert abs(want - got) <= 0.0101, (name, col, want, got)  # one test sample of 100
        elif math.isnan(want):
            assert math.isnan(got), (name, col, want, got)
        else:  # losses, estimates, betas, cosines: relative float noise of a few rounds, with a floor near 0
            assert got == pytest.approx(want, rel=1e-2, abs=1e-6), (name, col, want, got)
    elif col != "predicted_rule":  # (an argmin of estimates: a near-tie may flip on another CPU)
        assert want == got, (name, col, want, got)


@pytest.fixture(scope="module")
def golden():
    return json.loads(FIXTURE.read_text())


@pytest.mark.parametrize("name", [c for c in CASES if c not in MACHINE_SENSITIVE])
def test_fda_methods_give_their_golden_numbers(golden, fmnist_dir, name):
    want = golden[name]
    got = run_case(name, fmnist_dir)
    assert len(got["rows"]) == len(want["rows"])
    for w, g in zip(want["rows"], got["rows"]):
        assert set(w) == set(g), (name, w["round"], set(w) ^ set(g))
        for col in w:
            close(name, col, w[col], g[col])
    ww, gw = want["weights"], got["weights"]
    torch.testing.assert_close(torch.tensor(gw["layer_norms"]), torch.tensor(ww["layer_norms"]), rtol=1e-3, atol=1e-6)
    torch.testing.assert_close(torch.tensor(gw["coords"]), torch.tensor(ww["coords"]), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", MACHINE_SENSITIVE)
def test_machine_sensitive_cases_are_deterministic_here(golden, fmnist_dir, name):
    """The same code path twice in one process gives identical rows and weights (exact equality is right here)."""
    a, b = run_case(name, fmnist_dir), run_case(name, fmnist_dir)
    assert a == b
    assert len(a["rows"]) == len(golden[name]["rows"])  # the fixture still describes the same rounds


if __name__ == "__main__":
    if sys.argv[1:2] != ["--record"] or not set(sys.argv[2:]) <= set(CASES):
        sys.exit(f"usage: python tests/test_golden.py --record [CASE ...], CASE one of {', '.join(CASES)}")
    names = sys.argv[2:] or list(CASES)
    sys.path.insert(0, str(Path(__file__).parent))
    import tempfile

    from conftest import make_fmnist_dir

    with tempfile.TemporaryDirectory() as d:
        data = make_fmnist_dir(Path(d) / "fmnist")  # the same files as the session fixture
        new = {name: run_case(name, data) for name in names}
    out = {**(json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}), **new}
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {FIXTURE} ({len(new)} of its {len(out)} cases recorded now)")
