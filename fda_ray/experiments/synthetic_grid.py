"""The synthetic experiment of FedGP (Sec. 5) and Auto-weighted FDA (App. B, Figure 2): does the rule with the smallest
Delta error at initialisation also train best?

    python -m fda_ray.synthetic_grid --out docs/results/synthetic-grid              # 9 x 9, 3 trials
    python -m fda_ray.synthetic_grid --sources 1,5,9 --sizes 1810,90,14 --trials 1  # a 3 x 3 check

Grid: source domain D_i (i = 1..9, shift from the target growing with i; D_1 is the target domain itself)
x target subsample size n_j (decreasing, so the target variance grows with j): a one-source FDA problem per
cell. For each cell and trial, at the initial parameters (pi = the point mass there, as in the papers), with the
whole target domain known:
  predicted  the rule with the smallest Delta error (Auto-weighted FDA Def 3.1): target only sigma^2, source only d^2,
             FedDA (1 - b)^2 sigma^2 + b^2 d^2 (eqs 7, 9, exact with one source) and FedGP by Monte Carlo over `draws`
             target subsamples with the rule itself (whole-vector projection), as the authors plot it; eq (11)'s
             approximation is kept beside it (`fedgp_eq11`);
  actual     the rule with the lowest target test MSE after training each rule, static beta (--beta, 0.5)
             (Figure 2b) and auto-weighted beta (Figure 2c).
Rules: target only, source only, FedDA, FedGP. Outputs: d_pi and sigma_pi per cell, three heat maps (predicted,
actual static, actual auto) as PNG and PDF, a summary.md with the share of cells where the predicted rule is the
actual best, grid.json with every mean, and trials.json with every trial's numbers (written after each cell: an
interrupted grid resumes from it when the same command runs again).

Training follows the authors' code (`synthetic_exp/` of the papers' repository; the papers give none of it):
  network      one hidden layer of 100 sigmoid units, every weight and bias drawn from U(-0.5, 0.5);
  loss         squared error summed over the 10 outputs, mean over samples (also the test metric);
  steps        300 full-batch steps (the authors' epochs): the target's gradient on its subsample, the source's on
               its domain, aggregated per layer: FedDA beta g_S + (1 - beta) g_T, FedGP
               beta max(<g_T, g_S>, 0) / |g_S|^2 g_S + (1 - beta) g_T per layer;
  optimiser    the authors' momentum step, v <- 0.9 v + lr u, theta <- theta - lr v with lr 0.2 (lr applies twice,
               as in their script: heavy-ball momentum with an effective step of lr^2 = 0.04);
  auto beta    estimated once, at initialisation, from the labelled subsample alone: beta_FedDA = sigma^2 / (sigma^2 +
               d^2), beta_FedGP = sigma^2 / (sigma^2 + tau^2 d^2) (Auto-weighted FDA eq 13) with the unbiased
               estimators of App. A.2 over batches of 2 target samples (the authors' target_batch_size; ours are the
               disjoint pairs of the random subsample, an odd sample left out of the estimate).
Ours, where the authors' script differs or is silent: the sources use the target domain's first 4000 inputs (their
labels in D_i) and the last 1000 are the held-out test set of every cell (the script tests on the target points not
subsampled, and its source D_1 trains on them); subsamples are nested (a smaller n_j is part of every larger one);
the sizes are the authors' target sample counts (ratios 0.362 .. 0.003 of 5000).
"""
from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from fda_ray.algorithms import aggregation
from fda_ray.algorithms.fda import diagnostics as dg
from fda_ray.data.synthetic import synthetic_domains
from fda_ray.core.layout import ParamLayout
from fda_ray.train.models import SigmoidMLP
from fda_ray.core.seeding import derive_seed
from fda_ray.core.user_files import is_number
from fda_ray.core.interrupts import cli_main

if TYPE_CHECKING:
    from fda_ray.core.parsing import OneLineParser

RULES = dg.STATIC_RULES  # target_only, source_only, fedda, fedgp
AUTO = {"fedda": "fedda_auto", "fedgp": "fedgp_auto"}
NEAR_BEST = 0.01  # a predicted rule within 1 % of the best test MSE counts as "near best"
LABELS = {"target_only": "Target only", "source_only": "Source only", "fedda": "FedDA", "fedgp": "FedGP"}
RECORD_VERSION = 2  # trials.json written by another version of the experiment is not resumed (2: the authors' setup)


class GridDiverged(RuntimeError):
    """Training diverged in some cell (a non-finite test MSE): no rule can be named best there."""


@dataclass(frozen=True)
class GridConfig:
    sources: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 9)  # D_i, 1-based as in the paper
    sizes: tuple[int, ...] = (1810, 994, 546, 299, 164, 90, 49, 27, 14)  # n_j: decreasing (the authors' counts)
    trials: int = 3
    rounds: int = 300  # full-batch steps (the authors' epochs)
    lr: float = 0.2
    momentum: float = 0.9
    beta: float = 0.5
    hidden: int = 100
    batch_size: int = 2  # target samples per batch of the auto-weighted estimates (the authors' target_batch_size)
    draws: int = 100  # Monte-Carlo target subsamples for FedGP's Delta error (the authors draw 40)
    pool: int = 4000  # target-domain points that are the "whole target domain" (the rest are the test set)
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.sources or any(not 1 <= i <= 9 for i in self.sources):
            raise ValueError(f"sources={self.sources} is invalid: domain indices in 1..9")
        lo = 2 * self.batch_size  # the estimators need two batches
        if not self.sizes or any(not lo <= n <= self.pool for n in self.sizes):
            raise ValueError(f"sizes={self.sizes} is invalid: subsample sizes in {lo}..{self.pool} (two batches of "
                             f"batch_size={self.batch_size} at least)")
        # each once (a cell twice counted twice in the agreement), sizes decreasing (the heat maps' axis says so)
        if len(set(self.sources)) < len(self.sources) or list(self.sources) != sorted(self.sources):
            raise ValueError(f"sources={self.sources} is invalid: each domain once, in increasing order (1,5,9)")
        if len(set(self.sizes)) < len(self.sizes) or list(self.sizes) != sorted(self.sizes, reverse=True):
            raise ValueError(f"sizes={self.sizes} is invalid: each size once, in decreasing order (1810,90,...)")
        for name in ("trials", "rounds", "hidden", "batch_size", "draws"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} is invalid: an integer >= 1")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr={self.lr} is invalid: a finite number > 0")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum={self.momentum} is invalid: a number in [0, 1)")
        if not 0 <= self.beta <= 1:
            raise ValueError(f"beta={self.beta} is invalid: a number in [0, 1]")
        if not 0 <= self.seed < 2 ** 32:  # numpy's seeds (a negative one was a traceback from its bit generator)
            raise ValueError(f"seed={self.seed} is invalid: an integer from 0 to {2 ** 32 - 1}")


def squared_error(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The authors' MSE: the squared error summed over outputs, mean over samples."""
    return ((out - y) ** 2).sum(-1).mean()


def init_model(dim: int, outputs: int, hidden: int, seed: int) -> SigmoidMLP:
    """The network at initialisation: every weight and bias from U(-0.5, 0.5), as the authors draw them."""
    model = SigmoidMLP(dim, outputs, hidden=hidden)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.rand(p.shape, generator=g) - 0.5)
    return model


def update(rule: str, g_t: torch.Tensor | None, g_s: torch.Tensor | None, offsets: torch.Tensor,
           beta: float) -> torch.Tensor:
    """One step's direction (M,) from the target's and the source's full-batch gradients, per layer (module
    docstring): the authors' gradient_proj and convex_combine."""
    if rule == "target_only":
        return g_t
    if rule == "source_only":
        return g_s
    one = torch.ones(1, dtype=torch.float64)
    if rule in ("fedda", "fedda_auto"):
        return aggregation.fedda(g_t, g_s.unsqueeze(0), beta=beta, weights=one, impl="reference")
    return aggregation.fedgp(g_t, g_s.unsqueeze(0), offsets, beta=beta, weights=one, projection="exact",
                             impl="reference")


def train(rule: str, init: torch.nn.Module, target: tuple[torch.Tensor, torch.Tensor],
          source: tuple[torch.Tensor, torch.Tensor], cfg: GridConfig, beta: float) -> torch.nn.Module:
    """`cfg.rounds` momentum steps of the rule's direction from `init`'s parameters; returns the trained copy."""
    from torch.func import functional_call, grad

    layout = ParamLayout.from_model(init)  # parameters only (SigmoidMLP has no buffers): the gradients' order
    bounds = layout.bounds
    theta = layout.flatten_model(init)  # (M,) float32, as the authors train
    velocity = torch.zeros_like(theta)

    def loss(params: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return squared_error(functional_call(init, params, (x,)), y)

    gradient = grad(loss)

    def flat_grad(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # (M,) at theta
        params = {n: theta[bounds[l]:bounds[l + 1]].view(s) for l, (n, s) in enumerate(zip(layout.names, layout.shapes))}
        g = gradient(params, x, y)
        return torch.cat([g[n].reshape(-1) for n in layout.names])

    for _ in range(cfg.rounds):
        # only the gradients the rule reads: target only ignores the source, source only the target
        g_t = flat_grad(*target) if rule != "source_only" else None
        g_s = flat_grad(*source) if rule != "target_only" else None
        velocity = cfg.momentum * velocity + cfg.lr * update(rule, g_t, g_s, layout.offsets, beta)
        theta = theta - cfg.lr * velocity
    model = SigmoidMLP(init.hidden.in_features, init.out.out_features, hidden=init.hidden.out_features)
    layout.load_into(model, theta)
    return model


def cell_trial(init: torch.nn.Module, per_sample: torch.Tensor, domain: dg.Moments, target: tuple[torch.Tensor, torch.Tensor],
               source: tuple[torch.Tensor, torch.Tensor], test: tuple[torch.Tensor, torch.Tensor], cfg: GridConfig,
               mc_seed: int, where: str) -> dict:
    """One cell of one trial: the quantities and Delta errors at init, the auto-weighted betas as the method
    estimates them, and every rule's test MSE after training."""
    t0 = time.time()
    n = target[0].shape[0]
    g_src = dg.full_gradient(init, squared_error, *source).double().unsqueeze(0)  # (1, M)
    q = dg.true_quantities(domain, g_src, n)  # the pool is the whole target domain (finite population)
    deltas = {r: float(v[0]) for r, v in dg.delta_errors(q, beta=cfg.beta).items()}
    deltas["fedgp_eq11"] = deltas["fedgp"]  # the approximation, beside the Monte-Carlo value that replaces it
    deltas["fedgp"] = dg.monte_carlo_deltas(per_sample, g_src, n, beta=cfg.beta, draws=cfg.draws, rules=("fedgp",),
                                            generator=torch.Generator().manual_seed(mc_seed))["fedgp"]
    # the method's betas: from the labelled subsample alone, at initialisation (the authors' estimate, once)
    parts = dg.part_gradients(init, squared_error, *target, parts=n // cfg.batch_size)  # (B, M)
    est = dg.estimated_quantities(parts, g_src)
    betas = {r: float(b[0]) for r, b in dg.auto_betas(est).items()}
    mse: dict[str, float] = {}
    for r in (*RULES, *AUTO.values()):
        try:
            model = train(r, init, target, source, cfg, betas.get(r, cfg.beta))
            with torch.no_grad():
                mse[r] = float(squared_error(model(test[0]), test[1]))
            why = f"test MSE {mse[r]}"
        except ValueError as e:  # the aggregation refuses non-finite gradients (fda_ray.algorithms.aggregation)
            mse[r], why = math.nan, str(e)
        if not math.isfinite(mse[r]):  # a diverged rule has no rank among the others
            raise GridDiverged(f"lr={cfg.lr!r} is too large: rule {r} diverged ({why}) in {where}; "
                               f"try a smaller --lr (default {GridConfig.lr})")
    return {"d2": float(q.d2[0]), "sigma2": q.sigma2, "tau2d2": float(q.tau2d2[0]), "delta": deltas,
            "beta": betas, "sigma2_est": est.sigma2, "d2_est": float(est.d2[0]),
            "tau2d2_est": float(est.tau2d2[0]), "test_mse": mse, "seconds": time.time() - t0}


def cell_key(t: int, i: int, n: int) -> str:
    return f"{t}/D{i}/n{n}"


def read_record(path: Path | None, cfg: GridConfig) -> dict:
    """The trials already done in `path` (trials.json) for this configuration; {} when there is none. A record of
    another configuration or version is refused, not mixed in."""
    from fda_ray.core.user_files import read_json

    if path is None or not path.is_file():
        return {}
    rec = read_json(path, "trials.json", dict)
    ours = json.loads(json.dumps(asdict(cfg)))  # tuples as lists, as read back
    if rec.get("version") != RECORD_VERSION or rec.get("config") != ours:
        theirs = rec.get("config") if isinstance(rec.get("config"), dict) else {}
        moved = [f"{k} {theirs.get(k)!r} -> {v!r}" for k, v in ours.items() if theirs.get(k) != v]
        why = f"version {rec.get('version')!r}, this build writes {RECORD_VERSION}" if rec.get("version") != RECORD_VERSION \
            else "; ".join(moved)
        raise ValueError(f"out={str(path.parent)!r} is invalid: its trials.json holds another grid ({why}); "
                         "use another --out, or delete trials.json to start again")
    cells = rec.get("cells")
    return cells if isinstance(cells, dict) else {}


def run_grid(cfg: GridConfig, progress: Callable[[int, int, int], None] | None = None,
             record: Path | None = None) -> dict:
    """Every cell's quantities, predicted and actual best rules, over cfg.trials trials (module docstring).
    record: trials.json, rewritten after every cell and read back first (the cells it holds are not rerun)."""
    done = read_record(record, cfg)
    domains = synthetic_domains(seed=cfg.seed)
    x1, y1 = domains[0]
    pool = (x1[:cfg.pool], y1[:cfg.pool])
    test = (x1[cfg.pool:], y1[cfg.pool:])
    src_data = {i: (domains[i - 1][0][:cfg.pool], domains[i - 1][1][:cfg.pool]) for i in cfg.sources}  # D_1: the pool

    def save() -> None:
        if record is None:
            return
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp = record.with_name(record.name + ".tmp")
        tmp.write_text(json.dumps({"version": RECORD_VERSION, "config": asdict(cfg), "cells": done}))
        tmp.replace(record)

    for t in range(cfg.trials):
        keys = [cell_key(t, i, n) for i in cfg.sources for n in cfg.sizes]
        if all(k in done for k in keys):
            for i in cfg.sources:
                for n in cfg.sizes:
                    if progress:
                        progress(t, i, n)
            continue
        # Seeds per (grid seed, trial, purpose); the trial takes the round slot of derive_seed.
        init = init_model(x1.shape[1], y1.shape[1], cfg.hidden, derive_seed(cfg.seed, t, 0, "synthetic-init"))
        order = torch.randperm(cfg.pool, generator=torch.Generator().manual_seed(derive_seed(cfg.seed, t, 0, "subsample")))
        # (P, M) float64: the whole target domain at theta_0, converted once a trial (monte_carlo_deltas reads it in
        # float64 in every cell: it copied all P x M values 81 times a trial)
        per_sample = dg.per_sample_gradients(init, squared_error, *pool).double()
        domain = dg.Moments.of(per_sample)
        for i in cfg.sources:
            for n in cfg.sizes:
                key = cell_key(t, i, n)
                if key not in done:
                    idx = order[:n]  # nested subsamples: a smaller n_j is a part of every larger one
                    # the same Monte-Carlo subsamples for every source of a (trial, size): the rules' Deltas compare
                    mc_seed = derive_seed(cfg.seed, t, n, "synthetic-delta")
                    done[key] = cell_trial(init, per_sample, domain, (pool[0][idx], pool[1][idx]), src_data[i], test,
                                           cfg, mc_seed, f"trial {t}, source D_{i}, n={n}")
                    save()
                if progress:
                    progress(t, i, n)
    cells = [[{"d2": [], "sigma2": [], "tau2d2": [], "delta": {}, "test_mse": {}, "beta": {}}
              for _ in cfg.sources] for _ in cfg.sizes]
    for b, n in enumerate(cfg.sizes):
        for a, i in enumerate(cfg.sources):
            c = cells[b][a]
            for t in range(cfg.trials):
                r = done[cell_key(t, i, n)]
                for k in ("d2", "sigma2", "tau2d2"):
                    c[k].append(r[k])
                for k in ("delta", "test_mse", "beta"):
                    for rule, v in r[k].items():
                        c[k].setdefault(rule, []).append(v)
    result = summarize_grid(cells, cfg)
    result["seconds"] = sum(r["seconds"] for r in done.values())
    return result


def _mean(v: list[float]) -> float:
    return sum(v) / len(v)


def summarize_grid(cells: list[list[dict]], cfg: GridConfig) -> dict:
    """Means over trials; predicted = argmin mean Delta (static rules); actual = argmin mean test MSE."""
    out = []
    for row in cells:
        out_row = []
        for c in row:
            delta = {r: _mean(v) for r, v in c["delta"].items()}
            mse = {r: _mean(v) for r, v in c["test_mse"].items()}
            trials = range(len(c["d2"]))
            # each trial's own winners: the seed spread of a cell's ranking (a winner by a hair in the mean
            # flips between trials)
            per_trial = [{r: v[t] for r, v in c["test_mse"].items()} for t in trials]
            per_delta = [{r: v[t] for r, v in c["delta"].items()} for t in trials]
            out_row.append({
                "d": _mean(c["d2"]) ** 0.5, "sigma": _mean(c["sigma2"]) ** 0.5, "tau2": _mean(c["tau2d2"]) / max(_mean(c["d2"]), 1e-300),
                "delta": delta, "test_mse": mse, "beta": {r: _mean(v) for r, v in c.get("beta", {}).items()},
                "predicted": dg.best_rule(delta, RULES),
                "actual_static": dg.best_rule(mse, RULES),
                "actual_auto": dg.best_rule({r: mse[AUTO.get(r, r)] for r in RULES}, RULES),
                "trials_predicted": [dg.best_rule(d, RULES) for d in per_delta],
                "trials_static": [dg.best_rule(m, RULES) for m in per_trial],
                "trials_auto": [dg.best_rule({r: m[AUTO.get(r, r)] for r in RULES}, RULES) for m in per_trial],
            })
        out.append(out_row)
    return agreement({"config": asdict(cfg), "cells": out})


def agreement(result: dict, tol: float = NEAR_BEST) -> dict:
    """Adds the shares of cells where the predicted rule is the actual best ("agreement_static", "_auto"),
    and where its test MSE is within `tol` (relative) of the best one ("near_best_static", "_auto"): when
    two rules train to the same loss, which one is nominally first is noise."""
    flat = [c for row in result["cells"] for c in row]
    for kind in ("static", "auto"):
        mse = [{r: c["test_mse"][AUTO.get(r, r) if kind == "auto" else r] for r in RULES} for c in flat]
        result[f"agreement_{kind}"] = sum(c["predicted"] == c[f"actual_{kind}"] for c in flat) / len(flat)
        result[f"near_best_{kind}"] = sum(m[c["predicted"]] <= (1 + tol) * min(m.values())
                                          for c, m in zip(flat, mse)) / len(flat)
    result["near_best_tol"] = tol
    if flat and all("trials_static" in c for c in flat):  # (a grid.json of the first build keeps only means)
        n_trials = len(flat[0]["trials_static"])
        for kind in ("static", "auto"):
            # each trial's prediction against that trial's winner, and the cells whose winner no trial disputes
            result[f"agreement_{kind}_trials"] = [
                sum(c["trials_predicted"][t] == c[f"trials_{kind}"][t] for c in flat) / len(flat) for t in range(n_trials)]
            result[f"stable_{kind}"] = sum(len(set(c[f"trials_{kind}"])) == 1 for c in flat) / len(flat)
    for key in ("predicted", "actual_static", "actual_auto"):
        result[f"wins_{key}"] = {r: sum(c[key] == r for c in flat) for r in RULES}
    return result


def draw_heatmaps(result: dict, out: Path) -> list[Path]:
    """The three heat maps of Auto-weighted FDA Figure 2 (PNG and PDF) from a grid's result (as in grid.json)."""
    from fda_ray.experiments.figures import heatmap

    cfg = result["config"]
    cells = result["cells"]
    out.mkdir(parents=True, exist_ok=True)
    d_cols = [f"D{i}" for i in cfg["sources"]]  # short: the d values are listed in summary.md
    s_rows = [f"n={n}, σ={_mean([c['sigma'] for c in cells[b]]):.2g}" for b, n in enumerate(cfg["sizes"])]
    code = {r: k for k, r in enumerate(RULES)}
    cats = [LABELS[r] for r in RULES]
    beta = f"{cfg['beta']:g}"  # (the run's static beta: a title once said 0.5 whatever --beta was)
    panels = [("predicted", f"(a) smallest Δ error at init (β = {beta})", "predicted"),
              ("actual_static", f"(b) best target test MSE, β = {beta}", "actual_static"),
              ("actual_auto", "(c) best target test MSE, auto-weighted β", "actual_auto")]
    paths: list[Path] = []
    for key, title, name in panels:
        grid = np.array([[code[c[key]] for c in row] for row in cells])
        paths += heatmap(grid, s_rows, d_cols, out / name, title=title, categories=cats,
                         xlabel=r"source domain $D_i$ (shift level $0.07\,(i-1)$ grows →)",
                         ylabel=r"target samples ($\sigma_\pi$ grows ↓)").paths
    return paths


def replot_damage(result: dict) -> str | None:
    """Why a grid.json cannot be redrawn by draw_heatmaps (None when it can), in a few words: the keys and kinds it
    reads, as write_outputs writes them. A file cut short or edited by hand otherwise ended in a KeyError or a
    TypeError from deep inside the drawing, naming neither the file nor what it lacks."""
    cfg = result.get("config")
    if not isinstance(cfg, dict):
        return "it has no 'config' mapping (the grid's sources and sizes)"
    for key in ("sources", "sizes"):
        # (a list as read back; the tuples of asdict(GridConfig) in memory)
        if not (isinstance(cfg.get(key), (list, tuple)) and cfg[key] and all(is_number(v) for v in cfg[key])):
            return f"its config has no '{key}' list of numbers"
    cells, n_rows, n_cols = result.get("cells"), len(cfg["sizes"]), len(cfg["sources"])
    if not isinstance(cells, list):
        return "it has no 'cells' list (a row per size, a cell per source)"
    if len(cells) != n_rows or not all(isinstance(row, list) and len(row) == n_cols for row in cells):
        return f"its 'cells' are not {n_rows} rows of {n_cols} cells (config: {n_rows} sizes x {n_cols} sources)"
    for b, row in enumerate(cells):
        for a, c in enumerate(row):
            where = f"its cell [{b}][{a}]"
            if not isinstance(c, dict):
                return f"{where} is not a mapping"
            if not is_number(c.get("sigma")):
                return f"{where} has no 'sigma' number"
            for key in ("predicted", "actual_static", "actual_auto"):
                if key not in c:
                    return f"{where} has no '{key}' (the best rule's name)"
                if c[key] not in RULES:
                    return f"{where}'s '{key}' is {c[key]!r}, not one of {', '.join(RULES)}"
    return None


def write_outputs(result: dict, out: Path, seconds: float, command: str) -> str:
    """Three heat maps (PNG and PDF), grid.json and summary.md in `out`; returns the summary text. seconds: the
    cells' compute time (summed over trials.json's cells, so a resumed grid counts each cell once)."""
    cfg = result["config"]
    cells = result["cells"]
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "grid.json.tmp"  # the numbers first (the figures are drawn from them), atomically
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(out / "grid.json")
    draw_heatmaps(result, out)
    d_of = [_mean([row[a]["d"] for row in cells]) for a in range(len(cfg["sources"]))]
    flat = [c for row in cells for c in row]
    if all(c.get("beta") for c in flat):  # (a grid.json of the first build has none)
        beta_line = ("- The auto-weighted betas as the method estimated them at initialisation, mean over the cells: "
                     f"FedDA {_mean([c['beta']['fedda_auto'] for c in flat]):.2f}, "
                     f"FedGP {_mean([c['beta']['fedgp_auto'] for c in flat]):.2f}.")
    else:
        beta_line = "- (this record holds no estimated betas)"
    trial_lines = []
    if "stable_static" in result:
        def spread(v: list[float]) -> str:
            return f"{100 * min(v):.0f}-{100 * max(v):.0f} %"
        trial_lines = [
            f"- Trial by trial (each trial's own prediction against its own winner), min-max over the "
            f"{cfg['trials']} trials: {spread(result['agreement_static_trials'])} (beta {cfg['beta']:g}), "
            f"{spread(result['agreement_auto_trials'])} (auto-weighted).",
            f"- Cells whose best rule after training is the same in every trial: "
            f"{round(result['stable_static'] * len(flat))} of {len(flat)} (beta {cfg['beta']:g}), "
            f"{round(result['stable_auto'] * len(flat))} of {len(flat)} (auto-weighted)."]
    lines = [f"# Synthetic experiment (Auto-weighted FDA Sec. 5, Figure 2): {len(cfg['sizes'])} x {len(cfg['sources'])} grid",
             "", f"Command: `{command}` ({seconds:.0f} s of compute on this machine, summed over "
             "the cells).", "",
             f"- Cells where the rule with the smallest Delta error at initialisation is the best after training "
             f"(static beta {cfg['beta']}): **{100 * result['agreement_static']:.0f} %** "
             f"({round(result['agreement_static'] * len(cells) * len(cells[0]))} of {len(cells) * len(cells[0])}).",
             f"- The same prediction against the best rule when FedDA and FedGP weight beta automatically: "
             f"**{100 * result['agreement_auto']:.0f} %**.",
             f"- Cells where the predicted rule's test MSE is within {100 * result['near_best_tol']:g} % of the best: "
             f"**{100 * result['near_best_static']:.0f} %** (beta {cfg['beta']}), "
             f"**{100 * result['near_best_auto']:.0f} %** (auto-weighted).",
             f"- Trials: {cfg['trials']}; training: {cfg['rounds']} full-batch steps, lr {cfg['lr']}, momentum "
             f"{cfg['momentum']}, {cfg['hidden']} hidden units; auto beta estimated at initialisation from batches of "
             f"{cfg['batch_size']}; FedGP's Delta error over {cfg['draws']} Monte-Carlo subsamples.",
             beta_line,
             *trial_lines,
             "- Cells won, " + "; ".join(f"{what}: " + ", ".join(f"{LABELS[r]} {result[f'wins_{key}'][r]}" for r in RULES)
                                        for key, what in (("predicted", "predicted"),
                                                          ("actual_static", f"best at beta {cfg['beta']:g}"),
                                                          ("actual_auto", "best auto-weighted"))) + ".",
             "- d_pi at initialisation per source domain (each level's shift is a fresh random draw, as the "
             "authors' are, so d_pi need not grow with i): " + ", ".join(
                 f"D{i} {d:.2g}" for i, d in zip(cfg["sources"], d_of)) + ".", "",
             "![predicted](predicted.png)", f"![actual, beta {cfg['beta']:g}](actual_static.png)",
             "![actual, auto](actual_auto.png)", "",
             "| n \\ source | " + " | ".join(f"D{i}" for i in cfg["sources"]) + " |",
             "|---|" + "---|" * len(cfg["sources"])]
    for b, n in enumerate(cfg["sizes"]):
        lines.append(f"| {n} | " + " | ".join(
            f"{LABELS[c['predicted']]} / {LABELS[c['actual_static']]} / {LABELS[c['actual_auto']]}" for c in cells[b]) + " |")
    lines += ["", f"Cells: predicted / actual (beta {cfg['beta']:g}) / actual (auto). d_pi and sigma_pi per cell, the "
              "Delta error of "
              "every rule and every test MSE are in grid.json."]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def _ints(field_name: str, s: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in s.split(","))
    except ValueError:
        raise ValueError(f"{field_name}={s!r} is invalid: comma-separated integers") from None


def parser() -> "OneLineParser":
    """The command line of `python -m fda_ray.synthetic_grid`."""
    from fda_ray.core.parsing import OneLineParser, first_paragraph, typed

    p = OneLineParser(prog="python -m fda_ray.synthetic_grid", description=first_paragraph(__doc__),
                      command="synthetic-grid")
    d = GridConfig()  # the defaults, once
    p.add_argument("--sources", default=",".join(map(str, d.sources)), help="comma-separated source domains D_i, each "
                   "1..9 (D_1 is the target domain itself; the shift grows with i) (default: all nine)")
    p.add_argument("--sizes", default=",".join(map(str, d.sizes)), help="comma-separated target subsample sizes n_j, "
                   "decreasing (default: %(default)s, the authors' counts)")
    p.add_argument("--trials", type=typed("trials", int, "an integer"), default=d.trials,
                   help="trials per cell, each with its own seed (default: %(default)s)")
    p.add_argument("--rounds", type=typed("rounds", int, "an integer"), default=d.rounds,
                   help="full-batch steps of training, the authors' epochs (default: %(default)s)")
    p.add_argument("--lr", type=typed("lr", float, "a number"), default=d.lr,
                   help="the authors' step size (it applies twice: v <- momentum v + lr u, theta <- theta - lr v) "
                   "(default: %(default)s)")
    p.add_argument("--momentum", type=typed("momentum", float, "a number"), default=d.momentum,
                   help="heavy-ball momentum (default: %(default)s)")
    p.add_argument("--beta", type=typed("beta", float, "a number"), default=d.beta,
                   help="the static rules' source weight (Figure 2b) (default: %(default)s)")
    p.add_argument("--hidden", type=typed("hidden", int, "an integer"), default=d.hidden,
                   help="hidden units of the one-hidden-layer sigmoid network (default: %(default)s, the authors')")
    p.add_argument("--batch-size", type=typed("batch_size", int, "an integer"), default=d.batch_size,
                   help="target samples per batch of the auto-weighted estimates (default: %(default)s, the authors')")
    p.add_argument("--draws", type=typed("draws", int, "an integer"), default=d.draws,
                   help="Monte-Carlo target subsamples for FedGP's Delta error (default: %(default)s)")
    p.add_argument("--seed", type=typed("seed", int, "an integer"), default=d.seed,
                   help="the base seed; each (trial, purpose) derives its own, the same in every cell (default: %(default)s)")
    p.add_argument("--out", default="runs/synthetic-grid",
                   help="folder for grid.json, trials.json, summary.md and the heat maps; a grid interrupted there "
                   "resumes when the same command runs again (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("--replot", action="store_true", help="only redraw the heat maps from --out's grid.json")
    return p


@cli_main
def main(argv: list[str] | None = None) -> int:
    from fda_ray.core.user_files import DamagedFileError, read_json
    from fda_ray.runtime import preflight

    p = parser()
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    try:
        out = preflight.output_dir("out", a.out)  # before the grid's minutes of work
        if a.replot:
            path = out / "grid.json"
            if not path.is_file():
                raise ValueError(f"replot=True is invalid: {path} does not exist (run the grid first)")
            result = read_json(path, "grid.json", dict)  # empty, binary, not JSON, a list: one line naming it
            why = replot_damage(result)
            if why is not None:
                raise DamagedFileError("grid.json", path, why)
            for written in draw_heatmaps(result, out):
                print(written)
            return 0
        cfg = GridConfig(sources=_ints("sources", a.sources), sizes=_ints("sizes", a.sizes), trials=a.trials,
                         rounds=a.rounds, lr=a.lr, momentum=a.momentum, hidden=a.hidden, beta=a.beta, batch_size=a.batch_size,
                         draws=a.draws, seed=a.seed)
        record = out / "trials.json"
        read_record(record, cfg)  # another grid's record: refused now, not after the first trial's set-up
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    torch.set_num_threads(max(1, torch.get_num_threads()))
    t0 = time.time()
    total = cfg.trials * len(cfg.sources) * len(cfg.sizes)
    done = [0]

    def progress(t: int, i: int, n: int) -> None:
        done[0] += 1
        if done[0] % max(1, total // 20) == 0 or done[0] == total:
            print(f"[{done[0]}/{total}] trial {t} D{i} n={n}; {time.time() - t0:.0f} s", flush=True)

    try:
        result = run_grid(cfg, progress, record=record)
    except GridDiverged as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"interrupted: the cells done are kept in {record}; run the same command again to resume",
              file=sys.stderr)
        return 130
    command = "python -m fda_ray.synthetic_grid " + " ".join(argv if argv is not None else sys.argv[1:])
    text = write_outputs(result, out, result["seconds"], command.strip())
    print(json.dumps({k: v for k, v in result.items() if k != "cells"}, indent=1) if a.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
