"""The algorithm contract and the personalised-FL baselines (issue 15): every registered algorithm and recipe on
tiny data, the pure halves against hand-computed cases, the recipes' limits, resume == uninterrupted, and the
generated flags. (Serial == Ray with a killed actor is in test_ray.py.)"""
from __future__ import annotations

import io
import math

import pytest
import torch
from conftest import same_state

from fda_ray.algorithms import ALGORITHMS, ClientResult, ClientTask
from fda_ray.algorithms.personalised.methods import capacity_sizes, head_mask, interpolate, knn_probs
from fda_ray.train.client import RECIPES, run_task
from fda_ray.runtime.engine import SerialExecutor, build_experiment, run, run_rounds, start_run
from fda_ray.experiments.records import resume_misfit


def personal(tiny, method: str, **kw):
    """A tiny config of a personalised method (no warm-up: tiny's 1 round is the FDA methods')."""
    return tiny(method=method, warmup_rounds=None, **kw)


@pytest.mark.parametrize("method", ALGORITHMS.names())
def test_every_registered_algorithm_runs_on_tiny_data(tiny, fmnist5, fedwca5, method, monkeypatch):
    seen = set()
    for name in RECIPES.names():
        orig = RECIPES.get(name)

        def spy(client, task, inputs, _orig=orig, _name=name):
            seen.add(_name)
            return _orig(client, task, inputs)

        monkeypatch.setitem(RECIPES._items, name, spy)
    cls = ALGORITHMS.get(method)
    if cls.family == "fssda":  # FSSDA's methods need domains split over devices
        cfg = fmnist5(method=method, noise=0.3, params={"fssda": {"serial_source_rounds": 1}})
    elif cls.family == "fedwca":  # FedWCA's: one source domain, unlabelled clients of the others
        cfg = fedwca5(method=method)
    else:
        cfg = tiny(method=method, noise=0.3, finetune_epochs=1, batch_target=8,
                   warmup_rounds=None if cls.family != "fda" else 1,
                   aux_alpha=0.0 if cls.family == "healthcare" else None)  # (Fashion-MNIST has no auxiliary labels)
    exp, executor, startup = start_run(cfg.resolved())  # (what run(cfg) does, with the checkpoints kept)
    checkpoints: list[dict] = []
    hist = run_rounds(exp, executor, checkpoint=checkpoints.append, startup=startup)
    assert hist.rows and all(0.0 <= r["accuracy"] <= 1.0 and math.isfinite(r["loss"]) for r in hist.rows)
    assert torch.isfinite(hist.final_weights).all()
    # Every checkpoint the run wrote fits a run of its config (what --resume checks before adopting a state.pt),
    # and one whose model weights have another length does not.
    assert len(checkpoints) == len(hist.rows) and all(resume_misfit(c, exp) is None for c in checkpoints)
    first = next(iter(checkpoints[-1]["state"]))
    bad = {**checkpoints[-1], "state": {**checkpoints[-1]["state"], first: torch.zeros(3)}}
    assert f"its server state's {first!r} is torch.float32 (3,), this run's model" in resume_misfit(bad, exp)
    # The rows are plain data: a trial's checkpoint (state.pt, which carries them) loads with weights_only, as
    # --resume and a search's stopped trials load it (a numpy scalar in a row made FedWCA's refuse to load).
    buf = io.BytesIO()
    torch.save({"rows": hist.rows}, buf)
    buf.seek(0)
    assert torch.load(buf, weights_only=True)["rows"] == hist.rows
    recipe = getattr(cls, "recipe", "epoch")
    assert recipe in seen and seen <= {recipe, "epoch"}  # (ditto's and apfl's recipes run "epoch" inside)
    defaults = {**cls.Params().to_dict(), **cfg.params.get(cls.family, {})}
    # Its own family's parameters, every field filled, and the FDA family's, which every resolved config carries
    own = {f: v for f, v in cfg.resolved().params.items() if f != "fda"}
    assert own == ({cls.family: defaults} if cls.family not in ("fda", "personalised") else {})
    assert cfg.resolved().params["fda"]["finetune_epochs"] == (cfg.rounds if cfg.finetune_epochs is None else 1)


def test_every_recipe_belongs_to_an_algorithm():
    planned = {getattr(ALGORITHMS.get(m), "recipe", "epoch") for m in ALGORITHMS.names()}
    assert set(RECIPES.names()) == planned | {"epoch"}


# ---------------------------------------------------------------- the pure halves

def test_fedavg_all_aggregates_over_every_client_by_sample_count(tiny):
    exp = build_experiment(personal(tiny, "fedavg_all", samples_per_client=64, target_labelled=16))
    algo = exp.algorithm
    m = exp.layout.size
    # 3 sources of 64 samples and a target of 16: p = (64, 64, 64, 16) / 208
    assert algo.weights.tolist() == pytest.approx([64 / 208] * 3 + [16 / 208], abs=1e-15)
    deltas = {k: ClientResult(k, {"delta": torch.full((m,), float(k + 1))}, {"loss": 0.5}) for k in range(4)}
    state = {"global": torch.zeros(m)}
    new, metrics = algo.aggregate(0, state, deltas)
    want = (64 * (1 + 2 + 3) + 16 * 4) / 208  # sum_k p_k delta_k
    torch.testing.assert_close(new["global"], torch.full((m,), want), rtol=1e-6, atol=0)
    assert metrics == {"train_loss_target": 0.5}


def test_knn_probabilities_and_interpolation_by_hand():
    store = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 3.0]])  # (S=3, D=2)
    labels = torch.tensor([0, 1, 1])
    query = torch.tensor([[0.0, 0.0]])
    # k = 2 nearest: d = 0 (label 0) and 1 (label 1); s = exp(-d / (D * scale)) = 1, exp(-0.5)
    p = knn_probs(query, store, labels, k=2, num_classes=3, scale=1.0)
    s1 = math.exp(-0.5)
    torch.testing.assert_close(p, torch.tensor([[1 / (1 + s1), s1 / (1 + s1), 0.0]], dtype=torch.float64))
    # scale 2 halves the exponent; k larger than the store is capped at S
    p3 = knn_probs(query, store, labels, k=10, num_classes=3, scale=2.0)
    s = [1.0, math.exp(-1 / 4), math.exp(-9 / 4)]
    torch.testing.assert_close(p3, torch.tensor([[s[0], s[1] + s[2], 0.0]], dtype=torch.float64) / sum(s))
    base = torch.tensor([[0.2, 0.3, 0.5]], dtype=torch.float64)
    torch.testing.assert_close(interpolate(p, base, 0.25), 0.25 * p + 0.75 * base)
    assert torch.equal(interpolate(p, base, 0.0), base)
    # far neighbours: the weights are relative to the nearest, so nothing underflows to 0 / 0
    far = knn_probs(torch.tensor([[1e4, 1e4]]), store, labels, k=3, num_classes=3)
    assert torch.isfinite(far).all() and far.sum().item() == pytest.approx(1.0)


# ---------------------------------------------------------------- the recipes' limits

def _round0(tiny, method, **params):
    exp = build_experiment(personal(tiny, method, noise=0.2, params={method: params} if params else {}))
    algo, t = exp.algorithm, exp.target_index
    task = next(x for x in algo.plan_round(0, algo.init_state(exp.initial_weights())).tasks if x.client == t)
    w0 = exp.initial_weights()
    return exp, task, w0


def test_ditto_personal_model_is_one_proximal_epoch_from_the_global(tiny):
    # lambda = 0: the personal epoch is a plain epoch from w with the "personal" seeds
    exp, task, w0 = _round0(tiny, "ditto", lam=0.0)
    t = exp.target_index
    run_task(exp.clients[t], task, {"global": w0})
    v = exp.clients[t].state["personal"]
    plain = ClientTask(t, "epoch", 0, {"lr": task.hparams["lr"], "batch": task.hparams["batch"], "send": "weights"},
                       purpose="personal")
    exp2, _, _ = _round0(tiny, "ditto", lam=0.0)
    torch.testing.assert_close(v, run_task(exp2.clients[t], plain, {"global": w0}).tensors["weights"], rtol=0, atol=0)
    # a large lambda pulls v towards w: the personal model moves less than with lambda = 0
    exp3, task3, _ = _round0(tiny, "ditto", lam=100.0)
    run_task(exp3.clients[t], task3, {"global": w0})
    assert (exp3.clients[t].state["personal"] - w0).norm() < 0.5 * (v - w0).norm()


def test_apfl_alpha_limits(tiny):
    """alpha = 1: v trains on its own loss with the same batches and a fresh Adam, exactly as w does;
    alpha = 0: v gets no gradient and stays the global model."""
    for alpha in (1.0, 0.0):
        exp, task, w0 = _round0(tiny, "apfl", alpha=alpha)
        res = run_task(exp.clients[exp.target_index], task, {"global": w0})
        v = exp.clients[exp.target_index].state["personal"]
        w_new = w0 + res.tensors["delta"]
        want = w_new if alpha == 1.0 else w0
        torch.testing.assert_close(v, want, rtol=1e-6, atol=1e-6)
        assert not torch.equal(w_new, w0)


def test_apfl_keeps_the_personal_models_batchnorm_statistics_apart(tiny):
    """On a model whose BatchNorm trains (resnet18 without weights), v's forward updates v's own running statistics,
    as FedTorch's two modules do: at alpha = 0 (v = w) the target's w update equals a plain epoch's, statistics
    included (the v-step's forward moved w's), and v's statistics move from the round's start (they stayed at
    round 0's)."""
    small = dict(model="resnet18", samples_per_client=16, target_labelled=8, test_samples=20, batch_source=8,
                 batch_target=4)
    exp, task, w0 = _round0(lambda **kw: tiny(**{**kw, **small}), "apfl", alpha=0.0)
    t = exp.target_index
    apfl = run_task(exp.clients[t], task, {"global": w0}).tensors["delta"]
    plain = build_experiment(personal(lambda **kw: tiny(**{**kw, **small}), "fedavg_all", noise=0.2))
    task2 = next(x for x in plain.algorithm.plan_round(0, plain.algorithm.init_state(w0)).tasks if x.client == t)
    want = run_task(plain.clients[t], task2, {"global": w0}).tensors["delta"]
    stats = torch.zeros_like(w0, dtype=torch.bool)
    for i, n in enumerate(exp.layout.names):
        if "running_" in n:
            stats[exp.layout.bounds[i]:exp.layout.bounds[i + 1]] = True
    assert stats.any()
    torch.testing.assert_close(apfl, want, rtol=0, atol=0)
    exp, task, w0 = _round0(lambda **kw: tiny(**{**kw, **small}), "apfl", alpha=0.5)
    run_task(exp.clients[t], task, {"global": w0})
    v = exp.clients[t].state["personal"]
    assert not torch.equal(v[stats], w0[stats])


def test_ditto_and_apfl_keep_fedavg_alls_global_model_and_report_their_personal_one(tiny):
    """Their global model w is FedAvg over every client, untouched by the personal model v (the same code path as
    fedavg_all, so equal to the bit); Ditto's row evaluates v, APFL's the mixture alpha v + (1 - alpha) w; APFL at
    alpha 0 is fedavg_all's model."""
    from fda_ray.train.evaluation import Evaluator

    kw = dict(noise=0.2, rounds=2)
    avg = run(personal(tiny, "fedavg_all", **kw))
    for method, params in (("ditto", {"lam": 1.0}), ("apfl", {"alpha": 0.5}), ("apfl", {"alpha": 0.0})):
        exp = build_experiment(personal(tiny, method, params={method: params}, **kw))
        ex = SerialExecutor(exp.clients)
        hist = run_rounds(exp, ex)
        assert torch.equal(hist.final_weights, avg.final_weights), method
        v = ex.client_states()[exp.target_index]["personal"]
        a = params.get("alpha", 1.0)  # (Ditto: v alone)
        evaluated = Evaluator(exp).target(a * v + (1 - a) * hist.final_weights, kw["rounds"] - 1)
        assert hist.rows[-1]["accuracy"] == evaluated["accuracy"], (method, params)
        if a == 0.0:
            assert hist.rows[-1]["accuracy"] == avg.rows[-1]["accuracy"]


def test_fedrep_keeps_the_global_head_and_each_client_its_own(tiny):
    cfg = personal(tiny, "fedrep", rounds=2, params={"fedrep": {"head_epochs": 2}})
    exp = build_experiment(cfg)
    ex = SerialExecutor(exp.clients)
    hist = run_rounds(exp, ex)
    mask = head_mask(exp.model, exp.layout)
    assert mask.sum() == 84 * 10 + 10  # simple_cnn's fc3
    w0 = exp.initial_weights()
    assert torch.equal(hist.final_weights[mask], w0[mask])  # the global head is never averaged
    assert not torch.equal(hist.final_weights[~mask], w0[~mask])
    heads = [st["head"] for st in ex.client_states()]
    assert all(h.shape == (int(mask.sum()),) for h in heads) and not torch.equal(heads[0], heads[-1])


def test_fedreps_body_epochs_train_the_body_that_many_epochs_and_one_is_the_recorded_default(tiny):
    """lgcollins/FedRep's scripts run 5 body epochs (--local_rep_ep), Auto-weighted FDA's setting one: a flag.
    One epoch is the default, with the trial keys recorded before the flag existed; two epochs take twice the
    body's steps and move the body elsewhere."""
    from fda_ray.experiments.records import trial_key

    done = {}
    for body_epochs in (1, 2):
        cfg = personal(tiny, "fedrep", rounds=1, params={"fedrep": {"head_epochs": 1, "body_epochs": body_epochs}})
        exp = build_experiment(cfg)
        ex = SerialExecutor(exp.clients)
        hist = run_rounds(exp, ex)
        body = ~head_mask(exp.model, exp.layout)
        done[body_epochs] = ([st["steps_total"] for st in ex.client_states()], hist.final_weights[body])
    (steps1, body1), (steps2, body2) = done[1], done[2]
    assert all(n > 0 for n in steps1) and steps2 == [2 * n for n in steps1], (steps1, steps2)
    assert not torch.equal(body1, body2)
    base = {k: v for k, v in cfg.to_dict().items() if k != "params"}
    key = lambda fedrep: trial_key("fedrep", "noise", 0.0, 0, {**base, "params": {"fedrep": fedrep}})  # noqa: E731
    assert key({"head_epochs": 1, "body_epochs": 1}) == key({"head_epochs": 1})
    assert key({"head_epochs": 1, "body_epochs": 2}) != key({"head_epochs": 1})


@pytest.mark.parametrize("model", ["simple_cnn", "mnist_cnn", "shot_lenet"])
def test_the_head_is_the_layer_that_gives_the_output(model):
    """FedRep's head and kNN-Per's embedding point: the output layer's tensors, exactly (on the SHOT models, whose
    classifier is weight-normalised, it was the bottleneck's Linear in the middle of the body)."""
    from fda_ray.core.layout import ParamLayout
    from fda_ray.train.models import MODELS

    net = MODELS.get(model)((1, 28, 28) if model != "shot_lenet" else (3, 28, 28), 10)
    layout = ParamLayout.from_model(net)
    mask = head_mask(net, layout)
    names = [n for i, n in enumerate(layout.names) if mask[int(layout.offsets[i])]]
    last = list(net.named_modules())[-1][0]  # (each model's output layer is its last module)
    assert names and all(n.rsplit(".", 1)[0] == last for n in names), names
    assert int(mask.sum()) == sum(p.numel() for n, p in net.named_parameters() if n.rsplit(".", 1)[0] == last)


def test_knn_per_datastore_sizes_are_knn_pers_floor():
    """knn-per's client.py sizes the datastore int(capacity * n_train_samples) over capacities 0, 0.1, ..., 1: 23
    entries give 0, 2, 4, 6, 9, 11, 13, 16, 18, 20, 23 (fda-ray rounded: 5 at 0.2, 21 at 0.9)."""
    assert capacity_sizes(10, 23) == [0, 2, 4, 6, 9, 11, 13, 16, 18, 20, 23]
    assert capacity_sizes(10, 23) == [int(c * 23) for c in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)]
    assert capacity_sizes(20, 100) == list(range(0, 101, 5))


def test_knn_per_is_fedavg_all_then_a_knn_row(tiny):
    cfg = personal(tiny, "knn_per", noise=0.3, rounds=2)
    knn = run(cfg)
    avg = run(personal(tiny, "fedavg_all", noise=0.3, rounds=2))
    strip = lambda rows: [{k: v for k, v in r.items() if "seconds" not in k} for r in rows]  # noqa: E731
    assert strip(knn.rows[:-1]) == strip(avg.rows) and torch.equal(knn.final_weights, avg.final_weights)
    last = knn.rows[-1]
    assert last["phase"] == "knn" and last["knn_selection"] == "test" and last["knn_datastore"] == 32
    # the paper's selection: the best of the grid on the test set, so never below the base model
    assert last["accuracy"] == last["accuracy_test_selected"] >= last["accuracy_base"]
    # accuracy_base is the plain evaluation of the final model in the knn round
    exp = build_experiment(cfg)
    from fda_ray.train.evaluation import Evaluator

    assert last["accuracy_base"] == Evaluator(exp).target(knn.final_weights, 2)["accuracy"]


def test_knn_per_validation_selection_holds_out_labelled_samples(tiny):
    cfg = personal(tiny, "knn_per", rounds=1, params={"knn_per": {"selection": "validation", "val_share": 0.25}})
    exp = build_experiment(cfg)
    assert exp.clients[exp.target_index].num_samples() == 24 and len(exp.algorithm.validation[0]) == 8
    last = run(cfg).rows[-1]
    assert last["knn_selection"] == "validation" and last["knn_datastore"] == 24
    assert last["accuracy"] <= last["accuracy_test_selected"]  # the test-selected value is optimistic


def test_personalised_methods_refuse_a_warmup(tiny):
    with pytest.raises(ValueError, match="warmup_rounds=1 is invalid for method ditto: the personalised baselines "
                                         "have no warm-up"):
        build_experiment(tiny(method="ditto", warmup_rounds=1))


@pytest.mark.parametrize("method,stop_after", [("fedrep", 0), ("ditto", 1), ("apfl", 1)])
def test_personalised_resume_equals_uninterrupted(tiny, method, stop_after):
    """The personal state (heads, personal models) is in the checkpoint's client states."""
    cfg = personal(tiny, method, rounds=3, noise=0.2, params={"fedrep": {"head_epochs": 2}} if method == "fedrep" else {})
    saved: list[dict] = []
    exp = build_experiment(cfg)
    full_ex = SerialExecutor(exp.clients)
    full = run_rounds(exp, full_ex, checkpoint=saved.append)
    exp2 = build_experiment(cfg)
    ex2 = SerialExecutor(exp2.clients)
    resumed = run_rounds(exp2, ex2, resume=saved[stop_after])
    assert [(r["round"], r["accuracy"], r["loss"]) for r in resumed.rows] == \
        [(r["round"], r["accuracy"], r["loss"]) for r in full.rows]
    assert torch.equal(resumed.final_weights, full.final_weights)
    assert same_state(ex2.client_states(), full_ex.client_states())


# ---------------------------------------------------------------- the generated flags

def test_family_flags_set_params_and_bad_values_are_one_line(tiny, fmnist_dir, capsys):
    from fda_ray.experiments.cli import config_from_args, main, parser

    a = parser().parse_args(["--method", "knn_per", "--knn-per-k", "5", "--knn-per-selection", "validation"])
    cfg = config_from_args(a)
    assert cfg.params == {"knn_per": {"k": 5, "selection": "validation"}}
    assert cfg.resolved().params["knn_per"] == {"k": 5, "scale": 1.0, "grid_step": 0.1, "selection": "validation",
                                                "val_share": 0.2}
    for argv, msg in ((["--method", "ditto", "--ditto-lam", "-1"], "error: ditto.lam=-1.0 is invalid: a number >= 0.0"),
                      (["--method", "fedrep", "--fedrep-head-epochs", "1.5"],
                       "error: argument --fedrep-head-epochs: fedrep.head_epochs='1.5' is invalid: an integer"),
                      (["--method", "knn_per", "--knn-per-grid-step", "0.3"],
                       "error: knn_per.grid_step=0.3 is invalid: 1 / an integer (0.1, 0.05, ...)")):
        assert main(argv) == 2
        err = [x for x in capsys.readouterr().err.strip().splitlines() if "cpp_extension" not in x]
        assert err == [msg]
    # a flag of another family: ignored, and said so in one line (a serial run: the command line's default executor
    # would start a local Ray for it)
    tiny_flags = ["--data-dir", str(fmnist_dir), "--num-sources", "3", "--rounds", "1", "--samples-per-client", "128",
                  "--test-samples", "100", "--target-labelled", "32", "--executor", "serial"]
    assert main(["--method", "fedavg_all", "--apfl-alpha", "0.3", *tiny_flags]) == 0
    assert "warning: --apfl-alpha not used by method fedavg_all" in capsys.readouterr().err


def test_tune_search_space_takes_family_params():
    from ray import tune

    import fda_ray.experiments.tune as ft

    space = ft.search_space(method="apfl", params={"apfl": {"alpha": tune.grid_search([0.25, 0.75])}})
    assert space["params"]["apfl"]["alpha"] == {"grid_search": [0.25, 0.75]}
    cfg = ft.config_from_params({"method": "apfl", "params": {"apfl": {"alpha": 0.25}}})
    assert cfg.params["apfl"] == {"alpha": 0.25} and set(cfg.params) == {"apfl", "fda"}
    with pytest.raises(ValueError, match="search space field apfl.beta is invalid: apfl's parameters are alpha"):
        ft.search_space(params={"apfl": {"beta": 0.1}})
    with pytest.raises(ValueError, match="apfl.alpha=2 is invalid: a number in"):
        ft.config_from_params({"method": "apfl", "params": {"apfl": {"alpha": 2}}})


def test_sweep_grid_rows_and_overrides_carry_family_params():
    from fda_ray.experiments.trials import plan
    from fda_ray.papers.grids import Grid, Row

    grid = Grid("pfl", "fashion-mnist", "noise", (0.0, 0.4),
                (Row("ditto_lam0.1", "Ditto 0.1", "ditto", {"params": {"ditto": {"lam": 0.1}}}),
                 Row("ditto", "Ditto", "ditto"), Row("knn", "kNN-Per", "knn_per")),
                seeds={}, profiles={"quick": {"rounds": 1}})
    trials = plan(grid, "quick", overrides={"params": {"knn_per": {"k": 5}}})
    by_row = {t.row: t for t in trials if t.value == 0.4}
    assert by_row["ditto_lam0.1"].config().resolved().params["ditto"] == {"lam": 0.1}
    assert by_row["ditto"].config().resolved().params["ditto"] == {"lam": 1.0}
    assert by_row["knn"].config().resolved().params["knn_per"]["k"] == 5
    # a family's parameter is part of a trial's identity
    assert by_row["ditto_lam0.1"].key.split("-")[-1] != by_row["ditto"].key.split("-")[-1]
    with pytest.raises(ValueError, match=r"ditto.lam=2.0 is invalid here: row 'ditto_lam0.1' sets it"):
        plan(grid, "quick", overrides={"params": {"ditto": {"lam": 2.0}}})


@pytest.mark.parametrize("method", ALGORITHMS.names())
def test_planned_rounds_count_the_rows(tiny, fmnist5, fedwca5, method):
    cls = ALGORITHMS.get(method)
    if cls.family == "fssda":
        cfg = fmnist5(method=method, params={"fssda": {"serial_source_rounds": 2}}).resolved()
    elif cls.family == "fedwca":
        cfg = fedwca5(method=method).resolved()
    else:
        cfg = tiny(method=method, finetune_epochs=2, warmup_rounds=None if cls.family != "fda" else 1,
                   aux_alpha=0.0 if cls.family == "healthcare" else None).resolved()
    assert cls.planned_rounds(cfg) == len(run(cfg).rows)
