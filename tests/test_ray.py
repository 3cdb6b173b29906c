"""The Ray executor against the serial reference: same metrics, same weights, same client state, also
after injected faults; a client that keeps failing ends the run with the finished rounds kept."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray
import torch

from fda_ray.runtime import engine
from fda_ray.experiments.cli import main
from fda_ray.runtime.driver import DriverActor, run_ray
from fda_ray.runtime.engine import RunFailed, SerialExecutor, build_experiment, run_rounds
from fda_ray.runtime import resources
from fda_ray.runtime.ray_executor import RayExecutor

# Per-round values that must agree between executors (timings are excluded).
COMPARED = ("round", "phase", "accuracy", "loss", "beta_i", "cosine_mean_i", "filtered_share_i", "sigma2", "d2_i",
            "tau2d2_i", "delta_i", "gbar2", "train_loss_target")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _assert_same_rows(a: list[dict], b: list[dict]) -> None:
    """Exactly equal: the clients run the same code with the same thread count (RunConfig.threads) in either
    executor, and every draw is seeded by (seed, round, client, purpose)."""
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        for k in COMPARED:
            assert ra.get(k) == rb.get(k), (k, ra["round"], ra.get(k), rb.get(k))


def _serial(cfg):
    exp = build_experiment(cfg)
    ex = SerialExecutor(exp.clients)
    return run_rounds(exp, ex), ex.client_states()


def _plan(cfg, k):
    """The resource model's plan (fda_ray.runtime.resources) of k clients an actor on the running Ray."""
    return resources.plan(cfg.replace(executor="ray", clients_per_actor=k), resources.from_ray())


def _ray(cfg, faults=None):
    exp = build_experiment(cfg)
    ex = RayExecutor(exp.clients, plan=_plan(exp.cfg, cfg.clients_per_actor or 1), retries=cfg.client_retries,
                     faults=faults, threads=cfg.threads)
    try:
        return run_rounds(exp, ex), ex.client_states(), list(ex.restarts)
    finally:
        ex.shutdown()


# Each case starts 4 actor processes (each imports torch, ~3 CPU-s): the fast tier keeps the one that runs the most of
# the client code (the target trains, the estimates are logged, the auto-weighting), the others are the slow tier's.
@pytest.mark.parametrize("method,log", [pytest.param("source_only", False, marks=pytest.mark.slow),
                                        pytest.param("source_only", True, marks=pytest.mark.slow),
                                        pytest.param("fedgp", None, marks=pytest.mark.slow),
                                        ("fedgp_auto", None)])
def test_ray_equals_serial(local_ray, tiny, method, log):
    cfg = tiny(method=method, rounds=2, log_estimates=log)  # 3 sources, 1 warm-up + 2 rounds
    h_serial, states_serial = _serial(cfg)
    h_ray, states_ray, restarts = _ray(cfg.replace(executor="ray"))
    assert restarts == []
    _assert_same_rows(h_serial.rows, h_ray.rows)
    assert torch.equal(h_ray.final_weights, h_serial.final_weights)
    assert states_ray == states_serial
    # The state really was kept across rounds: the target trains in the 2 main rounds, each source in all
    # 3; source_only's target trains only to log the estimates.
    trains_target = method != "source_only" or log
    assert states_serial[-1]["rounds_trained"] == (2 if trains_target else 0)
    assert ("sigma2" in h_ray.rows[-1]) == (log is not False)
    assert states_serial[0]["rounds_trained"] == 3 and states_serial[0]["last_round"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("faults", [{(1, 1): ["kill"]}, {(3, 2): ["raise"], (0, 0): ["kill", "raise"]}],
                         ids=["killed-process", "raised-error"])
def test_faulty_client_is_restarted_and_round_redone(local_ray, tiny, faults):
    cfg = tiny(method="fedgp_auto", rounds=2)
    h_serial, states_serial = _serial(cfg)
    h_ray, states_ray, restarts = _ray(cfg.replace(executor="ray"), faults=faults)
    assert len(restarts) == sum(len(v) for v in faults.values())
    assert {(c, r) for c, r, _ in restarts} == set(faults)
    _assert_same_rows(h_serial.rows, h_ray.rows)
    assert torch.equal(h_ray.final_weights, h_serial.final_weights)
    assert states_ray == states_serial  # restored from the snapshot, then trained the redone round


@pytest.mark.slow
@pytest.mark.parametrize("faults", [{}, {(2, 1): ["kill"]}, {(1, 2): ["raise"], (3, 1): ["kill"]}],
                         ids=["undisturbed", "killed-process", "raised-and-killed"])
def test_pooled_actors_equal_serial(local_ray, tiny, faults):
    """Two clients per actor (4 clients on 2 actors): the same numbers and states, also when an actor that
    hosts two clients dies with a call of its other client still queued."""
    cfg = tiny(method="fedgp_auto", rounds=2)
    h_serial, states_serial = _serial(cfg)
    pooled = cfg.replace(executor="ray", clients_per_actor=2)
    exp = build_experiment(pooled)
    ex = RayExecutor(exp.clients, plan=_plan(exp.cfg, 2), faults=faults)
    try:
        assert ex.num_actors == 2 and ex.groups == [[0, 2], [1, 3]]
        h_ray = run_rounds(exp, ex)
        states_ray, restarts = ex.client_states(), list(ex.restarts)
    finally:
        ex.shutdown()
    assert len(restarts) == sum(len(v) for v in faults.values())
    _assert_same_rows(h_serial.rows, h_ray.rows)
    assert torch.equal(h_ray.final_weights, h_serial.final_weights)
    assert states_ray == states_serial


def _pooled_vectorised(cfg, faults):
    exp = build_experiment(cfg)
    ex = RayExecutor(exp.clients, plan=_plan(exp.cfg, 2), faults=faults, vectorise=True)
    try:
        return run_rounds(exp, ex), list(ex.restarts)
    finally:
        ex.shutdown()


@pytest.mark.slow
def test_pooled_vectorised_actors_redo_a_killed_cohort_exactly(local_ray, tiny):
    """Each actor trains its two clients as one cohort (fda_ray.train.cohort); a killed actor's cohort is redone
    as the same cohort, so the run equals the undisturbed one exactly, and the serial vectorised run (other
    cohorts: all sources in one) within float tolerance (tests/test_cohort.py)."""
    cfg = tiny(method="fedgp", rounds=2, samples_per_client=96, vectorise="on")
    h_clean, _ = _pooled_vectorised(cfg, {})
    h_killed, restarts = _pooled_vectorised(cfg, {(2, 1): ["kill"]})
    assert len(restarts) == 1
    _assert_same_rows(h_clean.rows, h_killed.rows)
    assert torch.equal(h_clean.final_weights, h_killed.final_weights)
    exp = build_experiment(cfg)
    h_serial = run_rounds(exp, SerialExecutor(exp.clients, vectorise=True))
    moved = (h_serial.final_weights - exp.initial_weights()).norm()
    assert float((h_serial.final_weights - h_clean.final_weights).norm() / moved) <= 1e-2


@pytest.mark.slow
def test_client_that_keeps_failing_stops_the_run_and_keeps_finished_rounds(local_ray, tiny):
    cfg = tiny(method="fedgp", rounds=3, executor="ray", client_retries=2)
    with pytest.raises(RunFailed, match=r"round 2: client 3 failed round 2 3 times.*injected fault") as info:
        run_ray(cfg, faults={(3, 2): ["raise"] * 5})
    hist = info.value.history
    assert [r["round"] for r in hist.rows] == [0, 1]
    h_serial, _ = _serial(tiny(method="fedgp", rounds=1))  # the same first two rounds, undisturbed
    _assert_same_rows(h_serial.rows, hist.rows)
    assert torch.equal(hist.final_weights, h_serial.final_weights)


@pytest.mark.slow
def test_driver_actor_and_cli(local_ray, tiny, capsys, tmp_path):
    cfg = tiny(method="fedda", rounds=1)
    h_serial, _ = _serial(cfg)
    h_actor = ray.get(DriverActor.remote(cfg.replace(executor="ray")).run.remote())
    _assert_same_rows(h_serial.rows, h_actor.rows)
    args = ["--dataset", "fashion-mnist", "--data-dir", cfg.data_dir, "--method", "fedda", "--num-sources", "3",
            "--rounds", "1", "--warmup-rounds", "1", "--samples-per-client", "128", "--test-samples", "100",
            "--target-labelled", "32", "--threads", "1", "--json", "--executor", "ray", "--cpus-per-client", "0.5"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["executor"] == "ray" and out["config"]["cpus_per_client"] == 0.5
    _assert_same_rows(h_serial.rows, out["rounds"])


@pytest.mark.slow
def test_serial_and_ray_command_lines_give_the_same_numbers(fmnist_dir):
    """As a user runs them: `python -m fda_ray` with --executor serial and ray and no thread option. The
    serial process has the machine's default thread count and the actors another, but both train with the
    config's threads (default 1), so every per-round number is equal."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1]))
    env.pop("FDA_RAY_TEST_THREADS", None)
    args = [sys.executable, "-m", "fda_ray", "--data-dir", str(fmnist_dir), "--method", "fedgp_auto", "--noise", "0.4",
            "--num-sources", "3", "--rounds", "2", "--warmup-rounds", "1", "--samples-per-client", "128",
            "--test-samples", "100", "--target-labelled", "40", "--seed", "3", "--json"]
    out = {}
    for executor in ("serial", "ray"):
        p = subprocess.run([*args, "--executor", executor], capture_output=True, text=True, env=env, timeout=600)
        assert p.returncode == 0, p.stderr[-2000:]
        out[executor] = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["serial"]["config"]["threads"] == out["ray"]["config"]["threads"] == 1
    _assert_same_rows(out["serial"]["rounds"], out["ray"]["rounds"])


def test_run_dispatches_on_executor(local_ray, tiny):
    cfg = tiny(method="target_only", rounds=1)
    _assert_same_rows(engine.run(cfg).rows, engine.run(cfg.replace(executor="ray")).rows)


@pytest.mark.parametrize("flag,value,field", [("--executor", "spark", "executor"),
                                              ("--gpus-per-client", "1.5", "gpus_per_client"),
                                              ("--cpus-per-client", "0", "cpus_per_client"),
                                              ("--client-retries", "-1", "client_retries"),
                                              ("--clients-per-actor", "0", "clients_per_actor")])
def test_cli_rejects_bad_executor_settings(flag, value, field, capsys):
    assert main([flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {field}=")


def test_engine_benchmark_rejects_unknown_settings(capsys):
    from benchmarks.engine import main as bench_main

    assert bench_main(["--settings", "serial-1t,spark"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "settings='serial-1t,spark'" in err and "ray-cold" in err


def test_engine_benchmark_needs_flowers_interpreter_for_the_flower_row(capsys):
    from benchmarks.engine import main as bench_main

    assert bench_main(["--settings", "default,flower"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: flower_python=None is invalid with the flower setting")


def test_engine_benchmark_runs_flower_under_its_own_interpreter_and_compares_with_it(monkeypatch, fmnist_dir, capsys):
    """The flower row runs under --flower-python with this repository importable; `x flower` is each setting's
    s/round over Flower's."""
    import subprocess
    from types import SimpleNamespace

    from benchmarks import engine as bench

    def row(name: str, s: float) -> dict:
        return {"setting": name, "rounds": 3, "seconds_per_round": s, "driver_seconds_per_round": float("nan"),
                "driver_share": float("nan"), "beyond_busiest_actor_seconds": float("nan"),
                "busiest_actor_seconds": float("nan"), "first_round_seconds": 2.0, "final_accuracy": 0.5}

    calls = []

    def fake_run(cmd, **kw):
        calls.append((cmd, kw.get("env")))
        name = "flower" if "benchmarks.flower" in cmd else cmd[-1]
        return SimpleNamespace(returncode=0, stdout="BENCH " + json.dumps([row(name, 9.0 if name == "flower" else 3.0)]),
                               stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert bench.main(["--settings", "default,flower", "--flower-python", "/venv/bin/python", "--rounds", "3",
                       "--data-dir", str(fmnist_dir)]) == 0
    (default_cmd, _), (flower_cmd, env) = calls
    assert default_cmd[-2:] == ["--one", "default"]
    assert flower_cmd[:3] == ["/venv/bin/python", "-m", "benchmarks.flower"] and "--rounds" in flower_cmd
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(__file__).resolve().parents[1])
    out = capsys.readouterr().out
    assert "| default | 3.00 | - | 0.33 |" in out and "| flower | 9.00 | - | 1.00 |" in out


@pytest.mark.slow
def test_engine_benchmark_prints_the_finished_settings_when_a_later_one_fails(monkeypatch, fmnist_dir, capsys):
    """A setting that fails (say, cut off or out of memory on a GPU) does not take the settings already
    measured with it: their rows are printed, and the exit code says the run was incomplete."""
    import subprocess
    from types import SimpleNamespace

    from benchmarks import engine as bench

    row = {"setting": "serial-1t", "rounds": 3, "seconds_per_round": 1.5, "driver_seconds_per_round": 0.1,
           "driver_share": 0.07, "beyond_busiest_actor_seconds": 0.0, "busiest_actor_seconds": 1.4,
           "first_round_seconds": 2.0, "final_accuracy": 0.5}
    outcomes = iter([SimpleNamespace(returncode=0, stdout="BENCH " + json.dumps([row]), stderr=""),
                     SimpleNamespace(returncode=1, stdout="", stderr="RuntimeError: CUDA out of memory")])
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: next(outcomes))
    assert bench.main(["--settings", "serial-1t,ray", "--data-dir", str(fmnist_dir)]) == 1
    out, err = capsys.readouterr()
    assert "| serial-1t | 1.50 |" in out and "ray" not in out.split("| setting |")[1].split("serial-1t")[0]
    assert "serial-1t: done, 1.500 s/round, first round 2.0 s" in err
    assert "setting ray failed" in err and "CUDA out of memory" in err


@pytest.mark.slow
@pytest.mark.parametrize("method,faults", [("ditto", {(3, 1): ["kill"]}), ("fedrep", {(1, 1): ["kill"], (3, 2): ["raise"]})],
                         ids=["ditto-target-killed", "fedrep-source-killed"])
def test_personalised_state_survives_a_killed_actor(local_ray, tiny, method, faults):
    """The personal model (Ditto's v_T) and the heads (FedRep) live in the clients' actors; a killed actor is
    rebuilt from each client's state after its last finished task, and the run gives the serial numbers."""
    from conftest import same_state

    params = {"fedrep": {"head_epochs": 2}} if method == "fedrep" else {}
    cfg = tiny(method=method, rounds=3, warmup_rounds=None, noise=0.2, params=params)
    h_serial, states_serial = _serial(cfg)
    h_ray, states_ray, restarts = _ray(cfg.replace(executor="ray", cpus_per_client=0.5), faults=faults)
    assert {(c, r) for c, r, _ in restarts} == set(faults)
    assert [(r["round"], r["accuracy"], r["loss"]) for r in h_ray.rows] == \
        [(r["round"], r["accuracy"], r["loss"]) for r in h_serial.rows]
    assert torch.equal(h_ray.final_weights, h_serial.final_weights)
    assert same_state(states_ray, states_serial)
    key = "personal" if method == "ditto" else "head"
    assert key in states_ray[3]


@pytest.mark.slow
def test_ray_reads_image_files_as_serial_does(local_ray, tmp_path):
    """DomainBed image folders under Ray: the actors read (and augment) the files themselves, from the paths the
    views carry; the numbers equal the serial run's."""
    from test_domainbed import _folder_tree

    from fda_ray.core.config import RunConfig

    _folder_tree(tmp_path / "PACS", ["art_painting", "cartoon", "photo", "sketch"], ["dog", "horse"], per=5)
    cfg = RunConfig(dataset="pacs", data_dir=str(tmp_path), method="fedgp", model="simple_cnn", test_env=1, rounds=1,
                    warmup_rounds=1, target_fraction=0.5, batch_source=4, batch_target=2, threads=1)
    h_serial, states_serial = _serial(cfg)
    h_ray, states_ray, restarts = _ray(cfg.replace(executor="ray"))
    assert restarts == [] and len(h_serial.rows) == 2
    _assert_same_rows(h_serial.rows, h_ray.rows)
    assert torch.equal(h_ray.final_weights, h_serial.final_weights)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fedavg_finetune", "fedavg_finetune_auxinfo", "fedavg_finetune_gp",
                                    "fedavg_finetune_auxinfo_gp"])
def test_ray_equals_serial_for_seed_000s_two_step_rounds(local_ray, conditions, method):
    """The online fine-tuning step and the GP warm-up's second step run on the actors as in the serial loop."""
    cfg = conditions(method=method, rounds=2, params={"healthcare": {"gp_warmup_rounds": 1}} if "gp" in method else {})
    h_serial, states_serial = _serial(cfg)
    h_ray, states_ray, restarts = _ray(cfg.replace(executor="ray"))
    assert restarts == []
    _assert_same_rows(h_serial.rows, h_ray.rows)
    assert [r["auc"] for r in h_ray.rows] == [r["auc"] for r in h_serial.rows]
    assert torch.equal(h_ray.final_weights, h_serial.final_weights)
    assert states_ray == states_serial
    assert states_serial[-1]["rounds_trained"] == 2  # the target: one step a round


@pytest.mark.slow
@pytest.mark.parametrize("method,params", [("fssda", {}), ("ssda_only", {}), ("fssda", {"layout": "fda"}),
                                           ("fssda_serial", {"serial_source_rounds": 1})])
def test_ray_equals_serial_for_seed_002(local_ray, fmnist5, method, params):
    """FSSDA's devices (K clients holding a source and a target role, no separate target client), two models in
    the server state, two source domains, SSDAOnly's models in the clients' states: Ray gives the serial numbers."""
    cfg = fmnist5(method=method, source_envs=(1, 4), params={"fssda": params})
    a = engine.run(cfg)
    b = engine.run(cfg.replace(executor="ray", cpus_per_client=0.5))
    _assert_same_rows(a.rows, b.rows)
    for k in ("imitation_lambda_i", "imitation_weights_i", "teacher_accuracy", "device_accuracy_i"):
        assert [r.get(k) for r in a.rows] == [r.get(k) for r in b.rows], k
    assert torch.equal(a.final_weights, b.final_weights)


@pytest.mark.slow
@pytest.mark.parametrize("method,params", [("fedwca", {}), ("fedwca", {"revision_interval": 2}), ("shot_local", {})])
def test_ray_equals_serial_for_seed_003(local_ray, fedwca5, method, params):
    """FedWCA: per-client broadcasts (each client its cluster model and the soft models), the one-time clustering,
    the clients' alpha and beta, Local's models in the clients' states, dropout seeded per task: Ray gives the serial
    numbers. The source model is trained in both (Ray first, on an actor; the cache emptied before the serial run)."""
    import os
    from pathlib import Path

    cfg = fedwca5(method=method, rounds=3, fedwca=params, seed=7)
    cache = Path(os.environ["FDA_RAY_CACHE_DIR"])
    for f in cache.glob("*.pt"):
        f.unlink()
    b = engine.run(cfg.replace(executor="ray", cpus_per_client=0.2))
    for f in cache.glob("*.pt"):
        f.unlink()
    a = engine.run(cfg)
    assert a.rows[0]["source_steps"] > 0 and b.rows[0]["source_steps"] == a.rows[0]["source_steps"]
    _assert_same_rows(a.rows, b.rows)
    for k in ("client_accuracy", "val_accuracy", "clusters", "alpha", "beta"):
        assert [r.get(k) for r in a.rows] == [r.get(k) for r in b.rows], k
    assert torch.equal(a.final_weights, b.final_weights)
