"""Seed 003's pure pieces against hand-computed and brute-force cases: FINCH's first partition, SHOT's IM loss and
prototype pseudo-labels, Alg. 2's label choice and mixup partners, the cluster score, SND, the server's A and B,
the soft cluster models and Eq. 8's weights (which must sum to 1)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

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
    labels, protos = prototype_labels(feat, probs)
    # by hand: the prediction-weighted centroids, nearest by cosine, then one-hot centroids and once more
    p0 = (probs[:, 0:1] * feat).sum(0) / probs[:, 0].sum()
    p1 = (probs[:, 1:2] * feat).sum(0) / probs[:, 1].sum()
    cos = lambda a, b: float(a @ b / (a.norm() * b.norm()))
    first = torch.tensor([0 if cos(f, p0) >= cos(f, p1) else 1 for f in feat])
    q = [feat[first == c].mean(0) for c in (0, 1)]
    second = [0 if cos(f, q[0]) >= cos(f, q[1]) else 1 for f in feat]
    assert labels.tolist() == second == [0, 0, 1, 1]
    assert torch.allclose(protos, torch.stack(q), atol=1e-6)
    shot_labels, shot_protos = prototype_labels(feat, probs, shot_style=True)
    assert shot_protos.shape == (2, 3) and shot_labels.tolist() == [0, 0, 1, 1]


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
    assert partners[4] == -1  # class 2 has no matched sample: unmixed (trap 4)
    x = torch.arange(6, dtype=torch.float32).view(6, 1)
    mixed = mixup(x, partners, 0.55)
    assert float(mixed[3]) == pytest.approx(0.45 * 3 + 0.55 * 2)
    assert torch.equal(mixed[[0, 2, 4, 5]], x[[0, 2, 4, 5]])


# ---------------------------------------------------------------- cluster weights

def test_cluster_score_and_snd_by_hand():
    feat = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert cluster_score(feat, w) == pytest.approx((1.0 + 1 / math.sqrt(2)) / 2)
    probs = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9]])
    u = torch.nn.functional.normalize(probs.double(), dim=1)
    logits = (u @ u.T) / 0.05
    logits.fill_diagonal_(-1 / 0.05)
    p = torch.softmax(logits, 1)
    assert snd(probs) == pytest.approx(float(-(p * torch.log(p)).sum(1).mean()), rel=1e-9)
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
    assert torch.allclose(a.sum(0), torch.ones(c, dtype=torch.float64))  # sum_{c'} A_{c'->c} = 1 (trap 1)
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
