"""Hyper-parameter searches with honest model selection (`python -m fda_ray.sweep --search NAME`).

A search (fda_ray.papers.searches) is run as studies, one per setting (a value of its variable: a noise level, a held-out
domain, a source) and searched method. Each study draws `num_samples` points of the search space (random search:
a generator seeded by the study, so --resume and a larger --num-samples find the same points; or Bayesian through
Optuna, `--search-alg optuna`) and runs each as a trial with its own record (fda_ray.experiments.trials), on Ray Tune with
ASHA stopping trials early on the per-round value of the search's first selection rule (`--scheduler none`: every
trial runs to the end). Every trial reports its validation metrics and its test accuracy each round
(fda_ray.train.evaluation.Evaluator.validation).

Then, per study and selection rule (fda_ray.papers.selection: target validation, training-domain validation, the
clients' validation splits; the test-set oracle, labelled as such), the selected configuration is run again with
fresh seeds (1 .. rerun_seeds; the search ran seed 0), beside the search's reference rows (e.g. the auto-weighted
methods) on the same seeds: the reported number is that rerun's mean test accuracy, never the search's own best.

Output in --out (default sweeps/search-<name>-<profile>):
  trials/<key>/          every trial's record (rows.json when finished; stopped.json when ASHA stopped it early)
  results.parquet        a row per trial and round: the trial's fields, its study, search_phase (search / rerun),
                         selected_by (the rules that chose the trial, comma-joined; None for the others)
  selection.json         per study: the points, each trial's status and final metrics, each rule's choice
  summary.md             the tables; trajectory.{png,pdf}: each study's validation per trial and the best so far
Resuming (--resume) keeps every finished and stopped trial; ASHA's rungs restart with the trials still to run.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from fda_ray.core.registry import did_you_mean
from fda_ray.core.storage import StoragePath, storage_path
from fda_ray.papers.selection import RULES, best_so_far, final_value, select
from fda_ray.experiments.records import (ROWS_FILE, Trial, is_done, keep_aside, nonfinite_back, read_rows,
                                         set_aside_damaged)
from fda_ray.experiments.trials import MAX_SAMPLES, MAX_SEEDS, merge_fields, point_trial
from fda_ray.papers.files import write_definition
from fda_ray.papers.searches import Search

if TYPE_CHECKING:
    from fda_ray.experiments.manifest import Manifest

STOPPED_FILE = "stopped.json"
RERUN_SEED0 = 1  # the reruns' first seed (the search's trials run seed 0)
PHASES = ("search", "rerun")


@dataclass(frozen=True)
class Study:
    method: str
    value: float

    def name(self, search: Search) -> str:
        return f"{self.method} @ {search.value_label(self.value)}"


def studies(search: Search, methods: Sequence[str] | None = None, values: Sequence[float] | None = None
            ) -> list[Study]:
    """The studies of a search: every setting x searched method (or those chosen)."""
    for m in methods or ():
        if m not in search.methods:
            raise ValueError(f"methods={m!r} is invalid: search {search.name!r} searches {', '.join(search.methods)}")
    for v in values or ():
        if not any(math.isclose(v, x) for x in search.values):
            raise ValueError(f"values={v:g} is invalid: search {search.name!r} has {search.variable} in "
                             f"{', '.join(f'{x:g}' for x in search.values)}")
    return [Study(m, v) for v in search.values if not values or any(math.isclose(v, x) for x in values)
            for m in search.methods if not methods or m in methods]


def base_fields(search: Search, profile: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    if profile not in search.profiles:
        raise ValueError(f"profile={profile!r} is invalid: search {search.name!r} has {', '.join(search.profiles)}")
    clash = sorted(set(overrides or {}) & {d.name for d in search.space})
    if clash:
        raise ValueError(f"{clash[0]}={overrides[clash[0]]!r} is invalid here: search {search.name!r} searches it")
    # the settings' own fields: a study sets them per setting, so a flag for one would be dropped without a word
    setting = sorted(set(overrides or {}) & {k for v in search.values for k in search.value_fields_of(v)})
    if setting:
        raise ValueError(f"{setting[0]}={overrides[setting[0]]!r} is invalid here: search {search.name!r} sets it for "
                         f"each of its settings ({search.variable}: choose them with --values)")
    return merge_fields({"dataset": search.dataset}, search.fixed, search.profiles[profile].fields, overrides or {})


def study_base(search: Search, profile: str, study: Study, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fields every trial of a study shares (seed 0), without the searched knobs."""
    return merge_fields(base_fields(search, profile, overrides), {"method": study.method, "seed": 0},
                        search.value_fields_of(study.value))


def search_trials(search: Search, profile: str, study: Study, num_samples: int,
                  overrides: dict[str, Any] | None = None) -> list[Trial]:
    """The study's random-search trials, in the search's order (seed 0)."""
    base = study_base(search, profile, study, overrides)
    return [point_trial(base, f"{study.method}-s{i:02d}", search.variable, study.value, point)
            for i, point in enumerate(search.samples(study.method, study.value, num_samples))]


def load_search(ref: str) -> Search:
    """A built-in search by name (fda_ray.papers.searches), or the search a .yaml/.yml/.json file defines (fda_ray.papers.files):
    its keys and values checked, then each profile's first point of every study and every reference row built
    into a RunConfig (the trials this module would plan), so a bad field or value is one line now."""
    from fda_ray.papers.files import resolve, search_file
    from fda_ray.papers.searches import SEARCHES

    def firsts(search: Search, profile: str) -> list[tuple[str, dict]]:
        for study in studies(search):
            _check_bounds(search, profile, study)
        trials = [t for study in studies(search) for t in search_trials(search, profile, study, 1)]
        _check_rules(search, trials[0])
        trials += [t for v in search.values for t in reference_trials(search, profile, v, 1)]
        return [(f"{t.params.get('method')} at {search.variable} {t.value:g}", t.params) for t in trials]

    return resolve(ref, SEARCHES, "search", "searches", search_file, firsts)


def _check_bounds(search: Search, profile: str, study: Study) -> None:
    """Every bound of a range and every choice is a value its field takes (set alone, the other knobs at their
    defaults): else `space[i].high=1.3 is invalid: beta takes a number in [0, 1]`, before any trial runs (a draw
    near the bound failed in the middle of the search)."""
    base = study_base(search, profile, study)
    # the study's own fields first (fixed, the profile's): their errors as they are (they were blamed on a knob's
    # bound: fixed lr_target -1 read "space[0].low=0.0 is invalid: beta takes a finite number > 0")
    point_trial(base, study.method, search.variable, study.value, {})
    for i, d in enumerate(search.space):
        ends = [(f"values[{j}]", v) for j, v in enumerate(d.values)] if d.kind == "choice" \
            else [("low", d.low), ("high", d.high)]
        for where, v in ends:
            try:
                point_trial(base, study.method, search.variable, study.value, {d.name: v})
            except ValueError as e:
                why = str(e).split(" is invalid: ", 1)[-1]
                raise ValueError(f"space[{i}].{where}={v!r} is invalid: {d.name} takes {why}") from None


def _check_rules(search: Search, trial: Trial) -> None:
    """Each rule's column is one the trials report: target_val needs held-out target samples (val_share),
    source_val held-out source samples (source_val_share); ASHA stops on the first rule's column, and Tune fails a
    trial whose reports lack it."""
    cfg = trial.config().resolved()
    needs = {"target_val": ("val_share", "held-out target samples"),
             "source_val": ("source_val_share", "held-out source samples")}
    for i, rule in enumerate(search.rules):
        if rule in needs and not getattr(cfg, needs[rule][0], None):
            name, what = needs[rule]
            raise ValueError(f"rules[{i}]={rule!r} is invalid: it reads {RULES[rule].metric}, which a trial reports "
                             f"only with {what} ({name} > 0: fixed: {{{name}: 0.2}}, say)")


def changed_search_settings(search: Search, profile: str, plan: Sequence[Study], num_samples: int,
                            overrides: dict[str, Any], records: StoragePath, search_alg: str) -> str | None:
    """Why resuming this search into `records` would start other trials beside those recorded, or None: a study's
    trial recorded with other settings (another --rounds, --profile, a field given or not: the grid's check,
    records.changed_settings), an Optuna trial whose point with today's settings is another trial, or the other
    search algorithm's trials (random search's `<method>-sNN`, Optuna's `<method>-optuna`), which this one would
    leave out of every output."""
    import re

    from fda_ray.experiments.records import TRIAL_FILE, _parsed_trial, changed_settings, settings_difference

    if search_alg != "optuna":  # (one pass over the records for every study)
        why = changed_settings([t for study in plan for t in search_trials(search, profile, study, num_samples,
                                                                          overrides)], records)
        if why:
            return why
    for study in plan:
        theirs = rf"{re.escape(study.method)}-s\d\d" if search_alg == "optuna" else optuna_row(study)
        for f in records.glob(f"{study.method}-*/{TRIAL_FILE}"):
            t, _ = _parsed_trial(f.parent)
            if t is not None and math.isclose(t.value, study.value) and re.fullmatch(theirs, t.row):
                return (f"the folder holds {'a random' if search_alg == 'optuna' else 'an Optuna'} search's trials "
                        f"of study {study.name(search)} ({t.key}); --search-alg {search_alg} would leave them out")
        if search_alg == "optuna":  # (optuna_trials leaves such trials out: they are other trials than its points)
            base = study_base(search, profile, study, overrides)
            for f in records.glob(f"{optuna_row(study)}-*/{TRIAL_FILE}"):
                t, _ = _parsed_trial(f.parent)
                if t is None or t.row != optuna_row(study) or not math.isclose(t.value, study.value):
                    continue
                now = point_trial(base, t.row, search.variable, study.value, point_of(search, t.params))
                if now.key != t.key:
                    return f"trial {t.key} was recorded with other settings ({settings_difference(t, now)})"
    return None


def recorded_count(out: StoragePath, key: str) -> int:
    """A count the search in `out` ran with, from its selection.json: "num_samples" (the trials a study asked for) or
    "rerun_seeds" (the seeds it reran its selections on); 0 without one, or one that cannot be read: the resume's
    own checks say why."""
    try:
        n = json.loads((storage_path(out) / "selection.json").read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return 0
    return n if isinstance(n, int) and not isinstance(n, bool) else 0


def kept_counts(search: Search, out: StoragePath, num_samples: int, given: dict[str, int | None]) -> tuple[Search, int]:
    """A resume never selects over fewer trials, nor reports fewer reruns, than the folder's search did (a plain
    --resume after --rerun-seeds 2 reported one seed's rerun, without a word): (the search with its rerun_seeds,
    num_samples), each the larger of today's and the recorded; one note where a value given today is raised."""
    import dataclasses

    counts = {"num_samples": num_samples, "rerun_seeds": search.rerun_seeds}
    for key in counts:
        was = recorded_count(out, key)
        if was > counts[key]:
            if given.get(key) is not None:
                print(f"note: {key}={given[key]} is below the {was} this folder's search ran; it keeps {was} (a resume "
                      "never reports over fewer)", file=sys.stderr)
            counts[key] = was
    return dataclasses.replace(search, rerun_seeds=counts["rerun_seeds"]), counts["num_samples"]


def space_points(search: Search) -> int | None:
    """How many points a space of choices alone has (None: a range makes it infinite): the most trials a study
    of distinct points can hold (the random search's grid caps itself so; Optuna's TPE would draw points again)."""
    if any(d.kind != "choice" for d in search.space):
        return None
    return math.prod(len(d.values) for d in search.space)


def optuna_row(study: Study) -> str:
    return f"{study.method}-optuna"


def optuna_trials(search: Search, profile: str, study: Study, records: StoragePath,
                  overrides: dict[str, Any] | None = None) -> list[Trial]:
    """The trials an Optuna search of this study has started so far (their records), in the order they started:
    the same study's fields, any point."""
    from fda_ray.experiments.records import TRIAL_FILE, _parsed_trial

    base = study_base(search, profile, study, overrides)
    found = []
    for f in records.glob(f"{optuna_row(study)}-*/{TRIAL_FILE}"):
        t, why = _parsed_trial(f.parent)
        if t is None:  # damaged by hand or a crash: kept as it is, not handed to the study as a point it tried
            print(f"warning: trial {f.parent.name}: its {TRIAL_FILE} is damaged ({why}); left out of the study",
                  file=sys.stderr)
            continue
        if t.row != optuna_row(study) or t.value is None or not math.isclose(t.value, study.value):
            continue
        if point_trial(base, t.row, search.variable, study.value, point_of(search, t.params)).key == t.key:
            found.append((_started_at(f.parent), t.key, t))
    return [t for *_, t in sorted(found, key=lambda x: x[:2])]


def _started_at(record: StoragePath) -> float:
    """When a trial first started, as its record says (nodes.json's first attempt): the study's order, which ties
    between points follow. A file's mtime changes when a folder is copied (cp -r, rsync, a store), and with it the
    selection; it is the fallback only for a record without that note."""
    from fda_ray.experiments.records import NODES_FILE, TRIAL_FILE

    try:
        return float(json.loads((record / NODES_FILE).read_text())[0]["started_at"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return (record / TRIAL_FILE).mtime()


def point_of(search: Search, params: dict[str, Any]) -> dict[str, Any]:
    """The searched knobs' values in a trial's params."""
    out = {}
    for d in search.space:
        if "." in d.name:
            fam, name = d.name.split(".", 1)
            out[d.name] = params.get("params", {}).get(fam, {}).get(name)
        else:
            out[d.name] = params.get(d.name)
    return out


def rerun_trials(search: Search, profile: str, study: Study, selected: Trial, seeds: int,
                 overrides: dict[str, Any] | None = None) -> list[Trial]:
    """The selected trial's configuration on fresh seeds (the same key whichever rule selected it)."""
    return [point_trial({**selected.params, "seed": s}, f"{study.method}-selected", search.variable, study.value, {})
            for s in range(RERUN_SEED0, RERUN_SEED0 + seeds)]


def reference_trials(search: Search, profile: str, study_value: float, seeds: int,
                     overrides: dict[str, Any] | None = None) -> list[Trial]:
    """The search's reference rows (not searched) at one setting, on the reruns' seeds."""
    base = base_fields(search, profile, overrides)
    return [point_trial(merge_fields(base, {"method": ref.method, "seed": s}, search.value_fields_of(study_value),
                                     ref.params), ref.key, search.variable, study_value, {})
            for ref in search.references for s in range(RERUN_SEED0, RERUN_SEED0 + seeds)]


# ---------------------------------------------------------------- records

def is_stopped(record: StoragePath) -> bool:
    return (record / STOPPED_FILE).is_file()


def is_settled(record: StoragePath) -> bool:
    """Finished, or stopped early by the scheduler: not run again on --resume."""
    return is_done(record) or is_stopped(record)


def mark_stopped(record: StoragePath) -> bool:
    """A trial the scheduler stopped: its rows so far (from its last round's state) go to stopped.json, with
    whether they are all of its rows (a rung can fall on a trial's last report: ASHA then stops a trial that had
    trained every round, before it wrote rows.json; such a trial counts as finished). Returns that."""
    from fda_ray.algorithms import ALGORITHMS
    from fda_ray.experiments.records import _save_json, environment, load_state, read_trial

    if is_done(record):
        return True
    state = load_state(record)
    rows = list(state["rows"]) if state is not None else []
    cfg = read_trial(record).config().resolved()
    complete = len(rows) >= ALGORITHMS.get(cfg.method).planned_rounds(cfg)
    _save_json({"rows": rows, "stopped_after": rows[-1]["round"] if rows else None, "complete": complete,
                "config": cfg.to_dict(), "environment": environment()}, record / STOPPED_FILE)
    return complete


def read_stopped(record: StoragePath) -> tuple[dict | None, str | None]:
    """(stopped.json's contents with its rows a list, None), or (None, why it cannot be read); reads only."""
    from fda_ray.core.user_files import DamagedFileError, read_json

    try:
        data = nonfinite_back(read_json(record / STOPPED_FILE, STOPPED_FILE, dict))
    except DamagedFileError as e:
        return None, e.why
    if not isinstance(data.get("rows"), list):
        return None, "it lacks its rows"
    return data, None


def trial_rows(record: StoragePath) -> tuple[list[dict], bool] | None:
    """(rows, finished) of a settled trial; None if it has not settled."""
    if is_done(record):
        return read_rows(record)["rows"], True
    if is_stopped(record):
        data, why = read_stopped(record)
        if data is not None:
            return list(data["rows"]), bool(data.get("complete"))
        kept = keep_aside(record / STOPPED_FILE, "damaged")  # kept aside, never deleted: the trial runs again
        print(f"warning: trial {record.name}: its {STOPPED_FILE} is damaged ({why}); kept as {kept.name}, "
              "the trial runs again", file=sys.stderr)
    return None


# ---------------------------------------------------------------- selection and results

def study_table(search: Search, trials: Sequence[Trial], records: StoragePath) -> dict[str, Any]:
    """Per trial: its point, status and final metrics; per rule: the selected trial's key (None if none)."""
    entries, candidates = [], []
    for t in trials:
        got = trial_rows(records / t.key)
        status = "to run" if got is None else ("finished" if got[1] else "stopped")
        rows = got[0] if got else []
        entry = {"key": t.key, "point": point_of(search, t.params), "status": status,
                 "rounds": rows[-1]["round"] if rows else None}
        for rule in search.rules:
            entry[RULES[rule].metric] = final_value(rows, RULES[rule].metric)
        entry["accuracy"] = final_value(rows, "accuracy")
        entries.append(entry)
        if got is not None:
            candidates.append((t.key, rows, got[1]))
    return {"trials": entries, "selected": {rule: select(candidates, rule) for rule in search.rules}}


def rerun_accuracies(trials: Sequence[Trial], records: StoragePath) -> list[float]:
    """Final test accuracies (%) of the finished trials."""
    out = []
    for t in trials:
        if is_done(records / t.key):
            v = final_value(read_rows(records / t.key)["rows"], "accuracy")
            if v is not None:
                out.append(100 * v)
    return out


def _fmt_point(point: dict[str, Any]) -> str:
    return ", ".join(f"{k.split('.')[-1]} {v:.4g}" if isinstance(v, float) else f"{k.split('.')[-1]} {v}"
                     for k, v in point.items())


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) < 2:
        return f"{values[0]:.2f}"
    from fda_ray.experiments.tables import mean_ci

    m, half, _ = mean_ci(values)
    return f"{m:.2f} ± {half:.2f} (n={len(values)})"  # the 95 % confidence half-width, as collect prints it


def resume_hint(command: str) -> str:
    """How to go on with an interrupted search: its command with --resume, or (a Python search() call) the call."""
    if command.startswith("fda_ray.search.search("):
        return f"`{command}` again with the same out (settled trials are kept)"
    return f"`{command} --resume`"


def summarize(search: Search, profile: str, tables: dict[str, dict], reruns: dict[str, dict[str, list[float]]],
              references: dict[float, dict[str, list[float]]], command: str, num_samples: int, scheduler: str,
              search_alg: str, ran: Manifest | None = None) -> str:
    """summary.md of a search; `ran`: its sweep.json (what the command or the search() call changed)."""
    from fda_ray.experiments.summary import changed_by, sentence

    lines = [f"# Search `{search.name}` ({profile} profile)", "",
             (f"{search.note[0].upper() + search.note[1:]}. " if search.note else "")  # (a file's note is optional)
             + f"Space: {'; '.join(d.describe() for d in search.space)}; "
             f"{num_samples} trials a study ({search_alg} search, scheduler {scheduler} on the first rule's metric).",
             "", *([f"Profile `{profile}`: {sentence(search.profiles[profile].note)}{changed_by(command, ran)}", ""]
                   if search.profiles[profile].note else []),
             "Selection rules: " + "; ".join(f"**{r}**: {RULES[r].label} (`{RULES[r].metric}`)" for r in search.rules)
             + ". The oracle reads the target's test labels: an upper bound, not a result.", "",
             f"Per setting: each rule's selected configuration, the search's final value of the rule's validation "
             f"metric (for the oracle: of the first rule's) and of the test accuracy (%, seed 0), and the test accuracy "
             f"of the configuration rerun on seeds {RERUN_SEED0}..{RERUN_SEED0 + search.rerun_seeds - 1} (mean ± the 95 % "
             f"confidence half-width over seeds, Student's t): "
             f"the number to report.", "",
             f"Command: `{command}`", ""]
    for value in search.values:
        studies_here = [(k, t) for k, t in tables.items() if math.isclose(t["value"], value)]
        if not studies_here:
            continue
        lines += [f"## {search.value_label(value)}", "",
                  "| method | rule | selected | search's final validation | search's final test | rerun test accuracy |",
                  "|---|---|---|---|---|---|"]
        for name, table in studies_here:
            by_key = {e["key"]: e for e in table["trials"]}
            for rule in search.rules:
                key = table["selected"].get(rule)
                e = by_key.get(key) if key else None
                label = RULES[rule].label
                if e is None:
                    lines.append(f"| {table['method']} | {label} | none finished | - | - | - |")
                    continue
                val = e.get(RULES[rule].metric) if not RULES[rule].oracle else e.get(RULES[search.rules[0]].metric)
                lines.append(f"| {table['method']} | {label} | {_fmt_point(e['point'])} | "
                             f"{'-' if val is None else f'{100 * val:.2f}'} | {100 * e['accuracy']:.2f} | "
                             f"{_cell(reruns.get(name, {}).get(rule, []))} |")
        for ref, accs in references.get(value, {}).items():
            label = next(r.label for r in search.references if r.key == ref)
            lines.append(f"| {label} | (not searched) | - | - | - | {_cell(accs)} |")
        lines.append("")
        for name, table in studies_here:
            done = sum(e["status"] == "finished" for e in table["trials"])
            stopped = sum(e["status"] == "stopped" for e in table["trials"])
            lines += [f"Study {name}: {len(table['trials'])} trials, {done} finished, {stopped} stopped early by "
                      f"the scheduler.", ""]
    return "\n".join(lines) + "\n"


def trajectory_figure(search: Search, tables: dict[str, dict], stem: StoragePath) -> Any:
    """Per study: each trial's final value of the first rule's metric (a cross for a trial stopped early, at its
    last round) and its test accuracy, in trial order, with the best-so-far line of the validation; under it, the
    point each trial tried (a line per searched knob: beta, the learning rates, ...), so a reader sees which values
    the search drew and where the best one lies."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fda_ray.experiments.figures import Drawn, _save

    metric = RULES[search.rules[0]].metric
    names = list(tables)
    fig, axes = plt.subplots(2, len(names), figsize=(max(7.0, 4.6 * len(names)), 6.2), squeeze=False, sharex="col",
                             gridspec_kw={"height_ratios": (3, 2)})
    drawn = Drawn()
    for j, name in enumerate(names):
        ax = axes[0, j]
        trials = tables[name]["trials"]
        xs = list(range(len(trials)))
        val = [None if e.get(metric) is None else 100 * e[metric] for e in trials]
        test = [None if e.get("accuracy") is None else 100 * e["accuracy"] for e in trials]
        for i, e in enumerate(trials):
            if val[i] is None:
                continue
            ax.plot([i], [val[i]], "x" if e["status"] == "stopped" else "o", color="C0", ms=5)
            ax.plot([i], [test[i]], "x" if e["status"] == "stopped" else "s", color="C1", ms=4, alpha=0.6)
        finished_val = [v if e["status"] == "finished" else None for v, e in zip(val, trials)]
        ax.step(xs, [math.nan if v is None else v for v in best_so_far(finished_val)], where="post", color="C0",
                label=f"best {RULES[search.rules[0]].label} so far")
        ax.plot([], [], "o", color="C0", label=f"{metric} (final round)")
        ax.plot([], [], "s", color="C1", label="test accuracy (oracle's view)")
        ax.plot([], [], "x", color="k", label="stopped early (last round)")
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3)
        drawn.series[name] = [e["key"] for e in trials]
        low = axes[1, j]
        drawn.series[f"{name}: point"] = []
        for k, dim in enumerate(search.space):
            ys = [(e.get("point") or {}).get(dim.name) for e in trials]
            if not any(isinstance(y, (int, float)) for y in ys):
                continue
            low.plot(xs, [y if isinstance(y, (int, float)) else math.nan for y in ys], marker="D", ms=4,
                     linestyle=":", color=f"C{k + 2}", label=dim.name)
            drawn.series[f"{name}: point"].append(dim.name)
        if any(d.kind == "loguniform" for d in search.space) or all(
                d.kind == "choice" and all(isinstance(v, (int, float)) and v > 0 for v in d.values)
                and max(d.values) / min(d.values) >= 20 for d in search.space):
            low.set_yscale("log")
        low.set_xlabel("trial (search order)")
        low.grid(alpha=0.3)
        low.legend(fontsize=8, frameon=False)
    axes[0, 0].set_ylabel("accuracy (%)")
    axes[1, 0].set_ylabel("the trial's point")
    axes[0, -1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False, fontsize=8)
    fig.suptitle(f"Search {search.name}: the trajectory of each study")
    fig.tight_layout(rect=(0, 0, 1, 0.95))  # the panels' titles clear the figure's
    return _save(fig, stem, drawn)


def result_rows(search: Search, trial: Trial, phase: str, study: str, rows: list[dict], finished: bool,
                record: StoragePath | None = None) -> list[dict]:
    """A settled trial's rows for results.parquet: its identity in the search, its rounds, then (from its `record`'s
    rows.json or stopped.json) the rest of its resolved RunConfig and the build that recorded it, as a grid sweep's
    results.parquet and fda_ray.results.load carry them."""
    ident = {k: v for k, v in trial.params.items() if k != "params"}
    ident["params"] = json.dumps(trial.params.get("params", {}), sort_keys=True) if trial.params.get("params") else None
    ident.update(search=search.name, study=study, search_phase=phase, trial=trial.key, row=trial.row,
                 setting_variable=search.variable, setting_value=trial.value, finished=finished,
                 **{f"point.{k}": v for k, v in point_of(search, trial.params).items()})
    out = [{**ident, **r} for r in rows]
    data = _record_data(record) if record is not None else None
    if data and isinstance(data.get("config"), dict):
        from fda_ray.experiments.records import config_columns

        extra = config_columns({**data, "rows": rows}, skip=set(ident))
        out = [{**r, **{k: v for k, v in extra.items() if k not in r}} for r in out]
    return out


def _record_data(record: StoragePath) -> dict | None:
    """A settled trial's rows.json, else its stopped.json (both name its config and build); None where neither reads."""
    try:
        if is_done(record):
            return read_rows(record)
        data, _ = read_stopped(record)
        return data
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- running

SEARCH_ALGS = ("random", "optuna")


def search(name: str | Search, *, profile: str = "quick", out: str | Path | None = None,
           num_samples: int | None = None, scheduler: str = "asha", search_alg: str = "random",
           methods: Sequence[str] | None = None, values: Sequence[float] | None = None,
           max_concurrent: int | None = None, max_failures: int = 2, address: str | None = None,
           rerun_seeds: int | None = None, verbose: bool = False, **fields: Any) -> dict[str, Any]:
    """The same as `python -m fda_ray.sweep --search NAME` from Python (on Ray Tune), with its checks: `fields` are
    RunConfig fields over every trial's (data_dir="...", rounds=10); rerun_seeds as --rerun-seeds; quiet as the
    command is (fda-ray's progress lines, not Tune's tables and hints; verbose=True: Ray's and Tune's own output,
    as --verbose). A call again
    with the same `out` goes on (settled trials are kept), as --resume does; a folder holding another search, or this
    one's trials under other settings, is a one-line ValueError. Returns selection.json's contents.

        from fda_ray.experiments.search import search
        sel = search("beta", num_samples=24, values=[0.6], out="sweeps/beta-0.6")
        sel["studies"]["fedgp @ noise 0.6"]["selected"]["target_val"]
    """
    import dataclasses

    from fda_ray.core import locks
    from fda_ray.core.config import config_names
    from fda_ray.experiments.arguments import SCHEDULERS, held_by_another, tune_defaults

    s = load_search(name) if isinstance(name, str) else name
    # the arguments checked as the command checks its flags, each in one line (a string was read letter by letter,
    # an unknown field or a number for a list raised Python's own TypeError)
    for field_name, given, kind in (("methods", methods, str), ("values", values, (int, float))):
        if given is not None and (isinstance(given, (str, bytes)) or not isinstance(given, Sequence) or not all(
                isinstance(x, kind) and not isinstance(x, bool) for x in given)):
            example = "['fedgp']" if field_name == "methods" else "[0.6]"
            what = "names" if field_name == "methods" else "numbers"
            raise ValueError(f"{field_name}={given!r} is invalid: a list of {what} ({field_name}={example})")
    if not isinstance(max_failures, int) or isinstance(max_failures, bool) or max_failures < 0:
        raise ValueError(f"max_failures={max_failures!r} is invalid: an integer >= 0")
    known = set(config_names())
    for field_name in fields:
        if field_name not in known:
            raise ValueError(f"{field_name}={fields[field_name]!r} is invalid: not a RunConfig field"
                             f"{did_you_mean(field_name, sorted(known))}")
    if out is not None and not storage_path(out).is_dir() and storage_path(out).exists():
        raise ValueError(f"out={str(out)!r} is invalid: it is a file, not a directory")
    out = storage_path(out or f"sweeps/search-{s.name}-{profile}")
    if profile not in s.profiles:
        raise ValueError(f"profile={profile!r} is invalid: search {s.name!r} has {', '.join(s.profiles)}")
    for field_name, n in (("num_samples", num_samples), ("rerun_seeds", rerun_seeds), ("max_concurrent", max_concurrent)):
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ValueError(f"{field_name}={n!r} is invalid: an integer >= 1")
    for field_name, n, most in (("num_samples", num_samples, MAX_SAMPLES), ("rerun_seeds", rerun_seeds, MAX_SEEDS)):
        if n is not None and n > most:  # (as the command's check_counts)
            raise ValueError(f"{field_name}={n!r} is invalid: an integer from 1 to {most}")
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler={scheduler!r} is invalid: one of {', '.join(SCHEDULERS)}")
    if search_alg not in ("random", "optuna"):
        raise ValueError(f"search_alg={search_alg!r} is invalid: one of random, optuna")
    if rerun_seeds is not None:
        s = dataclasses.replace(s, rerun_seeds=rerun_seeds)
    studies(s, methods, values)  # (checked)
    overrides = dict(fields)
    tune_defaults(overrides, address)  # GPU clients or a cluster: client actors, as the command (they trained on CPU)
    if why := held_by_another(out, "search", s.name, s):
        raise ValueError(f"out={str(out)!r} is invalid for search {s.name!r}: {why}")
    # the call as written (its summary's Command: line; what it changed is read from its sweep.json)
    given = {"profile": profile, "methods": list(methods) if methods else None,
             "values": list(values) if values else None, "num_samples": num_samples, "rerun_seeds": rerun_seeds,
             **fields}
    command = f"fda_ray.search.search({s.name!r}, " + ", ".join(f"{k}={v!r}" for k, v in given.items()
                                                              if v is not None) + ")"
    existed = out.exists()
    try:
        with locks.held(out, "out", command):  # one writer per `out`, as the command (a LockedError: a ValueError)
            return _search_locked(s, out, command, profile, methods, values, overrides, num_samples, rerun_seeds,
                                  search_alg, verbose, max_concurrent, max_failures, scheduler, address)
    except ValueError:
        # a call refused before any work leaves no folder behind (the lock made it; it holds nothing else then)
        if not existed and out.local is not None:
            with contextlib.suppress(OSError):
                out.local.rmdir()
        raise


def _search_locked(s: Search, out: StoragePath, command: str, profile: str, methods: Sequence[str] | None,
                   values: Sequence[float] | None, overrides: dict[str, Any], num_samples: int | None,
                   rerun_seeds: int | None, search_alg: str, verbose: bool, max_concurrent: int | None,
                   max_failures: int, scheduler: str, address: str | None) -> dict[str, Any]:
    """search()'s work once it holds `out`'s lock."""
    from fda_ray.experiments.arguments import search_chunk
    from fda_ray.experiments.console import quiet
    from fda_ray.experiments.manifest import Manifest, read as read_manifest, write as write_manifest

    # a call again goes on as --resume does: every call's studies (search_chunk), never fewer trials a study
    manifest = search_chunk(read_manifest(out), Manifest(
        kind="search", name=s.name, profile=profile, rows=tuple(methods) if methods else None,
        values=tuple(float(v) for v in values) if values else None, overrides=overrides, command=command), s)
    methods, values = manifest.rows, manifest.values
    plan = studies(s, methods, values)
    s, num_samples = kept_counts(s, out, num_samples or s.num_samples[profile],
                                 {"num_samples": num_samples, "rerun_seeds": rerun_seeds})
    search_trials(s, profile, plan[0], 1, overrides)  # the fields checked as a trial's (one line)
    if why := changed_search_settings(s, profile, plan, num_samples, overrides, out / "trials", search_alg):
        raise ValueError(f"out={str(out)!r} is invalid for search {s.name!r}: {why}")
    if not isinstance(verbose, bool):
        raise ValueError(f"verbose={verbose!r} is invalid: True or False")
    quiet(verbose)  # (Tune printed its configuration boxes and hints from Python, where the command prints none)
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out, manifest)  # (collect and a later call read it)
    code = run_search(s, profile=profile, out=out, num_samples=num_samples, backend="tune",
                      workers=None, max_concurrent=max_concurrent, max_failures=max_failures, scheduler=scheduler,
                      search_alg=search_alg, methods=methods, values=values, overrides=overrides,
                      address=address, command=command)
    if code == 130:
        raise KeyboardInterrupt(f"search {s.name} interrupted: call again to go on (settled trials are kept)")
    return json.loads((out / "selection.json").read_text())


def run_search(search: Search, *, profile: str, out: StoragePath, num_samples: int, backend: str, workers: int | None,
               max_concurrent: int | None, max_failures: int, scheduler: str, search_alg: str,
               methods: Sequence[str] | None, values: Sequence[float] | None, overrides: dict[str, Any],
               address: str | None, command: str, no_figures: bool = False, pin_drivers: bool = False,
               fuse: int = 1, serve: int | None = None) -> int:
    """Run (or go on with) a search; returns the exit code (0 all done, 1 a trial failed, 130 interrupted).
    `out`: a local or shared directory, or an object store URI (fda_ray.core.storage). fuse > 1: trials run in fused
    groups of up to `fuse` (fda_ray.runtime.fusion) where nothing stops single trials (the local backend, the
    reruns); a study under ASHA or Optuna keeps each trial a Tune trial of its own, its clients' training fused
    with the other trials' on a fusion server (fda_ray.runtime.fusion_server) shared by up to `serve` trials
    (default `fuse`; 1: not served)."""
    from fda_ray.core import locks, store_locks
    from fda_ray.experiments.backends import Progress, run_local, run_tune

    out = storage_path(out)
    # (the command's lock or lease, or search()'s)
    locked = locks.still_held(out) if out.is_local else store_locks.holding(out.uri)
    records = out / "trials"
    records.mkdir(parents=True, exist_ok=True)
    write_definition(search, out / "search.yaml")  # what ran, beside its records
    for line in set_aside_damaged(records).values():  # an unreadable record: that trial runs again, others kept
        print(line, file=sys.stderr)
    plan = studies(search, methods, values)
    t0 = time.time()
    failures: list[dict] = []
    interrupted = False
    metric = RULES[search.rules[0]].metric
    serve = fuse if serve is None else serve
    search_by_study: dict[str, list[Trial]] = {}
    try:
        # 1. the searches, a study at a time (ASHA compares the trials of one study only)
        for study in plan:
            name = study.name(search)
            if search_alg == "optuna":  # Bayesian (TPE): the points come from Optuna as trials finish
                trials, f, interrupted = _optuna_study(search, profile, study, num_samples, overrides, records, out,
                                                       address, max_concurrent, max_failures, scheduler, metric,
                                                       pin_drivers, serve)
                failures += f
                search_by_study[name] = trials
                if interrupted:
                    raise KeyboardInterrupt
                continue
            trials = search_trials(search, profile, study, num_samples, overrides)
            pending = [t for t in trials if not is_settled(records / t.key)]
            print(f"study {name}: {len(trials)} trials, {len(trials) - len(pending)} settled before", flush=True)
            if pending:
                progress = Progress(len(pending), search.variable)
                if backend == "local":
                    failures += run_local(pending, records, workers or 1, max_failures, progress, fuse=fuse)
                else:
                    f, interrupted = run_tune(pending, records, out, address, max_concurrent, max_failures,
                                              progress, scheduler=scheduler_for(search, scheduler, metric, trials),
                                              metric=metric, on_stopped=mark_stopped, pin_drivers=pin_drivers,
                                              fuse=fuse, serve=serve)
                    failures += f
            search_by_study[name] = trials
            if interrupted:
                raise KeyboardInterrupt
        # 2. the reruns of every rule's selection, and the references, on fresh seeds
        reruns: list[Trial] = []
        for study in plan:
            table = study_table(search, search_by_study[study.name(search)], records)
            by_key = {t.key: t for t in search_by_study[study.name(search)]}
            for rule, key in table["selected"].items():
                if key is not None:
                    reruns += rerun_trials(search, profile, study, by_key[key], search.rerun_seeds, overrides)
        for v in dict.fromkeys(s.value for s in plan):
            reruns += reference_trials(search, profile, v, search.rerun_seeds, overrides)
        reruns = list({t.key: t for t in reruns}.values())
        pending = [t for t in reruns if not is_done(records / t.key)]
        print(f"reruns: {len(reruns)} trials (selected configurations and references), "
              f"{len(reruns) - len(pending)} done before", flush=True)
        if pending:
            progress = Progress(len(pending), search.variable)
            if backend == "local":
                failures += run_local(pending, records, workers or 1, max_failures, progress, fuse=fuse)
            else:
                f, interrupted = run_tune(pending, records, out, address, max_concurrent, max_failures, progress,
                                          pin_drivers=pin_drivers, fuse=fuse)
                failures += f
                if interrupted:
                    raise KeyboardInterrupt
    except KeyboardInterrupt:
        interrupted = True
    if locked and not out.is_local and not locks.still_held(out):  # a store's lease taken over mid-search
        print(f"error: out={str(out)!r} was taken over by another search while this one ran (this one was not heard "
              "from for minutes): its trials' records are kept there; no selection is made over the other's. When "
              f"it has ended, resume with: {command} --resume", file=sys.stderr)
        return 1
    if locked and not locks.still_held(out):  # --out moved mid-search: no selection over part of it
        print(f"error: out={str(out)!r} was removed, moved or replaced while the search ran (its lock file is gone): "
              "the records of the trials that finished before are wherever the folder went, the later ones in "
              f"{records}; no selection is made over a part of them. Put the records back into one folder, then "
              f"resume with: {command} --resume", file=sys.stderr)
        return 1
    return report(search, profile, out, plan, search_by_study, num_samples, scheduler, search_alg, overrides,
                  command, failures, interrupted, time.time() - t0, no_figures)


def _optuna_study(search: Search, profile: str, study: Study, num_samples: int, overrides: dict[str, Any],
                  records: StoragePath, out: StoragePath, address: str | None, max_concurrent: int | None, max_failures: int,
                  scheduler: str, metric: str, pin_drivers: bool = False, fuse: int = 1
                  ) -> tuple[list[Trial], list[dict], bool]:
    """One study searched by Optuna's TPE through Tune. The trials settled before (--resume) are told to Optuna
    as evaluated points (a trial ASHA stopped with its last value), and only the rest of num_samples run."""
    from fda_ray.experiments.backends import Progress
    from fda_ray.experiments.tune import run_optuna

    recorded = optuna_trials(search, profile, study, records, overrides)
    before = [t for t in recorded if is_settled(records / t.key)]
    cut_off = [t for t in recorded if not is_settled(records / t.key)]  # (an interrupted launch's: to go on)
    points, rewards = [], []
    for t in before:
        rows, _ = trial_rows(records / t.key)
        v = final_value(rows, metric)
        if v is not None:
            points.append(point_of(search, t.params))
            rewards.append(v)
    points_in_space = space_points(search)
    if points_in_space is not None and num_samples > points_in_space:  # (Optuna drew points again: trials
        num_samples = points_in_space  # "done" that the study did not hold, and a resume launched Tune again)
    todo = max(0, num_samples - len(before))
    print(f"study {study.name(search)}: {num_samples} trials (Optuna"
          f"{f'; its space has {points_in_space} points' if points_in_space == num_samples else ''}), "
          f"{len(before)} settled before", flush=True)
    failures: list[dict] = []
    interrupted = False
    if todo:
        base = study_base(search, profile, study, overrides)
        probe = corner_trials(search, profile, study, overrides)  # (Optuna's points are not known: the space's corners)
        failures, interrupted = run_optuna(
            search.space, base, optuna_row(study), search.variable, study.value, todo, metric, records, out,
            address, max_concurrent, max_failures, Progress(todo, search.variable),
            scheduler_for(search, scheduler, metric, probe), mark_stopped, points, rewards,
            seed=len(before), pin_drivers=pin_drivers, fuse=fuse,
            again=_first_points(search, cut_off, recorded, todo, num_samples == points_in_space))
    # the study's trials: the settled ones first (a trial cut off and never continued took a finished one's place)
    recorded = optuna_trials(search, profile, study, records, overrides)
    settled = [t for t in recorded if is_settled(records / t.key)]
    return (settled + [t for t in recorded if t not in settled])[:num_samples], failures, interrupted


def _first_points(search: Search, cut_off: list[Trial], recorded: list[Trial], todo: int, whole: bool) -> list[dict]:
    """The points an Optuna launch runs first: the trials an interruption cut off (each goes on from its last
    round), then, where the study is its whole space of choices (`whole`), every point not yet tried (TPE's random
    start could draw a point twice, and the study would end short of its space)."""
    first = [point_of(search, t.params) for t in cut_off]
    if whole:
        tried = [point_of(search, t.params) for t in recorded]
        names = [d.name for d in search.space]
        first += [p for p in (dict(zip(names, c)) for c in itertools.product(*[d.values for d in search.space]))
                  if p not in tried]
    return first[:todo]


def corner_trials(search: Search, profile: str, study: Study, overrides: dict[str, Any] | None = None,
                  limit: int = 256) -> list[Trial]:
    """The study's trials at the corners of its space (every choice, each bound of a range; at most `limit`): the
    points a field such as warmup_rounds or rounds takes its extremes at, for what every point must fit (ASHA's
    max_t, the bounds' checks) when the points themselves are not known yet (Optuna draws them as it goes)."""
    base = study_base(search, profile, study, overrides)
    names = [d.name for d in search.space]
    corners = itertools.product(*[(d.values if d.kind == "choice" else (d.low, d.high)) for d in search.space])
    return [point_trial(base, f"{study.method}-corner", search.variable, study.value, dict(zip(names, c)))
            for c in itertools.islice(corners, limit)]


def scheduler_for(search: Search, scheduler: str, metric: str, trials: Sequence[Trial]) -> Any:
    if scheduler == "none":
        return None
    from fda_ray.algorithms import ALGORITHMS
    from fda_ray.experiments.tune import asha

    # ASHA stops a trial that reaches max_t reports: one more than the longest trial reports (a searched knob may
    # set the rounds: warmup_rounds, rounds), so that only its rungs stop trials (stopped at max_t, a trial would be
    # ended between its last report and writing rows.json, and left out of every rule as unfinished)
    cfgs = [t.config().resolved() for t in trials]
    max_t = max(ALGORITHMS.get(c.method).planned_rounds(c) for c in cfgs) + 1
    return asha(metric, max_t=max_t, grace_period=search.grace_period, reduction_factor=search.reduction_factor)


def report(search: Search, profile: str, out: StoragePath, plan: list[Study], search_by_study: dict[str, list[Trial]],
           num_samples: int, scheduler: str, search_alg: str, overrides: dict[str, Any], command: str,
           failures: list[dict], interrupted: bool, wall: float, no_figures: bool) -> int:
    """selection.json, results.parquet, summary.md and the trajectory figure from whatever has settled."""
    from fda_ray.experiments.backends import failure_advice, write_parquet

    out = storage_path(out)
    records = out / "trials"
    tables: dict[str, dict] = {}
    reruns: dict[str, dict[str, list[float]]] = {}
    references: dict[float, dict[str, list[float]]] = {}
    rows: list[dict] = []
    selected_by: dict[str, list[str]] = {}  # trial key -> the rules that chose it (its search trial and reruns)
    for study in plan:
        name = study.name(search)
        trials = search_by_study.get(name) or (
            optuna_trials(search, profile, study, records, overrides) if search_alg == "optuna"
            else search_trials(search, profile, study, num_samples, overrides))
        table = study_table(search, trials, records)
        table.update(method=study.method, value=study.value)
        tables[name] = table
        for t in trials:
            got = trial_rows(records / t.key)
            if got is not None:
                rows += result_rows(search, t, "search", name, got[0], got[1], records / t.key)
        by_key = {t.key: t for t in trials}
        for rule, key in table["selected"].items():
            if key is None:
                continue
            selected_by.setdefault(key, []).append(rule)
            rt = rerun_trials(search, profile, study, by_key[key], search.rerun_seeds, overrides)
            for t in rt:
                selected_by.setdefault(t.key, []).append(rule)
            reruns.setdefault(name, {})[rule] = rerun_accuracies(rt, records)
            table.setdefault("reruns", {})[rule] = [t.key for t in rt]
            for t in rt:  # (a configuration two rules selected: its rows once, deduplicated below)
                if is_done(records / t.key):
                    rows += result_rows(search, t, "rerun", name, read_rows(records / t.key)["rows"], True,
                                        records / t.key)
    for v in dict.fromkeys(s.value for s in plan):
        refs = reference_trials(search, profile, v, search.rerun_seeds, overrides)
        for ref in search.references:
            mine = [t for t in refs if t.row == ref.key]
            references.setdefault(v, {})[ref.key] = rerun_accuracies(mine, records)
            for t in mine:
                if is_done(records / t.key):
                    rows += result_rows(search, t, "rerun", f"reference @ {search.value_label(v)}",
                                        read_rows(records / t.key)["rows"], True, records / t.key)
    rows = list({(r["trial"], r["study"], r["round"], r.get("phase"), r["search_phase"]): r for r in rows}.values())
    for r in rows:  # which rules chose the trial (a configuration two rules chose is one trial: its rows once)
        r["selected_by"] = ",".join(selected_by[r["trial"]]) if r["trial"] in selected_by else None
    if rows:
        write_parquet(rows, out / "results.parquet")
    (out / "selection.json").write_text(json.dumps({"search": search.name, "profile": profile, "num_samples": num_samples,
                               "rerun_seeds": search.rerun_seeds,
                               "scheduler": scheduler, "search_alg": search_alg, "studies": tables,
                               "reruns": reruns, "references": {f"{k:g}": v for k, v in references.items()},
                               "failures": failures}, indent=1, default=str) + "\n")
    from fda_ray.experiments.manifest import read as read_manifest

    text = summarize(search, profile, tables, reruns, references, command, num_samples, scheduler, search_alg,
                     read_manifest(out))
    if failures:
        text += f"\n## Failed trials ({len(failures)})\n\n" + "\n".join(
            f"- {f['trial']} ({f['attempts']} attempts): {f['error']}" for f in failures) + "\n"
    if interrupted:
        text += f"\n**Interrupted**: continue with {resume_hint(command)}.\n"
    text += f"\nWall time of this launch: {wall:.0f} s.\n"
    if not no_figures and any(e["status"] != "to run" for t in tables.values() for e in t["trials"]):
        trajectory_figure(search, tables, out / "trajectory")
        text += "\n![trajectory](trajectory.png)\n"
    (out / "summary.md").write_text(text)  # atomic
    print(text)
    if interrupted:
        print(f"interrupted; resume with: {command} --resume", file=sys.stderr)
        return 130
    done = sum(1 for _ in records.glob(f"*/{ROWS_FILE}")) if records.exists() else 0
    for line in failure_advice(failures, done, str(records), command):
        print(line, file=sys.stderr)
    return 1 if failures else 0
