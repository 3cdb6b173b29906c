"""Seed 000: the multi-task loss (Eq. 3), AUC, the masked GP (Eqs. 4-8), the online fine-tuning and GP rounds
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
from fda_ray.runtime.config import RunConfig
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
    """000 Eqs. 4-7 layer by layer in float64: theta += beta sum_i [c_il > 0] c_il w_i A_i Delta_il
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


# ---------------------------------------------------------------- one round against a hand-computed one

def _sources_by_hand(exp, start, alpha):
    cfg = exp.cfg
    deltas = torch.stack([run_task(exp.clients[i], ClientTask(i, "epoch", 0, {"lr": cfg.lr_source,
                                   "batch": cfg.batch_source, "aux_alpha": alpha}), {"global": start}).tensors["delta"]
                          for i in range(cfg.num_sources)]).double()  # (N, M)
    n = torch.tensor([len(x) for x, _ in exp.setting.sources], dtype=torch.float64)
    return deltas, n / n.sum()


def _target_by_hand(exp, start, purpose):
    cfg = exp.cfg
    t = cfg.num_sources
    task = ClientTask(t, "epoch", 0, {"lr": cfg.lr_target, "batch": cfg.batch_target}, purpose=purpose)
    return run_task(exp.clients[t], task, {"global": start.float()}).tensors["delta"].double()


@pytest.mark.parametrize("method", ["fedavg_finetune", "fedavg_finetune_auxinfo"])
def test_fedavg_finetune_round_is_fedavg_then_the_targets_epoch(conditions, method):
    cfg = conditions(method=method, rounds=1)
    hist = run(cfg)
    exp = build_experiment(cfg)
    w0 = exp.initial_weights().double()
    deltas, w = _sources_by_hand(exp, w0.float(), exp.cfg.aux_alpha)
    bar = w0 + (w.unsqueeze(1) * deltas).sum(0)
    expect = bar + _target_by_hand(exp, bar, "finetune")
    assert torch.allclose(hist.final_weights.double(), expect, rtol=0, atol=1e-5)
    assert hist.rows[0]["train_loss_target"] > 0 and "auc" in hist.rows[0]


@pytest.mark.parametrize("warmup,alignment", [(0, "paper"), (1, "paper"), (0, "code")])
def test_gp_round_is_000_eqs_4_to_8(conditions, warmup, alignment):
    cfg = conditions(method="fedavg_finetune_auxinfo_gp", rounds=1, samples_per_client=40,
                     params={"healthcare": {"gp_warmup_rounds": warmup, "alignment": alignment}})
    hist = run(cfg)
    exp = build_experiment(cfg)
    r = exp.cfg
    w0 = exp.initial_weights().double()
    deltas, w = _sources_by_hand(exp, w0.float(), 1.0)
    n_l = len(exp.setting.target_train[0])
    counts = [len(x) for x, _ in exp.setting.sources]
    steps = [c / r.batch_source if alignment == "paper" else math.ceil(c / r.batch_source) for c in counts]
    align = torch.tensor([(r.lr_target / r.lr_source) * (n_l / r.batch_target) / s for s in steps])  # Eq. 8
    if warmup:  # the authors' warm-up: average first; the target and the Delta_i start from the average
        avg = (w.unsqueeze(1) * deltas).sum(0)
        start, deltas, purpose = w0 + avg, deltas - avg, "finetune"
    else:
        start, purpose = w0, "train"
    g_t = _target_by_hand(exp, start, purpose)
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


SEED_000_GRIDS = {"noniid-000", "conditions", "aux-alpha", "chexpert-000", "mimic-000", "midrc-000"}


def test_seed_000_grids_plan_the_papers_rows_and_settings():
    from fda_ray.experiments.trials import plan
    from tuning import GRIDS

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
    mimic = {t.row: t.config().resolved() for t in plan(GRIDS["mimic-000"], "code")}
    gp = mimic["fedavg_finetune_gp"]
    assert (gp.rounds, gp.lr_source, gp.lr_target, gp.params["healthcare"]["gp_warmup_rounds"],
            gp.params["healthcare"]["alignment"], gp.target_labelled) == (80, 1e-4, 2e-5, 16, "code", 100)


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
