"""What a trial is and its record: the one module through which a trial's record is written, read, found damaged
and set aside (the sweep, the search, `fda_ray.collect`, `fda_ray.results`, the results pages and the benchmarks
all read records through it).

A trial is one run of a RunConfig (`params`), a row of the grid's table at one value of its variable and one
seed (`Trial`); its key (`trial_key`) hashes every field that changes its numbers (not where or how it ran:
executor, resources, the data directory), so a resumed sweep finds it.

A trial's record, records/<key>/:
  trial.json    what the trial is (written first)
  state.pt      after every round (atomic): what a cut-off trial resumes from; tensors and plain data only, and
                its trial's key (one that cannot be read, or names another trial, is set aside: load_state)
  nodes.json    every attempt at the trial: the driver's node (Ray node id, address, host), its client actors'
                nodes (executor ray) and the round it started from
  rows.json     once the trial is done: the resolved config, one metrics row per round, the environment
                (python, torch, numpy, ray versions and the machine) of the process that finished it, and the
                nodes that ran it (nodes.json's list: more than one when a node was lost and Tune retried it)
  weights.pt    the final flat weights, for trials others start from
A trial whose rows.json exists is done and never runs again (a resumed sweep or search first sets aside a rows.json
that cannot be read, set_aside_damaged: that trial runs again). `finished(records)` reads every finished record of
a directory, leaving out (with a warning line) one whose rows.json is damaged.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Sequence

from fda_ray.core.storage import StoragePath, storage_path
from fda_ray.core.config import RunConfig, numbers_fields
from fda_ray.core.user_files import is_number, is_whole
from fda_ray.papers.grids import Grid

STATE_FILE, ROWS_FILE, WEIGHTS_FILE, TRIAL_FILE = "state.pt", "rows.json", "weights.pt", "trial.json"


NODES_FILE = "nodes.json"


KINDS = ("run", "finetune")


@dataclass(frozen=True)
class Trial:
    key: str  # its record's directory name
    row: str  # the grid row's key
    value: float | None  # the grid value; None for a shared source_only trial (read at `values`)
    seed: int
    params: dict[str, Any]  # RunConfig fields
    kind: str = "run"  # "run": a whole run; "finetune": finetune_offline's fine-tuning from `weights_from`
    weights_from: str | None = None  # the key of the trial whose final weights a "finetune" trial starts from
    save_weights: bool = False
    values: tuple[float, ...] = ()  # a shared source_only trial: the grid values (its eval_noise levels)

    def __post_init__(self) -> None:
        # (a trial.json edited by hand is read back through here: its fields' kinds are what its readers compare)
        for name, ok, allowed in (("key", isinstance(self.key, str), "a text"),
                                  ("row", isinstance(self.row, str), "a text"),
                                  ("value", self.value is None or is_number(self.value), "a number or null"),
                                  ("seed", is_whole(self.seed), "a whole number"),
                                  ("params", isinstance(self.params, dict), "a mapping")):
            if not ok:
                raise ValueError(f"{name}={getattr(self, name)!r} is invalid for a trial: {allowed}")
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is invalid for trial {self.key}: one of {', '.join(KINDS)}")
        if (self.kind == "finetune") != (self.weights_from is not None):
            raise ValueError(f"weights_from={self.weights_from!r} is invalid for trial {self.key}: a finetune trial, "
                             "and only one, starts from another trial's weights")

    def config(self) -> RunConfig:
        return RunConfig(**self.params)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Trial":
        d = dict(d)
        d["values"] = tuple(d.get("values", ()))
        return Trial(**d)


# Numbers fields added after sweeps were recorded, with the value that computes what runs computed before them:
# left out of a trial's identity at that value, so the recorded trials keep their keys.
ADDED_LATER: dict[str, Any] = {"vectorise": "off", "source_classes": 4, "test_env": 0, "shuffle": True,
                               "drop_last": True, "data_augmentation": False, "faithful_domainbed_auto": False,
                               "aux_alpha": 0.0, "source_envs": None, "dirichlet_concentration": None,
                               "target_labelled_per_class": None, "clients_per_domain": None,
                               "val_share": None, "source_val_share": None, "environment_seed": "domainbed",
                               "shard_cap": "device", "estimate_scale": "both"}


# The same for the method families' parameters (RunConfig.params[family][name]): a parameter added at the value that
# computes what the family computed before it. A changed default is not listed: its trials are other trials.
PARAMS_ADDED_LATER: dict[str, dict[str, Any]] = {"fssda": {"sgd_momentum": 0.9},
                                                 "fedwca": {"cross_cluster_norm": "columns", "labelset": False},
                                                 "healthcare": {"head_activation": "linear", "binary_loss": "logit"},
                                                 "fedrep": {"body_epochs": 1}}


def trial_key(row: str, variable: str, value: float | None, seed: int, params: dict[str, Any], kind: str = "run",
              weights_from: str | None = None) -> str:
    """Readable, and unique per set of numbers: a hash of the fields that change them (RunConfig metadata)."""
    resolved = RunConfig(**params).resolved().to_dict()
    identity = {k: resolved[k] for k in sorted(numbers_fields())}
    if not identity["params"]:  # (a method without parameters of its own: the keys of sweeps recorded before
        del identity["params"]  # RunConfig.params existed stay valid, and their trials are found on --resume)
    for name, old in ADDED_LATER.items():  # likewise for the fields added since, at their old behaviour
        if identity[name] == old:
            del identity[name]
    for family, fields in identity.get("params", {}).items():
        for name, old in PARAMS_ADDED_LATER.get(family, {}).items():
            if name in fields and fields[name] == old:
                fields = {k: v for k, v in fields.items() if k != name}
        identity["params"] = {**identity["params"], family: fields}
    identity.update(kind=kind, weights_from=weights_from)
    digest = hashlib.sha1(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:8]
    v = "all" if value is None else f"{value:g}"
    return f"{row}-{variable}{v}-seed{seed}-{digest}"


# ---------------------------------------------------------------- one trial and its record

def _save_torch(obj: Any, path: StoragePath | Path) -> None:
    storage_path(path).save_torch(obj)  # atomic: a kill mid-write leaves the previous file whole


# JSON has no NaN or infinity (Python writes bare NaN / Infinity tokens, which strict parsers, JavaScript's and jq
# --strict's among them, refuse): a record writes them as these strings and its readers read them back as numbers.
# Not as null: null is "not computed" (a shared trial's noise-dependent columns), and a final round's non-finite
# loss must stay non-finite, not fall back to an earlier round's number. A regression task's accuracy is NaN in
# every row.
NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _finite(obj: Any) -> Any:
    """`obj` with every NaN or infinity as its NONFINITE string, for strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else "NaN" if math.isnan(obj) else "Infinity" if obj > 0 else "-Infinity"
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def nonfinite_back(obj: Any) -> Any:
    """A record's JSON as read, with its NONFINITE strings (and a bare NaN of a record written before) as floats."""
    if isinstance(obj, str):
        return NONFINITE.get(obj, obj)
    if isinstance(obj, dict):
        return {k: nonfinite_back(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [nonfinite_back(v) for v in obj]
    return obj


def _save_json(obj: Any, path: StoragePath | Path) -> None:
    """A record's JSON file, strict JSON (non-finite numbers as NONFINITE strings), written atomically."""
    storage_path(path).write_text(json.dumps(_finite(obj), indent=None, default=str, allow_nan=False) + "\n")


def environment(aggregation: str | None = None) -> dict[str, str | None]:
    """What computed a record's numbers. A torch build alone moves results by points (seed003.md: the same FedWCA
    code, config and seed gives +1.2-3.0 test points under torch 2.15 than under the build its grid ran on), so
    every record says which build finished it (fda_ray.core.build: torch, torchvision, numpy and the version of
    fda-ray's number-changing code, the aggregation kernels' implementation that ran, the CPU capability) and where;
    a resumed trial's earlier rounds may have run on another."""
    import platform

    from fda_ray.core.build import build, package_version

    return {"python": platform.python_version(), **build(aggregation), "ray": package_version("ray"),
            "machine": platform.machine()}


def recorded_builds(records: StoragePath | Path) -> dict[tuple, list[str]]:
    """The builds (fda_ray.core.build.FIELDS, in order) the trials under `records` name (a finished trial's
    rows.json, a cut-off one's last attempt in nodes.json), each with its trials' keys; records made before builds
    were recorded count under a build of Nones."""
    from fda_ray.core.build import FIELDS

    out: dict[tuple, list[str]] = {}
    for rows in storage_path(records).glob(f"*/{ROWS_FILE}"):
        if record_damage(rows.parent) is not None:  # set aside before a resume (set_aside_damaged); no build to read
            continue
        env = json.loads(rows.read_text()).get("environment") or {}
        out.setdefault(tuple(env.get(k) for k in FIELDS), []).append(rows.parent.name)
    # trials cut off mid-run: the build of their last attempt (their state.pt goes on from its rounds)
    for nodes in storage_path(records).glob(f"*/{NODES_FILE}"):
        if not (nodes.parent / ROWS_FILE).is_file():
            attempts = _attempts(nodes)
            env = (attempts[-1].get("build") or {}) if attempts else {}
            out.setdefault(tuple(env.get(k) for k in FIELDS), []).append(nodes.parent.name)
    return out


STATE_FIELDS = ("next_round", "rows")  # what every resume state holds (fda_ray.runtime.loop.run_rounds)


def checkpoint_damage(state: Any, key: str | None) -> str | None:
    """Why a loaded resume state cannot be the state of trial `key` (None when it can): not a state at all, or the
    state of another trial (a checkpoint names its trial's key; those written before it did name none)."""
    if not isinstance(state, dict) or any(f not in state for f in STATE_FIELDS) or \
            not ("state" in state or "flat" in state):
        return f"not a resume state (it needs {', '.join(STATE_FIELDS)} and the server state)"
    named = state.get("trial")
    if key is not None and named is not None and named != key:
        return f"it is the checkpoint of trial {named}, not of {key}"
    return None


def resume_misfit(resume: dict, exp: Any) -> str | None:
    """Why a loaded checkpoint (`resume`, what run_rounds' checkpoint callback was handed) cannot resume a run of
    `exp`, or None when it can: a round outside the run, rows that are not rounds, a server state without the
    entries of the algorithm's initial state (its models' flat weights) or with other shapes or dtypes, or client
    states of another number of clients. A checkpoint that loads but does not fit (edited, or of another model)
    would otherwise fail the trial in its first round on every resume. Entries an algorithm adds after round 0 are
    not compared: only those every state of the run holds."""
    import torch

    r = resume.get("next_round")
    planned = exp.algorithm.planned_rounds(exp.cfg)
    if not isinstance(r, int) or isinstance(r, bool) or not 0 <= r <= planned:
        return f"its next_round is {r!r}, not a round of this run (0 to {planned})"
    rows = resume.get("rows")
    if not isinstance(rows, list) or not all(isinstance(x, dict) and isinstance(x.get("round"), int) for x in rows):
        return "its rows are not a list of rounds"
    template = exp.algorithm.init_state(exp.initial_weights())  # {name: (M,) flat weights}
    state = resume["state"] if "state" in resume else {"global": resume.get("flat")}
    if not isinstance(state, dict):
        return "its server state is not a mapping of tensors"
    for name, want in template.items():
        got = state.get(name)
        if not isinstance(got, torch.Tensor):
            return f"its server state has no tensor {name!r}"
        if got.shape != want.shape or got.dtype != want.dtype:
            return f"its server state's {name!r} is {got.dtype} {tuple(got.shape)}, this run's model " \
                   f"{want.dtype} {tuple(want.shape)}"
    clients = resume.get("client_states")
    if clients is not None and (not isinstance(clients, list) or len(clients) != len(exp.clients)
                                or not all(isinstance(c, dict) for c in clients)):
        return f"its client states are not those of this run's {len(exp.clients)} clients"
    return None


def keep_aside(path: StoragePath, why: str) -> StoragePath:
    """Rename a record's file that is not used any more to <name>.<why> (the next free <name>.<why>.N if that
    exists): nothing a user computed is deleted. Returns the new path."""
    target, n = path.with_name(f"{path.name}.{why}"), 1
    while target.exists():
        target, n = path.with_name(f"{path.name}.{why}.{n}"), n + 1
    path.replace(target)
    return target


def load_state(record: StoragePath | Path, warn: Callable[[str], None] | None = None,
               fits: Callable[[dict], str | None] | None = None) -> dict | None:
    """The resume state of a cut-off trial (tensors and plain data: loaded without unpickling code), or None to
    start from round 0. A state.pt that cannot be read back (cut short, garbage, refused by torch's safe loader),
    that belongs to another trial, or that does not fit the trial's experiment (`fits(state)`: why not, or None;
    resume_misfit) is not adopted: it is kept as state.pt.damaged (the next free .damaged.N),
    and warn(line) hears one line naming the file and why; the trial then starts again from round 0 (not a
    failure in its first round on every resume)."""
    path = storage_path(record) / STATE_FILE
    if not path.is_file():
        return None
    import io

    import torch

    from fda_ray.core.user_files import torch_damage

    data = path.read_bytes()
    try:
        state = torch.load(io.BytesIO(data), weights_only=True)  # (StoragePath.load_torch, with the bytes kept)
        why = checkpoint_damage(state, storage_path(record).name)
        if why is None and fits is not None:
            why = fits(state)
    except Exception as e:  # EOFError, pickle's and zipfile's errors, torch's RuntimeError: all mean unreadable
        why = f"unreadable: {torch_damage(data, e)}"
    if why is None:
        return state
    target = keep_aside(path, "damaged")
    line = f"warning: trial {storage_path(record).name}: its checkpoint {path} is not used ({why}); kept as " \
           f"{target.name}, the trial starts again from round 0"
    (warn or _stderr)(line)
    return None


def _stderr(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


def is_done(record: StoragePath | Path) -> bool:
    return (storage_path(record) / ROWS_FILE).is_file()


def _parsed_rows(record: StoragePath | Path) -> tuple[dict[str, Any] | None, str | None]:
    """(rows.json's contents, None), or (None, why it cannot be read as the record)."""
    try:
        data = nonfinite_back(json.loads((storage_path(record) / ROWS_FILE).read_text()))
    except json.JSONDecodeError as e:
        return None, f"not JSON: {e.msg} at character {e.pos}"
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except IsADirectoryError:
        return None, "a directory, not a file"
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        return None, "no list of rows"
    if not all(isinstance(r, dict) for r in data["rows"]):
        return None, "a row that is not a mapping of metrics"
    if not data["rows"]:  # (every trial records at least its first round: an edit, not a result)
        return None, "an empty list of rows"
    if (why := _rows_field_damage(data)) is not None or (why := _other_trials_rows(record, data)) is not None:
        return None, why
    return data, None


def _other_trials_rows(record: StoragePath | Path, data: dict[str, Any]) -> str | None:
    """Why rows.json is another trial's (copied from another folder: its config's method, seed, beta, ... differ
    from this folder's trial.json), or None. Such a record was counted as this trial's, with the other's numbers.
    Only what a run never rewrites is compared: numbers (noise, beta, seed, a learning rate, ...) and the method's
    name, as the trial set them and the config holds them (a dataset's name may be an alias the run resolves). A setting the run fills in or resolves (None, or
    a word such as vectorise "auto", recorded as what it became) is not: a good record read as another's is left
    out and run again by every --resume. No trial.json, or one that cannot be read: nothing to compare with (left
    to its own check)."""
    config = data.get("config")
    if not isinstance(config, dict) or not (storage_path(record) / TRIAL_FILE).is_file():
        return None
    trial, _ = _parsed_trial(record)
    if trial is None:
        return None
    for name, want in trial.params.items():
        got = config.get(name)
        numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (want, got))
        names = name == "method" and all(isinstance(x, str) for x in (want, got))
        if name not in config or not (numbers or names):
            continue
        if not (math.isclose(got, want, rel_tol=1e-12) if numbers else got == want):
            return f"another trial's rows ({name} {got!r} there, {want!r} in its {TRIAL_FILE})"
    return None


# What the readers of a record (collect, the summary, the build check, fda_ray.results) take from its fields: JSON
# that parses yet holds a field of another kind (edited by hand) is a damaged record, found when it is read, not a
# traceback in the middle of a summary after the pending trials have run.
_RECORD_FIELDS: dict[str, tuple[type, ...]] = {"config": (dict,), "environment": (dict,), "seconds": (int, float),
                                               "nodes": (list,), "startup": (dict,), "finished_at": (int, float)}
_NUMBER_COLUMNS = ("accuracy", "loss")  # the columns every page and table reads as numbers


def _rows_field_damage(data: dict[str, Any]) -> str | None:
    """Why a parsed rows.json's fields are not what its readers take (None when they are): a field of another
    kind, a row whose round is not a whole number or whose accuracy or loss is not a number."""
    for name, kinds in _RECORD_FIELDS.items():
        value = data.get(name)
        if value is not None and (not isinstance(value, kinds) or (kinds == (int, float) and not is_number(value))):
            return f"its {name} is {type(value).__name__}, not {' or '.join(k.__name__ for k in kinds)}"
    for i, row in enumerate(data["rows"]):
        if "round" in row and not is_whole(row["round"]):
            return f"row {i}'s round is {row['round']!r}, not a whole number"
        for col in _NUMBER_COLUMNS:
            if row.get(col) is not None and not is_number(row[col]):
                return f"row {i}'s {col} is {row[col]!r}, not a number"
    return None


def record_damage(record: StoragePath | Path) -> str | None:
    """Why a finished trial's rows.json cannot be read as its record (cut short by a crash or a full disk, or
    edited by hand), or None when it can."""
    return _parsed_rows(record)[1]


RECORD_FILES = (TRIAL_FILE, STATE_FILE, NODES_FILE, ROWS_FILE, WEIGHTS_FILE)


def set_aside_damaged(records: StoragePath | Path, move: bool = True) -> dict[str, str]:
    """Every rows.json under `records` that cannot be read (record_damage) is renamed rows.json.damaged (the next
    free .damaged.N if that exists): nothing is deleted, and the trial is pending again, so a resumed sweep runs it
    and its summary reads the others. A directory where a record's file goes (trial.json, state.pt, ...) is set
    aside the same way, before any work: the trial's first write there would fail in the middle of the sweep.
    {trial key (a file other than rows.json: "<key>/<file>"): a warning line} for each; move=False (a dry run) only
    says so."""
    lines = {}
    records = storage_path(records)
    for name in RECORD_FILES:
        for path in sorted(records.glob(f"*/{name}"), key=str) if records.is_local else ():
            if not path.is_dir():
                continue
            key = path.parent.name
            # (keyed by the trial for a rows.json, which makes it pending again; by the file for the others)
            said = key if name == ROWS_FILE else f"{key}/{name}"
            if not move:
                lines[said] = (f"warning: trial {key}: its {name} is a directory, not a file; a resume without "
                               f"--dry-run keeps it as {name}.damaged" +
                               (" and runs the trial again" if name == ROWS_FILE else ""))
                continue
            target = keep_aside(path, "damaged")
            lines[said] = f"warning: trial {key}: its {name} is a directory, not a file; kept as {target.name}" + \
                (", the trial is pending again" if name == ROWS_FILE else "")
    for rows in sorted(storage_path(records).glob(f"*/{ROWS_FILE}"), key=str):
        if rows.is_dir():  # (a dry run's: said above)
            continue
        why = record_damage(rows.parent)
        if why is None:
            continue
        key = rows.parent.name
        if not move:
            lines[key] = (f"warning: trial {key}: its {ROWS_FILE} is damaged ({why}); a resume without --dry-run "
                          f"keeps it as {ROWS_FILE}.damaged and runs the trial again")
            continue
        target = keep_aside(rows, "damaged")
        lines[key] = f"warning: trial {key}: its {ROWS_FILE} is damaged ({why}); kept as {target.name}, the trial is " \
                     "pending again"
    return lines


def weights_damage(record: StoragePath | Path) -> str | None:
    """Why a finished trial's final weights (weights.pt) cannot be started from, or None when they can."""
    path = storage_path(record) / WEIGHTS_FILE
    if not path.is_file():
        return f"it kept no {WEIGHTS_FILE}"
    try:
        weights = path.load_torch()
    except Exception as e:  # cut short or garbage: torch's safe loader raises any of several types
        return f"its {WEIGHTS_FILE} cannot be read ({type(e).__name__})"
    if not hasattr(weights, "dim") or weights.dim() != 1:
        return f"its {WEIGHTS_FILE} is not a flat weight vector"
    return None


def rerun_for_weights(trials: Sequence[Trial], records: StoragePath | Path, move: bool = True) -> dict[str, str]:
    """A trial that starts from another's final weights (finetune_offline from the shared source_only) can only run
    once they are on disk: a finished trial it starts from that kept none (a sweep of source_only alone, later
    extended; a damaged weights.pt) runs again and saves them. Its rows.json is kept as rows.json.before-rerun (the
    next free .N); {its key: a warning line} for each; move=False (a dry run) only says so."""
    records = storage_path(records)
    by_key = {t.key: t for t in trials}
    lines: dict[str, str] = {}
    for t in trials:
        src = by_key.get(t.weights_from) if t.weights_from else None
        if src is None or src.key in lines or is_done(records / t.key) or not is_done(records / src.key):
            continue
        why = weights_damage(records / src.key)
        if why is None:
            continue
        rows = records / src.key / ROWS_FILE
        if not move:
            lines[src.key] = (f"warning: trial {src.key}: {why}, which trial {t.key} starts from; a resume without "
                              f"--dry-run runs it again (its {ROWS_FILE} kept)")
            continue
        target = keep_aside(rows, "before-rerun")
        lines[src.key] = (f"warning: trial {src.key}: {why}, which trial {t.key} starts from; it runs again and "
                          f"saves them (its {ROWS_FILE} kept as {target.name})")
    return lines


def changed_settings(trials: Sequence[Trial], records: StoragePath | Path) -> str | None:
    """Why resuming `trials` into `records` would start other trials than those recorded there, or None: a planned
    trial (row, value, seed) that has no record while a record of the same row, value and seed has another key was
    made with other settings (a typo in --rounds, another --profile). Such a resume would not go on: it would start
    a new set of trials beside the old ones, and the summary would show only the new. Chunks that resume into one
    folder (other values, more seeds, other rows) plan trials the records do not hold: they pass."""
    records = storage_path(records)
    recorded: dict[tuple, Trial] = {}
    for path in records.glob(f"*/{TRIAL_FILE}"):
        t, _ = _parsed_trial(path.parent)  # (a damaged one: no settings to compare)
        if t is None:
            continue
        recorded.setdefault((t.row, t.value, t.seed, t.kind), t)
    for t in trials:
        old = recorded.get((t.row, t.value, t.seed, t.kind))
        if old is None or old.key == t.key or (records / t.key / TRIAL_FILE).is_file():
            continue
        cell = f"trial {t.row} at {t.value if t.value is not None else 'every value'}, seed {t.seed}"
        if (moves := documented_moves(records / old.key, t)) is not None:  # fda-ray's default moved, not the user's
            said = "; ".join(f"{k} {a!r} there, {b!r} here" for k, (a, b) in moves.items())
            return f"{cell} was recorded before fda-ray's default changed ({said}: docs/methods.md)"
        return f"{cell} was recorded with other settings ({settings_difference(old, t)})"
    return None


def settings_difference(old: Trial, new: Trial) -> str:
    """How two trials' number-changing settings differ, in a few words: "rounds 12 there, 10 here; ..." (the first
    three), or their keys when the fields cannot be compared."""
    try:
        was, now = (dotted({k: v for k, v in x.config().resolved().to_dict().items() if k in numbers_fields()})
                    for x in (old, new))
    except (ValueError, TypeError):
        was, now = {}, {}
    diff = [f"{k} {was.get(k)!r} there, {now.get(k)!r} here" for k in sorted(set(was) | set(now))
            if was.get(k) != now.get(k)]
    return "; ".join(diff[:3]) + (f"; {len(diff) - 3} more" if len(diff) > 3 else "") if diff else \
        f"another key: {old.key} there, {new.key} here"


# A trial's key moves when a default it resolves changes (its trial.json keeps its params, which resolve today's
# defaults): the moves made on purpose, by (row, partition), with the fields that moved. The DomainBed oracle's
# learning rate is the authors' lr / 4 since 2026-11-29 (docs/methods.md, DomainBed protocol; it was the sources' lr).
# Since 2026-11-30 (docs/authors-code.md), as the authors' scripts: FedDA_Auto on DomainBed scales only the target's
# per-step deltas for its estimators (estimate_scale, a field added then: "both" before), and the auto-weighted rows
# of the label-shift grid train the target at batch 16 (4 before, the noise grid's).
MOVED_DEFAULTS = {("oracle", "domainbed"): frozenset({"lr_target"}),
                  ("fedda_auto", "domainbed"): frozenset({"estimate_scale"}),
                  ("fedda_auto", "label_shift"): frozenset({"batch_target"}),
                  ("fedgp_auto", "label_shift"): frozenset({"batch_target"})}


def moved_by_a_documented_default(record: StoragePath | Path, today: Trial) -> bool:
    """Whether the finished record at `record` differs from trial `today` (its plan under today's defaults) only by
    a documented default change (MOVED_DEFAULTS), read from its rows.json's config (what it ran with): such a record
    is still its cell's (the results pages read it; the committed-key tests allow it)."""
    return documented_moves(record, today) is not None


def documented_moves(record: StoragePath | Path, today: Trial) -> dict[str, tuple[Any, Any]] | None:
    """{field: (the record's value, today's)} where the record differs from `today` only by a documented default
    change (moved_by_a_documented_default), else None."""
    rows = storage_path(record) / ROWS_FILE
    if not rows.is_file():
        return None
    was, here = json.loads(rows.read_text())["config"], today.config().resolved().to_dict()
    expected = MOVED_DEFAULTS.get((today.row, here.get("partition")))
    if expected is None:
        return None
    # (the fields that change numbers: where a run executed, clients_per_actor say, is no move; a field added
    # since is absent from was, and ran at the value it was added at)
    was = {**{k: ADDED_LATER[k] for k in expected if k not in was and k in ADDED_LATER}, **was}
    moved = {k for k in set(was) & set(here) & set(numbers_fields()) if was[k] != here[k]}
    return {k: (was[k], here[k]) for k in sorted(moved)} if moved == expected else None


def read_trial(record: StoragePath | Path) -> Trial:
    """What the trial of a record is (its trial.json: written before its first round, so a started trial has it)."""
    return Trial.from_dict(json.loads((storage_path(record) / TRIAL_FILE).read_text()))


def read_rows(record: StoragePath | Path) -> dict[str, Any]:
    """{"config", "rows", "seconds", "environment", "nodes"} of a finished trial (records written before the
    environment and the nodes were recorded lack them)."""
    return nonfinite_back(json.loads((storage_path(record) / ROWS_FILE).read_text()))


def where_running() -> dict[str, Any]:
    """The node this process runs on: Ray's node id and address when inside Ray (a Tune trial, an actor), and
    the host name."""
    import socket

    here: dict[str, Any] = {"host": socket.gethostname()}
    try:
        import ray

        if ray.is_initialized():
            ctx = ray.get_runtime_context()
            here.update(node_id=ctx.get_node_id(), node_ip=ray.util.get_node_ip_address())
    except ImportError:
        pass
    return here


def _note_start(record: StoragePath, resume: dict | None, executor: Any = None, started_at: float | None = None,
                fused: int | None = None) -> list[dict[str, Any]]:
    """Append this attempt (the driver's node, its client actors' nodes, the round it starts from, when it started:
    seconds since the epoch; `fused`: the trials of the fused group it runs in) to the record's nodes.json; returns
    the list."""
    path = record / NODES_FILE
    nodes = _attempts(path) if path.is_file() else []
    if nodes is None:  # damaged (cut short by a crash, edited by hand): kept aside, nothing lost; a new list begun
        target = keep_aside(path, "damaged")
        _stderr(f"warning: trial {record.name}: its {NODES_FILE} cannot be read; kept as {target.name}, a new list of "
                "attempts begins")
        nodes = []
    start = resume["next_round"] if resume and "next_round" in resume else 0
    from fda_ray.core.build import build

    clients = sorted(set(executor.nodes())) if hasattr(executor, "nodes") else None
    reused = {"reused_actors": executor.reused} if hasattr(executor, "reused") else {}
    nodes.append({**where_running(), **({"client_nodes": clients} if clients is not None else {}), **reused,
                  **({"fused_members": fused} if fused is not None else {}), "from_round": start,
                  "build": build(), "started_at": started_at if started_at is not None else time.time()})
    _save_json(nodes, path)
    return nodes


def _attempts(path: StoragePath) -> list[dict[str, Any]] | None:
    """A nodes.json's list of attempts, or None when it cannot be read as one (not text, not JSON, not a list of
    mappings, or an attempt whose fields are of other kinds than _note_start writes: its build is read by the
    resume's build check)."""
    try:
        nodes = json.loads(path.read_bytes().decode("utf-8"))
    except (ValueError, UnicodeDecodeError, IsADirectoryError):  # (json.JSONDecodeError is a ValueError)
        return None
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        return None
    for n in nodes:
        if not isinstance(n.get("build") or {}, dict) or not isinstance(n.get("client_nodes") or [], list) or \
                not all(n.get(k) is None or is_number(n[k]) for k in ("from_round", "started_at")):
            return None
    return nodes


def dotted(fields: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested fields as one level with dotted names: {"params": {"fssda": {"kd_temperature": 2}}} ->
    {"params.fssda.kd_temperature": 2} (a tracker's parameters; the fields a grid's columns set)."""
    out: dict[str, Any] = {}
    for k, v in fields.items():
        if isinstance(v, Mapping):
            out.update(dotted(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def round_metrics(row: dict[str, Any]) -> dict[str, Any]:
    """What a trial reports for one round (to Tune, to the status and the trackers): the row's numbers (lists stay
    lists), a NaN or an infinity as None."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


# The build fields a record names (fda_ray.core.build.environment), as fda_ray.results.load's columns
BUILD_COLUMNS = ("torch", "torchvision", "numpy", "code", "aggregation", "cpu", "python", "ray", "machine")


def config_columns(data: dict[str, Any], skip: Any = (), clash: Any = ()) -> dict[str, Any]:
    """A record's resolved RunConfig (`data`: its read_rows) and the build that recorded it, as columns beside its
    rounds: the fields but those in `skip`, then build_torch, build_torchvision, ... A field named like a column
    some round of the trial logs (FedWCA's beta, alpha), or in `clash`, is config_<name> in every row: a round that
    did not log it must not show the config's number under the metric's name."""
    from fda_ray.core.history import config_columns as columns

    env = data.get("environment") or {}
    out = columns(data.get("config") or {}, data["rows"], skip, clash)
    out.update({f"build_{k}": env.get(k) for k in BUILD_COLUMNS})
    return out


# A shared Source Only round's columns that no noise level changes (its timing): kept at every evaluated level
NOISE_FREE = ("round", "phase", "seconds", "driver_seconds", "client_seconds_max", "client_seconds_sum",
              "client_seconds_i")


def shared_value_row(r: dict[str, Any], i: int, value: float, config: dict[str, Any]) -> dict[str, Any]:
    """A shared Source Only trial's round (it trains at noise 0 and evaluates at every grid value, eval_noise) as
    the cell at its i-th value `value` would log it: accuracy and loss at that noise (the loss None in records
    from before eval_noise_loss was logged); at the noise it trained with every column as logged; elsewhere the
    columns a noise level changes (validation, the target's training loss and estimates, the cosines) None, since
    the run never computed them at that noise (they were the noise-0 run's under every value's label)."""
    trained = math.isclose(float(config.get("noise") or 0.0), float(value))
    losses = r.get("eval_noise_loss")
    row = {k: (x if trained or k in NOISE_FREE else None) for k, x in r.items() if not k.startswith("eval_noise_")}
    row["accuracy"] = (r.get("eval_noise_accuracy") or [None] * (i + 1))[i]
    row["loss"] = losses[i] if losses else (r.get("loss") if trained else None)
    # its noise column is the level it was evaluated at (a filter on noise then finds the cell's numbers only);
    # the noise it trained with beside it
    row["noise"], row["trained_noise"] = value, float(config.get("noise") or 0.0)
    return row


def result_rows(trial: Trial, grid: Grid, data: dict[str, Any]) -> list[dict[str, Any]]:
    """A finished trial's rows (`data`: its read_rows) with its identity as columns, then the rest of its resolved
    RunConfig (lr_source, batch_target, rounds, ...: what the run used, not only what the grid set) and the build
    that recorded it (build_torch, build_torchvision, build_numpy, build_code, ...; None in records made before
    builds were), as fda_ray.results.load gives them; a shared source_only trial gives one set of rows per grid
    value it was evaluated at (shared_value_row: its accuracy and loss there)."""
    ident = {k: v for k, v in trial.params.items() if k != "eval_noise"}
    # fda_ray.results.load's identity columns (value, kind, trial_seconds) beside the grid's (grid, grid_variable,
    # grid_value: the same number as value)
    ident.update(row=trial.row, grid=grid.name, grid_variable=grid.variable, trial=trial.key, kind=trial.kind,
                 trial_seconds=data.get("seconds"))
    extra = config_columns(data, skip=set(ident))  # (eval_noise among them, from the config: a list or None)
    out = []
    if trial.value is None:
        for i, v in enumerate(trial.values):
            for r in data["rows"]:
                out.append({**ident, grid.variable: v, "value": v, "grid_value": v,
                            **shared_value_row(r, i, v, data["config"])})
    else:
        out = [{**ident, "value": trial.value, "grid_value": trial.value, **r} for r in data["rows"]]
    # the config and build after the round's own columns, never over them
    return [{**r, **{k: v for k, v in extra.items() if k not in r}} for r in out]


class Record(NamedTuple):
    """A finished trial's record: what the trial is (trial.json) and its rows.json."""

    path: StoragePath | Path
    trial: Trial
    data: dict[str, Any]


def _parsed_trial(record: StoragePath | Path) -> tuple[Trial | None, str | None]:
    """(the record's Trial, None), or (None, why its trial.json cannot be read: not text, not JSON, not a trial)."""
    from fda_ray.core.user_files import DamagedFileError, parse_json, text_damage

    path = storage_path(record) / TRIAL_FILE
    try:
        data = path.read_bytes()
    except OSError as e:  # a directory where the file goes, a refused read
        return None, f"cannot be read ({e.strerror or type(e).__name__})"
    if (why := text_damage(data)) is not None:
        return None, why
    try:
        return Trial.from_dict(parse_json(data.decode("utf-8"), TRIAL_FILE, path, dict)), None
    except DamagedFileError as e:
        return None, e.why
    except (TypeError, ValueError, KeyError) as e:  # JSON of another shape: a key missing, a value of another kind
        return None, f"not a trial ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"


def finished(records: StoragePath | Path | str, warn: Callable[[str], None] | None = None,
             where: str | None = None) -> Iterator[Record]:
    """Every finished trial under `records` (a sweep's trials/ directory), in key order: a record with trial.json
    and rows.json. One whose rows.json is damaged is left out, with one warning line (default: on stderr) naming
    the trial, `where` (default: the directory) and why."""
    records = storage_path(records)
    if not records.is_dir():
        return
    for rec in sorted(records.iterdir(), key=lambda p: p.name):
        if not ((rec / ROWS_FILE).is_file() and (rec / TRIAL_FILE).is_file()):
            continue
        data, why = _parsed_rows(rec)  # read once: checked and kept
        if why is not None:
            (warn or _stderr)(f"warning: trial {rec.name} in {where or records}: its {ROWS_FILE} is damaged ({why}); "
                              "left out")
            continue
        trial, why = _parsed_trial(rec)
        if trial is None:
            (warn or _stderr)(f"warning: trial {rec.name} in {where or records}: its {TRIAL_FILE} is damaged ({why}); "
                              "left out")
            continue
        yield Record(rec, trial, data)


def collect(trials: Sequence[Trial], grid: Grid, records: StoragePath | Path) -> tuple[list[dict], float]:
    """A row per (finished trial, grid value, round), the trial's fields as columns; and the finished trials'
    own run time (s), whichever launch ran them."""
    rows: list[dict] = []
    seconds = 0.0
    for t in trials:
        if is_done(records / t.key):
            data = read_rows(records / t.key)
            rows += result_rows(t, grid, data)
            seconds += data.get("seconds", 0.0)
    return rows, seconds
