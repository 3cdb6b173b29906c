"""`python -m fda_ray.diagnose`: pi's points are the run's own models, the true and estimated quantities come
from the setting the run would build, the report names the rule with the smallest Delta error, bad input is
one line with exit code 2."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from fda_ray.experiments import diagnose as dgn
from fda_ray.algorithms.fda import diagnostics as dg
from fda_ray.runtime.engine import build_experiment, run


def test_path_points_are_the_runs_global_models(tiny):
    cfg = tiny(method="fedgp", rounds=2).resolved()
    pts = dgn.parameter_points(build_experiment(cfg), "path")
    assert len(pts) == 2
    # the second point is the model after one main round: a one-round run's final weights
    assert torch.equal(pts[1], run(cfg.replace(rounds=1)).final_weights)
    warm = dgn.parameter_points(build_experiment(cfg), "warmup")
    assert len(warm) == 1 and torch.equal(warm[0], pts[0])
    init = dgn.parameter_points(build_experiment(cfg), "init")
    assert not torch.equal(init[0], warm[0])  # the warm-up round moved the model


def test_quantities_are_those_of_the_setting(tiny):
    """Recompute the true values at the initial model by hand: all per-sample gradients of the target's
    pool (noise-free setting), full source gradients; diagnose must agree."""
    cfg = tiny(method="fedda", noise=0.0).resolved()
    r = dgn.diagnose(cfg, at="init")
    exp = build_experiment(cfg)
    model = exp.model.eval()

    def lf(out, y):
        return torch.nn.functional.cross_entropy(out, y)

    s = exp.setting
    src = torch.stack([dg.full_gradient(model, lf, x, y).double() for x, y in s.sources])
    q = dg.true_quantities(dg.per_sample_gradients(model, lf, *s.target_pool).double(), src, 32)
    assert r["pool"] == 128 and r["labelled"] == 32 and r["m"] == q.m
    assert r["true"]["sigma2"] == pytest.approx(q.sigma2, rel=1e-4)
    assert r["true"]["d2_i"] == pytest.approx(q.d2.tolist(), rel=1e-4)
    deltas = r["true"]["delta2"]
    assert r["true"]["best_static"] == min(dg.STATIC_RULES, key=deltas.get)
    assert r["true"]["best"] == min(dg.RULES, key=deltas.get)
    assert sum(r["alpha_i"]) == pytest.approx(1.0)
    # the exact several-source Delta^2 beside the bound: FedAvg's ||g_T - sum_i alpha_i g_i||^2, by hand
    g_t = dg.per_sample_gradients(model, lf, *s.target_pool).double().mean(0)
    w = torch.tensor(r["alpha_i"], dtype=torch.float64)
    fedavg = float(((g_t - w @ src) ** 2).sum())
    exact = r["true"]["delta2_exact"]
    assert exact["source_only"] == pytest.approx(fedavg, rel=1e-4) and exact["source_only"] <= deltas["source_only"]
    assert exact["fedda"] <= deltas["fedda"] * (1 + 1e-9)
    assert exact["target_only"] == pytest.approx(deltas["target_only"], rel=1e-12)  # sigma^2 (the bound: sum_i alpha_i sigma^2)


def test_noise_raises_the_target_variance(tiny):
    clean = dgn.diagnose(tiny(noise=0.0), at="init")
    noisy = dgn.diagnose(tiny(noise=1.0), at="init")
    assert noisy["true"]["sigma"] > clean["true"]["sigma"]


def test_json_and_text_reports(tiny, fmnist_dir, capsys):
    args = ["--dataset", "fashion-mnist", "--data-dir", str(fmnist_dir), "--num-sources", "3", "--rounds", "1",
            "--warmup-rounds", "1", "--samples-per-client", "128", "--test-samples", "50", "--target-labelled", "32",
            "--noise", "0.5", "--pool-samples", "64"]
    assert dgn.main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pool"] == 64 and out["at"] == "warmup" and len(out["estimated"]["d_i"]) == 3
    assert dgn.main(args) == 0
    text = capsys.readouterr().out
    assert "predicted best, static rules:" in text and "FedGP auto beta" in text
    assert f"{out['estimated']['delta2']['fedda']:.4g}" in text  # the same run prints the same numbers
    assert "true, exact" in text and f"{out['true']['delta2_exact']['fedda']:.4g}" in text
    # the pool is a subsample of the target domain: said so, and its size is what the true sigma is of
    assert out["population"] > 64
    assert f"target domain = the target's {out['population']} training samples, measured on 64 of them" in text


@pytest.mark.parametrize("extra, needle", [
    (["--at", "end"], "at='end' is invalid: one of warmup, init, path"),
    (["--executor", "ray"], "executor='ray' is invalid for diagnose"),
    (["--pool-samples", "1"], "pool_samples=1 is invalid"),
    # no more than the labelled ones: the true values were dropped without a word (exit 0)
    (["--pool-samples", "16"], "pool_samples=16 is invalid: more than the 16 labelled target samples"),
    (["--target-labelled", "1"], "target_labelled=1 is invalid for diagnose"),
])
def test_bad_input_one_line_exit_2(fmnist_dir, capsys, extra, needle):
    args = ["--dataset", "fashion-mnist", "--data-dir", str(fmnist_dir), "--num-sources", "2",
            "--samples-per-client", "64", "--target-labelled", "16", "--at", "init"] + extra
    assert dgn.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and needle in err


def test_missing_dataset_names_searched_paths(tmp_path, monkeypatch, capsys):
    from fda_ray.data import standard

    monkeypatch.setattr(standard, "FMNIST_SYSTEM_DIR", str(tmp_path / "nowhere"))
    monkeypatch.delenv("FDA_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert dgn.main(["--data-dir", str(tmp_path / "empty"), "--at", "init"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "empty") in err and "apt-get install -y dataset-fashion-mnist" in err


def test_module_entry_point_exits_2_without_traceback(fmnist_dir):
    p = subprocess.run([sys.executable, "-m", "fda_ray.diagnose", "--method", "nope", "--data-dir", str(fmnist_dir)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "method='nope' is invalid" in p.stderr


def test_bad_target_is_one_line_without_the_runs_note_before_it(fmnist_dir, capsys):
    """A target too small for the estimators is refused in one line; the run's note about a target smaller than its
    batch (a run that will not happen) is not shown first. With a usable target the note is still shown, as
    `warning: ...`."""
    import warnings

    args = ["--dataset", "fashion-mnist", "--data-dir", str(fmnist_dir), "--num-sources", "2",
            "--samples-per-client", "64", "--at", "init", "--test-samples", "20"]
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # shown every time, whichever test showed it before
        assert dgn.main(args + ["--target-labelled", "1"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: target_labelled=1 is invalid for diagnose") and "\n" not in err
        assert dgn.main(args + ["--target-labelled", "8", "--pool-samples", "16", "--json"]) == 0
        err = capsys.readouterr().err
        assert "warning: the target holds 8 training samples, fewer than batch_target=16" in err


def test_diagnose_refuses_a_runs_parquet_flag_in_one_line(capsys):
    """diagnose takes a run's flags, but writes no rounds: --parquet was accepted and nothing written."""
    from fda_ray.experiments.diagnose import main, parser

    assert main(["--parquet", "d.parquet"]) == 2
    assert capsys.readouterr().err.strip() == ("error: parquet='d.parquet' is invalid for diagnose: it writes no "
                                               "rounds (--json prints its result as one JSON object)")
    json_help = next(a.help for a in parser()._actions if a.dest == "json")
    assert "per-round" not in json_help and "diagnosis" in json_help
