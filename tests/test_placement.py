"""The resource model (fda_ray.runtime.resources): a trial's placement group (the driver's bundle, then one per
client actor, packed on one node when they fit), how many trials a node holds at once, checked against Ray's own
placement with logical GPUs, the one-line refusal of a request no node can hold, and the sweep's --dry-run plan."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

import fda_ray.experiments.tune as ft
from fda_ray.experiments import sweep
from fda_ray.runtime import resources as R
from fda_ray.core.config import RunConfig
from fda_ray.runtime.preflight import PreflightError

ROOT = Path(__file__).resolve().parents[1]
GPU_NODE = "CPU=16,GPU=1"


def _cfg(**kw) -> RunConfig:
    return RunConfig(**{"num_sources": 3, **kw}).resolved()


def _paper_noise(**kw) -> RunConfig:
    """A trial of Table 10's paper noise grid (9 sources and the target: 10 clients) on a GPU."""
    return RunConfig(dataset="fashion-mnist", method="fedgp", noise=0.4, executor="ray", device="cuda",
                     **kw).resolved()


# ---------------------------------------------------------------- the bundle layout

def test_driver_and_clients_share_one_packed_group():
    pgf = ft.resources(_cfg(executor="ray", cpus_per_client=1.0, clients_per_actor=1))
    assert pgf.strategy == "PACK" == ft.PLACEMENT_STRATEGY == R.PLACEMENT_STRATEGY
    # the driver's bundle first (DRIVER_BUNDLE), then one per client actor (3 sources and the target)
    assert R.DRIVER_BUNDLE == 0
    assert pgf.bundles == [{"CPU": 1.0}] + [{"CPU": 1.0}] * 4
    assert ft.resources(RunConfig().resolved()).bundles == [{"CPU": 1.0}]  # a serial trial: its driver trains


def test_the_executor_reads_the_plan_back_from_the_group():
    """Inside a trial, the executor's actors are the group's client bundles, each in its own (actor_bundle)."""
    for kw in ({"clients_per_actor": 1}, {"clients_per_actor": 3}, {"gpus_per_client": 0.1, "device": "cuda"},
               {"cpus_per_client": 0.5, "clients_per_actor": 2}):
        cfg = _cfg(executor="ray", **kw)
        p = R.plan(cfg, R.parse_nodes(GPU_NODE), in_tune=True)
        back = R.plan_in_group(cfg, p.bundles)
        assert (back.num_actors, back.clients_per_actor, back.actor, back.driver) == \
               (p.num_actors, p.clients_per_actor, p.actor, p.driver), kw
        assert [back.actor_bundle(s) for s in range(back.num_actors)] == list(range(1, 1 + p.num_actors))
        assert sorted(c for g in back.groups for c in g) == list(range(4))
    # a run driven from this process asks no driver bundle: its actors are bundles 0, 1, ...
    assert R.plan(_cfg(executor="ray", clients_per_actor=1), R.parse_nodes("CPU=4")).actor_bundle(0) == 0


def test_gpu_shares_are_per_process_and_cpu_follows_the_launch_loop():
    """A pooled GPU actor asks gpus_per_client once (its clients train one computation at a time) and `threads`
    CPUs (not a CPU per client); the driver a tenth of a client actor's GPU share."""
    p = R.plan(_paper_noise(gpus_per_client=0.1), R.parse_nodes(GPU_NODE), in_tune=True)
    assert (p.num_actors, p.clients_per_actor) == (1, 10)
    assert p.bundles == [{"CPU": 1.0, "GPU": 0.01}, {"CPU": 1.0, "GPU": 0.1}]
    # one actor per client when asked: each asks the share
    p1 = R.plan(_paper_noise(gpus_per_client=0.05, clients_per_actor=1), R.parse_nodes(GPU_NODE), in_tune=True)
    assert p1.bundles[1:] == [{"CPU": 1.0, "GPU": 0.05}] * 10
    # the user's CPU share is per client; threads set the actor's and the driver's CPUs
    p2 = R.plan(_paper_noise(gpus_per_client=0.1, cpus_per_client=0.2, threads=2), R.parse_nodes(GPU_NODE),
                in_tune=True)
    assert p2.bundles == [{"CPU": 2.0, "GPU": 0.01}, {"CPU": 2.0, "GPU": 0.1}]
    # a serial trial on a GPU, and a GPU driver of CPU clients, ask the measured share of one trial
    serial = RunConfig(dataset="fashion-mnist", method="fedgp", device="cuda").resolved()
    assert R.plan(serial, R.parse_nodes(GPU_NODE), in_tune=True).bundles == [
        {"CPU": 1.0, "GPU": R.TRIAL_GPU_SHARE["simple_cnn"]}]
    assert "GPU" not in ft.resources(_cfg(executor="ray", gpus_per_client=0.1)).bundles[0]  # a CPU driver


@pytest.mark.parametrize("n,cpus,gpus,gpc,threads,bundles,expected", [
    (10, 2, 0, 0.0, 1, None, 5),     # a 2-core laptop: two processes of five clients
    (10, 2, 0, 0.0, 2, None, 10),    # two threads each: one process
    (10, 64, 0, 0.0, 1, None, 1),    # a cluster: one actor per client
    (10, 16, 1, 0.1, 1, None, 10),   # one GPU: the whole run on it, one actor
    (10, 64, 8, 0.1, 1, None, 2),    # eight GPUs: five actors of two
    (10, 64, 16, 0.1, 1, None, 1),   # many GPUs: one per client
    (10, 2, 0, 0.0, 1, 3, 4),        # a Tune trial with three client bundles
    (1, 0.5, 0, 0.0, 1, None, 1),    # less than one CPU: still one actor
])
def test_actors_are_sized_to_the_machine(n, cpus, gpus, gpc, threads, bundles, expected):
    """A run driven from this process pools its clients to the machine (a trial reads its group's bundles)."""
    cfg = _cfg(executor="ray", gpus_per_client=gpc, threads=threads)
    cluster = R.Cluster(({"CPU": float(cpus), "GPU": float(gpus)},))
    if bundles is None:
        p = R.plan(cfg, cluster, clients=n)
    else:
        p = R.plan_in_group(cfg, [{"CPU": 1.0}] + [{"CPU": 1.0}] * bundles, clients=n)
    assert p.clients_per_actor == expected
    assert p.num_actors == math.ceil(n / expected) and sorted(c for g in p.groups for c in g) == list(range(n))
    if bundles is None and gpc == 0:  # the actors share the cores: every one of them can be placed at once
        assert R.placeable(p.bundles, cluster)


def test_pooling_counts_the_driver_and_the_largest_node():
    three = R.parse_nodes("3xCPU=1")
    p = R.plan(_cfg(executor="ray"), three, in_tune=True)  # 4 clients, 3 one-CPU nodes, a 1-CPU driver
    assert p.bundles == [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}]
    assert R.capacity(p, three).at_once == 1
    # with a per-client CPU share, an actor never hosts more clients than the largest node holds
    p = R.plan(_cfg(executor="ray", cpus_per_client=0.5), three, in_tune=True)
    assert max(b["CPU"] for b in p.bundles[1:]) <= 1.0


def test_the_local_backend_runs_what_the_node_and_its_gpu_hold():
    """The local backend's default workers: one per `threads` CPUs; on a GPU no more than its measured share of a
    trial allows (8 of the small CNN), on the one GPU --device names."""
    assert R.local_workers(_cfg(), R.parse_nodes("CPU=16")) == 16
    assert R.local_workers(_cfg(threads=3), R.parse_nodes("CPU=16")) == 5
    gpu = RunConfig(dataset="fashion-mnist", method="fedgp", device="cuda").resolved()
    assert R.local_workers(gpu, R.parse_nodes(GPU_NODE)) == 8 == round(1 / R.TRIAL_GPU_SHARE["simple_cnn"])
    assert R.local_workers(gpu, R.parse_nodes("CPU=4,GPU=2")) == 4


def test_drivers_are_pinned_only_when_asked():
    assert ft.driver_placement() == {} and ft.driver_placement(True) == {ft.DRIVER_RESOURCE: 1.0}
    cfg = _cfg(executor="ray", cpus_per_client=1.0, clients_per_actor=1)
    assert ft.resources(cfg, ft.driver_placement(True)).bundles[0] == {"CPU": 1.0, ft.DRIVER_RESOURCE: 1.0}


def test_pin_drivers_needs_tune(capsys):
    assert sweep.main(["--grid", "noise", "--backend", "local", "--pin-drivers"]) == 2
    assert capsys.readouterr().err.strip() == ("error: pin_drivers=True is invalid with --backend local: it places "
                                               "Tune trials on Ray nodes")


# ---------------------------------------------------------------- trials at once

@pytest.mark.parametrize("share", [0.1, 0.01])
def test_paper_noise_grid_fills_one_gpu(share):
    """The issue this model answers: on a 16-CPU 1-GPU node at --gpus-per-client 0.1 a trial asked 1.1 GPUs (never
    placed) and at 0.01 ten CPUs (one trial at a time); now at least 8 trials of the small CNN run at once."""
    node = R.parse_nodes(GPU_NODE)
    p = R.plan(_paper_noise(gpus_per_client=share), node, in_tune=True)
    assert R.capacity(p, node).at_once >= 8
    assert p.total()["GPU"] <= 1 / 8


def test_concurrent_counts_fractional_gpus_per_device():
    """A fractional GPU request is served by one device: two GPUs hold 2 x 3 bundles of 0.3, not 6.67."""
    assert R.concurrent([{"CPU": 1.0, "GPU": 0.3}], [{"CPU": 64.0, "GPU": 2.0}]) == 6
    assert R.concurrent([{"CPU": 1.0, "GPU": 0.3}, {"CPU": 1.0, "GPU": 0.3}], [{"CPU": 64.0, "GPU": 2.0}]) == 3
    assert R.concurrent([{"CPU": 4.0}], [{"CPU": 16.0}, {"CPU": 7.0}]) == 5
    assert R.concurrent([{"CPU": 1.0, "GPU": 2.0}], [{"CPU": 8.0, "GPU": 3.0}]) == 1


@pytest.mark.slow
@pytest.mark.parametrize("kw,node", [
    ({"gpus_per_client": 0.1}, {"num_cpus": 16, "num_gpus": 1}),
    ({"gpus_per_client": 0.01}, {"num_cpus": 16, "num_gpus": 1}),
    ({"gpus_per_client": 0.3, "clients_per_actor": 5}, {"num_cpus": 16, "num_gpus": 2}),
], ids=["0.1", "0.01", "two-gpus"])
def test_trials_at_once_agree_with_rays_placement(no_ray, kw, node):
    """Ray's GPUs are logical resources: a local Ray with the node's CPUs and GPUs places as many of the plan's
    placement groups at once as `capacity` says, and not one more."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    ray.init(include_dashboard=False, log_to_driver=False, **node)
    shape = {"CPU": float(node["num_cpus"]), "GPU": float(node["num_gpus"])}
    p = R.plan(_paper_noise(**kw), R.Cluster((shape,)), in_tune=True)
    expected = R.capacity(p, R.Cluster((shape,))).at_once
    groups = [placement_group(p.bundles, strategy=p.strategy) for _ in range(expected + 1)]
    try:
        ready, pending = ray.wait([g.ready() for g in groups], num_returns=len(groups), timeout=20)
        assert len(ready) == expected >= 1
        assert len(pending) == 1
    finally:
        for g in groups:
            remove_placement_group(g)


# ---------------------------------------------------------------- refusals

def test_a_request_no_node_holds_is_one_line():
    node = R.parse_nodes(GPU_NODE)
    p = R.plan(_paper_noise(gpus_per_client=0.1, clients_per_actor=1), node, in_tune=True)
    with pytest.raises(PreflightError) as e:
        R.check(p, node)
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith("gpus_per_client=0.1, clients_per_actor=1, device='cuda' is invalid: a trial asks driver "
                           "{CPU: 1, GPU: 0.01} + 10 x {CPU: 1, GPU: 0.1} (PACK)")
    assert "largest node {CPU: 16, GPU: 1}" in line and line.endswith(
        "lower --gpus-per-client, or host more clients an actor (raise --clients-per-actor, or leave it unset: pooled)")
    with pytest.raises(PreflightError, match=r"no node has a GPU; use CPU clients \(--gpus-per-client 0\)"):
        R.check(R.plan(_paper_noise(gpus_per_client=0.1), R.parse_nodes("CPU=16"), in_tune=True),
                R.parse_nodes("CPU=16"))
    three = R.parse_nodes("3xCPU=1")
    with pytest.raises(PreflightError, match=r"^cpus_per_client=2.0 is invalid: a trial asks .*largest node \{CPU: 1\}"
                                             r"\); lower --cpus-per-client$"):
        R.check(R.plan(_cfg(executor="ray", cpus_per_client=2.0), three, in_tune=True), three)
    with pytest.raises(PreflightError, match=r"lower --threads$"):
        R.check(R.plan(_cfg(executor="ray", threads=2), three, in_tune=True), three)


def test_an_autoscalers_node_types_count(tmp_path):
    """`ray up`'s node types are nodes the cluster can add: a GPU trial fits a GPU worker type not up yet, and
    its capacity is given per added node; a type with max_workers 0 is never added."""
    from fda_ray.runtime.preflight import autoscaler_node_types

    boot = tmp_path / "ray_bootstrap_config.yaml"
    boot.write_text("head_node_type: head\navailable_node_types:\n"
                    "  head: {resources: {CPU: 8}, node_config: {}}\n"
                    "  gpu_worker: {min_workers: 0, max_workers: 8, resources: {CPU: 48, GPU: 4}, node_config: {}}\n"
                    "  never: {max_workers: 0, resources: {CPU: 512, GPU: 8}, node_config: {}}\n")
    types = tuple(autoscaler_node_types(str(boot)))
    assert types == ({"CPU": 8.0}, {"CPU": 48.0, "GPU": 4.0})
    cluster = R.Cluster(({"CPU": 8.0},), types, source="the Ray cluster")
    p = R.plan(_paper_noise(gpus_per_client=0.1), cluster, in_tune=True)
    assert R.check(p, cluster) is None
    cap = R.capacity(p, cluster)
    assert cap.at_once == 0 and dict(cap.per_type)["{CPU: 48, GPU: 4}"] == 24  # 48 CPUs, 2 a trial
    # node types unknown (KubeRay): a warning line, not a refusal
    unknown = R.Cluster(({"CPU": 8.0},), known=False)
    with pytest.warns(UserWarning):
        assert "trials wait for an autoscaler" in R.check(p, unknown)


def test_plan_for_is_checked():
    assert R.parse_nodes("CPU=16,GPU=1+2xCPU=48,GPU=4,fda_driver=2").nodes[1:] == (
        {"CPU": 48.0, "GPU": 4.0, "fda_driver": 2.0},) * 2
    for bad in ("", "CPU", "CPU=x", "CPU=-1", "0xCPU=1", "CPU=1,,GPU=1"):
        with pytest.raises(ValueError, match=r"^plan_for=.* is invalid: "):
            R.parse_nodes(bad)


# ---------------------------------------------------------------- the sweep's --dry-run

def _dry(argv, capsys):
    code = sweep.main([*argv, "--dry-run"])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.mark.parametrize("share", ["0.1", "0.01"])
def test_dry_run_prints_the_plan_for_a_gpu_node(capsys, share):
    code, out, err = _dry(["--grid", "noise", "--profile", "paper", "--gpus-per-client", share,
                           "--plan-for", GPU_NODE], capsys)
    assert code == 0, err
    lines = [x for x in out.splitlines() if x.startswith("plan: ")]
    gpu = float(share)
    assert lines[0] == (f"plan: each trial asks 2 bundle(s), PACK: driver {{CPU: 1, GPU: {gpu / 10:g}}}; "
                        f"1 client actor(s) x {{CPU: 1, GPU: {gpu:g}}}, 10 client(s) each at most (pooled: one actor "
                        "per trial on a GPU)")
    at_once = int(re.match(r"plan: (\d+) trial\(s\) at once on \{CPU: 16, GPU: 1\}", lines[1]).group(1))
    assert at_once >= 8


def test_dry_run_refuses_what_no_node_holds(capsys):
    code, out, err = _dry(["--grid", "noise", "--profile", "paper", "--gpus-per-client", "0.1",
                           "--clients-per-actor", "1", "--plan-for", GPU_NODE], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: gpus_per_client=0.1, clients_per_actor=1, device='cuda' is invalid")
    assert "plan: each trial asks 11 bundle(s)" in out
    code, _, err = _dry(["--grid", "noise", "--plan-for", "CPU=16"], capsys)  # a CPU sweep plans too
    assert code == 0
    assert sweep.main(["--grid", "noise", "--plan-for", GPU_NODE]) == 2
    assert "plan_for='CPU=16,GPU=1' is invalid without --dry-run" in capsys.readouterr().err


# ---------------------------------------------------------------- the documented GPU commands

COMMAND = re.compile(r"(?:python3? -m (fda_ray(?:\.sweep)?|benchmarks\.engine)|fda-ray\.sbatch|fda_ray/sweep\.py) (.*)")


def documented_gpu_commands() -> list[tuple[str, list[str]]]:
    """Every sweep (python -m fda_ray.sweep, the sbatch script's and `ray submit`'s arguments), run (python -m
    fda_ray) and engine benchmark command in README, docs and the launchers that asks for a GPU
    (--gpus-per-client or --device cuda), as (where, argv); a command continued over lines with a backslash is
    read whole."""
    import shlex

    files = [ROOT / "README.md", ROOT / "cluster.yaml", *sorted((ROOT / "docs").glob("*.md")),
             *sorted(p for p in (ROOT / "deploy").rglob("*") if p.is_file())]
    found = []
    for f in files:
        text = re.sub(r"\\\n\s*(?:#\s*)?", " ", f.read_text())  # continued lines joined
        for line in text.splitlines():
            m = COMMAND.search(line)
            if not m or not re.search(r"--gpus-per-client|--device cuda", m.group(2)):
                continue
            args = m.group(2).split("#")[0].split("`")[0].strip()
            argv = shlex.split(args.replace("$BUCKET", "bucket").replace("$USER", "user"))
            prog = m.group(1) or "fda_ray.sweep"
            found.append((f"{f.relative_to(ROOT)}: {prog} {args}", [prog, *argv]))
    return found


def test_documented_gpu_commands_are_found():
    where = [w for w, _ in documented_gpu_commands()]
    assert len(where) >= 12
    assert any("fda_ray.sweep" in w and "--gpus-per-client 0.1" in w for w in where)
    assert any(w.startswith("docs/ray-and-clusters.md: fda_ray ") for w in where)
    assert any(w.startswith("docs/ray-and-clusters.md: benchmarks.engine ") for w in where)
    assert any(w.startswith("deploy/slurm/fda-ray.sbatch: fda_ray.sweep ") for w in where)
    assert any("--model-weights" in w for w in where)  # continued over lines


@pytest.mark.parametrize("where,argv", documented_gpu_commands(), ids=lambda x: x if isinstance(x, str) else "")
def test_documented_gpu_commands_plan_on_one_gpu(where, argv, capsys):
    """Each documented GPU command places its trials on a 16-CPU 1-GPU node (the sweep's plan), or its run's
    actors (python -m fda_ray), instead of waiting for a node no one has."""
    from fda_ray.experiments.cli import parser as run_parser

    node = R.parse_nodes(GPU_NODE)
    if argv[0] == "fda_ray.sweep":
        keep, skip = [], False
        for x in argv[1:]:  # where records go and which cluster to join do not change the plan
            if skip:
                skip = False
                continue
            if x in ("--out", "--address", "--model-weights", "--data-dir"):
                skip = True
                continue
            keep.append(x)
        code = sweep.main([*keep, "--dry-run", "--plan-for", GPU_NODE])
        out = capsys.readouterr()
        assert code == 0, (where, out.err)
        at_once = re.search(r"plan: (\d+) trial\(s\) at once", out.out)
        assert at_once and int(at_once.group(1)) >= 1, (where, out.out)
        return
    if argv[0] == "benchmarks.engine":  # each Ray setting's run, as the benchmark configures it
        from benchmarks import engine

        a = engine.parser().parse_args(argv[1:])
        cfgs = [engine._config(a, s).resolved() for s in a.settings.split(",") if "ray" in s]
    else:
        from fda_ray.experiments.cli import config_from_args

        cfgs = [config_from_args(run_parser().parse_args(argv[1:])).resolved()]
    assert cfgs
    for cfg in cfgs:
        assert R.check(R.plan(cfg, node), node) is None, where


def test_the_documented_plans_are_what_the_sweep_prints(capsys):
    """docs/ray-and-clusters.md quotes --dry-run's plans and a refusal: each block is the output of its command."""
    import shlex

    text = (ROOT / "docs" / "ray-and-clusters.md").read_text()
    blocks = re.findall(r"<!-- dry-run: (.*?) -->\n```\n(.*?)```\n<!-- /dry-run -->", text, re.S)
    assert len(blocks) >= 4
    for args, shown in blocks:
        code = sweep.main(shlex.split(args))
        cap = capsys.readouterr()
        printed = [x for x in cap.out.splitlines() if x.startswith("plan: ")] + cap.err.splitlines()
        assert printed == shown.splitlines(), args
        assert code == (2 if cap.err else 0)


def test_one_place_computes_a_share():
    """The four sizing call sites that disagreed (the executor's clients_per_actor/actor_size, the pre-flight's
    actor_gpus/client_bundles, the executors' own CPU share, Tune's resources/driver_gpus) are gone, and only the
    resource model reads a placement group's bundle layout."""
    package = ROOT / "fda_ray"
    sources = {p: p.read_text() for p in package.rglob("*.py")}
    for old in ("def clients_per_actor", "def actor_size", "def actor_gpus", "def client_bundles", "def driver_gpus",
                "auto_cpus_per_client", "DRIVER_CPUS", "bundle_specs[1]"):
        assert not [p for p, text in sources.items() if old in text], old
    readers = sorted(str(p.relative_to(package)) for p, text in sources.items() if ".bundle_specs" in text)
    assert readers == ["runtime/executors.py"]  # it hands them to resources.plan_in_group, which reads them
    assert "plan_in_group(cfg, pg.bundle_specs" in sources[package / "runtime" / "executors.py"]


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_a_tune_sweep_fills_a_real_gpu_with_several_trials(fmnist_dir, tmp_path, capsys, monkeypatch, no_ray):
    """The real thing on a lent GPU: the tiny grid through Ray Tune at --gpus-per-client 0.1 runs its trials with
    their clients on the GPU, several at once (the plan's count on this node), and finishes."""
    import json

    from benchmarks.sweep import at_once, read_trials
    from test_sweep import make_tiny_grid
    from fda_ray.papers.grids import GRIDS

    grid = make_tiny_grid()
    monkeypatch.setitem(GRIDS, grid.name, grid)
    out = tmp_path / "gpu"
    code = sweep.main(["--grid", "tiny-noise", "--data-dir", str(fmnist_dir), "--out", str(out), "--gpus-per-client",
                       "0.1", "--no-figures", "--track", "none"])
    assert code == 0, capsys.readouterr().err[-2000:]
    trials = read_trials(out)
    assert len(trials) == 4
    assert at_once([(t["started_at"], t["finished_at"]) for t in trials]) >= 2
    for p in (out / "trials").glob("*/rows.json"):
        record = json.loads(p.read_text())
        assert record["config"]["device"] == "cuda"
        memory = record["gpu_memory"]  # the driver's process and its GPU client actor, each with a peak
        assert memory["process"]["peak_reserved"] >= memory["process"]["peak_allocated"] > 0
        assert len(memory["actors"]) >= 1 and all(a["peak_reserved"] >= a["peak_allocated"] > 0
                                                  for a in memory["actors"])


@pytest.mark.slow
def test_a_gpu_client_actor_on_a_node_whose_gpu_torch_cannot_see_fails_in_one_line(no_ray, tiny):
    """Ray's GPUs are logical: a node that declares one torch cannot see (`ray start --num-gpus`, a broken driver)
    gives its GPU client actors one line naming the setting, not torch's "Found no NVIDIA driver" traceback."""
    import ray
    import torch

    from fda_ray import run

    if torch.cuda.is_available():
        pytest.skip("a machine with a CUDA GPU: torch sees the GPU Ray gives")
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    with pytest.raises(Exception) as e:
        run(tiny(executor="ray", gpus_per_client=0.5, num_sources=1, rounds=1, warmup_rounds=0))
    assert "gpus_per_client > 0 is invalid on node" in str(e.value) and "torch sees no CUDA GPU there" in str(e.value)
    assert "NVIDIA driver" not in str(e.value)


def test_a_refusal_names_the_node_with_the_most_of_what_is_short():
    """A trial short of CPUs is refused naming the node with the most CPUs (it named a 1-CPU node with a GPU as the
    largest, beside 2-CPU nodes), without Ray's own resources (memory, node:<ip>)."""
    cluster = R.Cluster(nodes=({"CPU": 1.0}, {"CPU": 1.0, "GPU": 1.0, "node:10.0.0.2": 1.0, "memory": 2e10},
                               {"CPU": 2.0}))
    assert cluster.largest(by="CPU") == {"CPU": 2.0} and cluster.largest()["GPU"] == 1.0
    with pytest.raises(PreflightError, match=r"largest node \{CPU: 2\}\); lower --cpus-per-client$"):
        R.check(R.plan(_cfg(executor="ray", cpus_per_client=4.0), cluster, in_tune=True), cluster)
    assert R.fmt({"CPU": 1.0, "GPU": 1.0, "node:10.0.0.2": 1.0, "memory": 2e10}, sep=" ") == "{CPU 1, GPU 1}"
    # a placement group's own names (a Tune trial's reserved bundles) are Ray's bookkeeping: a waiting note listed
    # a dozen of them beside the CPUs they count again
    pg = "fa83650f3db3f8bc353fb081b73501000000"
    assert R.fmt({"CPU": 0.0, f"CPU_group_0_{pg}": 0.0, f"CPU_group_{pg}": 2.0, f"bundle_group_1_{pg}": 1000.0,
                  "fda_driver": 1.0, f"fda_driver_group_0_{pg}": 1.0, "my_group_x": 1.0}) == \
        "{CPU: 0, fda_driver: 1, my_group_x: 1}"
