"""FedWCA's weighted cluster aggregation (FedWCA Eq. 1-3, 7-8, App. B.2-B.3), pure functions of small tensors.

Client k in cluster c_k, C clusters, classifier weights W = [w_1..w_M] (fixed to the source model's):

    I_{k,c}   = mean_i max_m cos(f_c(x_i), w_m)                          Eq. 1: how well cluster c's features fit g_S
    alpha_k   = softmax_c(I_{k,c} / T_a)
    S(h)      = SND: the entropy of the softmax-normalised similarities between the samples' predictions
                (temperature 0.05, the diagonal logit set to -1/T and the entropy taken as -sum p log(p + 1e-5), as
                the SND reference code does: VisionLearningGroup/SND, nc_ps/eval.py neighbor_density and
                utils/loss.py entropy)
    beta_k    = softmax(S(g o f_{c_k}) / T_b, S(g o f_bar_k) / T_b)      Eq. 3
Server, from the clients' alpha and beta (A_bar_{c'->c} = mean_{k in c'} alpha_{k,c}; each row sums to 1):
    columns (default)  A_{c'->c} = A_bar_{c'->c} / sum_{c''} A_bar_{c''->c}                           (open point 1)
                       the paper's index order, each column normalised to the stated sum_{c'} A_{c'->c} = 1
    rows               A_{c'->c} = A_bar_{c->c'}: soft model c mixes the cluster models with the weights its own
                       clients give them (A_bar's row c, which already sums to 1); every column of A again sums to 1
    B_{c,i}       = mean_{k in c} beta_{k,i}
    f~_c          = B_{c,0} f_c + B_{c,1} sum_{c'} A_{c'->c} f_{c'}                                   Eq. 2
Client k then starts from f_init = beta_{k,0} f_{c_k} + beta_{k,1} sum_c alpha_{k,c} f~_c, which is
sum_c v_{k,c} f_c with (Eq. 8)
    v_{k,c} = 1(c = c_k) beta_{k,0} + beta_{k,1} alpha_{k,c} B_{c,0} + beta_{k,1} sum_{c'} B_{c',1} alpha_{k,c'} A_{c->c'}
and sum_c v_{k,c} = 1 exactly because sum_c A_{c->c'} = 1 (a sum over the first index, FedWCA Sec. 4.2; docs/methods.md,
FedWCA's open point 1), which both readings give; A_bar itself sums to 1 over the second index and, used as it is, lets v sum
to up to C.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

SND_TEMPERATURE = 0.05  # SND's own (FedWCA App. B.2), fixed
# SND's entropy -mean_i sum_j p_ij log(p_ij + 1e-5) (VisionLearningGroup/SND, utils/loss.py `entropy`, which SND's
# neighbor_density calls on the similarity logits)
SND_EPS = 1e-5
CROSS_CLUSTER_NORMS = ("columns", "rows")  # server_mixing's readings of A (module docstring)


def cluster_score(feat: torch.Tensor, classifier: torch.Tensor) -> float:
    """Eq. 1's I_{k,c}: the mean over samples of the largest cosine between a feature (n, q) and a class weight
    vector (M, q)."""
    sim = F.normalize(feat, dim=1) @ F.normalize(classifier, dim=1).T  # (n, M)
    return float(sim.max(1).values.mean())


def softmax_weights(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(scores / T) (Eq. 1's alpha from I, Eq. 3's beta from the SND scores), float64."""
    if not temperature > 0:
        raise ValueError(f"temperature={temperature!r} is invalid: a number > 0")
    return torch.softmax(scores.double() / temperature, dim=-1)


def snd(probs: torch.Tensor, temperature: float = SND_TEMPERATURE) -> float:
    """Soft neighbourhood density of softmax outputs (n, M), n >= 2 (higher: denser, a better-adapted model)."""
    u = F.normalize(probs.double(), dim=1)
    logits = (u @ u.T) / temperature  # (n, n)
    logits.fill_diagonal_(-1.0 / temperature)
    p = torch.softmax(logits, dim=1)
    return float(-(p * torch.log(p + SND_EPS)).sum(1).mean())


def server_mixing(alpha: torch.Tensor, beta: torch.Tensor, clusters: torch.Tensor, num_clusters: int,
                  norm: str = "columns") -> tuple[torch.Tensor, torch.Tensor]:
    """(A (C, C) with A[c', c] = A_{c'->c}, each column summing to 1; B (C, 2)) from the clients' alpha (K, C),
    beta (K, 2) and clusters (K,). norm: "columns" (A_bar normalised over its first index) or "rows" (A = A_bar
    transposed; module docstring). A cluster without clients keeps its own model: B = (1, 0) and A_bar's row c is
    the unit vector e_c (so with rows A's column c is e_c; with columns the column mixes in the other clusters' alpha,
    which B's 0 then ignores)."""
    if norm not in CROSS_CLUSTER_NORMS:
        raise ValueError(f"norm={norm!r} is invalid: one of {', '.join(CROSS_CLUSTER_NORMS)}")
    a_bar = torch.zeros(num_clusters, num_clusters, dtype=torch.float64)
    b = torch.zeros(num_clusters, 2, dtype=torch.float64)
    for c in range(num_clusters):
        members = (clusters == c).nonzero().flatten()
        if len(members):
            a_bar[c] = alpha[members].double().mean(0)  # A_bar_{c->.}
            b[c] = beta[members].double().mean(0)
        else:
            a_bar[c, c], b[c] = 1.0, torch.tensor([1.0, 0.0], dtype=torch.float64)
    if norm == "rows":
        a_bar = a_bar.T  # A[c', c] = A_bar[c, c']: its columns sum to 1 up to rounding; normalised below as well
    col = a_bar.sum(0, keepdim=True)  # (1, C): sum_{c''} A_bar_{c''->c}
    a = torch.where(col > 0, a_bar / col.clamp(min=1e-300), torch.eye(num_clusters, dtype=torch.float64))
    return a, b


def soft_cluster_models(models: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Eq. 2: f~ (C, P) from the cluster models f (C, P): f~_c = B_{c,0} f_c + B_{c,1} sum_{c'} A_{c'->c} f_{c'}."""
    mixed = a.T.to(models.dtype) @ models  # (C, P): row c = sum_{c'} A[c', c] f_{c'}
    return b[:, :1].to(models.dtype) * models + b[:, 1:].to(models.dtype) * mixed


def init_weights(alpha: torch.Tensor, beta: torch.Tensor, cluster: int, a: torch.Tensor, b: torch.Tensor
                 ) -> torch.Tensor:
    """Eq. 8: v_k (C,) float64, the weights of the cluster models in client k's initial model, from its alpha (C,),
    beta (2,) and cluster c_k."""
    alpha, beta = alpha.double(), beta.double()
    v = beta[1] * alpha * b[:, 0] + beta[1] * (a @ (b[:, 1] * alpha))  # (C,): the 2nd and 3rd terms
    v[cluster] += beta[0]
    return v
