"""Sweeps on a real multi-node Ray cluster on this machine (slow tier): several raylets on loopback, 1 CPU each
and their own custom resources (ray.cluster_utils.Cluster, and `ray start` for a node with its own view of the
filesystem). What a cluster has to do:

- a sweep with --address spreads its trials over the nodes and gives the local backend's numbers;
- a worker node removed mid-sweep: its trial is retried by Tune on another node from its last round, the sweep
  finishes with the numbers of an uninterrupted run, and the trial's record names both nodes;
- a trial's driver and its client actors are placed on one node when they fit there;
- an --out the other nodes cannot see is refused in one line before any work;
- a sweep into an S3 bucket (a local S3 server) writes every record there, and --resume runs nothing again.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import boto3
import pyarrow.parquet as pq
import pytest
import ray
from ray.cluster_utils import Cluster

from fda_ray.experiments import sweep
from test_sweep import make_tiny_grid
from fda_ray.papers.grids import GRIDS

pytestmark = pytest.mark.slow


@pytest.fixture
def grid6(monkeypatch):
    """The tiny two-row grid with 6 main rounds: long enough to lose a node in the middle of a trial."""
    grid = make_tiny_grid(rounds=6)
    monkeypatch.setitem(GRIDS, grid.name, grid)
    return grid


@pytest.fixture
def cluster(no_ray):
    """A head and two worker nodes, 1 CPU each, each with a custom resource of its own."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"head_node": 1}})
    workers = [c.add_node(num_cpus=1, resources={f"node_{x}": 1}) for x in "ab"]
    c.wait_for_nodes()
    try:
        yield c, workers
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


def _lose(c: Cluster, node) -> None:
    """A node lost as a machine is lost: every process on it at once (its trial's worker too: a raylet killed
    alone leaves a busy worker running until it next talks to it), then the node leaves the cluster."""
    import psutil

    raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)
    for p in raylet.children(recursive=True) + [raylet]:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    c.remove_node(node, allow_graceful=False)


def _args(fmnist_dir, out, *more):
    return ["--grid", "tiny-noise", "--data-dir", str(fmnist_dir), "--out", str(out), "--json", *more]


def _summary(printed: str) -> dict:
    """The summary JSON the sweep printed (Ray's own log lines may follow it on stdout)."""
    return json.JSONDecoder().raw_decode(printed[printed.index("{"):])[0]


def _numbers(out) -> dict:
    table = pq.read_table(out / "results.parquet").to_pylist()
    return {(r["row"], r["noise"], r["round"]): r["accuracy"] for r in table}


def _records(out: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in (out / "trials").glob("*/rows.json")}


def test_a_sweep_spreads_over_the_nodes_survives_a_lost_node_and_equals_the_local_backend(
        cluster, grid6, fmnist_dir, tmp_path, capsys):
    c, (node_a, node_b) = cluster
    out = tmp_path / "cluster"
    lost: dict[str, str] = {}

    def lose_node_b() -> None:
        """Remove worker node b (its raylet and every process on it) once a trial there finished a round."""
        deadline = time.time() + 300
        while time.time() < deadline and not lost:
            for nodes in (out / "trials").glob("*/nodes.json"):
                record = nodes.parent
                try:
                    here = json.loads(nodes.read_text())[-1]
                except (OSError, ValueError, IndexError):
                    continue
                if (here.get("node_id") == node_b.node_id and (record / "state.pt").is_file()
                        and not (record / "rows.json").is_file()):
                    _lose(c, node_b)
                    lost["trial"] = record.name
                    return
            time.sleep(0.05)

    watcher = threading.Thread(target=lose_node_b, daemon=True)
    watcher.start()
    # serial trials of 1 CPU: one trial per node at a time
    code = sweep.main(_args(fmnist_dir, out, "--address", c.address, "--executor", "serial", "--max-failures", "2"))
    watcher.join(timeout=5)
    printed = capsys.readouterr()
    summary = _summary(printed.out)
    assert code == 0, printed.err[-2000:]
    assert summary["trials_done"] == summary["trials"] == 4 and summary["failures"] == []
    assert lost, "no trial ran on node b long enough to lose the node under it"

    records = _records(out)
    ran_on = {key: [n["node_id"] for n in rec["nodes"]] for key, rec in records.items()}
    with capsys.disabled():  # what the run did, shown with -s
        print("\ntrials -> nodes that ran them:", {k[:28]: [n[:8] for n in v] for k, v in ran_on.items()})
        print(f"node lost: {node_b.node_id[:8]} under trial {lost['trial'][:28]}; its attempts:",
              [(n["node_id"][:8], n["from_round"]) for n in records[lost["trial"]]["nodes"]])
    # the trials were spread: at least the two nodes that were never removed ran some
    assert len({n for v in ran_on.values() for n in v}) >= 2
    # the lost node's trial: started on node b, retried on another node from the round its state.pt held
    retried = records[lost["trial"]]["nodes"]
    assert retried[0]["node_id"] == node_b.node_id and retried[-1]["node_id"] != node_b.node_id
    assert len(retried) >= 2 and retried[-1]["from_round"] >= 1
    # the same numbers as the local backend (a process pool, no Ray): the same code path, to the last bit
    local = tmp_path / "local"
    assert sweep.main(_args(fmnist_dir, local, "--backend", "local", "--workers", "2")) == 0
    capsys.readouterr()
    assert _numbers(out) == _numbers(local)
    with capsys.disabled():
        print(f"equal to the local backend: {len(_numbers(out))} (row, noise, round) accuracies, all equal")
    # nothing finished is lost: resuming the cluster's sweep runs no trial again
    assert sweep.main(_args(fmnist_dir, out, "--address", c.address, "--executor", "serial", "--resume")) == 0
    again = capsys.readouterr().out
    assert _summary(again)["trials_run"] == 0


def test_trials_no_live_node_holds_after_a_node_loss_fail_in_one_line_and_resume_later(
        no_ray, grid6, fmnist_dir, tmp_path, capsys, monkeypatch):
    """A head without CPUs, a 2-CPU node and a 1-CPU node; trials of 2 threads (driver {CPU: 2}) fit the big node
    only. The big node is lost under a trial: the retried trial and those not started wait for a node no live one
    is. Ray would keep them pending in silence; within $FDA_RAY_NODE_WAIT_S (3 s here) after Ray notices the loss,
    the sweep says so in one note, ends with one error line and exit 1, and keeps every record; with a big node
    back, --resume finishes the sweep from the lost trial's checkpoint."""
    monkeypatch.setenv("FDA_RAY_NODE_WAIT_S", "3")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    big = c.add_node(num_cpus=2)
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    out = tmp_path / "sweep"
    lost: dict[str, Any] = {}

    def lose_the_big_node() -> None:
        deadline = time.time() + 300
        while time.time() < deadline and not lost:
            for state in (out / "trials").glob("*/state.pt"):
                if not (state.parent / "rows.json").is_file():
                    _lose(c, big)
                    lost.update(trial=state.parent.name, at=time.time())
                    return
            time.sleep(0.05)

    args = _args(fmnist_dir, out, "--address", c.address, "--executor", "serial", "--threads", "2")
    try:
        watcher = threading.Thread(target=lose_the_big_node, daemon=True)
        watcher.start()
        code = sweep.main(args)
        ended = time.time()
        watcher.join(timeout=5)
        printed = capsys.readouterr()
        assert lost, "no trial ran long enough to lose the node under it"
        errors = [line for line in printed.err.splitlines() if line.startswith("error:")]
        notes = [line for line in printed.err.splitlines() if " cannot start (" in line and
                 "): no live node can hold a trial" in line]
        why = "no live node can hold a trial (it asks {CPU: 2}; largest live node {CPU: 1})"
        assert code == 1 and len(errors) == 1 and len(notes) == 1, printed.err[-3000:]
        assert errors[0].startswith("error: ") and why in errors[0] and errors[0].endswith(" --resume")
        with capsys.disabled():
            print(f"\nnode lost under {lost['trial'][:28]}; the sweep ended {ended - lost['at']:.0f} s later:\n"
                  f"{notes[0]}\n{errors[0]}")
        assert ended - lost["at"] < 3 + 120  # Ray's noticing of the loss, the wait, and the launch's end: bounded
        summary = _summary(printed.out)
        not_run = summary["failures"]
        assert not_run and all(f["error"].startswith("not run") and f": {why}" in f["error"] for f in not_run)
        assert summary["trials_done"] + len(not_run) == summary["trials"] == 4
        assert lost["trial"] in {f["trial"] for f in not_run}
        # the trial that ran when its node went says how often it ran, and that its rounds are kept ("0 attempts")
        (cut,) = [f for f in not_run if f["trial"] == lost["trial"]]
        assert cut["attempts"] >= 1 and cut["error"].startswith(
            f"not run again ({cut['attempts']} attempt(s) before; its finished rounds are kept): ")
        assert (out / "trials" / lost["trial"] / "state.pt").is_file()  # its finished rounds are kept
        if ray.is_initialized():
            ray.shutdown()
        c.add_node(num_cpus=2)
        c.wait_for_nodes()
        assert sweep.main([*args, "--resume"]) == 0
        again = _summary(capsys.readouterr().out)
        assert again["trials_done"] == 4 and again["trials_run"] == len(not_run)
        assert _records(out)[lost["trial"]]["nodes"][-1]["from_round"] >= 1  # went on from its checkpoint
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


def test_a_trials_driver_runs_beside_its_client_actors(no_ray, grid6, fmnist_dir, tmp_path, capsys):
    """Two 3-CPU worker nodes and a head without CPUs: a trial's driver (1 CPU) and its two client actors (1 CPU
    each) fill one node (one placement group, packed), and two trials run at once, one per node."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    workers = [c.add_node(num_cpus=3, resources={f"node_{x}": 1}) for x in "ab"]
    c.wait_for_nodes()
    try:
        out = tmp_path / "beside"
        code = sweep.main(_args(fmnist_dir, out, "--address", c.address, "--executor", "ray", "--cpus-per-client",
                                "0.5", "--clients-per-actor", "2", "--rounds", "2"))
        printed = capsys.readouterr()
        assert code == 0, printed.err[-2000:]
    finally:
        ray.shutdown()
        c.shutdown()
    records = _records(out)
    assert len(records) == 4
    ids = {w.node_id for w in workers}
    for key, rec in records.items():
        for attempt in rec["nodes"]:
            assert attempt["node_id"] in ids  # never the head: it has no CPU
            assert attempt["client_nodes"] == [attempt["node_id"]], key  # the clients beside their driver
    assert {a["node_id"] for rec in records.values() for a in rec["nodes"]} == ids  # both nodes ran trials


def test_one_cpu_nodes_get_a_trial_that_fits_or_a_one_line_refusal(no_ray, grid6, fmnist_dir, tmp_path, capsys):
    """Three 1-CPU worker nodes and a head without CPUs, joined with --address. Before the resource model every
    client asked a CPU and a pooled actor all of its clients' ({CPU 1} + 3 x {CPU 4}, PACK): no node set could
    hold it and the sweep waited in silence. Now the default plan pools the 4 clients to the 2 CPUs beside the
    driver and the trial runs, its bundles over three nodes; a per-client CPU the nodes can never hold is refused
    in one line before any work."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    workers = [c.add_node(num_cpus=1) for _ in range(3)]
    c.wait_for_nodes()
    try:
        refused = tmp_path / "refused"
        code = sweep.main(_args(fmnist_dir, refused, "--address", c.address, "--executor", "ray", "--cpus-per-client",
                                "1", "--methods", "target_only", "--values", "0.8"))
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2
        assert len(err) == 1 and err[0].startswith("error: cpus_per_client=1.0 is invalid: a trial asks driver {CPU: 1} "
                                                   "+ 4 x {CPU: 1} (PACK); no node set of the Ray cluster can ever "
                                                   "hold it (largest node {CPU: 1}")
        assert err[0].endswith("lower --cpus-per-client")
        assert not (refused / "trials").exists()  # nothing ran
        if ray.is_initialized():
            ray.shutdown()
        out = tmp_path / "fits"
        code = sweep.main(_args(fmnist_dir, out, "--address", c.address, "--methods", "target_only", "--values",
                                "0.8", "--rounds", "1"))
        printed = capsys.readouterr()
        assert code == 0, printed.err[-2000:]
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()
    (rec,) = _records(out).values()
    ids = {w.node_id for w in workers}
    attempt = rec["nodes"][-1]
    assert len(attempt["client_nodes"]) == 2  # two pooled actors of 2 clients
    assert {attempt["node_id"], *attempt["client_nodes"]} == ids  # the driver and each actor on a node of its own


def _unshare() -> list[str]:
    """A mount namespace of its own for a Ray node (root: unshare -m; a user: a user namespace too)."""
    return ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-Urm"]


def test_an_out_directory_the_other_nodes_cannot_see_is_refused_in_one_line(no_ray, grid6, fmnist_dir, tmp_path,
                                                                            capsys):
    """A worker node started with its own view of the filesystem (a mount namespace in which the sweep's
    directory is an empty tmpfs), as a node-local disk is on a real cluster."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    private = tmp_path / "head-only"
    private.mkdir()
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    ray_bin = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    worker = subprocess.Popen(
        _unshare() + ["sh", "-c", f'mount -t tmpfs tmpfs "{private}" && exec "{ray_bin}" start '
                                  f'--address={c.address} --num-cpus=1 --resources=\'{{"node_w": 1}}\' --block'],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.time() + 60
        ray.init(address=c.address)
        while len([n for n in ray.nodes() if n["Alive"]]) < 2:
            assert worker.poll() is None, worker.stderr.read().decode()[-2000:]
            assert time.time() < deadline, "the worker node did not join"
            time.sleep(0.5)
        ray.shutdown()
        out = private / "sweep"
        code = sweep.main(_args(fmnist_dir, out, "--address", c.address, "--executor", "serial"))
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2
        assert len(err) == 1 and err[0].startswith(f"error: out='{out}' is invalid: the cluster's other nodes "
                                                   "cannot use it: the probe file written there is not found from node")
        assert err[0].endswith("put --out on a filesystem every node mounts at this path, or on an object store "
                               "(s3://bucket/prefix)")
        assert not (out / "trials").exists()  # nothing ran
        # a directory every node sees passes the same probe
        from fda_ray.runtime import preflight
        if not ray.is_initialized():
            ray.init(address=c.address)
        assert preflight.shared_storage("out", tmp_path / "shared") == 1
        assert [p.name for p in (tmp_path / "shared").iterdir()] == []  # the probe cleans up after itself
    finally:
        if ray.is_initialized():
            ray.shutdown()
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        c.shutdown()


def test_a_sweep_into_an_s3_bucket_keeps_its_records_there_and_resumes_from_them(
        s3_bucket, grid6, fmnist_dir, tmp_path, capsys, no_ray):
    out = f"{s3_bucket}/sweeps/tiny"
    args = _args(fmnist_dir, out, "--rounds", "2")
    assert sweep.main(args) == 0
    printed = capsys.readouterr().out
    assert _summary(printed)["trials_done"] == 4
    bucket = s3_bucket[len("s3://"):]
    keys = sorted(o["Key"] for page in boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket)
                  for o in page.get("Contents", []))
    with capsys.disabled():
        print(f"\n{len(keys)} objects written, e.g.:", *[k for k in keys if "/tune/" not in k][:12], sep="\n  ")
    records = {k.split("/")[3] for k in keys if k.startswith("sweeps/tiny/trials/") and k.endswith("/rows.json")}
    assert len(records) == 4
    for name in ("trial.json", "state.pt", "nodes.json"):
        assert sum(k.endswith(f"/{name}") for k in keys) == 4, name
    for name in ("results.parquet", "summary.md", "accuracy.png", "accuracy.pdf"):
        assert f"sweeps/tiny/{name}" in keys, name
    assert any(k.startswith("sweeps/tiny/tune/launch-1/") for k in keys)  # Tune's own storage, in the bucket
    assert not any(".tmp" in k for k in keys)
    assert sweep.main(args + ["--resume"]) == 0
    printed = capsys.readouterr().out
    summary = _summary(printed)
    assert summary["trials_run"] == 0 and summary["trials_done"] == 4
    with capsys.disabled():
        print("resume: trials_run", summary["trials_run"])


def test_a_running_trial_whose_client_actors_no_live_node_holds_says_so_within_the_wait(no_ray, fmnist_dir,
                                                                                          tmp_path):
    """A trial's driver pinned to node D (1 CPU, fda_driver), its two client actors on node W (2 CPUs); W is lost
    (every process on it killed, as a machine is lost) while the trial runs. The driver lives on, waiting for
    actors no live node can hold again: Ray would wait in silence. Through --address, in a real subprocess: within
    $FDA_RAY_NODE_WAIT_S (3 s here) after Ray notices the loss, one note names the trial, what it asks and the
    largest live node; the sweep ends with one error line naming the trials not run and the resume command, exit 1,
    the cut-off trial's checkpoint kept; with a 2-CPU node back, --resume finishes from that checkpoint."""
    from fda_ray.papers.files import dump, grid_to_dict

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    c.add_node(num_cpus=1, resources={"fda_driver": 1})
    w = c.add_node(num_cpus=2)
    c.wait_for_nodes()
    grid = tmp_path / "g.yaml"
    grid.write_text(dump(grid_to_dict(make_tiny_grid(rounds=8))))
    out = tmp_path / "sweep"
    argv = [sys.executable, "-m", "fda_ray.sweep", "--grid", str(grid), "--data-dir", str(fmnist_dir), "--out",
            str(out), "--address", c.address, "--executor", "ray", "--pin-drivers", "--cpus-per-client", "0.5",
            "--clients-per-actor", "2", "--methods", "fedgp_auto", "--max-failures", "2", "--no-figures"]
    env = {**os.environ, "FDA_RAY_NODE_WAIT_S": "3", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("RAY_ADDRESS", None)
    lost: dict[str, Any] = {}
    lines: list[tuple[float, str]] = []
    try:
        stdout = open(tmp_path / "stdout.txt", "w")
        p = subprocess.Popen(argv, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True)

        def read_err() -> None:
            for line in p.stderr:
                lines.append((time.time(), line.rstrip("\n")))

        reader = threading.Thread(target=read_err, daemon=True)
        reader.start()
        deadline = time.time() + 300
        while time.time() < deadline and p.poll() is None and not lost:
            for state in (out / "trials").glob("*/state.pt"):
                if not (state.parent / "rows.json").is_file():
                    _lose(c, w)
                    lost.update(trial=state.parent.name, at=time.time())
                    break
            time.sleep(0.05)
        p.wait(timeout=300)  # (stderr is the reader's alone)
        ended = time.time()
        stdout.close()
        reader.join(timeout=10)
        err = [x for _, x in lines]
        assert lost, "no trial ran long enough to lose its actors' node under it:\n" + "\n".join(err[-30:])
        notes = [(t, x) for t, x in lines if x.startswith("note: ") and " cannot go on: " in x]
        errors = [x for x in err if x.startswith("error:")]
        assert p.returncode == 1 and len(notes) == 1 and len(errors) == 1, "\n".join(err[-30:])
        assert "Traceback" not in "\n".join(err)
        note_at, note = notes[0]
        asks = "(it asks {CPU: 1, fda_driver: 1} + {CPU: 1} + {CPU: 1}; largest live node {CPU: 1, fda_driver: 1})"
        assert note.startswith("note: fedgp_auto noise=") and \
            f"cannot go on: no live node can hold this trial's client actors again {asks}" in note, note
        assert errors[0].startswith("error: 2 trial(s) did not run (fedgp_auto at ") and asks in errors[0]
        assert errors[0].endswith(" --resume"), errors[0]
        with capsys_disabled():
            print(f"\nclient actors' node lost under {lost['trial'][:28]}: the note {note_at - lost['at']:.1f} s "
                  f"later, the sweep's end {ended - lost['at']:.1f} s later:\n{note}\n{errors[0]}")
        assert note_at - lost["at"] < 3 + 60  # Ray's noticing of the loss (its health checks), then the wait
        assert (out / "trials" / lost["trial"] / "state.pt").is_file()  # its finished rounds are kept
        assert not (out / "trials" / lost["trial"] / "rows.json").is_file()
        c.add_node(num_cpus=2)
        c.wait_for_nodes()
        again = subprocess.run([*argv, "--resume"], env=env, capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stderr[-3000:]
        record = _records(out)[lost["trial"]]
        assert record["nodes"][-1]["from_round"] >= 1  # went on from its checkpoint
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


class capsys_disabled:
    """Print past pytest's capture (the test's timing line, read in the slow tier's output)."""

    def __enter__(self) -> None:
        import sys as _sys

        self._out = _sys.stdout
        _sys.stdout = _sys.__stdout__

    def __exit__(self, *exc: object) -> None:
        import sys as _sys

        _sys.stdout = self._out


@contextlib.contextmanager
def ray_start_held_by_another_job(tmp_path: Path, prefix: str) -> Iterator[tuple[dict, Path, subprocess.Popen]]:
    """A `ray start --head` cluster of 1 CPU under its own RAY_TMPDIR, its CPU held by another job's actor (a process
    that prints 'holding' once it holds it): yields (the env a command joins it with, that RAY_TMPDIR, the other
    job's process); stops the cluster and the job after."""
    import socket
    import tempfile

    ray_tmp = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))  # short: Ray's socket paths live under it
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "FDA_RAY_NODE_WAIT_S": "3",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("RAY_ADDRESS", None)
    hog = None
    try:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        started = subprocess.run(["ray", "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                                  "--num-cpus=1", "--num-gpus=0", "--include-dashboard=false",
                                  "--disable-usage-stats"], env=env, capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr[-2000:]
        (tmp_path / "hog.py").write_text(
            "import time\nimport ray\nray.init()  # the cluster `ray start` left (RAY_TMPDIR)\n\n\n"
            "@ray.remote(num_cpus=1)\nclass Hog:\n    def ping(self):\n        return 1\n\n\nh = Hog.remote()\n"
            "ray.get(h.ping.remote())\nprint('holding', flush=True)\ntime.sleep(600)\n")
        hog = subprocess.Popen([sys.executable, str(tmp_path / "hog.py")], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
        assert hog.stdout.readline().strip() == "holding"
        yield env, ray_tmp, hog
    finally:
        if hog is not None and hog.poll() is None:
            hog.kill()
        subprocess.run(["ray", "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_a_run_whose_client_actors_wait_on_another_jobs_cpus_says_so(fmnist_dir, tmp_path):
    """A single run (--executor ray, no address) joins a `ray start` cluster whose only CPU another job's actor
    holds: its client actor cannot start. After $FDA_RAY_NODE_WAIT_S (3 s here) one note says what the actors ask,
    what is free and what holds it (the other job's pid and command), instead of a silent wait of up to 300 s; once
    the other job ends, the actor starts and the run finishes (exit 0)."""
    with ray_start_held_by_another_job(tmp_path, "fdaray-r-") as (env, _, hog):
        p = subprocess.Popen([sys.executable, "-m", "fda_ray", "--executor", "ray", "--data-dir", str(fmnist_dir),
                              "--rounds", "1", "--warmup-rounds", "0", "--num-sources", "2", "--samples-per-client",
                              "128", "--test-samples", "50", "--target-labelled", "32", "--parquet",
                              str(tmp_path / "rounds.parquet")],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines, noted = [], None
        for line in p.stderr:
            lines.append(line.rstrip("\n"))
            if line.startswith("note: 1 of 1 client actors have waited"):
                noted = line.strip()
                hog.kill()  # the other job ends: its CPU is free again
        p.wait(timeout=300)
        assert p.returncode == 0 and "Traceback" not in "\n".join(lines), "\n".join(lines[-30:])
        assert noted is not None, "\n".join(lines[-30:])
        assert " s for resources: each asks {CPU: 1}; free now {CPU: 0} of {CPU: 1}; held by job " in noted, noted
        assert f": {Path(sys.executable).name} {tmp_path / 'hog.py'}): 1 actor(s); they start once it is free" in \
            noted, noted
        assert pq.read_table(tmp_path / "rounds.parquet").num_rows == 1


def test_a_sweep_that_joins_a_ray_start_cluster_says_so_and_why_its_trials_wait(fmnist_dir, tmp_path):
    """A `ray start --head` cluster (1 CPU) left running, its CPU held by another job's actor. A sweep given no
    address joins it, as Ray does: one note says which cluster it joined and what is free; its trial waits, and
    after $FDA_RAY_NODE_WAIT_S (3 s here) one note names what the trial asks, what is free and what holds it (the
    other job: its pid and command). Once that job ends, the trial runs and the sweep finishes."""
    from fda_ray.papers.files import dump, grid_to_dict

    with ray_start_held_by_another_job(tmp_path, "fdaray-j-") as (env, ray_tmp, hog):
        address = (ray_tmp / "ray" / "ray_current_cluster").read_text().strip()
        grid = tmp_path / "g.yaml"
        d = grid_to_dict(make_tiny_grid())
        d["rows"] = [r for r in d["rows"] if r["key"] == "target_only"]
        d["paper"] = {}
        grid.write_text(dump(d))
        out = open(tmp_path / "stdout.txt", "w")
        p = subprocess.Popen([sys.executable, "-m", "fda_ray.sweep", "--grid", str(grid), "--values", "0.8",
                              "--data-dir", str(fmnist_dir), "--out", str(tmp_path / "sweep"), "--no-figures"],
                             env=env, stdout=out, stderr=subprocess.PIPE, text=True)
        lines = []
        for line in p.stderr:
            lines.append(line.rstrip("\n"))
            if line.startswith("note: 1 trial(s) have waited"):
                hog.kill()  # the other job ends: its CPU is free again
        p.wait(timeout=300)
        out.close()
        assert p.returncode == 0, "\n".join(lines[-30:])
        joined = [x for x in lines if x.startswith("note: joined the Ray cluster that `ray start` left running")]
        assert len(joined) == 1 and f"at {address} (named in {ray_tmp / 'ray' / 'ray_current_cluster'}): 1 node(s), " \
            "free now {CPU: 0} of {CPU: 1}" in joined[0], lines
        (waited,) = [x for x in lines if x.startswith("note: 1 trial(s) have waited")]
        assert "s for resources: each asks {CPU: 1}; free now {CPU: 0} of {CPU: 1}; held by job " in waited
        assert f": {Path(sys.executable).name} {tmp_path / 'hog.py'}): 1 actor(s); they start once it is free" in waited, \
            waited
        assert (tmp_path / "sweep" / "results.parquet").is_file()


@pytest.mark.slow  # a Ray cluster of two nodes
def test_a_dry_run_under_ray_address_plans_on_that_cluster(no_ray, grid6, fmnist_dir, tmp_path, capsys, monkeypatch):
    """`ray job submit` and KubeRay's RayJob set $RAY_ADDRESS, not --address: the dry run planned on the machine it
    ran on (a CPU head: "no node has a GPU", exit 2), while the run itself joins the cluster."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    c.add_node(num_cpus=2, num_gpus=1)  # (a logical GPU: Ray plans with it)
    c.wait_for_nodes()
    try:
        monkeypatch.setenv("RAY_ADDRESS", c.address)
        code = sweep.main(_args(fmnist_dir, tmp_path / "plan", "--gpus-per-client", "0.5", "--methods", "target_only",
                                "--values", "0.8", "--dry-run"))
        printed = capsys.readouterr()
        assert code == 0, printed.err[-2000:]
        plan = [x for x in printed.out.splitlines() if x.startswith("plan: ") and "at once" in x]
        assert plan and "(the Ray cluster" in plan[-1], printed.out[-2000:]
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()
