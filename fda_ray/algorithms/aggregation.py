"""Aggregation rules of FDA as pure functions over flat tensors (no Ray, no I/O).

Notation: `target` (M,) is the target delta g_T, `sources` (N, M) the source deltas g_i, `offsets` (L + 1,)
int64 the layer boundaries of the flat layout (first 0, last M), `weights` (N,) the alpha_i (data
fractions n_i / sum n, summing to 1), `beta` a float or (N,) tensor in [0, 1] weighting the source side.

Every rule returns the aggregated update (M,)

    sum_i weights_i * (beta_i * s_i + (1 - beta_i) * target)

where s_i = sources_i for FedDA (FedGP Def. 3.2), and for FedGP, layer by layer (FedGP Def. 3.1 and
the authors' code, see docs/authors-code.md):
  projection="cosine" (default, the authors' code):  s_i = align_i * cos(target, sources_i) * sources_i
  projection="exact"  (the paper's definition):      s_i = <target, sources_i> / |sources_i|^2 * sources_i
and with filter=True a layer whose cosine is not > 0 contributes 0 to s_i. The alignment align_i (the authors'
(lr_T / lr_S) x (target steps / source steps)) brings cos x sources_i, a source's delta, to the target's scale; the
exact projection is a multiple of the target's own length already and takes none (an align given is not read).

Every rule reads the deltas in two passes, through fda_ray.kernels: one for the per-layer statistics, one for
the combination with the per-layer coefficients (the (N, L) coefficient math in between is tiny). By default
float32 inputs run the C++/CUDA kernel and other dtypes the reference; `impl="reference"` (or
$FDA_RAY_KERNELS=reference) runs the PyTorch reference, the specification the kernel is tested against.

The rule table: `RULES` names each FDA rule once, in the papers' and the methods' own words (source_only,
target_only, fedda, fedgp: FedGP Table 1's rows, Auto-weighted FDA Sec. 4), and every place that picks a rule by
name looks it up there: the FDA family's server step, the theory's diagnostics (Delta errors, Monte Carlo) and a
plug-in's method (`RULES.add`, docs/plugins.md). Each entry is a pure function with one signature,

    rule(target (M,), sources (N, M), offsets (L + 1,), *, beta, weights, impl=None, **options) -> (M,)

where options are fedgp's (align, filter, projection, stats, frozen); a rule reads
the inputs it needs (source_only does not read target, target_only reads only target). `fedavg` stays the FedAvg
primitive (McMahan et al.) that families averaging any set of clients call directly; `source_weights` the alpha_i.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from fda_ray import kernels
from fda_ray.core.registry import Registry
from fda_ray.kernels.checks import check_flat as _check_flat

# torch.nn.functional.cosine_similarity's default eps, applied as torch applies it: to each norm on its own,
# cos = <a, b> / (max(|a|, eps) max(|b|, eps)). (Clamping their product instead shrinks the cosine of two small
# deltas: two layers of norm 1e-5, a bias at lr 1e-5, would have cosine 0.01 of what torch gives.)
COSINE_EPS = 1e-8
WEIGHT_SUM_TOL = 1e-4
PROJECTIONS = ("cosine", "exact")


# ---------------------------------------------------------------- validation

def _per_source(name: str, value: float | torch.Tensor, n: int, like: torch.Tensor) -> torch.Tensor:
    """(N,) float64: the per-source coefficients are combined in float64, so that sums such as
    sum_i w_i (1 - beta_i) equal 1 to ~1e-16 and round to exactly 1.0 in float32 whatever the order of the
    sum (a float32 sum of N weights can land one ulp off 1 depending on the SIMD width)."""
    t = torch.as_tensor(value, dtype=torch.float64, device=like.device)
    if t.dim() == 0:
        t = t.expand(n)
    if t.shape != (n,):
        raise ValueError(f"{name} must be a float or an (N,) = ({n},) tensor, got shape {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} must be finite, got {t.tolist()}")
    return t


def check_beta(beta: float | torch.Tensor, n: int, like: torch.Tensor) -> torch.Tensor:
    b = _per_source("beta", beta, n, like)
    if ((b < 0) | (b > 1)).any():
        raise ValueError(f"beta must lie in [0, 1], got {b.tolist()}")
    return b


def check_weights(weights: torch.Tensor, n: int, like: torch.Tensor) -> torch.Tensor:
    w = _per_source("weights", weights, n, like)
    if (w < 0).any():
        raise ValueError(f"weights must be >= 0, got {w.tolist()}")
    if abs(float(w.sum()) - 1.0) > WEIGHT_SUM_TOL:
        raise ValueError(f"weights must sum to 1 (within {WEIGHT_SUM_TOL}), got sum {float(w.sum()):.6g}")
    return w


def _locate_non_finite(target: torch.Tensor | None, sources: torch.Tensor) -> str:
    """Which input holds a non-finite value (the slow path: only after a check failed)."""
    bad = (~torch.isfinite(sources)).any(1).nonzero().flatten().tolist()
    if bad:
        return f"sources {bad} (rows of sources)"
    if target is not None and not torch.isfinite(target).all():
        return "target"
    return "the inputs' squares overflow float64"


def _finite_or_raise(out: torch.Tensor, target: torch.Tensor | None, sources: torch.Tensor, rule: str) -> torch.Tensor:
    """A rule's output (M,) is finite iff its inputs are (finite coefficients): one pass over M, not N x M."""
    if not torch.isfinite(out).all():
        raise ValueError(f"{rule}: non-finite values (NaN or inf) in {_locate_non_finite(target, sources)}; "
                         "a diverged client (try a lower learning rate)")
    return out


def _impl(impl: str | None, *tensors: torch.Tensor) -> str:
    """The kernels take float32; other dtypes (float64 in exactness tests) run the reference."""
    impl = impl or kernels.default_impl()
    if impl not in kernels.IMPLS:
        raise ValueError(f"impl={impl!r} is invalid: one of {', '.join(kernels.IMPLS)}")
    return impl if all(t.dtype == torch.float32 for t in tensors) else "reference"


# ---------------------------------------------------------------- per-layer statistics

def layer_stats(target: torch.Tensor, sources: torch.Tensor, offsets: torch.Tensor, *, impl: str | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-layer <g_T, g_i> (N, L), |g_i|^2 (N, L) and |g_T|^2 (L,), accumulated in float64."""
    _check_flat(target, sources)
    impl = _impl(impl, target, sources)
    return kernels.layer_stats(target.contiguous(), sources.contiguous(), offsets, impl=impl)


def layer_cosines(dots: torch.Tensor, s_sq: torch.Tensor, t_sq: torch.Tensor) -> torch.Tensor:
    """(N, L) cosine per source and layer, as torch.nn.functional.cosine_similarity computes it (each norm clamped
    to eps on its own); zero-norm layers give 0, never NaN."""
    return dots / (torch.sqrt(s_sq).clamp_min(COSINE_EPS) * torch.sqrt(t_sq).clamp_min(COSINE_EPS).unsqueeze(0))


def projection_coefficients(dots: torch.Tensor, s_sq: torch.Tensor, t_sq: torch.Tensor, *,
                            filter: bool = True, projection: str = "cosine") -> torch.Tensor:
    """(N, L) the factor c_il with s_i = c_il * g_i on layer l (before weights, beta and, for the cosine, align_i)."""
    if projection not in PROJECTIONS:
        raise ValueError(f"projection must be one of {PROJECTIONS}, got {projection!r}")
    cos = layer_cosines(dots, s_sq, t_sq)
    if projection == "cosine":
        coef = cos
    else:
        coef = torch.where(s_sq > 0, dots / torch.where(s_sq > 0, s_sq, torch.ones_like(s_sq)), torch.zeros_like(s_sq))
    if filter:
        coef = torch.where(cos > 0, coef, torch.zeros_like(coef))
    return coef


# ---------------------------------------------------------------- the rules

def source_weights(counts: list[int]) -> torch.Tensor:
    """alpha_i = n_i / sum n over the sources (FedAvg weights), float64 (the coefficient math's dtype)."""
    c = torch.tensor(counts, dtype=torch.float64)
    return c / c.sum()


def fedavg(sources: torch.Tensor, *, weights: torch.Tensor, impl: str | None = None) -> torch.Tensor:
    """Source Only: the weighted average of the source deltas (M,).

    Through the same combination as FedDA (sources summed in order i = 0..N-1, thread-count independent),
    so FedDA with beta = 1 gives exactly these numbers, and no BLAS call picks its own summation order."""
    if not isinstance(sources, torch.Tensor) or sources.dim() != 2:
        raise ValueError(f"sources must be a 2-D tensor (N, M), got shape {tuple(getattr(sources, 'shape', ()))}")
    n, m = sources.shape
    w = check_weights(weights, n, sources)
    whole = torch.tensor([0, m], dtype=torch.int64)
    sources = sources.contiguous()
    # the target slot of the combination is unused (coefficient 0): any finite row of the right shape
    out = kernels.layer_combine(sources[0], sources, whole, w.unsqueeze(1), 0.0, impl=_impl(impl, sources))
    return _finite_or_raise(out, None, sources, "fedavg")


def fedda(target: torch.Tensor, sources: torch.Tensor, *, beta: float | torch.Tensor,
          weights: torch.Tensor, impl: str | None = None) -> torch.Tensor:
    """FedDA: sum_i w_i (beta_i g_i + (1 - beta_i) g_T)."""
    n, m = _check_flat(target, sources)
    b = check_beta(beta, n, target)
    w = check_weights(weights, n, target)
    whole = torch.tensor([0, m], dtype=torch.int64)  # one "layer": FedDA does not look at layers
    scale = (w * b).unsqueeze(1)  # (N, 1) float64
    t_w = float((w * (1 - b)).sum())
    out = kernels.layer_combine(target.contiguous(), sources.contiguous(), whole, scale, t_w,
                                impl=_impl(impl, target, sources))
    return _finite_or_raise(out, target, sources, "fedda")


def frozen_layers_mask(names: tuple[str, ...], prefixes: tuple[str, ...]) -> torch.Tensor:
    """(L,) bool: the layers whose state-dict name starts with one of `prefixes` (Healthcare FDA's auxiliary heads,
    "aux_heads.", which GP leaves at their value)."""
    return torch.tensor([n.startswith(prefixes) for n in names], dtype=torch.bool)


def zero_layers(update: torch.Tensor, offsets: torch.Tensor, frozen: torch.Tensor) -> torch.Tensor:
    """The update (M,) with the frozen layers' coordinates set to 0 (in place; returned)."""
    for l in frozen.nonzero().flatten().tolist():
        update[int(offsets[l]) : int(offsets[l + 1])] = 0
    return update


def _shape_of(x: Any) -> str:
    """A tensor as its dtype and shape, for an error line (anything else as its type)."""
    return f"{str(x.dtype).replace('torch.', '')} {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__


def fedgp(target: torch.Tensor, sources: torch.Tensor, offsets: torch.Tensor, *, beta: float | torch.Tensor,
          weights: torch.Tensor, align: torch.Tensor | None = None, filter: bool = True,
          projection: str = "cosine", impl: str | None = None,
          stats: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
          frozen: torch.Tensor | None = None) -> torch.Tensor:
    """FedGP: sum_i w_i (beta_i s_i + (1 - beta_i) g_T) with the layerwise projections s_i (module docstring).
    stats: layer_stats(target, sources, offsets) when the caller has them already (pass 1 is then skipped).
    frozen: (L,) bool, layers the rule leaves at their value (update 0 on both sides: Healthcare FDA's GP on its
    auxiliary heads)."""
    n, _ = _check_flat(target, sources)
    b = check_beta(beta, n, target)
    w = check_weights(weights, n, target)
    # align scales the cosine projection's source delta to the target's scale; the exact projection is on that scale
    # already (FedGP Def. 3.1 has no alignment), so it reads none
    a = torch.ones(n, dtype=torch.float64, device=target.device) if align is None \
        else _per_source("align", align, n, target)
    if projection == "exact":
        a = torch.ones_like(a)
    impl = _impl(impl, target, sources)
    target, sources = target.contiguous(), sources.contiguous()
    num_layers = int(torch.as_tensor(offsets).numel()) - 1
    if frozen is not None and (not isinstance(frozen, torch.Tensor) or frozen.dtype != torch.bool
                               or tuple(frozen.shape) != (num_layers,)):
        # (a short mask zeroed other layers than meant, without a word; a long one failed with an IndexError)
        raise ValueError(f"frozen={_shape_of(frozen)} is invalid: a bool tensor of shape ({num_layers},), one per "
                         "layer")
    want = [(n, num_layers), (n, num_layers), (num_layers,)]  # layer_stats': dots, s_sq, t_sq
    if stats is not None and (len(stats) != 3 or [tuple(x.shape) for x in stats] != want):
        raise ValueError(f"stats={[_shape_of(x) for x in stats]} is invalid: layer_stats' (dots ({n}, {num_layers}), "
                         f"s_sq ({n}, {num_layers}), t_sq ({num_layers},)) of these inputs")
    dots, s_sq, t_sq = stats if stats is not None else kernels.layer_stats(target, sources, offsets, impl=impl)  # pass 1
    # the per-layer sums of squares are finite iff every input is: a check that costs nothing more
    if not (torch.isfinite(s_sq).all() and torch.isfinite(t_sq).all()):
        raise ValueError(f"fedgp: non-finite values (NaN or inf) in {_locate_non_finite(target, sources)}; "
                         "a diverged client (try a lower learning rate)")
    coef = projection_coefficients(dots, s_sq, t_sq, filter=filter, projection=projection)  # (N, L) float64
    scale = coef * (w * b * a).unsqueeze(1)  # (N, L) float64
    t_w = float((w * (1 - b)).sum())
    out = kernels.layer_combine(target, sources, offsets, scale, t_w, impl=impl)  # pass 2
    if not torch.isfinite(out).all():  # finite inputs, but a coefficient overflowed float32 (one pass over M)
        why = "the exact projection <g_T, g_i> / |g_i|^2 of a near-zero source layer" if projection == "exact" \
            else "align or the weights out of range"
        raise ValueError(f"fedgp: the aggregate is not finite although every input is (the largest layer coefficient "
                         f"is {float(scale.abs().max()):.3g}: {why})")
    return zero_layers(out, offsets, frozen) if frozen is not None else out


# ---------------------------------------------------------------- the rule table

Rule = Callable[..., torch.Tensor]
RULES: Registry[Rule] = Registry("aggregation rule", pluggable=True)


@RULES.register("source_only")
def source_only(target: torch.Tensor | None, sources: torch.Tensor, offsets: torch.Tensor | None = None, *,
                beta: float | torch.Tensor = 1.0, weights: torch.Tensor, impl: str | None = None,
                **options: Any) -> torch.Tensor:
    """Source Only: FedAvg over the sources (target and beta unread)."""
    return fedavg(sources, weights=weights, impl=impl)


@RULES.register("target_only")
def target_only(target: torch.Tensor, sources: torch.Tensor | None = None, offsets: torch.Tensor | None = None, *,
                beta: float | torch.Tensor = 0.0, weights: torch.Tensor | None = None, impl: str | None = None,
                **options: Any) -> torch.Tensor:
    """Target Only: the target's own delta (a copy: the caller may update it in place)."""
    return target.clone()


@RULES.register("fedda")
def fedda_rule(target: torch.Tensor, sources: torch.Tensor, offsets: torch.Tensor | None = None, *,
               beta: float | torch.Tensor, weights: torch.Tensor, impl: str | None = None,
               **options: Any) -> torch.Tensor:
    """FedDA (FedGP Def. 3.2): layers unread."""
    return fedda(target, sources, beta=beta, weights=weights, impl=impl)


@RULES.register("fedgp")
def fedgp_rule(target: torch.Tensor, sources: torch.Tensor, offsets: torch.Tensor, *,
               beta: float | torch.Tensor, weights: torch.Tensor, impl: str | None = None,
               **options: Any) -> torch.Tensor:
    """FedGP (FedGP Def. 3.1, layerwise): fedgp's options (align, filter, projection, stats, frozen)."""
    return fedgp(target, sources, offsets, beta=beta, weights=weights, impl=impl, **options)

