"""The rules against hand-computed cases and against a per-tensor loop like the authors' code."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fda_ray.algorithms.aggregation import fedavg, fedda, fedgp, layer_cosines, layer_stats

R = 1 / math.sqrt(2)


def case():
    t = torch.tensor([1.0, 0.0, 1.0, 1.0])
    s = torch.tensor([[2.0, 0.0, -1.0, -1.0], [1.0, 1.0, 0.0, 2.0]])
    off = torch.tensor([0, 2, 4])
    return t, s, off


def test_fedgp_cosine_hand_case():
    t, s, off = case()
    out = fedgp(t, s, off, beta=0.5, weights=torch.tensor([0.5, 0.5]))
    # layer 0: cos(t, s1) = 1, cos(t, s2) = 1/sqrt2; layer 1: cos(t, s1) = -1 (filtered), cos(t, s2) = 1/sqrt2
    s1p = torch.tensor([2.0, 0.0, 0.0, 0.0])
    s2p = torch.tensor([R, R, 0.0, 2 * R])
    expected = 0.25 * (s1p + s2p) + 0.5 * t
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, torch.tensor([1 + 0.25 * (2 + R) - 0.5, 0.25 * R, 0.5, 0.5 + 0.5 * R]))


def test_fedgp_exact_projection_hand_case():
    t, s, off = case()
    out = fedgp(t, s, off, beta=0.5, weights=torch.tensor([0.5, 0.5]), projection="exact")
    # <t, s>/|s|^2: layer 0: 2/4 and 1/2; layer 1: s1 filtered, s2: 2/4
    torch.testing.assert_close(out, torch.tensor([0.875, 0.125, 0.5, 0.75]))


def test_fedgp_exact_projection_reads_no_align():
    """The exact projection <t, s>/|s|^2 s is on the target's scale already (FedGP Def. 3.1 has no alignment): an
    align factor, which the cosine form needs, leaves it unchanged."""
    t, s, off = case()
    w = torch.tensor([0.5, 0.5])
    plain = fedgp(t, s, off, beta=0.5, weights=w, projection="exact")
    for impl in ("reference", "kernel"):
        aligned = fedgp(t, s, off, beta=0.5, weights=w, projection="exact", align=torch.tensor([0.03, 7.0]), impl=impl)
        torch.testing.assert_close(aligned, plain)
    cosine = fedgp(t, s, off, beta=0.5, weights=w, align=torch.tensor([2.0, 2.0]))  # the cosine form does read it
    assert not torch.allclose(cosine, fedgp(t, s, off, beta=0.5, weights=w))


def test_fda_run_with_exact_projection_is_def_3_1(tiny):
    """A FedGP trial's aggregation with --projection exact is FedGP Def. 3.1 layer by layer,
    (1 - beta) g_T + beta sum_i alpha_i Proj+(g_T | g_i), however far the step counts set the alignment from 1."""
    from fda_ray.core.contract import ClientResult
    from fda_ray.runtime.engine import build_experiment

    exp = build_experiment(tiny(method="fedgp", projection="exact", beta=0.5, log_estimates=False, rounds=3))
    algo, n, m = exp.algorithm, exp.cfg.num_sources, exp.layout.size
    assert not torch.allclose(algo.align, torch.ones_like(algo.align))  # the case where the alignment would matter
    g = torch.Generator().manual_seed(0)
    target = torch.randn(m, generator=g)
    sources = torch.randn(n, m, generator=g) + torch.where(torch.rand(n, m, generator=g) < 0.5, target, -target)
    results = {i: ClientResult(client=i, tensors={"delta": sources[i]}, scalars={"loss": 0.0}) for i in range(n)}
    results[algo.target] = ClientResult(client=algo.target, tensors={"delta": target}, scalars={"loss": 0.0})
    r = algo.warmup  # a main round
    state, _ = algo.aggregate(r, {"global": torch.zeros(m)}, results)
    alpha = algo.weights.double()
    want = 0.5 * target.double()
    offsets = exp.layout.offsets.tolist()
    for a, b in zip(offsets[:-1], offsets[1:]):
        t_l = target[a:b].double()
        for i in range(n):
            s_l = sources[i, a:b].double()
            dot, sq = float(t_l @ s_l), float(s_l @ s_l)
            if dot > 0 and sq > 0:  # Proj+: max(<g_T, g_i>, 0) g_i / |g_i|^2
                want[a:b] += 0.5 * alpha[i] * dot / sq * s_l
    torch.testing.assert_close(state["global"].double(), want, rtol=1e-5, atol=1e-6)


def test_fedgp_without_filter_keeps_negative_layers():
    t, s, off = case()
    out = fedgp(t, s, off, beta=0.5, weights=torch.tensor([0.5, 0.5]), filter=False)
    # s1 on layer 1: cos = -1 -> -1 * [-1, -1] = [1, 1]
    torch.testing.assert_close(out, torch.tensor([0.5 + 0.25 * (2 + R), 0.25 * R, 0.75, 0.5 + 0.25 * (1 + 2 * R)]))


def test_fedgp_per_source_beta_and_align():
    t, s, off = case()
    out = fedgp(t, s, off, beta=torch.tensor([1.0, 0.0]), weights=torch.tensor([0.25, 0.75]),
                align=torch.tensor([3.0, 5.0]))
    # source 1 fully projected (beta 1) with align 3; source 2 only contributes its target share 0.75 * t
    expected = 0.25 * 3.0 * torch.tensor([2.0, 0.0, 0.0, 0.0]) + 0.75 * t
    torch.testing.assert_close(out, expected)


def test_fedda_hand_case():
    t = torch.tensor([1.0, 2.0])
    s = torch.tensor([[3.0, 4.0], [5.0, 6.0]])
    out = fedda(t, s, beta=torch.tensor([0.2, 1.0]), weights=torch.tensor([0.25, 0.75]))
    torch.testing.assert_close(out, torch.tensor([4.1, 5.1]))
    torch.testing.assert_close(fedda(t, s, beta=0.0, weights=torch.tensor([0.5, 0.5])), t)
    torch.testing.assert_close(fedavg(s, weights=torch.tensor([0.5, 0.5])), torch.tensor([4.0, 5.0]))


def loop_reference(t, s, off, beta, w, align, filter=True, projection="cosine"):
    """Per-tensor Python loop, the way the authors' code aggregates (one cosine per tensor per source); the exact
    projection (FedGP Def. 3.1) with no alignment."""
    out = torch.zeros_like(t, dtype=torch.float64)
    for i in range(s.shape[0]):
        for l in range(len(off) - 1):
            lo, hi = int(off[l]), int(off[l + 1])
            if hi == lo:
                continue
            tl, sl = t[lo:hi].double(), s[i, lo:hi].double()
            cos = float(F.cosine_similarity(tl, sl, dim=0))
            coef = cos if projection == "cosine" else (float(tl @ sl) / float(sl @ sl) if float(sl @ sl) > 0 else 0.0)
            if filter and not cos > 0:
                coef = 0.0
            a = align[i] if projection == "cosine" else 1.0
            out[lo:hi] += w[i] * (beta[i] * a * coef * sl + (1 - beta[i]) * tl)
    return out.float()


@pytest.mark.parametrize("projection", ["cosine", "exact"])
@pytest.mark.parametrize("filter", [True, False])
def test_fedgp_matches_loop_reference(projection, filter):
    g = torch.Generator().manual_seed(0)
    sizes = [0, 1, 7, 300, 1, 0, 53]
    off = torch.tensor([0] + sizes).cumsum(0)
    m, n = int(off[-1]), 5
    t = torch.randn(m, generator=g)
    s = torch.randn(n, m, generator=g)
    s[1, 8:308] = 0.0  # a zero-norm layer of one source
    beta = torch.rand(n, generator=g)
    w = torch.rand(n, generator=g)
    w = w / w.sum()
    align = torch.rand(n, generator=g) + 0.5
    out = fedgp(t, s, off, beta=beta, weights=w, align=align, filter=filter, projection=projection)
    ref = loop_reference(t, s, off, beta, w, align, filter, projection)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


def test_zero_norm_layers_give_no_nan_and_cosine_zero_is_filtered():
    t = torch.tensor([0.0, 0.0, 1.0, 0.0])
    s = torch.tensor([[1.0, 1.0, 0.0, 1.0]])  # layer 0: target zero; layer 1: cosine exactly 0
    off = torch.tensor([0, 2, 4])
    for projection in ("cosine", "exact"):
        out = fedgp(t, s, off, beta=1.0, weights=torch.tensor([1.0]), projection=projection)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, torch.zeros(4))
    cos = layer_cosines(*layer_stats(t, s, off))
    assert torch.equal(cos, torch.zeros(1, 2, dtype=torch.float64))


def test_layer_cosines_are_torchs_cosine_similarity_also_for_small_layers():
    """torch clamps each norm to eps on its own: two layers of norm ~1e-5 (a bias at lr 1e-5) have their true
    cosine, and FedGP with a source equal to the target and beta 1 returns the target's delta (clamping the norms'
    product gave 0.1 g_T on such a layer). One tiny layer against a large one meets the clamp as torch does."""
    gen = torch.Generator().manual_seed(0)
    off = torch.tensor([0, 10, 30, 60])
    t = torch.randn(60, generator=gen, dtype=torch.float64)
    s = torch.randn(3, 60, generator=gen, dtype=torch.float64)
    t[:10] *= 3e-6  # layer 0: |g_T| ~1e-5
    s[:, :10] *= 3e-6
    s[1, 10:30] *= 1e-10  # layer 1 of source 1: |g_1| ~5e-10, below eps
    cos = layer_cosines(*layer_stats(t, s, off))
    for i in range(3):
        for layer in range(3):
            a, b = off[layer], off[layer + 1]
            want = torch.nn.functional.cosine_similarity(t[a:b], s[i, a:b], dim=0)
            torch.testing.assert_close(cos[i, layer], want, rtol=1e-12, atol=1e-15)
    assert abs(float(cos[0, 0])) > 0.05  # a real cosine, not shrunk by 1e-10 / 1e-8
    small = torch.full((10,), 1e-5 / 10**0.5)
    out = fedgp(small, small.unsqueeze(0), torch.tensor([0, 10]), beta=1.0, weights=torch.tensor([1.0]))
    torch.testing.assert_close(out, small, rtol=1e-5, atol=0.0)


@pytest.mark.parametrize("impl", ["reference", "kernel"])
def test_fedgp_refuses_an_aggregate_that_overflows_from_finite_inputs(impl):
    """The exact projection of a near-zero source layer overflows float32 (<g_T, g_i> / |g_i|^2 ~ 1e41): one line,
    as for non-finite inputs, never an inf written into the model."""
    t, s = torch.ones(4), torch.full((1, 4), 1e-41)
    with pytest.raises(ValueError, match=r"fedgp: the aggregate is not finite although every input is \(the largest "
                                         r"layer coefficient is 1e\+41: the exact projection"):
        fedgp(t, s, torch.tensor([0, 4]), beta=1.0, weights=torch.tensor([1.0]), projection="exact", impl=impl)


@pytest.mark.parametrize("kwargs,match", [
    (dict(beta=1.5), "beta must lie in"),
    (dict(beta=-0.1), "beta must lie in"),
    (dict(weights=torch.tensor([0.5, 0.6])), "weights must sum to 1"),
    (dict(weights=torch.tensor([1.0])), r"weights must be a float or an \(N,\)"),
    (dict(beta=torch.tensor([0.5, 0.5, 0.5])), r"beta must be a float or an \(N,\)"),
])
def test_bad_rule_input(kwargs, match):
    t, s, off = case()
    args = dict(beta=0.5, weights=torch.tensor([0.5, 0.5]))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        fedgp(t, s, off, **args)
    with pytest.raises(ValueError, match=match):
        fedda(t, s, **args)


def test_bad_shapes_and_offsets():
    t, s, off = case()
    w = torch.tensor([0.5, 0.5])
    with pytest.raises(ValueError, match="target has M=3"):
        fedda(t[:3], s, beta=0.5, weights=w)
    with pytest.raises(ValueError, match="sources must be a 2-D"):
        fedda(t, s[0], beta=0.5, weights=w)
    with pytest.raises(ValueError, match="end at M=4"):
        fedgp(t, s, torch.tensor([0, 2, 5]), beta=0.5, weights=w)
    with pytest.raises(ValueError, match="int64"):
        fedgp(t, s, torch.tensor([0, 2, 4], dtype=torch.int32), beta=0.5, weights=w)
    with pytest.raises(ValueError, match="non-decreasing"):
        fedgp(t, s, torch.tensor([0, 3, 2, 4]), beta=0.5, weights=w)
    with pytest.raises(ValueError, match="projection"):
        fedgp(t, s, off, beta=0.5, weights=w, projection="orthogonal")


@pytest.mark.parametrize("impl", ["kernel", "reference"])
def test_rule_limits_are_bit_exact_whatever_the_weights_sum_to_in_float32(impl):
    """Nine equal sources: the float32 weights 1/9 do not sum to exactly 1 (in some order they give
    1 - 6e-8), so a float32 sum of w_i (1 - beta) made FedGP(beta=0) differ from the target's delta by an
    ulp, depending on the SIMD width. The coefficients are float64 now: the limits are exact."""
    g = torch.Generator().manual_seed(0)
    n, m = 9, 1000
    target, sources = torch.randn(m, generator=g), torch.randn(n, m, generator=g)
    off = torch.tensor([0, 300, 1000])
    w = torch.full((n,), 1.0 / n)  # float32 on purpose
    assert w.double().sum().item() != 1.0  # the float32 weights themselves are off 1 by ~1e-8
    assert torch.equal(fedgp(target, sources, off, beta=0.0, weights=w, impl=impl), target)
    assert torch.equal(fedda(target, sources, beta=0.0, weights=w, impl=impl), target)
    # FedDA with beta = 1 is FedAvg: the same combination, the same order of sums
    assert torch.equal(fedda(target, sources, beta=1.0, weights=w, impl=impl), fedavg(sources, weights=w, impl=impl))
    # and FedAvg is the weighted mean to float32 rounding (N terms: a few ulps)
    torch.testing.assert_close(fedavg(sources, weights=w, impl=impl), sources.mean(0), rtol=0, atol=n * 2e-7 * 4)


def test_fedavg_kernel_equals_reference_and_checks_its_input():
    g = torch.Generator().manual_seed(1)
    sources = torch.randn(4, 777, generator=g)
    w = torch.tensor([0.1, 0.2, 0.3, 0.4])
    # float32 products summed in float32 in the same order i = 0..3 by both: equal to an ulp or two
    torch.testing.assert_close(fedavg(sources, weights=w, impl="kernel"), fedavg(sources, weights=w, impl="reference"),
                               rtol=0, atol=4 * 2.4e-7 * float(sources.abs().max()))
    with pytest.raises(ValueError, match=r"sources must be a 2-D tensor \(N, M\), got shape \(777,\)"):
        fedavg(sources[0], weights=w)
    with pytest.raises(ValueError, match="weights must sum to 1"):
        fedavg(sources, weights=torch.tensor([0.5, 0.5, 0.5, 0.5]))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("impl", ["kernel", "reference"])
def test_rules_refuse_non_finite_deltas_and_name_the_source(bad, impl):
    t, s, off = case()
    s = s.clone()
    s[1, 2] = bad
    w = torch.tensor([0.5, 0.5])
    for call in (lambda: fedgp(t, s, off, beta=0.5, weights=w, impl=impl),
                 lambda: fedda(t, s, beta=0.5, weights=w, impl=impl),
                 lambda: fedavg(s, weights=w, impl=impl)):
        with pytest.raises(ValueError, match=r"non-finite values \(NaN or inf\) in sources \[1\]"):
            call()
    t2 = t.clone()
    t2[0] = bad
    with pytest.raises(ValueError, match=r"non-finite values \(NaN or inf\) in target"):
        fedgp(t2, case()[1], off, beta=0.5, weights=w, impl=impl)


def test_estimators_refuse_non_finite_input_and_estimates():
    from fda_ray.algorithms.fda.estimators import auto_beta, estimate

    g = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    s = torch.randn(2, 50, generator=torch.Generator().manual_seed(1))
    g[2, 7] = float("nan")
    with pytest.raises(ValueError, match=r"estimate: non-finite values \(NaN or inf\) in target_steps"):
        estimate(g, s)
    s[0, 0] = float("inf")
    with pytest.raises(ValueError, match="in sources"):
        estimate(torch.zeros(3, 50), s)
    stats = {"sigma2": float("nan"), "d2": torch.tensor([1.0]), "tau2d2": torch.tensor([1.0]),
             "delta": torch.tensor([1.0]), "gbar2": 1.0}
    with pytest.raises(ValueError, match="auto_beta: sigma2=nan is invalid: the estimates must be finite"):
        auto_beta(stats, "fedda")  # NaN used to become the indifferent beta 0.5


# ---------------------------------------------------------------- the rule table (one vocabulary)

def test_rule_table_entries_are_the_rules_under_one_signature():
    """Every entry of RULES called the one way gives its rule's numbers; the FDA family's methods and the theory's
    diagnostics name rules from this table only."""
    from fda_ray.algorithms import ALGORITHMS
    from fda_ray.algorithms.aggregation import RULES
    from fda_ray.algorithms.fda import diagnostics as dg
    t, s, off = case()
    w, beta = torch.tensor([0.25, 0.75], dtype=torch.float64), torch.tensor([0.3, 0.6])
    expected = {"source_only": fedavg(s, weights=w), "target_only": t,
                "fedda": fedda(t, s, beta=beta, weights=w),
                "fedgp": fedgp(t, s, off, beta=beta, weights=w, projection="exact", filter=False)}
    assert RULES.names() == list(expected)
    for name in RULES:
        out = RULES.get(name)(t, s, off, beta=beta, weights=w, projection="exact", filter=False)
        assert out.shape == t.shape
        assert torch.equal(out, expected[name]), name  # the same code path: bit for bit
    assert RULES.get("target_only")(t, None, off, beta=0.0, weights=w) is not t  # a copy: the caller may add to it
    fda_rules = {ALGORITHMS.get(m).rule for m in ALGORITHMS.names() if ALGORITHMS.get(m).family == "fda"}
    assert fda_rules == set(RULES.names())
    assert {r.removesuffix("_auto") for r in dg.RULES} == set(RULES.names())
    with pytest.raises(ValueError, match="unknown aggregation rule 'fedgq'.*did you mean 'fedgp'"):
        RULES.get("fedgq")


def test_diagnostics_aggregate_is_the_table_rule_on_the_whole_vector():
    from fda_ray.algorithms.fda import diagnostics as dg
    t, s, _ = case()
    t, s = t.double(), s.double()
    w = torch.tensor([0.5, 0.5], dtype=torch.float64)
    whole = torch.tensor([0, 4])
    torch.testing.assert_close(dg.aggregate("fedgp_auto", t, s, w, 0.5),
                               fedgp(t, s, whole, beta=0.5, weights=w, projection="exact", impl="reference"),
                               rtol=0, atol=0)
    torch.testing.assert_close(dg.aggregate("source_only", None, s, w, 0.5), fedavg(s, weights=w), rtol=0, atol=0)
    with pytest.raises(ValueError, match="rule='fedavg' is invalid"):
        dg.aggregate("fedavg", t, s, w, 0.5)


@pytest.mark.parametrize("scale", ["both", "target"])
def test_the_auto_estimators_scale_the_sources_as_estimate_scale_says(tiny, scale):
    """The authors' two auto scripts differ: the Fashion-MNIST one scales the sources' per-step deltas by lr_T /
    lr_S as well as the target's, the DomainBed one only the target's (FedDA_Auto's beta_i moves with it; FedGP's
    plain rule reads only the sources' directions). The round's beta_i are those of the estimators on the scaled
    inputs, and the two scales give FedDA_Auto different beta_i."""
    from fda_ray.algorithms.fda.estimators import auto_beta, estimate
    from fda_ray.core.contract import ClientResult
    from fda_ray.runtime.engine import build_experiment

    exp = build_experiment(tiny(method="fedda_auto", estimate_scale=scale, lr_source=0.01, lr_target=0.002, rounds=3))
    algo, n, m = exp.algorithm, exp.cfg.num_sources, exp.layout.size
    assert algo.lr_ratio == pytest.approx(0.2)
    g = torch.Generator().manual_seed(1)
    steps = torch.randn(6, m, generator=g) * 1e-3  # (B, M) the target's per-step deltas
    sources = torch.randn(n, m, generator=g) * 1e-2  # (N, M) the sources' round deltas
    results = {i: ClientResult(client=i, tensors={"delta": sources[i]}, scalars={"loss": 0.0}) for i in range(n)}
    results[algo.target] = ClientResult(client=algo.target, tensors={"delta": steps.sum(0), "step_deltas": steps},
                                        scalars={"loss": 0.0})
    _, metrics = algo.aggregate(algo.warmup, {"global": torch.zeros(m)}, results)
    per_step = sources / algo.src_steps.unsqueeze(1)  # (N, M)
    src_scale = algo.lr_ratio if scale == "both" else 1.0
    want = auto_beta(estimate(steps * algo.lr_ratio, per_step * src_scale), "fedda")
    torch.testing.assert_close(torch.tensor(metrics["beta_i"], dtype=torch.float64), want, rtol=1e-6, atol=0)
    other = auto_beta(estimate(steps * algo.lr_ratio, per_step * (1.0 if scale == "both" else algo.lr_ratio)), "fedda")
    assert not torch.allclose(want, other, rtol=1e-3)


def test_the_authors_auto_settings_by_dataset_and_partition(fmnist_dir):
    """FedDA_Auto scales only the target's deltas on DomainBed datasets (the DomainBed auto script), both sides
    elsewhere; FedGP_Auto keeps both (its beta is the same either way). The auto rows train the target at batch 4
    under covariate shift and at 16 under label shift (the script's noise loop alone passes --target_batch_size 4)."""
    from fda_ray.core.config import RunConfig

    def resolved(**kw):
        return RunConfig(data_dir=str(fmnist_dir), **kw).resolved()

    assert resolved(dataset="colored-mnist", method="fedda_auto").estimate_scale == "target"
    assert resolved(dataset="rotated-fmnist", method="fedda_auto").estimate_scale == "target"
    assert resolved(dataset="colored-mnist", method="fedgp_auto").estimate_scale == "both"
    assert resolved(dataset="fashion-mnist", method="fedda_auto").estimate_scale == "both"
    assert resolved(dataset="colored-mnist", method="fedda_auto", estimate_scale="both").estimate_scale == "both"
    for method in ("fedda_auto", "fedgp_auto"):
        assert resolved(dataset="fashion-mnist", method=method).batch_target == 4
        assert resolved(dataset="fashion-mnist", method=method, partition="label_shift").batch_target == 16
        assert resolved(dataset="fashion-mnist", method=method, partition="label_shift", batch_target=4).batch_target == 4
    assert resolved(dataset="fashion-mnist", method="fedda", partition="label_shift").batch_target == 16
    with pytest.raises(ValueError, match="estimate_scale='source' is invalid"):
        RunConfig(method="fedda_auto", estimate_scale="source")


def test_fedgps_frozen_mask_and_stats_are_checked_in_one_line():
    """A short frozen mask zeroed other layers than meant without a word (a long one: an IndexError); stats of the
    wrong shape failed in an error about `scale`, which the caller never passed."""
    t, s, off = case()
    w = torch.tensor([0.5, 0.5])
    for kw, line in ((dict(frozen=torch.tensor([True])), "frozen=bool (1,) is invalid: a bool tensor of shape (2,), "
                                                         "one per layer"),
                     (dict(frozen=torch.tensor([1, 0])), "frozen=int64 (2,) is invalid"),
                     (dict(stats=(torch.zeros(2, 3), torch.zeros(2, 2), torch.zeros(2))),
                      "stats=['float32 (2, 3)', 'float32 (2, 2)', 'float32 (2,)'] is invalid: layer_stats' (dots (2, 2)")):
        with pytest.raises(ValueError) as e:
            fedgp(t, s, off, beta=0.5, weights=w, **kw)
        assert str(e.value).startswith(line), str(e.value)
    kept = fedgp(t, s, off, beta=0.5, weights=w, frozen=torch.tensor([False, True]))
    assert torch.equal(kept[2:], torch.zeros(2)) and torch.equal(kept[:2], fedgp(t, s, off, beta=0.5, weights=w)[:2])
