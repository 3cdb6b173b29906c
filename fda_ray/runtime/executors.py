"""Executors: where clients live and run their tasks. The round loop sees only this interface.

    submit(state, tasks) -> pending    start a round's tasks (it may return at once)
    collect(pending) -> results        wait for them; one ClientResult per task, in task order
    client_states() -> [state]         each client's state after its last finished task (checkpoints)
    client_state(i) -> state           one client's (an algorithm evaluating a personal model reads it)
    restore_states(states)             a resumed run sets them
    shutdown(keep=False)               keep: a sweep's trial that finished leaves its actors to the next one

`SerialExecutor` keeps the clients as plain objects in this process (the reference); the Ray executor
(fda_ray.runtime.ray_executor) keeps them on actors. Both run the tasks hosted in one place with
fda_ray.train.cohort.run_tasks: with cfg.vectorise "on", clients running the same recipe train as one cohort.
`build_executor` builds either from a config, in one place for `fda_ray.run`, the driver actor, the sweep's
trials and the Tune trainable; the Ray actors' number, sizes and requests are fda_ray.runtime.resources' plan.
"""
from __future__ import annotations

import sys
from typing import Any, Protocol, Sequence

import fda_ray.algorithms  # noqa: F401  (registers every family's recipes where clients run)
from fda_ray.core.contract import ClientResult, ClientTask, ServerState, input_names
from fda_ray.train.client import Client
from fda_ray.train.cohort import run_tasks
from fda_ray.core.config import RunConfig


class Executor(Protocol):
    def submit(self, state: ServerState, tasks: Sequence[ClientTask]) -> Any: ...
    def collect(self, pending: Any) -> list[ClientResult]: ...
    def client_states(self) -> list[dict]: ...
    def client_state(self, client: int) -> dict: ...
    def restore_states(self, states: Sequence[dict]) -> None: ...
    def shutdown(self, keep: bool = False) -> None: ...


class SerialExecutor:
    """Clients as plain objects, run one after the other in this process: the reference executor."""

    def __init__(self, clients: Sequence[Client], vectorise: bool = False) -> None:
        self.clients = list(clients)
        self.by_index = {c.index: c for c in self.clients}
        self.vectorise = vectorise

    def submit(self, state: ServerState, tasks: Sequence[ClientTask]) -> Any:
        input_names(state, tasks)
        return dict(state), list(tasks)  # runs on collect: the same numbers, no overlap

    def collect(self, pending: Any) -> list[ClientResult]:
        state, tasks = pending
        return run_tasks(self.by_index, tasks, lambda t: {n: state[n] for n in t.inputs}, self.vectorise)

    def client_states(self) -> list[dict]:
        return [c.snapshot() for c in self.clients]

    def client_state(self, client: int) -> dict:
        return self.clients[client].snapshot()

    def restore_states(self, states: Sequence[dict]) -> None:
        for c, st in zip(self.clients, states):
            c.restore(st)

    def shutdown(self, keep: bool = False) -> None:
        pass


_SAID: set[str] = set()


def say_once(line: str) -> None:
    """Print an execution choice to stderr, once per process (a sweep's trials do not repeat it)."""
    if line not in _SAID:
        _SAID.add(line)
        print(f"fda-ray: {line}", file=sys.stderr, flush=True)


def build_executor(cfg: RunConfig, clients: Sequence[Client] | None = None, *, num_clients: int | None = None,
                   faults: dict[tuple[int, int], list[str]] | None = None, kind: str | None = None) -> Executor:
    """The executor `kind` names (default `cfg.executor`; `cfg` resolved). Ray: Ray must be running
    (fda_ray.runtime.driver.ensure_ray); give the clients, or `num_clients` to start the actors now and `load` the
    clients later.

    The actors follow the plan of fda_ray.runtime.resources: inside a Tune trial's placement group, the plan the
    group was reserved for (one actor per client bundle, each in its own bundle); else the plan of `cfg` on the
    running cluster."""
    cfg.require_resolved("build_executor")
    vectorise = cfg.vectorise == "on"
    if (kind or cfg.executor) != "ray":
        if clients is None:
            raise ValueError("the serial executor needs the clients")
        return SerialExecutor(clients, vectorise)
    from ray.util import get_current_placement_group

    from fda_ray.runtime import resources
    from fda_ray.runtime.ray_executor import RayExecutor

    n = len(clients) if clients is not None else num_clients
    pg = get_current_placement_group()
    plan = (resources.plan_in_group(cfg, pg.bundle_specs, clients=n) if pg is not None
            else resources.plan(cfg, resources.from_ray(), clients=n))
    ex = RayExecutor(clients, plan=plan, retries=cfg.client_retries, threads=cfg.threads, faults=faults,
                     vectorise=vectorise, placement_group=pg)
    where = f"{ex.gpus:g} GPU" if ex.gpus > 0 else f"{ex.cpus:g} CPU"
    say_once(f"executor ray: {plan.num_clients} clients on {ex.num_actors} actor(s) ({plan.clients_per_actor} each "
             f"at most), {where} and {cfg.threads} thread(s) per actor, "
             f"{'vectorised cohorts' if vectorise else 'clients in turn'} ({plan.pooling})")
    return ex
