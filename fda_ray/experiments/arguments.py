"""The command line of a grid sweep or a search (`python -m fda_ray.sweep`): its parser, and the checks of its
arguments that both modes make before anything runs (the counts, the backend, --plan-for, the comma lists).

One parser, here and not in the command, because two readers need it: the sweep command (fda_ray.experiments.sweep)
parses its own arguments with it, and a reader of a results directory from before manifests (`manifest_of`:
fda_ray.collect, the results pages) learns what the directory ran by parsing summary.md's `Command:` line with the
same parser, never a copy of it. Nothing here runs a trial, starts Ray or writes a file.
"""
from __future__ import annotations

import dataclasses
import math
import shlex
from pathlib import Path
from typing import Any, Sequence

from fda_ray.core import plugins
from fda_ray.core.parsing import OneLineParser
from fda_ray.core.registry import did_you_mean
from fda_ray.core.storage import StoragePath, storage_path
from fda_ray.experiments import stranded
from fda_ray.experiments.cli import add_config_arguments, config_fields
from fda_ray.experiments.manifest import Manifest, read as read_manifest
from fda_ray.experiments.trials import MAX_SAMPLES, MAX_SEEDS
from fda_ray.papers.grids import GRIDS
from fda_ray.papers.searches import SEARCHES

# the command's description (--help's first line): fda_ray.experiments.sweep's docstring's first line
DESCRIPTION = "Sweeps of a named grid (fda_ray.papers.grids), on a laptop or a cluster, with results people can read."
BACKENDS = ("tune", "local")
SCHEDULERS = ("asha", "none")


class SweepError(ValueError):
    """Bad sweep arguments: the message is the one line the CLI prints."""


def tune_defaults(overrides: dict[str, Any], address: str | None) -> None:
    """Tune on GPU shares or a cluster: clients as Ray actors, where they have somewhere to go (else each trial
    trains its clients in its own process: a laptop), and with GPU clients a driver that aggregates and evaluates on
    its node's GPU. The actors' sizes and requests are fda_ray.runtime.resources' plan. Fields the user set stay as
    set. (The command on Tune, and search() from Python.)"""
    import os

    if not ((overrides.get("gpus_per_client") or 0) > 0 or address or os.environ.get("RAY_ADDRESS")):
        return
    overrides.setdefault("executor", "ray")
    if (overrides.get("gpus_per_client") or 0) > 0:
        overrides.setdefault("device", "cuda")


def parser() -> OneLineParser:
    p = OneLineParser(prog="python -m fda_ray.sweep", description=DESCRIPTION, command="sweep",
                      epilog="Any RunConfig field below overrides it in every trial of the sweep.")
    p.with_config_files()
    plugins.add_option(p)
    s = p.add_argument_group("sweep")
    s.add_argument("--grid", default=None, help=f"a grid file (.yaml, .yml, .json; fda_ray/papers/files.py) or one of "
                                                f"{', '.join(GRIDS)}")
    s.add_argument("--search", default=None, help=f"a hyper-parameter search instead of a grid (fda_ray.experiments.search): "
                                                  f"a search file (.yaml, .yml, .json) or one of {', '.join(SEARCHES)}")
    s.add_argument("--print-grid", nargs="?", const="yaml", default=None, choices=("yaml", "json"),
                   help="write the --grid's or --search's definition as a file (YAML, or JSON) and exit: a starting "
                        "point for a grid of your own (run it with --grid FILE)")
    s.add_argument("--num-samples", type=int, default=None, help="search: trials per study (default: the search's "
                                                                 "for the profile)")
    s.add_argument("--scheduler", default="asha", help="search: asha (stop trials early on the first selection "
                                                       "rule's per-round value) or none")
    s.add_argument("--search-alg", default="random", help="search: random (seeded points, built in) or optuna "
                                                          "(Bayesian TPE; pip install 'fda-ray[optuna]')")
    s.add_argument("--rerun-seeds", type=int, default=None, help="search: fresh seeds each selected configuration "
                                                                 "runs again on (default: the search's, 3)")
    s.add_argument("--profile", default="quick", help="quick (a laptop, minutes), paper (the seeds' settings), or another profile "
                                                       "the grid defines (code: the authors' code's settings)")
    s.add_argument("--methods", default=None, help="comma-separated table rows (e.g. fedgp_beta1) or methods "
                                                   "(fedgp: its rows the profile runs); default the profile's")
    s.add_argument("--values", default=None, help="comma-separated values of the grid variable; default all")
    s.add_argument("--seeds", type=int, default=None, help="seeds per cell (default: quick 1, paper the grid's)")
    s.add_argument("--backend", default="tune", help="tune (Ray Tune: a laptop or a cluster) or local (a "
                                                     "process pool of serial runs, no Ray)")
    s.add_argument("--workers", type=int, default=None,
                   help="local: trials at once (default: CPUs / threads); Tune runs what the resources hold")
    s.add_argument("--fuse", default="off",
                   help="fuse trials into groups that train as one computation on one device (fda_ray.runtime.fusion): "
                        "off, auto (the group size measured fastest on the device), or the most trials a group "
                        "holds; each trial keeps its own numbers and record. Fused: trials that train vectorised "
                        "(--vectorise on) with one model, device and batch sizes")
    s.add_argument("--out", default=None, help="output directory: a path (on a cluster: one every node mounts) or "
                                               "a URI such as s3://bucket/prefix (default sweeps/<grid>-<profile>)")
    s.add_argument("--address", default=None, help="tune: an existing Ray cluster (default: $RAY_ADDRESS or a "
                                                   "local Ray)")
    s.add_argument("--max-concurrent", type=int, default=None, help="tune: trials at once (default: as "
                                                                   "resources allow)")
    s.add_argument("--pin-drivers", action="store_true", help="tune: trial drivers run only on nodes that declare "
                                                              "the resource fda_driver (default: beside their clients, "
                                                              "on any node)")
    s.add_argument("--max-failures", type=int, default=2, help="retries of a failing trial")
    s.add_argument("--resume", nargs="?", const=True, default=False, type=resume_value,
                   help="continue the sweep in --out, finished trials kept; --resume auto: continue if --out holds "
                        "records, else start (a launcher's one command for a first run and a rerun)")
    s.add_argument("--new-settings", action="store_true", help="resume even though --out's trials were recorded "
                   "with other settings than this command's (a changed --rounds, another profile)")
    s.add_argument("--mix-builds", action="store_true", help="resume even though --out's finished trials were "
                                                             "recorded by another build (torch, torchvision, numpy "
                                                             "or fda-ray's number-changing code)")
    s.add_argument("--dry-run", action="store_true", help="print the trials and the resource plan (each trial's "
                                                          "bundles, how many run at once) and exit")
    s.add_argument("--plan-for", default=None, help="with --dry-run: plan for these nodes instead of this machine "
                                                    "or --address's cluster, e.g. CPU=16,GPU=1 or 3xCPU=1 or "
                                                    "CPU=8+2xCPU=48,GPU=4")
    s.add_argument("--no-figures", action="store_true", help="skip the figures")
    s.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    s.add_argument("--track", default="tensorboard", help="where every trial's per-round metrics go: a comma list "
                                                          "of tensorboard (<out>/tensorboard), mlflow, wandb, or "
                                                          "none (fda_ray.experiments.tracking)")
    s.add_argument("--verbose", action="store_true", help="show Ray's and Tune's own output (boxes, hints, INFO "
                                                          "lines), hidden by default")
    add_config_arguments(p, overrides=True, exclude=("dataset", "method", "seed"))
    for action in p._actions:  # a config file's list fills these joined by commas (fda_ray.core.config_files)
        if action.dest in ("methods", "values", "track"):  # (not --plan-for: its nodes are joined by "+")
            action.comma_list = True
    p.resolve_for_print = grid_for_print
    return p


def grid_for_print(ns: Any) -> Any:
    """--print-config of a grid sweep: the file a `--config` reads back as the same sweep. A search's own keys are
    left out (a grid sweep refuses them: check_search_only), and the output folder and the seeds a cell runs are
    the ones the sweep would use (seeds only where every planned value runs as many; a grid with more seeds for
    some columns keeps its default). A search's file is printed as it was parsed."""
    if ns.search is not None or ns.grid is None:
        return ns
    from fda_ray.experiments.trials import load_grid, select_values

    grid = load_grid(ns.grid)
    if ns.profile not in grid.profiles:
        raise SweepError(f"profile={ns.profile!r} is invalid for grid {ns.grid!r}: one of {', '.join(grid.profiles)}"
                         f"{did_you_mean(ns.profile, grid.profiles)}")
    shown = dataclasses.replace(ns) if dataclasses.is_dataclass(ns) else type(ns)(**vars(ns))
    for dest in ("search", *(o[2:].replace("-", "_") for o in SEARCH_ONLY)):
        delattr(shown, dest)
    if shown.out is None:
        shown.out = f"sweeps/{grid.name}-{shown.profile}"  # main()'s default, which is a path and stays one
    prof = grid.profiles[shown.profile]
    if shown.seeds is None:
        values = select_values(grid, _list(shown.values, float, "values") or prof.values)
        counts = {prof.seeds if prof.seeds is not None else grid.seeds_for(v) for v in values}
        if len(counts) == 1:
            shown.seeds = counts.pop()
    return shown


RESUME_WORDS = {"auto": "auto", "true": True, "yes": True, "false": False, "no": False}


def resume_value(text: str) -> Any:
    """--resume's optional value: auto, or true/false (a config file's `resume: true`)."""
    word = str(text).strip().lower()
    if word not in RESUME_WORDS:
        import argparse

        raise argparse.ArgumentTypeError(f"resume={text!r} is invalid: --resume, --resume auto, or true/false in a "
                                         "config file")
    return RESUME_WORDS[word]


def _list(text: str | None, kind: type, field: str) -> list | None:
    if text is None:
        return None
    try:
        out = [kind(x.strip()) for x in text.split(",") if x.strip()]  # "fedgp, fedda" as "fedgp,fedda"
    except ValueError:
        raise SweepError(f"{field}={text!r} is invalid: comma-separated {'numbers' if kind is float else 'names'}") from None
    if not out:
        raise SweepError(f"{field}={text!r} is invalid: name at least one")
    return out


def check_counts(a: Any) -> None:
    """The counts a grid sweep and a search take, checked alike in both (a flag the mode ignores is still checked:
    a typo there is a typo)."""
    for name in ("seeds", "workers", "max_concurrent", "num_samples", "rerun_seeds"):
        v = getattr(a, name, None)
        if v is not None and v < 1:
            raise SweepError(f"{name}={v} is invalid: an integer >= 1")
    for name, most in (("seeds", MAX_SEEDS), ("rerun_seeds", MAX_SEEDS), ("num_samples", MAX_SAMPLES)):
        v = getattr(a, name, None)
        if v is not None and v > most:
            raise SweepError(f"{name}={v} is invalid: an integer from 1 to {most}")
    if a.max_failures < 0:
        raise SweepError(f"max_failures={a.max_failures} is invalid: an integer >= 0")
    stranded.wait_seconds()  # $FDA_RAY_NODE_WAIT_S, read by a Tune launch: checked before any work
    from fda_ray.runtime.fusion import window_seconds

    try:
        window_seconds()  # $FDA_RAY_FUSION_WINDOW_S, read by a launch that starts fusion servers
        check_trial_environment()
    except ValueError as e:
        raise SweepError(str(e)) from None


def check_trial_environment() -> None:
    """The variables the trials read once they run, checked before any work: a bad value failed every trial in its
    first round, each retried --max-failures times, then a failed-trials summary (exit 1), not one line (exit 2)."""
    import os

    from fda_ray.kernels import env_impl
    from fda_ray.train.models import CONV_LAYOUTS

    env_impl()  # $FDA_RAY_KERNELS
    layout = os.environ.get("FDA_RAY_CONV_LAYOUT", "")
    if layout and layout not in CONV_LAYOUTS:  # (the message fda_ray.train.models.conv_layout gives)
        raise ValueError(f"FDA_RAY_CONV_LAYOUT={layout!r} is invalid: one of {', '.join(CONV_LAYOUTS)}")


SEARCH_ONLY = ("--num-samples", "--scheduler", "--search-alg", "--rerun-seeds")  # a search's flags, not a grid's


def check_search_only(argv: list[str], options: Sequence[str] = SEARCH_ONLY) -> None:
    """A grid sweep given a search's own flag (it ran every trial and said nothing of it): one line naming it.
    `options`: every option string of the parser, to read a flag abbreviated as argparse reads it (--sched: the one
    option it begins)."""
    for i, x in enumerate(argv):
        flag = x.split("=", 1)[0]
        if flag.startswith("--") and flag not in options:
            begun = [o for o in options if o.startswith(flag)]
            flag = begun[0] if len(begun) == 1 else flag
        if flag in SEARCH_ONLY:
            value = x.split("=", 1)[1] if "=" in x else argv[i + 1] if i + 1 < len(argv) else ""
            raise SweepError(f"{flag[2:].replace('-', '_')}={value!r} is invalid with --grid: it is a search's "
                             "(--search NAME); a grid sweep runs every trial of its plan")


def check_backend(a: Any) -> None:
    """--backend, checked alike for a grid sweep and a search."""
    if a.backend not in BACKENDS:
        raise SweepError(f"backend={a.backend!r} is invalid: one of {', '.join(BACKENDS)}"
                         f"{did_you_mean(a.backend, BACKENDS)}")
    if getattr(a, "workers", None) is not None and a.backend != "local":
        # Tune runs as many trials as the cluster's resources hold: a --workers it ignored would promise a count
        raise SweepError(f"workers={a.workers} is invalid with --backend {a.backend}: it sets the local backend's "
                         "trials at once; Ray Tune runs as many as the resources hold (--dry-run prints how many; "
                         "--max-concurrent caps them)")


def check_fuse(a: Any) -> None:
    """--fuse: off, auto or a group size (a.fuse becomes the parsed value)."""
    from fda_ray.runtime.fusion import parse_fuse

    try:
        a.fuse = parse_fuse(getattr(a, "fuse", "off"))
    except ValueError as e:
        raise SweepError(str(e)) from None


def check_plan_for(a: Any) -> None:
    """--plan-for plans for nodes that are not here: only a --dry-run takes it."""
    if a.plan_for is not None and not a.dry_run:
        raise SweepError(f"plan_for={a.plan_for!r} is invalid without --dry-run: it plans for nodes that are "
                         "not here")


def manifest_from_args(a: Any, command: str) -> Manifest:
    """What a parsed sweep or search command runs (fda_ray.experiments.manifest), as its readers need it."""
    return Manifest(kind="search" if a.search else "grid", name=a.search or a.grid, profile=a.profile,
                    rows=tuple(_list(a.methods, str, "methods")) if a.methods else None,
                    values=tuple(_list(a.values, float, "values")) if a.values else None,
                    seeds=a.seeds, overrides=config_fields(a), command=command)


def chunk_manifest(held: Manifest | None, new: Manifest, grid: Any) -> Manifest:
    """The sweep.json a grid sweep's chunk writes into a folder that already holds the same sweep (`held`: its
    sweep.json; held_by_another has said it is this sweep): every chunk's rows, values and seeds so far, so that its
    readers (the results pages plan the trials from it) see the earlier chunks' trials, not only the last one's.
    The command is the latest chunk's. Another profile or other fields set on the command line (other trials) are
    not merged: `new` as it is. The union is field by field: chunks of other rows at other values plan their cross
    product, whose cells no chunk ran read as not run; seeds per value are the most any chunk ran (one int where
    that is not the grid's own number for every value, so a value with fewer seeds plans more)."""
    from fda_ray.experiments.trials import select_rows, select_values

    if held is None or (held.kind, held.name, held.profile, held.overrides) != \
            (new.kind, new.name, new.profile, new.overrides) or new.kind != "grid" or new.profile not in grid.profiles:
        return new
    prof = grid.profiles[new.profile]
    # the rows a chunk ran: its --methods (keys or method names), else the profile's (keys: as plan picks them)
    default_rows = [r.key for r in grid.rows if prof.rows is None or r.key in prof.rows]
    try:
        rows = [select_rows(grid, m.rows, prof.rows) if m.rows else default_rows for m in (held, new)]
        values = [select_values(grid, m.values or prof.values) for m in (held, new)]
    except ValueError:  # an earlier chunk's rows or values this grid no longer has: the new chunk's own
        return new
    keys = [r.key for r in grid.rows if any(r.key in chosen for chosen in rows)]
    vals = [v for v in grid.values if any(v in chosen for chosen in values)]

    def own(v: float) -> int:  # a value's seeds when none are given: the profile's, else the grid's for that value
        return prof.seeds if prof.seeds is not None else grid.seeds_for(v)

    def ran(m: Manifest, chosen: list[float], v: float) -> int:
        return 0 if v not in chosen else (m.seeds if m.seeds is not None else own(v))

    most = {v: max(ran(m, chosen, v) for m, chosen in zip((held, new), values)) for v in vals}
    seeds = None if all(most[v] == own(v) for v in vals) else max(most.values())
    return dataclasses.replace(new, rows=None if keys == default_rows else tuple(keys),
                               values=None if vals == select_values(grid, prof.values) else tuple(vals), seeds=seeds)


def search_chunk(held: Manifest | None, new: Manifest, search: Any) -> Manifest:
    """The manifest of a search resumed into a folder that holds the same search (profile and fields alike): the
    union of the folder's and this launch's methods and values, in the search's order (all of them where either
    named none), so that the launch runs and reports every chunk's studies (--values 0.2, then --values 0.6 --resume:
    summary.md, selection.json and sweep.json held the last chunk's only); `new` as it is otherwise. The command
    line's and the Python search()'s resume alike."""
    if held is None or (held.kind, held.name, held.profile, held.overrides) != \
            (new.kind, new.name, new.profile, new.overrides) or new.kind != "search":
        return new
    methods = None if held.rows is None or new.rows is None else \
        tuple(m for m in search.methods if m in held.rows or m in new.rows)
    values = None if held.values is None or new.values is None else \
        tuple(v for v in search.values if any(math.isclose(v, x) for x in (*held.values, *new.values)))
    return dataclasses.replace(new, rows=methods, values=values)


def manifest_from_command(command: str) -> Manifest:
    """A directory from before manifests: its summary.md's command, read by the sweep command's own parser (this
    module's; the one place a command line is parsed to learn what a sweep was). A line that does not parse (an
    unclosed quote, a flag the parser does not have: edited by hand) is a ManifestError saying why."""
    import contextlib
    import io

    from fda_ray.experiments.manifest import ManifestError

    try:
        argv = shlex.split(command)
    except ValueError as e:  # shlex: "No closing quotation", "No escaped character"
        raise ManifestError(f"its Command: line is not a command line ({e})") from None
    argv = argv[argv.index("fda_ray.sweep") + 1:] if "fda_ray.sweep" in argv else argv
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):  # (the parser's own error line: said in ours instead)
            a = parser().parse_args(argv)
    except SystemExit:
        why = next((ln.removeprefix("error: ") for ln in said.getvalue().splitlines() if ln.startswith("error:")),
                   "it does not parse")
        raise ManifestError(f"its Command: line is not a sweep command ({why})") from None
    try:
        return manifest_from_args(a, command)
    except ValueError as e:
        raise ManifestError(f"its Command: line is not a sweep command ({str(e).splitlines()[0]})") from None


def manifest_of(directory: StoragePath | Path | str) -> Manifest | None:
    """A sweep or search directory's sweep.json; for one from before manifests, summary.md's `Command:` line (None
    without either)."""
    found = read_manifest(directory)
    if found is not None:
        return found
    summary = storage_path(directory) / "summary.md"
    if not summary.is_file():
        return None
    from fda_ray.experiments.manifest import ManifestError

    for line in summary.read_text(errors="replace").splitlines():  # (a damaged summary: no Command: line, None)
        if line.startswith("Command: `"):
            try:
                return manifest_from_command(line[len("Command: `"):line.rindex("`")])
            except ManifestError as e:  # named as the file it is (the directory has no sweep.json)
                raise ManifestError(f"summary.md={str(summary)!r} is invalid: {e.why}", e.why) from None
    return None


def _definitions_differ(held: Any, new: Any, kind: str) -> list[str]:
    """The fields that make two grid (or search) definitions other sweeps: what their trials are (dataset, the
    variable, the rows or the methods and space, the fixed fields); values, seeds, profiles and the papers' numbers
    may differ between chunks of one sweep."""
    from fda_ray.papers.files import grid_to_dict, search_to_dict

    to_dict = grid_to_dict if kind == "grid" else search_to_dict
    a, b = to_dict(held), to_dict(new)
    fields = ("dataset", "variable", "rows", "fixed") if kind == "grid" else \
        ("dataset", "variable", "methods", "space", "fixed", "references")
    return [f for f in fields if a.get(f) != b.get(f)]


def held_by_another(out: StoragePath, kind: str, name: str, definition: Any) -> str | None:
    """Why resuming into `out` would adopt another sweep, or None. `out` holds a sweep or a search (its sweep.json,
    or an old directory's summary.md command): another kind, another built-in grid or search, or a definition file
    whose rows (a search: methods and space) differ from the ones kept beside its records (grid.yaml, search.yaml)
    is another sweep; resuming would replace its manifest and summary with this one's. Chunks of one sweep (other
    values, seeds or rows of the same grid) are the same sweep."""
    from fda_ray.experiments.manifest import ManifestError

    try:
        held = manifest_of(out)
    except (ManifestError, ValueError, SystemExit) as e:  # an unreadable sweep.json is not this sweep's either
        why = getattr(e, "why", None) or (str(e).splitlines()[0] if str(e) else "damaged")
        file = "sweep.json" if (out / "sweep.json").is_file() else "summary.md"  # (one from before manifests)
        return f"its {str(out / file)!r} cannot be read ({why})"
    if held is None:
        return None
    why = _other(out, held, kind, name, definition)
    if why is None:
        return None
    return why + (f"; resume it with its own command ({held.command} --resume)" if held.command else "") + \
        ", or choose another --out"


def _other(out: StoragePath, held: Manifest, kind: str, name: str, definition: Any) -> str | None:
    import yaml

    from fda_ray.core.config_files import yaml_load
    from fda_ray.papers.files import DefinitionFileError, grid_from_dict, is_file_ref, search_from_dict

    what = f"{held.kind} {held.name!r}"
    if held.kind != kind:
        return f"it holds the records of {what}, not of a {kind}"
    if is_file_ref(held.name) and is_file_ref(name):  # two definition files: the same sweep if they define it alike
        kept = out / f"{kind}.yaml"
        if not kept.is_file():
            return None if held.name == name else f"it holds the records of {what}, not of {name!r}"
        try:  # (read as text: `out` may be on an object store)
            data = yaml_load(kept.read_text())
            diff = _definitions_differ((grid_from_dict if kind == "grid" else search_from_dict)(data, str(kept)),
                                       definition, kind)
        except (DefinitionFileError, yaml.YAMLError, UnicodeDecodeError) as e:
            return f"the {kind} kept beside its records, {str(kept)!r}, cannot be read ({str(e).splitlines()[0]})"
        if diff:
            verb = 'differs' if len(diff) == 1 and not diff[0].endswith('s') else 'differ'
            other = "the file's now (edited since)" if held.name == name else f"those of {name!r}"
            return f"it holds the records of {what}, whose {', '.join(diff)} {verb} from {other}"
        return None
    if held.name != name:
        return f"it holds the records of {what}, not of {kind} {name!r}"
    return None
