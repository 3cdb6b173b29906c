"""The Flower row of the engine benchmark: the plain loop's FedGP work (benchmarks.plain) in Flower's simulation.

    python -m benchmarks.engine --settings default,flower --flower-python /path/to/flower-venv/bin/python

Flower (flwr[simulation] 1.42) pins its own Ray (2.55), which cannot share an environment with fda-ray's, so this
file runs under another interpreter: a virtual environment made with --system-site-packages (it sees this
machine's torch and numpy) and `pip install "flwr[simulation]==1.42.0"` (docs/ray-and-clusters.md, "On a
2-core machine"). It imports fda_ray for the data and the model only (PYTHONPATH: the repository).

What runs is what a Flower user writes: a ClientApp whose NumPyClient trains one epoch with a new Adam through a
DataLoader, exactly as the plain loop's clients do (its shard loaded once per client process and kept), and a
ServerApp whose strategy is Flower's FedAvg with aggregate_fit replaced by the plain loop's FedGP over the
clients' returned weights (layer by layer, cosine projection, beta 0.5, magnitude alignment), evaluating the new
global model on the target's test set (evaluate_fn) each round. Flower's simulation engine runs the clients as
Ray actors, one CPU each. A round's time is from one evaluation's end to the next.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

_CACHE: dict[str, Any] = {}


def _setting(cfg: Any) -> Any:
    """The engine's data setting of `cfg` (the same shards as every other row), once per process."""
    if "setting" not in _CACHE:
        from fda_ray.data import load
        from fda_ray.runtime.partitions import build_setting

        _CACHE["setting"] = build_setting(load(cfg.dataset, cfg.data_dir), cfg)
    return _CACHE["setting"]


def run_flower(cfg: Any, num_cpus: int) -> list[dict[str, Any]]:
    """cfg.rounds rounds of FedGP in Flower's simulation; one row per round (seconds, accuracy)."""
    import numpy as np
    import torch
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import Context, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import run_simulation
    from torch.nn import functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from fda_ray.train.models import build_model

    cfg = cfg.resolved()
    torch.manual_seed(cfg.seed)
    setting = _setting(cfg)
    model = build_model(cfg.model, setting.input_shape, setting.num_outputs)
    names = list(model.state_dict())
    n_src = [len(x) for x, _ in setting.sources]
    alpha = [n / sum(n_src) for n in n_src]
    align = [cfg.lr_target / cfg.lr_source * (len(setting.target_train[0]) / cfg.batch_target) / (n // cfg.batch_source)
             for n in n_src]
    k = len(setting.sources)  # clients 0..k-1 are the sources, client k the target

    def set_weights(m: torch.nn.Module, arrays: list) -> None:
        m.load_state_dict({n: torch.from_numpy(np.asarray(a)) for n, a in zip(names, arrays)})

    class Trainer(NumPyClient):
        def __init__(self, pid: int) -> None:
            s = _setting(cfg)
            if pid < k:
                data, self.lr, self.noise, bs, drop = s.sources[pid], cfg.lr_source, 0.0, cfg.batch_source, True
            else:
                data, self.lr, self.noise, bs, drop = s.target_train, cfg.lr_target, s.noise, cfg.batch_target, False
            self.loader = DataLoader(TensorDataset(*data), batch_size=bs, shuffle=True, drop_last=drop)
            self.pid = pid

        def fit(self, parameters: list, config: dict) -> tuple[list, int, dict]:
            torch.set_num_threads(1)
            local = build_model(cfg.model, setting.input_shape, setting.num_outputs)
            set_weights(local, parameters)
            opt = torch.optim.Adam(local.parameters(), lr=self.lr)
            local.train()
            for xb, yb in self.loader:
                if self.noise:
                    xb = xb + self.noise * torch.randn_like(xb)
                loss = F.cross_entropy(local(xb), yb)
                opt.zero_grad()
                loss.backward()
                opt.step()
            return [v.detach().numpy() for v in local.state_dict().values()], len(self.loader.dataset), \
                {"pid": self.pid}

    def client_fn(context: Context) -> Any:
        return Trainer(int(context.node_config["partition-id"])).to_client()

    marks: list[float] = []
    rows: list[dict[str, Any]] = []
    test_x, test_y = setting.target_test
    current = {"w": [v.detach().numpy().copy() for v in model.state_dict().values()]}

    def evaluate_fn(server_round: int, parameters: Any, config: dict) -> tuple[float, dict]:
        if server_round == 0:  # Flower evaluates the initial model first: not a round
            marks.append(time.perf_counter())
            return 0.0, {}
        set_weights(model, parameters if isinstance(parameters, list) else parameters_to_ndarrays(parameters))
        model.eval()
        with torch.no_grad():
            correct = 0
            for i in range(0, len(test_x), 1024):
                xb = test_x[i:i + 1024] + setting.noise * torch.randn_like(test_x[i:i + 1024])
                correct += int((model(xb).argmax(1) == test_y[i:i + 1024]).sum())
        marks.append(time.perf_counter())
        rows.append({"round": server_round - 1, "seconds": marks[-1] - marks[-2], "accuracy": correct / len(test_x)})
        return 0.0, {"accuracy": rows[-1]["accuracy"]}

    class FedGP(FedAvg):
        def aggregate_fit(self, server_round: int, results: list, failures: list) -> tuple[Any, dict]:
            if failures:
                raise RuntimeError(f"{len(failures)} Flower clients failed in round {server_round}")
            by = {int(res.metrics["pid"]): parameters_to_ndarrays(res.parameters) for _, res in results}
            w = current["w"]
            deltas = {i: [torch.from_numpy(a - b) for a, b in zip(by[i], w)] for i in by}
            new = []
            for j, base in enumerate(w):
                t = deltas[k][j]
                update = torch.zeros_like(t)
                for i in range(k):
                    g = deltas[i][j]
                    cos = F.cosine_similarity(g.flatten(), t.flatten(), dim=0)
                    proj = align[i] * cos * g if cos > 0 else torch.zeros_like(g)
                    update += alpha[i] * (cfg.beta * proj + (1 - cfg.beta) * t)
                new.append(base + update.numpy())
            current["w"] = new
            return ndarrays_to_parameters(new), {}

    def server_fn(context: Context) -> ServerAppComponents:
        strategy = FedGP(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=k + 1, min_available_clients=k + 1,
                         evaluate_fn=evaluate_fn, initial_parameters=ndarrays_to_parameters(current["w"]))
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=cfg.rounds))

    t0 = time.perf_counter()
    run_simulation(server_app=ServerApp(server_fn=server_fn), client_app=ClientApp(client_fn=client_fn),
                   num_supernodes=k + 1, backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                                         "init_args": {"num_cpus": num_cpus,
                                                                       "include_dashboard": False}})
    if len(rows) != cfg.rounds:
        raise RuntimeError(f"Flower ran {len(rows)} of {cfg.rounds} rounds")
    rows[0]["first_round"] = marks[1] - t0
    return rows


def main(argv: list[str] | None = None) -> int:
    import importlib.util
    import os

    from fda_ray.core.config import RunConfig
    from fda_ray.core.parsing import OneLineParser, typed

    # (an unknown flag is refused in one line: it was ignored, and the run went on without what it asked for)
    p = OneLineParser(prog="python -m benchmarks.flower", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=typed("rounds", int, "an integer"), default=5)
    p.add_argument("--data-dir", default=None)
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    if importlib.util.find_spec("flwr") is None:  # before any work: one line, not run_flower's import traceback
        print(f"error: benchmarks.flower needs Flower (flwr), which {sys.executable} does not have: run it under a "
              "virtual environment made with --system-site-packages and `pip install \"flwr[simulation]==1.42.0\"` "
              "(python -m benchmarks.engine --settings flower --flower-python VENV/bin/python; "
              "docs/ray-and-clusters.md)", file=sys.stderr)
        return 2
    cfg = RunConfig(dataset="fashion-mnist", method="fedgp", rounds=a.rounds, warmup_rounds=0, data_dir=a.data_dir,
                    threads=1)
    rows = run_flower(cfg, num_cpus=len(os.sched_getaffinity(0)))
    steady = rows[1:] or rows
    print("BENCH " + json.dumps([{
        "setting": "flower", "rounds": len(rows), "seconds_per_round": statistics.median(r["seconds"] for r in steady),
        "driver_seconds_per_round": float("nan"), "driver_share": float("nan"),
        "beyond_busiest_actor_seconds": float("nan"), "busiest_actor_seconds": float("nan"),
        "first_round_seconds": rows[0]["first_round"], "final_accuracy": rows[-1]["accuracy"]}]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
