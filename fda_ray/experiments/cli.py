"""Command lines generated from RunConfig: one flag per field (`--lr-target` for lr_target), its help, type and
choices from the field's metadata (fda_ray.core.config), so every field is settable wherever a RunConfig is built:

    python -m fda_ray --method fedgp --noise 0.4          one run (this module's `main`)
    python -m fda_ray.diagnose ...                        the same flags, plus its own
    python -m fda_ray.sweep --grid noise --rounds 5 ...   the same flags as overrides of every trial

Bad input prints one line (`error: <field>=<value> is invalid: <what is allowed>`) and exits with code 2.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys
import time
import typing
from typing import Any, Callable

from fda_ray.core import plugins
from fda_ray.core.parsing import OneLineParser, typed
from fda_ray.experiments.commands import COMMANDS
from fda_ray.runtime import node_watch
from fda_ray.core.config import RunConfig, config_keywords
from fda_ray.core.interrupts import cli_main, cut_line, printing


def one_line_warnings() -> None:
    """Print fda-ray's RunWarnings as `warning: <message>` (Python's format adds the source file and line)."""
    import warnings

    from fda_ray.core.notices import RunWarning

    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        if issubclass(category, RunWarning):
            print(f"warning: {message}", file=sys.stderr, flush=True)
        else:
            default(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def _dynamic_choices(name: str) -> tuple[str, ...] | None:
    """Choices that live in registries (they grow as the project does)."""
    if name == "method":
        from fda_ray.algorithms import ALGORITHMS
        return tuple(ALGORITHMS.names())
    if name == "dataset":
        from fda_ray.data.base import DATASETS
        return tuple(DATASETS.names())
    if name == "model":
        from fda_ray.train.models import MODELS
        return tuple(MODELS.names())
    return None


def _integral(text: str) -> int:
    """An integer, also written as an integral float ("0.0": what earlier --print-config files hold)."""
    value = float(text)
    if not value.is_integer():
        raise ValueError(text)
    return int(value)


def add_config_arguments(p: argparse.ArgumentParser, *, overrides: bool = False,
                         exclude: tuple[str, ...] = ()) -> None:
    """One flag per RunConfig field. overrides=True: no defaults (a flag given is an override, one not given
    is absent from the namespace), as the sweep needs."""
    hints: dict[type, dict[str, Any]] = {}
    groups: dict[str, argparse._ArgumentGroup] = {}
    titles = {"run": "run settings", "data": "data", "execution": "execution (never changes the numbers, "
                                                                  "except device and aggregation_impl)"}
    for owner, f in config_keywords():  # RunConfig's fields, then the FDA family's parameters (--beta, ...)
        if f.name in exclude:
            continue
        meta = f.metadata
        group = groups.setdefault(meta.get("group", "run"), p.add_argument_group(titles[meta.get("group", "run")]))
        flag = "--" + f.name.replace("_", "-")
        hint = hints.setdefault(owner, typing.get_type_hints(owner))[f.name]
        args = typing.get_args(hint)
        base = next((a for a in args if a is not type(None)), hint) if args and type(None) in args else hint
        choices = meta.get("choices") or _dynamic_choices(f.name)
        help_text = meta.get("help", "").replace("%", "%%")
        if choices:
            help_text += f" [{', '.join(choices)}]"
        default = argparse.SUPPRESS if overrides else f.default
        if not overrides and not (f.default is None and "default:" in help_text):  # (its help says it already)
            help_text += f" (default: {'per dataset/method' if f.default is None else f.default})"
        kw: dict[str, Any] = {"dest": f.name, "default": default, "help": help_text}
        if base is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, **kw)
        elif typing.get_origin(base) is tuple:  # tuple[int, ...] takes integers (environment indices), else numbers
            ints = typing.get_args(base)[0] is int
            group.add_argument(flag, nargs="*", type=typed(f.name, _integral if ints else float,
                                                           "integers" if ints else "numbers"),
                               metavar="N" if ints else "X", **kw)
        elif base is int:
            group.add_argument(flag, type=typed(f.name, int, "an integer"), metavar="N", **kw)
        elif base is float:
            group.add_argument(flag, type=typed(f.name, float, "a number"), metavar="X", **kw)
        else:
            group.add_argument(flag, type=str, metavar="NAME" if choices else "TEXT", **kw)


    if "params" not in exclude:
        add_params_arguments(p)


PARAM_DEST = "param:"  # namespace dests of the families' parameter flags: "param:<family>:<field>"


def add_params_arguments(p: argparse.ArgumentParser) -> None:
    """One flag per field of each method family's Params (fda_ray.algorithms), --<family>-<field>, in a group
    per family; a flag given goes to RunConfig.params[family][field] (defaults: the family's)."""
    from fda_ray.algorithms import ALGORITHMS, family_params

    for fam, cls in family_params().items():
        if cls.keywords:  # its flags are its parameters' own names (add_config_arguments)
            continue
        methods = [m for m in ALGORITHMS.names() if ALGORITHMS.get(m).family == fam]
        group = p.add_argument_group(f"{fam} (method {', '.join(methods)})")
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            meta, kind = f.metadata, hints[f.name]
            flag = f"--{fam}-{f.name}".replace("_", "-")
            _check_flag_free(p, flag, fam, f.name, cls)
            help_text = meta.get("help", "").replace("%", "%%")
            if meta.get("choices"):
                help_text += f" [{', '.join(meta['choices'])}]"
            help_text += f" (default: {f.default})"
            kw: dict[str, Any] = {"dest": f"{PARAM_DEST}{fam}:{f.name}", "default": argparse.SUPPRESS, "help": help_text}
            name = f"{fam}.{f.name}"
            if meta.get("boolean") or tuple(meta.get("choices") or ()) == ("true", "false"):
                # a switch of the family's: true or false as a word, a bool in params (as a grid's `false`)
                group.add_argument(flag, type=_truth(name), metavar="true|false", **kw).words = ("true", "false")
            elif meta.get("choices"):  # the config names the allowed values
                group.add_argument(flag, type=str, metavar="NAME", **kw).words = tuple(meta["choices"])
            elif kind is int:
                group.add_argument(flag, type=typed(name, int, "an integer"), metavar="N", **kw)
            else:
                group.add_argument(flag, type=typed(name, float, "a number"), metavar="X", **kw)


def _check_flag_free(p: argparse.ArgumentParser, flag: str, fam: str, field: str, cls: type) -> None:
    """A family parameter's flag that another option already has (a built-in `--lr-source` for family `lr`'s
    field `source`, or another family's: `my_fam.x` and `my.fam_x` are both --my-fam-x) is one line naming both
    and what to rename (a PluginError: the command prints it, exit 2), not argparse's conflict traceback on every
    command, --help included."""
    taken = p._option_string_actions.get(flag)
    if taken is None:
        return
    dest = str(taken.dest)
    owner = (f"family {dest[len(PARAM_DEST):].split(':')[0]!r} parameter {dest.split(':')[-1]!r}'s flag"
             if dest.startswith(PARAM_DEST) else f"the built-in flag {flag} ({dest})")
    where = f" ({cls.__module__}.{cls.__qualname__})"
    raise plugins.PluginError(f"{fam}.{field} is invalid: its flag {flag}{where} is already {owner}: rename the "
                              f"family (family = ...) or the parameter")


def _truth(name: str) -> Callable[[str], bool]:
    """A family's boolean parameter from its flag's word: true or false (any case). Its action's `words` tell a
    config file's YAML boolean which word to write (fda_ray.core.config_files), as a word option's choices do."""
    def parse(text: str) -> bool:
        word = text.strip().lower()
        if word not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"{name}={text!r} is invalid: true or false")
        return word == "true"
    return parse


def config_fields(a: argparse.Namespace) -> dict[str, Any]:
    """The RunConfig fields present in a parsed namespace (the families' flags gathered into `params`)."""
    names = {f.name for _, f in config_keywords()}
    out = {k: v for k, v in vars(a).items() if k in names}
    params: dict[str, dict[str, Any]] = {}
    for k, v in vars(a).items():
        if k.startswith(PARAM_DEST):
            fam, field = k[len(PARAM_DEST):].split(":")
            params.setdefault(fam, {})[field] = v
    if params:
        out["params"] = params
    return out


def config_from_args(a: argparse.Namespace) -> RunConfig:
    return RunConfig(**config_fields(a))


def resolved_namespace(a: argparse.Namespace, argv: list[str] | None = None) -> argparse.Namespace:
    """`a` with every RunConfig field the run leaves to its dataset and method (None) filled in with the value it
    resolves to: what --print-config shows. Fed back through --config, it runs the same numbers. With the command's
    `argv`: its executor as whole_machine picks it (ray on 2 or more cores when --executor is not given; the
    printed serial was not what the run used, and the file fed back kept it in one process)."""
    cfg = config_from_args(a)
    resolved = cfg.resolved()
    out = argparse.Namespace(**vars(a))
    if argv is not None and hasattr(out, "executor"):
        out.executor = whole_machine(cfg, argv).executor
    for _, f in config_keywords():
        if hasattr(out, f.name) and getattr(out, f.name) is None:
            setattr(out, f.name, getattr(resolved, f.name))
    # the method family's own parameters (--ditto-lam, --fedwca-temp-a, a plug-in's): the values the run uses
    from fda_ray.algorithms import family_params

    flagged = {fam for fam, cls in family_params().items() if not cls.keywords}  # (add_params_arguments' families)
    for fam, values in resolved.params.items():
        for name, value in values.items():
            dest = f"{PARAM_DEST}{fam}:{name}"
            if fam in flagged and not hasattr(out, dest):
                setattr(out, dest, value)
    return out


class ParquetNotWritten(RuntimeError):
    """--parquet could not be written after a round: a failure of the work (exit 1), not bad input."""


def recorded_build() -> dict[str, str | None]:
    """The build a run's --parquet names in its build_<name> columns (as a sweep's results.parquet): the libraries,
    fda-ray's code version (read once a process: plug-ins' sources are fingerprinted) and the aggregation kernels
    that ran in this thread so far (each call: known once the run has aggregated)."""
    from fda_ray import kernels
    from fda_ray.experiments.records import BUILD_COLUMNS

    return {k: _environment().get(k) for k in BUILD_COLUMNS} | {"aggregation": kernels.ran()}


@functools.lru_cache(maxsize=1)
def _environment() -> dict[str, str | None]:
    from fda_ray.experiments.records import environment

    return environment()


def whole_machine(cfg: RunConfig, argv: list[str], cores: int | None = None) -> RunConfig:
    """`python -m fda_ray` without --executor uses the whole machine: with 2 or more cores (those this process
    may run on) and 2 or more clients on the CPU, the clients run on Ray actors pooled to the cores (one 1-thread
    actor per core, each hosting its share of the clients: fda_ray.runtime.executors), instead of one after the
    other on one thread. The numbers are the serial executor's at the same `threads`, to the last bit (the
    executor is not part of a run's numbers); `--executor serial` keeps the run in this process."""
    import os

    if any(x == "--executor" or x.startswith("--executor=") for x in argv) or cfg.device != "cpu":
        return cfg
    cores = cores if cores is not None else len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else (os.cpu_count() or 1)
    if cores < 2 or cfg.ray_address:
        return cfg
    from fda_ray.algorithms import ALGORITHMS

    resolved = cfg.resolved()
    if ALGORITHMS.get(resolved.method).num_clients(resolved) < 2:
        return cfg
    return cfg.replace(executor="ray")


def parser() -> OneLineParser:
    p = OneLineParser(prog="python -m fda_ray", description="One federated domain adaptation run.", command="run",
                      epilog="Other commands: python -m fda_ray COMMAND (or fda-ray COMMAND): "
                             f"{', '.join(c for c in COMMANDS if c != 'run')}; python -m fda_ray help lists them.")
    p.with_config_files()
    p.resolve_for_print = lambda ns: resolved_namespace(ns, p.parsed_argv)
    plugins.add_option(p)
    add_config_arguments(p)
    out = p.add_argument_group("output")
    out.add_argument("--parquet", default=None, help="write the per-round history to this Parquet file (after every round, atomically: a stopped run keeps its finished rounds)")
    out.add_argument("--json", action="store_true", help="print one JSON object (config and per-round metrics)")
    out.add_argument("--verbose", action="store_true", help="show Ray's own INFO and WARNING lines and torch's "
                     "notices (hidden by default, as in a sweep)")
    return p


def _ray_running() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


@cli_main
def main(argv: list[str] | None = None) -> int:
    """One run from the command line; a Ray this call started (the whole-machine default, --executor ray) is
    shut down when it returns, whatever the outcome."""
    ray_before = _ray_running()
    try:
        return _main(argv)
    finally:
        if not ray_before and _ray_running():
            sys.modules["ray"].shutdown()


def _main(argv: list[str] | None = None) -> int:
    from fda_ray.runtime import preflight
    from fda_ray.data.base import DatasetNotFound
    from fda_ray.runtime.engine import RunFailed, RunInterrupted, run
    from fda_ray.core.history import History

    argv = sys.argv[1:] if argv is None else list(argv)
    if (code := plugins.preload(argv)) is not None:  # before the parser: a plug-in's families add flags
        return code
    p = parser()
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    from fda_ray.experiments.console import quiet

    quiet(a.verbose)  # before Ray starts: its INFO and WARNING lines, torch's no-CUDA notice (a sweep's console too)
    try:
        cfg = whole_machine(config_from_args(a), p.parsed_argv)  # a --config file's executor counts too
        resolved = cfg.resolved()
        if a.parquet:  # before any work: a run must never finish and then fail to save
            preflight.output_file("parquet", a.parquet)
    except (ValueError, DatasetNotFound) as e:  # (resolving counts a table's or a folder's domains)
        print(p.error_line(e), file=sys.stderr)
        return 2
    one_line_warnings()
    from fda_ray.algorithms import ALGORITHMS

    total = ALGORITHMS.get(resolved.method).planned_rounds(resolved)
    finished = History(config=resolved.to_dict())

    written = [0]  # rounds in the parquet file: counted once written, so a line printed mid-write says the file's

    def progress(row: dict) -> None:
        if a.parquet:  # every finished round on disk at once (atomically): even a killed run keeps them
            finished.rows.append(row)
            finished.build = recorded_build()
            try:
                finished.to_parquet(a.parquet)
            except OSError:  # a full disk, a read-only file system: said by write_failure as every refused write
                raise
            except Exception as e:  # a value pyarrow cannot store: the work failed, not the input
                raise ParquetNotWritten(f"--parquet {a.parquet} could not be written after round {row['round'] + 1} "
                                        f"({type(e).__name__}: {cut_line(str(e).splitlines()[0])}); it holds the "
                                        f"{written[0]} rounds before") from e
            written[0] = len(finished.rows)
            node_watch.changed()
        if a.json:
            return
        beta = row.get("beta_i")
        extra = f" beta {sum(beta) / len(beta):.3f}" if beta else ""
        if row.get("auc") is not None:  # Healthcare FDA's binary tasks
            extra += f" auc {100 * row['auc']:6.2f}"
        with printing():  # `| head`: the run stops as Ctrl-C stops it, its finished rounds kept
            acc = "" if math.isnan(row["accuracy"]) else f"acc {100 * row['accuracy']:6.2f} "  # (regression: none)
            print(f"round {row['round'] + 1:3d}/{total} [{row['phase']}] {acc}"
                  f"loss {row['loss']:.4f}{extra} ({row['seconds']:.2f} s)", flush=True)

    node_watch.set_kept(lambda: f"the {written[0]} finished rounds are in {a.parquet}" if a.parquet
                        else "its finished rounds were not kept (no --parquet)")
    t0 = time.perf_counter()
    try:
        hist = run(cfg, progress)
    except ParquetNotWritten as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (DatasetNotFound, ValueError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    except RunFailed as e:
        # Keep what was computed: the finished rounds go where the full history would have gone.
        kept = ""
        if a.parquet and e.history.rows:
            e.history.build = recorded_build()
            e.history.to_parquet(a.parquet)
            written[0] = len(e.history.rows)
            kept = f"; the {written[0]} finished rounds are in {a.parquet}"
        if not isinstance(e, RunInterrupted) and node_watch.explain(e):  # the clients failed: their node was lost
            return 1
        print(f"{'interrupted' if isinstance(e, RunInterrupted) else 'error'}: {e}{kept}", file=sys.stderr)
        return 130 if isinstance(e, RunInterrupted) else 1
    except KeyboardInterrupt:  # before the rounds (loading the data, starting actors)
        print("interrupted: before the first round finished; nothing to keep", file=sys.stderr)
        return 130
    if a.parquet:
        hist.build = recorded_build()
        hist.to_parquet(a.parquet)
    if a.json:
        print(json.dumps(hist.to_json()))
    else:
        where = f"test_env {cfg.test_env}" if resolved.partition in ("domainbed", "heldout_domain") \
            else f"noise {cfg.noise}"
        auc = hist.rows[-1].get("auc") if hist.rows else None
        last = min(5, len(hist.rows))
        if math.isnan(hist.final_accuracy) and hist.rows:  # a regression task (synthetic): its metric is the loss
            losses = [float(r["loss"]) for r in hist.rows[-last:]]
            result = (f"final target test loss {hist.final_loss:.4f} (mean of the last {last} rounds "
                      f"{sum(losses) / last:.4f}; ")
        else:
            result = (f"final target accuracy {100 * hist.final_accuracy:.2f} %"
                      + (f", AUC {100 * auc:.2f} %" if auc is not None else "")
                      + f" (mean of the last {last} rounds {100 * hist.last_accuracy(5):.2f} %; ")
        print(f"{result}{cfg.method}, {where}, seed {cfg.seed}) in {time.perf_counter() - t0:.1f} s")
    return 0
