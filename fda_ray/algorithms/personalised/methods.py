"""The personalised-FL baselines of Auto-weighted FDA (Table 1 and Table 5; docs/methods.md), on the contract.

Setting (Auto-weighted FDA App. C.2, after omarfoq/knn-per): the N sources and the target are all clients; one local epoch
a round with a fresh Adam, the sources at (lr_source, batch_source), the target at (lr_target, batch_target);
no warm-up; FedAvg weights p_k = n_k / sum n over all N + 1 clients; the reported model is the target's.

  fedavg_all  every client trains w one epoch; w = sum_k p_k w_k; evaluate w. (Auto-weighted FDA's "FedAvg" row: the
              target is a client, unlike source_only.)
  ditto       w as FedAvg; the target's personal v: one epoch on f_T(v) + (lambda/2) |v - w|^2, w the
              received global held fixed (Li et al. 2021, Alg. 1); evaluate v_T.
  fedrep      body phi (all but the last linear layer) + head h (the last linear layer). Each client keeps
              its head h_k: with phi frozen it trains h_k for head_epochs epochs, then phi one epoch with h_k
              frozen, and sends phi_k; phi = sum_k p_k phi_k. Evaluate (phi, h_T) (Collins et al. 2021).
  apfl        w as FedAvg; the target's local v: on every batch, v <- v - eta grad_v f(alpha v + (1 - alpha) w)
              at the batch's w, then w <- w - eta grad f(w); alpha fixed (Auto-weighted FDA uses 0.5, not APFL's adaptive
              alpha). Evaluate alpha v_T + (1 - alpha) w (Deng et al. 2020).
  knn_per     FedAvg (fedavg_all, same seeds, same rows), then the final model's embedding phi(x) (the input
              of its last linear layer) and a datastore of a `capacity` share of the target's labelled samples:
              p = lambda p_kNN + (1 - lambda) p_base, p_kNN(y|x) = sum_{j in kNN(x)} s_j [y_j = y] / sum_j s_j,
              s_j = exp(-d_j / (D scale)), d_j squared L2, D the embedding's dimension (Marfoq et al. 2022;
              knn-per's gather_knn_outputs). Reported over the grid lambda, capacity in {0, step, ..., 1}:
              selection "test" as the paper does (the best on the test set: optimistic) or "validation" (a
              held-out share of the target's labelled samples picks (lambda, capacity); the FedAvg rounds do
              not train on it). Both runs also log the test-selected accuracy of their own base model.

Personal models (Ditto's v, APFL's v) are trained on the target only: no source's personal model reaches the
global model or the reported one, so training them would change no number. FedRep's heads are trained on
every client (each client's body update depends on its own head). Personal tensors live in the client's
state, where it runs, and survive actor restarts and checkpoints (fda_ray.runtime.executors).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from fda_ray.algorithms.aggregation import fedavg
from fda_ray.algorithms.base import Algorithm, Params, param
from fda_ray.core.contract import ClientResult, ClientTask, Round, ServerState
from fda_ray.train.client import RECIPES, Client, loss_fn
from fda_ray.train.evaluation import Evaluator, eval_chunk
from fda_ray.core.seeding import generator, np_rng
from fda_ray.data.base import Pair, add_noise


def last_linear(model: nn.Module) -> str:
    """The module name of the model's last linear layer (FedRep's head; kNN-Per embeds its input): an nn.Linear or
    a weight-normalised one (the SHOT models' classifier, WeightNormLinear: not an nn.Linear, so their head was the
    bottleneck's Linear inside the body, and kNN-Per embedded the backbone's output)."""
    from fda_ray.train.models import WeightNormLinear

    names = [n for n, m in model.named_modules() if isinstance(m, (nn.Linear, WeightNormLinear))]
    if not names:
        raise ValueError(f"model {type(model).__name__} has no linear layer: FedRep and kNN-Per need a linear head")
    return names[-1]


def head_mask(model: nn.Module, layout) -> torch.Tensor:
    """(M,) bool: the flat coordinates of the last linear layer's weight and bias."""
    head = last_linear(model)
    mask = torch.zeros(layout.size, dtype=torch.bool)
    for i, name in enumerate(layout.names):
        if name.rsplit(".", 1)[0] == head:
            mask[int(layout.offsets[i]) : int(layout.offsets[i + 1])] = True
    return mask


# ---------------------------------------------------------------- the family's parameters

class _Base(Algorithm):
    """FedAvg over all clients; subclasses set the recipe and what is evaluated."""

    family = "personalised"
    recipe = "epoch"

    @classmethod
    def resolve(cls, cfg, defaults: Mapping[str, Any]) -> dict[str, Any]:
        return {"warmup_rounds": 0} if cfg.warmup_rounds is None else {}  # "No warm-up" (docs/methods.md)

    @classmethod
    def uses(cls, cfg) -> dict[str, bool]:
        return {"lr_source": True, "batch_source": True}

    # a single-head classifier: FedRep's head and kNN-Per's embedding are its last linear layer
    needs_classifier: bool = False

    def __init__(self, cfg, setting, layout, model=None) -> None:
        super().__init__(cfg, setting, layout, model)
        if self.needs_classifier and (setting.task != "classification" or setting.aux_tasks):
            raise ValueError(f"method={self.name!r} is invalid for dataset {cfg.dataset!r}: it needs a single-head "
                             f"classification task (this one is {setting.task}"
                             f"{' with auxiliary heads' if setting.aux_tasks else ''})")
        if cfg.warmup_rounds:
            raise ValueError(f"warmup_rounds={cfg.warmup_rounds} is invalid for method {self.name}: the "
                             "personalised baselines have no warm-up (0)")
        self.setup()
        counts = [len(x) for x, _ in self.train_views()]
        c = torch.tensor(counts, dtype=torch.float64)
        self.weights = c / c.sum()  # (N + 1,) p_k over every client, the target last

    def setup(self) -> None:
        """What a subclass derives from its parameters before the clients' views are read."""

    def train_views(self) -> list[Pair]:
        return [v["train"] for v in self.views()]

    def hparams(self, client: int) -> dict[str, Any]:
        cfg = self.cfg
        if client == self.target:
            return {"lr": cfg.lr_target, "batch": cfg.batch_target}
        return {"lr": cfg.lr_source, "batch": cfg.batch_source}

    def plan_round(self, r: int, state: ServerState) -> Round | None:
        if r >= self.cfg.rounds:
            return None
        return Round("main", tuple(ClientTask(k, self.recipe, r, self.hparams(k)) for k in range(self.target + 1)))

    def aggregate(self, r: int, state: ServerState, results: Mapping[int, ClientResult]
                  ) -> tuple[ServerState, dict[str, Any]]:
        deltas = torch.stack([results[k].tensors["delta"] for k in range(self.target + 1)])  # (N + 1, M)
        update = fedavg(deltas, weights=self.weights, impl=self.cfg.aggregation_impl)  # sum_k p_k (w_k - w)
        return {**state, "global": state["global"] + update}, \
            {"train_loss_target": results[self.target].scalars["loss"]}


class FedAvgAll(_Base):
    name = "fedavg_all"


# ---------------------------------------------------------------- Ditto

@dataclass(frozen=True)
class DittoParams(Params):
    family = "ditto"
    lam: float = param(1.0, "lambda: the weight of the personal model's proximal term (lambda/2)|v - w|^2; "
                            "Auto-weighted FDA uses 1", low=0.0)


class Ditto(_Base):
    name, family, Params, recipe = "ditto", "ditto", DittoParams, "ditto"

    def hparams(self, client: int) -> dict[str, Any]:
        return {**super().hparams(client), "lam": self.params.lam, "personal": client == self.target}

    def evaluate(self, r: int, state: ServerState, evaluator: Evaluator) -> dict[str, Any]:
        return evaluator.target(evaluator.client_state(self.target)["personal"], r)


@RECIPES.register("ditto")
def ditto_recipe(client: Client, task: ClientTask, inputs: Mapping[str, torch.Tensor]) -> ClientResult:
    """w_k: one epoch from w (the "epoch" recipe); then, on a client that keeps a personal model, v: one
    epoch from its last v (w at first) on f(v) + (lambda/2) |v - w|^2, w the received global."""
    h = task.hparams
    result = RECIPES.get("epoch")(client, task, inputs)
    if h["personal"]:
        w = inputs["global"].to(client.device)  # (M,)
        v = client.state.get("personal")
        client.layout.load_into(client.model, w if v is None else v.to(client.device))
        anchor = {n: w[client.layout.layer_of(n)].view_as(p) for n, p in client.model.named_parameters()}
        lam = float(h["lam"])

        def prox() -> torch.Tensor:
            return 0.5 * lam * sum(((p - anchor[n]) ** 2).sum() for n, p in client.model.named_parameters())

        opt = client.optimizer_for(h["lr"])
        _, loss, _ = client.epoch(opt, h["batch"], task.round, "personal", False, task.data, penalty=prox)
        client.state["personal"] = client.layout.flatten_model(client.model).cpu()
        result.scalars["loss_personal"] = loss
    return result


# ---------------------------------------------------------------- FedRep

@dataclass(frozen=True)
class FedRepParams(Params):
    family = "fedrep"
    head_epochs: int = param(10, "epochs of the head (body frozen) before the body's epochs; knn-per's "
                                 "LOCAL_HEAD_UPDATES = 10", low=1, integer=True)
    body_epochs: int = param(1, "epochs of the body (head frozen) after the head's; 1 is Auto-weighted FDA's one "
                                "local epoch, lgcollins/FedRep's scripts mostly run 5 (--local_rep_ep)",
                             low=1, integer=True)


class FedRep(_Base):
    name, family, Params, recipe = "fedrep", "fedrep", FedRepParams, "fedrep"
    needs_classifier = True

    def __init__(self, cfg, setting, layout, model=None) -> None:
        super().__init__(cfg, setting, layout, model)
        self.head = head_mask(model, layout)  # (M,) bool

    def hparams(self, client: int) -> dict[str, Any]:
        return {**super().hparams(client), "head_epochs": self.params.head_epochs,
                "body_epochs": self.params.body_epochs}

    def evaluate(self, r: int, state: ServerState, evaluator: Evaluator) -> dict[str, Any]:
        w = state["global"].clone()
        w[self.head] = evaluator.client_state(self.target)["head"]
        return evaluator.target(w, r)


@RECIPES.register("fedrep")
def fedrep_recipe(client: Client, task: ClientTask, inputs: Mapping[str, torch.Tensor]) -> ClientResult:
    """The client's head (its own, or the received one at first) for head_epochs epochs with the body frozen,
    then the body body_epochs epochs with the head frozen (one optimiser over them, as one loop of lgcollins/FedRep's
    local update); sends the body's delta (the head's coordinates 0). The steps are the body's; the loss its last
    epoch's."""
    h = task.hparams
    model, layout = client.model, client.layout
    mask = head_mask(model, layout).to(client.device)  # (M,)
    w = inputs["global"].to(client.device)  # (M,)
    start = w.clone()
    if "head" in client.state:
        start[mask] = client.state["head"].to(client.device)
    layout.load_into(model, start)
    head = last_linear(model)
    params = dict(model.named_parameters())

    def train_only(head_part: bool) -> None:
        for n, p in params.items():
            p.requires_grad_((n.rsplit(".", 1)[0] == head) == head_part)

    try:
        train_only(head_part=True)
        opt = client.optimizer_for(h["lr"])  # params without a gradient are left alone by Adam
        for e in range(int(h["head_epochs"])):
            client.epoch(opt, h["batch"], task.round, f"head{e}", False, task.data)
        train_only(head_part=False)
        opt = client.optimizer_for(h["lr"])
        steps = 0
        for e in range(int(h.get("body_epochs", 1))):  # (the first epoch's purpose as before: the same data order)
            n, loss, _ = client.epoch(opt, h["batch"], task.round, task.purpose if e == 0 else f"body{e}", False,
                                      task.data)
            steps += n
    finally:
        for p in params.values():
            p.requires_grad_(True)
    new = layout.flatten_model(model)  # (M,)
    client.state["head"] = new[mask].cpu()
    delta = torch.where(mask, torch.zeros_like(new), new - w)  # the body's delta only
    return client.finish(task, {"delta": delta.cpu()}, steps, loss)


# ---------------------------------------------------------------- APFL

@dataclass(frozen=True)
class APFLParams(Params):
    family = "apfl"
    alpha: float = param(0.5, "the mixing weight of the local model: alpha v + (1 - alpha) w; Auto-weighted FDA fixes 0.5",
                         low=0.0, high=1.0)


class APFL(_Base):
    name, family, Params, recipe = "apfl", "apfl", APFLParams, "apfl"

    def hparams(self, client: int) -> dict[str, Any]:
        return {**super().hparams(client), "alpha": self.params.alpha, "personal": client == self.target}

    def evaluate(self, r: int, state: ServerState, evaluator: Evaluator) -> dict[str, Any]:
        a = self.params.alpha
        v = evaluator.client_state(self.target)["personal"]
        return evaluator.target(a * v + (1 - a) * state["global"], r)


@RECIPES.register("apfl")
def apfl_recipe(client: Client, task: ClientTask, inputs: Mapping[str, torch.Tensor]) -> ClientResult:
    """One epoch of w from the received global; on a client with a local model, every batch first steps v
    on the loss at alpha v + (1 - alpha) w (w as it is before its own step), with an Adam of its own."""
    h = task.hparams
    if not h["personal"]:
        return RECIPES.get("epoch")(client, task, inputs)
    model, layout = client.model, client.layout
    w0 = inputs["global"].to(client.device)  # (M,)
    layout.load_into(model, w0)
    prev = client.state.get("personal")
    v_flat = (w0 if prev is None else prev.to(client.device)).clone()
    v = {n: v_flat[layout.layer_of(n)].view_as(p).clone().requires_grad_(True) for n, p in model.named_parameters()}
    # v's own buffers (BatchNorm's running statistics): its forward updates them, not w's, as FedTorch's two modules
    names = set(layout.names)
    v_bufs = {n: v_flat[layout.layer_of(n)].view_as(b).clone() for n, b in model.named_buffers() if n in names}
    opt_w = client.optimizer_for(h["lr"])
    opt_v = torch.optim.Adam(list(v.values()), lr=h["lr"])  # fresh every round, as w's
    alpha = float(h["alpha"])
    steps, total = 0, 0.0
    model.train()
    for xb, yb in client.batches(h["batch"], task.round, task.purpose, task.data):
        mixed = {n: alpha * v[n] + (1 - alpha) * p.detach() for n, p in model.named_parameters()}
        loss_v = loss_fn(client.task, functional_call(model, {**mixed, **v_bufs}, (xb,)), yb, client.aux_tasks)
        opt_v.zero_grad(set_to_none=True)
        loss_v.backward()
        opt_v.step()
        loss = loss_fn(client.task, model(xb), yb, client.aux_tasks)
        opt_w.zero_grad(set_to_none=True)
        loss.backward()
        opt_w.step()
        total += float(loss.detach())
        steps += 1
    loss = total / max(steps, 1)
    new = layout.flatten_model(model)  # (M,)
    v_out = v_flat.clone()
    for n, t in {**v, **v_bufs}.items():
        v_out[layout.layer_of(n)] = t.detach().reshape(-1)
    client.state["personal"] = v_out.cpu()
    return client.finish(task, {"delta": (new - w0).cpu()}, steps, loss)


# ---------------------------------------------------------------- kNN-Per

def capacity_sizes(steps: int, n: int) -> list[int]:
    """The datastore's size at each capacity i / steps (i = 0..steps) of n entries: floor(i n / steps), as knn-per's
    client.py takes int(capacity * n_train_samples), in integers (capacity * n can land a hair below a whole)."""
    return [i * n // steps for i in range(steps + 1)]


@dataclass(frozen=True)
class KNNPerParams(Params):
    family = "knn_per"
    k: int = param(10, "neighbours; Auto-weighted FDA uses 10", low=1, integer=True)
    scale: float = param(1.0, "distance scale of s_j = exp(-d_j / (D scale)); knn-per's default 1", low=1e-6)
    grid_step: float = param(0.1, "resolution of the lambda and capacity grids over [0, 1] (1 / an integer)",
                             low=0.01, high=1.0)
    selection: str = param("test", "how (lambda, capacity) is chosen: test (the paper: the best on the test set, "
                                   "optimistic) or validation (on a held-out share of the target's labelled "
                                   "samples)", choices=("test", "validation"))
    val_share: float = param(0.2, "selection=validation: the share of the target's labelled samples held out",
                             low=0.01, high=0.9)

    def __post_init__(self) -> None:
        super().__post_init__()
        if abs(1 / self.grid_step - round(1 / self.grid_step)) > 1e-9:
            raise ValueError(f"knn_per.grid_step={self.grid_step!r} is invalid: 1 / an integer (0.1, 0.05, ...)")


def knn_probs(query: torch.Tensor, store: torch.Tensor, store_y: torch.Tensor, k: int, num_classes: int,
              scale: float = 1.0) -> torch.Tensor:
    """p_kNN (Q, C): for each query embedding (Q, D), its k nearest store entries (S, D) by squared L2
    distance d_j, weighted s_j = exp(-d_j / (D scale)); p(y) = sum_j s_j [y_j = y] / sum_j s_j.
    k is capped at S. Computed in float64 (the weights of far neighbours underflow gracefully)."""
    q, s = query.double(), store.double()
    d = torch.cdist(q, s).pow(2)  # (Q, S)
    kk = min(k, s.shape[0])
    dist, idx = d.topk(kk, dim=1, largest=False)  # (Q, kk)
    # exp(-(d - d_min) / (D scale)): the same ratios s_j / sum s_j, without underflow to 0 / 0
    w = torch.exp(-(dist - dist[:, :1]) / (s.shape[1] * scale))  # (Q, kk)
    p = torch.zeros(q.shape[0], num_classes, dtype=torch.float64)
    p.scatter_add_(1, store_y[idx], w)
    return p / w.sum(1, keepdim=True)


def interpolate(p_knn: torch.Tensor, p_base: torch.Tensor, lam: float) -> torch.Tensor:
    """p = lambda p_kNN + (1 - lambda) p_base (Q, C)."""
    return lam * p_knn + (1 - lam) * p_base


class KNNPer(_Base):
    name, family, Params = "knn_per", "knn_per", KNNPerParams
    needs_classifier = True

    @classmethod
    def planned_rounds(cls, cfg) -> int:
        return cfg.rounds + 1  # and the kNN evaluation

    def setup(self) -> None:
        """selection=validation: a seeded share of the target's labelled samples is held out (not trained on)."""
        p, cfg = self.params, self.cfg
        x, y = self.setting.target_train
        if p.selection == "test":
            self.labelled, self.validation = (x, y), None
            return
        n = len(x)
        k = max(1, math.ceil(p.val_share * n))
        if k >= n:
            raise ValueError(f"knn_per.val_share={p.val_share} is invalid: it leaves none of the target's {n} "
                             "labelled samples to train on")
        perm = torch.from_numpy(np_rng(cfg.seed, purpose="knn/validation").permutation(n).astype(np.int64))
        self.validation = (x[perm[:k]], y[perm[:k]])
        self.labelled = (x[perm[k:]], y[perm[k:]])

    def views(self):
        views = [{"train": s} for s in self.setting.sources]
        views.append({"train": self.labelled})
        return views

    def plan_round(self, r: int, state: ServerState) -> Round | None:
        if r == self.cfg.rounds:
            return Round("knn", ())  # no training: the kNN evaluation of the final FedAvg model
        return super().plan_round(r, state)

    def aggregate(self, r, state, results):
        if r == self.cfg.rounds:
            return state, {}
        return super().aggregate(r, state, results)

    def evaluate(self, r: int, state: ServerState, evaluator: Evaluator) -> dict[str, Any]:
        if r < self.cfg.rounds:
            return evaluator.target(state["global"], r)
        return self.knn_row(state["global"], r, evaluator)

    # -- the kNN evaluation

    def _embed(self, evaluator: Evaluator, flat: torch.Tensor, x: torch.Tensor, gen: torch.Generator | None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(embeddings (n, D), base probabilities (n, C)) of the weights `flat` on x with fresh target noise."""
        model = evaluator.model
        evaluator.layout.load_into(model, flat.to(next(model.parameters()).device))
        model.eval()
        seen: list[torch.Tensor] = []
        hook = dict(model.named_modules())[last_linear(model)].register_forward_hook(
            lambda m, inp, out: seen.append(inp[0].detach()))
        embs, probs = [], []
        try:
            with torch.no_grad():
                chunk = eval_chunk(x)
                for lo in range(0, len(x), chunk):
                    xb = add_noise(x[lo : lo + chunk].to(next(model.parameters()).device), self.setting.noise, gen)
                    probs.append(torch.softmax(model(xb).double(), 1).cpu())
                    embs.append(seen.pop().reshape(len(xb), -1).cpu())
        finally:
            hook.remove()
        return torch.cat(embs), torch.cat(probs)

    def grid(self, q_emb, q_base, q_y, store_emb, store_y) -> torch.Tensor:
        """(len(capacities), len(lambdas)) accuracies; the datastore at capacity c = i / steps is the first
        floor(c S) entries (knn-per's client.py: int(capacity * n_train_samples)) of one seeded permutation, so
        a larger capacity holds the smaller's entries (knn-per draws each capacity's sample afresh)."""
        p, c = self.params, self.setting.num_outputs
        steps = round(1 / p.grid_step)
        values = [i / steps for i in range(steps + 1)]
        acc = torch.zeros(len(values), len(values), dtype=torch.float64)
        for i, size in enumerate(capacity_sizes(steps, len(store_emb))):
            p_knn = knn_probs(q_emb, store_emb[:size], store_y[:size], p.k, c, p.scale) if size else None
            for j, lam in enumerate(values):
                probs = q_base if p_knn is None else interpolate(p_knn, q_base, lam)
                acc[i, j] = (probs.argmax(1) == q_y).double().mean()
        return acc

    def knn_row(self, flat: torch.Tensor, r: int, evaluator: Evaluator) -> dict[str, Any]:
        cfg, p = self.cfg, self.params
        t = self.target
        sx, sy = self.labelled
        perm = torch.randperm(len(sx), generator=generator(cfg.seed, r, t, "knn/capacity"))
        store_emb, _ = self._embed(evaluator, flat, sx[perm], generator(cfg.seed, r, t, "knn/store"))
        store_y = sy[perm].cpu()
        tx, ty = self.setting.target_test
        # The test noise of round r's evaluation (fda_ray.train.evaluation): accuracy_base (lambda = 0 or
        # capacity = 0) is what Evaluator.target gives the same weights in this round.
        q_emb, q_base = self._embed(evaluator, flat, tx, generator(cfg.seed, r, t, "eval", device=cfg.device))
        test = self.grid(q_emb, q_base, ty.cpu(), store_emb, store_y)  # (caps, lambdas)
        steps = round(1 / p.grid_step)
        best_test = divmod(int(test.argmax()), test.shape[1])
        if self.validation is not None:
            vx, vy = self.validation
            v_emb, v_base = self._embed(evaluator, flat, vx, generator(cfg.seed, r, t, "knn/validation"))
            chosen = divmod(int(self.grid(v_emb, v_base, vy.cpu(), store_emb, store_y).argmax()), test.shape[1])
        else:
            chosen = best_test
        cap, lam = chosen[0] / steps, chosen[1] / steps
        size = capacity_sizes(steps, len(store_emb))[chosen[0]]
        p_knn = knn_probs(q_emb, store_emb[:size], store_y[:size], p.k, self.setting.num_outputs, p.scale) \
            if size else None
        probs = q_base if p_knn is None else interpolate(p_knn, q_base, lam)
        # Test NLL of the chosen mixture (p floored at 1e-12: a pure kNN can give a class probability 0)
        loss = float(-probs.gather(1, ty.cpu().view(-1, 1)).clamp_min(1e-12).log().mean())
        return {"accuracy": float(test[chosen]), "loss": loss, "knn_selection": p.selection, "knn_lambda": lam,
                "knn_capacity": cap, "accuracy_test_selected": float(test[best_test]),
                "accuracy_base": float(test[0, 0]), "knn_datastore": len(store_emb)}


FAMILY = (FedAvgAll, Ditto, FedRep, APFL, KNNPer)
