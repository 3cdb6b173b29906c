"""FSSDA: federated semi-supervised domain adaptation by knowledge distillation, and its baselines.

Roles (FSSDA Sec. III-A; data: partition domain_shards, fda_ray.runtime.partitions): K devices, each holding a shard of
every source domain and a shard of the target domain, a few of whose samples are labelled. Two global models of one
architecture, the source model W_s (one per source domain, W_s^j) and the target model W_t, from the same initial
weights. Per round r (Alg. 1-3):

    step 0  every device trains each W_s^j from W_s^j(r-1) for E epochs on its shard of domain j (cross-entropy);
            W_s^j(r) = (1/K) sum_k w_s^{j,k}                                             (Alg. 1 line 9)
    step 1  every device: y*^j_i = softmax(W_s^j(r)(x_i) / T) on its target shard, once        (Eq. 1)
            y_i = one-hot(label_i) if labelled, else the all-zero "fake label"
            E epochs from W_t(r-1) on  L_t = lambda_1 l(y_i, w_t(x_i)) + sum_j lambda_{j+1} l(y*^j_i, w_t(x_i))
            (Eq. 2 / Eq. 5), lambda by min-norm over the terms' gradients (Eq. 4; Frank-Wolfe with several
            sources, fda_ray.algorithms.fssda.minnorm), or fixed (lambda on the hard term, 1 - lambda spread over
            the soft ones);
            W_t(r) = (1/K) sum_k w_t^k                                                   (Alg. 1 line 15)
    the reported model: W_t on the target's unlabelled samples (the test set of domain_shards)

  fssda         the above: the parallel paradigm, two synchronisation points a round (soft_labels_from current);
                soft_labels_from previous: one step, the devices distil from W_s(r-1) (open point 5: "target updates can
                be appended to source updates")
  fssda_serial  Fig. 2's serial paradigm: serial_source_rounds rounds of source FL, then `rounds` rounds of
                target KD from the final, frozen W_s
  ssda_only     Table I's SSDAOnly: every device trains its own source model(s) on its shard and distils its own
                target model from them, no communication; the metric is the mean of the devices' target models'
                accuracies (open point 10: the same KD procedure, adaptive lambda)
  fl_only       Table I's FLOnly: FedAvg of target models trained on the labelled target samples only
                (cross-entropy; devices without a labelled sample sit the round out)

Layouts (`layout`): paper, the devices above (K = num_sources clients, each a source and a target role); fda,
fda-ray's usual one: the K source clients train W_s, one target client (index K) holding every device's target
shard distils W_t alone (the same samples, labelled ones included). The loss l (open point 1, docs/methods.md): mse,
the squared error between softmax(w_t(x)) and the label vector (GDSDA's, the only common loss under which fake
labels act), lambda per mini-batch; or ce, soft-target cross-entropy, lambda once per epoch on the whole local
data (open point 2: per batch it is 1 with a zero update on every batch without a label). The server average is
unweighted (Alg. 1) or weighted by the devices' sample counts. The local optimiser is the paper's SGD at lr 0.001
where no learning rate is set (Sec. IV-A; momentum 0.9, which the paper does not state), fresh every round; Adam is
an option (the FMNIST-5 grids use it: a simple CNN from scratch does not leave chance under SGD in 30 rounds).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import torch

from fda_ray.algorithms.aggregation import fedavg
from fda_ray.algorithms.base import Algorithm, Params, param
from fda_ray.core.contract import ClientResult, ClientTask, Round, ServerState
from fda_ray.train.client import RECIPES, Client
from fda_ray.data.base import UNLABELLED
from fda_ray.data.images import concat, take
from fda_ray.algorithms.fssda.distillation import LOSSES, hard_labels, label_loss, soft_labels
from fda_ray.train.evaluation import eval_chunk
from fda_ray.algorithms.fssda.minnorm import min_norm_weights

PAPER_LR = 1e-3  # FSSDA Sec. IV-A: "stochastic gradient descent with a learning rate of 0.001"


@dataclass(frozen=True)
class FSSDAParams(Params):
    family = "fssda"
    layout: str = param("paper", "paper: K devices, each a source and a target role; fda: K source clients and one "
                                 "target client holding every device's target shard", choices=("paper", "fda"))
    kd_temperature: float = param(2.0, "T of Eq. 1: the source model's soft labels softmax(W_s(x) / T) (the paper "
                                       "gives none)", low=1e-3)
    imitation: str = param("adaptive", "lambda: adaptive (Eq. 4 / Eq. 5 min-norm) or fixed (imitation_lambda)",
                           choices=("adaptive", "fixed"))
    imitation_lambda: float = param(0.5, "the fixed lambda: the hard labels' weight (Figs. 3-4: 0.1, 0.5, 0.9)",
                                    low=0.0, high=1.0)
    loss: str = param("mse", "l_t of Eq. 2: mse (squared error on probabilities; lambda per mini-batch) or ce "
                             "(cross-entropy; lambda once per epoch)", choices=LOSSES)
    soft_labels_from: str = param("current", "fssda: the soft labels come from this round's W_s (current, Alg. 1) "
                                             "or the last round's (previous: one synchronisation a round)",
                                  choices=("current", "previous"))
    serial_source_rounds: int = param(40, "fssda_serial: rounds of source FL before the target's KD rounds (the "
                                          "paper's text: 40)", low=1, integer=True)
    server_average: str = param("unweighted", "the server's average: unweighted (Alg. 1's 1/K) or weighted by the "
                                              "devices' sample counts", choices=("unweighted", "weighted"))
    optimizer: str = param("sgd", "local optimiser, fresh every round: sgd (the paper's, Sec. IV-A; lr 0.001 where "
                                  "unset) or adam (fda-ray's clients; the dataset's lr)", choices=("sgd", "adam"))
    sgd_momentum: float = param(0.9, "sgd's momentum (the paper states none)", low=0.0, high=0.999)
    local_epochs: int = param(1, "E: local epochs of each role a round", low=1, integer=True)


# ---------------------------------------------------------------- the local recipe

def _optimizer(client: Client, kind: str, lr: float, momentum: float) -> torch.optim.Optimizer:
    if kind == "sgd":
        return torch.optim.SGD(client.model.parameters(), lr=lr, momentum=momentum)
    return client.optimizer_for(lr)


def _supervised(client: Client, task: ClientTask, start: torch.Tensor, data: str, lr: float, batch: int,
                h: Mapping[str, Any], purpose: str) -> tuple[torch.Tensor, int, float]:
    """E = h["epochs"] epochs of cross-entropy on view `data` from `start` (M,): (new weights (M,), steps, mean
    loss)."""
    client.layout.load_into(client.model, start.to(client.device))
    opt = _optimizer(client, h["optimizer"], lr, float(h["sgd_momentum"]))
    steps, losses = 0, []
    for e in range(int(h["epochs"])):
        s, loss, _ = client.epoch(opt, batch, task.round, f"{purpose}/epoch{e}", False, data)
        steps += s
        losses.append(loss)
    return client.layout.flatten_model(client.model), steps, sum(losses) / len(losses)


@torch.no_grad()
def _teacher_labels(client: Client, weights: torch.Tensor, read, n: int, temperature: float) -> torch.Tensor:
    """Eq. 1 on the whole view: softmax(W_s(x) / T) (n, C), once a round, the source model in eval mode."""
    client.layout.load_into(client.model, weights.to(client.device))
    client.model.eval()
    x = client.view("target")[0]
    chunk = eval_chunk(x)
    return torch.cat([soft_labels(client.model(read(torch.arange(lo, min(lo + chunk, n), device=client.device))),
                                  temperature) for lo in range(0, n, chunk)])


def _flat_grad(loss: torch.Tensor, params: list[torch.Tensor], retain: bool) -> torch.Tensor:
    grads = torch.autograd.grad(loss, params, retain_graph=retain, allow_unused=True)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)])


def _set_grad(params: list[torch.Tensor], flat: torch.Tensor) -> None:
    o = 0
    for p in params:
        p.grad = flat[o : o + p.numel()].view_as(p).to(p.dtype)
        o += p.numel()


def _term_losses(logits: torch.Tensor, hard: torch.Tensor, soft: list[torch.Tensor], loss: str) -> list[torch.Tensor]:
    """[l(hard labels), l(soft labels of source 1), ...], each the batch mean."""
    return [label_loss(logits, hard, loss)] + [label_loss(logits, s, loss) for s in soft]


def _fixed_weights(lam: float, sources: int) -> torch.Tensor:
    """(S + 1,): lambda on the hard labels, 1 - lambda spread evenly over the S sources' soft labels."""
    return torch.tensor([lam] + [(1.0 - lam) / sources] * sources, dtype=torch.float64)


def _epoch_gradients(client: Client, read, y: torch.Tensor, soft: list[torch.Tensor], loss: str, classes: int,
                     params: list[torch.Tensor]) -> torch.Tensor:
    """(S + 1, M): the gradients of each term's mean over the whole local data (the ce mode's once-per-epoch
    lambda, Alg. 3 line 6), accumulated over chunks in the stored order."""
    n = len(y)
    total = torch.zeros(len(soft) + 1, sum(p.numel() for p in params), dtype=torch.float64, device=client.device)
    chunk = eval_chunk(client.view("target")[0])
    for lo in range(0, n, chunk):
        idx = torch.arange(lo, min(lo + chunk, n), device=client.device)
        yb = y[idx]
        hard = hard_labels(yb.clamp(min=0), yb != UNLABELLED, classes)
        terms = _term_losses(client.model(read(idx)), hard, [s[idx] for s in soft], loss)
        for u, t in enumerate(terms):
            total[u] += _flat_grad(t * (len(idx) / n), params, retain=u < len(terms) - 1).double()
    return total


def _distil(client: Client, task: ClientTask, start: torch.Tensor, teachers: list[torch.Tensor], h: Mapping[str, Any]
            ) -> tuple[torch.Tensor, int, float, torch.Tensor]:
    """The target role (Alg. 3) from `start` (M,) with the source models `teachers` [(M,)]: (new weights, steps,
    mean loss, the mean weights (S + 1,) of the terms over the updates: [lambda, lambda_2, ...])."""
    x, y = client.view("target")
    n, classes = len(y), int(h["classes"])
    purpose = f"{task.purpose}/target"
    read = client.reader(task.round, purpose + "/teacher", "target")
    soft = [_teacher_labels(client, w, read, n, float(h["temperature"])) for w in teachers]  # S x (n, C)
    client.layout.load_into(client.model, start.to(client.device))
    client.model.train()
    params = [p for p in client.model.parameters() if p.requires_grad]
    opt = _optimizer(client, h["optimizer"], h["lr_target"], float(h["sgd_momentum"]))
    adaptive, loss_kind = h["imitation"] == "adaptive", h["loss"]
    fixed = _fixed_weights(float(h["imitation_lambda"]), len(teachers))
    steps, loss_sum, weight_sum = 0, 0.0, torch.zeros(len(teachers) + 1, dtype=torch.float64)
    for e in range(int(h["epochs"])):
        if adaptive and loss_kind == "ce":  # once per epoch on the whole local data (open point 2)
            grads = _epoch_gradients(client, client.reader(task.round, f"{purpose}/epoch{e}/lambda", "target"), y,
                                     soft, loss_kind, classes, params)
            epoch_w = min_norm_weights(grads).cpu()
        read = client.reader(task.round, f"{purpose}/epoch{e}", "target")
        batches = client.batch_indices(h["batch_target"], task.round, f"{purpose}/epoch{e}", "target", drop_last=False)
        for idx in batches:
            yb = y[idx]
            hard = hard_labels(yb.clamp(min=0), yb != UNLABELLED, classes)  # fake all-zero rows where unlabelled
            terms = _term_losses(client.model(read(idx)), hard, [s[idx] for s in soft], loss_kind)
            opt.zero_grad(set_to_none=True)
            if adaptive and loss_kind == "mse":  # per mini-batch on the batch's term gradients (Eq. 4 / 5)
                grads = torch.stack([_flat_grad(t, params, retain=u < len(terms) - 1) for u, t in enumerate(terms)])
                w = min_norm_weights(grads).cpu()  # (S + 1,) on the simplex
                _set_grad(params, (w.to(grads.device, grads.dtype).unsqueeze(1) * grads).sum(0))
            else:
                w = epoch_w if adaptive else fixed
                sum(float(wu) * t for wu, t in zip(w, terms)).backward()
            opt.step()
            loss_sum += float(sum(float(wu) * float(t.detach()) for wu, t in zip(w, terms)))
            weight_sum += w
            steps += 1
    new = client.layout.flatten_model(client.model)
    return new, steps, loss_sum / max(steps, 1), weight_sum / max(steps, 1)


@RECIPES.register("fssda")
def fssda_recipe(client: Client, task: ClientTask, inputs: Mapping[str, torch.Tensor]) -> ClientResult:
    """A device's (or a source's, or the target's) work in one round of FSSDA's methods.

    hparams: sources (S); train_source (train W_s^j on view source{j} from inputs["source{j}"]: sends
    delta_source{j}); train_target (distil W_t on view "target" from inputs["target"], the teachers
    inputs["source{j}"] as received: sends delta_target); supervised (FLOnly: cross-entropy on view "labelled"
    from inputs["target"]: sends delta_target); local (SSDAOnly: the models live in the client's state, the
    teachers are this round's local source models; sends nothing); lr_source, lr_target, batch_source,
    batch_target, epochs, optimizer, sgd_momentum, temperature, imitation, imitation_lambda, loss, classes."""
    h = task.hparams
    local = bool(h.get("local", False))
    sources = int(h["sources"])
    st = client.state
    if local:
        for name in [f"source{j}" for j in range(sources)] + ["target"]:
            if name not in st:  # the first round: the initial weights the server sent
                st[name] = inputs[name].cpu().clone()
    start = {k: (st[k] if local else inputs[k]) for k in [f"source{j}" for j in range(sources)] + ["target"]
             if local or k in inputs}
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, float] = {}
    steps, losses = 0, []
    if h.get("train_source"):
        for j in range(sources):
            new, s, loss = _supervised(client, task, start[f"source{j}"], f"source{j}", h["lr_source"],
                                       h["batch_source"], h, f"{task.purpose}/source{j}")
            steps += s
            scalars[f"loss_source{j}"] = loss
            if local:
                st[f"source{j}"] = new.cpu()
            else:
                tensors[f"delta_source{j}"] = (new - start[f"source{j}"].to(new.device)).cpu()
    if h.get("train_target"):
        teachers = [st[f"source{j}"] if local else inputs[f"source{j}"] for j in range(sources)]
        new, s, loss, w = _distil(client, task, start["target"], teachers, h)
        steps += s
        losses.append(loss)
        scalars["imitation_lambda"] = float(w[0])
        for j in range(sources):
            scalars[f"imitation_weight_source{j}"] = float(w[j + 1])
        if local:
            st["target"] = new.cpu()
        else:
            tensors["delta_target"] = (new - start["target"].to(new.device)).cpu()
    if h.get("supervised"):
        new, s, loss = _supervised(client, task, start["target"], "labelled", h["lr_target"], h["batch_target"], h,
                                   f"{task.purpose}/labelled")
        steps += s
        losses.append(loss)
        tensors["delta_target"] = (new - start["target"].to(new.device)).cpu()
    result = client.finish(task, tensors, steps, losses[0] if losses else float("nan"))
    result.scalars.update(scalars)
    return result


# ---------------------------------------------------------------- the server half

class FSSDA(Algorithm):
    """FSSDA in the parallel paradigm; the variants below set the class attributes."""

    name = "fssda"
    family = "fssda"
    Params = FSSDAParams
    recipe: ClassVar[str] = "fssda"  # every task of the family runs fssda_recipe
    serial: ClassVar[bool] = False
    local: ClassVar[bool] = False  # ssda_only
    supervised_only: ClassVar[bool] = False  # fl_only

    @classmethod
    def resolve(cls, cfg, defaults: Mapping[str, Any]) -> dict[str, Any]:
        fill: dict[str, Any] = {"warmup_rounds": 0} if cfg.warmup_rounds is None else {}
        if FSSDAParams.build(cfg.params.get("fssda", {})).optimizer == "sgd":  # the paper's lr where unset
            fill.update({k: PAPER_LR for k in ("lr_source", "lr_target") if getattr(cfg, k) is None})
        return fill

    @classmethod
    def uses(cls, cfg) -> dict[str, bool]:
        return {"lr_source": not cls.supervised_only, "batch_source": not cls.supervised_only}

    @classmethod
    def planned_rounds(cls, cfg) -> int:
        p = FSSDAParams.build(cfg.params.get("fssda", {}))
        return cfg.rounds + (p.serial_source_rounds if cls.serial else 0)

    @classmethod
    def num_clients(cls, cfg) -> int:
        p = FSSDAParams.build(cfg.params.get("fssda", {}))
        return cfg.num_sources if p.layout == "paper" else cfg.num_sources + 1

    def __init__(self, cfg, setting, layout, model=None) -> None:
        super().__init__(cfg, setting, layout, model)
        p = self.params
        if cfg.partition != "domain_shards":
            raise ValueError(f"partition={cfg.partition!r} is invalid for method {self.name}: FSSDA's methods need "
                             "partition 'domain_shards' (source and target domains split over devices)")
        if setting.task != "classification" or setting.aux_tasks:
            raise ValueError(f"method={self.name!r} is invalid for dataset {cfg.dataset!r}: it distils a single-head "
                             "classifier's soft labels")
        if cfg.warmup_rounds:
            raise ValueError(f"warmup_rounds={cfg.warmup_rounds} is invalid for method {self.name}: FSSDA's "
                             "methods have no warm-up (0)")
        if self.local and p.layout != "paper":
            raise ValueError(f"fssda.layout={p.layout!r} is invalid for method {self.name}: SSDAOnly's devices hold "
                             "their own source data (layout paper)")
        self.devices = cfg.num_sources
        self.num_domains = len(setting.source_parts[0])
        self.paper = p.layout == "paper"
        # the clients that train the target model: every device, or the target client
        self.target_clients = list(range(self.devices)) if self.paper else [self.target]
        if self.supervised_only:  # FLOnly: devices without a labelled sample sit the rounds out
            labelled = [int((y != UNLABELLED).sum()) for _, y in setting.target_parts]
            self.target_clients = [k for k in range(self.devices) if labelled[k] > 0] if self.paper else [self.target]
            t_counts = [labelled[k] for k in self.target_clients] if self.paper else [sum(labelled)]
        else:
            t_counts = ([len(y) for _, y in setting.target_parts] if self.paper
                        else [sum(len(y) for _, y in setting.target_parts)])
        self.t_weights = self._weights(t_counts)  # (len(target_clients),)
        self.s_weights = [self._weights([len(parts[j][1]) for parts in setting.source_parts])
                          for j in range(self.num_domains)]  # per domain (K,)

    def _weights(self, counts: list[int]) -> torch.Tensor:
        c = torch.tensor(counts, dtype=torch.float64)
        if self.params.server_average == "unweighted":
            return torch.full_like(c, 1.0 / len(c))
        return c / c.sum()

    # ---------------------------------------------------------------- the experiment

    def views(self):
        s = self.setting
        out: list[dict] = []
        for k in range(self.devices):
            v = {f"source{j}": part for j, part in enumerate(s.source_parts[k])}
            if self.paper:
                x, y = s.target_parts[k]
                v["target"] = (x, y)
                if self.supervised_only:
                    keep = (y != UNLABELLED).nonzero().flatten().numpy()
                    v["labelled"] = (take(x, keep), y[keep])
            out.append(v)
        if not self.paper:
            xs, ys = zip(*s.target_parts)
            out.append({"target": (concat(xs), torch.cat(ys)), "labelled": s.target_train})
        return out

    def init_state(self, initial: torch.Tensor) -> ServerState:
        # the same initial weights for both models (our choice, docs/methods.md: the paper does not say)
        return {"target": initial.clone(), **{f"source{j}": initial.clone() for j in range(self.num_domains)}}

    def final_weights(self, state: ServerState) -> torch.Tensor:
        return state["target"]

    # ---------------------------------------------------------------- one round

    def _hp(self, **flags: bool) -> dict[str, Any]:
        cfg, p = self.cfg, self.params
        return {"sources": self.num_domains, "lr_source": cfg.lr_source, "lr_target": cfg.lr_target,
                "batch_source": cfg.batch_source, "batch_target": cfg.batch_target, "epochs": p.local_epochs,
                "optimizer": p.optimizer, "sgd_momentum": p.sgd_momentum, "temperature": p.kd_temperature, "imitation": p.imitation,
                "imitation_lambda": p.imitation_lambda, "loss": p.loss, "classes": self.setting.num_outputs, **flags}

    def _sources(self) -> tuple[str, ...]:
        return tuple(f"source{j}" for j in range(self.num_domains))

    def _source_tasks(self, r: int, with_target: bool = False) -> tuple[ClientTask, ...]:
        inputs = self._sources() + (("target",) if with_target else ())
        return tuple(ClientTask(k, self.recipe, r, self._hp(train_source=True, train_target=with_target), inputs=inputs,
                                data="source0") for k in range(self.devices))

    def _target_tasks(self, r: int) -> tuple[ClientTask, ...]:
        if self.supervised_only:
            return tuple(ClientTask(k, self.recipe, r, self._hp(supervised=True), inputs=("target",), data="labelled")
                         for k in self.target_clients)
        return tuple(ClientTask(k, self.recipe, r, self._hp(train_target=True), inputs=("target",) + self._sources(),
                                data="target") for k in self.target_clients)

    def _source_phase(self, r: int) -> bool:
        return self.serial and r < self.params.serial_source_rounds

    def plan_round(self, r: int, state: ServerState) -> Round | None:
        if r >= self.planned_rounds(self.cfg):
            return None
        if self.local:
            return Round("main", tuple(ClientTask(k, self.recipe, r, self._hp(train_source=True, train_target=True,
                                                                           local=True),
                                                  inputs=self._sources() + ("target",), data="target")
                                       for k in range(self.devices)))
        if self.supervised_only:
            return Round("main", self._target_tasks(r))
        if self.serial:
            return Round("source", self._source_tasks(r)) if self._source_phase(r) else \
                Round("main", self._target_tasks(r))
        if self.params.soft_labels_from == "previous":
            if self.paper:  # one task per device: its source and target roles, the teachers as received
                return Round("main", self._source_tasks(r, with_target=True))
            return Round("main", self._source_tasks(r) + self._target_tasks(r))
        return Round("main", self._source_tasks(r))

    def plan_step(self, r: int, step: int, state: ServerState) -> Round | None:
        if step == 1 and not (self.local or self.supervised_only or self.serial) \
                and self.params.soft_labels_from == "current":
            return Round("main", self._target_tasks(r))  # distil from this round's W_s (Alg. 1)
        return None

    def aggregate(self, r: int, state: ServerState, results: Mapping[int, ClientResult]
                  ) -> tuple[ServerState, dict[str, Any]]:
        state, metrics = dict(state), {}
        if self.local:
            metrics["imitation_lambda_i"] = [results[k].scalars["imitation_lambda"] for k in range(self.devices)]
            metrics["train_loss_target"] = sum(results[k].scalars["loss"] for k in range(self.devices)) / self.devices
            return state, metrics
        impl = self.cfg.aggregation_impl
        for j in range(self.num_domains):
            key = f"delta_source{j}"
            if any(key in res.tensors for res in results.values()):
                deltas = torch.stack([results[k].tensors[key] for k in range(self.devices)])  # (K, M)
                state[f"source{j}"] = state[f"source{j}"] + fedavg(deltas, weights=self.s_weights[j], impl=impl)
                metrics.setdefault("train_loss_sources_j", []).append(
                    sum(results[k].scalars[f"loss_source{j}"] for k in range(self.devices)) / self.devices)
        if "train_loss_sources_j" in metrics and self.num_domains == 1:  # (one source domain: the usual column)
            metrics["train_loss_sources"] = metrics.pop("train_loss_sources_j")[0]
        if any("delta_target" in res.tensors for res in results.values()):
            state, more = self._aggregate_target(state, results)
            metrics.update(more)
        return state, metrics

    def aggregate_step(self, r: int, step: int, state: ServerState, results: Mapping[int, ClientResult]
                       ) -> tuple[ServerState, dict[str, Any]]:
        return self._aggregate_target(dict(state), results)

    def _aggregate_target(self, state: ServerState, results: Mapping[int, ClientResult]
                          ) -> tuple[ServerState, dict[str, Any]]:
        deltas = torch.stack([results[k].tensors["delta_target"] for k in self.target_clients])  # (K_t, M)
        state["target"] = state["target"] + fedavg(deltas, weights=self.t_weights, impl=self.cfg.aggregation_impl)
        metrics: dict[str, Any] = {"train_loss_target": sum(results[k].scalars["loss"] for k in self.target_clients)
                                   / len(self.target_clients)}
        if not self.supervised_only:  # the per-device lambda (and with several sources, every term's weight)
            metrics["imitation_lambda_i"] = [results[k].scalars["imitation_lambda"] for k in self.target_clients]
            if self.num_domains > 1:
                metrics["imitation_weights_i"] = [
                    [results[k].scalars["imitation_lambda"]] +
                    [results[k].scalars[f"imitation_weight_source{j}"] for j in range(self.num_domains)]
                    for k in self.target_clients]
        return state, metrics

    def evaluate(self, r: int, state: ServerState, evaluator) -> dict[str, Any]:
        if self.local:  # SSDAOnly: the mean of the devices' own target models (Table I)
            rows = [evaluator.target(evaluator.client_state(k)["target"], r) for k in range(self.devices)]
            mean = {k: sum(x[k] for x in rows) / len(rows) for k, v in rows[0].items()
                    if k.endswith(("accuracy", "loss")) and isinstance(v, float)}
            return {**mean, "device_accuracy_i": [x["accuracy"] for x in rows]}
        row = evaluator.target(state["target"], r)
        if not self.supervised_only:  # the teachers' accuracy on the same samples (the soft labels' quality)
            row["teacher_accuracy"] = [evaluator.target(state[f"source{j}"], r, validation=False)["accuracy"]
                                       for j in range(self.num_domains)]
        return row


class FSSDASerial(FSSDA):
    name, serial = "fssda_serial", True


class SSDAOnly(FSSDA):
    name, local = "ssda_only", True


class FLOnly(FSSDA):
    name, supervised_only = "fl_only", True


FAMILY: tuple[type[FSSDA], ...] = (FSSDA, FSSDASerial, SSDAOnly, FLOnly)
