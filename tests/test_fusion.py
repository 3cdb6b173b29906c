"""Fused trials (issue 62): trials in one group (fda_ray.runtime.fusion) give the numbers they give alone.

A group trains the clients of all its members as one cohort with more rows; rows never mix, so a member's numbers
equal its run alone within float tolerance: batched operations may sum in other orders for another batch count.
Tolerance, from the arithmetic (tests/test_cohort.py's module docstring): Adam turns rounding differences of
nearly cancelling gradient elements into steps of up to ~lr, so a few elements may differ by a fraction of lr while
the weights as a whole agree to ~1e-4 in relative L2 norm; the bound here is 1e-2 of the weights' change, and
accuracy within 2 test samples of 100 (a sample on the decision boundary may flip). Any real mix-up (another
member's data, learning rate, noise or seed) moves the weights by order 1 (test_the_gap_would_be_seen).
"""
from __future__ import annotations

import json
import threading

import pytest
import torch

from fda_ray.algorithms import ALGORITHMS
from fda_ray.core.config import RunConfig
from fda_ray.experiments.records import STATE_FILE, Trial, is_done, load_state, read_rows, trial_key
from fda_ray.experiments.trials import run_group, run_trial
from fda_ray.runtime import fusion
from fda_ray.runtime.engine import build_experiment
from fda_ray.train.cohort import cohort_key

REL = 1e-2


def _trial(fmnist_dir, row: str, **kw) -> Trial:
    params = dict(dataset="fashion-mnist", data_dir=str(fmnist_dir), num_sources=2, rounds=2, warmup_rounds=1,
                  samples_per_client=128, test_samples=100, target_labelled=32, vectorise="on", method=row, seed=0)
    params.update(kw)
    return Trial(trial_key(row, "noise", params.get("noise", 0.0), params["seed"], params), row,
                 params.get("noise", 0.0), params["seed"], params)


def _final(records, t: Trial) -> torch.Tensor:
    return torch.load(records / t.key / STATE_FILE, weights_only=True)["state"]["global"]


def _same_numbers(alone_dir, fused_dir, t: Trial) -> None:
    a, b = read_rows(alone_dir / t.key)["rows"], read_rows(fused_dir / t.key)["rows"]
    assert [r["round"] for r in a] == [r["round"] for r in b]
    for ra, rb in zip(a, b):
        assert abs(ra["accuracy"] - rb["accuracy"]) <= 2.0, (t.key, ra["round"])
    start = build_experiment(t.config()).initial_weights()
    wa, wb = _final(alone_dir, t), _final(fused_dir, t)
    assert float((wa - wb).norm() / (wa - start).norm()) <= REL, t.key


def _members(fmnist_dir) -> list[Trial]:
    """Members that differ in every way a fused row must keep: method (auto-weighting records its steps; Target
    Only and Oracle train no source), noise, beta, learning rates, seed and shard sizes (ragged steps)."""
    return [
        _trial(fmnist_dir, "fedgp_auto", noise=0.4),
        _trial(fmnist_dir, "fedda", noise=0.8, beta=0.3, lr_source=0.003),
        _trial(fmnist_dir, "fedgp", noise=0.0, seed=1, samples_per_client=96, target_labelled=48),
        _trial(fmnist_dir, "source_only", noise=0.4, seed=2),
        _trial(fmnist_dir, "target_only", noise=0.4, lr_target=0.01),
        _trial(fmnist_dir, "oracle", noise=0.4),
    ]


def test_a_fused_group_gives_each_trial_its_numbers_alone(fmnist_dir, tmp_path):
    trials = _members(fmnist_dir)
    alone, fused = tmp_path / "alone", tmp_path / "fused"
    for t in trials:
        run_trial(t, alone)
    seen: dict[str, list[int]] = {}
    phases: dict[str, dict] = {}
    lock = threading.Lock()

    def report(key: str, row: dict) -> None:
        with lock:
            seen.setdefault(key, []).append(row["round"])
            if "startup" in row:
                phases[key] = row["startup"]

    import time

    t0 = time.perf_counter()
    outcome = run_group(trials, fused, report=report)
    wall = time.perf_counter() - t0
    assert outcome == {t.key: None for t in trials}
    # each member's own run time is its own work and its share of the batches, not the group's wall time it waited
    # through (each of the 6 was charged about the group's whole time, their sum about 4-6 walls); its wall time is
    # kept. (1.4 walls on a quiet 2-core machine: the members' own work overlaps in their threads; 3 leaves room for
    # a busy one.)
    own = [read_rows(fused / t.key)["seconds"] for t in trials]
    assert 0 < sum(own) <= 3 * wall, (own, wall)
    for t, s in zip(trials, own):
        assert s < read_rows(fused / t.key)["fused"]["wall_seconds"] <= wall
    for t in trials:
        assert is_done(fused / t.key)
        assert seen[t.key] == [r["round"] for r in read_rows(alone / t.key)["rows"]]  # its own reports
        # its first report's phases leave out its first round's collect (the group's builds and first batch: the
        # status noted every member as a slow start-up); its record keeps every phase
        assert "first_evaluation" in phases[t.key] and "first_collect" not in phases[t.key]
        assert "first_collect" in read_rows(fused / t.key)["startup"]
        # its record names the build and the kernels its own aggregation ran (the members aggregate in threads)
        assert read_rows(fused / t.key)["environment"] == read_rows(alone / t.key)["environment"]
        assert read_rows(fused / t.key)["fused"]["members"] == len(trials)
        _same_numbers(alone, fused, t)


def test_the_gap_would_be_seen(fmnist_dir, tmp_path):
    """Another member's seed (its data order, noise draws and start) moves the weights by order 1: the bound above
    is far below what a mix-up would make."""
    a, b = _trial(fmnist_dir, "fedgp", noise=0.4), _trial(fmnist_dir, "fedgp", noise=0.4, seed=1)
    run_trial(a, tmp_path)
    run_trial(b, tmp_path)
    wa, wb = _final(tmp_path, a), _final(tmp_path, b)
    start = build_experiment(a.config()).initial_weights()
    assert float((wa - wb).norm() / (wa - start).norm()) > 20 * REL


def test_the_group_trains_its_members_clients_as_one_cohort(fmnist_dir, tmp_path, monkeypatch):
    """The point of a group: one cohort for the sources of every member (not one per trial)."""
    from fda_ray.train import cohort

    sizes: list[int] = []
    real = cohort.train_cohort

    def spy(members):
        sizes.append(len(members))
        return real(members)

    monkeypatch.setattr(cohort, "train_cohort", spy)
    trials = [_trial(fmnist_dir, "fedgp", noise=0.4, seed=s) for s in range(3)]
    assert run_group(trials, tmp_path) == {t.key: None for t in trials}
    assert max(sizes) == 3 * 2  # 3 trials x 2 sources in one cohort
    assert sizes.count(3 * 2) == 3  # every round (1 warm-up + 2)


def test_a_member_resumes_from_its_checkpoint_inside_a_running_group(fmnist_dir, tmp_path):
    """A member whose record holds round 1's state goes on from round 2 while the others start from round 0 (the
    group's batches mix rounds), and ends with the numbers of an uninterrupted run alone."""
    trials = _members(fmnist_dir)[:3]
    resumed = trials[0]
    alone = tmp_path / "alone"
    for t in trials:
        run_trial(t, alone)

    fused = tmp_path / "fused"

    def stop_after_round_1(row: dict) -> None:
        if row["round"] == 1:
            raise KeyboardInterrupt

    with pytest.raises(BaseException):
        run_trial(resumed, fused, report=stop_after_round_1)
    assert load_state(fused / resumed.key)["next_round"] == 2 and not is_done(fused / resumed.key)
    rounds: dict[str, list[int]] = {}
    assert run_group(trials, fused, report=lambda k, row: rounds.setdefault(k, []).append(row["round"])) == {
        t.key: None for t in trials}
    assert rounds[resumed.key] == [2] and rounds[trials[1].key] == [0, 1, 2]
    for t in trials:
        _same_numbers(alone, fused, t)
    # the record says how the attempt that finished it ran: its group, the batches it trained in, its first round;
    # nodes.json each attempt's group (the first attempt ran alone)
    got = {t.key: dict(read_rows(fused / t.key)["fused"]) for t in trials}
    assert all(got[t.key].pop("wall_seconds") > 0 for t in trials)  # (its wall time in the group: own_seconds)
    assert got[resumed.key] == {"members": 3, "batches": 1, "from_round": 2}
    assert got[trials[1].key] == {"members": 3, "batches": 3, "from_round": 0}
    attempts = json.loads((fused / resumed.key / "nodes.json").read_text())
    assert [(a["from_round"], a.get("fused_members")) for a in attempts] == [(0, None), (2, 3)]


def test_a_failing_member_leaves_and_the_others_finish_with_their_numbers(fmnist_dir, tmp_path, monkeypatch):
    """One member's client fails in round 1 (after it has trained in the group), another cannot even load its data:
    both fail alone, with their finished rounds kept; the others finish, equal to their runs alone."""
    from fda_ray.runtime.failures import ClientFailure

    trials = _members(fmnist_dir)[:3]
    broken = _trial(fmnist_dir, "fedgp", noise=0.4, seed=5, data_dir=str(tmp_path / "nowhere"))
    failing = trials[1]
    alone = tmp_path / "alone"
    for t in trials:
        if t is not failing:
            run_trial(t, alone)
    real = fusion.GroupMember.collect

    def collect(self, pending):
        out = real(self, pending)
        if self.key == failing.key and out and out[0].tensors and pending.jobs[0].task.round == 1:
            raise ClientFailure(0, 1, 3, "a test's fault")
        return out

    monkeypatch.setattr(fusion.GroupMember, "collect", collect)
    fused = tmp_path / "fused"
    outcome = run_group(trials + [broken], fused)
    assert "client 0 failed round 1 3 times" in str(outcome[failing.key])
    assert load_state(fused / failing.key)["next_round"] == 1  # round 0 kept
    assert outcome[broken.key] is not None and "nowhere" in str(outcome[broken.key])
    for t in trials:
        if t is not failing:
            assert outcome[t.key] is None
            _same_numbers(alone, fused, t)


def test_ctrl_c_stops_every_member_and_keeps_their_last_rounds(fmnist_dir, tmp_path, monkeypatch):
    trials = _members(fmnist_dir)[:2]
    real = fusion.GroupMember.collect

    def collect(self, pending):
        out = real(self, pending)
        if pending.jobs and pending.jobs[0].task.round == 1:
            import _thread
            import time

            _thread.interrupt_main()  # Ctrl-C reaches the process's main thread
            time.sleep(1.0)  # (it stops the group while this member is still in round 1)
        return out

    monkeypatch.setattr(fusion.GroupMember, "collect", collect)
    # Ctrl-C as Python's default handler answers it: a shell without job control starts a background command
    # (`pytest &` in a script) with SIGINT ignored, and then interrupt_main does nothing
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_group(trials, tmp_path)
    finally:
        signal.signal(signal.SIGINT, before)
    for t in trials:  # round 0 kept; round 1 collected but stopped before it was kept, or kept: not round 2
        assert not is_done(tmp_path / t.key) and load_state(tmp_path / t.key)["next_round"] in (1, 2)


def test_a_stopped_group_leaves_the_batch_it_trains_within_a_step(monkeypatch):
    """Ctrl-C (group.stop) while the group's thread trains a batch: the thread leaves torch at the cohort's next
    step, so close() ends it and the process never exits under a thread still training (a fused Tune trial's
    process did, and aborted with a C++ stack trace on the console)."""
    import time

    from fda_ray.algorithms import ClientTask
    from fda_ray.train import cohort
    from test_cohort import _clients

    clients, start = _clients("simple_cnn", (1, 28, 28), 10, (1600, 1600))  # 100 steps of 16 each
    real, steps = cohort._loss_rows, []

    def slow(*args, **kw):  # 0.05 s a step: the batch would take 5 s
        steps.append(1)
        time.sleep(0.05)
        return real(*args, **kw)

    monkeypatch.setattr(cohort, "_loss_rows", slow)
    group = fusion.TrialGroup(["a"])
    hp = {"lr": 0.01, "batch": 16}
    req = group.submit("a", [cohort.Job(c, ClientTask(c.index, "epoch", 0, hp), lambda: {"global": start})
                             for c in clients])
    while not steps:
        time.sleep(0.01)
    t0 = time.monotonic()
    group.stop()
    with pytest.raises(KeyboardInterrupt):
        group.wait(req)
    group.close()
    assert not group._thread.is_alive() and time.monotonic() - t0 < 1.5
    assert len(steps) < 100


EXIT_UNDER_A_GROUP = """
import sys, time
sys.path.insert(0, {tests!r})
from fda_ray.algorithms import ClientTask
from fda_ray.runtime import fusion
from fda_ray.train import cohort
from test_cohort import _clients

clients, start = _clients("simple_cnn", (1, 28, 28), 10, (16000, 16000))  # a batch of seconds
group = fusion.TrialGroup(["a"])
group.submit("a", [cohort.Job(c, ClientTask(c.index, "epoch", 0, {{"lr": 0.01, "batch": 16}}),
                              lambda: {{"global": start}}) for c in clients])
time.sleep(1.0)  # the group's thread is in its batch
sys.exit(3)  # as a Tune trial's process ends on a signal (Ray's handler: SystemExit), the group still training
"""


@pytest.mark.slow  # a Python process
def test_a_process_that_exits_while_its_group_trains_exits_cleanly(tmp_path):
    """The process exits with its own code, no abort: its group stops at exit and its thread leaves torch first
    (a fused Tune trial's process, told to end mid-batch, aborted with SIGABRT and a C++ stack trace: code 134)."""
    import subprocess
    import sys
    from pathlib import Path

    tests = str(Path(__file__).resolve().parent)
    p = subprocess.run([sys.executable, "-c", EXIT_UNDER_A_GROUP.format(tests=tests)], capture_output=True,
                       text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 3 and "Aborted" not in p.stderr and "Fatal" not in p.stderr, p.stderr[-2000:]


def test_every_family_that_fuses_plans_only_cohort_tasks(tiny):
    """Algorithm.fuses is a promise: every warm-up and main-phase task of such a family is a vectorised cohort's
    (tasks that are not, e.g. finetune_offline's carried-over Adam, must not draw from torch's global generator)."""
    fusing = [name for name in ALGORITHMS.names() if getattr(ALGORITHMS.get(name), "fuses", False)]
    assert {"fedgp", "fedda_auto", "source_only", "target_only", "oracle"} <= set(fusing)
    for name in fusing:
        exp = build_experiment(tiny(method=name, vectorise="on"))
        state = exp.algorithm.init_state(exp.initial_weights())
        for r in range(exp.cfg.warmup_rounds + exp.cfg.rounds):
            plan = exp.algorithm.plan_round(r, state)
            for t in plan.tasks:
                assert cohort_key(exp.clients[t.client], t) is not None, (name, r, t.recipe)
    for name in set(ALGORITHMS.names()) - set(fusing):
        t = Trial("k", name, None, 0, {"dataset": "fashion-mnist", "method": name, "vectorise": "on"})
        assert fusion.fusion_key(t) is None


def test_groups_hold_equal_keys_up_to_the_size_in_the_trials_order(fmnist_dir):
    on = [_trial(fmnist_dir, "fedgp", noise=0.4, seed=s) for s in range(5)]
    other_batch = _trial(fmnist_dir, "fedgp", noise=0.4, batch_source=32)
    off = _trial(fmnist_dir, "fedgp", noise=0.4, vectorise="off")
    ditto = Trial("d", "ditto", None, 0, {"dataset": "fashion-mnist", "method": "ditto", "vectorise": "on",
                                          "data_dir": str(fmnist_dir)})
    trials = [on[0], off, on[1], other_batch, on[2], ditto, on[3], on[4]]
    groups = fusion.plan_groups(trials, 3)
    # 5 fusible trials at most 3 a group: 2 groups of nearly equal size (not 3 + 2... nor a lone straggler)
    assert [[t.key for t in g] for g in groups] == [[on[0].key, on[1].key], [off.key], [other_batch.key],
                                                    [on[2].key, on[3].key, on[4].key], ["d"]]
    many = [_trial(fmnist_dir, "fedgp", noise=0.4, seed=s) for s in range(18)]
    assert [len(g) for g in fusion.plan_groups(many, 8)] == [6, 6, 6]
    # trials that train no source do not wait in lockstep for those that do
    cheap = [_trial(fmnist_dir, "target_only", noise=0.4, seed=s) for s in range(2)]
    mixed = fusion.plan_groups([many[0], cheap[0], many[1], cheap[1]], 8)
    assert [[t.key for t in g] for g in mixed] == [[many[0].key, many[1].key], [cheap[0].key, cheap[1].key]]
    assert fusion.plan_groups(trials, 1) == [[t] for t in trials]
    assert "vectorise is off" in fusion.why_not_fused(off)
    assert "not the vectorised epoch recipe" in fusion.why_not_fused(ditto)


@pytest.mark.parametrize("value, want", [("off", "off"), ("auto", "auto"), ("1", "off"), ("8", 8), (None, "off")])
def test_fuse_values(value, want):
    assert fusion.parse_fuse(value) == want


@pytest.mark.parametrize("value", ["0", "-2", "two", "2.5", ""])
def test_a_bad_fuse_value_is_one_line(value):
    with pytest.raises(ValueError, match=r"fuse=.* is invalid: off, auto, or a whole number"):
        fusion.parse_fuse(value)


def test_grouped_convolutions_equal_one_per_model():
    """SimpleCNN's stacked forward: the GPU layout (one grouped convolution for K models) against the CPU one."""
    from fda_ray.train.models import SimpleCNN, build_model
    from fda_ray.core.layout import ParamLayout

    torch.manual_seed(0)
    k = 5
    models = [build_model("simple_cnn", (1, 28, 28), 10) for _ in range(k)]
    layout = ParamLayout.from_model(models[0])
    p = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in models]).requires_grad_(True)
         for n in layout.names}
    x = torch.randn(k, 7, 1, 28, 28)
    a = SimpleCNN.forward_stacked(p, x, layout="per_model")
    b = SimpleCNN.forward_stacked(p, x, layout="grouped")
    ref = torch.stack([m(x[i]) for i, m in enumerate(models)])
    assert torch.allclose(a, ref, rtol=1e-5, atol=1e-5) and torch.allclose(b, ref, rtol=1e-5, atol=1e-5)
    ga = torch.autograd.grad(a.square().sum(), list(p.values()))
    gb = torch.autograd.grad(b.square().sum(), list(p.values()))
    for u, v in zip(ga, gb):
        assert float((u - v).norm() / u.norm()) < 1e-4


# ---------------------------------------------------------------- the sweep's front ends

def _sweep_args(fmnist_dir, out, *more):
    return ["--grid", "tiny-noise", "--data-dir", str(fmnist_dir), "--out", str(out), "--vectorise", "on",
            "--seeds", "2", "--json", *more]


@pytest.fixture
def tiny_fused_grid(monkeypatch):
    from fda_ray.papers.grids import GRIDS, Grid, Row

    tiny = {"num_sources": 2, "rounds": 2, "warmup_rounds": 1, "samples_per_client": 128, "test_samples": 100,
            "target_labelled": 32}
    grid = Grid(name="tiny-noise", dataset="fashion-mnist", variable="noise", values=(0.0, 0.8),
                rows=(Row("fedgp_auto", "FedGP_Auto", "fedgp_auto"), Row("target_only", "Target Only", "target_only")),
                seeds={}, profiles={"quick": tiny, "paper": dict(tiny)}, paper_ref="test numbers")
    monkeypatch.setitem(GRIDS, grid.name, grid)
    return grid


def _results(out) -> dict:
    import pyarrow.parquet as pq

    return {(r["row"], r["noise"], r["seed"], r["round"]): r["accuracy"]
            for r in pq.read_table(out / "results.parquet").to_pylist()}


def test_dry_run_shows_the_groups_and_what_each_asks(tiny_fused_grid, fmnist_dir, tmp_path, capsys):
    from fda_ray.experiments import sweep

    args = _sweep_args(fmnist_dir, tmp_path / "o", "--fuse", "4", "--dry-run", "--device", "cuda",
                       "--plan-for", "CPU=16,GPU=1")
    assert sweep.main(args) == 0
    out = capsys.readouterr().out
    assert "each fused group is one Tune trial asking {CPU 1, GPU 1}: 1 group(s) at once" in out
    assert "fused: 8 of 8 trials in 2 group(s) of at most 4" in out
    assert "group 2 (4 trials): fedgp_auto 0.0 s0, fedgp_auto 0.8 s0, fedgp_auto 0.0 s1, fedgp_auto 0.8 s1" in out
    assert sweep.main(_sweep_args(fmnist_dir, tmp_path / "o", "--fuse", "4", "--dry-run", "--backend", "local",
                                  "--workers", "2")) == 0
    assert "plan: 2 group(s) at once (backend local" in capsys.readouterr().out
    # 16 CPUs would hold 16 workers: no more at once than the 2 groups
    assert sweep.main(_sweep_args(fmnist_dir, tmp_path / "o", "--fuse", "4", "--dry-run", "--backend", "local",
                                  "--plan-for", "CPU=16")) == 0
    assert "plan: 2 group(s) at once (backend local" in capsys.readouterr().out
    # vectorise off: nothing is fused, and the plan says why
    args = ["--grid", "tiny-noise", "--data-dir", str(fmnist_dir), "--out", str(tmp_path / "o"), "--fuse", "4",
            "--dry-run", "--backend", "local"]
    assert sweep.main(args) == 0
    assert "alone: 4 trial(s): vectorise is off (fused trials train vectorised: --vectorise on)" in \
        capsys.readouterr().out
    # a GPU group on a cluster without a GPU: refused in one line
    assert sweep.main(_sweep_args(fmnist_dir, tmp_path / "o", "--fuse", "4", "--dry-run", "--device", "cuda",
                                  "--plan-for", "CPU=16")) == 2
    assert "fuse=4 is invalid here: a fused group (of up to 4 trials) asks {CPU 1, GPU 1}" in \
        capsys.readouterr().err
    # CPU groups on 16 CPUs: as many at once as there are groups (2), not as many as would fit (16)
    assert sweep.main(_sweep_args(fmnist_dir, tmp_path / "o", "--fuse", "4", "--dry-run", "--plan-for",
                                  "CPU=16")) == 0
    assert "asking {CPU 1}: 2 group(s) at once on --plan-for CPU=16 (room for 16)" in capsys.readouterr().out
    # --pin-drivers on nodes without fda_driver: the line names the flags the user set and what to do
    assert sweep.main(_sweep_args(fmnist_dir, tmp_path / "o", "--fuse", "auto", "--dry-run", "--pin-drivers",
                                  "--plan-for", "CPU=16")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: fuse='auto', pin_drivers=True is invalid here: a fused "
                                                   "group (of up to ") and "drop it" in err


def test_a_resumes_dry_run_groups_only_the_trials_left(tiny_fused_grid, fmnist_dir, tmp_path, capsys, no_ray):
    """--resume --dry-run shows the groups the resume would train: the finished trials are in none of them."""
    from fda_ray.experiments import sweep

    out = tmp_path / "o"
    assert sweep.main(_sweep_args(fmnist_dir, out, "--backend", "local", "--workers", "1", "--methods",
                                  "target_only")) == 0
    capsys.readouterr()
    assert sweep.main(_sweep_args(fmnist_dir, out, "--fuse", "4", "--dry-run", "--resume")) == 0
    printed = capsys.readouterr().out
    assert printed.count("[done]") == 4 and printed.count("[to run]") == 4
    assert "fused: 4 of 4 trials in 1 group(s) of at most 4" in printed
    assert "group 1 (4 trials): fedgp_auto 0.0 s0, fedgp_auto 0.8 s0, fedgp_auto 0.0 s1, fedgp_auto 0.8 s1" in printed


@pytest.fixture
def short_and_long_grid(monkeypatch):
    """Two rows that fuse into one group: one of 2 rounds, one of 150 (seconds more)."""
    from fda_ray.papers.grids import GRIDS, Grid, Row

    tiny = {"num_sources": 2, "warmup_rounds": 1, "samples_per_client": 128, "test_samples": 100,
            "target_labelled": 32}
    grid = Grid(name="short-long", dataset="fashion-mnist", variable="noise", values=(0.0,),
                rows=(Row("short", "Short", "fedgp_auto", {"rounds": 2}),
                      Row("long", "Long", "fedgp_auto", {"rounds": 150})),
                seeds={}, profiles={"quick": tiny, "paper": dict(tiny)}, paper_ref="test numbers")
    monkeypatch.setitem(GRIDS, grid.name, grid)
    return grid


@pytest.mark.slow  # a sweep on either backend (the fast tier's 8 minutes)
@pytest.mark.parametrize("backend", ["local", "tune"])
def test_a_fused_member_that_finishes_first_is_done_at_once(short_and_long_grid, fmnist_dir, tmp_path, capsys,
                                                            monkeypatch, backend):
    """A member that ends while its group goes on is said done when it ends (the status showed it running, and its
    progress line came, only when its whole group ended)."""
    import time

    from fda_ray.experiments import console, sweep

    said: dict[str, float] = {}
    real = console.Progress.line

    def line(self, t, what):
        said[t.row] = time.time()
        return real(self, t, what)

    monkeypatch.setattr(console.Progress, "line", line)
    out = tmp_path / "o"
    args = ["--grid", "short-long", "--data-dir", str(fmnist_dir), "--out", str(out), "--vectorise", "on", "--fuse",
            "2", "--backend", backend, *(["--workers", "1"] if backend == "local" else []), "--no-figures"]
    assert sweep.main(args) == 0
    capsys.readouterr()
    (long_key,) = [d for d in (out / "trials").iterdir() if d.name.startswith("long-")]
    fused = json.loads((long_key / "rows.json").read_text()).get("fused") or {}
    assert fused.get("members") == 2  # (the two ran as one group)
    assert said["short"] < (long_key / "rows.json").stat().st_mtime - 0.5 < said["long"]


def test_a_local_fused_groups_failing_members_are_noted_as_in_their_group(tiny_fused_grid, fmnist_dir, tmp_path,
                                                                          capsys, no_ray):
    """The local backend's note for a member of a fused group that failed says so, as the Tune backend's does:
    '<trial> (in a fused group of 2) failed: ...; it runs again'."""
    from fda_ray.experiments import sweep

    args = _sweep_args(fmnist_dir, tmp_path / "o", "--fuse", "2", "--backend", "local", "--workers", "1", "--methods",
                       "fedgp_auto", "--seeds", "1", "--lr-source", "1e12", "--max-failures", "1")
    assert sweep.main(args) == 1
    notes = [x for x in capsys.readouterr().err.splitlines() if x.startswith("note: ")]
    assert sorted(x.split(" (in")[0] for x in notes) == ["note: fedgp_auto noise=0 seed 0",
                                                          "note: fedgp_auto noise=0.8 seed 0"], notes
    assert all(" (in a fused group of 2) failed: run stopped in round " in x and "it runs again (attempt 2 of 2)"
               in x for x in notes), notes


@pytest.mark.parametrize("value", ["0", "many"])
def test_a_bad_fuse_flag_is_one_line_and_exit_2(tiny_fused_grid, fmnist_dir, tmp_path, capsys, value):
    from fda_ray.experiments import sweep

    assert sweep.main(_sweep_args(fmnist_dir, tmp_path / "o", "--fuse", value)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"fuse={value!r} is invalid" in err


@pytest.mark.slow
def test_a_fused_local_sweep_equals_the_unfused_one(tiny_fused_grid, fmnist_dir, tmp_path, capsys, no_ray):
    from fda_ray.experiments import sweep

    plain, fused = tmp_path / "plain", tmp_path / "fused"
    assert sweep.main(_sweep_args(fmnist_dir, plain, "--backend", "local", "--workers", "2")) == 0
    assert sweep.main(_sweep_args(fmnist_dir, fused, "--backend", "local", "--workers", "2", "--fuse", "4")) == 0
    capsys.readouterr()
    a, b = _results(plain), _results(fused)
    assert a.keys() == b.keys() and len(a) == 8 * 3
    assert all(abs(a[k] - b[k]) <= 2.0 for k in a)
    members = [read_rows(d)["fused"]["members"] for d in (fused / "trials").iterdir()]
    assert sorted(members) == [4] * 8
    assert not any("fused" in read_rows(d) for d in (plain / "trials").iterdir())


@pytest.mark.slow
def test_a_fused_tune_sweep_reports_each_trial_and_equals_the_unfused_one(tiny_fused_grid, fmnist_dir, tmp_path,
                                                                          capsys, no_ray):
    from fda_ray.experiments import sweep

    plain, fused = tmp_path / "plain", tmp_path / "fused"
    assert sweep.main(_sweep_args(fmnist_dir, plain, "--backend", "local", "--workers", "2")) == 0
    capsys.readouterr()
    assert sweep.main(_sweep_args(fmnist_dir, fused, "--backend", "tune", "--fuse", "4", "--track", "none")) == 0
    printed = capsys.readouterr()
    a, b = _results(plain), _results(fused)
    assert a.keys() == b.keys() and all(abs(a[k] - b[k]) <= 2.0 for k in a)
    assert sorted(read_rows(d)["fused"]["members"] for d in (fused / "trials").iterdir()) == [4] * 8
    assert json.loads(printed.out[printed.out.index("{"):])["trials_run"] == 8


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_fused_group_on_a_gpu_gives_each_trial_its_numbers_alone(fmnist_dir, tmp_path):
    """On a GPU the group's cohorts run the grouped-convolution layout with the data resident on the device: each
    member still equals its trial run alone there (and alone on the CPU, within the same tolerance)."""
    trials = [Trial(t.key + "-cuda", t.row, t.value, t.seed, {**t.params, "device": "cuda"})
              for t in _members(fmnist_dir)[:4]]
    alone, fused = tmp_path / "alone", tmp_path / "fused"
    for t in trials:
        run_trial(t, alone)
    assert run_group(trials, fused) == {t.key: None for t in trials}
    for t in trials:
        _same_numbers(alone, fused, t)


@pytest.mark.slow
def test_a_fused_sweep_on_a_cluster_spreads_its_groups_over_the_nodes(tiny_fused_grid, fmnist_dir, tmp_path, capsys,
                                                                       no_ray):
    """Through --address on a Ray cluster of three 1-CPU nodes: each group is one Tune trial asking one CPU, so the
    nodes take groups side by side; every member keeps its record and equals its unfused run."""
    import ray
    from ray.cluster_utils import Cluster

    from fda_ray.experiments import sweep

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(2):
        c.add_node(num_cpus=1)
    c.wait_for_nodes()
    try:
        out = tmp_path / "cluster"
        assert sweep.main(_sweep_args(fmnist_dir, out, "--address", c.address, "--executor", "serial", "--fuse", "2",
                                      "--track", "none")) == 0, capsys.readouterr().err[-2000:]
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()
    capsys.readouterr()
    plain = tmp_path / "plain"
    assert sweep.main(_sweep_args(fmnist_dir, plain, "--backend", "local", "--workers", "2")) == 0
    capsys.readouterr()
    a, b = _results(plain), _results(out)
    assert a.keys() == b.keys() and all(abs(a[k] - b[k]) <= 2.0 for k in a)
    records = {d.name: read_rows(d) for d in (out / "trials").iterdir()}
    assert sorted(r["fused"]["members"] for r in records.values()) == [2] * 8
    nodes = {r["nodes"][-1]["node_id"] for r in records.values()}
    assert len(nodes) >= 2  # the groups ran on more than one node


def test_auto_fuses_on_cpus_only_the_models_with_a_per_row_stacked_forward(fmnist_dir):
    """DomainBed's MNIST CNN trains fused through torch.func.vmap, whose batched convolution sums its gradient in
    another order as the rows change (a held-out probe: a 1e-2 relative weight gap after 2 rounds) and measured
    slower fused on 2 cores: --fuse auto leaves it alone on CPUs; a group size still fuses it, and a GPU's auto.
    The rule is each trial's: a sweep that mixes models fuses its simple CNNs whichever row comes first (it took
    the first trial's model for all: a grid whose first row was the MNIST CNN fused nothing, and one whose first
    row was the simple CNN fused the MNIST CNN too)."""
    from fda_ray.runtime.fusion import AUTO_CPU_MODELS, AUTO_GROUP, group_size, plan_groups, why_not_fused
    from fda_ray.train.models import MODELS

    simple = [_trial(fmnist_dir, "fedgp", noise=0.4, seed=s) for s in range(3)]
    mnist = [_trial(fmnist_dir, "fedgp", noise=0.4, seed=s, model="mnist_cnn") for s in range(3)]
    auto = group_size("auto", "cpu")
    assert auto == AUTO_GROUP["cpu"] > 1
    for trials in (simple + mnist, mnist + simple):
        groups = [[t.key for t in g] for g in plan_groups(trials, auto)]
        assert sorted(groups) == sorted([[t.key for t in simple]] + [[t.key] for t in mnist]), groups
        assert sorted(len(g) for g in plan_groups(trials, 4)) == [3, 3]  # a group size fuses both
    assert "mnist_cnn on cpu: --fuse auto fuses it on GPUs only" in why_not_fused(mnist[0], auto)
    assert why_not_fused(mnist[0], 4) == why_not_fused(simple[0], auto) == "fusible"
    cuda = [_trial(fmnist_dir, "fedgp", noise=0.4, seed=s, model="mnist_cnn", device="cuda") for s in range(3)]
    assert [len(g) for g in plan_groups(cuda + simple, group_size("auto", "cuda"))] == [3, 3]
    assert group_size("auto", "cuda") == AUTO_GROUP["cuda"] and group_size("off", "cpu") == 1
    for name in AUTO_CPU_MODELS:  # each one's class has its own stacked forward (the per-row, bit-for-bit path)
        assert hasattr(type(MODELS.get(name)((1, 28, 28), 10)), "forward_stacked"), name
    assert not hasattr(type(MODELS.get("mnist_cnn")((2, 28, 28), 2)), "forward_stacked")
