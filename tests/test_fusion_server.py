"""The fusion server (issue 62, shape (b)): trials that stay Tune trials of their own send their clients' local
training to one actor that fuses the rounds waiting; each trial's numbers are those of its run alone (the
tolerance of tests/test_fusion.py, for the same reason: the same cohort arithmetic in a cohort with more rows)."""
from __future__ import annotations

import json
import threading
import time

import pytest

from fda_ray.experiments.records import Trial, is_done, read_rows
from fda_ray.experiments.trials import run_trial
from fda_ray.runtime import fusion, fusion_server

from test_fusion import _members, _same_numbers, _trial

@pytest.fixture(scope="module")
def local_ray():
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _run_served(trials, records, names, outcome) -> None:
    """Each trial's run_trial in a thread of its own (as Tune trials run in processes of their own)."""
    def one(t):
        try:
            run_trial(t, records, group=fusion_server.served_group(names, t.key))
            outcome[t.key] = None
        except BaseException as e:  # noqa: BLE001
            outcome[t.key] = e

    threads = [threading.Thread(target=one, args=(t,)) for t in trials]
    for th in threads:
        th.start()
    for th in threads:
        th.join(300)


@pytest.mark.slow  # a local Ray and its actor processes
def test_served_trials_give_their_numbers_alone_and_are_fused(local_ray, fmnist_dir, tmp_path):
    """Four trials of different methods, noise, beta, learning rates, seeds and shard sizes served at once, and a
    fifth that fails in its first round (it diverges): it leaves, the others go on and equal their runs alone."""
    from fda_ray.runtime.failures import RunFailed

    trials = _members(fmnist_dir)[:4]
    diverges = _trial(fmnist_dir, "fedgp", noise=0.4, seed=3, lr_source=1e12, lr_target=1e12)
    alone, served = tmp_path / "alone", tmp_path / "served"
    for t in trials:
        run_trial(t, alone)
    names = fusion_server.start_servers(threads=1, device="cpu", window_s=2.0)
    try:
        outcome: dict = {}
        t0 = time.perf_counter()
        _run_served([*trials, diverges], served, names, outcome)
        wall = time.perf_counter() - t0
        assert isinstance(outcome.pop(diverges.key), RunFailed) and not is_done(served / diverges.key)
        assert outcome == {t.key: None for t in trials}
        import ray

        (name,) = [n for ns in names.values() for n in ns]
        stats = ray.get(ray.get_actor(name, namespace=fusion_server.NAMESPACE).stats.remote())
    finally:
        fusion_server.stop_servers(names)
    for t in trials:
        assert is_done(served / t.key)
        _same_numbers(alone, served, t)
        fused = read_rows(served / t.key)["fused"]
        assert fused["served"] == 1 and fused["batches"] == len(read_rows(alone / t.key)["rows"])
        assert set(fused) == {"members", "batches", "served", "from_round", "wall_seconds"}
        # its own run time: its driver's work and its jobs' share of the server's batches, not the other trials'
        # rounds it waited through (its wall time, which the record keeps); charged its wall time, the four trials
        # summed to about 4 walls of the served phase
        assert read_rows(served / t.key)["seconds"] < fused["wall_seconds"] <= wall
    own = [read_rows(served / t.key)["seconds"] for t in trials]
    assert 0 < sum(own) <= 2.5 * wall, (own, wall)
    assert max(stats["members"]) >= 2  # rounds of several trials ran as one batch
    assert stats["hosting"] == []  # every trial left


def test_a_member_that_never_hands_in_is_waited_for_one_window_once(monkeypatch):
    """Dynamic batching (TrialGroup's window): a member whose process ended without leaving holds the first batch
    back one window, and is not waited for after that; one that hands in again is waited for again."""
    from fda_ray.train import cohort

    monkeypatch.setattr(cohort, "run_jobs", lambda jobs, *a, **k: [j for j in jobs])
    group = fusion.TrialGroup(["a", "gone"], window_s=1.0)  # (margins far above a loaded machine's scheduling)
    try:
        t0 = time.monotonic()
        assert group.wait(group.submit("a", ["a0"])) == ["a0"]
        first = time.monotonic() - t0
        t0 = time.monotonic()
        assert group.wait(group.submit("a", ["a1"])) == ["a1"]
        second = time.monotonic() - t0
        assert first >= 1.0 and second < 0.5, (first, second)
        assert group.stats.per_member == {"a": [2, 1]}
        group.add("b")  # a newcomer is waited for (up to the window) ...
        got: list = []
        th = threading.Thread(target=lambda: got.append(group.wait(group.submit("a", ["a2"]))))
        th.start()
        time.sleep(0.1)
        assert group.wait(group.submit("b", ["b0"])) == ["b0"]
        th.join(5)
        assert got == [["a2"]] and group.stats.members[-1] == 2  # ... and fused with the others
    finally:
        group.close()


@pytest.mark.parametrize("raw", ["-1", "nan", "soon", "1e9"])
def test_a_bad_fusion_window_is_one_line_naming_the_variable(raw, monkeypatch, capsys, tmp_path):
    """(1e9 was taken: a served trial whose process ended without leaving held its server's rounds that long.)"""
    from fda_ray.experiments import sweep

    monkeypatch.setenv(fusion.WINDOW_ENV, raw)
    code = sweep.main(["--search", "beta", "--fuse", "4", "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"error: ${fusion.WINDOW_ENV}={raw!r} is invalid: seconds, from 0 to 60"]
    assert not (tmp_path / "s").exists()


def test_a_served_trials_bundle_is_its_drivers_share(fmnist_dir):
    cfg = _trial(fmnist_dir, "fedgp").config().resolved()
    assert fusion_server.served_bundle(cfg, 4) == {"CPU": 0.25}
    cuda = type("C", (), {"threads": 2, "device": "cuda"})()
    assert fusion_server.served_bundle(cuda, 8, {"fda_driver": 1.0}) == {"CPU": 0.25, "GPU": 0.0625, "fda_driver": 1.0}


def _stop_every_other(monkeypatch) -> None:
    """The searches' scheduler, for a test: every other trial (in the order their first results come) stops after
    its third round, the others finish, whatever the timing (which ASHA's rungs depend on)."""
    from ray.tune.schedulers import FIFOScheduler, TrialScheduler

    from fda_ray.experiments import search as search_module

    class StopEveryOther(FIFOScheduler):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list = []

        def on_trial_result(self, tune_controller, trial, result):
            if trial not in self.seen:
                self.seen.append(trial)
            if self.seen.index(trial) % 2 == 1 and result.get("round", 0) >= 2:
                return TrialScheduler.STOP
            return TrialScheduler.CONTINUE

    monkeypatch.setattr(search_module, "scheduler_for", lambda *a, **k: StopEveryOther())


def _served_search(monkeypatch, rounds: int = 6):
    from fda_ray.papers.grids import Profile
    from fda_ray.papers.searches import SEARCHES
    from test_search import TINY, tiny_search

    search = tiny_search(profiles={"quick": Profile({**TINY, "vectorise": "on", "rounds": rounds})})
    monkeypatch.setitem(SEARCHES, search.name, search)
    return search


@pytest.mark.slow
@pytest.mark.parametrize("search_alg", ["random", "optuna"])
def test_a_search_under_a_scheduler_fuses_its_trials_which_it_still_stops_one_by_one(search_alg, fmnist_dir, tmp_path,
                                                                                 monkeypatch, no_ray):
    """--fuse with a scheduler: each trial stays a Tune trial (the scheduler stops single ones, Optuna chooses them
    one at a time), its rounds fused with the others' on the fusion server; every trial's rows are those of its run
    alone for the rounds it ran. The scheduler here stops every other trial after its third round, so that stopped
    and finished trials come whatever the timing (which ASHA's rungs depend on)."""
    import ray

    from fda_ray.experiments import sweep
    from fda_ray.experiments.search import trial_rows

    _stop_every_other(monkeypatch)
    if search_alg == "optuna":
        pytest.importorskip("optuna")
    search = _served_search(monkeypatch)
    out = tmp_path / "search"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # (Optuna without --max-concurrent: the study's own default, which let Tune start its trials one at a time)
    args = ["--search", search.name, "--num-samples", "6", *(["--max-concurrent", "4"] if search_alg == "random" else []),
            "--fuse", "4", "--search-alg", search_alg, "--data-dir", str(fmnist_dir), "--out", str(out)]
    assert sweep.main(args) == 0
    sel = json.loads((out / "selection.json").read_text())
    table = sel["studies"]["fedgp @ noise 0.4"]
    status = [e["status"] for e in table["trials"]]
    assert "stopped" in status and "finished" in status  # the scheduler stopped single trials, not their batches
    records = out / "trials"
    most = 0
    for e in table["trials"]:
        rows, _ = trial_rows(records / e["key"])  # a stopped trial's: its rows up to where ASHA stopped it
        t = Trial.from_dict(json.loads((records / e["key"] / "trial.json").read_text()))
        alone = run_trial(t, tmp_path / "alone")
        assert 0 < len(rows) <= len(alone.rows)
        for ra, rb in zip(alone.rows, rows):
            assert ra["round"] == rb["round"]
            assert abs(ra["accuracy"] - rb["accuracy"]) <= 2.0 and abs(ra["val_accuracy"] - rb["val_accuracy"]) <= 2.0
        if e["status"] == "finished":
            fused = read_rows(records / e["key"])["fused"]
            assert fused["served"] == 1
            most = max(most, fused["members"])
    assert most >= 2  # rounds of several trials ran as one batch


@pytest.mark.slow  # (5-26 s: the fast tier stays within 8 minutes on 2 cores)
def test_an_optuna_studys_default_concurrency_is_what_the_nodes_hold(no_ray, monkeypatch):
    """Tune keeps one trial of a searcher other than its own pending unless a ConcurrencyLimiter names how many
    run: the study's default is what the cluster holds at once, a served trial's beside its fusion server."""
    import ray

    from fda_ray.core.config import RunConfig
    from fda_ray.experiments import tune as ft
    from fda_ray.runtime import resources

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    cfg = RunConfig(dataset="fashion-mnist", method="fedgp", vectorise="on").resolved()
    plain = ft.resources(cfg, ft.driver_placement(False)).bundles
    served = ft.served_resources(cfg, 4, ft.driver_placement(False)).bundles
    assert ft.study_concurrency(plain, 10) == 2  # {CPU 1} a trial on 2 CPUs
    assert ft.study_concurrency(served, 10, served=cfg) == 4  # {CPU 0.25} beside the server's {CPU 1}
    assert ft.study_concurrency(served, 3, served=cfg) == 3  # never more than the study's trials
    # an autoscaler that can add nodes: every trial may be pending (its demand is what makes it add them)
    monkeypatch.setattr(resources, "from_ray", lambda joined=None: resources.Cluster(({"CPU": 2.0},), ({"CPU": 8.0},)))
    assert ft.study_concurrency(plain, 10) == 10


def test_a_served_searchs_dry_run_says_what_a_trial_and_a_server_ask(capsys):
    from fda_ray.experiments import sweep

    code = sweep.main(["--search", "beta", "--fuse", "8", "--vectorise", "on", "--device", "cuda", "--dry-run",
                       "--plan-for", "CPU=16,GPU=1"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines[-2] == ("plan: each trial is a Tune trial of its own (the scheduler and the searcher act on single "
                         "trials) asking {CPU 0.12, GPU 0.0625} for its driver (1/8 of a trial's); its clients train on "
                         "its node's fusion server {CPU 1, GPU 0.5} per GPU, which fuses the rounds of the trials "
                         "waiting there: 8 trial(s) at once on --plan-for CPU=16,GPU=1")
    code = sweep.main(["--search", "beta", "--fuse", "8", "--vectorise", "on", "--dry-run", "--plan-for", "CPU=0.5"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["error: fuse=8 is invalid here: a fusion server asks {CPU 1} per node beside a "
                                 "trial's {CPU 0.12} and the largest node of --plan-for CPU=0.5 has {CPU 0.5}"]


def test_fuse_auto_serves_no_trial_on_cpus_where_it_measured_slower(capsys):
    """--fuse auto fuses where it measured faster: served trials on 2 CPU cores ran 0.61x (benchmarks.served), so a
    study on CPUs runs its trials as without --fuse (a number still serves them); a GPU serves 32."""
    from fda_ray.experiments import sweep

    assert fusion.group_size("auto", "cpu", served=True) == 1 and fusion.group_size("auto", "cpu") == 8
    assert fusion.group_size("auto", "cuda", served=True) == 32 and fusion.group_size(4, "cpu", served=True) == 4
    assert sweep.main(["--search", "beta", "--fuse", "auto", "--vectorise", "on", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    i = lines.index("plan: --fuse auto serves no trial of a study on cpu (fusion servers measured slower than trials "
                    "of their own on CPUs); its reruns run in fused groups")
    assert lines[i + 1].startswith("plan: each trial asks 1 bundle(s), PACK: driver {CPU: 1}")


def test_a_member_that_leaves_with_a_round_waiting_has_that_round_answered(monkeypatch):
    """A trial whose process ended while its round waited (Tune stopped or restarted it) leaves or is loaded again:
    the call waiting for that round ends with an error instead of holding a server thread for ever."""
    from fda_ray.train import cohort

    monkeypatch.setattr(cohort, "run_jobs", lambda jobs, *a, **k: list(jobs))
    group = fusion.TrialGroup(["a", "b"], window_s=30.0)
    try:
        req = group.submit("a", ["a0"])  # waits for b, up to the window
        group.leave("a")
        got = group.wait(req)
        assert len(got) == 1 and isinstance(got[0], RuntimeError) and str(got[0]) == "trial a left the group"
        assert group.wait(group.submit("b", ["b0"])) == ["b0"]  # b alone now: no wait
    finally:
        group.close()


@pytest.mark.slow
def test_a_served_search_on_a_cluster_trains_each_trial_on_its_own_nodes_server(fmnist_dir, tmp_path, monkeypatch,
                                                                              capsys, no_ray):
    """Through --address on a Ray cluster of two 2-CPU nodes: a fusion server on each node (1 CPU), the trials' drivers
    (1/2 CPU each) on both; each trial's clients train on the server of its own node (its record's client_nodes is
    its driver's node), and every trial finishes or is stopped with the rows of its run alone. Each node declares
    one driver slot (--pin-drivers), so the two trials Tune starts first run on different nodes: with two slots a node,
    Ray's placement packs both onto one node whenever it picks the same node for them, by chance (CI saw it)."""
    import ray
    from ray.cluster_utils import Cluster

    from fda_ray.experiments import sweep
    from fda_ray.experiments.search import trial_rows

    _stop_every_other(monkeypatch)
    search = _served_search(monkeypatch, rounds=4)
    from fda_ray.experiments.tune import DRIVER_RESOURCE

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {DRIVER_RESOURCE: 1}})
    c.add_node(num_cpus=2, resources={DRIVER_RESOURCE: 1})
    c.wait_for_nodes()
    out = tmp_path / "search"
    try:
        code = sweep.main(["--search", search.name, "--num-samples", "6", "--fuse", "2", "--address", c.address,
                           "--pin-drivers", "--data-dir", str(fmnist_dir), "--out", str(out), "--track", "none"])
        assert code == 0, capsys.readouterr().err[-2000:]
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()
    table = json.loads((out / "selection.json").read_text())["studies"]["fedgp @ noise 0.4"]
    assert {e["status"] for e in table["trials"]} == {"stopped", "finished"}
    records = out / "trials"
    drivers = set()
    for e in table["trials"]:
        attempt = json.loads((records / e["key"] / "nodes.json").read_text())[-1]
        assert attempt["client_nodes"] == [attempt["node_id"]]  # its own node's server
        drivers.add(attempt["node_id"])
        rows, _ = trial_rows(records / e["key"])
        alone = run_trial(Trial.from_dict(json.loads((records / e["key"] / "trial.json").read_text())),
                          tmp_path / "alone")
        assert 0 < len(rows) <= len(alone.rows)
        assert all(abs(x["accuracy"] - y["accuracy"]) <= 2.0 for x, y in zip(alone.rows, rows))
    assert len(drivers) == 2  # both nodes ran trials, each with its server


@pytest.mark.parametrize("quiet,level", [("1", "ERROR"), ("0", "NOTSET")])
def test_a_fusion_server_hides_torchs_no_cuda_notice_when_the_run_is_quiet(monkeypatch, quiet, level):
    """A quiet run's fusion server, like its trial processes, hides torch's "No CUDA runtime is found" notice (it
    came on the console once per study of a served search on CPUs); --verbose (not quiet) shows it."""
    import logging

    logger = logging.getLogger("torch.utils.cpp_extension")
    monkeypatch.setattr(logger, "level", logging.NOTSET)  # (put back after the test)
    monkeypatch.setenv("FDA_RAY_QUIET", quiet)
    monkeypatch.setattr(fusion_server.ray, "get_gpu_ids", lambda: [])  # (outside an actor it would start a Ray)
    server = fusion_server.FusionServer(1, 0.05)
    try:
        assert logging.getLevelName(logger.level) == level
    finally:
        server.group.close()


def test_served_trials_are_stranded_when_no_node_fits_one_beside_its_server():
    """The stranded-trial watch of served trials places their bundle beside each node's fusion server: after a node
    loss left only nodes whose servers hold every CPU ({CPU 1} nodes, servers of 1 thread), the launch ends in one
    line after the wait (it placed against the nodes' totals, found room, and waited for good)."""
    from fda_ray.experiments.stranded import StrandedWatch
    from fda_ray.runtime import resources

    lost = resources.Cluster(nodes=({"CPU": 1.0}, {"CPU": 1.0, "GPU": 1.0}))
    seen = fusion_server.beside_servers(lost, threads=1, cuda=False)
    assert seen.nodes == ({"CPU": 0.0}, {"CPU": 0.0, "GPU": 1.0})
    assert fusion_server.beside_servers(resources.Cluster(nodes=({"CPU": 0.5},)), 1, False).nodes == ()  # no server
    assert fusion_server.beside_servers(resources.Cluster(nodes=({"CPU": 2.0, "GPU": 2.0},)), 1, True).nodes == (
        {"CPU": 0.0, "GPU": 2.0 - 2 * fusion_server.SERVER_GPU},)  # one server per GPU on cuda
    now = [0.0]
    bundles = [{"CPU": 0.5}]
    plain = StrandedWatch(bundles, wait_s=20, cluster=lambda: lost, clock=lambda: now[0], every_s=0, holders=str)
    served = StrandedWatch(bundles, wait_s=20, cluster=lambda: seen, clock=lambda: now[0], every_s=0, holders=str)
    for t in (0.0, 10.0, 25.0):
        now[0] = t
        got_plain, got_served = plain.step(["PENDING"]), served.step(["PENDING"])
    assert got_plain is None and plain.reason is None  # the totals hold {CPU 0.5}: it would wait for good
    assert got_served is not None and "a trial (it asks {CPU: 0.5}" in got_served
    kept = fusion_server.beside_servers(resources.Cluster(nodes=({"CPU": 2.0},)), 1, False)
    assert resources.placeable(bundles, kept)  # a node with room beside its server still holds one


def test_a_served_trial_stopped_mid_round_reads_its_rounds_error_on_leaving(monkeypatch):
    """ASHA stops a served trial while a round of it waits on the server, which ends that round with "left the
    group": the executor reads it on shutdown (Ray printed the unread error's traceback, three times on a cluster)."""
    import torch

    class Remote:
        def __init__(self, name):
            self.name = name

        def remote(self, *args):
            return f"{self.name}-ref"

    class Server:
        run, leave = Remote("run"), Remote("leave")

    read = []

    def get(ref, timeout=None):
        read.append(ref)
        if ref == "run-ref":
            raise RuntimeError("trial t left the group")
        return {"members": 2, "batches": 1, "served": 1}

    monkeypatch.setattr(fusion_server.ray, "get", get)
    ex = object.__new__(fusion_server.ServedExecutor)
    ex.server, ex.key, ex.indices, ex.states, ex.fused, ex.pending = Server(), "t", [], {}, {}, []
    ex.submit({"global": torch.zeros(2)}, [])
    ex.shutdown()
    assert read == ["leave-ref", "run-ref"] and ex.pending == [] and ex.fused["members"] == 2
