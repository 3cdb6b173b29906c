"""Vectorised cohorts (issue 16): K clients trained as one batched computation equal per-client training.

Tolerance, from the arithmetic: both paths make the same Adam steps from gradients that differ only in float
summation order (relative ~1e-7 for most elements). But Adam divides each gradient element by its own running
size: an element whose true value nearly cancels (a sum of terms ~1e-3 landing near 1e-8, Adam's eps) keeps a
relative rounding error of a few percent, and Adam turns it into a step of up to ~lr all the same. So a few
elements may differ by a visible fraction of lr (seen: 5e-4 at lr 0.01 after 4 steps, GroupNorm weights),
while the update as a whole agrees to ~1e-4 in relative L2 norm. The tests bound that norm by 1e-2: any real
difference (another data order, learning rate, bias correction, a padded sample counted) is of order 1
(test_the_gap_would_be_seen).
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from fda_ray.algorithms import ClientTask
from fda_ray.train.client import RECIPES, Client, run_task
from fda_ray.train.cohort import cohort_key, not_vectorisable, run_tasks, train_cohort
from fda_ray.runtime.engine import build_experiment, run
from fda_ray.core.layout import ParamLayout
from fda_ray.train.models import build_model


def _clients(model_name: str, input_shape, outputs: int, sizes, *, task="classification", noise=0.0, seed=0):
    """Clients with random data of the given shard sizes, the last one keeping its partial batch (a target)."""
    torch.manual_seed(seed)
    model = build_model(model_name, input_shape, outputs)
    layout = ParamLayout.from_model(model)
    out = []
    for i, n in enumerate(sizes):
        x = torch.randn(n, *input_shape)
        y = torch.randint(0, outputs, (n,)) if task == "classification" else torch.randn(n, outputs)
        last = i == len(sizes) - 1
        out.append(Client(i, {"train": (x, y)}, copy.deepcopy(model), layout, seed=seed, noise=noise if last else 0.0,
                          task=task, drop_last=not last))
    return out, layout.flatten_model(model)


REL = 1e-2  # the relative L2 gap of two updates (module docstring)


def rel_gap(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor) -> float:
    return float((a - b).norm() / scale.norm())


def _compare(clients, start, hps, rounds=(0,)):
    """Every client's epoch recipe by itself against one cohort."""
    for r in rounds:
        tasks = [ClientTask(c.index, "epoch", r, dict(h)) for c, h in zip(clients, hps)]
        starts = [start + 0.01 * c.index for c in clients]  # each client its own start
        ref = [run_task(c, t, {"global": s}) for c, t, s in zip(clients, tasks, starts)]
        got = train_cohort([(c, t, s) for c, t, s in zip(clients, tasks, starts)])
        for a, b, h in zip(ref, got, hps):
            assert a.client == b.client
            assert a.scalars["num_steps"] == b.scalars["num_steps"] and a.scalars["num_samples"] == b.scalars["num_samples"]
            # the epoch's mean loss: batched and per-client sums in other orders (~1e-7 a step) that Adam carries
            # through the epoch; measured 5.7e-5 on an AMD EPYC (colored-MNIST CNN): 1e-3, ten times under REL
            assert b.scalars["loss"] == pytest.approx(a.scalars["loss"], rel=1e-3)
            assert set(a.tensors) == set(b.tensors)
            s = starts[a.client]
            da, db = (a.tensors["weights"] - s, b.tensors["weights"] - s) if h.get("send") == "weights" \
                else (a.tensors["delta"], b.tensors["delta"])
            assert rel_gap(da, db, da) <= REL, (a.client, rel_gap(da, db, da))
            if "step_deltas" in a.tensors:
                sa, sb = a.tensors["step_deltas"], b.tensors["step_deltas"]  # (B, M)
                assert sa.shape == sb.shape and rel_gap(sa, sb, sa) <= REL
            # the counters the loop keeps (each client ran its task twice a round here)
            assert b.scalars["num_steps"] == clients[b.client].state["steps_total"] / (2 * (r + 1))


@pytest.mark.parametrize("model_name,shape,outputs,task", [
    ("simple_cnn", (1, 28, 28), 10, "classification"),        # its own forward_stacked
    ("mlp_sigmoid", (12,), 3, "regression"),                  # its own forward_stacked, MSE
    ("colored_mnist_cnn", (2, 14, 14), 2, "classification"),  # no forward_stacked: torch.func.vmap (GroupNorm)
])
def test_a_cohort_equals_each_client_trained_alone(model_name, shape, outputs, task):
    # Ragged on purpose: shards of 70, 50 and 20 samples at batch 16 give 4, 3 and 2 steps (the last client
    # keeps its partial batch of 4 and draws noise); each its own lr; one records its per-step deltas, one
    # sends its weights.
    clients, start = _clients(model_name, shape, outputs, (70, 50, 20), task=task, noise=0.3)
    hps = [{"lr": 0.01, "batch": 16}, {"lr": 0.003, "batch": 16, "send": "weights"},
           {"lr": 0.005, "batch": 16, "record_steps": True}]
    _compare(clients, start, hps, rounds=(0, 1))


def test_a_cohort_with_one_learning_rate_and_equal_shards():
    clients, start = _clients("simple_cnn", (1, 28, 28), 10, (48, 48, 48, 48))
    _compare(clients, start, [{"lr": 0.01, "batch": 16}] * 4)


def test_the_gap_would_be_seen():
    """The tolerance is far below what a real difference makes: a cohort fed another round's data order."""
    clients, start = _clients("simple_cnn", (1, 28, 28), 10, (48, 48))
    hp = {"lr": 0.01, "batch": 16}
    ref = run_task(clients[0], ClientTask(0, "epoch", 0, hp), {"global": start}).tensors["delta"]
    got = train_cohort([(c, ClientTask(c.index, "epoch", 1, hp), start) for c in clients])[0].tensors["delta"]
    assert rel_gap(ref, got, ref) > 20 * REL
    lr = train_cohort([(c, ClientTask(c.index, "epoch", 0, {"lr": 0.005, "batch": 16}), start) for c in clients])
    assert rel_gap(ref, lr[0].tensors["delta"], ref) > 20 * REL


def test_run_tasks_vectorises_cohorts_and_runs_the_rest_alone(monkeypatch):
    clients, start = _clients("simple_cnn", (1, 28, 28), 10, (32, 32, 32, 32, 20))
    seen: list[int] = []
    orig = RECIPES.get("epoch")
    monkeypatch.setitem(RECIPES._items, "epoch", lambda c, t, i: seen.append(t.client) or orig(c, t, i))
    tasks = [ClientTask(0, "epoch", 0, {"lr": 0.01, "batch": 16}),
             ClientTask(1, "epoch", 0, {"lr": 0.01, "batch": 16}),
             ClientTask(2, "epoch", 0, {"lr": 0.01, "batch": 8}),  # another batch size: a cohort of one
             ClientTask(3, "epoch", 0, {"lr": 0.01, "batch": 16, "keep_optimizer": True}),  # keeps Adam: alone
             ClientTask(4, "epoch", 0, {"lr": 0.01, "batch": 16})]
    by_index = {c.index: c for c in clients}
    out = run_tasks(by_index, tasks, lambda t: {"global": start}, vectorise=True)
    assert [r.client for r in out] == [0, 1, 2, 3, 4]
    assert sorted(seen) == [3]  # 0, 1 and 4 trained as one cohort, 2 as a cohort of one
    assert "optimizer" in clients[3].state and "optimizer" not in clients[0].state
    assert all(r.seconds > 0 for r in out)
    seen.clear()
    run_tasks(by_index, tasks, lambda t: {"global": start}, vectorise=False)
    assert seen == [0, 1, 2, 3, 4]


def test_models_that_couple_samples_or_draw_randomness_are_not_vectorised():
    assert not_vectorisable(build_model("simple_cnn", (1, 28, 28), 10), ParamLayout.from_model(
        build_model("simple_cnn", (1, 28, 28), 10)).names) is None
    resnet = build_model("resnet18", (3, 32, 32), 10)
    assert "BatchNorm2d" in not_vectorisable(resnet, [n for n, _ in resnet.named_parameters()])
    assert "not trained parameters" in not_vectorisable(resnet, ParamLayout.from_model(resnet).names)  # running stats
    drop = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    assert "Dropout" in not_vectorisable(drop, ParamLayout.from_model(drop).names)
    clients, _ = _clients("simple_cnn", (1, 28, 28), 10, (32,))
    assert cohort_key(clients[0], ClientTask(0, "ditto", 0, {"lr": 0.1, "batch": 16})) is None


@pytest.mark.parametrize("method", ["fedgp_auto", "fedda", "finetune_offline"])
def test_a_vectorised_run_is_within_float_tolerance_of_the_loop(tiny, method):
    cfg = tiny(method=method, noise=0.2, **({"finetune_epochs": 1} if method == "finetune_offline" else {}))
    a, b = run(cfg), run(cfg.replace(vectorise="on"))
    assert [r["phase"] for r in a.rows] == [r["phase"] for r in b.rows]
    w0 = build_experiment(cfg).initial_weights()
    assert rel_gap(a.final_weights, b.final_weights, a.final_weights - w0) <= REL
    for ra, rb in zip(a.rows, b.rows):
        assert rb["accuracy"] == pytest.approx(ra["accuracy"], abs=1.5 / 100)  # (100 test samples: one flip)
        assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-4)


def test_vectorise_auto_is_the_measured_faster_loop_on_cpus_and_gpus(tiny):
    assert tiny().resolved().vectorise == "off"
    assert tiny(executor="ray", gpus_per_client=0.1).resolved().vectorise == "off"
    assert tiny(device="cuda").resolved().vectorise == "off"  # the serial executor on a GPU
    assert tiny(vectorise="on").resolved().vectorise == "on"
    with pytest.raises(ValueError, match=r"vectorise='yes' is invalid: one of auto, on, off"):
        tiny(vectorise="yes")


def test_trial_keys_of_the_loop_are_those_recorded_before_vectorise_existed(tiny):
    from fda_ray.experiments.records import trial_key

    params = dict(dataset="fashion-mnist", method="fedgp", rounds=3)
    off = trial_key("fedgp", "noise", 0.4, 0, params)
    assert trial_key("fedgp", "noise", 0.4, 0, {**params, "vectorise": "off"}) == off
    assert trial_key("fedgp", "noise", 0.4, 0, {**params, "vectorise": "on"}) != off


def test_the_experiment_clients_form_one_cohort_of_sources(tiny):
    exp = build_experiment(tiny(method="fedgp"))
    state = exp.algorithm.init_state(exp.initial_weights())
    plan = exp.algorithm.plan_round(1, state)
    keys = [cohort_key(exp.clients[t.client], t) for t in plan.tasks]
    assert len(set(keys[:-1])) == 1 and keys[-1] != keys[0]  # the sources share one; the target's batch differs


def test_the_plain_reference_loop_of_the_engine_benchmark_learns(tiny):
    """benchmarks.plain (the benchmark's reference row) does the engine's FedGP work: it learns the tiny
    task as the engine does (other seeds, so not the same numbers)."""
    from benchmarks.plain import run_plain

    cfg = tiny(method="fedgp", rounds=5, warmup_rounds=0)
    rows = run_plain(cfg)
    assert [r["round"] for r in rows] == [0, 1, 2, 3, 4] and all(r["seconds"] > 0 for r in rows)
    engine = run(cfg).rows[-1]["accuracy"]  # 0.51 here, the plain loop 0.52 (chance: 0.1)
    assert rows[-1]["accuracy"] > 0.3 and abs(rows[-1]["accuracy"] - engine) < 0.2


def _round_tasks(exp):
    state = exp.algorithm.init_state(exp.initial_weights())
    plan = exp.algorithm.plan_round(1, state)
    return plan.tasks, (lambda t: {n: state[n] for n in t.inputs})


def test_clients_trained_side_by_side_equal_one_after_the_other(tiny):
    """run_concurrently (GPU clients' default: a thread and a CUDA stream each) runs each client's operations in
    the same order as alone: on the CPU, at one torch thread, the results and the clients' states are the same to
    the last bit."""
    from fda_ray.train.client import run_task
    from fda_ray.train.cohort import run_concurrently

    cfg = tiny(method="fedgp_auto", rounds=2)
    one = build_experiment(cfg)
    tasks, inputs = _round_tasks(one)
    alone = {t.client: run_task(one.clients[t.client], t, inputs(t)) for t in tasks}
    two = build_experiment(cfg)
    tasks2, inputs2 = _round_tasks(two)
    side = run_concurrently({c.index: c for c in two.clients}, tasks2, inputs2)
    assert sorted(side) == sorted(alone) and len(side) == 4
    for i, res in alone.items():
        assert res.tensors.keys() == side[i].tensors.keys()
        for k in res.tensors:
            assert torch.equal(res.tensors[k], side[i].tensors[k]), (i, k)
        assert res.scalars == side[i].scalars
    for a, b in zip(one.clients, two.clients):
        assert a.snapshot() == b.snapshot()


def test_which_tasks_train_side_by_side():
    import types

    from torch import nn

    from fda_ray.core.contract import ClientTask
    from fda_ray.train.cohort import may_overlap

    def client(device, *layers):
        return types.SimpleNamespace(device=torch.device(device), model=nn.Sequential(nn.Linear(2, 2), *layers))

    task = ClientTask(client=0, round=0, recipe="epoch", hparams={})
    assert may_overlap(client("cuda"), task)  # a GPU client (only its device is read: no GPU needed)
    assert not may_overlap(client("cpu"), task)  # CPU clients: one after the other (serial == Ray, exactly)
    assert not may_overlap(client("cuda", nn.Dropout(0.5)), task)  # dropout draws from the global generator
    assert not may_overlap(client("cuda"), ClientTask(client=0, round=0, recipe="fedwca", hparams={}))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_clients_side_by_side_equal_in_turn(tiny, monkeypatch):
    """On a GPU the round's clients train side by side by default; with cuDNN's deterministic kernels each
    client's numbers equal those it gets trained alone."""
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    cfg = tiny(method="fedgp", rounds=2, device="cuda")
    outs = []
    for overlap in (False, True):
        exp = build_experiment(cfg)
        assert exp.clients[0].device.type == "cuda"
        tasks, inputs = _round_tasks(exp)
        outs.append(run_tasks({c.index: c for c in exp.clients}, tasks, inputs, vectorise=False, overlap=overlap))
    for a, b in zip(*outs):
        for k in a.tensors:
            assert torch.equal(a.tensors[k], b.tensors[k]), (a.client, k)


def test_a_gpu_client_keeps_one_stream_from_round_to_round(monkeypatch):
    """PyTorch's allocator reuses a freed block only on the stream it was made on: a client trains on the same
    stream every round (one per client and device in a process), not on a new one each round."""
    from fda_ray.train import cohort

    made = []

    class FakeStream:
        def __init__(self, device):
            made.append(device)

    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cohort, "_STREAMS", {})
    d0, d1 = torch.device("cuda:0"), torch.device("cuda:1")
    first = [cohort.client_stream(k, d0) for k in range(3)]
    assert len({id(s) for s in first}) == 3  # one each
    for _ in range(5):  # later rounds: the same streams, none made
        assert [cohort.client_stream(k, d0) for k in range(3)] == first
    assert cohort.client_stream(0, torch.device("cuda")) is first[0]  # "cuda" is the current device, 0
    assert cohort.client_stream(0, d1) is not first[0]  # another device: its own
    assert len(made) == 4


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_clients_side_by_side_hold_no_more_memory_round_after_round(tiny):
    """The same round's tasks run again and again side by side: after the first two, the allocator's reserved
    memory does not grow (a new stream each round would cache each client's blocks on up to 32 streams)."""
    cfg = tiny(method="fedgp", rounds=2, device="cuda")
    exp = build_experiment(cfg)
    tasks, inputs = _round_tasks(exp)
    clients = {c.index: c for c in exp.clients}
    for _ in range(2):
        run_tasks(clients, tasks, inputs, vectorise=False, overlap=True)
    torch.cuda.synchronize()
    settled = torch.cuda.memory_reserved()
    for _ in range(40):  # more than 32 streams' worth of rounds for any client count
        run_tasks(clients, tasks, inputs, vectorise=False, overlap=True)
    torch.cuda.synchronize()
    assert torch.cuda.memory_reserved() <= settled
