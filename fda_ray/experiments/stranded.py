"""Trials that no live node can hold after the cluster lost nodes: one line within a bounded wait, not silence.

Ray keeps a placement-group request that no alive node can hold pending forever, without a word (an autoscaler
might add such a node; without one nothing ever comes). Before a launch, `fda_ray.runtime.resources.check` refuses
such a request in one line. During a sweep, a lost node can leave the trials still to run (the lost node's own
trial, retried; those not started yet) asking what the remaining nodes cannot give: every trial of a launch asks the
same bundles, so if one of them is stranded, all pending ones are.

`StrandedWatch` sees this from the Tune controller's loop (a Tune Callback feeds it the trials' statuses, a Tune
Stopper reads its verdict): once the launch's bundles have been unplaceable on the live nodes, and on the node
types an autoscaler can add, for `wait_s` seconds (a restarted node may come back meanwhile), it prints one line,
lets the running trials finish, then ends the launch. The sweep reports the trials not run as failed, keeps every
record, and names the resume command. A cluster whose node types are unknown here (KubeRay) is never judged: its
autoscaler may add a node that holds the trial.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Mapping, Sequence

from fda_ray.runtime import resources

from fda_ray.runtime.resources import DEFAULT_WAIT_S, STRANDED, WAIT_ENV, wait_seconds  # noqa: F401

CHECK_EVERY_S = 1.0  # how often the live nodes are read while trials wait (ray.nodes() asks the GCS)


class StrandedWatch:
    """Decides, from the trials' statuses and the live nodes, whether a launch's pending trials are stranded.

    bundles: one trial's placement group (every trial of the launch asks the same);
    cluster: the live nodes and node types now (default: the running Ray's, fda_ray.runtime.resources.from_ray);
    holders: what is free and what holds the rest, in words (default: the running Ray's, resources.holders)."""

    def __init__(self, bundles: Sequence[Mapping[str, float]], wait_s: float | None = None,
                 cluster: Callable[[], resources.Cluster] = resources.from_ray,
                 clock: Callable[[], float] = time.monotonic, every_s: float = CHECK_EVERY_S,
                 holders: Callable[[], str] | None = None, others: Callable[[], bool] | None = None) -> None:
        self.bundles = [dict(b) for b in bundles]
        self.wait_s = wait_seconds() if wait_s is None else wait_s
        self.cluster, self.clock, self.every_s = cluster, clock, every_s
        self.since: float | None = None  # when the bundles were first seen unplaceable (None: they fit)
        self.checked = float("-inf")
        self.running = False
        self.reason: str | None = None  # set once, for good: the one line the trials fail with
        self.fatal: str | None = None  # a trial's error no retry mends (a worker without the plug-ins): ends the launch
        self.queued: float | None = None  # since when trials wait with none of the launch's running (placeable)
        self.waited: str | None = None  # set once: what the trials ask, what is free, what holds it
        self.holders = holders or (lambda: f"{resources.free_line()}; held by {resources.holders()}")
        # whether another job holds resources: a wait owed only to this command's own trials (a fused group's
        # slow start, Tune's trial processes starting) is the planned queue, not worth a note
        self.others = others or resources.others_hold

    def step(self, statuses: Sequence[str]) -> str | None:
        """One look from the controller's loop. Returns the reason the first time the trials are found stranded."""
        self.running = "RUNNING" in statuses
        if self.reason is not None:
            return None
        if "PENDING" not in statuses:
            self.since = self.queued = None
            return None
        now = self.clock()
        if now - self.checked < self.every_s:
            return None
        self.checked = now
        c = self.cluster()
        if not c.known or resources.placeable(self.bundles, c):
            self.since = None
            self._queued(now)
            return None
        if self.since is None:
            self.since = now
            return None
        if now - self.since < self.wait_s:
            return None
        asks = " + ".join(resources.fmt(b) for b in self.bundles)
        alive = resources.fmt(c.largest()) if c.nodes else "none"
        self.reason = (f"{STRANDED} a trial (it asks {asks}; largest live node {alive}), "
                       f"{now - self.since:.0f} s after the cluster lost the nodes that could")
        return self.reason

    def _queued(self, now: float) -> None:
        """Trials that fit the cluster yet wait, none of this launch's running (another job holds what they ask,
        a cluster `ray start` left that others use): once they have waited `wait_s`, one note (`waited`)."""
        if self.running:
            self.queued = None
            return
        if self.queued is None:
            self.queued = now
        if self.waited is None and now - self.queued >= self.wait_s:
            if not self.others():
                self.queued = now  # (looked at again after another wait: Ray's tables are not read every step)
                return
            asks = " + ".join(resources.fmt(b) for b in self.bundles)
            self.waited = f"have waited {now - self.queued:.0f} s for resources: each asks {asks}; free now {self.holders()}"

    def adopt(self, reason: str) -> bool:
        """A running trial found it for itself (its client actors lost with their node, and no live node holds them
        again: fda_ray.runtime.ray_executor): the launch's verdict at once, without a second wait. Returns whether
        this was the first verdict."""
        if self.reason is not None:
            return False
        self.reason = reason
        return True

    def stop_all(self) -> bool:
        """End the launch: the trials are stranded (or a trial failed in a way no retry mends) and none is running
        any more."""
        return (self.reason is not None or self.fatal is not None) and not self.running


def stranded_in(error: str | None) -> str | None:
    """The reason in a trial's error line when the trial stopped because no live node holds it any more (the part
    from fda_ray.runtime.resources.STRANDED, without the run's own "N finished rounds kept"), else None."""
    if not error or STRANDED not in error:
        return None
    reason, depth = error[error.index(STRANDED):], 0
    for i, ch in enumerate(reason):  # up to the first "; " outside the parentheses ("it asks ...; largest ...")
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and reason.startswith("; ", i):
            return reason[:i]
    return reason


def tune_parts(watch: StrandedWatch, on_stranded: Callable[[str, list], None],
               on_waiting: Callable[[str, list], None] | None = None) -> tuple[object, object]:
    """The watch as a Tune Callback (fed the statuses each controller step; `on_stranded(reason, pending trials)`
    called once) and a Tune Stopper (ends the launch)."""
    from ray import tune

    class Watch(tune.Callback):
        def on_step_begin(self, iteration: int, trials: list, **info: object) -> None:
            statuses = [t.status for t in trials]
            waited = watch.waited
            reason = watch.step(statuses)
            if reason is not None:
                on_stranded(reason, [t for t in trials if t.status == "PENDING"])
            elif watch.waited is not None and waited is None and on_waiting is not None:
                on_waiting(watch.waited, [t for t in trials if t.status == "PENDING"])

    class Stop(tune.Stopper):
        def __call__(self, trial_id: str, result: dict) -> bool:
            return False

        def stop_all(self) -> bool:
            return watch.stop_all()

    return Watch(), Stop()
