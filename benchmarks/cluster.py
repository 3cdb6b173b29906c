"""Cluster benchmark: what a multi-node Ray cluster buys a sweep, measured on a local cluster of K nodes.

    python -m benchmarks.cluster [--nodes 1,2] [--trials 8] [--rounds 3] [--samples 2000] [--cpus-per-node 1] [--json]

For each K, a fresh local cluster (ray.cluster_utils.Cluster: a head without CPUs and K worker nodes of
--cpus-per-node CPUs, each its own raylet, object store and processes, on loopback) runs the same N short trials
through the sweep's Tune backend (fda_ray.experiments.backends.run_tune: one placement group per trial, records in
a directory every node sees), FedGP on Fashion-MNIST at noise 0.4, one seed per trial. Columns:

    wall s           the Tune launch, first trial placed to last record written
    trials/min       N / wall
    speed-up         against the first K of the table
    slots            trials that can run at once: K x cpus-per-node / a trial's CPUs (at most N)
    overhead s/trial what a trial costs beyond its rounds, per trial: (slots x wall - the trials' own run times)
                     / N. Tune's scheduling, a trial process starting (torch imported; reused by later trials),
                     loading the data and building the clients: the fixed cost a short trial pays on a cluster
    driver share     of the trials' round time, the drivers' own work outside client training (aggregation,
                     planning, evaluation), from the records' per-round driver_seconds
    nodes used       distinct nodes that ran trials (from the records' nodes.json)

On a machine with fewer cores than K x cpus-per-node the nodes share the cores and the speed-up stops at the
core count: compare K up to the cores you have. Each K runs in a fresh process (a new cluster; no warm worker
carries over).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from benchmarks import child_env


def trials(n: int, rounds: int, data_dir: str | None, executor: str, samples: int = 2000) -> list[Any]:
    """N trials that differ only by seed: FedGP at noise 0.4, 3 sources of `samples` images, a 2000-image test
    set."""
    from fda_ray.experiments.records import Trial, trial_key

    out = []
    for seed in range(n):
        params = dict(dataset="fashion-mnist", method="fedgp", noise=0.4, seed=seed, rounds=rounds, warmup_rounds=0,
                      num_sources=3, samples_per_client=samples, test_samples=2000, target_labelled=100, threads=1,
                      executor=executor, data_dir=data_dir,
                      **({"cpus_per_client": 1.0, "clients_per_actor": 4} if executor == "ray" else {}))
        out.append(Trial(trial_key("bench", "noise", 0.4, seed, params), "bench", 0.4, seed, params))
    return out


def _start_cluster(k: int, cpus_per_node: float, tries: int = 2) -> Any:
    """A local cluster of a head without CPUs and k worker nodes. Ray gives a node 30 s to register (a fixed limit
    in ray._private.node), which a 2-core machine still busy shutting down the previous K's cluster can miss
    ("The current node timed out during startup"): the start is tried again then, from a clean slate (the timing
    starts once the cluster answers)."""
    from ray.cluster_utils import Cluster

    for attempt in range(tries):
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        try:
            for i in range(k):
                cluster.add_node(num_cpus=cpus_per_node, resources={f"bench_node_{i}": 1})
            cluster.wait_for_nodes()
            return cluster
        except Exception as e:  # (Ray raises a bare Exception for it)
            cluster.shutdown()
            if "timed out during startup" not in str(e) or attempt == tries - 1:
                raise
            print(f"bench.cluster: a node of the {k}-node cluster did not register within Ray's 30 s; starting "
                  "it again", file=sys.stderr)
    raise AssertionError("unreachable")


def measure(k: int, a: argparse.Namespace) -> dict[str, Any]:
    """One K: a fresh local cluster of k worker nodes runs the trials; returns the table's row."""
    import ray

    from fda_ray.experiments.backends import Progress, run_tune
    from fda_ray.experiments.tune import resources
    from fda_ray.experiments.records import read_rows

    cluster = _start_cluster(k, a.cpus_per_node)
    todo = trials(a.trials, a.rounds, a.data_dir, a.executor, a.samples)
    per_trial_cpus = sum(b.get("CPU", 0) for b in resources(todo[0].config().resolved()).bundles)
    try:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d)
            ray.init(address=cluster.address, log_to_driver=False)
            ray.get(ray.remote(num_cpus=0)(lambda: None).remote())  # the cluster answers
            t0 = time.perf_counter()
            failures, interrupted = run_tune(todo, out / "trials", out, None, None, 0,
                                             Progress(len(todo), "noise"))
            wall = time.perf_counter() - t0
            if failures or interrupted:
                raise RuntimeError(f"{len(failures)} trials failed: {failures[:1]}")
            recs = [read_rows(out / "trials" / t.key) for t in todo]
    finally:
        ray.shutdown()
        cluster.shutdown()
    slots = min(a.trials, max(1, int(k * a.cpus_per_node // per_trial_cpus)))
    own = sum(r["seconds"] for r in recs)
    round_s = sum(row["seconds"] for r in recs for row in r["rows"])
    driver_s = sum(row["driver_seconds"] for r in recs for row in r["rows"])
    return {"nodes": k, "trials": a.trials, "rounds": a.rounds, "executor": a.executor, "wall_s": wall,
            "trials_per_min": 60 * a.trials / wall, "slots": slots, "trial_cpus": per_trial_cpus,
            "trial_s_median": statistics.median(r["seconds"] for r in recs),
            "overhead_s_per_trial": (slots * wall - own) / a.trials, "driver_share": driver_s / round_s,
            "nodes_used": len({n["node_id"] for r in recs for n in r.get("nodes", [])})}


def table(rows: list[dict[str, Any]]) -> str:
    base = rows[0]["wall_s"]
    lines = ["| nodes | trials | slots | wall s | trials/min | speed-up | trial s (median) | overhead s/trial | "
             "driver share | nodes used |", "|" + "---:|" * 10]
    for r in rows:
        lines.append(f"| {r['nodes']} | {r['trials']} | {r['slots']} | {r['wall_s']:.1f} | {r['trials_per_min']:.1f} | "
                     f"{base / r['wall_s']:.2f}x | {r['trial_s_median']:.1f} | {r['overhead_s_per_trial']:.1f} | "
                     f"{100 * r['driver_share']:.1f} % | {r['nodes_used']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from fda_ray.core.parsing import OneLineParser, typed

    p = OneLineParser(prog="python -m benchmarks.cluster", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="1,2", help="comma-separated node counts K")
    p.add_argument("--trials", type=typed("trials", int, "an integer"), default=8)
    p.add_argument("--rounds", type=typed("rounds", int, "an integer"), default=3)
    p.add_argument("--cpus-per-node", type=typed("cpus_per_node", int, "an integer"), default=1)
    p.add_argument("--samples", type=typed("samples", int, "an integer"), default=2000,
                   help="images per source client (a trial's size)")
    p.add_argument("--executor", default="serial", help="serial (a trial in its Tune process) or ray (client actors "
                                                        "in the trial's placement group)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    p.add_argument("--save", default=None, help="also write the rows as JSON to this file (for "
                                                "python -m benchmarks.projection --cluster-json)")
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # internal: one K in this process
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    if a.one is not None:
        print("BENCH " + json.dumps(measure(a.one, a)), flush=True)
        return 0
    try:
        ks = [int(x) for x in a.nodes.split(",") if x.strip()]
    except ValueError:
        ks = []
    problems = [("nodes", a.nodes, "comma-separated integers >= 1")] if not ks or min(ks) < 1 else []
    problems += [(n, getattr(a, n), "an integer >= 1") for n in ("trials", "rounds", "cpus_per_node", "samples")
                 if getattr(a, n) < 1]
    if a.executor not in ("serial", "ray"):
        problems.append(("executor", a.executor, "serial or ray"))
    if problems:
        field, value, allowed = problems[0]
        print(f"error: {field}={value!r} is invalid: {allowed}", file=sys.stderr)
        return 2
    from fda_ray.data import load
    from fda_ray.data.base import DatasetNotFound

    try:
        load("fashion-mnist", a.data_dir)
    except DatasetNotFound as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = []
    for k in ks:  # each K in a fresh process: a new cluster, no warm worker carried over
        cmd = [sys.executable, "-m", "benchmarks.cluster", "--one", str(k), "--trials", str(a.trials), "--rounds",
               str(a.rounds), "--cpus-per-node", str(a.cpus_per_node), "--executor", a.executor,
               "--samples", str(a.samples)] + \
              (["--data-dir", a.data_dir] if a.data_dir else [])
        done = subprocess.run(cmd, capture_output=True, text=True, env=child_env(RAY_DEDUP_LOGS="0"))
        line = next((x for x in done.stdout.splitlines() if x.startswith("BENCH ")), None)
        if done.returncode != 0 or line is None:
            print(f"error: nodes={k}: the benchmark failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}",
                  file=sys.stderr)
            if rows:
                print(table(rows))
            return 1
        rows.append(json.loads(line[len("BENCH "):]))
        print(f"nodes={k}: {rows[-1]['wall_s']:.1f} s", file=sys.stderr, flush=True)
    if a.save:
        Path(a.save).write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    print(json.dumps({"rows": rows}, indent=1) if a.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
