"""The Ray executor: one actor per client, each pinned to a (fractional) GPU or a share of the CPUs.

A client actor receives its `Client` (data shard, model, layout) once, moves it to its own device and keeps
it there for the whole run, with its model, optimizer and state built once. Each round the driver puts the
global weights in the object store once (`submit`), every training client reads them from there, and the
driver gathers the updates as they finish (`collect`, `ray.wait`).

Faults: when a client's round fails (its process was killed, or it raised), the actor is replaced by a new
one built from the same client object and the client's state after its last finished round, and the round
is redone; training draws all randomness from (seed, round, client, purpose), so the redone round gives the
same update. After `retries` failed attempts in one round, `collect` raises ClientFailure naming the client
and the round. `faults` injects failures on purpose, to test exactly this.
"""
from __future__ import annotations

import math
import os
import signal
import warnings
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import ray
import torch

from fda_ray.client import Client, ClientUpdate
from fda_ray.engine import ClientFailure, TrainRequest

FAULTS = ("kill", "raise")  # kill: SIGKILL the actor's process; raise: an exception inside local training
PLACEMENT_TIMEOUT_S = 300.0


class ClientActor:
    """Hosts one client for the whole run (wrapped with `ray.remote` below)."""

    def __init__(self, client: Client, threads: int, use_gpu: bool, state: dict | None) -> None:
        torch.set_num_threads(threads)
        # Ray sets CUDA_VISIBLE_DEVICES to this actor's GPU, so "cuda" is the GPU it was given.
        self.client = client.to("cuda" if use_gpu else "cpu")
        if state is not None:
            self.client.restore(state)

    def ready(self) -> int:
        return os.getpid()

    def train(self, global_flat: np.ndarray, round_idx: int, request: TrainRequest, fault: str | None) -> ClientUpdate:
        if fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if fault == "raise":
            raise RuntimeError(f"injected fault in client {self.client.index}, round {round_idx}")
        with warnings.catch_warnings():  # the object store's array is read-only; it is only read (copied in)
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.from_numpy(global_flat)  # (M,)
        return self.client.train(flat, round_idx, lr=request.lr, batch=request.batch, record_steps=request.record_steps)

    def finetune(self, start_flat: torch.Tensor, epochs: int, lr: float, batch: int,
                 first_round: int) -> list[tuple[int, torch.Tensor, float]]:
        return list(self.client.finetune(start_flat, epochs, lr=lr, batch=batch, first_round=first_round))

    def snapshot(self) -> dict:
        return self.client.snapshot()

    def gpu_memory(self) -> dict[str, int]:
        """Peak and current GPU memory of this actor's process, in bytes (0 on a CPU client)."""
        if self.client.device.type != "cuda":
            return {"peak_allocated": 0, "reserved": 0}
        return {"peak_allocated": int(torch.cuda.max_memory_allocated()), "reserved": int(torch.cuda.memory_reserved())}


RemoteClientActor = ray.remote(ClientActor)


@dataclass
class _Pending:
    round_idx: int
    flat_ref: ray.ObjectRef
    requests: list[TrainRequest]
    calls: dict[ray.ObjectRef, TrainRequest]


def auto_cpus_per_client(num_clients: int) -> float:
    """Share the cluster's CPUs among the clients (at most 1 each), so every actor can be placed."""
    total = float(ray.cluster_resources().get("CPU", 1.0))
    return max(0.01, min(1.0, math.floor(100 * total / num_clients) / 100))


def _short(e: BaseException) -> str:
    cause = getattr(e, "cause", None)  # RayTaskError: the client's own exception
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}".splitlines()[0]
    if isinstance(e, ray.exceptions.RayActorError):
        return f"{type(e).__name__}: the client's actor process died"
    return f"{type(e).__name__}: {e}".splitlines()[0]


class RayExecutor:
    """Clients as Ray actors; the same `submit`/`collect` interface as the serial executor."""

    def __init__(self, clients: Sequence[Client], *, cpus_per_client: float | None = None, gpus_per_client: float = 0.0,
                 retries: int = 3, threads: int | None = None,
                 faults: dict[tuple[int, int], list[str]] | None = None) -> None:
        if not ray.is_initialized():
            raise RuntimeError("RayExecutor needs a running Ray: call fda_ray.driver.ensure_ray() first")
        self.num_clients = len(clients)
        self.cpus = cpus_per_client if cpus_per_client is not None else auto_cpus_per_client(self.num_clients)
        self.gpus = float(gpus_per_client)
        self.threads = threads or max(1, int(self.cpus))
        self.retries = retries
        self.faults = {k: list(v) for k, v in (faults or {}).items()}
        for (client, _), kinds in self.faults.items():
            bad = [k for k in kinds if k not in FAULTS]
            if bad or not 0 <= client < self.num_clients:
                raise ValueError(f"faults={faults!r} is invalid: clients 0..{self.num_clients - 1}, kinds {FAULTS}")
        self.restarts: list[tuple[int, int, str]] = []  # (client, round, why) of every replaced actor
        # The client objects stay in the object store so that a dead actor can be rebuilt from them.
        self._client_refs = [ray.put(c) for c in clients]
        self._states = [c.snapshot() for c in clients]
        self.actors = [self._start(i) for i in range(self.num_clients)]
        self._wait_ready(self.actors)

    def _start(self, i: int) -> Any:
        return RemoteClientActor.options(num_cpus=self.cpus, num_gpus=self.gpus, max_restarts=0).remote(
            self._client_refs[i], self.threads, self.gpus > 0, self._states[i])

    def _wait_ready(self, actors: list[Any]) -> None:
        refs = [a.ready.remote() for a in actors]
        done, pending = ray.wait(refs, num_returns=len(refs), timeout=PLACEMENT_TIMEOUT_S)
        if pending:
            raise RuntimeError(
                f"{len(pending)} of {len(refs)} client actors could not start within {PLACEMENT_TIMEOUT_S:.0f} s "
                f"(each asks num_cpus={self.cpus}, num_gpus={self.gpus}; cluster has {ray.cluster_resources()}): "
                "lower cpus_per_client / gpus_per_client")
        ray.get(done)

    def _replace(self, i: int) -> None:
        try:
            ray.kill(self.actors[i], no_restart=True)
        except Exception:  # already dead
            pass
        self.actors[i] = self._start(i)

    def _call(self, req: TrainRequest, flat_ref: ray.ObjectRef, round_idx: int) -> ray.ObjectRef:
        kinds = self.faults.get((req.client, round_idx))
        fault = kinds.pop(0) if kinds else None
        return self.actors[req.client].train.remote(flat_ref, round_idx, req, fault)

    def submit(self, global_flat: torch.Tensor, round_idx: int, requests: Sequence[TrainRequest]) -> _Pending:
        flat_ref = ray.put(global_flat.detach().cpu().numpy())  # once per round; actors read it zero-copy
        calls = {self._call(req, flat_ref, round_idx): req for req in requests}
        return _Pending(round_idx, flat_ref, list(requests), calls)

    def collect(self, pending: _Pending) -> list[ClientUpdate]:
        results: dict[int, ClientUpdate] = {}
        failures: dict[int, int] = defaultdict(int)
        waiting = dict(pending.calls)
        while waiting:
            done, _ = ray.wait(list(waiting), num_returns=1)
            for ref in done:
                req = waiting.pop(ref)
                try:
                    update = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
                    failures[req.client] += 1
                    why = _short(e)
                    if failures[req.client] > self.retries:
                        raise ClientFailure(req.client, pending.round_idx, failures[req.client], why) from e
                    self.restarts.append((req.client, pending.round_idx, why))
                    self._replace(req.client)
                    waiting[self._call(req, pending.flat_ref, pending.round_idx)] = req
                    continue
                self._states[req.client] = update.state
                results[req.client] = update
        return [results[r.client] for r in pending.requests]

    def finetune(self, client: int, start_flat: torch.Tensor, epochs: int, *, lr: float, batch: int,
                 first_round: int) -> Iterator[tuple[int, torch.Tensor, float]]:
        return iter(ray.get(self.actors[client].finetune.remote(start_flat, epochs, lr, batch, first_round)))

    def client_states(self) -> list[dict]:
        return ray.get([a.snapshot.remote() for a in self.actors])

    def gpu_memory(self) -> list[dict[str, int]]:
        return ray.get([a.gpu_memory.remote() for a in self.actors])

    def shutdown(self) -> None:
        for a in self.actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:
                pass
        self.actors = []
        self._client_refs = []
