"""FedWCA's pure pieces against hand-computed and brute-force cases and against the reference code written out in
the tests (SHOT's obtain_label, tim-learn/SHOT object/image_target.py; SND's neighbor_density and entropy,
VisionLearningGroup/SND): FINCH's first partition, SHOT's IM loss and prototype pseudo-labels (both feature modes,
with and without SHOT's label set), Alg. 2's label choice and mixup partners, the cluster score, SND, the server's A
(both readings) and B, the soft cluster models and Eq. 8's weights (which must sum to 1)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from fda_ray.algorithms.fedwca.cluster_weights import (
    cluster_score, init_weights, server_mixing, snd, soft_cluster_models, softmax_weights)
from fda_ray.algorithms.fedwca.finch import first_neighbours, first_partition
from fda_ray.algorithms.fedwca.shot import choose_labels, im_loss, mixup, mixup_partners, prototype_labels


# ---------------------------------------------------------------- FINCH

def test_first_partition_joins_first_neighbours_and_shared_ones():
    # two tight bundles of directions, and a point whose first neighbour is in bundle 0
    x = np.array([[1.0, 0.0], [0.99, 0.05], [0.98, -0.05], [0.0, 1.0], [0.05, 0.99], [0.7, 0.3]])
    kappa = first_neighbours(x)
    assert kappa[3] == 4 and kappa[4] == 3 and kappa[5] in (0, 1)
    labels = first_partition(x)
    assert labels.tolist() == [0, 0, 0, 1, 1, 0]
    # brute force: the components of A(i, j) = [j = k_i or i = k_j or k_i = k_j]
    rng = np.random.default_rng(0)
    for _ in range(20):
        pts = rng.normal(size=(12, 4))
        k = first_neighbours(pts)
        adj = np.array([[j == k[i] or i == k[j] or k[i] == k[j] for j in range(12)] for i in range(12)])
        reach = adj | np.eye(12, dtype=bool)
        for _ in range(12):
            reach = reach | ((reach.astype(int) @ reach.astype(int)) > 0)
        got = first_partition(pts)
        assert all((got[i] == got[j]) == reach[i, j] for i in range(12) for j in range(12))
    with pytest.raises(ValueError, match="at least 2 points"):
        first_partition(np.zeros((1, 3)))


# ---------------------------------------------------------------- SHOT

def test_im_loss_is_mean_entropy_minus_entropy_of_the_mean():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 3.0, 0.5]])
    p = torch.softmax(logits, 1)
    h = lambda q: -float((q * torch.log(q + 1e-5)).sum())
    expect = (h(p[0]) + h(p[1])) / 2 - h(p.mean(0))
    assert float(im_loss(logits)) == pytest.approx(expect, abs=1e-6)
    # confident and diverse (one-hot on different classes) is the minimum: -log M
    sharp = torch.tensor([[50.0, 0, 0], [0, 50.0, 0], [0, 0, 50.0]])
    assert float(im_loss(sharp)) == pytest.approx(-math.log(3), abs=1e-4)


def test_prototype_labels_refine_once_with_one_hot_weights():
    feat = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.2, 0.8]])
    probs = torch.tensor([[0.6, 0.4], [0.4, 0.6], [0.3, 0.7], [0.5, 0.5]])
    labels, protos = prototype_labels(feat, probs, shot_style=False, labelset=False)  # Eq. 4 as written
    # by hand: the prediction-weighted centroids, nearest by cosine, then one-hot centroids and once more
    p0 = (probs[:, 0:1] * feat).sum(0) / probs[:, 0].sum()
    p1 = (probs[:, 1:2] * feat).sum(0) / probs[:, 1].sum()
    cos = lambda a, b: float(a @ b / (a.norm() * b.norm()))
    first = torch.tensor([0 if cos(f, p0) >= cos(f, p1) else 1 for f in feat])
    q = [feat[first == c].mean(0) for c in (0, 1)]
    second = [0 if cos(f, q[0]) >= cos(f, q[1]) else 1 for f in feat]
    assert labels.tolist() == second == [0, 0, 1, 1]
    assert torch.allclose(protos, torch.stack(q), atol=1e-6)
    shot_labels, shot_protos = prototype_labels(feat, probs)  # the default: SHOT's features and label set
    assert shot_protos.shape == (2, 3) and shot_labels.tolist() == [0, 0, 1, 1]


def _shot_obtain_label(feat: np.ndarray, probs: np.ndarray, shot_style: bool = True, labelset: bool = True
                       ) -> tuple[np.ndarray, np.ndarray, float]:
    """tim-learn/SHOT object/image_target.py obtain_label (distance 'cosine', threshold 0), written out in numpy
    float64: (labels, the second pass's centroids, the smallest gap between a sample's best and second-best cosine
    distance in either pass). shot_style False: raw features (FedWCA's Eq. 4 as written), the same cosine comparison.
    labelset False (the package's old behaviour, not SHOT's): every class is a candidate, a zero centroid has cosine 0
    (distance 1)."""
    fea = np.asarray(feat, dtype=np.float64)
    if shot_style:
        fea = np.concatenate([fea, np.ones((len(fea), 1))], 1)
        fea = fea / np.linalg.norm(fea, axis=1, keepdims=True)
    aff = np.asarray(probs, dtype=np.float64)
    k = aff.shape[1]
    predict = aff.argmax(1)
    gap = np.inf
    for _ in range(2):
        initc = aff.T @ fea
        initc = initc / (1e-8 + aff.sum(0)[:, None])
        cls_count = np.eye(k)[predict].sum(0)
        cand = np.where(cls_count > 0)[0] if labelset else np.arange(k)
        c = initc[cand]
        c_norm = np.linalg.norm(c, axis=1)
        dd = 1 - (fea @ c.T) / np.linalg.norm(fea, axis=1)[:, None] / np.where(c_norm > 0, c_norm, np.inf)[None]
        predict = cand[dd.argmin(1)]
        aff = np.eye(k)[predict]
        two = np.sort(dd, axis=1)[:, :2]
        gap = min(gap, float((two[:, 1] - two[:, 0]).min()))
    return predict, initc, gap


def _random_outputs(seed: int, n: int = 60, q: int = 8, k: int = 6, dtype=torch.float64):
    """Features around class centres and softmax outputs whose last two classes are rarely the argmax (seed 0:
    class 4 never is), so SHOT's label set matters."""
    g = torch.Generator().manual_seed(seed)
    centres = 1.5 * torch.randn(k, q, generator=g, dtype=torch.float64)
    feat = centres[torch.randint(k, (n,), generator=g)] + torch.randn(n, q, generator=g, dtype=torch.float64)
    bias = torch.tensor([0.0] * (k - 2) + [-3.0, -3.0], dtype=torch.float64)
    probs = torch.softmax(2 * torch.randn(n, k, generator=g, dtype=torch.float64) + bias, 1)
    return feat.to(dtype), probs.to(dtype)


@pytest.mark.parametrize("shot_style", [True, False])
@pytest.mark.parametrize("labelset", [True, False])
def test_prototype_labels_equal_shots_obtain_label_written_out(shot_style, labelset):
    feat, probs = _random_outputs(0)
    assert 4 not in probs.argmax(1).tolist()  # a class no sample predicts: the label set excludes it
    labels, protos = prototype_labels(feat, probs, shot_style=shot_style, labelset=labelset)
    want, centroids, gap = _shot_obtain_label(feat.numpy(), probs.numpy(), shot_style, labelset)
    # float64 on both sides: the same argmin unless two cosine distances tie to ~1e-15; none comes near here
    assert gap > 1e-6 and labels.tolist() == want.tolist()
    # SHOT divides by 1e-8 + mass, the package by the mass (>= 1 for a labelled class): relative 1e-8; cosines only
    # read the directions
    assert np.allclose(protos.numpy(), centroids, rtol=1e-7, atol=1e-12)
    # the option matters on this input (the test can fail): the other label-set choice gives other labels
    other, _, _ = _shot_obtain_label(feat.numpy(), probs.numpy(), shot_style, not labelset)
    assert (other != want).sum() >= 5
    # float32 (the models' outputs): a cosine distance in float32 (unit vectors, <= 9 dimensions, centroids of <= 60
    # samples) is off by ~1e-6 at most, so with every gap above 1e-5 (checked; the smallest here is 1.45e-5) the
    # float32 labels must be the same
    f32, p32 = feat.float(), probs.float()
    labels32, _ = prototype_labels(f32, p32, shot_style=shot_style, labelset=labelset)
    want32, _, gap32 = _shot_obtain_label(f32.double().numpy(), p32.double().numpy(), shot_style, labelset)
    assert gap32 > 1e-5 and labels32.tolist() == want32.tolist()


@pytest.mark.parametrize("shot_style", [True, False])
def test_a_class_no_sample_predicts_is_never_assigned_and_nothing_is_nan(shot_style):
    """Class 2 has zero mass (one-hot outputs on classes 0 and 1): its centroid is the zero vector. SHOT's digit script
    (no label set) divides 0 by 1e-8 there and takes a NaN cosine distance, whose argmin puts every sample in class 2;
    with the label set (image_target.py) class 2 is never a candidate. The old behaviour (labelset False) lets the zero
    prototype (cosine 0) win for the samples with negative cosines to both real centroids."""
    feat = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [-1.0, -0.2], [-0.2, -1.0], [-1.0, -1.0]])
    probs = F.one_hot(torch.tensor([0, 0, 1, 1, 0, 1, 0]), 3).float()
    labels, protos = prototype_labels(feat, probs, shot_style=shot_style)
    assert 2 not in labels.tolist() and bool(torch.isfinite(protos).all())
    assert labels.tolist() == _shot_obtain_label(feat.numpy(), probs.numpy(), shot_style)[0].tolist()
    # soft outputs: class 2 has mass but no sample's argmax; still never assigned with the label set
    soft = 0.7 * probs + 0.1 + 0.2 * probs.flip(0)
    soft = soft / soft.sum(1, keepdim=True)
    assert soft.argmax(1).tolist() == probs.argmax(1).tolist()
    assert 2 not in prototype_labels(feat, soft, shot_style=shot_style)[0].tolist()
    if not shot_style:  # raw features: cosines to both centroids can be negative (appending the 1 lifts them here)
        old, old_protos = prototype_labels(feat, probs, shot_style=False, labelset=False)
        assert 2 in old.tolist() and bool(torch.isfinite(old_protos).all())


def test_choose_labels_follows_the_normalised_similarity_and_guards_a_non_positive_mean():
    protos_a = torch.tensor([[1.0, 0.2], [0.2, 1.0]])  # mean inter-prototype cosine > 0
    protos_b = torch.tensor([[1.0, 0.6], [0.6, 1.0]])
    feat = torch.tensor([[1.0, 0.1], [0.1, 1.0], [1.0, 0.3]])
    la, lb = torch.tensor([0, 1, 0]), torch.tensor([0, 1, 1])
    labels, matched, guarded = choose_labels(feat, la, protos_a, feat, lb, protos_b)
    assert matched.tolist() == [True, True, False] and not guarded
    ca = float(torch.nn.functional.cosine_similarity(feat[2], protos_a[0], dim=0))
    cb = float(torch.nn.functional.cosine_similarity(feat[2], protos_b[1], dim=0))
    pa = float(torch.nn.functional.cosine_similarity(protos_a[0], protos_a[1], dim=0))
    pb = float(torch.nn.functional.cosine_similarity(protos_b[0], protos_b[1], dim=0))
    assert labels[2] == (0 if ca / pa >= cb / pb else 1)
    # opposite prototypes: mean cosine -1; dividing would flip the comparison, so raw similarities decide
    opp = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    labels, _, guarded = choose_labels(torch.tensor([[1.0, 0.0]]), torch.tensor([0]), opp,
                                       torch.tensor([[-0.2, 1.0]]), torch.tensor([1]), opp)
    assert guarded and labels.tolist() == [0]  # cos 1 against cos 0.196 (raw)


def test_mixup_partners_share_the_label_and_unmatched_classes_stay_unmixed():
    labels = torch.tensor([0, 0, 1, 1, 2, 0])
    matched = torch.tensor([True, False, True, False, False, True])
    gen = torch.Generator().manual_seed(0)
    partners = mixup_partners(labels, matched, gen)
    assert partners[0] == -1 and partners[2] == -1 and partners[5] == -1  # matched: no partner
    assert int(partners[1]) in (0, 5) and int(partners[3]) == 2
    assert partners[4] == -1  # class 2 has no matched sample: unmixed (open point 4)
    x = torch.arange(6, dtype=torch.float32).view(6, 1)
    mixed = mixup(x, partners, 0.55)
    assert float(mixed[3]) == pytest.approx(0.45 * 3 + 0.55 * 2)
    assert torch.equal(mixed[[0, 2, 4, 5]], x[[0, 2, 4, 5]])


# ---------------------------------------------------------------- cluster weights

def _snd_reference(pred: torch.Tensor) -> torch.Tensor:
    """VisionLearningGroup/SND nc_ps/eval.py neighbor_density (T = 0.05) with utils/loss.py entropy, written out,
    on softmax outputs `pred` (n, M), in pred's dtype."""
    normalized = F.normalize(pred)
    mat = normalized @ normalized.T / 0.05
    mat.masked_fill_(torch.eye(len(mat), dtype=torch.bool), -1 / 0.05)
    p = F.softmax(mat, dim=1)
    return -torch.mean(torch.sum(p * torch.log(p + 1e-5), 1))


def test_snd_equals_the_snd_reference_code_written_out():
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(3 * torch.randn(50, 10, generator=g), 1)  # float32, as the models give them
    got = snd(probs)
    # the package computes in float64: the reference in float64 on the same numbers agrees to rounding
    assert got == pytest.approx(float(_snd_reference(probs.double())), abs=1e-12)
    # the reference's own float32 arithmetic: softmax and log of 50 terms a row, ~1e-7 relative each
    assert got == pytest.approx(float(_snd_reference(probs)), abs=1e-5)
    # the old epsilon 1e-12 is off by far more than that tolerance (the test can fail)
    u = F.normalize(probs.double())
    logits = (u @ u.T / 0.05).fill_diagonal_(-1 / 0.05)
    q = torch.softmax(logits, 1)
    old = float(-(q * torch.log(q + 1e-12)).sum(1).mean())
    assert abs(old - got) > 1e-4


def test_cross_cluster_weights_by_columns_and_by_rows_written_out():
    g = torch.Generator().manual_seed(1)
    c, k = 3, 8
    clusters = torch.tensor([0, 0, 1, 1, 1, 2, 0, 2])
    alpha = torch.softmax(torch.randn(k, c, generator=g, dtype=torch.float64) / 0.3, 1)
    beta = torch.softmax(torch.randn(k, 2, generator=g, dtype=torch.float64), 1)
    a_bar = torch.stack([alpha[clusters == cc].mean(0) for cc in range(c)])  # A_bar[c', c] = mean_{k in c'} alpha_kc
    want = {"columns": a_bar / a_bar.sum(0, keepdim=True),  # A[c', c] = A_bar[c', c] / sum_c'' A_bar[c'', c]
            "rows": a_bar.T.clone()}  # A[c', c] = A_bar[c, c']: soft model c mixes with its own clients' weights
    got = {}
    for norm in ("columns", "rows"):
        a, b = server_mixing(alpha, beta, clusters, c, norm)
        got[norm] = a
        assert torch.allclose(a, want[norm], rtol=0, atol=1e-15)  # float64, a few roundings
        assert torch.allclose(a.sum(0), torch.ones(c, dtype=torch.float64), rtol=0, atol=1e-15)
        for i in range(k):  # Eq. 8's weights sum to 1 under both readings
            v = init_weights(alpha[i], beta[i], int(clusters[i]), a, b)
            assert float(v.sum()) == pytest.approx(1.0, abs=1e-12) and float(v.min()) >= 0
    assert float((got["columns"] - got["rows"]).abs().max()) > 0.05  # the readings differ
    assert torch.equal(server_mixing(alpha, beta, clusters, c)[0], got["columns"])  # the default
    # by hand: cluster 0's clients give (0.9, 0.1), cluster 1's (0.3, 0.7)
    alpha2 = torch.tensor([[0.9, 0.1], [0.3, 0.7]], dtype=torch.float64)
    beta2 = torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=torch.float64)
    cols, _ = server_mixing(alpha2, beta2, torch.tensor([0, 1]), 2, "columns")
    rows, _ = server_mixing(alpha2, beta2, torch.tensor([0, 1]), 2, "rows")
    assert cols.flatten().tolist() == pytest.approx([0.75, 0.125, 0.25, 0.875], abs=1e-15)
    assert rows.flatten().tolist() == pytest.approx([0.9, 0.3, 0.1, 0.7], abs=1e-15)
    # a cluster without clients keeps its own model under both readings (through B = (1, 0); only rows also makes
    # its column of A the unit vector, columns mixes the other clusters' alpha into it)
    models = torch.randn(c, 4, generator=g, dtype=torch.float64)
    for norm in ("columns", "rows"):
        a3, b3 = server_mixing(alpha, beta, torch.zeros(k, dtype=torch.long), c, norm)
        assert b3[1].tolist() == [1.0, 0.0] and torch.equal(soft_cluster_models(models, a3, b3)[1], models[1])
        assert torch.allclose(a3.sum(0), torch.ones(c, dtype=torch.float64), rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="norm='diagonal' is invalid: one of columns, rows"):
        server_mixing(alpha, beta, clusters, c, "diagonal")


def test_cluster_score_and_snd_by_hand():
    feat = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert cluster_score(feat, w) == pytest.approx((1.0 + 1 / math.sqrt(2)) / 2)
    probs = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9]])
    u = torch.nn.functional.normalize(probs.double(), dim=1)
    logits = (u @ u.T) / 0.05
    logits.fill_diagonal_(-1 / 0.05)
    p = torch.softmax(logits, 1)
    assert snd(probs) == pytest.approx(float(-(p * torch.log(p + 1e-5)).sum(1).mean()), rel=1e-9)
    # two identical predictions are each other's only neighbour: a lower entropy than uniform similarity
    assert snd(torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])) < snd(torch.full((3, 2), 0.5))
    assert softmax_weights(torch.tensor([0.0, math.log(3) * 0.1]), 0.1).tolist() == pytest.approx([0.25, 0.75])


def test_eq8_weights_sum_to_one_and_equal_the_clients_mix_of_soft_models():
    g = torch.Generator().manual_seed(0)
    c, k, p = 3, 7, 5
    clusters = torch.tensor([0, 0, 1, 1, 1, 2, 0])
    # float64 weights: the identity sum_c v = 1 then holds to float64 rounding (float32 softmaxes sum to 1 only
    # within ~1e-7, which the identity would carry over)
    alpha = torch.softmax(torch.randn(k, c, generator=g, dtype=torch.float64), 1)
    beta = torch.softmax(torch.randn(k, 2, generator=g, dtype=torch.float64), 1)
    a, b = server_mixing(alpha, beta, clusters, c)
    assert torch.allclose(a.sum(0), torch.ones(c, dtype=torch.float64))  # sum_{c'} A_{c'->c} = 1 (open point 1)
    abar1 = alpha[clusters == 1].double().mean(0)
    assert b[1].tolist() == pytest.approx(beta[clusters == 1].double().mean(0).tolist())
    col = torch.stack([alpha[clusters == cc].double().mean(0) for cc in range(c)])  # A_bar[c', c]
    assert a[1].tolist() == pytest.approx((abar1 / col.sum(0)).tolist())
    models = torch.randn(c, p, generator=g, dtype=torch.float64)
    soft = soft_cluster_models(models, a, b)
    for cc in range(c):
        expect = b[cc, 0] * models[cc] + b[cc, 1] * sum(a[c2, cc] * models[c2] for c2 in range(c))
        assert torch.allclose(soft[cc], expect)
    for i in range(k):
        v = init_weights(alpha[i], beta[i], int(clusters[i]), a, b)
        assert float(v.sum()) == pytest.approx(1.0, abs=1e-12) and float(v.min()) >= 0
        client = beta[i, 0].double() * models[clusters[i]] + beta[i, 1].double() * (alpha[i].double() @ soft)
        assert torch.allclose(v @ models, client, atol=1e-12)  # Eq. 8 = the client's own mix (App. B.3)
    # an empty cluster keeps its own model
    alpha2 = torch.softmax(torch.randn(k, 2, generator=g, dtype=torch.float64), 1)
    a2, b2 = server_mixing(alpha2, beta, torch.zeros(k, dtype=torch.long), 2)  # every client in cluster 0
    assert torch.allclose(soft_cluster_models(models[:2], a2, b2)[1], models[1])
