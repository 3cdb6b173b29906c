"""The Ray executor: one actor per client, each pinned to a (fractional) GPU or a share of the CPUs.

A client actor receives its `Client` (data shard, model, layout) once, moves it to its own device and keeps
it there for the whole run, with its model, optimizer and state built once. With `clients_per_actor` = k > 1
an actor hosts k clients (client i lives on actor i mod n_actors, for the whole run) and trains them one after
the other: on a machine with fewer cores than clients this saves the start-up of a process per client (each
imports torch, ~3 CPU-s) and the contention of many 1-thread processes on few cores. Each round the driver puts the
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
from fda_ray.preflight import actor_gpus

FAULTS = ("kill", "raise")  # kill: SIGKILL the actor's process; raise: an exception inside local training
PLACEMENT_TIMEOUT_S = 300.0


class ClientActor:
    """Hosts one client (or a fixed group of clients) for the whole run (wrapped with `ray.remote` below)."""

    def __init__(self, threads: int) -> None:
        # The process starts (and imports torch) while the driver still loads the data; `load` follows.
        torch.set_num_threads(threads)
        self.clients: dict[int, Client] = {}

    def load(self, client_refs: Sequence[ray.ObjectRef], use_gpu: bool, states: Sequence[dict | None]) -> None:
        clients: list[Client] = ray.get(list(client_refs))  # refs inside a list are not resolved by Ray
        # Ray sets CUDA_VISIBLE_DEVICES to this actor's GPU, so "cuda" is the GPU it was given.
        device = "cuda" if use_gpu else "cpu"
        for client, state in zip(clients, states):
            client = client.to(device)
            if state is not None:
                client.restore(state)
            self.clients[client.index] = client

    def train(self, client: int, global_flat: np.ndarray, round_idx: int, request: TrainRequest,
              fault: str | None) -> ClientUpdate:
        if fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if fault == "raise":
            raise RuntimeError(f"injected fault in client {client}, round {round_idx}")
        with warnings.catch_warnings():  # the object store's array is read-only; it is only read (copied in)
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.from_numpy(global_flat)  # (M,)
        return self.clients[client].train(flat, round_idx, lr=request.lr, batch=request.batch,
                                          record_steps=request.record_steps)

    def finetune(self, client: int, start_flat: torch.Tensor, epochs: int, lr: float, batch: int,
                 first_round: int, fresh_optimizer_each_epoch: bool) -> list[tuple[int, torch.Tensor, float]]:
        return list(self.clients[client].finetune(start_flat, epochs, lr=lr, batch=batch, first_round=first_round,
                                                  fresh_optimizer_each_epoch=fresh_optimizer_each_epoch))

    def restore(self, client: int, state: dict) -> None:
        self.clients[client].restore(state)

    def snapshot(self) -> dict[int, dict]:
        return {i: c.snapshot() for i, c in self.clients.items()}

    def gpu_memory(self) -> dict[str, int]:
        """Peak and current GPU memory of this actor's process, in bytes (0 on a CPU actor)."""
        if not torch.cuda.is_available() or next(iter(self.clients.values())).device.type != "cuda":
            return {"peak_allocated": 0, "reserved": 0}
        return {"peak_allocated": int(torch.cuda.max_memory_allocated()), "reserved": int(torch.cuda.memory_reserved())}


RemoteClientActor = ray.remote(ClientActor)


@dataclass
class _Pending:
    round_idx: int
    flat_ref: ray.ObjectRef
    requests: list[TrainRequest]
    calls: dict[ray.ObjectRef, tuple[TrainRequest, Any]]  # call -> (its request, the actor it went to)


def auto_cpus_per_client(num_actors: int) -> float:
    """Share the cluster's CPUs among the client actors (at most 1 each), so every actor can be placed."""
    total = float(ray.cluster_resources().get("CPU", 1.0))
    return max(0.01, min(1.0, math.floor(100 * total / num_actors) / 100))


def _short(e: BaseException) -> str:
    cause = getattr(e, "cause", None)  # RayTaskError: the client's own exception
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}".splitlines()[0]
    if isinstance(e, ray.exceptions.RayActorError):
        return f"{type(e).__name__}: the client's actor process died"
    return f"{type(e).__name__}: {e}".splitlines()[0]


class RayExecutor:
    """Clients as Ray actors; the same `submit`/`collect` interface as the serial executor."""

    def __init__(self, clients: Sequence[Client] | None = None, *, num_clients: int | None = None,
                 cpus_per_client: float | None = None, gpus_per_client: float = 0.0, clients_per_actor: int = 1,
                 retries: int = 3, threads: int | None = None,
                 faults: dict[tuple[int, int], list[str]] | None = None) -> None:
        """Start the actors; with `clients` also load them, else give `num_clients` and call `load` later
        (the actors' processes then start while the caller builds the clients)."""
        if not ray.is_initialized():
            raise RuntimeError("RayExecutor needs a running Ray: call fda_ray.driver.ensure_ray() first")
        if not isinstance(clients_per_actor, int) or clients_per_actor < 1:
            raise ValueError(f"clients_per_actor={clients_per_actor!r} is invalid: an integer >= 1")
        self.num_clients = len(clients) if clients is not None else int(num_clients or 0)
        if self.num_clients < 1:
            raise ValueError("RayExecutor needs clients or num_clients >= 1")
        self.num_actors = math.ceil(self.num_clients / clients_per_actor)
        # Client i lives on actor i mod num_actors: round-robin keeps the groups' sizes within one client.
        self.slot_of = [i % self.num_actors for i in range(self.num_clients)]
        self.groups = [[i for i in range(self.num_clients) if self.slot_of[i] == k] for k in range(self.num_actors)]
        # Resources are per actor: one that hosts k clients asks what k one-client actors would ask together
        # (capped at a whole GPU), unless cpus_per_client is left to share the cluster.
        k = clients_per_actor
        self.cpus = (cpus_per_client * k if cpus_per_client is not None else auto_cpus_per_client(self.num_actors))
        self.gpus = actor_gpus(gpus_per_client, k)
        # The run's thread count (RunConfig.threads), whatever the CPU share: it is part of the numbers.
        self.threads = threads or 1
        self.retries = retries
        self.faults = {key: list(v) for key, v in (faults or {}).items()}
        for (client, _), kinds in self.faults.items():
            bad = [kind for kind in kinds if kind not in FAULTS]
            if bad or not 0 <= client < self.num_clients:
                raise ValueError(f"faults={faults!r} is invalid: clients 0..{self.num_clients - 1}, kinds {FAULTS}")
        self.restarts: list[tuple[int, int, str]] = []  # (client, round, why) of every replaced actor
        self._client_refs: list[ray.ObjectRef] = []
        self._states: list[dict | None] = []
        self.actors = [self._spawn() for _ in range(self.num_actors)]
        if clients is not None:
            self.load(clients)

    def load(self, clients: Sequence[Client]) -> None:
        """Ship each client (shard, model, layout) to its actor, once per run, and wait until all are ready."""
        if len(clients) != self.num_clients:
            raise ValueError(f"got {len(clients)} clients for {self.num_clients} client slots")
        # The client objects stay in the object store so that a dead actor can be rebuilt from them.
        self._client_refs = [ray.put(c) for c in clients]
        self._states = [c.snapshot() for c in clients]
        self._wait_ready([self._load(slot, actor) for slot, actor in enumerate(self.actors)])

    def _spawn(self) -> Any:
        return RemoteClientActor.options(num_cpus=self.cpus, num_gpus=self.gpus, max_restarts=0).remote(self.threads)

    def _load(self, slot: int, actor: Any) -> ray.ObjectRef:
        group = self.groups[slot]
        return actor.load.remote([self._client_refs[i] for i in group], self.gpus > 0, [self._states[i] for i in group])

    def _start(self, slot: int) -> Any:
        actor = self._spawn()
        self._load(slot, actor)  # actor calls run in order: it is loaded before any train call
        return actor

    def _wait_ready(self, refs: list[ray.ObjectRef]) -> None:
        done, pending = ray.wait(refs, num_returns=len(refs), timeout=PLACEMENT_TIMEOUT_S)
        if pending:
            raise RuntimeError(
                f"{len(pending)} of {len(refs)} client actors could not start within {PLACEMENT_TIMEOUT_S:.0f} s "
                f"(each asks num_cpus={self.cpus}, num_gpus={self.gpus}; cluster has {ray.cluster_resources()}): "
                "lower cpus_per_client / gpus_per_client")
        ray.get(done)

    def _replace(self, slot: int, dead: Any) -> bool:
        """Replace the actor of `slot` unless that was done already (the calls it still had failed with it)."""
        if self.actors[slot] is not dead:
            return False
        try:
            ray.kill(dead, no_restart=True)
        except Exception:  # already dead
            pass
        self.actors[slot] = self._start(slot)
        return True

    def _call(self, req: TrainRequest, flat_ref: ray.ObjectRef, round_idx: int) -> tuple[ray.ObjectRef, tuple]:
        kinds = self.faults.get((req.client, round_idx))
        fault = kinds.pop(0) if kinds else None
        actor = self.actors[self.slot_of[req.client]]
        return actor.train.remote(req.client, flat_ref, round_idx, req, fault), (req, actor)

    def submit(self, global_flat: torch.Tensor, round_idx: int, requests: Sequence[TrainRequest]) -> _Pending:
        flat_ref = ray.put(global_flat.detach().cpu().numpy())  # once per round; actors read it zero-copy
        calls = dict(self._call(req, flat_ref, round_idx) for req in requests)
        return _Pending(round_idx, flat_ref, list(requests), calls)

    def collect(self, pending: _Pending) -> list[ClientUpdate]:
        results: dict[int, ClientUpdate] = {}
        failures: dict[int, int] = defaultdict(int)
        waiting = dict(pending.calls)
        while waiting:
            done, _ = ray.wait(list(waiting), num_returns=1)
            for ref in done:
                req, actor = waiting.pop(ref)
                try:
                    update = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
                    failures[req.client] += 1
                    why = _short(e)
                    if failures[req.client] > self.retries:
                        raise ClientFailure(req.client, pending.round_idx, failures[req.client], why) from e
                    # An actor that raised is replaced too: its client may be half-way through a round.
                    # The other clients of a replaced actor start again from their last finished round
                    # (their lost calls count as failures of theirs: the driver cannot tell who killed it).
                    if self._replace(self.slot_of[req.client], actor):
                        self.restarts.append((req.client, pending.round_idx, why))
                    ref2, entry = self._call(req, pending.flat_ref, pending.round_idx)
                    waiting[ref2] = entry
                    continue
                self._states[req.client] = update.state
                results[req.client] = update
                slot = self.slot_of[req.client]
                if actor is not self.actors[slot]:  # finished on an actor replaced since: tell its successor
                    self.actors[slot].restore.remote(req.client, update.state)
        return [results[r.client] for r in pending.requests]

    def finetune(self, client: int, start_flat: torch.Tensor, epochs: int, *, lr: float, batch: int,
                 first_round: int, fresh_optimizer_each_epoch: bool) -> Iterator[tuple[int, torch.Tensor, float]]:
        actor = self.actors[self.slot_of[client]]
        return iter(ray.get(actor.finetune.remote(client, start_flat, epochs, lr, batch, first_round,
                                                  fresh_optimizer_each_epoch)))

    def client_states(self) -> list[dict]:
        merged: dict[int, dict] = {}
        for part in ray.get([a.snapshot.remote() for a in self.actors]):
            merged.update(part)
        return [merged[i] for i in range(self.num_clients)]

    def restore_states(self, states: Sequence[dict]) -> None:
        """Set every client's state (a resumed run): in the actors, and for rebuilding a dead one."""
        self._states = [dict(st) for st in states]
        ray.get([self.actors[self.slot_of[i]].restore.remote(i, st) for i, st in enumerate(self._states)])

    def gpu_memory(self) -> list[dict[str, int]]:
        """Per actor (one entry per client when each actor hosts one)."""
        return ray.get([a.gpu_memory.remote() for a in self.actors])

    def shutdown(self) -> None:
        for a in self.actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:
                pass
        self.actors = []
        self._client_refs = []
