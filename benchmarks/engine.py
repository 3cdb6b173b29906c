"""Engine benchmark: seconds per round of each executor beside a plain PyTorch loop of the same work.

    python -m benchmarks.engine [--rounds 5] [--settings plain,serial-2t,vectorised,ray,ray-pool] [--json]
    python -m benchmarks.engine --settings ray-pool,ray-x2 --gpus-per-client 0.1 --device cuda   # on a GPU

Setup: 9 sources and the target (FedGP, so all 10 clients train every round), one local epoch, no warm-up,
the default Fashion-MNIST shards (6000 samples a source at batch 64, 100 target samples at batch 16). Each
setting runs in a fresh process (thread settings and start-up costs do not leak between settings):

    plain        the reference: FedGP as a plain sequential PyTorch loop, DataLoaders and a new Adam per client
                 and round, 2 threads (benchmarks.plain: what a researcher would write)
    serial-1t / serial-2t   the serial executor with 1 / 2 torch threads, one client after the other
    vectorised   the serial executor with 2 threads, the sources trained as one cohort (fda_ray.train.cohort)
    ray          the Ray executor, one actor per client, Ray already running when the run is called
    ray-pool     the Ray executor as configured by default: actors pooled to the machine (one per CPU, each
                 hosting its share of the clients), Ray already running
    ray-pool-vec the same, each actor training its clients as one cohort
    ray-pool-turns  ray-pool with GPU clients trained one after the other in their actor
                 (FDA_RAY_CONCURRENT_CLIENTS=0); ray-pool trains them side by side, a thread and a CUDA stream
                 each (fda_ray.train.cohort.run_concurrently): on the CPU the two are the same
    ray-cold     ray-pool, but the call also starts Ray (a laptop's first run)
    ray-x2       two runs side by side in one Ray, each driven by a DriverActor, pooled to the machine
    default      what `python -m fda_ray` does with no executor option (fda_ray.experiments.cli.whole_machine:
                 on 2 or more cores, ray-cold; on one, serial-1t), Ray started by the call
    flower       the plain loop's work in Flower's simulation (benchmarks.flower), under --flower-python:
                 Flower pins its own Ray, so it runs from its own virtual environment

Columns (medians over rounds 2..R): s/round, and its ratio to the plain loop's (the figure to compare:
machines differ, ratios measured in one sitting much less); busiest actor s, the training time of the actor
with the most work (serial: all clients); driver s/round, the driver's own work (aggregation, submitting the
next round, evaluation), and its share of the round; round beyond busiest actor, the round's wall time minus
that critical path (under Ray the driver evaluates round r while the clients already train round r+1, so this
can be below the driver's own time, even negative). First round is the time from the call to the end of round
1 (data loading, actor start-up and round 1); GPU MiB is the peak memory allocated per client actor.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from benchmarks import child_env

SETTINGS = ("plain", "serial-1t", "serial-2t", "vectorised", "ray", "ray-pool", "ray-pool-vec", "ray-pool-turns",
            "ray-cold", "ray-x2", "default", "flower")
ENV = {"ray-pool-turns": {"FDA_RAY_CONCURRENT_CLIENTS": "0"}}  # a setting's environment (its actors inherit it)
# setting -> RunConfig fields (plain: the reference loop's threads)
FIELDS: dict[str, dict] = {
    "plain": dict(threads=2),
    "serial-1t": dict(executor="serial", threads=1, vectorise="off"),
    "serial-2t": dict(executor="serial", threads=2, vectorise="off"),
    "vectorised": dict(executor="serial", threads=2, vectorise="on"),
    "ray": dict(executor="ray", threads=1, clients_per_actor=1),
    "ray-pool": dict(executor="ray", threads=1),
    "ray-pool-vec": dict(executor="ray", threads=1, vectorise="on"),
    "ray-pool-turns": dict(executor="ray", threads=1),
    "ray-cold": dict(executor="ray", threads=1),
    "ray-x2": dict(executor="ray", threads=1),
    "default": dict(threads=1),  # the executor `python -m fda_ray` picks on this machine (cli.whole_machine)
    "flower": dict(threads=1),
}


def _config(a: argparse.Namespace, name: str):
    from fda_ray.core.config import RunConfig

    return RunConfig(dataset="fashion-mnist", method="fedgp", rounds=a.rounds, warmup_rounds=0, data_dir=a.data_dir,
                     gpus_per_client=a.gpus_per_client, cpus_per_client=a.cpus_per_client, device=a.device,
                     **FIELDS[name])


def _summary(name: str, rows: list[dict], first_round: float, groups: list[list[int]] | None,
             gpu: list[dict] | None = None) -> dict:
    """`groups`: the clients each actor hosts (None: serial, one "actor", this process, hosts them all)."""
    steady = rows[1:] or rows
    per_round = statistics.median(r["seconds"] for r in steady)
    driver = statistics.median(r["driver_seconds"] for r in steady)
    # The busiest actor's training time per round: an actor trains its clients one after the other.
    busiest = [max(sum(r["client_seconds_i"][i] for i in g) for g in (groups or [range(len(r["client_seconds_i"]))]))
               for r in steady]
    # What the round costs beyond that critical path.
    exposed = statistics.median(r["seconds"] - b for r, b in zip(steady, busiest))
    out = {"setting": name, "rounds": len(rows), "seconds_per_round": per_round, "driver_seconds_per_round": driver,
           "driver_share": driver / per_round, "beyond_busiest_actor_seconds": exposed,
           "busiest_actor_seconds": statistics.median(busiest),
           "first_round_seconds": first_round,
           "final_accuracy": rows[-1]["accuracy"]}
    if gpu:
        out["gpu_mib_per_client_peak"] = max(g["peak_allocated"] for g in gpu) / 2**20
    return out


def run_one(name: str, a: argparse.Namespace) -> list[dict]:
    """One setting in this process; returns its summary rows (two for ray-x2, one per run)."""
    from fda_ray.runtime.engine import run

    marks: list[float] = []
    cfg = _config(a, name)
    if name == "plain":
        from benchmarks.plain import run_plain

        t0 = time.perf_counter()
        rows = run_plain(cfg, lambda row: marks.append(time.perf_counter()))
        rows = [dict(r, driver_seconds=float("nan"), client_seconds_i=[r["seconds"]]) for r in rows]
        return [_summary(name, rows, marks[0] - t0, None)]
    if name == "default":
        from fda_ray.experiments.cli import whole_machine

        cfg = whole_machine(cfg, [])
    if cfg.executor == "serial":
        t0 = time.perf_counter()
        hist = run(cfg, lambda row: marks.append(time.perf_counter()))
        return [_summary(name, hist.rows, marks[0] - t0, None)]

    import ray

    from fda_ray.runtime.driver import Driver, DriverActor, ensure_ray

    if name in ("ray-cold", "default"):
        t0 = time.perf_counter()
        ensure_ray(num_cpus=os.cpu_count())
    else:
        ensure_ray(num_cpus=os.cpu_count())
        ray.get(ray.remote(lambda: None).remote())  # the cluster is up and answering
        t0 = time.perf_counter()
    if name != "ray-x2":
        driver = Driver(cfg.resolved())
        hist = driver.run(lambda row: marks.append(time.perf_counter()))
        return [_summary(name, hist.rows, marks[0] - t0, driver.executor.groups, driver.gpu_memory)]
    # ray-x2: two independent runs (seeds 0 and 1) at once; their clients share the machine (each run pools
    # its clients to the machine's CPUs, at a CPU share that lets both runs' actors be placed).
    from fda_ray.runtime import resources

    n = cfg.resolved().num_sources + 1
    one = resources.plan(cfg.resolved(), resources.from_ray())  # one run's plan on this machine
    k = one.clients_per_actor
    # Both runs' actors must be placed at once: each asks half of what one run would.
    per = cfg.cpus_per_client or max(resources.MIN_CPU_SHARE, one.actor.cpu / 2) / k  # per client
    drivers = [DriverActor.remote(cfg.replace(seed=s, cpus_per_client=per, clients_per_actor=k)) for s in (0, 1)]
    hists = ray.get([d.run.remote() for d in drivers])
    gpus = ray.get([d.gpu_memory.remote() for d in drivers])
    total = time.perf_counter() - t0
    groups = [[i for i in range(n) if i % -(-n // k) == s] for s in range(-(-n // k))]
    return [_summary(f"{name} run {i}", h.rows, float("nan"), groups, g) | {"both_runs_seconds": total}
            for i, (h, g) in enumerate(zip(hists, gpus))]


def _num(v: float, fmt: str) -> str:
    return "-" if v != v else format(v, fmt)


def _table(results: list[dict]) -> str:
    """The markdown table; `x plain` is each setting's s/round over the plain loop's, `x flower` over Flower's
    (when they ran)."""
    ref = {k: next((r["seconds_per_round"] for r in results if r["setting"] == k), float("nan"))
           for k in ("plain", "flower")}
    lines = ["| setting | s/round | x plain | x flower | busiest actor s | driver s/round | driver share "
             "| round beyond busiest actor (s) | first round (s) | GPU MiB/client | final acc |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        gpu = _num(r.get("gpu_mib_per_client_peak", float("nan")), ".0f")
        lines.append(f"| {r['setting']} | {r['seconds_per_round']:.2f} | {_num(r['seconds_per_round'] / ref['plain'], '.2f')} | "
                     f"{_num(r['seconds_per_round'] / ref['flower'], '.2f')} | "
                     f"{_num(r['busiest_actor_seconds'], '.2f')} | {_num(r['driver_seconds_per_round'], '.3f')} | "
                     f"{_num(100 * r['driver_share'], '.1f')} % | {_num(r['beyond_busiest_actor_seconds'], '+.3f')} | "
                     f"{_num(r['first_round_seconds'], '.2f')} | {gpu} | {100 * r['final_accuracy']:.2f} |")
    return "\n".join(lines)


def parser():
    from fda_ray.core.parsing import OneLineParser, typed

    p = OneLineParser(prog="python -m benchmarks.engine", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=typed("rounds", int, "an integer"), default=5)
    p.add_argument("--settings", default="plain,serial-1t,serial-2t,vectorised,ray,ray-pool,ray-pool-vec,ray-cold")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--cpus-per-client", type=typed("cpus_per_client", float, "a number"), default=None)
    p.add_argument("--gpus-per-client", type=typed("gpus_per_client", float, "a number"), default=0.0)
    p.add_argument("--device", default="cpu", help="the driver's device")
    p.add_argument("--flower-python", default=None, help="the interpreter of a virtual environment with "
                                                        "flwr[simulation] (the flower setting)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run one setting in this process
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    if a.one:
        print("BENCH " + json.dumps(run_one(a.one, a)), flush=True)
        return 0
    names = [s for s in a.settings.split(",") if s]
    bad = [s for s in names if s not in SETTINGS]
    if bad or not names:
        print(f"error: settings={a.settings!r} is invalid: comma-separated names from {', '.join(SETTINGS)}", file=sys.stderr)
        return 2
    if "flower" in names and not a.flower_python:
        print("error: flower_python=None is invalid with the flower setting: the interpreter of a virtual "
              "environment with flwr[simulation] (docs/ray-and-clusters.md, \"On a 2-core machine\")", file=sys.stderr)
        return 2
    if a.rounds < 2:
        print(f"error: rounds={a.rounds} is invalid: an integer >= 2 (the first round is timed apart)", file=sys.stderr)
        return 2
    from fda_ray.runtime import preflight
    from fda_ray.core.config import RunConfig
    from fda_ray.data.base import DatasetNotFound
    from fda_ray.data import load

    try:
        RunConfig(data_dir=a.data_dir, gpus_per_client=a.gpus_per_client, cpus_per_client=a.cpus_per_client,
                  device=a.device)
        preflight.device(a.device)
        load("fashion-mnist", a.data_dir)
    except (ValueError, DatasetNotFound) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    results = []
    forwarded = [arg for arg in (argv if argv is not None else sys.argv[1:]) if arg != "--json"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository (benchmarks/ is in it)
    for name in names:
        if name == "flower":  # Flower's own environment; fda_ray from this repository
            env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
            cmd = [a.flower_python, "-m", "benchmarks.flower", "--rounds", str(a.rounds)] + \
                (["--data-dir", a.data_dir] if a.data_dir else [])
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        else:
            proc = subprocess.run([sys.executable, "-m", "benchmarks.engine", *forwarded, "--one", name],
                                  capture_output=True, text=True, env=child_env(**ENV.get(name, {})))
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH ")), None)
        if proc.returncode != 0 or line is None:
            print(f"error: setting {name} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
            failed = True
            break  # the settings already measured are still printed below
        rows = json.loads(line[len("BENCH "):])
        results += rows
        if not a.json:  # each setting's numbers as soon as they exist (a long run cut short keeps them)
            print("; ".join(f"{r['setting']}: done, {r['seconds_per_round']:.3f} s/round, first round "
                            f"{_num(r['first_round_seconds'], '.1f')} s" for r in rows), file=sys.stderr, flush=True)
    else:
        failed = False
    if results:
        print(json.dumps(results, indent=1) if a.json else _table(results))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
