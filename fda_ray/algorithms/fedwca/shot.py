"""SHOT's source-free adaptation pieces as FedWCA uses them (FedWCA Eq. 4, Eq. 9, Alg. 2), pure functions.

    L_IM = mean_x H(h(x)) - H(mean_x h(x))            information maximisation: confident, diverse predictions
    p_m  = sum_x h(x)_m f(x) / sum_x h(x)_m           Eq. 4: class prototypes weighted by the predictions,
    y^   = argmax_{m in L} cos(f(x), p_m)             then once more with one-hot y^ in place of h(x)
    Alg. 2: two label sets (the personal initial model's, the cluster model's); where they agree the sample is
    "matched"; each mismatched sample takes the label whose prototype similarity, divided by the mean similarity
    between that model's prototypes, is larger, and is mixed with a matched partner of that label:
    x_mix = (1 - mu) x + mu x'.

FedWCA says it reuses SHOT; the labelling follows SHOT's code (tim-learn/SHOT, object/image_target.py,
obtain_label, distance 'cosine', threshold 0):

    f    <- [f, 1] / |[f, 1]|                         (shot_style; Eq. 4 as written uses f itself)
    for 2 passes (weights: the softmax outputs, then the first pass's one-hot labels):
        p_m = sum_x w(x)_m f(x) / (1e-8 + sum_x w(x)_m)
        L   = the classes predicted at least once by the current labels (first pass: argmax of the softmax; second:
              the first pass's labels)                                                    (labelset)
        y^  = argmin_{m in L} (1 - cos(f(x), p_m))

(`prototypes` divides by the mass itself, floored at 1e-12, instead of 1e-8 + mass: a positive rescaling, which no
cosine sees.)

Entropies use SHOT's log(p + 1e-5). Traps (FedWCA's, docs/methods.md): 3, the mean inter-prototype cosine can be <= 0 and
flip the comparison (then the raw similarities are compared, and counted); 4, a mismatched sample whose label has
no matched sample stays unmixed (counted); 6, SHOT's code appends a constant 1 to the features and L2-normalises
them before the centroids (`shot_style=True`, the default: FedWCA reuses SHOT), Eq. 4 as written does not
(`shot_style=False`, FedWCAParams.prototypes "eq4"); SHOT's code also restricts each pass's candidate classes to those
predicted at least once (`labelset=True`, the default; False: every class competes, and a class no sample weighs
competes with the zero vector, cosine 0). SHOT's digit script (digit/uda_digit.py) has no label set: there an empty
class's centroid (second pass) is 0 / 1e-8 = the zero vector, scipy's cosine distance to it is NaN and numpy's
argmin picks the NaN for every sample; this module follows image_target.py, and a zero prototype here has cosine 0,
never NaN.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

EPS = 1e-5  # SHOT's epsilon inside the logarithms
PROTOTYPE_GUARD = 1e-6  # open point 3: mean inter-prototype cosine at or below this -> compare raw similarities


def entropy(p: torch.Tensor) -> torch.Tensor:
    """(n,) -sum_m p_m log(p_m + eps) of probability rows p (n, M)."""
    return -(p * torch.log(p + EPS)).sum(1)


def im_loss(logits: torch.Tensor) -> torch.Tensor:
    """L_IM of a batch of logits (n, M): the mean per-sample entropy minus the entropy of the mean prediction."""
    p = torch.softmax(logits, dim=1)  # (n, M)
    return entropy(p).mean() - entropy(p.mean(0, keepdim=True))[0]


def _features(feat: torch.Tensor, shot_style: bool) -> torch.Tensor:
    if not shot_style:
        return feat
    feat = torch.cat([feat, torch.ones(len(feat), 1, dtype=feat.dtype, device=feat.device)], 1)
    return F.normalize(feat, dim=1)


def prototypes(feat: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(M, q): sum_x w(x)_m f(x) / sum_x w(x)_m for features (n, q) and weights (n, M) (a class no sample
    weighs gets the zero vector)."""
    mass = weights.sum(0)  # (M,)
    return (weights.T @ feat) / mass.clamp(min=1e-12).unsqueeze(1)


def prototype_labels(feat: torch.Tensor, probs: torch.Tensor, shot_style: bool = True, labelset: bool = True
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 4, refined once, as SHOT's obtain_label: (labels (n,), the refined prototypes (M, q')) from features
    (n, q) and the model's softmax outputs (n, M). shot_style: features with a constant 1 appended, L2-normalised
    (SHOT's code) or raw (Eq. 4 as written); labelset: each pass picks among the classes the current labels
    (first pass: argmax of `probs`; second: the first pass's) predict at least once (SHOT's) or among all M. Ties:
    the lowest class index (SHOT's argmin over the ascending label set)."""
    f = _features(feat, shot_style)
    u = F.normalize(f, dim=1)
    m = probs.shape[1]
    weights, labels = probs, probs.argmax(1)
    for _ in range(2):
        protos = prototypes(f, weights)
        sim = u @ F.normalize(protos, dim=1).T  # (n, M) cosines (0 to a zero prototype)
        if labelset:
            present = torch.bincount(labels, minlength=m) > 0  # (M,)
            sim = sim.masked_fill(~present, float("-inf"))
        labels = sim.argmax(1)
        weights = F.one_hot(labels, m).to(f.dtype)
    return labels, protos


def mean_prototype_cosine(protos: torch.Tensor) -> float:
    """sum_{m != m'} cos(p_m, p_m') / (M (M - 1)) of prototypes (M, q), M >= 2."""
    u = F.normalize(protos, dim=1)
    sim = u @ u.T
    m = len(protos)
    return float((sim.sum() - sim.diagonal().sum()) / (m * (m - 1)))


def choose_labels(feat_a: torch.Tensor, labels_a: torch.Tensor, protos_a: torch.Tensor,
                  feat_b: torch.Tensor, labels_b: torch.Tensor, protos_b: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Alg. 2's label for every sample from two models' features (n, q), labels (n,) and prototypes (M, q):
    a's label where the labels agree or where cos(f_a(x), p_{y_a}) / p_bar >= cos(f_b(x), q_{y_b}) / q_bar, else
    b's. Returns (labels (n,), matched (n,) bool, whether open point 3's guard compared raw similarities)."""
    sim_a = (F.normalize(feat_a, dim=1) * F.normalize(protos_a, dim=1)[labels_a]).sum(1)  # (n,)
    sim_b = (F.normalize(feat_b, dim=1) * F.normalize(protos_b, dim=1)[labels_b]).sum(1)
    pa, pb = mean_prototype_cosine(protos_a), mean_prototype_cosine(protos_b)
    guarded = pa <= PROTOTYPE_GUARD or pb <= PROTOTYPE_GUARD
    if not guarded:
        sim_a, sim_b = sim_a / pa, sim_b / pb
    matched = labels_a == labels_b
    return torch.where(matched | (sim_a >= sim_b), labels_a, labels_b), matched, guarded


def mixup_partners(labels: torch.Tensor, matched: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """(n,) int: for every mismatched sample a matched sample with the same label drawn uniformly from `gen`; -1
    for matched samples and for mismatched ones whose label no matched sample has (open point 4: they stay unmixed)."""
    out = torch.full_like(labels, -1)
    pool = {int(c): matched.logical_and(labels == c).nonzero().flatten() for c in torch.unique(labels)}
    for i in (~matched).nonzero().flatten().tolist():
        cands = pool[int(labels[i])]
        if len(cands):
            out[i] = cands[int(torch.randint(len(cands), (1,), generator=gen))]
    return out


def mixup(x: torch.Tensor, partners: torch.Tensor, mu: float) -> torch.Tensor:
    """x with every sample that has a partner replaced by (1 - mu) x + mu x[partner] (FedWCA: mu = 0.55)."""
    out = x.clone()
    has = partners >= 0
    out[has] = (1 - mu) * x[has] + mu * x[partners[has]]
    return out
