"""FedWCA: source-free federated domain adaptation by weighted cluster aggregation, and its baselines.

Roles (FedWCA Sec. 3 and App. C.1; data: partition domain_clients, fda_ray.runtime.partitions): client 0 holds the labelled
source domain and pre-trains the source model h_S = g_S o f_S once (the server's model: the source data are not read
again); the clients 1..K hold unlabelled shards of the other domains, each split 64/16/20 into train / validation /
test. The model is SHOT's (fda_ray.train.models.ShotNet): f = backbone + bottleneck, g = a weight-normalised classifier,
fixed to g_S; only f is trained and averaged (BatchNorm buffers too). Rows (loop rounds r):

    r = 0   phase "source": client 0 trains h_S for source_epochs epochs (cross-entropy with SHOT's label
            smoothing); cached on disk per (seed, data, model, recipe), FDA_RAY_CACHE_DIR. Evaluated: h_S on every
            client's test split (Source Only).
    r = 1   FedWCA's round 0: every client starts from f_S, labels its train split once by Eq. 4's prototypes (refined
            once; by default as SHOT's code computes them: features with a 1 appended and L2-normalised, each pass
            choosing among the classes predicted at least once, fda_ray.algorithms.fedwca.shot) and trains E epochs
            of SGD on L_IM + lambda L_CE (Eq. 9), g fixed. The server clusters the
            clients once, FINCH's first partition of their first layers' parameters (fda_ray.algorithms.fedwca.finch), and
            averages each cluster: f_c (n_k-weighted, open point 9); f~_c = f_c.
    r >= 2  FedWCA's rounds >= 1 (Alg. 1-2): client k receives f_{c_k} and the soft cluster models f~_c; computes
            alpha_k = softmax_c(I_{k,c} / T_a) with f~_c (Eq. 1, open point 2), f_bar = sum_c alpha_{k,c} f~_c,
            beta_k = softmax(SND(g o f_{c_k}) / T_b, SND(g o f_bar) / T_b) (Eq. 3), f_init = beta_0 f_{c_k} +
            beta_1 f_bar; labels its samples with both models' prototypes (Alg. 2: the normalised similarity picks
            a mismatched sample's label, open point 3's guard) and mixes each mismatched sample with a matched one of
            the same label, x_mix = (1 - mu) x + mu x' (open point 4: none -> unmixed); trains E epochs from f_init with
            the labels fixed for the round; sends f_k, alpha_k, beta_k. The server averages each cluster, forms
            A (each column summing to 1, open point 1: `cross_cluster_norm` columns, A_bar normalised over its first
            index, or rows, A_bar transposed) and B, and the soft models f~_c (Eq. 2).
    evaluated: each client's cluster model g_S o f_{c_k} on its own test split (open point 11); the row's accuracy is
            the mean over clients; val_accuracy likewise on the validation splits (model selection, e.g. T_a x
            T_b, uses this column and never the test one).

Weightings (`weighting`, FedWCA Table 3): wca (FedWCA); local (FedWCA-L: alpha on the cluster models f_c, f_bar =
sum_c alpha_c f_c, no soft models); one_hot (f_init = f_{c_k}); equal (the mean of the cluster models); one_equal
(one_equal_p on the own cluster, the rest spread evenly); one_equal_a (SND weights, Eq. 3, between the one-hot and
the equal model). `revision_interval` U > 1 is the revised FedWCA (App. D): the clients compute alpha and beta in
the first round of every block of U rounds; in the others the server sends f_init = sum_c v_{k,c} f_c itself
(Eq. 8, with the block's alpha, beta, A and B) and f_{c_k}.

Baselines (FedWCA section 5): shot_source_only (h_S, row 0 only); shot_local (SHOT on every client, no communication, the
same rounds x E epochs, the pseudo-labels recomputed from the current model at the start of every epoch as SHOT's
image_target.py does (interval = max_epoch); each client's own model evaluated); shot_fedavg (SHOT with round-fixed
labels, as FedWCA fixes them for FedAvg and FedWCA, + FedAvg of f over all clients; the global model evaluated on every
client). Loss details (FedWCA's traps, docs/methods.md): L_IM's mean
prediction per mini-batch (SHOT, open point 5); CE on the mixed image for a mixed sample and on the original otherwise, IM on
the original images, one forward pass through both (BatchNorm sees them together); a last batch of one sample is skipped
(BatchNorm cannot train on it).
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

import numpy as np
import torch
from torch.nn import functional as F

from fda_ray.algorithms.base import Algorithm, Params, param
from fda_ray.core.contract import ClientResult, ClientTask, Round, ServerState
from fda_ray.train.client import RECIPES, Client
from fda_ray.algorithms.fedwca.cluster_weights import (
    CROSS_CLUSTER_NORMS, server_mixing, snd, soft_cluster_models, softmax_weights, cluster_score, init_weights)
from fda_ray.algorithms.fedwca.finch import first_partition
from fda_ray.train.evaluation import Evaluator, eval_chunk, evaluate_metrics
from fda_ray.core.seeding import derive_seed, generator
from fda_ray.algorithms.fedwca.shot import choose_labels, im_loss, mixup_partners, prototype_labels

WEIGHTINGS = ("wca", "local", "one_hot", "equal", "one_equal", "one_equal_a")
SOURCE_RECIPE_VERSION = 1  # part of the source-model cache key: bump when the pre-training's arithmetic changes


@dataclass(frozen=True)
class FedWCAParams(Params):
    family = "fedwca"
    weighting: str = param("wca", "the initial model's cluster weights (FedWCA Table 3): wca (FedWCA), local (FedWCA-L), "
                                  "one_hot, equal, one_equal, one_equal_a", choices=WEIGHTINGS)
    temp_a: float = param(0.01, "T_a of Eq. 1 (alpha's softmax; FedWCA: 0.01 Digit-Five and Office-Home, 0.1 PACS)",
                          low=1e-6)
    temp_b: float = param(0.05, "T_b of Eq. 3 (beta's softmax over the SND scores; FedWCA: 0.05)", low=1e-6)
    snd_temperature: float = param(0.05, "the similarity temperature inside SND (fixed by SND: 0.05)", low=1e-6)
    revision_interval: int = param(1, "U of the revised FedWCA (App. D): clients compute alpha and beta every U "
                                      "rounds, the server mixes in between; 1: every round", low=1, integer=True)
    one_equal_p: float = param(0.8, "one_equal: the own cluster's weight", low=0.0, high=1.0)
    ce_weight: float = param(0.1, "lambda of Eq. 9, the pseudo-labels' cross-entropy weight (FedWCA: 0.1 Digit-Five, "
                                  "0.3 PACS and Office-Home)", low=0.0)
    mixup_mu: float = param(0.55, "mu of Alg. 2's mixup (x_mix = (1 - mu) x + mu x'; 0: no mixup)", low=0.0, high=1.0)
    pseudo_label_models: str = param("two", "two (Alg. 2: the initial and the cluster model's labels) or one (the "
                                            "initial model's only: no mixup)", choices=("two", "one"))
    prototypes: str = param("shot", "shot (SHOT's code, which FedWCA says it reuses: features with a constant 1 "
                                    "appended, L2-normalised, before the weighted centroids) or eq4 (the paper's Eq. 4 "
                                    "as written: raw features); both compare by cosine (open point 6)",
                            choices=("shot", "eq4"))
    labelset: bool = param(True, "SHOT's: candidate classes limited to those predicted at least once (each of the two "
                                 "labelling passes); false: every class competes, one nobody predicts with a zero "
                                 "prototype", choices=("true", "false"))
    cross_cluster_norm: str = param("columns", "the server's cross-cluster weights A_{c'->c} from A_bar_{c'->c} = the "
                                               "mean alpha_{k,c} of cluster c's clients k: columns (A_bar normalised "
                                               "over c', the paper's stated sum_{c'} A_{c'->c} = 1, open point 1) or rows "
                                               "(A_{c'->c} = A_bar_{c->c'}: soft model c mixes the cluster models "
                                               "with the weights its own clients give them; its columns sum to 1 too)",
                                    choices=CROSS_CLUSTER_NORMS)
    local_epochs: int = param(5, "E: local epochs a round (FedWCA: 5)", low=1, integer=True)
    momentum: float = param(0.9, "SGD momentum (FedWCA App. C.2)", low=0.0, high=1.0)
    weight_decay: float = param(1e-3, "SGD weight decay (FedWCA App. C.2)", low=0.0)
    source_epochs: int = param(20, "epochs of the source model's pre-training (not given; SHOT's digits: 30)",
                               low=1, integer=True)
    label_smoothing: float = param(0.1, "the source training's label smoothing (SHOT's)", low=0.0, high=1.0)

    def __post_init__(self) -> None:
        """The bool fields (labelset) take True / False, or the words true / false (the command line's flag passes
        the word); Params' own checks know numbers and words, so they see the word while the rest is checked."""
        flags: dict[str, bool] = {}
        for f in dataclasses.fields(self):
            if f.type not in (bool, "bool"):
                continue
            v = getattr(self, f.name)
            if isinstance(v, str) and v.strip().lower() in _WORDS:
                v = _WORDS[v.strip().lower()]
            if not isinstance(v, (bool, np.bool_)):
                raise ValueError(f"{self.family}.{f.name}={getattr(self, f.name)!r} is invalid: one of true, false")
            flags[f.name] = bool(v)
            object.__setattr__(self, f.name, "true" if v else "false")
        try:
            super().__post_init__()
        finally:
            for name, v in flags.items():
                object.__setattr__(self, name, v)


_WORDS = {"true": True, "false": False}


# Per-dataset values of FedWCA Table 9 (the Params defaults are Digit-Five's) and fda-ray's settings for FMNIST-5.
DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "fmnist-5": dict(model="shot_lenet", model_weights=None, lr_source=0.01, lr_target=0.01, batch_source=64,
                     batch_target=64, params={}),
    "digit-five": dict(model="shot_lenet", model_weights=None, lr_source=1e-3, lr_target=1e-3, batch_source=64,
                       batch_target=64, params={}),
    "pacs": dict(model="shot_resnet18", model_weights="imagenet", lr_source=1e-3, lr_target=1e-4, batch_source=32,
                 batch_target=32, params={"temp_a": 0.1, "ce_weight": 0.3}),
    "office-home": dict(model="shot_resnet50", model_weights="imagenet", lr_source=1e-3, lr_target=1e-4,
                        batch_source=32, batch_target=32, params={"ce_weight": 0.3}),
}

# FedWCA Table 9's T_a exceptions by source domain: Digit-Five's SYNTH (env 3) 0.001, Office-Home's Clipart (env 1) 0.1
SOURCE_TEMP_A: dict[tuple[str, tuple[int, ...]], float] = {("digit-five", (3,)): 0.001, ("office-home", (1,)): 0.1}


# ---------------------------------------------------------------- the model's parts in the flat vector

def part_masks(layout) -> tuple[torch.Tensor, torch.Tensor]:
    """((M,) bool of the classifier g's coordinates, (M,) bool of the first layer's parameters: FINCH's input)."""
    cls = torch.zeros(layout.size, dtype=torch.bool)
    first = torch.zeros(layout.size, dtype=torch.bool)
    first_module = layout.names[0].rsplit(".", 1)[0]
    for i, name in enumerate(layout.names):
        sl = slice(int(layout.offsets[i]), int(layout.offsets[i + 1]))
        if name.startswith("classifier."):
            cls[sl] = True
        module, leaf = name.rsplit(".", 1)
        if module == first_module and leaf in ("weight", "bias"):
            first[sl] = True
    return cls, first


def cache_dir() -> Path | None:
    """Where pre-trained source models are kept ($FDA_RAY_CACHE_DIR, default ~/.cache/fda_ray/source-models;
    'off': no cache)."""
    value = os.environ.get("FDA_RAY_CACHE_DIR", str(Path.home() / ".cache" / "fda_ray" / "source-models"))
    return None if value == "off" else Path(value).expanduser()


# ---------------------------------------------------------------- client-side pieces

@torch.no_grad()
def _outputs(client: Client, flat: torch.Tensor, data: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
    """(features f(x) (n, q), softmax outputs (n, M)) of the weights `flat` on view `data`, eval mode."""
    client.layout.load_into(client.model, flat.to(client.device))
    client.model.eval()
    x = client.view(data)[0]
    n, chunk = len(client.view(data)[1]), eval_chunk(x)
    feats, probs = [], []
    for lo in range(0, n, chunk):
        f = client.model.features(x[lo : min(lo + chunk, n)].to(client.device))
        feats.append(f)
        probs.append(torch.softmax(client.model.classifier(f), 1))
    return torch.cat(feats), torch.cat(probs)


class _Outputs:
    """`_outputs` on the train split, once per model within a task: the own cluster model f_{c_k} is read by Eq. 1
    (FedWCA-L), SND and Alg. 2's prototypes, one_hot's initial model is f_{c_k} itself. Keyed by the tensor object,
    which the memo keeps alive (so an id is never reused)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.seen: dict[int, tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]] = {}

    def __call__(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if id(flat) not in self.seen:
            self.seen[id(flat)] = (flat, _outputs(self.client, flat))
        return self.seen[id(flat)][1]


def _classifier_weights(client: Client) -> torch.Tensor:
    """(M, q): g's effective class vectors w_m (the loaded model's; every model a task sees has g_S exactly)."""
    with torch.no_grad():
        return client.model.classifier.weight().detach()


def _mix(models: list[torch.Tensor], weights: torch.Tensor) -> torch.Tensor:
    """sum_c weights_c models_c in float64, returned as float32 (M,)."""
    out = torch.zeros_like(models[0], dtype=torch.float64)
    for w, m in zip(weights.tolist(), models):
        out += w * m.double()
    return out.float()


def _alpha(outputs: _Outputs, models: list[torch.Tensor], temp: float) -> torch.Tensor:
    """Eq. 1: softmax_c(I_{k,c} / T_a) (C,) float64 over the given models' features on the client's train split."""
    scores = []
    for m in models:
        feat, _ = outputs(m)
        scores.append(cluster_score(feat, _classifier_weights(outputs.client)))
    return softmax_weights(torch.tensor(scores, dtype=torch.float64), temp)


def _snd_weights(outputs: _Outputs, a: torch.Tensor, b: torch.Tensor, h: Mapping[str, Any]) -> torch.Tensor:
    """Eq. 3: softmax(SND(g o a) / T_b, SND(g o b) / T_b) (2,) float64."""
    s = [snd(outputs(m)[1], float(h["snd_temperature"])) for m in (a, b)]
    return softmax_weights(torch.tensor(s, dtype=torch.float64), float(h["temp_b"]))


def _pseudo_labels(outputs: _Outputs, task: ClientTask, init: torch.Tensor, own: torch.Tensor | None,
                   h: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """The round's fixed labels (n,) and mixup partners (n,) (-1: unmixed) of the train split: Eq. 4 with the initial
    model alone (`own` None: FedWCA's round 0, the baselines) or Alg. 2 with the initial and the cluster model."""
    shot, labelset = h["prototypes"] == "shot", bool(h["labelset"])
    client = outputs.client
    feat_a, probs_a = outputs(init)
    labels_a, protos_a = prototype_labels(feat_a, probs_a, shot, labelset)
    n = len(labels_a)
    if own is None or h["pseudo_label_models"] == "one":
        return labels_a, torch.full((n,), -1, dtype=torch.long, device=labels_a.device), {}
    feat_b, probs_b = outputs(own)
    labels_b, protos_b = prototype_labels(feat_b, probs_b, shot, labelset)
    fa = torch.cat([feat_a, torch.ones(n, 1, device=feat_a.device)], 1) if shot else feat_a
    fb = torch.cat([feat_b, torch.ones(n, 1, device=feat_b.device)], 1) if shot else feat_b
    labels, matched, guarded = choose_labels(fa, labels_a, protos_a, fb, labels_b, protos_b)
    partners = torch.full((n,), -1, dtype=torch.long, device=labels.device)
    if float(h["mixup_mu"]) > 0:
        gen = generator(client.seed, task.round, client.index, f"{task.purpose}/mixup")
        partners = mixup_partners(labels.cpu(), matched.cpu(), gen).to(labels.device)
    stats = {"matched_share": float(matched.float().mean()), "prototype_guard": float(guarded),
             "unmixed": float(((~matched) & (partners < 0)).sum())}
    return labels, partners, stats


def _seed_dropout(client: Client, task: ClientTask, what: str) -> None:
    """Dropout draws from torch's global generator: seed it per (seed, round, client, purpose), so a task's numbers
    do not depend on what its process ran before (serial == Ray, a cached source model == a trained one)."""
    torch.manual_seed(derive_seed(client.seed, task.round, client.index, f"{task.purpose}/{what}/dropout"))


def _adapt(client: Client, task: ClientTask, start: torch.Tensor, labels: torch.Tensor | None, partners: torch.Tensor,
           h: Mapping[str, Any], relabel: Callable[[torch.Tensor], torch.Tensor] | None = None
           ) -> tuple[torch.Tensor, int, float]:
    """E epochs of SGD from `start` (M,) on L_IM + lambda L_CE (Eq. 9) with the classifier fixed: (new weights (M,),
    steps, mean loss). The labels (n,) are fixed for the E epochs, or, with `relabel`, each epoch's are
    relabel(the current weights (M,)), called at the start of the epoch (SHOT's obtain_label every epoch)."""
    model = client.model
    client.layout.load_into(model, start.to(client.device))
    model.train()
    _seed_dropout(client, task, "adapt")
    params = [p for n, p in model.named_parameters() if not n.startswith("classifier.")]
    opt = torch.optim.SGD(params, lr=float(h["lr"]), momentum=float(h["momentum"]),
                          weight_decay=float(h["weight_decay"]))
    lam, mu = float(h["ce_weight"]), float(h["mixup_mu"])
    steps, total = 0, 0.0
    for e in range(int(h["epochs"])):
        if relabel is not None:  # eval-mode forward passes: no dropout draw, BatchNorm's statistics untouched
            labels = relabel(client.layout.flatten_model(model))
            model.train()
        purpose = f"{task.purpose}/epoch{e}"
        read = client.reader(task.round, purpose, "train")
        for idx in client.batch_indices(int(h["batch"]), task.round, purpose, "train", drop_last=False):
            if len(idx) < 2:  # BatchNorm cannot train on one sample
                continue
            xb, pb = read(idx), partners[idx]
            has = pb >= 0
            if bool(has.any()):
                xm = (1 - mu) * xb[has] + mu * read(pb[has])  # (h, ...) the mismatched samples, mixed
                out = model(torch.cat([xb, xm]))
                logits = out[: len(idx)]
                ce_logits = torch.cat([logits[~has], out[len(idx):]])
                ce_labels = torch.cat([labels[idx][~has], labels[idx][has]])
            else:
                logits = model(xb)
                ce_logits, ce_labels = logits, labels[idx]
            loss = im_loss(logits) + lam * F.cross_entropy(ce_logits, ce_labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach())
            steps += 1
    return client.layout.flatten_model(model), steps, total / max(steps, 1)


def _source_key(h: Mapping[str, Any]) -> str:
    return hashlib.sha1(json.dumps({**h["cache_key"], "version": SOURCE_RECIPE_VERSION, "torch": torch.__version__},
                                   sort_keys=True, default=str).encode()).hexdigest()[:16]


def _cached_source(path: Path) -> dict[str, Any] | None:
    """A cached source model, or None (trained again) when the file cannot be read as one: a cache file damaged on
    disk or by hand is no reason to fail a trial. It is kept as <name>.damaged (nothing deleted) with one warning
    line naming it and why, and the fresh model is cached in its place."""
    from fda_ray.core.user_files import torch_damage

    data = path.read_bytes()
    try:
        saved = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        why = None if isinstance(saved, dict) and isinstance(saved.get("weights"), torch.Tensor) and "loss" in saved \
            else "not a cached source model (it needs weights and loss)"
    except Exception as e:  # torch's safe loader raises any of several types for a file it cannot read
        saved, why = None, torch_damage(data, e)
    if why is None:
        return saved
    target = path.with_name(path.name + ".damaged")
    try:
        os.replace(path, target)
    except FileNotFoundError:  # a concurrent trial found it first and set it aside
        return None
    print(f"warning: the cached source model {path} is not used ({why}); kept as {target.name}, trained again",
          file=sys.stderr, flush=True)
    return None


def _pretrain(client: Client, task: ClientTask, start: torch.Tensor, h: Mapping[str, Any]) -> tuple[torch.Tensor, int, float]:
    """The source model: source_epochs epochs of SGD on cross-entropy with label smoothing over the source domain
    (client 0's train view), from `start`; read from / written to the cache when there is one."""
    where = cache_dir()
    path = where / f"{_source_key(h)}.pt" if where is not None else None
    if path is not None and path.is_file():
        saved = _cached_source(path)
        if saved is not None:
            return saved["weights"].to(client.device), 0, float(saved["loss"])
    model = client.model
    client.layout.load_into(model, start.to(client.device))
    model.train()
    _seed_dropout(client, task, "pretrain")
    opt = torch.optim.SGD(model.parameters(), lr=float(h["lr"]), momentum=float(h["momentum"]),
                          weight_decay=float(h["weight_decay"]))
    steps, total = 0, 0.0
    for e in range(int(h["epochs"])):
        for xb, yb in client.batches(int(h["batch"]), task.round, f"{task.purpose}/epoch{e}", "train"):
            if len(yb) < 2:
                continue
            loss = F.cross_entropy(model(xb), yb, label_smoothing=float(h["label_smoothing"]))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach())
            steps += 1
    new = client.layout.flatten_model(model)
    loss = total / max(steps, 1)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save({"weights": new.cpu(), "loss": loss, "key": h["cache_key"]}, tmp)
        os.replace(tmp, path)  # atomic: a concurrent trial reads a whole file or none
    return new, steps, loss


@RECIPES.register("fedwca")
def fedwca_recipe(client: Client, task: ClientTask, inputs: Mapping[str, torch.Tensor]) -> ClientResult:
    """A client's work in one round of FedWCA's methods.

    hparams: role: pretrain (client 0: the source model from inputs["global"]; sends weights), shot (start from
    the input named by `start`, or the client's own model with `local`; Eq. 4 labels, fixed for the round, or with
    `local` recomputed every epoch; sends weights unless local),
    wca (the weighting's initial model from the inputs named by `own` (f_{c_k}), "cluster{c}" / "soft{c}" (C =
    clusters) or by `init` (the revised FedWCA's server-mixed model); Alg. 2 labels; sends weights and alpha,
    beta); lr, batch, epochs,
    momentum, weight_decay, ce_weight, mixup_mu, pseudo_label_models, prototypes, labelset, weighting, temp_a, temp_b,
    snd_temperature, one_equal_p, clusters, label_smoothing, cache_key."""
    h = task.hparams
    role = h["role"]
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, float] = {}
    if role == "pretrain":
        new, steps, loss = _pretrain(client, task, inputs["global"], h)
        tensors["weights"] = new.cpu()
        return _done(client, task, tensors, steps, loss, scalars)
    if role == "shot":
        local = bool(h.get("local", False))
        start = client.state["model"] if local and "model" in client.state else inputs[h["start"]]
        if local:  # Local is SHOT itself: pseudo-labels from the current model at the start of every epoch
            n = len(client.view("train")[1])
            partners = torch.full((n,), -1, dtype=torch.long, device=client.device)
            new, steps, loss = _adapt(client, task, start, None, partners, h,
                                      relabel=lambda flat: _pseudo_labels(_Outputs(client), task, flat, None, h)[0])
        else:  # FedAvg and FedWCA's round 0: labels fixed for the round (FedWCA)
            labels, partners, _ = _pseudo_labels(_Outputs(client), task, start, None, h)
            new, steps, loss = _adapt(client, task, start, labels, partners, h)
        if local:
            client.state["model"] = new.cpu()
        else:
            tensors["weights"] = new.cpu()
        return _done(client, task, tensors, steps, loss, scalars)
    # role "wca": the weighting's initial model (Alg. 1 lines 13-16), then Alg. 2 and the local epochs
    own = inputs[h["own"]]  # f_{c_k}
    weighting, c = h["weighting"], int(h["clusters"])
    outputs = _Outputs(client)
    if "init" in h:  # the revised FedWCA between its blocks' first rounds: the server mixed it
        init = inputs[h["init"]]
    elif weighting in ("wca", "local"):
        models = [inputs[f"soft{j}" if weighting == "wca" else f"cluster{j}"] for j in range(c)]
        alpha = _alpha(outputs, models, float(h["temp_a"]))
        bar = _mix(models, alpha)
        beta = _snd_weights(outputs, own, bar, h)
        init = _mix([own, bar], beta)
        tensors["alpha"], tensors["beta"] = alpha, beta
    elif weighting == "one_hot":
        init = own
    else:
        clusters = [inputs[f"cluster{j}"] for j in range(c)]
        equal = _mix(clusters, torch.full((c,), 1.0 / c, dtype=torch.float64))
        if weighting == "equal":
            init = equal
        elif weighting == "one_equal_a":
            beta = _snd_weights(outputs, own, equal, h)
            init = _mix([own, equal], beta)
            tensors["beta"] = beta
        else:  # one_equal: p on the own cluster, (1 - p) / (C - 1) on each other
            p = float(h["one_equal_p"]) if c > 1 else 1.0
            w = torch.full((c,), (1 - p) / max(c - 1, 1), dtype=torch.float64)
            w[int(h["own_cluster"])] = p
            init = _mix(clusters, w)
    labels, partners, stats = _pseudo_labels(outputs, task, init, own, h)
    new, steps, loss = _adapt(client, task, init, labels, partners, h)
    tensors["weights"] = new.cpu()
    scalars.update(stats)
    return _done(client, task, tensors, steps, loss, scalars)


def _done(client: Client, task: ClientTask, tensors: dict[str, torch.Tensor], steps: int, loss: float,
          scalars: dict[str, float]) -> ClientResult:
    result = client.finish(task, {k: v.cpu() for k, v in tensors.items()}, steps, loss)
    result.scalars.update(scalars)
    return result


# ---------------------------------------------------------------- the server half

class _Base(Algorithm):
    """FedWCA's family: the source client 0, the target clients 1..K (module docstring)."""

    family = "fedwca"
    recipe = "fedwca"
    Params = FedWCAParams
    mode: ClassVar[str] = ""  # source_only | local | fedavg | fedwca

    @classmethod
    def resolve(cls, cfg, defaults: Mapping[str, Any]) -> dict[str, Any]:
        d = DATASET_DEFAULTS.get(cfg.dataset, {})
        fill: dict[str, Any] = {"num_sources": 1} if cfg.num_sources is None else {}
        if cfg.partition is None:
            fill["partition"] = "domain_clients"
        if cfg.warmup_rounds is None:
            fill["warmup_rounds"] = 0
        if cfg.shuffle is None:
            fill["shuffle"] = True
        if cfg.drop_last is None:
            fill["drop_last"] = False
        for name in ("model", "lr_source", "lr_target", "batch_source", "batch_target"):
            if getattr(cfg, name) is None and name in d:
                fill[name] = d[name]
        if cfg.model is None and cfg.model_weights is None and "model_weights" in d:
            fill["model_weights"] = d["model_weights"]
        return fill

    @classmethod
    def param_defaults(cls, cfg) -> dict[str, Any]:
        out = dict(DATASET_DEFAULTS.get(cfg.dataset, {}).get("params", {}))
        source = tuple(cfg.source_envs or (0,))
        if (cfg.dataset, source) in SOURCE_TEMP_A:  # Table 9's per-source exceptions
            out["temp_a"] = SOURCE_TEMP_A[(cfg.dataset, source)]
        return out

    @classmethod
    def uses(cls, cfg) -> dict[str, bool]:
        return {"lr_source": True, "batch_source": True}

    @classmethod
    def planned_rounds(cls, cfg) -> int:
        return 1 if cls.mode == "source_only" else 1 + cfg.rounds

    @classmethod
    def num_clients(cls, cfg) -> int:
        from fda_ray.data import count_environments

        return 1 + cfg.clients_per_domain * (count_environments(cfg.dataset, cfg.data_dir) - 1)

    def __init__(self, cfg, setting, layout, model=None) -> None:
        super().__init__(cfg, setting, layout, model)
        from fda_ray.train.models import SHOT_MODELS

        if cfg.partition != "domain_clients":
            raise ValueError(f"partition={cfg.partition!r} is invalid for method {self.name}: FedWCA's methods need "
                             "partition 'domain_clients' (one source domain, clients of the other domains)")
        if model is None or not hasattr(model, "features") or not hasattr(model, "classifier"):
            raise ValueError(f"model={cfg.model!r} is invalid for method {self.name}: it needs SHOT's bottleneck and "
                             f"weight-normalised classifier: {', '.join(SHOT_MODELS)}")
        if cfg.noise:
            raise ValueError(f"noise={cfg.noise!r} is invalid for method {self.name}: FedWCA's clients read their "
                             "domains' images as they are (0)")
        if cfg.num_sources != 1:
            raise ValueError(f"num_sources={cfg.num_sources} is invalid for method {self.name}: FedWCA has one "
                             "source (the server's pre-trained model)")
        p = self.params
        if p.revision_interval > 1 and (p.weighting != "wca" or self.mode != "fedwca"):
            raise ValueError(f"fedwca.revision_interval={p.revision_interval} is invalid with weighting "
                             f"{p.weighting!r}: the revised FedWCA mixes FedWCA's (wca) weights")
        self.k = len(setting.client_parts)
        self.cls_mask, self.first_mask = part_masks(layout)
        self.sizes = torch.tensor([len(tr[1]) for tr, _, _ in setting.client_parts], dtype=torch.float64)  # n_k

    def views(self):
        views = [{"train": self.setting.sources[0]}]
        views += [{"train": tr, "val": va, "test": te} for tr, va, te in self.setting.client_parts]
        return views

    # ---------------------------------------------------------------- tasks

    def _h(self, role: str) -> dict[str, Any]:
        cfg, p = self.cfg, self.params
        h = {"role": role, **p.to_dict()}
        if role == "pretrain":
            h.update(lr=cfg.lr_source, batch=cfg.batch_source, epochs=p.source_epochs,
                     cache_key={"dataset": cfg.dataset, "data_dir": cfg.data_dir, "source_envs": list(cfg.source_envs),
                                "samples_per_client": cfg.samples_per_client, "seed": cfg.seed, "model": cfg.model,
                                "model_weights": cfg.model_weights, "epochs": p.source_epochs, "lr": cfg.lr_source,
                                "batch": cfg.batch_source, "momentum": p.momentum, "weight_decay": p.weight_decay,
                                "label_smoothing": p.label_smoothing, "threads": cfg.threads,
                                "data_augmentation": cfg.data_augmentation, "device": torch.device(cfg.device).type})
        else:
            h.update(lr=cfg.lr_target, batch=cfg.batch_target, epochs=p.local_epochs)
        return h

    def _full_round(self, a: int) -> bool:
        """Whether adaptation round a >= 1 is one where the clients compute alpha and beta (always, unless revised)."""
        return (a - 1) % self.params.revision_interval == 0

    def plan_round(self, r: int, state: ServerState) -> Round | None:
        if r == 0:
            return Round("source", (ClientTask(0, self.recipe, 0, self._h("pretrain"), inputs=("global",), purpose="source"),))
        if self.mode == "source_only" or r > self.cfg.rounds:
            return None
        clients = range(1, self.k + 1)
        a = r - 1  # FedWCA's round index
        if a == 0 or self.mode in ("local", "fedavg"):
            h = {**self._h("shot"), "local": self.mode == "local"}
            h["start"] = "global" if self.mode == "fedavg" and a > 0 else "source"
            inputs = () if self.mode == "local" and a > 0 else (h["start"],)
            return Round("adapt", tuple(ClientTask(k, self.recipe, r, h, inputs=inputs) for k in clients))
        c = int(state["num_clusters"])
        tasks = []
        for k in clients:
            own = int(state["assign"][k - 1])
            h = {**self._h("wca"), "clusters": c, "own_cluster": own, "own": f"cluster{own}"}
            w = self.params.weighting
            names = [f"cluster{own}"]
            if not self._full_round(a):
                h["init"] = f"init{k}"
                names.append(h["init"])
            elif w == "wca":
                names += [f"soft{j}" for j in range(c)]
            elif w != "one_hot":
                names += [f"cluster{j}" for j in range(c)]
            tasks.append(ClientTask(k, self.recipe, r, h, inputs=tuple(names)))
        return Round("adapt", tuple(tasks))

    # ---------------------------------------------------------------- aggregation

    def _average(self, weights: torch.Tensor, members: torch.Tensor) -> torch.Tensor:
        """The n_k-weighted average (M,) of the rows `members` (client positions 0..K-1) of weights (K, M)."""
        w = self.sizes[members] / self.sizes[members].sum()
        return (w.to(weights.device, torch.float64).unsqueeze(1) * weights[members].double()).sum(0).float()

    def _fix_classifier(self, flat: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        """g stays g_S exactly (an average of equal values is not always equal in float arithmetic)."""
        out = flat.clone()
        m = self.cls_mask.to(flat.device)
        out[m] = source[m]
        return out

    def aggregate(self, r: int, state: ServerState, results: Mapping[int, ClientResult]
                  ) -> tuple[ServerState, dict[str, Any]]:
        state = dict(state)
        if r == 0:
            w = results[0].tensors["weights"]
            _finite(w, "the source model")
            state["source"] = w
            return state, {"source_steps": results[0].scalars["num_steps"], "source_loss": results[0].scalars["loss"]}
        metrics: dict[str, Any] = {"loss_train": float(np.mean([res.scalars["loss"] for res in results.values()]))}
        if self.mode == "local":
            return state, metrics
        weights = torch.stack([results[k].tensors["weights"] for k in range(1, self.k + 1)])  # (K, M)
        _finite(weights, "a client's model")
        src = state["source"]
        if self.mode == "fedavg":
            state["global"] = self._fix_classifier(self._average(weights, torch.arange(self.k)), src)
            return state, metrics
        a = r - 1
        if a == 0:  # the one-time clustering (FedWCA section 4.1) on the first layers' parameters
            assign = torch.from_numpy(first_partition(weights[:, self.first_mask.to(weights.device)].cpu().numpy()))
            state["assign"] = assign
            state["num_clusters"] = torch.tensor(int(assign.max()) + 1)
        assign, c = state["assign"], int(state["num_clusters"])
        clusters = [self._fix_classifier(self._average(weights, (assign == j).nonzero().flatten()), src)
                    for j in range(c)]
        for j, f in enumerate(clusters):
            state[f"cluster{j}"] = f
        metrics.update(clusters=assign.tolist(), num_clusters=c, **self._purity(assign))
        if self.params.weighting == "wca":
            if a == 0:  # f~_c = f_c until the clients have sent alpha and beta
                mix_a, mix_b = torch.eye(c, dtype=torch.float64), torch.tensor([[1.0, 0.0]] * c, dtype=torch.float64)
            elif self._full_round(a):
                alpha = torch.stack([results[k].tensors["alpha"] for k in range(1, self.k + 1)])  # (K, C)
                beta = torch.stack([results[k].tensors["beta"] for k in range(1, self.k + 1)])  # (K, 2)
                mix_a, mix_b = server_mixing(alpha, beta, assign, c, self.params.cross_cluster_norm)
                state["alpha"], state["beta"] = alpha, beta
                metrics.update(alpha=alpha.tolist(), beta=beta.tolist())
            else:
                mix_a, mix_b = state["mix_a"], state["mix_b"]
            state["mix_a"], state["mix_b"] = mix_a, mix_b
            soft = soft_cluster_models(torch.stack(clusters), mix_a.to(src.device), mix_b.to(src.device))  # (C, M)
            for j in range(c):
                state[f"soft{j}"] = self._fix_classifier(soft[j], src)
            if a >= 1 and not self._full_round(a + 1):  # the revised FedWCA: the server mixes next round's f_init
                for k in range(1, self.k + 1):
                    v = init_weights(state["alpha"][k - 1], state["beta"][k - 1], int(assign[k - 1]), mix_a, mix_b)
                    state[f"init{k}"] = self._fix_classifier(_mix(clusters, v), src)
        elif a >= 1:
            if any("alpha" in res.tensors for res in results.values()):
                metrics["alpha"] = [results[k].tensors["alpha"].tolist() for k in range(1, self.k + 1)]
            if any("beta" in res.tensors for res in results.values()):
                metrics["beta"] = [results[k].tensors["beta"].tolist() for k in range(1, self.k + 1)]
        if a >= 1:
            for key in ("matched_share", "prototype_guard", "unmixed"):
                vals = [res.scalars[key] for res in results.values() if key in res.scalars]
                if vals:
                    metrics[key] = float(np.mean(vals)) if key == "matched_share" else float(np.sum(vals))
        return state, metrics

    def _purity(self, assign: torch.Tensor) -> dict[str, Any]:
        """How the clusters match the clients' domains: purity (the share of clients whose cluster's most common
        domain is their own) and whether the partition is exactly the domains'."""
        domains = np.array(self.setting.client_domains)
        a = assign.numpy()
        hits = sum(np.bincount(domains[a == c]).max() for c in np.unique(a))
        same = {frozenset(np.flatnonzero(a == c)) for c in np.unique(a)} == \
            {frozenset(np.flatnonzero(domains == d)) for d in np.unique(domains)}
        return {"cluster_purity": hits / len(a), "clusters_are_domains": bool(same)}  # loop.plain makes rows plain

    # ---------------------------------------------------------------- evaluation

    def client_models(self, r: int, state: ServerState, evaluator: Evaluator) -> list[torch.Tensor]:
        """The evaluated model (M,) of every target client, in order."""
        if r == 0 or self.mode == "source_only":
            return [state["source"]] * self.k
        if self.mode == "fedavg":
            return [state["global"]] * self.k
        if self.mode == "local":
            return [evaluator.client_state(k)["model"].to(state["source"].device) for k in range(1, self.k + 1)]
        return [state[f"cluster{int(c)}"] for c in state["assign"]]

    def evaluate(self, r: int, state: ServerState, evaluator: Evaluator) -> dict[str, Any]:
        models = self.client_models(r, state, evaluator)
        row: dict[str, Any] = {}
        for split, prefix in ((2, ""), (1, "val_")):
            accs, losses = [], []
            for (parts, m) in zip(self.setting.client_parts, models):
                x, y = parts[split]
                met = evaluate_metrics(evaluator.model, evaluator.layout, m, x, y, noise=0.0, gen=None)
                accs.append(met["accuracy"])
                losses.append(met["loss"])
            row[f"{prefix}accuracy"] = float(np.mean(accs))
            row[f"{prefix}loss"] = float(np.mean(losses))
            if not prefix:
                row["client_accuracy"] = accs
                domains = np.array(self.setting.client_domains)
                row["domain_accuracy"] = [float(np.mean(np.array(accs)[domains == d])) for d in np.unique(domains)]
        return row

    def final_weights(self, state: ServerState) -> torch.Tensor:
        """FedAvg's global model; otherwise the source model (the personalised cluster models and Local's client
        models are the outputs, in the state and the clients' states; one vector cannot hold them)."""
        if self.mode == "fedavg" and "global" in state:
            return state["global"]
        return state.get("source", state["global"])

    def init_state(self, initial: torch.Tensor) -> ServerState:
        return {"global": initial.clone()}


def _finite(t: torch.Tensor, what: str) -> None:
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{what} has non-finite weights (a diverged client); try a lower learning rate")


class FedWCA(_Base):
    name = "fedwca"
    mode = "fedwca"


class ShotSourceOnly(_Base):
    name = "shot_source_only"
    mode = "source_only"


class ShotLocal(_Base):
    name = "shot_local"
    mode = "local"


class ShotFedAvg(_Base):
    name = "shot_fedavg"
    mode = "fedavg"


FAMILY = (FedWCA, ShotSourceOnly, ShotLocal, ShotFedAvg)
