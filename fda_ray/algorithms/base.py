"""The algorithm contract (docs/design.md): what every method family implements, and what the round loop runs.

An algorithm owns both halves of its work, as in pfl-research (`simulate_one_user` /
`process_aggregated_statistics`) and Flower (`configure_fit` / `aggregate_fit`):

    state = algo.init_state(w0)                       server state: named flat tensors, {"global": (M,)}, ...
    plan = algo.plan_round(r, state)                  a Round: its phase and one ClientTask per client that works
    results = executor runs plan.tasks                each task runs a registered local recipe where its client lives
    state, metrics = algo.aggregate(r, state, results)    pure: the new state and the round's logged numbers
    ... algo.plan_step(r, 1, state) / aggregate_step: later steps of a round that need that state (rarely)
    row = algo.evaluate(r, state, evaluator)          the global target model, or a client's personal model
    ... until plan_round returns None.

A client keeps its own state across rounds (a personal model, a head, counters): the recipes read and write
`client.state`, the executor snapshots it after every task (so a replaced actor or a resumed run goes on
from it), and `evaluate` reads a client's snapshot through the evaluator when the evaluated model lives there.
Every random draw of a task is seeded by (trial seed, task.round, task.client, task.purpose).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

import torch

from fda_ray.core.contract import ClientResult, ClientTask, Round, ServerState
from fda_ray.core.registry import did_you_mean

if TYPE_CHECKING:
    from fda_ray.core.config import RunConfig
    from fda_ray.train.evaluation import Evaluator
    from fda_ray.core.layout import ParamLayout
    from fda_ray.data.base import Pair
    from fda_ray.data.setting import Setting



def param(default: Any, help: str, *, low: float | None = None, high: float | None = None,
          choices: tuple[str, ...] | None = None, integer: bool = False, boolean: bool = False,
          positive: bool = False, optional: bool = False) -> Any:
    """A Params field with its documentation and its allowed values (the CLI flags are generated from these).
    low/high: inclusive bounds of a number; positive: a number > 0; integer: a whole number; boolean: true or
    false; choices: the allowed strings; optional: None is allowed too (the dataset's or method's setting, filled
    when the config is resolved)."""
    meta = {"help": help, "low": low, "high": high, "choices": choices, "integer": integer, "boolean": boolean,
            "positive": positive, "optional": optional}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Params:
    """A family's hyper-parameters: a frozen dataclass of `param` fields, validated on construction with one
    line naming the field (as family.field; `keywords` families: the field alone), the value and what is allowed."""

    family: ClassVar[str] = ""
    # True: the fields are also RunConfig keywords and command-line flags under their own names (RunConfig(beta=0.3),
    # --beta 0.3), as the seed papers and every recorded grid name them, stored in RunConfig.params[family].
    keywords: ClassVar[bool] = False

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v, m = getattr(self, f.name), f.metadata
            name = f.name if self.keywords else f"{self.family}.{f.name}"
            if v is None and m.get("optional"):
                continue
            unset = " (or unset: the dataset's or method's setting)" if m.get("optional") else ""
            if m.get("choices"):
                if v not in m["choices"]:
                    raise ValueError(f"{name}={v!r} is invalid: one of {', '.join(m['choices'])}{unset}"
                                     f"{did_you_mean(v, m['choices'])}")
                continue
            if m.get("boolean"):
                if not isinstance(v, bool):
                    raise ValueError(f"{name}={v!r} is invalid: true or false{unset}")
                continue
            if m.get("integer"):
                if isinstance(v, float) and v.is_integer():  # a grid's or a search's value (5.0)
                    object.__setattr__(self, f.name, int(v))
                    v = int(v)
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ValueError(f"{name}={v!r} is invalid: an integer{_bounds(m)}{unset}")
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{name}={v!r} is invalid: a finite number{_bounds(m)}{unset}")
            lo, hi = m.get("low"), m.get("high")
            if (lo is not None and v < lo) or (hi is not None and v > hi) or (m.get("positive") and v <= 0):
                raise ValueError(f"{name}={v!r} is invalid: {'an integer' if m.get('integer') else 'a number'}"
                                 f"{_bounds(m)}{unset}")

    @classmethod
    def check_names(cls, values: Mapping[str, Any]) -> None:
        """An unknown field is a one-line error listing the known ones (the values are not looked at: a Tune
        search space holds search objects there)."""
        known = [f.name for f in dataclasses.fields(cls)]
        for k in values:
            if k not in known:
                raise ValueError(f"{cls.family}.{k} is invalid: {cls.family}'s parameters are "
                                 f"{', '.join(known) or '(none)'}")

    @classmethod
    def build(cls, values: Mapping[str, Any]) -> "Params":
        """Params from a mapping, validated."""
        cls.check_names(values)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _bounds(meta: Mapping[str, Any]) -> str:
    """A number field's allowed range, as the error line says it."""
    lo, hi = meta.get("low"), meta.get("high")
    if meta.get("positive"):
        return " > 0"
    if lo is not None and hi is not None:
        return f" in [{lo}, {hi}]"
    return f" >= {lo}" if lo is not None else (f" <= {hi}" if hi is not None else "")


class NoParams(Params):
    """A family without hyper-parameters of its own."""


class Algorithm:
    """A method family's base class. Subclasses set `name` and implement the four halves below; the class
    attributes describe the family to the config, the data setting and the pre-flight checks."""

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""
    Params: ClassVar[type[Params]] = NoParams  # the family's hyper-parameters (RunConfig.params[family])
    # The authors' oracle protocol: the data setting splits the target's whole part into train and test.
    oracle_split: ClassVar[bool] = False
    # True: every local task is the vectorisable "epoch" recipe (a fresh optimizer per task) or runs alone without
    # torch's global generator, so the family's trials may be fused into groups (fda_ray.runtime.fusion); checked
    # over every registered family in tests/test_fusion.py.
    fuses: ClassVar[bool] = False
    # RunConfig.aux_alpha when left unset (Healthcare FDA's AuxInfo methods: 1; everything else trains the main task)
    default_aux_alpha: ClassVar[float] = 0.0

    def __init__(self, cfg: "RunConfig", setting: "Setting", layout: "ParamLayout",
                 model: torch.nn.Module | None = None) -> None:
        self.cfg = cfg  # resolved
        self.setting = setting
        self.layout = layout
        self.model = model  # the initial model (its architecture: e.g. which layer is the head)
        self.num_sources = cfg.num_sources
        self.target = cfg.num_sources  # the target's client index
        self.params = type(self).Params.build(cfg.params.get(self.family, {}))

    # ---------------------------------------------------------------- description (class level)

    @classmethod
    def resolve(cls, cfg: "RunConfig", defaults: Mapping[str, Any]) -> dict[str, Any]:
        """The fields this family fills in when the config leaves them None (on top of the dataset's)."""
        return {}

    @classmethod
    def param_defaults(cls, cfg: "RunConfig") -> dict[str, Any]:
        """The family's parameters whose default depends on the config (FedWCA's per-dataset values); the
        config's own values win."""
        return {}

    @classmethod
    def uses(cls, cfg: "RunConfig") -> dict[str, bool]:
        """Which of the optional RunConfig fields a (resolved) config of this family reads."""
        return {}

    @classmethod
    def planned_rounds(cls, cfg: "RunConfig") -> int:
        """How many rows a whole run of the resolved config has (progress displays)."""
        return cfg.warmup_rounds + cfg.rounds

    @classmethod
    def num_clients(cls, cfg: "RunConfig") -> int:
        """How many clients (data holders, each a slot in the executor) a run of the resolved config has: the
        sources and the target; FSSDA's devices hold both roles, so there a run has num_sources."""
        return cfg.num_sources + 1

    @classmethod
    def min_target_steps(cls) -> int:
        """Optimizer steps per epoch the target's labelled set must give (auto-weighting needs 2)."""
        return 1

    # ---------------------------------------------------------------- the experiment

    def views(self) -> list[dict[str, "Pair"]]:
        """Each client's data views, by name (what its tasks may name as `data`); sources first."""
        views = [{"train": s} for s in self.setting.sources]
        views.append({"train": self.setting.target_train})
        return views

    def init_state(self, initial: torch.Tensor) -> ServerState:
        """The server state before round 0, from the initial model's flat weights (M,)."""
        return {"global": initial.clone()}

    # ---------------------------------------------------------------- one round

    def plan_round(self, r: int, state: ServerState) -> Round | None:
        """Round r's tasks; None when the run is over."""
        raise NotImplementedError

    def aggregate(self, r: int, state: ServerState, results: Mapping[int, ClientResult]
                  ) -> tuple[ServerState, dict[str, Any]]:
        """The server half: the new state and the round's logged numbers (a row's columns). `results` maps
        each task's client to its result. Raises ValueError on non-finite numbers (a diverged client)."""
        raise NotImplementedError

    def plan_step(self, r: int, step: int, state: ServerState) -> Round | None:
        """Step `step` (>= 1) of round r: tasks that need the state the round's earlier steps made (Healthcare FDA's
        online fine-tuning: the target fine-tunes the FedAvg of this round's sources); None: the round is
        complete. Default: one step per round."""
        return None

    def aggregate_step(self, r: int, step: int, state: ServerState, results: Mapping[int, ClientResult]
                       ) -> tuple[ServerState, dict[str, Any]]:
        """The server half of step `step` of round r (as `aggregate`); its numbers join the round's row."""
        raise NotImplementedError

    def evaluate(self, r: int, state: ServerState, evaluator: "Evaluator") -> dict[str, Any]:
        """The row's evaluation columns ("accuracy", "loss", ...). Default: the global model on the target's
        test set."""
        return evaluator.target(state["global"], r)

    def final_weights(self, state: ServerState) -> torch.Tensor:
        """The weights a History keeps as its final model (M,)."""
        return state["global"]
