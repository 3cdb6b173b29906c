"""Executors: where clients live and run their tasks. The round loop sees only this interface.

    submit(state, tasks) -> pending    start a round's tasks (it may return at once)
    collect(pending) -> results        wait for them; one ClientResult per task, in task order
    client_states() -> [state]         each client's state after its last finished task (checkpoints)
    client_state(i) -> state           one client's (an algorithm evaluating a personal model reads it)
    restore_states(states)             a resumed run sets them
    shutdown()

`SerialExecutor` keeps the clients as plain objects in this process (the reference); the Ray executor
(fda_ray.ray_executor) keeps each on an actor. `build_executor` builds either from a config, in one place
for `fda_ray.run`, the driver actor, the sweep's trials and the Tune trainable.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence

import fda_ray.algorithms  # noqa: F401  (registers every family's recipes where clients run)
from fda_ray.algorithms.base import ClientResult, ClientTask, ServerState
from fda_ray.client import Client, run_task
from fda_ray.config import RunConfig


class Executor(Protocol):
    def submit(self, state: ServerState, tasks: Sequence[ClientTask]) -> Any: ...
    def collect(self, pending: Any) -> list[ClientResult]: ...
    def client_states(self) -> list[dict]: ...
    def client_state(self, client: int) -> dict: ...
    def restore_states(self, states: Sequence[dict]) -> None: ...
    def shutdown(self) -> None: ...


def input_names(state: ServerState, tasks: Sequence[ClientTask]) -> list[str]:
    """The server-state entries a round's tasks read, each once; a missing one is an error naming the task."""
    for t in tasks:
        for name in t.inputs:
            if name not in state:
                raise ValueError(f"client {t.client}'s task {t.recipe!r} needs server state {name!r}; the state "
                                 f"holds {', '.join(state)}")
    return list(dict.fromkeys(n for t in tasks for n in t.inputs))


class SerialExecutor:
    """Clients as plain objects, run one after the other in this process: the reference executor."""

    def __init__(self, clients: Sequence[Client]) -> None:
        self.clients = list(clients)

    def submit(self, state: ServerState, tasks: Sequence[ClientTask]) -> Any:
        input_names(state, tasks)
        return dict(state), list(tasks)  # runs on collect: the same numbers, no overlap

    def collect(self, pending: Any) -> list[ClientResult]:
        state, tasks = pending
        return [run_task(self.clients[t.client], t, {n: state[n] for n in t.inputs}) for t in tasks]

    def client_states(self) -> list[dict]:
        return [c.snapshot() for c in self.clients]

    def client_state(self, client: int) -> dict:
        return self.clients[client].snapshot()

    def restore_states(self, states: Sequence[dict]) -> None:
        for c, st in zip(self.clients, states):
            c.restore(st)

    def shutdown(self) -> None:
        pass


def build_executor(cfg: RunConfig, clients: Sequence[Client] | None = None, *, num_clients: int | None = None,
                   faults: dict[tuple[int, int], list[str]] | None = None) -> Executor:
    """The executor `cfg.executor` names. Ray: Ray must be running (fda_ray.driver.ensure_ray); give the
    clients, or `num_clients` to start the actors now and `load` the clients later.

    The actors' CPUs: cfg.cpus_per_client if set; else, inside a placement group (a Tune trial), the one CPU
    per client that fda_ray.tune.resources reserved; else a share of the cluster's CPUs (at most 1 each),
    so that every actor can be placed."""
    if cfg.executor != "ray":
        if clients is None:
            raise ValueError("the serial executor needs the clients")
        return SerialExecutor(clients)
    from ray.util import get_current_placement_group

    from fda_ray.ray_executor import RayExecutor

    cpus = cfg.cpus_per_client
    if cpus is None and get_current_placement_group() is not None:
        cpus = 1.0
    return RayExecutor(clients, num_clients=num_clients, cpus_per_client=cpus, gpus_per_client=cfg.gpus_per_client,
                       clients_per_actor=cfg.clients_per_actor, retries=cfg.client_retries, threads=cfg.threads,
                       faults=faults)
