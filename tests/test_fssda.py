"""FSSDA end to end: the domain_shards partition, FMNIST-5, the FSSDA recipe (a batch without labels still moves
W_t under the default loss; fixed and adaptive lambda), the server halves (unweighted averages, FLOnly's devices),
resume == uninterrupted, the grids and the configuration's one-line errors. serial == Ray is in test_ray.py; the
pure pieces (Eq. 4, Frank-Wolfe, the soft labels' temperature, the fake labels) are in test_fssda_core.py."""
from __future__ import annotations

import pytest
import torch

from conftest import assert_resume_equals_uninterrupted
from fda_ray.algorithms import ClientResult, ClientTask
from fda_ray.algorithms.fssda.methods import fssda_recipe
from fda_ray.data.base import UNLABELLED
from fda_ray.data import load
from fda_ray.runtime.engine import run
from fda_ray.runtime.experiment import build_experiment
from fda_ray.data.fmnist_domains import FMNIST5_DOMAINS, domain_environments
from fda_ray.runtime.partitions import build_setting


# ---------------------------------------------------------------- data

def test_fmnist5_domains_are_disjoint_slices_put_through_their_transforms(fmnist_dir):
    s = load("fmnist-5", str(fmnist_dir))
    assert s.env_names == FMNIST5_DOMAINS and len(s.environments) == 5
    fm = load("fashion-mnist", str(fmnist_dir))
    pool = (torch.cat([fm.x_train, fm.x_test])[:, 0] * 255).round().to(torch.uint8)
    ys = torch.cat([fm.y_train, fm.y_test])
    perm = torch.randperm(len(pool), generator=torch.Generator().manual_seed(0))
    for e, (x, y) in enumerate(s.environments):
        assert x.shape == (len(pool) // 5, 3, 28, 28) and float(x.min()) >= 0 and float(x.max()) <= 1
        assert torch.equal(y, ys[perm][e::5])  # env e = pool[perm][e::5]: disjoint
    clean = pool[perm][0::5].float() / 255
    assert torch.allclose(s.environments[0][0][:, 1], clean)  # grey replicated to 3 channels
    assert torch.allclose(s.environments[3][0][:, 0], 1 - pool[perm][3::5].float() / 255)  # invert
    again = domain_environments(pool, ys)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(again, s.environments))  # a function of the construction seed


def test_domain_shards_split_the_domains_over_the_devices(fmnist5, fmnist_dir):
    split = load("fmnist-5", str(fmnist_dir))
    cfg = fmnist5(source_envs=(1, 4), samples_per_client=None)
    s = build_setting(split, cfg.resolved())
    k = cfg.resolved().num_sources
    assert len(s.source_parts) == len(s.target_parts) == len(s.sources) == k
    # iid: equal shards of each domain; a source client holds its shard of every source domain, in order
    sizes = {len(y) for parts in s.source_parts for _, y in parts}
    assert sizes == {len(split.environments[1][1]) // k}
    for parts, (x, y) in zip(s.source_parts, s.sources):
        assert torch.equal(torch.cat([p[0] for p in parts]), x) and torch.equal(torch.cat([p[1] for p in parts]), y)
    # the labelled target samples: 3 per class over all devices, each on the device that holds it
    tx, ty = split.environments[2]
    marked = torch.cat([y for _, y in s.target_parts])
    assert int((marked != UNLABELLED).sum()) == len(s.target_train[1])
    counts = torch.bincount(s.target_train[1], minlength=10)
    assert counts.max() <= 3 and counts.sum() == int(sum(min(3, int((ty == c).sum())) for c in range(10)))
    held = torch.cat([x for x, _ in s.target_parts])
    for x, y in s.target_parts:
        lab = y != UNLABELLED
        for xi, yi in zip(x[lab], y[lab]):  # the labelled ones keep their true label
            j = int((tx.flatten(1) == xi.flatten()).all(1).nonzero()[0])
            assert int(ty[j]) == int(yi)
    # pool = every held target sample, the labelled first; the test set = the unlabelled ones
    n_l = len(s.target_train[1])
    assert len(s.target_pool[1]) == len(held) and torch.equal(s.target_pool[0][:n_l], s.target_train[0])
    assert len(s.target_test[1]) == len(held) - n_l
    # Dirichlet 0.1: the same devices, skewed label mixtures (NIID-Bench); seeded: the same twice
    d1 = build_setting(split, cfg.replace(dirichlet_concentration=0.1).resolved())
    d2 = build_setting(split, cfg.replace(dirichlet_concentration=0.1).resolved())
    assert all(torch.equal(a[1], b[1]) for a, b in zip(d1.target_parts, d2.target_parts))
    classes_iid = [len(torch.unique(parts[0][1])) for parts in s.source_parts]
    classes_dir = [len(torch.unique(parts[0][1])) for parts in d1.source_parts]
    assert min(classes_dir) < min(classes_iid)  # some device sees fewer classes
    sizes_dir = [len(parts[0][1]) for parts in d1.source_parts]
    assert len(set(sizes_dir)) > 1 and sum(sizes_dir) == len(split.environments[1][1])  # unequal, all held


def test_a_domain_cap_keeps_the_non_iid_devices_unequal_and_a_device_cap_makes_them_equal(fmnist5, fmnist_dir):
    """FSSDA's non-iid devices differ in size (Sec. IV-B). --samples-per-client caps each device's shard after the
    Dirichlet split by default (every device the same size: label skew only); --shard-cap domain caps the domain at
    samples_per_client x devices before it, so the split keeps its unequal sizes within the same total."""
    split = load("fmnist-5", str(fmnist_dir))
    cfg = fmnist5(source_envs=(1,), samples_per_client=60, dirichlet_concentration=0.1)  # 300 images a domain
    k = cfg.resolved().num_sources
    whole = [len(parts[0][1]) for parts in build_setting(split, cfg.replace(samples_per_client=None).resolved()
                                                         ).source_parts]
    by_device = build_setting(split, cfg.resolved())
    assert [len(parts[0][1]) for parts in by_device.source_parts] == [min(n, 60) for n in whole]
    assert min(whole) > 60  # (so the device cap evens them out here)
    by_domain = build_setting(split, cfg.replace(shard_cap="domain").resolved())
    sizes = [len(parts[0][1]) for parts in by_domain.source_parts]
    assert len(set(sizes)) > 1 and sum(sizes) == 60 * k, sizes
    t_sizes = [len(y) for _, y in by_domain.target_parts]
    assert len(set(t_sizes)) > 1 and sum(t_sizes) == 60 * k
    again = build_setting(split, cfg.replace(shard_cap="domain").resolved())  # seeded: the same twice
    assert all(torch.equal(a[0][1], b[0][1]) for a, b in zip(by_domain.source_parts, again.source_parts))
    iid = build_setting(split, cfg.replace(shard_cap="domain", dirichlet_concentration=None).resolved())
    assert {len(parts[0][1]) for parts in iid.source_parts} == {60}  # iid: equal either way
    with pytest.raises(ValueError, match=r"^shard_cap='nope' is invalid: one of device, domain"):
        cfg.replace(shard_cap="nope").resolved()


def test_every_layout_and_method_sees_the_same_samples(fmnist5):
    a = build_experiment(fmnist5(method="fssda"))
    b = build_experiment(fmnist5(method="fedgp"))
    c = build_experiment(fmnist5(method="fssda", params={"fssda": {"layout": "fda"}}))
    assert len(a.clients) == 3 and len(c.clients) == 4 and len(b.clients) == 4
    for i in range(3):
        assert torch.equal(a.clients[i].views["source0"][0], b.clients[i].views["train"][0])
        assert torch.equal(a.clients[i].views["source0"][0], c.clients[i].views["source0"][0])
    # fda layout: the target client holds every device's target shard (labels -1 where unlabelled)
    assert torch.equal(c.clients[3].views["target"][1], torch.cat([cl.views["target"][1] for cl in a.clients]))
    assert torch.equal(b.clients[3].views["train"][0], a.setting.target_train[0])


# ---------------------------------------------------------------- the recipe

def _device(fmnist5, **params):
    exp = build_experiment(fmnist5(params={"fssda": params}))
    return exp, exp.clients[0]


def _hp(exp, **kw):
    p = exp.algorithm
    return {**p._hp(train_target=True), **kw}


def test_a_batch_without_labelled_samples_still_moves_w_t_under_the_default_loss(fmnist5):
    exp, client = _device(fmnist5)
    x, y = client.views["target"]
    client.views["target"] = (x, torch.full_like(y, UNLABELLED))  # no labelled sample at all
    w0 = exp.initial_weights()
    teacher = w0 + 0.05 * torch.randn(w0.shape, generator=torch.Generator().manual_seed(0))
    inputs = {"target": w0, "source0": teacher}
    res = fssda_recipe(client, ClientTask(0, "fssda", 0, _hp(exp), data="target"), inputs)
    assert float(res.tensors["delta_target"].abs().max()) > 0  # mse: fake all-zero labels and soft labels act
    assert 0.0 <= res.scalars["imitation_lambda"] <= 1.0
    # open point 2: under cross-entropy with lambda = 1 (what per-batch min-norm gives without labels) nothing moves
    res = fssda_recipe(client, ClientTask(0, "fssda", 0, _hp(exp, loss="ce", imitation="fixed", imitation_lambda=1.0),
                                          data="target"), inputs)
    assert float(res.tensors["delta_target"].abs().max()) == 0.0


def test_the_default_optimiser_is_the_papers_sgd_at_lr_0_001(fmnist5):
    """FSSDA Sec. IV-A: "stochastic gradient descent with a learning rate of 0.001". One source step over the whole
    shard is w - 0.001 * grad(CE), written out here on the device's own model; Adam stays an option."""
    from torch.nn import functional as F

    cfg = fmnist5().resolved()
    assert cfg.params["fssda"]["optimizer"] == "sgd" and cfg.lr_source == cfg.lr_target == 1e-3
    assert fmnist5(lr_source=0.02).resolved().lr_source == 0.02  # a set learning rate stays
    exp, client = _device(fmnist5)
    x, y = client.views["source0"]
    w0 = exp.initial_weights()
    hp = {**exp.algorithm._hp(train_source=True), "batch_source": len(y)}  # one step: the whole shard
    res = fssda_recipe(client, ClientTask(0, "fssda", 0, hp, data="source0"), {"source0": w0, "target": w0})
    model = client.model
    client.layout.load_into(model, w0)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(F.cross_entropy(model(x), y), params)
    step = -1e-3 * torch.cat([g.reshape(-1) for g in grads])  # (M,): SGD's first step (momentum has no history)
    got = res.tensors["delta_source0"]
    # the delta is (w0 + step) - w0 in float32: rounding of the order of eps * |w0| per entry
    ulp = torch.finfo(torch.float32).eps * float(w0.abs().max())
    assert torch.allclose(got, step, rtol=1e-4, atol=2 * ulp)
    assert float((got - step).abs().max()) < 0.01 * float(step.abs().max())
    assert hp["optimizer"] == "sgd" and hp["sgd_momentum"] == 0.9


def test_fixed_lambda_spreads_the_rest_over_the_sources_and_adaptive_weights_are_on_the_simplex(fmnist5):
    hist = run(fmnist5(source_envs=(1, 4), params={"fssda": {"imitation": "fixed", "imitation_lambda": 0.3}}))
    for w in hist.rows[-1]["imitation_weights_i"]:
        assert w == pytest.approx([0.3, 0.35, 0.35], abs=1e-12)
    hist = run(fmnist5(source_envs=(1, 4)))
    for w in hist.rows[-1]["imitation_weights_i"]:
        assert sum(w) == pytest.approx(1.0, abs=1e-9) and min(w) >= 0
    assert len(hist.rows[-1]["teacher_accuracy"]) == 2


def test_ce_lambda_is_computed_once_per_epoch(fmnist5):
    """Under ce every batch of an epoch uses one lambda (Alg. 3 line 6): the logged mean is that value."""
    exp, client = _device(fmnist5, loss="ce")
    w0 = exp.initial_weights()
    inputs = {"target": w0, "source0": w0 + 0.05 * torch.randn(w0.shape, generator=torch.Generator().manual_seed(1))}
    seen = []
    import fda_ray.algorithms.fssda.methods as mod

    orig = mod.min_norm_weights
    try:
        mod.min_norm_weights = lambda g: seen.append(g.shape) or orig(g)
        res = fssda_recipe(client, ClientTask(0, "fssda", 0, _hp(exp, loss="ce"), data="target"), inputs)
    finally:
        mod.min_norm_weights = orig
    assert seen == [(2, exp.layout.size)]  # one call for the one epoch, over the whole-data gradients
    assert res.scalars["num_steps"] > 1


# ---------------------------------------------------------------- the server halves

def test_the_server_averages_devices_unweighted_unless_asked(fmnist5):
    exp = build_experiment(fmnist5(dirichlet_concentration=0.5, samples_per_client=None))
    algo, m = exp.algorithm, exp.layout.size
    state = algo.init_state(exp.initial_weights())
    res = {k: ClientResult(k, {"delta_source0": torch.full((m,), float(k + 1))}, {"loss": 1.0, "loss_source0": 1.0})
           for k in range(3)}
    new, _ = algo.aggregate(0, state, res)
    assert torch.allclose(new["source0"] - state["source0"], torch.full((m,), 2.0), atol=1e-6)  # (1 + 2 + 3) / 3
    exp = build_experiment(fmnist5(dirichlet_concentration=0.5, samples_per_client=None,
                                   params={"fssda": {"server_average": "weighted"}}))
    n = torch.tensor([len(parts[0][1]) for parts in exp.setting.source_parts], dtype=torch.float64)
    new, _ = exp.algorithm.aggregate(0, state, res)
    expect = float((n * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)).sum() / n.sum())
    assert torch.allclose(new["source0"] - state["source0"], torch.full((m,), expect, dtype=torch.float32), atol=1e-5)
    assert len(set(n.tolist())) > 1  # (the weights differ)


def test_fl_only_leaves_out_devices_without_a_labelled_sample(fmnist5):
    exp = build_experiment(fmnist5(method="fl_only", dirichlet_concentration=0.1, target_labelled_per_class=1))
    labelled = [int((y != UNLABELLED).sum()) for _, y in exp.setting.target_parts]
    assert exp.algorithm.target_clients == [k for k, c in enumerate(labelled) if c > 0]
    hist = run(fmnist5(method="fl_only", dirichlet_concentration=0.1, target_labelled_per_class=1))
    assert {r["phase"] for r in hist.rows} == {"main"}


def test_ssda_only_evaluates_the_mean_of_the_devices_own_models(fmnist5):
    hist = run(fmnist5(method="ssda_only"))
    row = hist.rows[-1]
    assert row["accuracy"] == pytest.approx(sum(row["device_accuracy_i"]) / 3, abs=1e-12)


def test_serial_trains_the_source_first_then_distils_from_it_frozen(fmnist5):
    hist = run(fmnist5(method="fssda_serial", rounds=2, params={"fssda": {"serial_source_rounds": 2}}))
    assert [r["phase"] for r in hist.rows] == ["source", "source", "main", "main"]
    acc = [r["accuracy"] for r in hist.rows]
    assert acc[0] == acc[1]  # W_t untouched while the source trains
    t = [r["teacher_accuracy"] for r in hist.rows]
    assert t[2] == t[3]  # the frozen teacher
    assert "imitation_lambda_i" in hist.rows[2] and "imitation_lambda_i" not in hist.rows[0]


def test_previous_soft_labels_use_one_step_per_round(fmnist5):
    a = run(fmnist5(rounds=1))
    b = run(fmnist5(rounds=1, params={"fssda": {"soft_labels_from": "previous"}}))
    # round 0: W_s(r-1) is the initial model, so the teachers differ and so does W_t; W_s is trained the same way
    assert not torch.equal(a.final_weights, b.final_weights)
    assert a.rows[0]["teacher_accuracy"] == b.rows[0]["teacher_accuracy"]


# ---------------------------------------------------------------- resume

@pytest.mark.parametrize("method", ["fssda", "ssda_only"])
def test_resume_equals_uninterrupted(fmnist5, method):
    """The server state (every source model and the target model) and SSDAOnly's per-device models in the clients'
    states survive a checkpoint."""
    assert_resume_equals_uninterrupted(fmnist5(method=method, rounds=3, source_envs=(1, 4)), after=2)


# ---------------------------------------------------------------- configuration errors

@pytest.mark.parametrize("kw,match", [
    ({"source_envs": (2,)}, r"source_envs=\(2,\) is invalid: environments other than test_env=2"),
    ({"source_envs": (9,)}, r"source_envs=9 is invalid: dataset 'fmnist-5' has environments 0 clean"),
    ({"dirichlet_concentration": 0.0}, r"dirichlet_concentration=0.0 is invalid: a finite number > 0"),
    ({"target_labelled_per_class": 0}, r"target_labelled_per_class=0 is invalid: an integer >= 1"),
    ({"partition": "domainbed", "num_sources": 4, "target_fraction": 0.1},
     r"partition='domainbed' is invalid for method fssda"),
    ({"method": "ssda_only", "params": {"fssda": {"layout": "fda"}}}, r"fssda.layout='fda' is invalid for method "
                                                                       r"ssda_only"),
    ({"params": {"fssda": {"kd_temperature": 0.0}}}, r"fssda.kd_temperature=0.0 is invalid"),
])
def test_bad_settings_are_one_line_errors(fmnist5, kw, match):
    with pytest.raises(ValueError, match=match):
        build_experiment(fmnist5(**kw))


# ---------------------------------------------------------------- grids

SEED_002_GRIDS = {"fssda-fmnist", "fssda-office31", "fssda-lambda", "fssda-temperature", "fssda-paradigm"}


def test_seed_002_grids_plan_table_one_and_its_figures():
    from fda_ray.experiments.trials import plan
    from fda_ray.papers.grids import GRIDS
    from fda_ray.papers.paper import TABLE1_002_OFFICE31

    office = GRIDS["fssda-office31"]
    trials = plan(office, "paper")
    assert len(trials) == len(office.rows) * 7 * 5  # 6 pairs + W+D -> A, 5 trials (FSSDA IV-B)
    by = {(t.row, t.value): t.config().resolved() for t in trials if t.seed == 0}
    a_w = by[("fssda_iid", 0.0)]
    assert (a_w.source_envs, a_w.test_env, a_w.model, a_w.model_weights, a_w.num_sources) == ((0,), 2, "resnet101",
                                                                                           "imagenet", 5)
    assert by[("fssda_iid", 6.0)].source_envs == (1, 2) and by[("fssda_iid", 6.0)].test_env == 0  # W + D -> A
    assert by[("fssda_noniid", 0.0)].dirichlet_concentration == 0.1 and a_w.dirichlet_concentration is None
    assert a_w.target_labelled_per_class == 3 and a_w.params["fssda"]["kd_temperature"] == 2.0
    assert set(TABLE1_002_OFFICE31) <= {r.key for r in office.rows}
    assert office.value_label(3.0) == "Webcam->DSLR" and TABLE1_002_OFFICE31["fssda_iid"][3.0] == 98.45
    # the temperature grid sets the family's parameter per column; the lambda grid fixes it per row
    temp = {t.value: t.config().resolved() for t in plan(GRIDS["fssda-temperature"], "paper") if t.seed == 0
            and t.row == "fssda_iid"}
    assert {v: c.params["fssda"]["kd_temperature"] for v, c in temp.items()} == {1.0: 1.0, 2.0: 2.0, 4.0: 4.0, 8.0: 8.0}
    lam = {t.row: t.config().resolved().params["fssda"] for t in plan(GRIDS["fssda-lambda"], "paper", values=[0.0])
           if t.seed == 0}
    assert (lam["fssda_lambda0.9_noniid"]["imitation"], lam["fssda_lambda0.9_noniid"]["imitation_lambda"]) == ("fixed", 0.9)
    assert lam["fssda_iid"]["imitation"] == "adaptive"
    # the table's FSSDA trials are the lambda grid's and the paradigm grid's adaptive ones (one run, three tables)
    keys = lambda g: {t.key for t in plan(GRIDS[g], "paper") if t.row == "fssda_iid" and t.value == 0.0}
    assert keys("fssda-fmnist") == keys("fssda-lambda") == keys("fssda-paradigm")
    # Office-31 runs the paper's SGD at lr 0.001; the FMNIST-5 grids set Adam on the FSSDA family's rows only (from
    # scratch SGD stays at chance), so FedGP's trials are the same as without it
    from fda_ray.algorithms import ALGORITHMS
    from fda_ray.papers.grids import FSSDA_FAMILY

    assert set(FSSDA_FAMILY) == {n for n in ALGORITHMS.names() if ALGORITHMS.get(n).family == "fssda"}
    assert (a_w.params["fssda"]["optimizer"], a_w.lr_source, a_w.lr_target) == ("sgd", 1e-3, 1e-3)
    fm = {t.row: t.config().resolved() for t in plan(GRIDS["fssda-fmnist"], "paper", values=[0.0]) if t.seed == 0}
    assert {r: c.params["fssda"]["optimizer"] for r, c in fm.items() if c.method in FSSDA_FAMILY} == \
        {r: "adam" for r in fm if fm[r].method in FSSDA_FAMILY} and len(fm) == 10
    assert "fssda" not in GRIDS["fssda-fmnist"].rows[3].params.get("params", {})  # fedgp_iid: untouched


def test_a_grid_of_settings_needs_every_columns_fields():
    from fda_ray.papers.grids import Grid

    with pytest.raises(ValueError, match="value_fields must give the fields of every value"):
        Grid(name="x", dataset="fmnist-5", variable="transfer", values=(0.0, 1.0), rows=(), seeds={},
             profiles={"paper": {}}, value_fields={0.0: {"test_env": 1}})


@pytest.mark.slow
def test_the_office31_table_command_runs_on_a_generated_tree(tmp_path, capsys):
    """README's Office-31 command (the quick profile, a small model: no ResNet-101 file here) through the sweep's
    local backend on a generated <root>/office31/{amazon,dslr,webcam}/images/<class>/ tree: Table I's cells and
    the paper's numbers beside them."""
    import json

    from fda_ray.experiments import sweep
    from test_domainbed import _folder_tree

    for env in ("amazon", "dslr", "webcam"):
        _folder_tree(tmp_path / "office31" / env / "images", [""], ["back_pack", "bike"], per=8)
    out = tmp_path / "sweep"
    argv = ["--grid", "fssda-office31", "--profile", "quick", "--data-dir", str(tmp_path), "--model", "simple_cnn",
            "--num-sources", "2", "--methods", "fssda_iid,fl_only_iid", "--values", "3,6", "--backend", "local",
            "--workers", "1", "--no-figures", "--json", "--fssda-optimizer", "sgd", "--out", str(out)]
    assert sweep.main(argv) == 0
    printed = capsys.readouterr().out
    summary = json.loads(printed[printed.index("{"):])
    assert summary["trials_done"] == summary["trials"] == 4 and summary["failures"] == []
    cells = summary["cells"]
    assert cells["fssda_iid"]["3"]["paper"] == 98.45 and cells["fssda_iid"]["6"]["paper"] == 74.40  # W->D, W+D->A
    assert 0 <= cells["fl_only_iid"]["3"]["mean"] <= 100
    trial = json.loads(next((out / "trials").glob("fssda_iid-transfer6-*/trial.json")).read_text())
    assert trial["params"]["source_envs"] in ([1, 2], (1, 2)) and trial["params"]["test_env"] == 0
    assert trial["params"]["params"]["fssda"]["optimizer"] == "sgd"
