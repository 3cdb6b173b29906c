"""The synthetic experiment (FedGP Sec. 5, Auto-weighted FDA Figure 2) on small grids: the quantities move the way the
grid is built (distance with the source index, variance with smaller subsamples), predicted = argmin of the Delta
errors, actual = argmin of the test MSEs, the agreement share counts the cells, the outputs are written, and an
interrupted grid resumes from trials.json. The training and the auto-weighted betas are checked against the
authors' code (`synthetic_exp/models.py`, `utils.py`, `empirical_metrics_batch.py`), written out here as they wrote
it: explicit W1, b1, W2, b2 tensors and their momentum step."""
from __future__ import annotations

import json

import pytest
import torch

from fda_ray.experiments import synthetic_grid as sg
import matplotlib.image as mpimg

SMALL = dict(sources=(1, 9), sizes=(200, 6), trials=1, rounds=5, hidden=8, draws=20, pool=500)  # 500: a quick domain


def test_small_grid_end_to_end(tmp_path):
    cfg = sg.GridConfig(**SMALL)
    result = sg.run_grid(cfg, record=tmp_path / "trials.json")
    cells = result["cells"]  # [size][source]
    assert len(cells) == 2 and len(cells[0]) == 2
    # D_1 is the target domain itself: d is 0 up to float32 sums over its 500 samples
    assert cells[0][0]["d"] < 1e-3 * cells[0][1]["d"]
    assert cells[0][1]["d"] > 0.1 and cells[1][1]["d"] == pytest.approx(cells[0][1]["d"])  # d: source only
    assert cells[1][0]["sigma"] > 4 * cells[0][0]["sigma"]  # 6 samples vs 200: about 5.8x the std
    for c in (c for row in cells for c in row):
        assert c["predicted"] == min(sg.RULES, key=lambda r: c["delta"][r])
        assert c["actual_static"] == min(sg.RULES, key=lambda r: c["test_mse"][r])
        assert set(c["test_mse"]) == {*sg.RULES, "fedda_auto", "fedgp_auto"}
        assert set(c["beta"]) == {"fedda_auto", "fedgp_auto"} and all(0 <= b <= 1 for b in c["beta"].values())
        # FedGP's Delta by Monte Carlo, eq (11)'s approximation kept beside it; the closed forms of eqs (7), (9)
        assert "fedgp_eq11" in c["delta"] and c["delta"]["fedgp"] != c["delta"]["fedgp_eq11"]
        assert c["delta"]["target_only"] == pytest.approx(c["sigma"] ** 2)
        assert c["delta"]["fedda"] == pytest.approx(0.25 * c["sigma"] ** 2 + 0.25 * c["d"] ** 2)
    # D_1 as the source with 200 labelled samples: every auto-weighted beta is (close to) 1, the source is the target
    assert cells[0][0]["beta"]["fedda_auto"] > 0.9
    assert result["agreement_static"] == sum(c["predicted"] == c["actual_static"] for row in cells for c in row) / 4
    # one trial: its own agreement is the grid's, no trial disputes a winner, and every cell has one winner
    assert result["agreement_static_trials"] == [result["agreement_static"]] and result["stable_auto"] == 1.0
    assert sum(result["wins_actual_static"].values()) == 4
    assert result["wins_predicted"] == {r: sum(c["predicted"] == r for row in cells for c in row) for r in sg.RULES}
    text = sg.write_outputs(result, tmp_path, 1.0, "test")
    for name in ("predicted", "actual_static", "actual_auto"):
        img = mpimg.imread(tmp_path / f"{name}.png")  # (H, W, 4) floats in [0, 1]
        assert img.shape[0] > 200 and img.shape[1] > 300 and img[..., :3].std() > 0.05  # drawn, not blank
        assert (tmp_path / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
    assert json.loads((tmp_path / "grid.json").read_text())["agreement_static"] == result["agreement_static"]
    assert "2 x 2 grid" in text and "%" in text and "estimated them at initialisation" in text
    # the static beta the run used, in the titles and the summary (they said 0.5 whatever --beta was)
    result["config"]["beta"] = 0.9
    text = sg.write_outputs(result, tmp_path, 1.0, "test")
    assert "beta 0.5" not in text and "![actual, beta 0.9]" in text and "actual (beta 0.9)" in text
    titles = []
    from fda_ray.experiments import figures

    real = figures.heatmap
    try:
        figures.heatmap = lambda *a, **k: (titles.append(k["title"]), real(*a, **k))[1]
        sg.draw_heatmaps(result, tmp_path)
    finally:
        figures.heatmap = real
    assert titles[:2] == ["(a) smallest Δ error at init (β = 0.9)", "(b) best target test MSE, β = 0.9"]


def test_interrupted_grid_resumes_from_its_record(tmp_path, monkeypatch):
    """A grid cut short keeps its cells in trials.json; the same grid run again computes only the missing ones and
    gives the same result. Another configuration's record is refused in one line, not mixed in."""
    cfg = sg.GridConfig(**{**SMALL, "rounds": 2, "draws": 4})
    record = tmp_path / "trials.json"
    whole = sg.run_grid(cfg, record=record)
    rec = json.loads(record.read_text())
    assert sorted(rec["cells"]) == sorted(sg.cell_key(0, i, n) for i in cfg.sources for n in cfg.sizes)
    del rec["cells"][sg.cell_key(0, 9, 6)]
    record.write_text(json.dumps(rec))
    real, calls = sg.cell_trial, []
    monkeypatch.setattr(sg, "cell_trial", lambda *a, **k: (calls.append(a[-1]), real(*a, **k))[1])
    again = sg.run_grid(cfg, record=record)
    assert calls == ["trial 0, source D_9, n=6"]
    strip = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731 (the recomputed cell's time)
    assert strip(again) == strip(whole)  # the same code path on the same seeds: equal, bit for bit
    calls.clear()
    sg.run_grid(cfg, record=record)  # complete: nothing recomputed
    assert calls == []
    with pytest.raises(ValueError, match=r"trials.json holds another grid \(rounds 2 -> 3\)"):
        sg.run_grid(sg.GridConfig(**{**SMALL, "rounds": 3, "draws": 4}), record=record)
    # the command line: one line, exit 2, before any work (the record is not the command's: pool 500)
    assert sg.main(["--sources", "1,9", "--sizes", "200,6", "--trials", "1", "--rounds", "2", "--draws", "4",
                    "--hidden", "8", "--out", str(tmp_path)]) == 2


def _authors_net(init: torch.nn.Module) -> list[torch.Tensor]:
    """W1 (m, n), b1 (m, 1), W2 (d, m), b2 (d, 1) as the authors' NN holds them."""
    return [init.hidden.weight.detach().clone(), init.hidden.bias.detach().clone()[:, None],
            init.out.weight.detach().clone(), init.out.bias.detach().clone()[:, None]]


def _authors_grads(ps: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """NN.get_gradients(is_flatten=False): data as (dim, N), MSE = sum of squares / N."""
    ps = [p.clone().requires_grad_(True) for p in ps]
    xt, yt = x.T, y.T
    pred = ps[2].mm(torch.sigmoid(ps[0].mm(xt) + ps[1])) + ps[3]
    loss = ((yt - pred) ** 2).sum() / yt.shape[1]
    return list(torch.autograd.grad(loss, ps))


def _authors_gradient_proj(g_t: torch.Tensor, g_s: torch.Tensor, beta: float) -> torch.Tensor:
    inner = torch.sum(g_t * g_s)
    if inner < 0:
        inner = 0
    return beta * inner / torch.norm(g_s) ** 2 * g_s + (1 - beta) * g_t


@pytest.mark.parametrize("rule,beta", [("fedgp", 0.5), ("fedda", 0.5), ("target_only", 0.0), ("source_only", 1.0),
                                       ("fedgp_auto", 0.3)])
def test_training_is_the_authors_loop(rule, beta):
    """sg.train (torch.func gradients, the library's per-layer aggregation, a flat parameter vector) against the
    authors' NN.train on the same data: their per-layer gradient_proj / convex_combine and their momentum step
    (g <- 0.9 g + lr u; W <- W - lr g). float32 both; after 20 steps they agree to float rounding."""
    torch.manual_seed(0)
    cfg = sg.GridConfig(sources=(1,), sizes=(40,), rounds=20, hidden=7)
    init = sg.init_model(5, 3, 7, seed=1)
    xt, yt = torch.randn(40, 5), torch.randn(40, 3)
    xs, ys = torch.randn(90, 5) + 0.5, torch.randn(90, 3)
    ours = sg.train(rule, init, (xt, yt), (xs, ys), cfg, beta)
    ps, vel = _authors_net(init), [0.0] * 4
    for _ in range(cfg.rounds):
        gs, gt = _authors_grads(ps, xs, ys), _authors_grads(ps, xt, yt)
        if rule.startswith("fedgp"):
            u = [_authors_gradient_proj(t, s_, beta) for t, s_ in zip(gt, gs)]
        else:  # convex_combine: target only is beta 0, source only beta 1
            u = [beta * s_ + (1 - beta) * t for t, s_ in zip(gt, gs)]
        vel = [cfg.momentum * v + cfg.lr * d for v, d in zip(vel, u)]
        ps = [p - cfg.lr * v for p, v in zip(ps, vel)]
    theirs = [ours.hidden.weight, ours.hidden.bias[:, None], ours.out.weight, ours.out.bias[:, None]]
    moved = max(float((p - q).abs().max()) for p, q in zip(ps, _authors_net(init)))
    assert moved > 1e-2  # the steps did move the parameters
    for p, q in zip(theirs, ps):
        torch.testing.assert_close(p.detach(), q, rtol=1e-4, atol=1e-5)


def test_auto_betas_are_the_authors_estimates():
    """The betas cell_trial gives the auto-weighted rules equal the authors' empirical_metrics_batch on the same
    batches of 2 (its sample variances, the clamp at 0, beta_GP = var / (var + projected), beta_DA = var / (var +
    source-target var)): the per-dimension division they make cancels in the ratio."""
    from fda_ray.algorithms.fda import diagnostics as dg

    torch.manual_seed(3)
    init = sg.init_model(6, 2, 5, seed=2)
    x, y = torch.randn(30, 6), torch.randn(30, 2)
    xs, ys = torch.randn(50, 6) * 2 + 1, torch.randn(50, 2)
    g_s = dg.full_gradient(init, sg.squared_error, xs, ys).double()  # (M,)
    batches = dg.part_gradients(init, sg.squared_error, x, y, parts=15).double()  # (15, M): the disjoint pairs
    est = dg.estimated_quantities(batches, g_s.unsqueeze(0))
    ours = {k: float(v[0]) for k, v in dg.auto_betas(est).items()}
    # empirical_metrics_batch.compute_quantities, written as theirs (target_grad: all n samples, even n)
    b, g_t = batches.shape[0], batches.mean(0)
    var = ((batches - g_t) ** 2).sum() / (b - 1) / b
    st = max(float(((batches - g_s) ** 2).sum() / b - var * b), 0.0)
    proj = batches - (batches @ g_s)[:, None] * g_s / g_s.norm() ** 2
    proj_mean = g_t - (g_t @ g_s) * g_s / g_s.norm() ** 2
    proj_var = ((proj - proj_mean) ** 2).sum() / (b - 1)
    projected = max(float((proj.norm(dim=1) ** 2).mean() - proj_var), 0.0)
    assert 0.01 < float(var) / (float(var) + st) < 0.99  # a case that tells the rules apart
    assert ours["fedda_auto"] == pytest.approx(float(var) / (float(var) + st), rel=1e-9)
    assert ours["fedgp_auto"] == pytest.approx(float(var) / (float(var) + projected), rel=1e-9)


@pytest.mark.parametrize("args,field", [(["--sources", "0,3"], "sources=(0, 3)"), (["--sizes", "1"], "sizes=(1,)"),
                                        (["--sizes", "a,b"], "sizes='a,b'"), (["--trials", "0"], "trials=0"),
                                        (["--beta", "2"], "beta=2.0"),
                                        # each once and in the heat maps' order (a cell twice counted twice)
                                        (["--sources", "2,2"], "sources=(2, 2)"), (["--sources", "9,1"], "sources=(9, 1)"),
                                        (["--sizes", "10,2000"], "sizes=(10, 2000)"),
                                        (["--sizes", "3"], "sizes=(3,)"), (["--momentum", "1"], "momentum=1.0"),
                                        (["--batch-size", "0"], "batch_size=0"), (["--draws", "0"], "draws=0")])
def test_bad_arguments_give_one_line(args, field, capsys):
    assert sg.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {field} is invalid")


def test_agreement_counts_exact_and_near_best_cells():
    from fda_ray.experiments.synthetic_grid import agreement

    def cell(pred, mse):  # mse: target_only, source_only, fedda, fedgp, fedda_auto, fedgp_auto
        m = dict(zip(("target_only", "source_only", "fedda", "fedgp", "fedda_auto", "fedgp_auto"), mse))
        static = min(("target_only", "source_only", "fedda", "fedgp"), key=m.get)
        auto = min(("target_only", "source_only", "fedda_auto", "fedgp_auto"), key=m.get)
        return {"predicted": pred, "test_mse": m, "actual_static": static,
                "actual_auto": {"fedda_auto": "fedda", "fedgp_auto": "fedgp"}.get(auto, auto)}

    r = agreement({"cells": [[cell("target_only", [1.005, 3, 2, 1.0, 2, 0.5]),  # 0.5 % behind FedGP: near best
                              cell("fedgp", [1, 3, 2, 0.9, 2, 0.8]),  # exact (static and auto)
                              cell("source_only", [1, 3, 2, 0.9, 2, 0.8])]]})  # far behind
    assert r["agreement_static"] == pytest.approx(1 / 3) and r["near_best_static"] == pytest.approx(2 / 3)
    assert r["agreement_auto"] == pytest.approx(1 / 3) and r["near_best_auto"] == pytest.approx(1 / 3)
