"""FDA diagnostics: which aggregation rule the theory expects to win in a setting (FedGP Sec. 4, Auto-weighted FDA
Secs. 3-4 and App. A).

All quantities are taken over pi, a distribution of model parameters: a point mass at one model, or the
empirical distribution along a run's path (`Quantities.mean` averages over the points). At each point the
inputs are gradients, flattened to (M,):
  d_i^2       = ||g_T - g_Si||^2                              source-target distance, Auto-weighted FDA Def 3.3 eq (5)
  sigma^2     = E_{D^_T} ||g_T - g_{D^_T}||^2                 target variance at n samples, Auto-weighted FDA Def 3.4 eq (6)
  tau^2 d_i^2 = ||g_T - <g_T, u_i> u_i||^2, u_i = g_Si/|g_Si|  the part of g_T FedGP cannot reach, Auto-weighted FDA eq (96)
(g_T is the whole target domain's gradient, g_{D^_T} the labelled subsample's, g_Si a source's.)

The Delta error of a rule, Delta^2 = E_{D^_T} ||g_T - Aggr||^2 (Auto-weighted FDA Def 3.1), bounds how much one step of
the rule can lower the target loss (Auto-weighted FDA Thm 3.2): the smaller, the better. Closed forms, per source i:
  target only  sigma^2                                        Auto-weighted FDA eq (7)
  source only  d_i^2                                          Auto-weighted FDA eq (7)
  FedDA        (1 - b)^2 sigma^2 + b^2 d_i^2                  Auto-weighted FDA eq (9) (FedGP Thm 4.5)
  FedGP        ((1 - b)^2 + (2b - b^2)/M) sigma^2 + b^2 tau^2 d_i^2      Auto-weighted FDA eq (11) (delta-bar = 1)
  auto         the same with b = beta_i*, Auto-weighted FDA eq (13): sigma^2/(sigma^2 + d_i^2) (FedDA),
               sigma^2/(sigma^2 + tau^2 d_i^2) (FedGP)
With several sources and weights alpha_i the rules' errors are at most sum_i alpha_i Delta_i (Auto-weighted FDA eq (9),
Jensen); source only is then FedAvg, whose exact error is ||g_T - sum_i alpha_i g_Si||^2, and `exact_deltas` gives the
exact error of every rule linear in the target's gradient (FedDA too).

Two ways to the quantities: `true_quantities` where the whole target domain is known (its per-sample
gradients), and `estimated_quantities` from the labelled target samples only (Auto-weighted FDA App. A.2's unbiased
estimators, fda_ray.algorithms.fda.estimators, with one part per sample). `monte_carlo_deltas` draws target subsamples and
applies the rules themselves (the theory's whole-vector projection): the "true" Delta errors the closed
forms are checked against.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from fda_ray.algorithms import aggregation
from fda_ray.algorithms.fda import estimators

RULES = ("target_only", "source_only", "fedda", "fedgp", "fedda_auto", "fedgp_auto")
STATIC_RULES = ("target_only", "source_only", "fedda", "fedgp")


@dataclass(frozen=True)
class Quantities:
    """d_i^2, tau^2 d_i^2 per source (N,) float64, sigma^2 at n target samples, model size M."""

    sigma2: float
    d2: torch.Tensor  # (N,)
    tau2d2: torch.Tensor  # (N,)
    m: int
    n: int

    @property
    def tau2(self) -> torch.Tensor:
        """tau-bar^2 in [0, 1]: the share of d_i^2 FedGP's projection leaves (0 where d_i = 0)."""
        return torch.where(self.d2 > 0, self.tau2d2 / torch.where(self.d2 > 0, self.d2, torch.ones_like(self.d2)),
                           torch.zeros_like(self.d2))

    @staticmethod
    def mean(points: Sequence["Quantities"]) -> "Quantities":
        """Over pi = the empirical distribution of the points (a run's path): every quantity is an E_pi."""
        if not points:
            raise ValueError("points=[] is invalid: pi needs at least one parameter point")
        k = len(points)
        return Quantities(sigma2=sum(q.sigma2 for q in points) / k, d2=sum(q.d2 for q in points) / k,
                          tau2d2=sum(q.tau2d2 for q in points) / k, m=points[0].m, n=points[0].n)

    def to_dict(self) -> dict:
        return {"sigma2": self.sigma2, "sigma": self.sigma2 ** 0.5, "d2_i": self.d2.tolist(),
                "d_i": self.d2.sqrt().tolist(), "tau2d2_i": self.tau2d2.tolist(), "tau2_i": self.tau2.tolist(),
                "m": self.m, "n": self.n}


def _check(target: torch.Tensor, sources: torch.Tensor) -> None:
    if target.dim() != 2 or sources.dim() != 2 or target.shape[1] != sources.shape[1]:
        raise ValueError(f"per-sample target gradients (n, M) and source gradients (N, M) are needed, got "
                         f"{tuple(target.shape)} and {tuple(sources.shape)}")


def orthogonal_sq(g: torch.Tensor, sources: torch.Tensor) -> torch.Tensor:
    """||g - <g, u_i> u_i||^2 for each source direction u_i (N,); g: (M,) or (K, M) -> (N,) or (K, N)."""
    s_sq = (sources * sources).sum(1)  # (N,)
    dots = g @ sources.T  # (N,) or (K, N)
    proj_sq = torch.where(s_sq > 0, dots**2 / torch.where(s_sq > 0, s_sq, torch.ones_like(s_sq)), torch.zeros_like(dots))
    return (g * g).sum(-1, keepdim=g.dim() > 1) - proj_sq


@dataclass(frozen=True)
class Moments:
    """What the quantities need of a domain's per-sample gradients: their mean g_T (M,) float64, the mean of
    their squared norms E_z ||grad l(z)||^2, and how many samples were seen. Streams: no (P, M) matrix."""

    mean: torch.Tensor  # (M,)
    mean_sq: float
    count: int

    @staticmethod
    def of(per_sample: torch.Tensor) -> "Moments":
        g = per_sample.double()  # (P, M)
        return Moments(mean=g.mean(0), mean_sq=float((g * g).sum(1).mean()), count=g.shape[0])


def true_quantities(target_domain: torch.Tensor | Moments, sources: torch.Tensor, n: int,
                    without_replacement: bool = True, population: int | None = None) -> Quantities:
    """From the per-sample gradients of the whole target domain (P, M) (or their Moments) and the sources'
    gradients (N, M), at one parameter point: sigma^2 of a uniform n-sample subsample (without replacement:
    the finite-population factor (P - n)/(P - 1); with replacement, i.i.d. as the papers assume: none).

    `population`: the P samples are a uniform subsample of a target domain of this many (diagnose --pool-samples):
    its per-sample variance is estimated from them (unbiased: x P / (P - 1), then the domain's divisor) and the
    finite-population factor is the domain's. (The subsample taken as the domain shrank sigma^2 towards 0 as P
    approached n: 4.50 -> 0.46 at P = 101, n = 100, and the predicted rule flipped.)"""
    mom = target_domain if isinstance(target_domain, Moments) else Moments.of(target_domain)
    if sources.dim() != 2 or sources.shape[1] != mom.mean.shape[0]:
        raise ValueError(f"source gradients (N, M) with M = {mom.mean.shape[0]} are needed, got {tuple(sources.shape)}")
    p = mom.count
    domain = p if population is None else population
    if population is not None and not (isinstance(population, int) and population >= p):
        raise ValueError(f"population={population!r} is invalid: at least the {p} samples given")
    if not 1 <= n <= domain:
        raise ValueError(f"n={n} is invalid: between 1 and the target domain's {domain} samples")
    s, g_t = sources.double(), mom.mean
    # E_z ||grad l(z) - g_T||^2 = E_z ||grad l(z)||^2 - ||g_T||^2 (clamped: rounding can make it slightly < 0)
    per_sample = max(mom.mean_sq - float(g_t @ g_t), 0.0)
    if domain > p:  # a subsample's variance, unbiased for the domain's (divisor domain - 1), back to divisor domain
        per_sample *= p / (p - 1) * (domain - 1) / domain if p > 1 else float("nan")
    p = domain
    fpc = (p - n) / (p - 1) if without_replacement and p > 1 else 1.0
    return Quantities(sigma2=per_sample / n * fpc, d2=((s - g_t) ** 2).sum(1), tau2d2=orthogonal_sq(g_t, s),
                      m=g_t.shape[0], n=n)


def estimated_quantities(target_samples: torch.Tensor, sources: torch.Tensor) -> Quantities:
    """From the labelled target samples' gradients (n, M) only: Auto-weighted FDA App. A.2's unbiased estimators with one
    part per sample (eqs (90), (95), (105) with B = n; d^2 and tau^2 d^2 clamped at 0 as in
    fda_ray.algorithms.fda.estimators.estimate, which gives the same numbers per parameter). Written in O(n M) instead of
    the estimators' B x B Gram matrix, which costs O(n^2 M) when every sample is a part."""
    _check(target_samples, sources)
    n, m = target_samples.shape
    if n < 2:
        raise ValueError(f"n={n} target samples is invalid: the estimators need at least 2")
    g, s = target_samples.double(), sources.double()
    g_bar = g.mean(0)  # (M,)
    c = g - g_bar  # (n, M) centred
    v = float((c * c).sum()) / (n - 1)  # sample variance of one sample's gradient, eq (88)
    # mean_b ||g_b - g_i||^2 = ||g_bar - g_i||^2 + (n-1)/n v, so eq (95) is ||g_bar - g_i||^2 - v/n
    d2 = (((s - g_bar) ** 2).sum(1) - v / n).clamp_min(0.0)  # (N,)
    # eq (105) on r_b = g_b - <g_b, u_i> u_i: ||r_bar||^2 - w_i/n, w_i the variance of r_b
    s_sq = (s * s).sum(1)  # (N,)
    safe = torch.where(s_sq > 0, s_sq, torch.ones_like(s_sq))
    along = ((c @ s.T) ** 2).sum(0) / safe  # (N,) sum_b <c_b, u_i>^2
    w = (float((c * c).sum()) - along) / (n - 1)  # (N,)
    tau2d2 = (orthogonal_sq(g_bar, s) - w / n).clamp_min(0.0)
    return Quantities(sigma2=v / n, d2=d2, tau2d2=tau2d2, m=m, n=n)


def from_estimates(stats: dict, m: int, n: int) -> Quantities:
    """Quantities from fda_ray.algorithms.fda.estimators.estimate's per-parameter statistics (kept per parameter: the
    rules' ranking and beta_i do not change with a common scale; only the 1/M term needs M)."""
    return Quantities(sigma2=float(stats["sigma2"]), d2=stats["d2"].double(), tau2d2=stats["tau2d2"].double(), m=m, n=n)


def round_estimates(stats: dict, weights: torch.Tensor, m: int, parts: int, beta: float) -> dict:
    """The per-round log of a run (fda_ray.runtime.engine): the estimates, every rule's Delta^2 from them
    (sum_i alpha_i Delta_i^2, per parameter) and the static rule the theory predicts best this round.
    parts: the B target parts (steps) the estimates came from."""
    q = from_estimates(stats, m, parts)
    deltas = combined(delta_errors(q, beta=beta), weights)
    row = {"sigma2": float(stats["sigma2"]), "d2_i": stats["d2"].tolist(), "tau2d2_i": stats["tau2d2"].tolist(),
           "delta_i": stats["delta"].tolist(), "gbar2": float(stats["gbar2"])}
    row.update({f"delta2_{r}": v for r, v in deltas.items()})
    row["predicted_rule"] = best_rule(deltas, STATIC_RULES)
    return row


def auto_betas(q: Quantities) -> dict[str, torch.Tensor]:
    """beta_i* of Auto-weighted FDA eq (13) for FedDA and FedGP (N,); 0/0 (nothing to learn either way) gives 0.5."""
    stats = {"sigma2": q.sigma2, "d2": q.d2, "tau2d2": q.tau2d2}
    return {"fedda_auto": estimators.auto_beta(stats, "fedda"), "fedgp_auto": estimators.auto_beta(stats, "fedgp")}


def delta_errors(q: Quantities, beta: float = 0.5) -> dict[str, torch.Tensor]:
    """The closed-form Delta^2 of every rule, per source (N,) float64 (module docstring)."""
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta={beta} is invalid: a number in [0, 1]")
    s = torch.full_like(q.d2, q.sigma2)

    def fedda(b: torch.Tensor | float) -> torch.Tensor:
        return (1 - b) ** 2 * s + b**2 * q.d2

    def fedgp(b: torch.Tensor | float) -> torch.Tensor:
        return ((1 - b) ** 2 + (2 * b - b**2) / q.m) * s + b**2 * q.tau2d2

    auto = auto_betas(q)
    return {"target_only": s, "source_only": q.d2.clone(), "fedda": fedda(beta), "fedgp": fedgp(beta),
            "fedda_auto": fedda(auto["fedda_auto"]), "fedgp_auto": fedgp(auto["fedgp_auto"])}


EXACT_RULES = ("target_only", "source_only", "fedda", "fedda_auto")  # the rules linear in the target's gradient


def exact_deltas(g_t: torch.Tensor, sigma2: float, sources: torch.Tensor, weights: torch.Tensor, beta: float,
                 beta_auto: torch.Tensor) -> dict[str, float]:
    """The exact several-source Delta^2 of the rules whose aggregate is linear in the target's gradient, where
    `combined` gives Auto-weighted FDA eq (9)'s bound sum_i alpha_i Delta_i^2. With g_hat unbiased for g_T
    (E g_hat = g_T, E ||g_hat - g_T||^2 = sigma^2) and c = sum_i alpha_i beta_i:
      g_T - Aggr = (1 - c)(g_T - g_hat) + sum_i alpha_i beta_i (g_T - g_i),   the cross term 0 in expectation, so
      Delta^2    = (1 - c)^2 sigma^2 + ||sum_i alpha_i beta_i (g_T - g_i)||^2;
    source only (FedAvg) is beta_i = 1: ||g_T - sum_i alpha_i g_i||^2. FedGP's projection is not linear in g_hat: it
    has no such form (monte_carlo_deltas measures it). g_t (M,) the whole target domain's gradient; sources (N, M);
    weights alpha_i (N,); beta_auto: FedDA's beta_i (N,). With one source each equals `combined`'s value."""
    g, s, w = g_t.double(), sources.double(), weights.double()
    gap = g.unsqueeze(0) - s  # (N, M): g_T - g_i

    def linear(b: torch.Tensor) -> float:  # b (N,)
        c = float((w * b).sum())
        pull = ((w * b).unsqueeze(1) * gap).sum(0)  # (M,)
        return (1 - c) ** 2 * sigma2 + float(pull @ pull)

    ones = torch.ones_like(w)
    return {"target_only": sigma2, "source_only": linear(ones), "fedda": linear(ones * beta),
            "fedda_auto": linear(beta_auto.double())}


def combined(per_source: dict[str, torch.Tensor], weights: torch.Tensor) -> dict[str, float]:
    """sum_i alpha_i Delta_i: the several-source bound of Auto-weighted FDA eq (9) (exact with one source)."""
    w = weights.double()
    return {rule: float(w.to(v.device) @ v) for rule, v in per_source.items()}


def best_rule(deltas: dict[str, float], rules: Sequence[str] = STATIC_RULES) -> str:
    """The rule with the smallest Delta error among `rules` (ties: the earlier in `rules`); non-finite values
    (a diverged quantity) have no rank: ValueError."""
    bad = [r for r in rules if not math.isfinite(deltas[r])]
    if bad:
        raise ValueError(f"no best rule: non-finite values for {', '.join(bad)} ({', '.join(f'{r}={deltas[r]}' for r in bad)})")
    return min(rules, key=lambda r: (deltas[r], rules.index(r)))


def aggregate(rule: str, g_hat: torch.Tensor | None, sources: torch.Tensor | None, weights: torch.Tensor,
              beta: float | torch.Tensor) -> torch.Tensor:
    """The rule as the theory states it, on flat gradients: FedGP projects on the whole vector with the exact
    coefficient max(<g_T, g_i>, 0)/|g_i|^2 (Auto-weighted FDA eq (10)), FedDA is eq (8), source only is FedAvg. Target only
    reads only g_hat, source only only the sources (the other may be None)."""
    if rule not in RULES:
        raise ValueError(f"rule={rule!r} is invalid: one of {', '.join(RULES)}")
    like = g_hat if g_hat is not None else sources
    whole = torch.tensor([0, like.shape[-1]], dtype=torch.int64)  # one layer: the theory's whole vector
    # the auto-weighted rules are their static rule with the estimated beta_i (the caller passes them)
    static = rule.removesuffix("_auto")
    impl = None if static == "source_only" else "reference"
    return aggregation.RULES.get(static)(g_hat, sources, whole, beta=beta, weights=weights, impl=impl,
                                         projection="exact")


def monte_carlo_deltas(target_domain: torch.Tensor, sources: torch.Tensor, n: int, *, beta: float = 0.5,
                       weights: torch.Tensor | None = None, draws: int = 200, generator: torch.Generator | None = None,
                       rules: Sequence[str] = RULES) -> dict[str, float]:
    """The "true" Delta^2 of each rule at one parameter point: the mean over `draws` uniform n-sample target
    subsamples of ||g_T - Aggr||^2, g_T the whole target domain's gradient. Auto-weighted rules estimate
    beta_i from each subsample's per-sample gradients, as the method does."""
    _check(target_domain, sources)
    p, _ = target_domain.shape
    if not 1 <= n <= p:
        raise ValueError(f"n={n} is invalid: between 1 and the target domain's {p} samples")
    t, s = target_domain.double(), sources.double()
    w = torch.full((s.shape[0],), 1.0 / s.shape[0], dtype=torch.float64) if weights is None else weights.double()
    g_t = t.mean(0)
    total = {r: 0.0 for r in rules}
    for _ in range(draws):
        idx = torch.randperm(p, generator=generator)[:n]
        sample = t[idx]  # (n, M)
        g_hat = sample.mean(0)
        betas = auto_betas(estimated_quantities(sample, s)) if n >= 2 and any(r.endswith("_auto") for r in rules) else {}
        for r in rules:
            b = betas.get(r, torch.full_like(w, 0.5)) if r.endswith("_auto") else beta
            diff = g_t - aggregate(r, g_hat, s, w, b)
            total[r] += float(diff @ diff)
    return {r: v / draws for r, v in total.items()}


# ---------------------------------------------------------------- gradients of a model

def part_gradients(model: torch.nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                   x: torch.Tensor, y: torch.Tensor, parts: int) -> torch.Tensor:
    """(parts, M) float32: the gradient of the mean loss of each of `parts` equal consecutive parts of (x, y)
    (Auto-weighted FDA App. A.2's split D^_T^1..D^_T^B; n // parts samples each, a remainder is left out), flattened in
    named_parameters order. torch.func: one vmapped backward, not `parts` backward passes."""
    from torch.func import functional_call, grad, vmap

    if not 1 <= parts <= x.shape[0]:
        raise ValueError(f"parts={parts} is invalid: between 1 and the {x.shape[0]} samples")
    k = x.shape[0] // parts
    params = {name: v.detach() for name, v in model.named_parameters()}
    buffers = {name: v.detach() for name, v in model.named_buffers()}

    def loss_part(p: dict, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return loss_fn(functional_call(model, (p, buffers), (xb,)), yb)

    xs = x[:parts * k].reshape(parts, k, *x.shape[1:])  # (B, k, ...)
    ys = y[:parts * k].reshape(parts, k, *y.shape[1:])
    g = vmap(grad(loss_part), in_dims=(None, 0, 0))(params, xs, ys)
    return torch.cat([g[name].reshape(parts, -1) for name in params], dim=1)


def per_sample_gradients(model: torch.nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                         x: torch.Tensor, y: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """(n, M) float32: the gradient of the loss of each sample (parts of one sample), a chunk at a time."""
    return torch.cat([part_gradients(model, loss_fn, x[i:i + chunk], y[i:i + chunk], min(chunk, x.shape[0] - i))
                      for i in range(0, x.shape[0], chunk)])


def gradient_moments(model: torch.nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                     x: torch.Tensor, y: torch.Tensor, chunk: int = 256) -> Moments:
    """Moments of the per-sample gradients over (x, y), a chunk at a time (memory chunk x M, not P x M)."""
    total, sq = None, 0.0
    for i in range(0, x.shape[0], chunk):
        g = per_sample_gradients(model, loss_fn, x[i:i + chunk], y[i:i + chunk], chunk=chunk).double()  # (c, M)
        total = g.sum(0) if total is None else total + g.sum(0)
        sq += float((g * g).sum())
    if total is None:
        raise ValueError("x is empty: the moments need at least one sample")
    return Moments(mean=total / x.shape[0], mean_sq=sq / x.shape[0], count=x.shape[0])


def full_gradient(model: torch.nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                  x: torch.Tensor, y: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """(M,) the gradient of the mean loss over (x, y) (a source's g_Si), same order as per_sample_gradients;
    accumulated over chunks of `chunk` samples so a large domain needs no large activation memory."""
    model.zero_grad(set_to_none=True)
    for i in range(0, x.shape[0], chunk):
        xb, yb = x[i:i + chunk], y[i:i + chunk]
        (loss_fn(model(xb), yb) * (xb.shape[0] / x.shape[0])).backward()  # mean over all = weighted chunk means
    g = torch.cat([p.grad.reshape(-1) for _, p in model.named_parameters()])
    model.zero_grad(set_to_none=True)
    return g.detach()
