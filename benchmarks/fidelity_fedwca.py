"""FedWCA's fidelity to the code it reuses (SHOT: tim-learn/SHOT; SND: VisionLearningGroup/SND): how much each of
five fixes changes the numbers, on one fixed seeded input each.

    python -m benchmarks.fidelity_fedwca [--json]

Every row measures one fix as a change from the old behaviour, written out here in a few lines (the package's code
before the fix), on the same input:

    before     the package with the old option (or the old constant) against the old behaviour written out: 0 says
               the old behaviour is still reachable, to the last bit
    after      the package's new default against the old behaviour: the size of the fix (fix 5: the new option
               "rows"; the default stays "columns")
    reference  the reference code, written out here in numpy / torch, against the old behaviour: after == reference
               (to rounding) says the package now computes what the reference computes

The fixes (fda_ray.algorithms.fedwca):
    1 prototypes   SHOT's obtain_label appends a constant 1 to the features and L2-normalises them before the
                   weighted centroids (FedWCAParams.prototypes shot, the default; eq4 the paper's Eq. 4 on raw
                   features). The label set held at its new default (on) in all three.
    2 labelset     SHOT restricts each of the two labelling passes to the classes the current labels predict at least
                   once (FedWCAParams.labelset true, the default; false: every class, a zero prototype competing).
                   The features held at SHOT's in all three.
    3 snd_eps      SND's entropy uses log(p + 1e-5) (cluster_weights.SND_EPS; it was 1e-12); the reference runs in
                   float32 as SND's code does, the package in float64.
    4 local_relabel  shot_local relabels at the start of every epoch (SHOT's image_target.py); it labelled once a
                   round. A SHOT LeNet pre-trained on synthetic band images, adapted 3 epochs on shifted ones.
    5 cross_cluster_norm  A_{c'->c} by rows (A_bar transposed) against columns (A_bar normalised over its first
                   index): Eq. 8's initial-model weights v_k.

The input data are synthetic (seeded); the sizes say how far apart the readings are, not what they do to accuracy.
"""
from __future__ import annotations

from fda_ray.core.parsing import first_paragraph

import argparse
import json
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from fda_ray.algorithms.fedwca import cluster_weights as cw
from fda_ray.algorithms.fedwca import methods as fw
from fda_ray.algorithms.fedwca.shot import prototype_labels

SEED = 0


# ---------------------------------------------------------------- written out: the references and the old code

def obtain_label(feat: np.ndarray, probs: np.ndarray, shot_style: bool = True, labelset: bool = True) -> np.ndarray:
    """tim-learn/SHOT object/image_target.py obtain_label (distance 'cosine', threshold 0) in numpy float64 with
    shot_style and labelset on; shot_style off: raw features, labelset off: every class a candidate, a zero centroid
    at cosine 0 (the package's old behaviour)."""
    fea = np.asarray(feat, dtype=np.float64)
    if shot_style:
        fea = np.concatenate([fea, np.ones((len(fea), 1))], 1)
        fea = fea / np.linalg.norm(fea, axis=1, keepdims=True)
    aff = np.asarray(probs, dtype=np.float64)
    k = aff.shape[1]
    predict = aff.argmax(1)
    for _ in range(2):
        initc = aff.T @ fea / (1e-8 + aff.sum(0)[:, None])
        cand = np.where(np.eye(k)[predict].sum(0) > 0)[0] if labelset else np.arange(k)
        c = initc[cand]
        c_norm = np.linalg.norm(c, axis=1)
        dd = 1 - (fea @ c.T) / np.linalg.norm(fea, axis=1)[:, None] / np.where(c_norm > 0, c_norm, np.inf)[None]
        predict = cand[dd.argmin(1)]
        aff = np.eye(k)[predict]
    return predict


def snd_reference(pred: torch.Tensor) -> float:
    """VisionLearningGroup/SND nc_ps/eval.py neighbor_density (T = 0.05) with utils/loss.py entropy, in pred's
    dtype."""
    normalized = F.normalize(pred)
    mat = normalized @ normalized.T / 0.05
    mat.masked_fill_(torch.eye(len(mat), dtype=torch.bool), -1 / 0.05)
    p = F.softmax(mat, dim=1)
    return float(-torch.mean(torch.sum(p * torch.log(p + 1e-5), 1)))


def snd_old(pred: torch.Tensor) -> float:
    """The package's SND before the fix: float64, log(p + 1e-12)."""
    u = F.normalize(pred.double(), dim=1)
    logits = (u @ u.T / 0.05).fill_diagonal_(-1 / 0.05)
    p = torch.softmax(logits, 1)
    return float(-(p * torch.log(p + 1e-12)).sum(1).mean())


def mixing(alpha: np.ndarray, clusters: np.ndarray, c: int, norm: str) -> np.ndarray:
    """A[c', c] from A_bar[c', c] = mean_{k in c'} alpha_{k,c} (every cluster has clients): columns normalised, or
    A_bar transposed (rows)."""
    a_bar = np.stack([alpha[clusters == j].mean(0) for j in range(c)])
    return a_bar / a_bar.sum(0, keepdims=True) if norm == "columns" else a_bar.T


def eq8(alpha_k: np.ndarray, beta_k: np.ndarray, own: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Eq. 8: v_{k,c} = 1(c = c_k) beta_0 + beta_1 alpha_c B_{c,0} + beta_1 sum_{c'} B_{c',1} alpha_{c'} A_{c->c'}."""
    c = len(alpha_k)
    return np.array([(beta_k[0] if j == own else 0.0) + beta_k[1] * alpha_k[j] * b[j, 0]
                     + beta_k[1] * sum(b[j2, 1] * alpha_k[j2] * a[j, j2] for j2 in range(c)) for j in range(c)])


# ---------------------------------------------------------------- inputs

def _outputs(seed: int = SEED, n: int = 200, q: int = 16, k: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """Features (n, q) around k class centres and softmax outputs (n, k) whose last two classes are rarely the
    argmax (float32, as a model gives them)."""
    g = torch.Generator().manual_seed(seed)
    centres = 1.5 * torch.randn(k, q, generator=g)
    feat = centres[torch.randint(k, (n,), generator=g)] + torch.randn(n, q, generator=g)
    bias = torch.tensor([0.0] * (k - 2) + [-3.0, -3.0])
    return feat, torch.softmax(2 * torch.randn(n, k, generator=g) + bias, 1)


def _share(a, b) -> float:
    return float(np.mean(np.asarray(a) != np.asarray(b)))


# ---------------------------------------------------------------- the rows

def _labels_row(fix: str, quantity: str, old: dict[str, bool], new: dict[str, bool]) -> dict[str, Any]:
    feat, probs = _outputs()
    f, p = feat.double().numpy(), probs.double().numpy()
    old_labels = obtain_label(f, p, **old)
    pkg = lambda opts: prototype_labels(feat, probs, **opts)[0].numpy()  # noqa: E731
    return {"fix": fix, "quantity": quantity, "before": _share(pkg(old), old_labels),
            "after": _share(pkg(new), old_labels), "reference": _share(obtain_label(f, p), old_labels)}


def _snd_row() -> dict[str, Any]:
    g = torch.Generator().manual_seed(SEED)
    sets = [torch.softmax(t * torch.randn(100, 10, generator=g), 1) for t in (0.5, 1.0, 2.0, 4.0, 8.0)]
    old = [snd_old(s) for s in sets]
    saved = cw.SND_EPS
    try:
        cw.SND_EPS = 1e-12  # the old constant
        before = [cw.snd(s) for s in sets]
    finally:
        cw.SND_EPS = saved
    after = [cw.snd(s) for s in sets]
    ref = [snd_reference(s) for s in sets]
    diff = lambda xs: float(np.max(np.abs(np.array(xs) - np.array(old))))  # noqa: E731
    return {"fix": "3 snd_eps",
            "quantity": "max abs difference of SND from SND with log(p + 1e-12), 5 softmax sets (100 x 10)",
            "before": diff(before), "after": diff(after), "reference": diff(ref)}


def _band_images(n: int, gen: torch.Generator, shift: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, 3, 28, 28) images whose class k (of 10) brightens row band k (shifted down by `shift` rows), noisy."""
    y = torch.randint(10, (n,), generator=gen)
    x = 0.25 * torch.rand(n, 3, 28, 28, generator=gen)
    for i, k in enumerate(y.tolist()):
        x[i, :, 2 * k + 4 + shift: 2 * k + 7 + shift, :] += 0.6
    return x, y


def _local_row() -> dict[str, Any]:
    from fda_ray.core.contract import ClientTask
    from fda_ray.core.layout import ParamLayout
    from fda_ray.train.client import Client
    from fda_ray.train.models import build_model

    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = build_model("shot_lenet", (3, 28, 28), 10)
    layout = ParamLayout.from_model(model)
    xs, ys = _band_images(256, gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    for _ in range(3):  # the source model: cross-entropy on the unshifted bands
        for idx in torch.randperm(256, generator=gen).split(32):
            loss = F.cross_entropy(model(xs[idx]), ys[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    source = layout.flatten_model(model)
    xt, yt = _band_images(256, gen, shift=1)
    client = Client(1, {"train": (xt, torch.full_like(yt, -1))}, model, layout, seed=SEED, drop_last=False)
    h = {**fw.FedWCAParams().to_dict(), "role": "shot", "lr": 0.01, "batch": 64, "epochs": 3}
    task = ClientTask(1, "fedwca", 1, h, inputs=("source",))
    partners = torch.full((256,), -1, dtype=torch.long)
    first = fw._pseudo_labels(fw._Outputs(client), task, source, None, h)[0]  # the round's labels (the old code's)
    used: list[tuple[torch.Tensor, torch.Tensor]] = []  # (weights at the epoch's start, its labels)

    def relabel(flat: torch.Tensor) -> torch.Tensor:
        labels = fw._pseudo_labels(fw._Outputs(client), task, flat, None, h)[0]
        used.append((flat.clone(), labels))
        return labels

    fw._adapt(client, task, source, first, partners, h)  # before: the round's labels, every epoch
    before_last = first  # what the old code trains its last epoch on
    fw._adapt(client, task, source, None, partners, h, relabel=relabel)  # after
    assert torch.equal(used[0][1], first)  # the first epoch's labels are the round's
    flat_last, after_last = used[-1]
    feat, probs = fw._outputs(client, flat_last)
    ref_last = obtain_label(feat.double().numpy(), probs.double().numpy())  # SHOT's labels of that model
    return {"fix": "4 local_relabel",
            "quantity": "share of the last (3rd) epoch's labels unlike the round's first labels (Local, 256 images)",
            "before": _share(before_last.numpy(), first.numpy()), "after": _share(after_last.numpy(), first.numpy()),
            "reference": _share(ref_last, first.numpy())}


def _mixing_row() -> dict[str, Any]:
    rng = np.random.default_rng(SEED)
    c, k = 4, 12
    clusters = np.arange(k) % c
    alpha = np.exp(rng.normal(size=(k, c)) / 0.3)
    alpha /= alpha.sum(1, keepdims=True)
    beta = np.exp(rng.normal(size=(k, 2)))
    beta /= beta.sum(1, keepdims=True)
    b = np.stack([beta[clusters == j].mean(0) for j in range(c)])
    old_a = mixing(alpha, clusters, c, "columns")
    old_v = np.stack([eq8(alpha[i], beta[i], int(clusters[i]), old_a, b) for i in range(k)])
    ref_a = mixing(alpha, clusters, c, "rows")
    ref_v = np.stack([eq8(alpha[i], beta[i], int(clusters[i]), ref_a, b) for i in range(k)])
    t = lambda x: torch.from_numpy(x)  # noqa: E731

    def package(norm: str) -> np.ndarray:
        a, bb = cw.server_mixing(t(alpha), t(beta), t(clusters), c, norm)
        return np.stack([cw.init_weights(t(alpha[i]), t(beta[i]), int(clusters[i]), a, bb).numpy() for i in range(k)])

    diff = lambda v: float(np.abs(v - old_v).max())  # noqa: E731
    return {"fix": "5 cross_cluster_norm",
            "quantity": "max abs difference of Eq. 8's v_k,c from v_k,c with A by columns (12 clients, 4 clusters; "
                        "after: rows)",
            "before": diff(package("columns")), "after": diff(package("rows")), "reference": diff(ref_v)}


def rows() -> list[dict[str, Any]]:
    """One dict per fix: fix, quantity, before, after, reference (module docstring)."""
    return [
        _labels_row("1 prototypes", "share of pseudo-labels unlike Eq. 4 on raw features (200 x 16, 10 classes)",
                    old={"shot_style": False, "labelset": True}, new={"shot_style": True, "labelset": True}),
        _labels_row("2 labelset", "share of pseudo-labels unlike all classes as candidates (same input)",
                    old={"shot_style": True, "labelset": False}, new={"shot_style": True, "labelset": True}),
        _snd_row(),
        _local_row(),
        _mixing_row(),
    ]


def markdown(table: list[dict[str, Any]]) -> str:
    lines = ["| fix | quantity | before | after | reference |", "|---|---|---|---|---|"]
    for r in table:
        quantity = r["quantity"].replace("|", "\\|")
        lines.append(f"| {r['fix']} | {quantity} | {r['before']:.4g} | {r['after']:.4g} | {r['reference']:.4g} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fidelity_fedwca", description=first_paragraph(__doc__))
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a Markdown table")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    table = rows()
    print(json.dumps(table, indent=1) if a.json else markdown(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
