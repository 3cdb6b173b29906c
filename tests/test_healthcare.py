"""Healthcare FDA: the multi-task loss (Eq. 3), AUC, the masked GP (Eqs. 4-8), the online fine-tuning and GP rounds
against hand-computed rounds, and the fmnist-conditions construction with its held-out-domain partition."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from fda_ray.core import multitask
from fda_ray.algorithms.aggregation import fedgp, frozen_layers_mask
from fda_ray.core.contract import ClientTask
from fda_ray.train.client import Client, run_task
from fda_ray.core.config import RunConfig
from fda_ray.runtime.engine import build_experiment, run
from fda_ray.data.conditions import BRIGHTNESS, CONDITION_CLASSES, condition_domains, condition_indices, ink_buckets
from fda_ray.train.models import MultiHead

HEALTHCARE = ("fedavg_finetune", "fedavg_finetune_auxinfo", "fedavg_finetune_gp", "fedavg_finetune_auxinfo_gp")


# ---------------------------------------------------------------- the loss and the metrics

def test_loss_is_the_main_bce_plus_alpha_times_each_heads_cross_entropy():
    aux = (("a", 3), ("b", 2))
    out = torch.tensor([[0.5, 1.0, 2.0, 0.0, 0.3, -0.3],
                        [-1.0, 0.0, 0.0, 1.0, 2.0, 0.0]], dtype=torch.float64)  # main 1 | a 3 | b 2
    y = torch.tensor([[1, 2, 0], [0, multitask.MISSING, 1]])
    sig = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    bce = -(math.log(sig(0.5)) + math.log(1 - sig(-1.0))) / 2
    ce_a = -math.log(math.exp(0.0) / (math.exp(1.0) + math.exp(2.0) + math.exp(0.0)))  # sample 1 has no label
    ce_b = (-math.log(math.exp(0.3) / (math.exp(0.3) + math.exp(-0.3)))
            - math.log(math.exp(0.0) / (math.exp(2.0) + math.exp(0.0)))) / 2
    for alpha in (0.0, 0.4, 1.0):
        assert float(multitask.loss("binary", out, y, aux, alpha)) == pytest.approx(bce + alpha * (ce_a + ce_b),
                                                                                    rel=1e-12)
    # a head without a label in the batch adds 0, not NaN
    y_none = y.clone()
    y_none[:, 1] = multitask.MISSING
    assert float(multitask.loss("binary", out, y_none, aux, 1.0)) == pytest.approx(bce + ce_b, rel=1e-12)
    # without auxiliary tasks a binary model's other outputs are never read
    assert float(multitask.loss("binary", out, y[:, 0])) == pytest.approx(bce, rel=1e-12)


def _authors_bce(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The authors' main loss written out: BCEWithLogitsLoss()(torch.sigmoid(outputs), labels), a double sigmoid."""
    s = torch.sigmoid(torch.sigmoid(z))
    return -(y * torch.log(s) + (1 - y) * torch.log(1 - s)).mean()


def test_double_sigmoid_loss_is_the_authors_formula_and_not_the_plain_loss():
    g = torch.Generator().manual_seed(4)
    z = torch.randn(64, 1, generator=g, dtype=torch.float64) * 3  # (n, 1) the main head's outputs
    y = torch.randint(0, 2, (64,), generator=g)
    expect = _authors_bce(z[:, 0], y.double())
    got = multitask.main_loss("binary", z, y, binary_loss="sigmoid")
    assert float(got) == pytest.approx(float(expect), rel=1e-12)
    assert float(got) == pytest.approx(float(torch.nn.BCEWithLogitsLoss()(torch.sigmoid(z), y.double().unsqueeze(1))),
                                       rel=1e-12)  # as their train() calls it
    plain = multitask.main_loss("binary", z, y)
    assert float(plain) == pytest.approx(float(F.binary_cross_entropy_with_logits(z[:, 0], y.double())), rel=1e-12)
    assert abs(float(got) - float(plain)) > 0.05
    # the default is the plain loss; the option reaches the main loss of Eq. 3, not the auxiliary heads
    aux = (("a", 3),)
    out = torch.cat([z, torch.randn(64, 3, generator=g, dtype=torch.float64)], 1)
    ya = torch.stack([y, torch.randint(0, 3, (64,), generator=g)], 1)
    ce = F.cross_entropy(out[:, 1:], ya[:, 1])
    assert float(multitask.loss("binary", out, ya, aux, 0.5, binary_loss="sigmoid")) == \
        pytest.approx(float(expect + 0.5 * ce), rel=1e-12)
    assert float(multitask.loss("binary", out, ya, aux, 0.5)) == pytest.approx(float(plain + 0.5 * ce), rel=1e-12)
    with pytest.raises(ValueError, match=r"binary_loss='probs' is invalid: one of logit, sigmoid"):
        multitask.main_loss("binary", z, y, binary_loss="probs")


def test_auxiliary_loss_with_leaky_heads_is_the_authors_log_softmax_of_leaky_relu():
    """With the authors' heads (LeakyReLU(0.2) on every head's output) Eq. 3 is their loss: the main head's double
    sigmoid plus alpha times each auxiliary head's CrossEntropyLoss on log_softmax(leaky_relu(W_k h + b_k)) (= NLL of
    it: log_softmax is idempotent), every W_k, b_k the head's own."""
    from fda_ray.train.models import build_model

    torch.manual_seed(2)
    aux = (("ink", 9), ("flip", 2), ("bright", 3))
    model = build_model("multitask_cnn", (1, 28, 28), 1, aux_classes=tuple(c for _, c in aux),
                        head_activation="leaky_relu").double()
    g = torch.Generator().manual_seed(3)
    x = torch.rand(12, 1, 28, 28, generator=g, dtype=torch.float64)
    y = torch.stack([torch.randint(0, c, (12,), generator=g) for c in (2, 9, 2, 3)], 1)
    with torch.no_grad():
        out = model(x)
        h = model.embed(model.trunk(x).flatten(1))
        preds = [F.leaky_relu(F.linear(h, lin.weight, lin.bias), 0.2) for lin in (model.head, *model.aux_heads)]
        model.head_activation = "linear"
        plain = model(x)
    for alpha in (0.0, 1.0, 0.3):
        authors = _authors_bce(preds[0][:, 0], y[:, 0].double())
        nll = authors.clone()
        for k in range(1, 4):
            log_p = F.log_softmax(preds[k], dim=1)
            authors = authors + alpha * torch.nn.CrossEntropyLoss()(log_p, y[:, k])  # their criterion on log-probs
            nll = nll + alpha * F.nll_loss(log_p, y[:, k])
        got = multitask.loss("binary", out, y, aux, alpha, binary_loss="sigmoid")
        assert float(got) == pytest.approx(float(authors), rel=1e-10) and float(got) == pytest.approx(float(nll),
                                                                                                      rel=1e-10)
    assert (out < 0).any()  # the slope acts: the linear heads' loss (the same weights) differs
    assert abs(float(multitask.loss("binary", plain, y, aux, 0.3, binary_loss="sigmoid")) - float(got)) > 1e-4


def test_auc_equals_the_share_of_correctly_ordered_pairs():
    g = torch.Generator().manual_seed(0)
    for n in (2, 7, 40):
        scores = torch.randint(0, 5, (n,), generator=g).double()  # many ties
        labels = torch.randint(0, 2, (n,), generator=g)
        labels[0], labels[1] = 0, 1
        pos = [float(s) for s, l in zip(scores, labels) if l == 1]
        neg = [float(s) for s, l in zip(scores, labels) if l == 0]
        pairs = [1.0 if p > q else 0.5 if p == q else 0.0 for p, q in itertools.product(pos, neg)]
        assert multitask.binary_auc(scores, labels) == pytest.approx(sum(pairs) / len(pairs), abs=1e-12)
    assert math.isnan(multitask.binary_auc(torch.ones(3), torch.ones(3)))


def test_evaluation_reports_accuracy_at_logit_zero_and_auc():
    from fda_ray.train.evaluation import evaluate_metrics
    from fda_ray.core.layout import ParamLayout

    model = torch.nn.Linear(1, 1)
    layout = ParamLayout.from_model(model)
    x = torch.tensor([[-2.0], [-0.5], [0.5], [3.0]])
    y = torch.tensor([0, 1, 0, 1])
    m = evaluate_metrics(model, layout, torch.tensor([1.0, 0.0]), x, y, noise=0.0, gen=None, task="binary")
    assert m["accuracy"] == 0.5 and m["auc"] == 0.75  # logits = x: predicted 0, 0, 1, 1
    bce = -(math.log(1 - 1 / (1 + math.exp(2))) + math.log(1 / (1 + math.exp(0.5)))
            + math.log(1 - 1 / (1 + math.exp(-0.5))) + math.log(1 / (1 + math.exp(-3)))) / 4
    assert m["loss"] == pytest.approx(bce, rel=1e-6)


# ---------------------------------------------------------------- the masked GP

def gp_by_hand(target, sources, offsets, frozen, weights, align, beta):
    """Healthcare FDA Eqs. 4-7 layer by layer in float64: theta += beta sum_i [c_il > 0] c_il w_i A_i Delta_il
    + (1 - beta) G_T,l on every layer but the frozen ones, which keep their value."""
    out = torch.zeros_like(target, dtype=torch.float64)
    for l in range(len(offsets) - 1):
        lo, hi = int(offsets[l]), int(offsets[l + 1])
        if frozen[l]:
            continue
        g = target[lo:hi].double()
        p = torch.zeros_like(g)
        for i in range(sources.shape[0]):
            d = sources[i, lo:hi].double()
            c = float(F.cosine_similarity(d, g, dim=0))
            if c > 0:
                p += c * float(weights[i]) * float(align[i]) * d
        out[lo:hi] = beta * p + (1 - beta) * g
    return out


def test_masked_gp_leaves_the_auxiliary_heads_and_projects_the_rest():
    g = torch.Generator().manual_seed(1)
    offsets = torch.tensor([0, 3, 7, 9, 12])
    frozen = torch.tensor([False, False, True, False])
    target = torch.randn(12, generator=g, dtype=torch.float64)
    sources = torch.randn(3, 12, generator=g, dtype=torch.float64)
    sources[1, 3:7] = -target[3:7]  # a layer with cosine -1: filtered
    weights = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    align = torch.tensor([0.2, 1.5, 0.7], dtype=torch.float64)
    expect = gp_by_hand(target, sources, offsets, frozen, weights, align, 0.5)
    got = fedgp(target, sources, offsets, beta=0.5, weights=weights, align=align, frozen=frozen)
    assert torch.allclose(got, expect, rtol=1e-12, atol=1e-14)
    assert torch.equal(got[7:9], torch.zeros(2, dtype=torch.float64))
    # the C++ kernel in float32 within float32 rounding of the float64 reference
    got32 = fedgp(target.float(), sources.float(), offsets, beta=0.5, weights=weights, align=align, frozen=frozen,
                  impl="kernel")
    assert torch.allclose(got32.double(), expect, rtol=1e-5, atol=1e-6)
    assert frozen_layers_mask(("trunk.w", "aux_heads.0.weight", "head.bias"), ("aux_heads.",)).tolist() == \
        [False, True, False]


# ---------------------------------------------------------------- the construction and its partition

def test_conditions_domains_are_disjoint_balanced_and_one_class_vs_rest():
    g = np.random.default_rng(0)
    labels = torch.from_numpy(g.integers(0, 10, 7000))
    sizes = set()
    seen = np.zeros(7000, dtype=int)
    for d, (tr, ytr, te, yte) in enumerate(condition_indices(labels)):
        for idx, y in ((tr, ytr), (te, yte)):
            seen[idx] += 1
            assert int(y.sum()) * 2 == len(y)  # balanced
            assert ((labels.numpy()[idx] == CONDITION_CLASSES[d]) == (y == 1)).all()  # "is it class c_d"
            sizes.add(len(y))
    assert seen.max() == 1  # no image in two tables
    assert sizes == {2 * 2000 * 7000 // 70000, 2 * 1000 * 7000 // 70000}


def test_conditions_images_carry_their_auxiliary_labels():
    g = np.random.default_rng(1)
    images = torch.from_numpy(g.integers(0, 256, (7000, 28, 28)).astype(np.uint8))
    labels = torch.from_numpy(g.integers(0, 10, 7000))
    trains, tests = condition_domains(images, labels)
    ink = ink_buckets(images)
    (tr_idx, _, te_idx, _) = condition_indices(labels)[0]
    for (x, y), idx in ((trains[0], tr_idx), (tests[0], te_idx)):
        base = images[torch.from_numpy(idx)].float() / 255.0
        base = torch.where(y[:, 2].bool().view(-1, 1, 1), base.flip(-1), base)
        scale = torch.tensor(BRIGHTNESS)[y[:, 3]].view(-1, 1, 1)
        assert torch.equal(x[:, 0], base * scale)
        assert (y[:, 1].numpy() == ink[idx]).all()
    all_y = torch.cat([y for _, y in trains])
    flip_rate = [float(all_y[all_y[:, 0] == v, 2].float().mean()) for v in (0, 1)]
    assert flip_rate[0] < 0.5 < flip_rate[1]  # 0.4 and 0.6


def test_heldout_domain_partition(conditions):
    exp = build_experiment(conditions(method="fedavg_finetune", test_env=2, samples_per_client=None,
                                      test_samples=None))
    s = exp.setting
    assert len(s.sources) == 4 and all(len(y) == 84 for _, y in s.sources)
    assert len(s.target_train[1]) == 16 and len(s.target_test[1]) == 42 and len(s.target_pool[1]) == 84
    assert s.task == "binary" and s.num_outputs == 1 and [n for n, _ in s.aux_tasks] == ["ink_mass", "flipped",
                                                                                          "brightness"]
    assert isinstance(exp.model, MultiHead) and len(exp.model.aux_heads) == 3
    with pytest.raises(ValueError, match=r"test_env=5 is invalid: dataset 'fmnist-conditions' has domains 0 shirt"):
        build_experiment(conditions(method="fedavg_finetune", test_env=5))
    with pytest.raises(ValueError, match=r"model='simple_cnn' is invalid .* need a multi-head model"):
        build_experiment(conditions(method="fedavg_finetune", model="simple_cnn"))
    with pytest.raises(ValueError, match=r"partition='homo' is invalid .* use partition 'heldout_domain'"):
        build_experiment(conditions(method="fedavg_finetune", partition="homo"))


def test_auxinfo_needs_auxiliary_labels_and_alpha_resolves_per_method(tiny):
    assert RunConfig(method="fedavg_finetune_auxinfo").resolved().aux_alpha == 1.0
    assert RunConfig(method="fedavg_finetune_gp").resolved().aux_alpha == 0.0
    assert RunConfig(method="fedgp").resolved().aux_alpha == 0.0
    with pytest.raises(ValueError, match=r"aux_alpha=1.0 is invalid: dataset 'fashion-mnist' has no auxiliary labels"):
        build_experiment(tiny(method="fedavg_finetune_auxinfo", warmup_rounds=None))
    with pytest.raises(ValueError, match=r"aux_alpha=-1 is invalid: a finite number >= 0"):
        RunConfig(aux_alpha=-1)
    code = RunConfig(method="fedavg_finetune", dataset="fmnist-conditions",
                     params={"healthcare": {"learning_rates": "code"}}).resolved()
    assert (code.lr_source, code.lr_target) == (1e-4, 2e-5)
    paper = RunConfig(method="fedavg_finetune", dataset="fmnist-conditions").resolved()
    assert (paper.lr_source, paper.lr_target, paper.warmup_rounds) == (1e-3, 2e-4, 0)


# ---------------------------------------------------------------- the local training

def _epoch(client: Client, start: torch.Tensor, alpha: float, purpose: str = "train") -> torch.Tensor:
    task = ClientTask(client.index, "epoch", 0, {"lr": 1e-3, "batch": 16, "aux_alpha": alpha}, purpose=purpose)
    return run_task(client, task, {"global": start}).tensors["delta"]


def test_alpha_zero_is_plain_training_and_alpha_moves_the_trunk(conditions):
    exp = build_experiment(conditions(method="fedavg_finetune"))
    c = exp.clients[0]
    w0 = exp.initial_weights()
    d0 = _epoch(c, w0, 0.0)
    # the same client and model trained on the main labels alone, as a dataset without auxiliary labels
    x, y = c.views["train"]
    plain = Client(0, {"train": (x, y[:, 0].clone())}, c.model, exp.layout, seed=exp.cfg.seed, task="binary",
                   drop_last=c.drop_last, shuffle=c.shuffle)
    assert torch.allclose(_epoch(plain, w0, 0.0), d0, rtol=0, atol=1e-6)
    heads = frozen_layers_mask(exp.layout.names, (MultiHead.AUX_PREFIX,))
    aux_coords = torch.cat([torch.arange(int(exp.layout.offsets[l]), int(exp.layout.offsets[l + 1]))
                            for l in heads.nonzero().flatten().tolist()])
    assert torch.equal(d0[aux_coords], torch.zeros(len(aux_coords)))  # no gradient reaches the auxiliary heads
    d1 = _epoch(c, w0, 1.0)
    trunk = exp.layout.layer_of("trunk.conv1.weight")
    assert (d1[aux_coords] != 0).any() and not torch.allclose(d1[trunk], d0[trunk], atol=1e-6)


def test_code_options_train_on_the_authors_leaky_heads_and_double_sigmoid(conditions):
    """A source's epoch as the healthcare family plans it under the code options equals a hand-written Adam loop on
    the authors' loss: LeakyReLU(0.2) on each head's own Linear, BCE-with-logits on the sigmoid of the main output,
    alpha times NLL of log_softmax of each auxiliary output (their log_softmax + CrossEntropyLoss)."""
    import copy

    exp = build_experiment(conditions(method="fedavg_finetune_auxinfo", rounds=1, params={"healthcare": CODE_OPTIONS}))
    w0 = exp.initial_weights()
    task = exp.algorithm.plan_round(0, exp.algorithm.init_state(w0)).tasks[0]
    assert task.hparams["binary_loss"] == "sigmoid" and task.hparams["aux_alpha"] == 1.0
    client = exp.clients[0]
    got = run_task(client, task, {"global": w0}).tensors["delta"]

    model = copy.deepcopy(client.model)
    exp.layout.load_into(model, w0)
    opt = torch.optim.Adam(model.parameters(), lr=task.hparams["lr"])
    steps = 0
    for xb, yb in client.batches(task.hparams["batch"], task.round, task.purpose):
        h = model.embed(model.trunk(xb).flatten(1))
        preds = [F.leaky_relu(F.linear(h, lin.weight, lin.bias), 0.2) for lin in (model.head, *model.aux_heads)]
        loss = _authors_bce(preds[0][:, 0], yb[:, 0].float())
        for k in range(1, len(preds)):
            loss = loss + 1.0 * F.nll_loss(F.log_softmax(preds[k], dim=1), yb[:, k], ignore_index=multitask.MISSING)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
    assert steps >= 2
    expect = exp.layout.flatten_model(model) - w0
    assert torch.allclose(got, expect, rtol=0, atol=1e-6)
    # the paper's options train another model from the same start
    plain = build_experiment(conditions(method="fedavg_finetune_auxinfo", rounds=1))
    assert torch.equal(plain.initial_weights(), w0)
    plain_task = plain.algorithm.plan_round(0, plain.algorithm.init_state(w0)).tasks[0]
    assert plain_task.hparams["binary_loss"] == "logit" and plain.clients[0].model.head_activation == "linear"
    assert not torch.allclose(run_task(plain.clients[0], plain_task, {"global": w0}).tensors["delta"], got,
                              rtol=0, atol=1e-6)


def test_code_profile_runs_end_to_end_with_leaky_heads_everywhere(conditions, tiny):
    """The conditions grid's code profile on the tiny data: every client and the evaluator hold the leaky heads,
    the target's logged training loss is a double sigmoid's (between log(1 + e^-1) and log(1 + e)), and the
    options refuse a model without heads and a task that is not binary in one line."""
    from fda_ray.train.evaluation import Evaluator
    from fda_ray.papers import GRIDS

    fields = dict(GRIDS["conditions"].profiles["code"].fields)
    cfg = conditions(method="fedavg_finetune_gp", rounds=2, params=fields["params"], lr_source=fields["lr_source"],
                     lr_target=fields["lr_target"])
    exp = build_experiment(cfg)
    assert all(c.model.head_activation == "leaky_relu" for c in exp.clients)
    assert exp.model.head_activation == Evaluator(exp).model.head_activation == "leaky_relu"
    hist = run(cfg)
    assert [r["phase"] for r in hist.rows] == ["warmup", "warmup"]  # 5 warm-up rounds > 2 rounds
    lo, hi = math.log(1 + math.exp(-1)), math.log(1 + math.e)
    assert all(lo < r["train_loss_target"] < hi and 0 <= r["auc"] <= 1 for r in hist.rows)
    with pytest.raises(ValueError, match=r"healthcare.head_activation='leaky_relu' is invalid for model='simple_cnn': "
                                         r"it needs a multi-head model"):
        build_experiment(tiny(method="fedavg_finetune", warmup_rounds=None,
                              params={"healthcare": {"head_activation": "leaky_relu"}}))
    with pytest.raises(ValueError, match=r"healthcare.binary_loss='sigmoid' is invalid for dataset 'fashion-mnist': "
                                         r"its main task is classification"):
        build_experiment(tiny(method="fedavg_finetune", warmup_rounds=None,
                              params={"healthcare": {"binary_loss": "sigmoid"}}))


# ---------------------------------------------------------------- one round against a hand-computed one

def _sources_by_hand(exp, start, alpha, loss="logit"):
    cfg = exp.cfg
    deltas = torch.stack([run_task(exp.clients[i], ClientTask(i, "epoch", 0, {"lr": cfg.lr_source,
                                   "batch": cfg.batch_source, "aux_alpha": alpha, "binary_loss": loss}),
                                   {"global": start}).tensors["delta"]
                          for i in range(cfg.num_sources)]).double()  # (N, M)
    n = torch.tensor([len(x) for x, _ in exp.setting.sources], dtype=torch.float64)
    return deltas, n / n.sum()


def _target_by_hand(exp, start, purpose, loss="logit"):
    cfg = exp.cfg
    t = cfg.num_sources
    task = ClientTask(t, "epoch", 0, {"lr": cfg.lr_target, "batch": cfg.batch_target, "binary_loss": loss},
                      purpose=purpose)
    return run_task(exp.clients[t], task, {"global": start.float()}).tensors["delta"].double()


# The authors' code's model and loss options (HealthcareParams; the `code` profiles, fda_ray/papers/grids.py)
CODE_OPTIONS = {"head_activation": "leaky_relu", "binary_loss": "sigmoid"}


@pytest.mark.parametrize("method,code", [("fedavg_finetune", False), ("fedavg_finetune_auxinfo", False),
                                         ("fedavg_finetune_auxinfo", True)])
def test_fedavg_finetune_round_is_fedavg_then_the_targets_epoch(conditions, method, code):
    cfg = conditions(method=method, rounds=1, params={"healthcare": CODE_OPTIONS} if code else {})
    hist = run(cfg)
    exp = build_experiment(cfg)
    loss = "sigmoid" if code else "logit"
    w0 = exp.initial_weights().double()
    deltas, w = _sources_by_hand(exp, w0.float(), exp.cfg.aux_alpha, loss)
    bar = w0 + (w.unsqueeze(1) * deltas).sum(0)
    expect = bar + _target_by_hand(exp, bar, "finetune", loss)
    assert torch.allclose(hist.final_weights.double(), expect, rtol=0, atol=1e-5)
    assert hist.rows[0]["train_loss_target"] > 0 and "auc" in hist.rows[0]


@pytest.mark.parametrize("warmup,alignment,code", [(0, "paper", False), (1, "paper", False), (0, "code", False),
                                                   (0, "code", True), (5, "code", True)])
def test_gp_round_is_000_eqs_4_to_8(conditions, warmup, alignment, code):
    cfg = conditions(method="fedavg_finetune_auxinfo_gp", rounds=1, samples_per_client=40,
                     params={"healthcare": {"gp_warmup_rounds": warmup, "alignment": alignment,
                                            **(CODE_OPTIONS if code else {})}})
    hist = run(cfg)
    exp = build_experiment(cfg)
    r = exp.cfg
    loss = "sigmoid" if code else "logit"
    w0 = exp.initial_weights().double()
    deltas, w = _sources_by_hand(exp, w0.float(), 1.0, loss)
    n_l = len(exp.setting.target_train[0])
    counts = [len(x) for x, _ in exp.setting.sources]
    steps = [c / r.batch_source if alignment == "paper" else math.ceil(c / r.batch_source) for c in counts]
    align = torch.tensor([(r.lr_target / r.lr_source) * (n_l / r.batch_target) / s for s in steps])  # Eq. 8
    if warmup:  # the authors' warm-up: average first; the target and the Delta_i start from the average
        avg = (w.unsqueeze(1) * deltas).sum(0)
        start, deltas, purpose = w0 + avg, deltas - avg, "finetune"
    else:
        start, purpose = w0, "train"
    g_t = _target_by_hand(exp, start, purpose, loss)
    frozen = frozen_layers_mask(exp.layout.names, (MultiHead.AUX_PREFIX,))
    expect = start + gp_by_hand(g_t, deltas, exp.layout.offsets, frozen, w, align, 0.5)
    assert torch.allclose(hist.final_weights.double(), expect, rtol=0, atol=1e-5)
    assert hist.rows[0]["phase"] == ("warmup" if warmup else "main")
    heads = exp.layout.layer_of("aux_heads.0.weight")
    # GP leaves the auxiliary heads where the round started (the warm-up's FedAvg moves them, as the code does)
    assert torch.allclose(hist.final_weights[heads].double(), start[heads], rtol=0, atol=1e-6)


@pytest.mark.parametrize("method", HEALTHCARE)
def test_healthcare_methods_resume_and_count_their_rows(conditions, method, tmp_path):
    from conftest import assert_resume_equals_uninterrupted

    cfg = conditions(method=method, rounds=3, params={"healthcare": {"gp_warmup_rounds": 1}}
                     if "gp" in method else {})
    whole = run(cfg)
    assert len(whole.rows) == type(build_experiment(cfg).algorithm).planned_rounds(cfg.resolved()) == 3
    assert_resume_equals_uninterrupted(cfg, after=2)


SEED_000_GRIDS = {"noniid-000", "noniid-000-fmnist", "conditions", "aux-alpha", "chexpert-000", "mimic-000",
                  "midrc-000"}


def test_seed_000_grids_plan_the_papers_rows_and_settings():
    from fda_ray.experiments.trials import plan
    from fda_ray.papers import GRIDS

    for name in SEED_000_GRIDS:  # every row x value x seed once, under a unique key
        grid = GRIDS[name]
        trials = plan(grid, "paper")
        assert {(t.row, t.value, t.seed) for t in trials} == {
            (r.key, v, s) for r in grid.rows for v in grid.values for s in range(grid.seeds_for(v))}
        assert len({t.key for t in trials}) == len(trials)
        assert all(t.config().resolved().method == grid.row(t.row).method for t in trials)

    methods = {t.row: t.config().resolved() for t in plan(GRIDS["conditions"], "paper")}
    assert {k: c.method for k, c in methods.items()} == {
        "fedavg": "source_only", "fedavg_finetune": "fedavg_finetune", "oracle": "oracle",
        "fedavg_finetune_auxinfo": "fedavg_finetune_auxinfo", "fedavg_finetune_gp": "fedavg_finetune_gp",
        "fedavg_finetune_auxinfo_gp": "fedavg_finetune_auxinfo_gp"}
    assert [methods[k].aux_alpha for k in ("fedavg", "fedavg_finetune_gp", "fedavg_finetune_auxinfo_gp")] == [0, 0, 1]
    assert all(c.warmup_rounds == 0 and c.rounds == 50 and c.target_labelled == 1000 for c in methods.values())
    assert GRIDS["conditions"].paper["fedavg_finetune_auxinfo_gp"][0.0] == 75.61
    assert GRIDS["conditions"].paper_auc["fedavg_finetune_gp"][0.0] == 82.40
    alphas = sorted({t.config().resolved().aux_alpha for t in plan(GRIDS["aux-alpha"], "paper")})
    assert alphas == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    noniid = [t.config().resolved() for t in plan(GRIDS["noniid-000"], "paper")]
    assert {(c.partition, c.source_classes, c.num_sources, c.noise, c.target_labelled) for c in noniid} == \
        {("source_classes", 3, 8, 0.4, 100)} and len(noniid) == 9
    assert {c.dataset for c in noniid} == {"mnist"}  # the paper's own data; the twin runs Fashion-MNIST
    assert {t.config().dataset for t in plan(GRIDS["noniid-000-fmnist"], "paper")} == {"fashion-mnist"}
    mimic = {t.row: t.config().resolved() for t in plan(GRIDS["mimic-000"], "code")}
    gp = mimic["fedavg_finetune_gp"]
    assert (gp.rounds, gp.lr_source, gp.lr_target, gp.params["healthcare"]["gp_warmup_rounds"],
            gp.params["healthcare"]["alignment"], gp.target_labelled) == (60, 1e-4, 2e-5, 5, "code", 100)


# enyijiang/MIDRC at 95291b2: federated_{chexpert,mimic,midrc}_multi.py's num_global_epochs, source_batch_size and
# target_batch_size defaults (fmnist-conditions: the dataset's rounds and batches); `if i < 5` warm-up on every one.
HEAD_SCRIPTS = {"chexpert-000": (80, 32, 32), "mimic-000": (60, 32, 32), "midrc-000": (50, 8, 16),
                "conditions": (50, 32, 32)}
PAPER_ROUNDS = {"chexpert-000": 50, "mimic-000": 80, "midrc-000": 50, "conditions": 50}  # Healthcare FDA App. A.3


@pytest.mark.parametrize("name", sorted(HEAD_SCRIPTS))
def test_code_profiles_resolve_to_the_authors_scripts_at_head(name):
    from fda_ray.algorithms.healthcare.methods import HealthcareParams
    from fda_ray.experiments.trials import plan
    from fda_ray.papers import GRIDS

    rounds, batch_s, batch_t = HEAD_SCRIPTS[name]
    grid = GRIDS[name]
    code = {t.row: t.config().resolved() for t in plan(grid, "code") if t.seed == 0}
    paper = {t.row: t.config().resolved() for t in plan(grid, "paper") if t.seed == 0}
    assert set(code) == set(paper) == {r.key for r in grid.rows}
    for row, c in code.items():
        assert (c.rounds, c.batch_source, c.batch_target, c.lr_source, c.lr_target) == \
            (rounds, batch_s, batch_t, 1e-4, 2e-5), row
        assert c.target_labelled == paper[row].target_labelled and c.aux_alpha == paper[row].aux_alpha
        if c.method.startswith("fedavg_finetune"):
            assert c.params["healthcare"] == {"gp_warmup_rounds": 5, "alignment": "code", "learning_rates": "code",
                                              "head_activation": "leaky_relu", "binary_loss": "sigmoid"}
            assert paper[row].params["healthcare"] == HealthcareParams().to_dict()  # the paper: the defaults
        else:  # FedAvg (source_only) and Oracle: another family, whose parameters these are not
            assert c.method in ("source_only", "oracle") and set(c.params) == {"fda"}
    assert {p.rounds for p in paper.values()} == {PAPER_ROUNDS[name]}
    assert {(p.lr_source, p.batch_source, p.batch_target) for p in paper.values() if p.method != "oracle"} == \
        {(1e-3, 32, 32)}
    assert "95291b2" in grid.profiles["code"].note and f"{rounds} rounds" in grid.profiles["code"].note or \
        name == "conditions"
    assert HealthcareParams() == HealthcareParams(gp_warmup_rounds=0, alignment="paper", learning_rates="paper",
                                                  head_activation="linear", binary_loss="logit")


def test_command_line_runs_a_seed_000_method_and_prints_auc(conditions, capsys):
    from fda_ray.experiments.cli import main

    cfg = conditions()
    code = main(["--dataset", "fmnist-conditions", "--data-dir", cfg.data_dir, "--method", "fedavg_finetune_auxinfo_gp",
                 "--rounds", "1", "--target-labelled", "16", "--samples-per-client", "48", "--test-samples", "40",
                 "--aux-alpha", "0.5", "--healthcare-gp-warmup-rounds", "1", "--test-env", "3", "--executor", "serial"])
    out = capsys.readouterr().out
    assert code == 0 and " auc " in out and "AUC" in out and "test_env 3" in out
    assert main(["--dataset", "fmnist-conditions", "--aux-alpha", "-1"]) == 2
    assert "aux_alpha=-1.0 is invalid: a finite number >= 0" in capsys.readouterr().err


def test_personalised_baselines_on_seed_000_data(conditions):
    """FedAvg over all clients, Ditto and APFL run on a binary multi-head task; FedRep and kNN-Per, whose head is
    the last linear layer of a single-head classifier, refuse it in one line."""
    for method in ("fedavg_all", "ditto", "apfl"):
        hist = run(conditions(method=method, rounds=1))
        assert 0 <= hist.rows[0]["auc"] <= 1
    for method in ("fedrep", "knn_per"):
        with pytest.raises(ValueError, match=rf"method='{method}' is invalid for dataset 'fmnist-conditions': it "
                                             r"needs a single-head classification task \(this one is binary with"):
            build_experiment(conditions(method=method, rounds=1))


def test_fidelity_table_shows_the_code_options_equal_to_the_authors_formulas():
    """python -m benchmarks.fidelity_healthcare: with the code options every measured number is the written-out
    reference's, and the paper's defaults differ from it."""
    from benchmarks.fidelity_healthcare import rows, table

    rs = rows()
    assert all(set(r) == {"fix", "quantity", "before", "after", "reference"} for r in rs)
    by = {r["quantity"]: r for r in rs}
    for q in ("L_aux (sum of the 3 auxiliary cross-entropies)", "L_main on the same outputs z (the model at its start)",
              "L_main + 1 x L_aux (Eq. 3)", "per-sample abs(dL_main/dz), mean"):
        assert by[q]["after"] == by[q]["reference"] != by[q]["before"], q
    heads = by["largest abs(head output - authors' leaky_relu(W h + b)), all heads"]
    assert heads["after"] == "0" and float(heads["before"]) > 0.01
    epoch = next(r for r in rs if r["quantity"].startswith("one source epoch"))
    assert float(epoch["after"]) < 1e-6 < float(epoch["before"])
    assert by["GP warm-up rounds"]["after"] == "5 / 5 / 5" and by["rounds"]["after"] == "80 / 60 / 50"
    assert by["batch source / target"]["after"] == "32/32 / 32/32 / 8/16"
    assert table(rs).count("\n") == len(rs) + 1
