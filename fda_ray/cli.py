"""Command line of one run: `python -m fda_ray.run --dataset fashion-mnist --method fedgp --noise 0.4`.

Bad input prints one line naming the field, the value and what is allowed, and exits with code 2.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from fda_ray.config import RunConfig
from fda_ray.data import DatasetNotFound
from fda_ray.methods import METHODS


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fda_ray.run", description="One federated domain adaptation run.")
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--method", default="fedgp", help=f"one of: {', '.join(METHODS.names())}")
    p.add_argument("--noise", type=float, default=0.0, help="std of Gaussian noise on target train and test")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--warmup-rounds", type=int, default=2)
    p.add_argument("--beta", type=float, default=0.5)
    p.add_argument("--eta", type=float, default=0.5, help="label-shift share (with --partition label_shift)")
    p.add_argument("--partition", default=None)
    p.add_argument("--projection", default="cosine", help="cosine (authors' code) or exact (paper's definition)")
    p.add_argument("--no-filter", action="store_true", help="FedGP: keep layers with cosine <= 0")
    p.add_argument("--auto-beta-rule", default=None, help="fedgp_auto: fedgp_thresh (default) or fedgp")
    p.add_argument("--num-sources", type=int, default=None, help="default 9 (8 for synthetic)")
    p.add_argument("--target-labelled", type=int, default=None)
    p.add_argument("--target-fraction", type=float, default=None)
    p.add_argument("--samples-per-client", type=int, default=None)
    p.add_argument("--test-samples", type=int, default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--model-weights", default=None, help="resnet18: local pretrained state-dict file")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--download", action="store_true", help="download the dataset with torchvision (needs internet)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--aggregation-impl", default="kernel",
                   help="kernel (C++/CUDA, default) or reference (the PyTorch specification)")
    p.add_argument("--executor", default="serial", help="serial (this process) or ray (one actor per client)")
    p.add_argument("--cpus-per-client", type=float, default=None, help="ray: CPUs per client actor (default: share)")
    p.add_argument("--gpus-per-client", type=float, default=0.0, help="ray: GPU fraction per client actor")
    p.add_argument("--clients-per-actor", type=int, default=1,
                   help="ray: clients one actor hosts and trains in turn (default 1; more when cores < clients)")
    p.add_argument("--ray-address", default=None, help="ray: an existing cluster (default: $RAY_ADDRESS or local)")
    p.add_argument("--client-retries", type=int, default=3, help="ray: redo a failed client round this often")
    p.add_argument("--parquet", default=None, help="write the per-round history to this Parquet file")
    p.add_argument("--json", action="store_true", help="print one JSON object (config and per-round metrics)")
    return p


def config_from_args(a: argparse.Namespace) -> RunConfig:
    return RunConfig(dataset=a.dataset, method=a.method, noise=a.noise, seed=a.seed, rounds=a.rounds,
                     warmup_rounds=a.warmup_rounds, beta=a.beta, eta=a.eta, partition=a.partition,
                     projection=a.projection, filter=not a.no_filter, auto_beta_rule=a.auto_beta_rule,
                     num_sources=a.num_sources, target_labelled=a.target_labelled, target_fraction=a.target_fraction,
                     samples_per_client=a.samples_per_client, test_samples=a.test_samples, model=a.model,
                     model_weights=a.model_weights,
                     data_dir=a.data_dir, download=a.download, threads=a.threads, device=a.device,
                     aggregation_impl=a.aggregation_impl,
                     executor=a.executor, cpus_per_client=a.cpus_per_client, gpus_per_client=a.gpus_per_client,
                     clients_per_actor=a.clients_per_actor, ray_address=a.ray_address, client_retries=a.client_retries)


def main(argv: list[str] | None = None) -> int:
    from fda_ray.engine import RunFailed, run

    a = parser().parse_args(argv)
    try:
        cfg = config_from_args(a)
        cfg.resolved()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    total = cfg.warmup_rounds + cfg.rounds

    def progress(row: dict) -> None:
        if a.json:
            return
        beta = row.get("beta_i")
        extra = f" beta {sum(beta) / len(beta):.3f}" if beta else ""
        print(f"round {row['round'] + 1:3d}/{total} [{row['phase']}] acc {100 * row['accuracy']:6.2f} "
              f"loss {row['loss']:.4f}{extra} ({row['seconds']:.2f} s)", flush=True)

    t0 = time.perf_counter()
    try:
        hist = run(cfg, progress)
    except DatasetNotFound as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RunFailed as e:
        # Keep what was computed: the finished rounds go where the full history would have gone.
        kept = ""
        if a.parquet and e.history.rows:
            e.history.to_parquet(a.parquet)
            kept = f"; the {len(e.history.rows)} finished rounds are in {a.parquet}"
        print(f"error: {e}{kept}", file=sys.stderr)
        return 1
    if a.parquet:
        hist.to_parquet(a.parquet)
    if a.json:
        print(json.dumps(hist.to_json()))
    else:
        print(f"final target accuracy {100 * hist.final_accuracy:.2f} % ({cfg.method}, noise {cfg.noise}, "
              f"seed {cfg.seed}) in {time.perf_counter() - t0:.1f} s")
    return 0
