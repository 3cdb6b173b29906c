"""The reference row of the engine benchmark: FedGP as a researcher would write it, a plain sequential loop.

No fda-ray engine: per round, each client deep-copies the global model, makes a new Adam and trains one epoch
through a torch DataLoader (shuffled; the sources drop their last partial batch, the target keeps it and
draws its noise per batch); the server applies FedGP layer by layer over the state dicts (FedGP Def. 3.1
with the authors' cosine projection, filter, beta 0.5 and the magnitude alignment of docs/authors-code.md), then
evaluates on the target's test set. This is the structure of the authors' code (jackyzyb/AutoFedGP), with the
data already in memory as tensors (their loaders decode images per sample, which is slower still).

The data are the engine's (fda_ray.runtime.partitions.build_setting on the same config), so both do the same work:
the same shards, batch sizes, learning rates, epochs and test set. The numbers are not the engine's (other
seeds, other sums), but the accuracy lands in the same place.
"""
from __future__ import annotations

import copy
import time
from typing import Callable

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


def run_plain(cfg, on_round: Callable[[dict], None] | None = None) -> list[dict]:
    """FedGP for cfg.rounds rounds (cfg: a RunConfig for fedgp without warm-up); one row per round with its
    seconds and accuracy. Threads: cfg.threads."""
    from fda_ray.data import load
    from fda_ray.train.models import build_model
    from fda_ray.runtime.partitions import build_setting

    cfg = cfg.resolved()
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    setting = build_setting(load(cfg.dataset, cfg.data_dir), cfg)
    model = build_model(cfg.model, setting.input_shape, setting.num_outputs)
    src_loaders = [DataLoader(TensorDataset(x, y), batch_size=cfg.batch_source, shuffle=True, drop_last=True)
                   for x, y in setting.sources]
    tgt_loader = DataLoader(TensorDataset(*setting.target_train), batch_size=cfg.batch_target, shuffle=True)
    test_loader = DataLoader(TensorDataset(*setting.target_test), batch_size=1024)
    n_src = [len(x) for x, _ in setting.sources]
    alpha = [n / sum(n_src) for n in n_src]
    # (lr_T / lr_S) * (target steps / source steps): a source delta's size brought to the target's
    align = [cfg.lr_target / cfg.lr_source * (len(setting.target_train[0]) / cfg.batch_target) / (n // cfg.batch_source)
             for n in n_src]

    def local_delta(loader: DataLoader, lr: float, noise: float) -> dict[str, torch.Tensor]:
        local = copy.deepcopy(model)
        opt = torch.optim.Adam(local.parameters(), lr=lr)
        local.train()
        for xb, yb in loader:
            if noise:
                xb = xb + noise * torch.randn_like(xb)
            loss = F.cross_entropy(local(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        start, end = model.state_dict(), local.state_dict()
        return {k: end[k] - start[k] for k in start}

    rows = []
    for r in range(cfg.rounds):
        t0 = time.perf_counter()
        deltas = [local_delta(dl, cfg.lr_source, 0.0) for dl in src_loaders]
        g_t = local_delta(tgt_loader, cfg.lr_target, setting.noise)
        new = {}
        with torch.no_grad():
            for name, w in model.state_dict().items():
                t = g_t[name]
                update = torch.zeros_like(w)
                for i, g in enumerate(deltas):
                    cos = F.cosine_similarity(g[name].flatten(), t.flatten(), dim=0)
                    proj = align[i] * cos * g[name] if cos > 0 else torch.zeros_like(w)
                    update += alpha[i] * (cfg.beta * proj + (1 - cfg.beta) * t)
                new[name] = w + update
            model.load_state_dict(new)
            model.eval()
            correct = 0
            for xb, yb in test_loader:
                xb = xb + setting.noise * torch.randn_like(xb)
                correct += int((model(xb).argmax(1) == yb).sum())
        rows.append({"round": r, "seconds": time.perf_counter() - t0,
                     "accuracy": correct / len(setting.target_test[0])})
        if on_round:
            on_round(rows[-1])
    return rows


if __name__ == "__main__":  # a library module run as a program (it defined names and exited 0 having done nothing)
    import sys

    print("error: benchmarks.plain is the engine benchmark's plain loop (import benchmarks.plain: run_plain), not a "
          "program; the command is `python -m benchmarks.engine --settings plain`", file=sys.stderr)
    sys.exit(2)
