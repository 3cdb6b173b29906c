"""The synthetic experiment of Auto-weighted FDA (Sec. 5, App. B, Figure 2): does the rule with the smallest Delta error
at initialisation also train best?

    python -m fda_ray.synthetic_grid --out docs/results/synthetic-grid            # 9 x 9, 3 trials
    python -m fda_ray.synthetic_grid --sources 1,5,9 --sizes 1000,100,10 --trials 1  # a 3 x 3 check

Grid: source domain D_i (i = 1..9, shift from the target growing with i; D_1 is the target domain itself)
x target subsample size n_j (decreasing, so the target variance grows with j): a one-source FDA problem per
cell. For each cell and trial:
  predicted  the rule with the smallest closed-form Delta error (fda_ray.algorithms.fda.diagnostics) at the initial
             parameters (pi = point mass at initialisation, as in the paper), from the true quantities: the
             whole target domain is known here;
  actual     the rule with the lowest target test MSE after training each rule, static beta (--beta, 0.5)
             (Figure 2b) and auto-weighted beta (Figure 2c).
Rules: target only, source only, FedDA, FedGP. Outputs: d_pi and sigma_pi per cell, three heat maps
(predicted, actual static, actual auto) as PNG, a summary.md with the share of cells where the predicted
rule is the actual best, and grid.json with every number.

Training is the theory's setting (Auto-weighted FDA eq (1)): full-batch gradients, the target's on its subsample and the
source's on its domain, aggregated by the rule as the theory states it (whole-vector projection), one
gradient step of `lr` per round. Auto-weighted rules re-estimate beta each round from the gradients of
B = 16 equal parts of the subsample (Auto-weighted FDA App. A.2 and Algorithm 1; one sample per part when n < 16). Not in the papers, so our choices (Auto-weighted FDA gives no sizes, width,
optimiser, learning rate, rounds or metric): sizes 2000..5, 64 hidden units, lr 0.5, 100 rounds, MSE on
targets standardised with the target domain's training statistics, 1000 held-out target test points.
"""
from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

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


class GridDiverged(RuntimeError):
    """Training diverged in some cell (a non-finite test MSE): no rule can be named best there."""


@dataclass(frozen=True)
class GridConfig:
    sources: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 9)  # D_i, 1-based as in the paper
    sizes: tuple[int, ...] = (2000, 1000, 500, 200, 100, 50, 20, 10, 5)  # n_j: decreasing
    trials: int = 3
    rounds: int = 100
    lr: float = 0.5
    beta: float = 0.5
    hidden: int = 64
    parts: int = 16  # B: target parts the auto-weighted rules estimate beta from each round (fewer if n < B)
    pool: int = 4000  # target-domain points that are the "whole target domain" (the rest are the test set)
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.sources or any(not 1 <= i <= 9 for i in self.sources):
            raise ValueError(f"sources={self.sources} is invalid: domain indices in 1..9")
        if not self.sizes or any(not 2 <= n <= self.pool for n in self.sizes):
            raise ValueError(f"sizes={self.sizes} is invalid: subsample sizes in 2..{self.pool}")
        # each once (a cell twice counted twice in the agreement), sizes decreasing (the heat maps' axis says so)
        if len(set(self.sources)) < len(self.sources) or list(self.sources) != sorted(self.sources):
            raise ValueError(f"sources={self.sources} is invalid: each domain once, in increasing order (1,5,9)")
        if len(set(self.sizes)) < len(self.sizes) or list(self.sizes) != sorted(self.sizes, reverse=True):
            raise ValueError(f"sizes={self.sizes} is invalid: each size once, in decreasing order (2000,500,...)")
        for name in ("trials", "rounds", "hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} is invalid: an integer >= 1")
        if self.parts < 2:
            raise ValueError(f"parts={self.parts} is invalid: an integer >= 2 (the estimators need two parts)")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr={self.lr} is invalid: a finite number > 0")
        if not 0 <= self.beta <= 1:
            raise ValueError(f"beta={self.beta} is invalid: a number in [0, 1]")
        if not 0 <= self.seed < 2 ** 32:  # numpy's seeds (a negative one was a traceback from its bit generator)
            raise ValueError(f"seed={self.seed} is invalid: an integer from 0 to {2 ** 32 - 1}")


def train(rule: str, model: torch.nn.Module, target: tuple[torch.Tensor, torch.Tensor],
          source: tuple[torch.Tensor, torch.Tensor], cfg: GridConfig) -> torch.nn.Module:
    """`cfg.rounds` gradient steps of the aggregated gradient (rule as in fda_ray.algorithms.fda.diagnostics.aggregate)."""
    w = torch.ones(1, dtype=torch.float64)
    layout = ParamLayout.from_model(model)  # parameters only (no buffers): the gradients' order
    theta = layout.flatten_model(model).double()
    for _ in range(cfg.rounds):
        layout.load_into(model, theta.float())
        # Only the gradients the rule reads: target only ignores the source, source only the target.
        g_hat = dg.full_gradient(model, F.mse_loss, *target).double() if rule != "source_only" else None
        g_src = dg.full_gradient(model, F.mse_loss, *source).double().unsqueeze(0) if rule != "target_only" else None
        beta: float | torch.Tensor = cfg.beta
        if rule.endswith("_auto"):
            # Algorithm 1's estimate: B equal parts of the (randomly ordered) subsample, Auto-weighted FDA App. A.2
            parts = dg.part_gradients(model, F.mse_loss, *target, parts=min(cfg.parts, target[0].shape[0])).double()
            beta = dg.auto_betas(dg.estimated_quantities(parts, g_src))[rule]
        theta = theta - cfg.lr * dg.aggregate(rule, g_hat, g_src, w, beta)
    layout.load_into(model, theta.float())
    return model


def run_grid(cfg: GridConfig, progress=None) -> dict:
    """Every cell's quantities, predicted and actual best rules, over cfg.trials trials (module docstring)."""
    domains = synthetic_domains(seed=cfg.seed)
    x1, y1 = domains[0]
    mean, std = y1[:cfg.pool].mean(0), y1[:cfg.pool].std(0)  # standardise with the target's training points
    norm = [(x, (y - mean) / std) for x, y in domains]
    pool = (norm[0][0][:cfg.pool], norm[0][1][:cfg.pool])
    test = (norm[0][0][cfg.pool:], norm[0][1][cfg.pool:])
    src_data = {i: (pool if i == 1 else norm[i - 1]) for i in cfg.sources}
    S, J = len(cfg.sources), len(cfg.sizes)
    cells = [[{"d2": [], "sigma2": [], "tau2d2": [], "delta": {r: [] for r in dg.RULES},
               "test_mse": {r: [] for r in (*RULES, *AUTO.values())}} for _ in range(S)] for _ in range(J)]
    for t in range(cfg.trials):
        # Seeds per (grid seed, trial, purpose); the trial takes the round slot of derive_seed.
        torch.manual_seed(derive_seed(cfg.seed, t, 0, "synthetic-init"))
        init = SigmoidMLP(x1.shape[1], y1.shape[1], hidden=cfg.hidden)
        order = torch.randperm(cfg.pool, generator=torch.Generator().manual_seed(derive_seed(cfg.seed, t, 0, "subsample")))
        domain = dg.gradient_moments(init, F.mse_loss, *pool)  # the whole target domain at theta_0, once a trial
        for a, i in enumerate(cfg.sources):
            g_src = dg.full_gradient(init, F.mse_loss, *src_data[i]).double().unsqueeze(0)
            for b, n in enumerate(cfg.sizes):
                cell = cells[b][a]
                q = dg.true_quantities(domain, g_src, n)
                deltas = dg.delta_errors(q, beta=cfg.beta)
                cell["d2"].append(float(q.d2[0]))
                cell["sigma2"].append(q.sigma2)
                cell["tau2d2"].append(float(q.tau2d2[0]))
                for r in dg.RULES:
                    cell["delta"][r].append(float(deltas[r][0]))
                idx = order[:n]  # nested subsamples: a smaller n_j is a part of every larger one
                target = (pool[0][idx], pool[1][idx])
                for r in (*RULES, *AUTO.values()):
                    model = SigmoidMLP(x1.shape[1], y1.shape[1], hidden=cfg.hidden)
                    model.load_state_dict(init.state_dict())
                    train(r, model, target, src_data[i], cfg)
                    with torch.no_grad():
                        mse = float(F.mse_loss(model(test[0]), test[1]))
                    if not math.isfinite(mse):  # a diverged rule has no rank among the others
                        raise GridDiverged(f"lr={cfg.lr!r} is too large: rule {r} diverged (test MSE {mse}) in trial "
                                           f"{t}, source D_{i}, n={n}; try a smaller --lr (default 0.5)")
                    cell["test_mse"][r].append(mse)
                if progress:
                    progress(t, i, n)
    return summarize_grid(cells, cfg)


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
            out_row.append({
                "d": _mean(c["d2"]) ** 0.5, "sigma": _mean(c["sigma2"]) ** 0.5, "tau2": _mean(c["tau2d2"]) / max(_mean(c["d2"]), 1e-300),
                "delta": delta, "test_mse": mse,
                "predicted": dg.best_rule(delta, RULES),
                "actual_static": dg.best_rule(mse, RULES),
                "actual_auto": dg.best_rule({r: mse[AUTO.get(r, r)] for r in RULES}, RULES),
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
                         xlabel=r"source domain $D_i$ (distance $d_\pi$ grows →)",
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
    """Three heat maps (PNG and PDF), grid.json and summary.md in `out`; returns the summary text."""
    cfg = result["config"]
    cells = result["cells"]
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "grid.json.tmp"  # the numbers first (the figures are drawn from them), atomically
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(out / "grid.json")
    draw_heatmaps(result, out)
    d_of = [_mean([row[a]["d"] for row in cells]) for a in range(len(cfg["sources"]))]
    lines = [f"# Synthetic experiment (Auto-weighted FDA Sec. 5, Figure 2): {len(cfg['sizes'])} x {len(cfg['sources'])} grid",
             "", f"Command: `{command}` ({seconds:.0f} s on this machine).", "",
             f"- Cells where the rule with the smallest Delta error at initialisation is the best after training "
             f"(static beta {cfg['beta']}): **{100 * result['agreement_static']:.0f} %** "
             f"({round(result['agreement_static'] * len(cells) * len(cells[0]))} of {len(cells) * len(cells[0])}).",
             f"- The same prediction against the best rule when FedDA and FedGP weight beta automatically: "
             f"**{100 * result['agreement_auto']:.0f} %**.",
             f"- Cells where the predicted rule's test MSE is within {100 * result['near_best_tol']:g} % of the best: "
             f"**{100 * result['near_best_static']:.0f} %** (beta {cfg['beta']}), "
             f"**{100 * result['near_best_auto']:.0f} %** (auto-weighted).",
             f"- Trials: {cfg['trials']}, rounds: {cfg['rounds']}, lr {cfg['lr']}, hidden {cfg['hidden']}.",
             "- d_pi at initialisation per source domain: " + ", ".join(
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
    p.add_argument("--sources", default="1,2,3,4,5,6,7,8,9", help="comma-separated source domains D_i, each 1..9 "
                   "(D_1 is the target domain itself; the shift grows with i) (default: all nine)")
    p.add_argument("--sizes", default="2000,1000,500,200,100,50,20,10,5", help="comma-separated target subsample sizes n_j (default: %(default)s)")
    p.add_argument("--trials", type=typed("trials", int, "an integer"), default=3,
                   help="trials per cell, each with its own seed (default: %(default)s)")
    p.add_argument("--rounds", type=typed("rounds", int, "an integer"), default=100,
                   help="full-batch gradient steps, one a round (default: %(default)s)")
    p.add_argument("--lr", type=typed("lr", float, "a number"), default=0.5,
                   help="the step size of every round (default: %(default)s)")
    p.add_argument("--beta", type=typed("beta", float, "a number"), default=0.5,
                   help="the static rules' source weight (Figure 2b) (default: %(default)s)")
    p.add_argument("--parts", type=typed("parts", int, "an integer"), default=16,
                   help="B target parts for the auto-weighted estimates (default: %(default)s)")
    p.add_argument("--seed", type=typed("seed", int, "an integer"), default=0,
                   help="the base seed; each (trial, purpose) derives its own, the same in every cell (default: %(default)s)")
    p.add_argument("--out", default="runs/synthetic-grid",
                   help="folder for grid.json, summary.md and the heat maps (default: %(default)s)")
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
                         rounds=a.rounds, lr=a.lr, beta=a.beta, parts=a.parts, seed=a.seed)
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
        result = run_grid(cfg, progress)
    except GridDiverged as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"interrupted: {done[0]} of {total} cells done; the grid writes its results only when complete",
              file=sys.stderr)
        return 130
    command = "python -m fda_ray.synthetic_grid " + " ".join(argv if argv is not None else sys.argv[1:])
    text = write_outputs(result, out, time.time() - t0, command.strip())
    print(json.dumps({k: v for k, v in result.items() if k != "cells"}, indent=1) if a.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
