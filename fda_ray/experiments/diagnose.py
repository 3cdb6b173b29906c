"""`python -m fda_ray.diagnose`: which aggregation rule the theory expects to win in a setting, before a sweep.

    python -m fda_ray.diagnose --dataset fashion-mnist --noise 0.8                # pi = model after warm-up
    python -m fda_ray.diagnose --dataset fashion-mnist --noise 0.8 --at path --rounds 10 --method fedgp --json

Builds the run's setting exactly as `python -m fda_ray` would (same options, same seeds) and measures, at
the parameters pi (fda_ray.algorithms.fda.diagnostics, Auto-weighted FDA Secs. 3-4):
  per source   d_i (source-target distance), tau^2_i (the share of d_i^2 FedGP's projection leaves), and
               the auto-weighted beta_i of FedDA and FedGP (Auto-weighted FDA eq (13))
  target       sigma (the target variance at the run's number of labelled samples)
  every rule   its Delta^2 = sum_i alpha_i Delta_i^2 (Auto-weighted FDA eq (9); exact with one source) and the rule with the
               smallest one: the rule the theory predicts best. With several sources eq (9) is a bound (Jensen); the
               true side also gives the exact Delta^2 of the rules linear in the target's gradient (target only,
               source only = FedAvg, FedDA static and auto: fda_ray.algorithms.fda.diagnostics.exact_deltas).
Two columns: "true" takes the whole target domain as known (the target client's pool: every target
training sample with its label, the noise drawn once) and "estimated" only what the target client has,
its labelled samples (Auto-weighted FDA App. A.2's unbiased estimators, one part per sample). The gap between the two
shows how far the auto-weighted methods' own estimates can be trusted at this sample size. An estimated
tau^2_i is the ratio of two separate unbiased estimates (tau^2 d_i^2 and d_i^2, each clamped at 0), so
with d_i small against sigma it can come out above 1.

pi (`--at`): `warmup` (default) the global model after the warm-up rounds, where every method's own rule
starts (the warm-up is FedAvg for all methods, so this point does not depend on --method); `init` the
initial model (the synthetic experiment's choice); `path` the global models at the start of each of
--rounds main rounds of a run of --method (Auto-weighted FDA App. A.2's "empirical distribution along the optimisation
path"; it trains that run here, serially). Gradients are of the loss at pi with the model in eval mode,
not Adam updates: these are the quantities the theory is about.
"""
from __future__ import annotations

import copy
import json
import sys
import time
import warnings
from typing import TYPE_CHECKING, Any, Callable

import torch

from fda_ray.algorithms.fda import diagnostics as dg
from fda_ray.train.client import loss_fn
from fda_ray.core.config import RunConfig
from fda_ray.core.seeding import generator
from fda_ray.data.base import add_noise
from fda_ray.core.interrupts import cli_main

if TYPE_CHECKING:
    from fda_ray.core.parsing import OneLineParser

POINTS = ("warmup", "init", "path")
LABELS = {"target_only": "Target only", "source_only": "Source only", "fedda": "FedDA", "fedgp": "FedGP",
          "fedda_auto": "FedDA auto beta", "fedgp_auto": "FedGP auto beta"}


class _Collected(Exception):
    """Raised from the run's checkpoint hook once pi has all its points: the run need not go on."""


def parameter_points(exp: Any, at: str, progress: Callable[[str], None] | None = None) -> list[torch.Tensor]:
    """pi's points as flat global weights (M,) (module docstring)."""
    from fda_ray.runtime.engine import build_executor, run_rounds

    if at not in POINTS:
        raise ValueError(f"at={at!r} is invalid: one of {', '.join(POINTS)}")
    init = exp.layout.flatten_model(exp.model)
    warm = exp.cfg.warmup_rounds
    wanted = 1 if at == "warmup" else exp.cfg.rounds
    if at == "init" or (warm == 0 and wanted == 1):
        return [init]
    points = [init] if warm == 0 else []

    def keep(state: dict) -> None:
        # the global model after round next_round - 1: the start of round next_round
        if state["next_round"] >= warm:
            points.append(state["state"]["global"])
            if progress:
                progress(f"pi: point {len(points)}/{wanted} (the model before round {state['next_round']})")
        if len(points) >= wanted:
            raise _Collected

    try:
        run_rounds(exp, build_executor(exp.cfg, exp.clients, kind="serial"), checkpoint=keep)
    except _Collected:
        pass
    return points[:wanted]


def _at_point(exp: Any, model: torch.nn.Module, flat: torch.Tensor, k: int, pool: tuple | None,
              labelled: tuple, population: int | None = None, weights: torch.Tensor | None = None,
              beta: float = 0.5) -> tuple[dg.Quantities | None, dg.Quantities, dict[str, float] | None]:
    """True (None without a pool beyond the labelled samples) and estimated quantities at one point, and the true
    side's exact several-source Delta^2 of the rules linear in g_T (dg.exact_deltas; with the weights given);
    `population`: the target domain's size when `pool` is a subsample of it (--pool-samples)."""
    s = exp.setting
    exp.layout.load_into(model, flat)
    model.eval()  # gradients of the model as evaluated: BatchNorm on running statistics, no dropout

    def lf(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return loss_fn(s.task, out, y, s.aux_tasks)

    sources = torch.stack([dg.full_gradient(model, lf, x, y).double() for x, y in s.sources])  # (N, M)
    # One noise draw per point, seeded by (seed, point, target, purpose): the target domain's inputs.
    t_idx = exp.target_index
    gen = generator(exp.cfg.seed, k, t_idx, "diagnose/labelled")
    x_l = add_noise(labelled[0], s.noise, gen)
    est = dg.estimated_quantities(dg.per_sample_gradients(model, lf, x_l, labelled[1]).double(), sources)
    true = None
    if pool is not None:
        gen = generator(exp.cfg.seed, k, t_idx, "diagnose/pool")
        mom = dg.gradient_moments(model, lf, add_noise(pool[0], s.noise, gen), pool[1])
        true = dg.true_quantities(mom, sources, labelled[0].shape[0], population=population)
        if weights is not None:  # FedDA's beta_i at this point, from its own true quantities
            exact = dg.exact_deltas(mom.mean, true.sigma2, sources, weights, beta, dg.auto_betas(true)["fedda_auto"])
            return true, est, exact
    return true, est, None


def _report(q: dg.Quantities, weights: torch.Tensor, beta: float) -> dict[str, Any]:
    per_source = dg.delta_errors(q, beta=beta)
    deltas = dg.combined(per_source, weights)
    return {**q.to_dict(), "beta_auto_i": {r: b.tolist() for r, b in dg.auto_betas(q).items()},
            "delta2_i": {r: v.tolist() for r, v in per_source.items()}, "delta2": deltas,
            "best_static": dg.best_rule(deltas, dg.STATIC_RULES), "best": dg.best_rule(deltas, dg.RULES)}


def diagnose(cfg: RunConfig, at: str = "warmup", pool_samples: int | None = None,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every number `python -m fda_ray.diagnose` prints, as a dict (module docstring)."""
    from fda_ray.algorithms.aggregation import source_weights
    from fda_ray.runtime.engine import build_experiment

    if at not in POINTS:
        raise ValueError(f"at={at!r} is invalid: one of {', '.join(POINTS)}")
    if pool_samples is not None and pool_samples < 2:
        raise ValueError(f"pool_samples={pool_samples} is invalid: an integer >= 2")
    cfg = cfg.resolved()
    t0 = time.perf_counter()
    # The run's notes (a target smaller than its batch) wait until the inputs are known to be usable: bad input is
    # one line, not a note about a run that will not happen and then the error.
    with warnings.catch_warnings(record=True) as notes:
        warnings.simplefilter("always")
        exp = build_experiment(cfg)
    s = exp.setting
    labelled = s.target_train
    pool = s.target_pool
    population = pool[0].shape[0]  # the whole target domain, whichever of it is measured
    if pool_samples is not None and pool_samples <= s.target_train[0].shape[0] < population:
        raise ValueError(f"pool_samples={pool_samples} is invalid: more than the {s.target_train[0].shape[0]} "
                         "labelled target samples (the true values measure the domain beyond them)")
    if pool_samples is not None and pool_samples < pool[0].shape[0]:
        pick = torch.randperm(pool[0].shape[0], generator=generator(cfg.seed, 0, exp.target_index, "diagnose/pool-pick"))
        pool = (pool[0][pick[:pool_samples]], pool[1][pick[:pool_samples]])
    n = labelled[0].shape[0]
    # Without target samples beyond the labelled ones there is no "whole target domain" to measure.
    has_pool = pool[0].shape[0] > n
    if n < 2:
        raise ValueError(f"target_labelled={n} is invalid for diagnose: the estimators need at least 2 samples")
    for note in notes:
        warnings.warn_explicit(note.message, note.category, note.filename, note.lineno)
    points = parameter_points(exp, at, progress)
    model = copy.deepcopy(exp.model)
    weights = source_weights([len(x) for x, _ in s.sources]).double()
    trues, ests, exacts = [], [], []
    for k, flat in enumerate(points):
        t, e, x = _at_point(exp, model, flat, k, pool if has_pool else None, labelled, population, weights, cfg.beta)
        ests.append(e)
        if t is not None:
            trues.append(t)
            exacts.append(x)
        if progress:
            progress(f"quantities at point {k + 1}/{len(points)} ({time.perf_counter() - t0:.0f} s)")
    true = _report(dg.Quantities.mean(trues), weights, cfg.beta) if trues else None
    if true is not None:  # E_pi of each point's exact value (the bound's terms are averaged the same way)
        true["delta2_exact"] = {r: sum(x[r] for x in exacts) / len(exacts) for r in dg.EXACT_RULES}
    return {"config": cfg.to_dict(), "at": at, "points": len(points), "m": ests[0].m, "labelled": n,
            "pool": pool[0].shape[0] if has_pool else None, "population": population if has_pool else None,
            "alpha_i": weights.tolist(), "beta": cfg.beta,
            "true": true,
            "estimated": _report(dg.Quantities.mean(ests), weights, cfg.beta),
            "seconds": time.perf_counter() - t0}


def format_report(r: dict[str, Any]) -> str:
    """The human-readable table of a diagnose result."""
    cfg, true, est = r["config"], r["true"], r["estimated"]
    where = {"warmup": f"the global model after the {cfg['warmup_rounds']} warm-up rounds (FedAvg of the sources)",
             "init": "the initial global model",
             "path": f"the global models at the start of {r['points']} main rounds of {cfg['method']}"}[r["at"]]

    def pair(key: str, i: int | None = None, fmt: str = "{:.4g}") -> str:
        vals = []
        for q in (true, est):
            if q is None:
                vals.append("-")
            else:
                v = q[key] if i is None else q[key][i]
                vals.append(fmt.format(v))
        return " / ".join(vals)

    lines = [f"diagnose: {cfg['dataset']}, noise {cfg['noise']:g}, partition {cfg['partition']}, "
             f"{cfg['num_sources']} sources, {r['labelled']} labelled target samples, seed {cfg['seed']}",
             f"pi: {where} ({r['points']} point{'s' if r['points'] > 1 else ''}); M = {r['m']} parameters",
             "values: true (target domain = the target's " + (
                 "labelled samples only: no true values)" if not r["pool"] else f"{r['pool']} training samples)"
                 if r.get("population") in (None, r["pool"]) else
                 f"{r['population']} training samples, measured on {r['pool']} of them)")
             + " / estimated (from the labelled samples)", "",
             f"sigma (target variance at n = {r['labelled']}): {pair('sigma')}", "",
             f"{'source':>8} {'alpha':>6}  {'d_i':>19}  {'tau^2_i':>17}  {'auto beta FedDA':>19}  {'auto beta FedGP':>19}"]
    for i, a in enumerate(r["alpha_i"]):
        bda = " / ".join("-" if q is None else f"{q['beta_auto_i']['fedda_auto'][i]:.3f}" for q in (true, est))
        bgp = " / ".join("-" if q is None else f"{q['beta_auto_i']['fedgp_auto'][i]:.3f}" for q in (true, est))
        lines.append(f"{i + 1:>8} {a:>6.3f}  {pair('d_i', i):>19}  {pair('tau2_i', i, '{:.3f}'):>17}  {bda:>19}  {bgp:>19}")
    exact = (true or {}).get("delta2_exact")  # (a record written before it has none)
    lines += ["", f"Delta^2 of each rule (sum_i alpha_i Delta_i^2, Auto-weighted FDA eq (9); smaller is better; "
                  f"static beta {r['beta']:g}):", f"{'rule':>18}  {'true':>12}  {'estimated':>12}"
              + (f"  {'true, exact':>12}" if exact else "")]
    for rule in dg.RULES:
        t = "-" if true is None else f"{true['delta2'][rule]:.4g}"
        x = f"  {exact[rule]:>12.4g}" if exact and rule in exact else ("  " + f"{'-':>12}" if exact else "")
        lines.append(f"{LABELS[rule]:>18}  {t:>12}  {est['delta2'][rule]:>12.4g}{x}")
    if exact and len(r["alpha_i"]) > 1:
        lines.append("(true, exact: the several-source Delta^2 itself where the rule is linear in the target's gradient; "
                     "the first columns are eq (9)'s bound. The predictions use the bound, as the paper does.)")
    best = " / ".join("-" if q is None else LABELS[q["best_static"]] for q in (true, est))
    best_all = " / ".join("-" if q is None else LABELS[q["best"]] for q in (true, est))
    lines += ["", f"predicted best, static rules: {best}", f"predicted best, all rules:    {best_all}",
              f"({r['seconds']:.0f} s)"]
    return "\n".join(lines)


def parser() -> "OneLineParser":
    """The command line of `python -m fda_ray.diagnose`: a run's, and its own flags."""
    from fda_ray.experiments import cli

    p = cli.parser()
    p.prog = "python -m fda_ray.diagnose"
    p.description = __doc__.splitlines()[0]
    p.command = "diagnose"
    for action in p._actions:  # (the run's own words for its outputs: a diagnosis has no rounds)
        if action.dest == "json":
            action.help = "print the diagnosis as one JSON object (the config, the point pi, the estimated and the true quantities)"
        elif action.dest == "parquet":
            action.help = "a run's flag: a diagnosis writes no rounds (refused here)"
    p.add_argument("--at", default="warmup", help=f"pi: one of {', '.join(POINTS)} (default warmup)")
    p.add_argument("--pool-samples", type=int, default=None,
                   help="true values from this many of the target's training samples (default: all)")
    return p


@cli_main
def main(argv: list[str] | None = None) -> int:
    from fda_ray.experiments.cli import config_from_args, one_line_warnings
    from fda_ray.data.base import DatasetNotFound

    from fda_ray.core import plugins

    argv = sys.argv[1:] if argv is None else list(argv)
    if (code := plugins.preload(argv)) is not None:
        return code
    one_line_warnings()  # a run's notes as `warning: ...`, as the run command prints them
    p = parser()
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    try:
        if a.parquet is not None:
            raise ValueError(f"parquet={a.parquet!r} is invalid for diagnose: it writes no rounds (--json prints its "
                             "result as one JSON object)")
        cfg = config_from_args(a)
        if cfg.executor != "serial":
            raise ValueError(f"executor={cfg.executor!r} is invalid for diagnose: it runs in this process (serial)")
        progress = None if a.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
        result = diagnose(cfg, at=a.at, pool_samples=a.pool_samples, progress=progress)
    except (ValueError, DatasetNotFound) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result) if a.json else format_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
