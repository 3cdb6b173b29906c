"""The serial engine (Algorithm 1) on tiny generated Fashion-MNIST files: every method, determinism, and
identities between methods that must hold exactly."""
from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest
import torch
from conftest import same_state

from fda_ray.runtime.engine import build_experiment, finetune_from, run
from fda_ray.algorithms import ALGORITHMS


@pytest.mark.parametrize("method", [m for m in ALGORITHMS.names() if ALGORITHMS.get(m).family == "fda"])
def test_every_method_runs_and_records_its_metrics(tiny, method):
    cfg = tiny(method=method, noise=0.3, finetune_epochs=2, batch_target=8)
    hist = run(cfg)
    m = ALGORITHMS.get(method)
    expected_rows = cfg.warmup_rounds + cfg.rounds + (2 if m.finetune else 0)
    assert len(hist.rows) == expected_rows
    assert [r["phase"] for r in hist.rows][:2] == ["warmup", "main"]
    for r in hist.rows:
        assert 0.0 <= r["accuracy"] <= 1.0 and math.isfinite(r["loss"])
    main = [r for r in hist.rows if r["phase"] == "main"]
    if m.uses_beta():
        for r in main:
            assert len(r["beta_i"]) == cfg.num_sources
            assert all(0.0 <= b <= 1.0 for b in r["beta_i"])
            assert len(r["cosine_mean_i"]) == cfg.num_sources and len(r["filtered_share_i"]) == cfg.num_sources
    if m.auto_rule:
        assert all(r["sigma2"] >= 0 and len(r["d2_i"]) == cfg.num_sources for r in main)
        assert any(b != 0.5 for r in main for b in r["beta_i"])  # betas come from the estimators
    assert hist.final_weights is not None and torch.isfinite(hist.final_weights).all()


def test_same_config_same_numbers_and_seed_changes_them(tiny):
    cfg = tiny(method="fedgp_auto", noise=0.2, batch_target=8)
    a, b = run(cfg), run(cfg)
    assert [r["accuracy"] for r in a.rows] == [r["accuracy"] for r in b.rows]
    assert torch.equal(a.final_weights, b.final_weights)
    c = run(cfg.replace(seed=1))
    assert not torch.equal(a.final_weights, c.final_weights)


def test_fedgp_beta0_is_target_only_and_fedda_beta1_is_source_only(tiny):
    """Clients draw from seeds of their own (seed, round, client, purpose), so which other clients train
    does not change a client's update, and the rules' limits give the baselines' updates bit for bit:
    beta = 0 makes every source coefficient exactly 0 and the target's sum_i w_i (1 - beta) = 1 +- 1e-16
    (float64), which rounds to exactly 1.0f; beta = 1 makes FedDA's combination FedAvg's (the same kernel
    call, sources summed in the same order). So equal weights on any CPU: the float arithmetic of both runs
    is the same, operation for operation. (Before, a float32 sum of the weights could land one ulp off 1
    on another SIMD width: 6.3e-6 apart after training on an AVX-512 machine.)"""
    target_only = run(tiny(method="target_only", noise=0.4))
    fedgp0 = run(tiny(method="fedgp", beta=0.0, noise=0.4))
    assert torch.equal(fedgp0.final_weights, target_only.final_weights)
    source_only = run(tiny(method="source_only", noise=0.4))
    fedda1 = run(tiny(method="fedda", beta=1.0, noise=0.4))
    assert torch.equal(fedda1.final_weights, source_only.final_weights)


def test_eval_noise_equals_a_run_at_that_noise(tiny):
    clean = run(tiny(method="source_only", noise=0.0, eval_noise=(0.0, 0.5)))
    noisy = run(tiny(method="source_only", noise=0.5))
    assert [r["eval_noise_accuracy"][1] for r in clean.rows] == [r["accuracy"] for r in noisy.rows]
    assert [r["eval_noise_accuracy"][0] for r in clean.rows] == [r["accuracy"] for r in clean.rows]


def test_finetune_from_source_only_weights_equals_full_finetune_offline(tiny):
    full = run(tiny(method="finetune_offline", noise=0.3, finetune_epochs=3))
    src = run(tiny(method="source_only", noise=0.3))
    part = finetune_from(tiny(method="finetune_offline", noise=0.3, finetune_epochs=3), src.final_weights)
    assert [r["accuracy"] for r in part.rows] == [r["accuracy"] for r in full.rows if r["phase"] == "finetune"]
    assert torch.equal(part.final_weights, full.final_weights)
    with pytest.raises(ValueError, match="method='fedgp' is invalid"):
        finetune_from(tiny(method="fedgp"), src.final_weights)


def test_oracle_protocols(tiny):
    """The authors' oracle (default): from scratch on 90 % of the target's shard, tested on the other 10 %,
    lr 0.003, batch 64; the round-loop oracle: the whole shard after warm-up, tested on the test set."""
    exp = build_experiment(tiny(method="oracle", warmup_rounds=None))  # tiny sets 1 warm-up round
    cfg, target, s = exp.cfg, exp.clients[exp.target_index], exp.setting
    assert (cfg.warmup_rounds, cfg.lr_target, cfg.batch_target) == (0, 0.003, 64)
    assert target.num_samples("pool") == 116 and len(s.target_test[0]) == 12  # 128 = 116 + int(0.1 * 128)
    loop = build_experiment(tiny(method="oracle", baseline_protocol="loop", warmup_rounds=None))
    assert (loop.cfg.warmup_rounds, loop.cfg.lr_target, loop.cfg.batch_target) == (2, 0.005, 16)
    assert loop.clients[loop.target_index].num_samples("pool") == 128  # samples_per_client, not target_labelled = 32
    assert len(loop.setting.target_test[0]) == 100  # test_samples of the dataset's test set
    # the two oracle splits are disjoint and together the shard the loop oracle trains on
    shard = {tuple(x.flatten()[:40].tolist()) for x in loop.clients[loop.target_index].view("pool")[0]}
    train = {tuple(x.flatten()[:40].tolist()) for x in target.view("pool")[0]}
    test = {tuple(x.flatten()[:40].tolist()) for x in s.target_test[0]}
    assert train | test == shard and not train & test
    exp = build_experiment(tiny(method="target_only"))
    assert exp.clients[exp.target_index].num_samples() == 32
    hist = run(tiny(method="oracle", rounds=2, warmup_rounds=None))
    assert [r["phase"] for r in hist.rows] == ["main", "main"]  # no warm-up rounds


def test_target_keeps_its_last_partial_batch_and_sources_drop_theirs(tiny, monkeypatch):
    from fda_ray.train import client as client_mod

    steps = {}
    orig = client_mod.Client.epoch

    def spy(self, opt, batch, round_idx, purpose, record_steps, data="train", **kw):
        out = orig(self, opt, batch, round_idx, purpose, record_steps, data, **kw)
        steps[(self.index, round_idx)] = (out[0], [len(r) for r in out[2]] if record_steps else None)
        return out

    monkeypatch.setattr(client_mod.Client, "epoch", spy)
    # 32 labelled target samples at batch 10: 4 steps (10, 10, 10, 2); 128 per source at batch 64: 2 steps
    cfg = tiny(method="fedgp_auto", batch_target=10, batch_source=60).resolved()
    hist = run(cfg)
    assert steps[(cfg.num_sources, 1)][0] == 4 and steps[(0, 1)][0] == 2  # 128 // 60 = 2, the 8 left dropped
    assert len(hist.rows[1]["d2_i"]) == cfg.num_sources  # the estimators read all 4 steps, the partial one too


def test_estimators_scale_both_sides_so_beta_ignores_the_learning_rate_ratio(tiny, monkeypatch):
    """The auto-weighted beta_i must not depend on lr_T / lr_S when both sides are scaled by it (docs/authors-code.md:
    scaling only the sources doubled FedDA's auto beta)."""
    from fda_ray.algorithms.fda import methods as fda

    seen = []
    orig = fda.estimate

    def spy(steps, sources, **kw):
        seen.append((steps.clone(), sources.clone()))
        return orig(steps, sources, **kw)

    monkeypatch.setattr(fda, "estimate", spy)
    cfg = tiny(method="fedda_auto", rounds=1, batch_target=8, lr_source=0.01, lr_target=0.002).resolved()
    run(cfg)
    steps, sources = seen[0]
    ratio = cfg.lr_target / cfg.lr_source
    raw = orig(steps / ratio, sources / ratio)
    scaled = orig(steps, sources)
    from fda_ray.algorithms.fda.estimators import auto_beta

    # undoing the scale in float32 rounds every input by up to 2^-24 (6e-8) relative: beta agrees to ~1e-8;
    # scaling one side only moves it by a factor of ~2
    torch.testing.assert_close(auto_beta(scaled, "fedda"), auto_beta(raw, "fedda"), rtol=1e-6, atol=1e-12)
    # and not what scaling the sources alone gives
    assert not torch.allclose(auto_beta(orig(steps / ratio, sources), "fedda"), auto_beta(raw, "fedda"), rtol=1e-3)


def test_finetune_makes_a_fresh_adam_every_epoch_under_the_authors_protocol(tiny):
    src = run(tiny(method="source_only", noise=0.3))
    fresh = finetune_from(tiny(method="finetune_offline", noise=0.3, finetune_epochs=3), src.final_weights)
    carried = finetune_from(tiny(method="finetune_offline", noise=0.3, finetune_epochs=3, baseline_protocol="loop"),
                            src.final_weights)
    # epoch 1 is the same (one fresh Adam either way); from epoch 2 the optimizer state differs
    assert fresh.rows[0]["train_loss_target"] == carried.rows[0]["train_loss_target"]
    assert not torch.equal(fresh.final_weights, carried.final_weights)
    # a fresh Adam each epoch = three one-epoch fine-tunings chained, each from the last one's weights
    # (epochs are numbered after the 1 + 2 rounds: 3, 4, 5 seed their batches and noise)
    w = src.final_weights
    for epoch in (3, 4, 5):
        w = _one_epoch(tiny, w, epoch)
    assert torch.equal(w, fresh.final_weights)


def _one_epoch(tiny, start, epoch_index):
    """One fine-tuning epoch with a fresh Adam, numbered `epoch_index` (its seeds), from `start`."""
    from fda_ray.algorithms import ClientTask
    from fda_ray.train.client import run_task

    exp = build_experiment(tiny(method="finetune_offline", noise=0.3))
    cfg = exp.cfg
    task = ClientTask(exp.target_index, "epoch", epoch_index, {"lr": cfg.lr_target, "batch": cfg.batch_target,
                                                               "send": "weights"}, purpose="finetune")
    return run_task(exp.clients[exp.target_index], task, {"global": start}).tensors["weights"]


def test_auto_methods_lower_learning_rates_after_warmup(tiny, monkeypatch):
    from fda_ray.train import client as client_mod

    seen = []
    orig = client_mod.RECIPES.get("epoch")

    def spy(client, task, inputs):
        h = task.hparams
        seen.append((task.round, client.index, h["lr"], h["batch"], h.get("record_steps", False)))
        return orig(client, task, inputs)

    monkeypatch.setitem(client_mod.RECIPES._items, "epoch", spy)
    cfg = tiny(method="fedda_auto").resolved()
    run(cfg)
    warm = [s for s in seen if s[0] == 0]
    main = [s for s in seen if s[0] == 1]
    assert {s[2] for s in warm} == {cfg.lr_source} and all(s[1] < cfg.num_sources for s in warm)
    assert {s[2] for s in main if s[1] < cfg.num_sources} == {cfg.lr_source * 0.1}
    assert [s[2:] for s in main if s[1] == cfg.num_sources] == [(cfg.lr_target * 0.1, 4, True)]


def test_learns_above_chance(tiny):
    hist = run(tiny(method="fedgp", rounds=4, samples_per_client=256))
    assert hist.final_accuracy > 0.5  # 10 balanced classes: chance is 0.1


def test_history_parquet_round_trip(tiny, tmp_path):
    hist = run(tiny(method="fedgp_auto", batch_target=8))
    path = hist.to_parquet(tmp_path / "h.parquet")
    rows = pq.read_table(path).to_pylist()
    assert len(rows) == len(hist.rows)
    assert rows[-1]["method"] == "fedgp_auto" and rows[-1]["noise"] == 0.0
    assert rows[-1]["beta_i"] == pytest.approx(hist.rows[-1]["beta_i"])
    assert rows[0]["beta_i"] is None  # warm-up rounds have no beta
    assert not (tmp_path / "h.parquet.tmp").exists()


def test_model_weights_only_for_resnet18(tiny):
    with pytest.raises(ValueError, match="model_weights='w.pt' is invalid: only models resnet18, resnet50, resnet101, "
                                         "resnet18_multitask, shot_resnet18, shot_resnet50 load"):
        tiny(model="simple_cnn", model_weights="w.pt")


def test_other_models_and_datasets_run_through_the_engine(tiny):
    hist = run(tiny(method="fedgp", model="colored_mnist_cnn", rounds=1, samples_per_client=64))
    assert len(hist.rows) == 2 and 0 <= hist.final_accuracy <= 1
    syn = run(_synthetic_config())
    assert math.isnan(syn.final_accuracy) and math.isfinite(syn.final_loss)


def _synthetic_config():
    from fda_ray.core.config import RunConfig

    return RunConfig(dataset="synthetic", method="fedgp_auto", num_sources=2, rounds=1, warmup_rounds=1,
                     samples_per_client=128, test_samples=100, target_labelled=40, batch_target=8, threads=1)


@pytest.mark.parametrize("method,stop_after,protocol", [("fedgp_auto", 1, "authors"), ("finetune_offline", 2, "authors"),
                                                        ("fedda", 0, "authors"), ("finetune_offline", 5, "loop")])
def test_a_run_resumed_from_a_checkpoint_equals_an_uninterrupted_run(tiny, method, stop_after, protocol):
    """Checkpoints after every round; resuming from the one after round `stop_after` (in a fresh experiment,
    as a restarted trial would) gives the uninterrupted run's rows, weights and client states."""
    from fda_ray.runtime.engine import SerialExecutor, build_experiment, run_rounds

    # ("finetune_offline", 5, "loop"): resumed after the 2nd fine-tuning epoch, whose Adam the 3rd carries on
    cfg = tiny(method=method, rounds=3, baseline_protocol=protocol)
    saved: list[dict] = []
    exp = build_experiment(cfg)
    full_ex = SerialExecutor(exp.clients)
    full = run_rounds(exp, full_ex, checkpoint=saved.append)
    # a checkpoint after every round, fine-tuning epochs (finetune_offline: 3 after the 1 + 3 rounds) too
    assert [c["next_round"] for c in saved] == list(range(1, 5 + (3 if method == "finetune_offline" else 0)))
    exp2 = build_experiment(cfg)
    ex2 = SerialExecutor(exp2.clients)
    resumed = run_rounds(exp2, ex2, resume=saved[stop_after])
    keys = ("round", "phase", "accuracy", "loss", "beta_i", "train_loss_target")
    assert [{k: r.get(k) for k in keys} for r in resumed.rows] == [{k: r.get(k) for k in keys} for r in full.rows]
    assert torch.equal(resumed.final_weights, full.final_weights)
    assert same_state(ex2.client_states(), full_ex.client_states())
    assert protocol == "authors" or "optimizer" in full_ex.client_states()[-1]  # the Adam moments were kept


# ---------------------------------------------------------------- per-round estimates (issue 6)

ESTIMATE_KEYS = ("sigma2", "d2_i", "tau2d2_i", "delta2_target_only", "delta2_fedgp_auto", "predicted_rule")


@pytest.mark.parametrize("method", ["source_only", "fedda", "fedgp", "finetune_offline"])
def test_every_main_round_logs_the_estimates(tiny, method):
    cfg = tiny(method=method, finetune_epochs=1)
    hist = run(cfg)
    main = [r for r in hist.rows if r["phase"] == "main"]
    assert len(main) == cfg.rounds
    for r in main:
        assert all(k in r for k in ESTIMATE_KEYS), method
        assert r["sigma2"] >= 0 and len(r["d2_i"]) == cfg.num_sources
        # the rule the theory predicts is the static rule with the smallest logged Delta^2
        static = {k: r[f"delta2_{k}"] for k in ("target_only", "source_only", "fedda", "fedgp")}
        assert r["predicted_rule"] == min(static, key=static.get)
        assert r["delta2_target_only"] == pytest.approx(r["sigma2"])
    assert all("sigma2" not in r for r in hist.rows if r["phase"] != "main")


@pytest.mark.parametrize("method", ["source_only", "target_only", "fedda"])
def test_logging_the_estimates_does_not_change_the_run(tiny, method):
    """The side a method ignores trains on its own seeds: weights and accuracies are those of a run without."""
    on, off = run(tiny(method=method, log_estimates=True)), run(tiny(method=method, log_estimates=False))
    assert torch.equal(on.final_weights, off.final_weights)
    assert on.column("accuracy") == off.column("accuracy")
    assert all("sigma2" in r for r in on.rows if r["phase"] == "main")
    assert all("sigma2" not in r for r in off.rows)


def test_target_only_logs_estimates_only_when_asked(tiny):
    assert tiny(method="target_only").resolved().log_estimates is False  # it would train every source
    assert tiny(method="fedgp").resolved().log_estimates is True
    with pytest.raises(ValueError, match="log_estimates='yes' is invalid"):
        tiny(log_estimates="yes")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: run on a GPU machine (pytest -m gpu)")
@pytest.mark.parametrize("method", ["fedgp", "fedgp_auto", "fedda", "ditto"])
def test_run_on_cuda_follows_the_cpu_run(tiny, method):
    """--device cuda: the clients train and the server aggregates (the CUDA kernel) on the GPU, the clients'
    CPU results crossing to it once a round. The numbers are the CPU run's up to summation order and TF32
    convolutions (cuDNN's default), so accuracies agree to a few of the 100 test images, not bit for bit."""
    cfg = tiny(method=method, log_estimates=method.startswith("fedgp"), warmup_rounds=0 if method == "ditto" else 1)
    h_cpu, h_gpu = run(cfg), run(cfg.replace(device="cuda"))
    assert [r["round"] for r in h_gpu.rows] == [r["round"] for r in h_cpu.rows]
    gaps = [abs(a["accuracy"] - b["accuracy"]) for a, b in zip(h_cpu.rows, h_gpu.rows)]
    drift = float((h_gpu.final_weights.cpu() - h_cpu.final_weights).abs().max())
    print(f"{method}: accuracy gaps {gaps}, final weights' largest difference {drift:.2e}")
    assert max(gaps) <= 0.05
    # Adam's steps are of size lr (1e-3 here) whatever the gradient's size, so reordered sums can move a
    # weight by a few steps over the run's ~20 steps, but not by more than all of them.
    lr = cfg.resolved()
    assert drift <= 20 * max(lr.lr_source, lr.lr_target)
