"""FedWCA as an algorithm: the domain_clients partition, SHOT's models, the weightings' initial models,
the server's clusters and soft models (A by either reading), the pseudo-labels' defaults (SHOT's obtain_label, written
out), Local's relabelling every epoch, the source-model cache, per-client evaluation, resume, errors, the grids.
The pure pieces (FINCH, SHOT, the cluster weights) are in test_fedwca_core.py; serial == Ray in test_ray.py."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from fda_ray.algorithms.fedwca import methods as fw
from fda_ray.algorithms.fedwca.cluster_weights import init_weights, server_mixing, soft_cluster_models
from fda_ray.core.config import RunConfig
from fda_ray.data.base import UNLABELLED
from fda_ray.runtime.engine import run
from fda_ray.runtime.experiment import build_experiment
from fda_ray.train.models import ShotNet, WeightNormLinear, build_model

SEED_003_GRIDS = {"fedwca-fmnist", "fedwca-ablation", "fedwca-temperatures", "fedwca-digit-five", "fedwca-pacs",
                  "fedwca-office-home", "fedwca-pacs-ablation"}


def test_domain_clients_split_gives_every_other_domain_unlabelled_clients(fedwca5):
    exp = build_experiment(fedwca5())
    s = exp.setting
    assert s.client_domains == (0, 0, 2, 2, 3, 3, 4, 4)  # fmnist-m (1) is the source
    assert len(s.sources) == 1 and len(s.sources[0][1]) == 80  # 40 x 2 clients: a target domain's size
    for (xt, yt), (xv, yv), (xe, ye) in s.client_parts:
        assert (len(yt), len(yv), len(ye)) == (25, 6, 9)  # int(0.64 * 40), int(0.16 * 40), the rest
        assert bool((yt == UNLABELLED).all()) and bool((yv >= 0).all()) and bool((ye >= 0).all())
        rows = torch.cat([xt, xv, xe]).flatten(1)
        assert len(torch.unique(rows, dim=0)) == 40  # train, validation and test are disjoint samples
    # the two clients of a domain hold different samples; the same seed draws the same split
    a, b = s.client_parts[0][2][0], s.client_parts[1][2][0]
    assert not torch.equal(a, b)
    again = build_experiment(fedwca5()).setting
    assert all(torch.equal(p[2][0], q[2][0]) for p, q in zip(s.client_parts, again.client_parts))
    # clients 1..K hold the parts, client 0 the source
    assert exp.algorithm.num_clients(exp.cfg) == len(exp.clients) == 9


def test_weight_norm_classifier_and_shot_net():
    torch.manual_seed(0)
    wn = WeightNormLinear(6, 3)
    x = torch.randn(4, 6)
    assert torch.allclose(wn(x), x @ wn.weight_v.T + wn.bias, atol=1e-6)  # starts as the plain Linear
    with torch.no_grad():
        wn.weight_v.mul_(5.0)  # the direction is what counts: the scale lives in weight_g
    assert torch.allclose(wn(x), x @ (wn.weight_v / 5.0).T + wn.bias, atol=1e-5)
    net = build_model("shot_lenet", (3, 28, 28), 10)
    assert isinstance(net, ShotNet) and net.features(torch.zeros(2, 3, 28, 28)).shape == (2, 256)
    assert build_model("shot_lenet", (3, 32, 32), 10).bottleneck[0].in_features == 50 * 5 * 5


def test_part_masks_pick_the_classifier_and_the_first_layer(fedwca5):
    exp = build_experiment(fedwca5())
    cls, first = fw.part_masks(exp.layout)
    model = exp.model
    assert int(cls.sum()) == sum(p.numel() for n, p in model.named_parameters() if n.startswith("classifier."))
    conv = model.backbone[0]
    assert int(first.sum()) == conv.weight.numel() + conv.bias.numel()
    assert not bool((cls & first).any())


def _spy_start(monkeypatch):
    """Replace the local training by the identity, recording the model it would start from."""
    seen = {}

    def adapt(client, task, start, labels, partners, h):
        seen[client.index] = start.clone()
        return start.clone(), 0, 0.0

    monkeypatch.setattr(fw, "_adapt", adapt)
    return seen


@pytest.mark.parametrize("weighting", fw.WEIGHTINGS)
def test_each_weighting_starts_from_its_mix_of_cluster_models(fedwca5, monkeypatch, weighting):
    """Round 2 (FedWCA's round 1) with the local training replaced by the identity: each client's initial model is the
    weighting's combination (FedWCA Table 3) of the models the server sent, with the weights the client sent back."""
    cfg = fedwca5(rounds=2, fedwca={"weighting": weighting})
    exp = build_experiment(cfg)
    algo = exp.algorithm
    from fda_ray.runtime.executors import SerialExecutor
    from fda_ray.runtime.loop import run_rounds

    states = {}
    run_rounds(exp, SerialExecutor(exp.clients), checkpoint=lambda c: states.setdefault(c["next_round"], c))
    state = states[2]["state"]  # after the clustering round
    seen = _spy_start(monkeypatch)
    plan = algo.plan_round(2, state)
    results = {}
    from fda_ray.train.client import run_task

    for t in plan.tasks:
        results[t.client] = run_task(exp.clients[t.client], t, {n: state[n] for n in t.inputs})
    c = int(state["num_clusters"])
    clusters = [state[f"cluster{j}"].double() for j in range(c)]
    soft = [state[f"soft{j}"].double() for j in range(c)] if weighting == "wca" else None
    for k in range(1, algo.k + 1):
        own = int(state["assign"][k - 1])
        got, res = seen[k].double(), results[k].tensors
        if weighting in ("wca", "local"):
            models = soft if weighting == "wca" else clusters
            alpha, beta = res["alpha"], res["beta"]
            assert math.isclose(float(alpha.sum()), 1.0, abs_tol=1e-12)
            bar = sum(a * m for a, m in zip(alpha.tolist(), models))
            want = beta[0] * clusters[own] + beta[1] * bar
        elif weighting == "one_hot":
            want = clusters[own]
        else:
            equal = sum(clusters) / c
            if weighting == "equal":
                want = equal
            elif weighting == "one_equal_a":
                want = res["beta"][0] * clusters[own] + res["beta"][1] * equal
            else:
                w = [0.8 if j == own else 0.2 / (c - 1) for j in range(c)] if c > 1 else [1.0]
                want = sum(wj * m for wj, m in zip(w, clusters))
        scale = max(float(m.abs().max()) for m in clusters)
        assert torch.allclose(got, want, rtol=0, atol=1e-6 * scale), (weighting, k)


@pytest.mark.parametrize("norm", ["columns", "rows"])
def test_fedwca_server_keeps_g_fixed_and_mixes_soft_models_by_eq2(fedwca5, norm):
    cfg = fedwca5(rounds=3, fedwca={"cross_cluster_norm": norm})
    exp = build_experiment(cfg)
    from fda_ray.runtime.executors import SerialExecutor
    from fda_ray.runtime.loop import run_rounds

    saved = {}
    hist = run_rounds(exp, SerialExecutor(exp.clients), checkpoint=lambda c: saved.setdefault(c["next_round"], c))
    state = saved[4]["state"]
    cls, _ = fw.part_masks(exp.layout)
    c = int(state["num_clusters"])
    for j in range(c):  # the classifier is the source's, exactly, in every model the server holds
        assert torch.equal(state[f"cluster{j}"][cls], state["source"][cls])
        assert torch.equal(state[f"soft{j}"][cls], state["source"][cls])
    row = hist.rows[-1]
    alpha, beta = torch.tensor(row["alpha"]), torch.tensor(row["beta"])
    a, b = server_mixing(alpha, beta, state["assign"], c, norm)  # the configured reading reaches the server
    assert torch.allclose(a.sum(0), torch.ones(c, dtype=torch.float64))  # open point 1: columns sum to 1
    assert torch.equal(state["mix_a"], a)
    models = torch.stack([state[f"cluster{j}"] for j in range(c)])
    want = soft_cluster_models(models, a, b)
    for j in range(c):
        body = ~cls
        assert torch.allclose(state[f"soft{j}"][body], want[j][body], rtol=0, atol=1e-6)
    assert row["clusters"] == state["assign"].tolist() and row["num_clusters"] == c
    assert all(0 <= x <= 1 for x in row["client_accuracy"])


@pytest.mark.parametrize("norm", ["columns", "rows"])
def test_the_server_forms_a_by_the_configured_reading(fedwca5, norm):
    """aggregate on made-up client results (two clusters): A is the reading written out, Eq. 2's soft models and
    the revised FedWCA's v_k follow it, and v_k sums to 1."""
    from fda_ray.core.contract import ClientResult

    exp = build_experiment(fedwca5(rounds=3, fedwca={"cross_cluster_norm": norm, "revision_interval": 2}))
    algo = exp.algorithm
    g = torch.Generator().manual_seed(0)
    size = exp.layout.size
    assign = torch.tensor([0, 0, 1, 1, 0, 1, 1, 0])
    alpha = torch.softmax(torch.randn(8, 2, generator=g, dtype=torch.float64) / 0.2, 1)
    beta = torch.softmax(torch.randn(8, 2, generator=g, dtype=torch.float64), 1)
    results = {k: ClientResult(k, {"weights": torch.randn(size, generator=g), "alpha": alpha[k - 1],
                                   "beta": beta[k - 1]}, {"loss": 0.0}) for k in range(1, 9)}
    state = {"source": torch.randn(size, generator=g), "assign": assign, "num_clusters": torch.tensor(2)}
    new, _ = algo.aggregate(2, state, results)  # FedWCA's round 1: a full round, the next one the server mixes
    a_bar = torch.stack([alpha[assign == c].mean(0) for c in range(2)])  # A_bar[c', c]
    want = a_bar / a_bar.sum(0, keepdim=True) if norm == "columns" else a_bar.T
    assert torch.allclose(new["mix_a"], want, rtol=0, atol=1e-15)
    other = a_bar.T if norm == "columns" else a_bar / a_bar.sum(0, keepdim=True)
    assert float((other - want).abs().max()) > 0.05  # the readings differ here
    cls, _ = fw.part_masks(exp.layout)
    models = torch.stack([new[f"cluster{j}"] for j in range(2)]).double()
    soft = soft_cluster_models(models, want, new["mix_b"])
    for j in range(2):
        assert torch.allclose(new[f"soft{j}"][~cls].double(), soft[j][~cls], rtol=0, atol=1e-5)
    for k in range(1, 9):
        v = init_weights(alpha[k - 1], beta[k - 1], int(assign[k - 1]), want, new["mix_b"])
        assert math.isclose(float(v.sum()), 1.0, abs_tol=1e-12)
        assert torch.allclose(new[f"init{k}"][~cls].double(), (v @ models)[~cls], rtol=0, atol=1e-5)


def test_revised_fedwca_sends_the_server_mixed_model_between_blocks(fedwca5, monkeypatch):
    """U = 2: round 2 (FedWCA's round 1) the clients compute alpha, beta; for round 3 the server sends each client
    f_init = sum_c v_{k,c} f_c (Eq. 8) with those weights, which is what the client starts from."""
    cfg = fedwca5(rounds=3, fedwca={"revision_interval": 2})
    exp = build_experiment(cfg)
    from fda_ray.runtime.executors import SerialExecutor
    from fda_ray.runtime.loop import run_rounds

    saved = {}
    run_rounds(exp, SerialExecutor(exp.clients), checkpoint=lambda c: saved.setdefault(c["next_round"], c))
    state = saved[3]["state"]
    plan = exp.algorithm.plan_round(3, state)
    c = int(state["num_clusters"])
    models = [state[f"cluster{j}"] for j in range(c)]
    for t in plan.tasks:
        k = t.client
        assert t.hparams["init"] == f"init{k}" and not any(n.startswith("soft") for n in t.inputs)
        v = init_weights(state["alpha"][k - 1], state["beta"][k - 1], int(state["assign"][k - 1]), state["mix_a"],
                         state["mix_b"])
        assert math.isclose(float(v.sum()), 1.0, abs_tol=1e-12)
        want = sum(float(vj) * m.double() for vj, m in zip(v, models)).float()
        cls, _ = fw.part_masks(exp.layout)
        assert torch.allclose(state[f"init{k}"][~cls], want[~cls], rtol=0, atol=1e-6)
    seen = _spy_start(monkeypatch)
    from fda_ray.train.client import run_task

    t = plan.tasks[0]
    run_task(exp.clients[t.client], t, {n: state[n] for n in t.inputs})
    assert torch.equal(seen[t.client], state[f"init{t.client}"])


def test_evaluation_is_each_clients_cluster_model_on_its_own_test_split(fedwca5):
    cfg = fedwca5(rounds=2)
    exp = build_experiment(cfg)
    from fda_ray.runtime.executors import SerialExecutor
    from fda_ray.runtime.loop import run_rounds

    saved = {}
    hist = run_rounds(exp, SerialExecutor(exp.clients), checkpoint=lambda c: saved.setdefault(c["next_round"], c))
    state, row = saved[3]["state"], hist.rows[-1]
    model = exp.model
    for k, (parts, acc) in enumerate(zip(exp.setting.client_parts, row["client_accuracy"])):
        exp.layout.load_into(model, state[f"cluster{int(state['assign'][k])}"])
        model.eval()
        x, y = parts[2]
        with torch.no_grad():
            assert int((model(x).argmax(1) == y).sum()) == round(acc * len(y))  # counts: exact
    assert row["accuracy"] == pytest.approx(float(np.mean(row["client_accuracy"])), abs=1e-12)
    # row 0 evaluates the source model (Source Only) and shot_source_only is that row alone
    src = run(cfg.replace(method="shot_source_only"))
    assert len(src.rows) == 1 and src.rows[0]["accuracy"] == hist.rows[0]["accuracy"]


def test_validation_and_test_columns_read_their_own_splits(fedwca5):
    """The clients' train labels are -1 in the setting; corrupting the validation labels moves val_accuracy and not
    accuracy, corrupting the test labels the other way round (model selection on val_accuracy reads no test label)."""
    import dataclasses

    from fda_ray.train.evaluation import Evaluator

    exp = build_experiment(fedwca5())
    algo = exp.algorithm
    assert all(bool((p[0][1] == UNLABELLED).all()) for p in exp.setting.client_parts)
    state = {"source": exp.initial_weights()}
    ev = Evaluator(exp)
    base = algo.evaluate(0, state, ev)

    def corrupt(split: int) -> dict:
        parts = []
        for p in exp.setting.client_parts:
            p = list(p)
            p[split] = (p[split][0], (p[split][1] + 1) % 10)
            parts.append(tuple(p))
        algo.setting = dataclasses.replace(exp.setting, client_parts=tuple(parts))
        try:
            return algo.evaluate(0, state, ev)
        finally:
            algo.setting = exp.setting

    val_bad, test_bad = corrupt(1), corrupt(2)
    assert val_bad["accuracy"] == base["accuracy"] and val_bad["val_accuracy"] != base["val_accuracy"]
    assert test_bad["val_accuracy"] == base["val_accuracy"] and test_bad["accuracy"] != base["accuracy"]


def test_source_model_cache_gives_the_trained_numbers(fedwca5, tmp_path, monkeypatch):
    monkeypatch.setenv("FDA_RAY_CACHE_DIR", str(tmp_path / "cache"))
    cfg = fedwca5(rounds=1)
    first = run(cfg)
    assert first.rows[0]["source_steps"] > 0 and len(list((tmp_path / "cache").glob("*.pt"))) == 1
    cached = run(cfg)
    assert cached.rows[0]["source_steps"] == 0  # read from the cache
    assert [r["accuracy"] for r in cached.rows] == [r["accuracy"] for r in first.rows]
    assert torch.equal(cached.final_weights, first.final_weights)
    monkeypatch.setenv("FDA_RAY_CACHE_DIR", "off")
    fresh = run(cfg)
    assert fresh.rows[0]["source_steps"] > 0 and [r["accuracy"] for r in fresh.rows] == [r["accuracy"] for r in first.rows]
    # another seed is another source model
    monkeypatch.setenv("FDA_RAY_CACHE_DIR", str(tmp_path / "cache"))
    run(cfg.replace(method="shot_source_only", seed=1))
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 2


@pytest.mark.parametrize("method,params", [("fedwca", {}), ("shot_local", {}), ("shot_fedavg", {}),
                                           ("fedwca", {"revision_interval": 2})])
def test_resume_equals_uninterrupted(fedwca5, method, params):
    from conftest import assert_resume_equals_uninterrupted

    assert_resume_equals_uninterrupted(fedwca5(method=method, rounds=3, fedwca=params), after=2)


def test_local_keeps_its_models_on_the_clients_and_fedavg_averages_them(fedwca5):
    """Round 1 runs the same tasks in both (SHOT from the source model): Local keeps each client's model in its
    state, FedAvg's global model is their n_k-weighted average (the classifier the source's)."""
    from fda_ray.runtime.executors import SerialExecutor
    from fda_ray.runtime.loop import run_rounds

    def after_round_1(method):
        exp = build_experiment(fedwca5(method=method, rounds=1))
        saved = {}
        run_rounds(exp, SerialExecutor(exp.clients), checkpoint=lambda c: saved.setdefault(c["next_round"], c))
        return exp, saved[2]

    exp, local = after_round_1("shot_local")
    _, fedavg = after_round_1("shot_fedavg")
    models = torch.stack([st["model"] for st in local["client_states"][1:]]).double()  # (K, M)
    n = torch.tensor([len(p[0][1]) for p in exp.setting.client_parts], dtype=torch.float64)
    want = (n / n.sum()) @ models
    cls, _ = fw.part_masks(exp.layout)
    glob = fedavg["state"]["global"]
    assert torch.allclose(glob[~cls].double(), want[~cls], rtol=0, atol=1e-6)
    assert torch.equal(glob[cls], fedavg["state"]["source"][cls])
    assert not torch.equal(models[0], models[1])  # the clients did train apart


def test_clustering_groups_clients_of_the_same_domain(fmnist_dir):
    """FedWCA Tables 4 / 12: after one round from a trained source model, FINCH on the first layers puts only clients
    of one domain together (purity 1) on the generated FMNIST-5."""
    cfg = RunConfig(dataset="fmnist-5", data_dir=str(fmnist_dir), method="fedwca", rounds=1, samples_per_client=60,
                    clients_per_domain=3, source_envs=(0,), params={"fedwca": {"source_epochs": 5, "local_epochs": 2}},
                    threads=1)
    row = run(cfg).rows[-1]
    assert row["cluster_purity"] == 1.0, row["clusters"]
    assert 4 <= row["num_clusters"] <= 12


def test_bad_configs_are_one_line_errors(fedwca5):
    with pytest.raises(ValueError, match="partition='domain_shards' is invalid for method fedwca"):
        build_experiment(fedwca5(partition="domain_shards"))
    with pytest.raises(ValueError, match="model='simple_cnn' is invalid for method fedwca: it needs SHOT's"):
        build_experiment(fedwca5(model="simple_cnn"))
    with pytest.raises(ValueError, match="fedwca.revision_interval=5 is invalid with weighting 'local'"):
        build_experiment(fedwca5(fedwca={"revision_interval": 5, "weighting": "local"}))
    with pytest.raises(ValueError, match=r"source_envs=\[1, 2\] is invalid: one source domain"):
        build_experiment(fedwca5(source_envs=(1, 2)))
    with pytest.raises(ValueError, match="clients_per_domain=100 is invalid: a client of environment clean"):
        build_experiment(fedwca5(clients_per_domain=100, samples_per_client=None))
    with pytest.raises(ValueError, match="samples_per_client=6 is invalid: .* its 64/16/20 split needs 7"):
        build_experiment(fedwca5(samples_per_client=6))
    with pytest.raises(ValueError, match="noise=0.2 is invalid for method fedwca"):
        build_experiment(fedwca5(noise=0.2))
    with pytest.raises(ValueError, match="clients_per_domain=0 is invalid: an integer >= 1"):
        fedwca5(clients_per_domain=0)
    with pytest.raises(ValueError, match="fedwca.weighting='x' is invalid: one of wca, local"):
        fedwca5(fedwca={"weighting": "x"}).resolved()


def test_dataset_defaults_fill_table_9s_values(fmnist_dir):
    pacs = RunConfig(dataset="pacs", method="fedwca").resolved()
    assert pacs.model == "shot_resnet18" and pacs.params["fedwca"]["temp_a"] == 0.1
    assert pacs.params["fedwca"]["ce_weight"] == 0.3 and pacs.clients_per_domain == 3 and pacs.lr_target == 1e-4
    oh = RunConfig(dataset="office-home", method="fedwca", params={"fedwca": {"temp_a": 0.05}}).resolved()
    assert oh.model == "shot_resnet50" and oh.params["fedwca"]["temp_a"] == 0.05  # the user's value wins
    f5 = RunConfig(dataset="fmnist-5", method="fedwca").resolved()
    assert (f5.partition, f5.source_envs, f5.clients_per_domain, f5.num_sources) == ("domain_clients", (0,), 8, 1)


def test_fedwca_grids_plan_unique_trials():
    from fda_ray.experiments.trials import plan
    from fda_ray.papers.grids import GRIDS

    for name in SEED_003_GRIDS:
        trials = plan(GRIDS[name], "paper")
        assert len({t.key for t in trials}) == len(trials)
    t = plan(GRIDS["fedwca-temperatures"], "paper")
    temps = {(tr.params["params"]["fedwca"]["temp_a"], tr.params["params"]["fedwca"]["temp_b"]) for tr in t}
    assert len(temps) == 25
    table = plan(GRIDS["fedwca-fmnist"], "paper")
    assert len(table) == 5 * 5 * 3 and {tr.params["source_envs"] for tr in table} == {(e,) for e in range(5)}


@pytest.mark.slow
def test_the_pacs_table_command_runs_on_a_generated_tree(tmp_path, capsys, monkeypatch):
    """README's PACS command (the quick profile, a random ResNet-18 state dict standing in for the ImageNet file) on
    a generated PACS/<domain>/<class>/ tree: Table 9's settings resolved, the cluster rounds run on image files, the
    paper's numbers beside the cells; without the weights file, one line naming it."""
    import json

    import torchvision

    from fda_ray.experiments import sweep
    from fda_ray.runtime.preflight import model_weights
    from test_domainbed import _folder_tree

    for env in ("art_painting", "cartoon", "photo", "sketch"):
        _folder_tree(tmp_path / "PACS" / env, [""], ["dog", "elephant"], per=6)
    weights = tmp_path / "resnet18.pth"
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), weights)
    out = tmp_path / "sweep"
    argv = ["--grid", "fedwca-pacs", "--profile", "quick", "--data-dir", str(tmp_path), "--model-weights", str(weights),
            "--methods", "source_only,fedwca_revised", "--values", "1", "--samples-per-client", "8",
            "--clients-per-domain", "1", "--backend", "local", "--workers", "1", "--no-figures", "--json",
            "--out", str(out)]
    assert sweep.main(argv) == 0
    printed = capsys.readouterr().out
    summary = json.loads(printed[printed.index("{"):])
    assert summary["trials_done"] == 2 and summary["failures"] == []
    assert summary["cells"]["source_only"]["1"]["paper"] == 68.66 and summary["cells"]["fedwca_revised"]["1"]["paper"] == 83.23
    trial_dir = next((out / "trials").glob("fedwca_revised-source1-*"))
    params = json.loads((trial_dir / "trial.json").read_text())["params"]
    cfg = RunConfig(**{k: tuple(v) if k == "source_envs" else v for k, v in params.items()}).resolved()
    assert (cfg.model, cfg.lr_target, cfg.clients_per_domain) == ("shot_resnet18", 1e-4, 1)
    assert cfg.params["fedwca"]["temp_a"] == 0.1 and cfg.params["fedwca"]["ce_weight"] == 0.3
    rows = json.loads((trial_dir / "rows.json").read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert [r["phase"] for r in rows] == ["source", "adapt", "adapt"] and len(rows[-1]["alpha"]) == 3
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "no-torch-home"))
    with pytest.raises(ValueError, match="model_weights='imagenet' is invalid: torchvision's cache file .*resnet18-f37072fd"):
        model_weights("imagenet", "shot_resnet18")


def _shot_obtain_label(feat: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """tim-learn/SHOT object/image_target.py obtain_label (distance 'cosine', threshold 0), written out in numpy
    float64: the pseudo-labels (n,) of features (n, q) and softmax outputs (n, M)."""
    fea = np.concatenate([feat, np.ones((len(feat), 1))], 1)
    fea = fea / np.linalg.norm(fea, axis=1, keepdims=True)
    aff, k = probs, probs.shape[1]
    predict = aff.argmax(1)
    for _ in range(2):
        initc = aff.T @ fea / (1e-8 + aff.sum(0)[:, None])
        labelset = np.where(np.eye(k)[predict].sum(0) > 0)[0]
        c = initc[labelset]
        dd = 1 - (fea @ c.T) / np.linalg.norm(fea, axis=1)[:, None] / np.linalg.norm(c, axis=1)[None]
        predict = labelset[dd.argmin(1)]
        aff = np.eye(k)[predict]
    return predict


def test_pseudo_labels_default_to_shots_obtain_label_and_keep_eq4_as_an_option():
    """The defaults (prototypes shot, labelset true) reach the labelling; eq4 / labelset false give the old labels."""

    class Outputs:
        client = None

        def __init__(self, feat, probs):
            self.out = (feat, probs)

        def __call__(self, flat):
            return self.out

    g = torch.Generator().manual_seed(0)
    feat = torch.randn(60, 8, generator=g) + 2 * torch.randn(6, 8, generator=g)[torch.randint(6, (60,), generator=g)]
    probs = torch.softmax(2 * torch.randn(60, 6, generator=g) + torch.tensor([0, 0, 0, 0, -3.0, -3.0]), 1)
    h = fw.FedWCAParams().to_dict()
    assert (h["prototypes"], h["labelset"], h["cross_cluster_norm"]) == ("shot", True, "columns")
    labels, partners, _ = fw._pseudo_labels(Outputs(feat, probs), None, torch.zeros(1), None, h)
    assert labels.tolist() == _shot_obtain_label(feat.double().numpy(), probs.double().numpy()).tolist()
    assert bool((partners == -1).all())
    from fda_ray.algorithms.fedwca.shot import prototype_labels

    old = fw.FedWCAParams.build({"prototypes": "eq4", "labelset": "false"}).to_dict()  # the words, as the CLI passes
    old_labels, _, _ = fw._pseudo_labels(Outputs(feat, probs), None, torch.zeros(1), None, old)
    assert torch.equal(old_labels, prototype_labels(feat, probs, shot_style=False, labelset=False)[0])
    assert not torch.equal(old_labels, labels)


def test_local_relabels_every_epoch_with_the_current_model(fedwca5, monkeypatch):
    """shot_local is SHOT itself (image_target.py: obtain_label at the start of every epoch): the labels epoch e
    trains on are SHOT's pseudo-labels of the model after epoch e - 1; FedAvg keeps the round's labels (FedWCA)."""
    from fda_ray.runtime.executors import SerialExecutor
    from fda_ray.runtime.loop import run_rounds
    from fda_ray.train.client import run_task

    epochs = 3
    exp = build_experiment(fedwca5(method="shot_local", rounds=1, fedwca={"local_epochs": epochs}))
    saved = {}
    run_rounds(exp, SerialExecutor(exp.clients), checkpoint=lambda c: saved.setdefault(c["next_round"], c))
    state = saved[1]["state"]  # the source model, before the first adaptation round
    task = exp.algorithm.plan_round(1, state).tasks[0]
    client = exp.clients[task.client]
    client.state.pop("model", None)  # round 1 starts from the source model

    relabels, at_epoch, ce_targets = [], {}, []
    real_pseudo, real_batches = fw._pseudo_labels, client.batch_indices

    def pseudo(outputs, task_, init, own, h):
        relabels.append(init.clone())
        return real_pseudo(outputs, task_, init, own, h)

    def batches(batch, round_idx, purpose, data="train", drop_last=None):
        e = int(purpose.rsplit("epoch", 1)[1])
        at_epoch[e] = (client.layout.flatten_model(client.model).clone(), [])  # the weights this epoch starts from
        for idx in real_batches(batch, round_idx, purpose, data, drop_last):
            if len(idx) >= 2:
                at_epoch[e][1].append(idx)
            yield idx

    class Spy:  # F as methods.py sees it, recording cross-entropy's targets
        def __getattr__(self, name):
            return getattr(F, name)

        @staticmethod
        def cross_entropy(logits, target, *a, **kw):
            ce_targets.append(target.clone())
            return F.cross_entropy(logits, target, *a, **kw)

    monkeypatch.setattr(fw, "_pseudo_labels", pseudo)
    monkeypatch.setattr(client, "batch_indices", batches)
    monkeypatch.setattr(fw, "F", Spy())
    run_task(client, task, {n: state[n] for n in task.inputs})
    assert len(relabels) == epochs  # one labelling per epoch (was: one per round)
    targets = iter(ce_targets)
    changed = 0
    for e in range(epochs):
        start, batches_e = at_epoch[e]
        assert torch.equal(relabels[e], start)  # labelled with the weights the epoch starts from
        feat, probs = fw._outputs(client, start)
        want = _shot_obtain_label(feat.double().numpy(), probs.double().numpy())
        for idx in batches_e:
            assert next(targets).tolist() == want[idx.cpu().numpy()].tolist()
        if e:
            first = _shot_obtain_label(*(t.double().numpy() for t in fw._outputs(client, at_epoch[0][0])))
            changed += int((want != first).sum())
    assert next(targets, None) is None
    assert changed > 0  # the model moved the labels: round-fixed labels would have failed the comparison above

    # FedAvg (and FedWCA's round 0 of FedWCA) label once per round
    exp2 = build_experiment(fedwca5(method="shot_fedavg", rounds=1, fedwca={"local_epochs": epochs}))
    task2 = exp2.algorithm.plan_round(1, state).tasks[0]
    relabels.clear()
    run_task(exp2.clients[task2.client], task2, {n: state[n] for n in task2.inputs})
    assert len(relabels) == 1
