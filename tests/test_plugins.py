"""Plug-ins (fda_ray.core.plugins, docs/plugins.md): a module outside the package registers a method, a model, a
dataset and a recipe, and runs through the command line, a grid file, the local backend's workers, Tune's trial
processes and the client actors. The tutorial's blocks are run as written, from a folder of their own."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fda_ray.core import plugins

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def block(tag: str, lang: str) -> str:
    found = re.search(rf"<!-- {re.escape(tag)}[^>]*-->\n```{lang}\n(.*?)```", DOC.read_text(), re.S)
    assert found, f"docs/plugins.md lost its {tag} block"
    return found.group(1)


def write_tutorial(folder: Path) -> None:
    """my_fda.py, data/my-blobs.npz and my-prox.yaml in `folder`, from the page's blocks."""
    (folder / "my_fda.py").write_text(block("plugin-module: my_fda.py", "python"))
    here = os.getcwd()
    os.chdir(folder)
    try:
        exec(compile(block("plugin-data: make-blobs", "python"), "docs/plugins.md (make-blobs)", "exec"), {})
    finally:
        os.chdir(here)
    (folder / "my-prox.yaml").write_text(block("plugin-grid: my-prox.yaml", "yaml"))


@pytest.fixture
def clean_plugins(monkeypatch):
    """The plug-in state of this process as it was: registries, modules, $FDA_RAY_IMPORTS."""
    from fda_ray.algorithms import ALGORITHMS
    from fda_ray.algorithms.aggregation import RULES
    from fda_ray.data.base import DATASETS
    from fda_ray.train.client import RECIPES
    from fda_ray.train.models import MODELS

    regs = (ALGORITHMS, DATASETS, RECIPES, MODELS, RULES)
    before = [dict(r._items) for r in regs]
    modules = set(sys.modules)
    monkeypatch.delenv(plugins.ENV, raising=False)  # restored at the end, whatever the plug-ins wrote
    monkeypatch.setattr(plugins, "_loaded", {})
    monkeypatch.setattr(plugins, "_pending_done", False)
    monkeypatch.setattr(plugins, "_failure", None)
    yield
    for r, items in zip(regs, before):
        r._items.clear()
        r._items.update(items)
    for name in set(sys.modules) - modules:
        if name.startswith(("my_fda", "plug_")):
            del sys.modules[name]


@pytest.mark.parametrize("source, name, expected", [
    (None, "plug_nowhere", "import='plug_nowhere' is invalid: no module 'plug_nowhere' in"),
    ("raise RuntimeError('boom')\n", "plug_raises", "import='plug_raises' is invalid: importing it failed: "
                                                     "RuntimeError: boom (plug_raises.py:1)"),
    ("import plug_missing_dependency\n", "plug_needs", "import='plug_needs' is invalid: importing it failed: "
                                                       "ModuleNotFoundError: No module named 'plug_missing_dependency'"),
    (None, "my-fda", "import='my-fda' is invalid: a module name (my_fda, or package.module)"),
])
def test_a_plugin_that_cannot_be_imported_is_one_line(tmp_path, monkeypatch, clean_plugins, capsys, source, name,
                                                       expected):
    if source is not None:
        (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(plugins.PluginError) as e:
        plugins.load([name])
    assert str(e.value).startswith(expected) and "\n" not in str(e.value)
    from fda_ray.experiments import cli, sweep

    for main in (cli.main, sweep.main):  # the commands: that line, exit code 2, before their parsers
        assert main(["--import", name, "--method", "fedgp"]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"error: {e.value}"]


def test_import_flags_are_read_before_the_parser():
    assert plugins.from_argv(["--import", "a", "--rounds", "3", "--import=b,c", "--", "--import", "d"]) == \
        ["a", "b", "c"]
    assert plugins.from_argv(["--method", "fedgp"]) == []


def test_a_config_file_names_its_plugins(tmp_path):
    """`--print-config` writes the `import` key; `--config FILE` loads it before the parser is built."""
    (tmp_path / "c.yaml").write_text("import: [my_fda, other]\nmethod: fedprox\n")
    (tmp_path / "bad.yaml").write_text("import: [unclosed\n")
    assert plugins._config_imports(["--config", str(tmp_path / "c.yaml"), "--rounds", "1"]) == ["my_fda", "other"]
    assert plugins._config_imports([f"--config={tmp_path / 'c.yaml'}"]) == ["my_fda", "other"]
    assert plugins._config_imports(["--config", str(tmp_path / "bad.yaml")]) == []  # the parser names the fault
    assert plugins._config_imports(["--config", str(tmp_path / "missing.yaml")]) == []


def test_a_malformed_environment_list_is_named(monkeypatch, clean_plugins):
    monkeypatch.setenv(plugins.ENV, "[not json")
    with pytest.raises(plugins.PluginError, match=r"FDA_RAY_IMPORTS='\[not json' is invalid: a JSON list"):
        plugins.load_pending()


def _installed(tmp_path, monkeypatch, module: str, source: str, entry_point: str) -> None:
    """`module` with `source` installed as pip would (a dist-info folder on sys.path) with one `fda_ray.plugins`
    entry point line `name = module:function`."""
    (tmp_path / f"{module}.py").write_text(source)
    name = module.replace("_", "-")
    dist = tmp_path / f"{module}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[fda_ray.plugins]\n{entry_point}\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_an_installed_entry_point_is_loaded_and_its_function_called(tmp_path, monkeypatch, clean_plugins):
    """A package's `fda_ray.plugins` entry point (here a dist-info folder on sys.path, as pip writes one)."""
    _installed(tmp_path, monkeypatch, "plug_installed", "CALLED = []\n\ndef register():\n    CALLED.append(1)\n",
               "plug = plug_installed:register")
    assert "plug_installed" in plugins.load_pending()
    assert sys.modules["plug_installed"].CALLED == [1]
    assert plugins.load_pending() == ("plug_installed",) and sys.modules["plug_installed"].CALLED == [1]  # once


def test_a_worker_finds_a_plugin_name_through_the_environment(tmp_path, monkeypatch, clean_plugins):
    """What a spawned worker or a Ray worker does: $FDA_RAY_IMPORTS names the module and the folder it is in (not
    on this process's sys.path); the first lookup of a name the registry lacks imports it."""
    from fda_ray.train.client import RECIPES

    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "plug_recipe.py").write_text(
        "from fda_ray.train.client import RECIPES\n\nRECIPES.add('plug_recipe', lambda client, task, inputs: 42)\n")
    monkeypatch.setenv(plugins.ENV, json.dumps([["plug_recipe", str(folder)]]))
    assert "plug_recipe" not in RECIPES._items
    assert RECIPES.get("plug_recipe")(None, None, None) == 42
    assert str(folder) in sys.path
    with pytest.raises(ValueError, match="a plug-in's names need its module: --import MODULE"):
        RECIPES.get("zzzz")


def test_the_tutorial_plugin_in_this_process(tmp_path, monkeypatch, clean_plugins, capsys):
    """The page's module: its family's flag, its validation, and FedProx with mu = 0 is FedAvg over the sources
    (source_only without warm-up); mu > 0 pulls the local models back, so the weights differ. Loading it exports it
    for the processes a run starts, and the record's build names its fingerprint."""
    from fda_ray import run
    from fda_ray.core.build import build
    from fda_ray.experiments import cli
    from fda_ray.core.config import RunConfig

    write_tutorial(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main(["--import", "my_fda", "--dataset", "my-blobs", "--data-dir", str(tmp_path / "data"),
                     "--method", "fedprox", "--fedprox-mu", "20", "--rounds", "1"]) == 2
    assert capsys.readouterr().err.strip() == "error: fedprox.mu=20.0 is invalid: a number in [0.0, 10.0]"
    assert plugins.loaded() == ("my_fda",)
    assert json.loads(os.environ[plugins.ENV]) == [["my_fda", str(tmp_path.resolve())]]
    assert re.fullmatch(r"my_fda@[0-9a-f]{12}", build()["plugins"])

    def cfg(method: str, **kw) -> RunConfig:
        return RunConfig(dataset="my-blobs", data_dir=str(tmp_path / "data"), method=method, num_sources=3,
                         rounds=3, samples_per_client=300, test_samples=300, target_labelled=40, threads=1,
                         executor="serial", **kw)

    prox0 = run(cfg("fedprox", params={"fedprox": {"mu": 0.0}}))
    fedavg = run(cfg("source_only", warmup_rounds=0, log_estimates=False))
    # the same local epochs (the proximal term is 0) and the same average summed in another order (a float32 Python
    # sum against the kernel's float64 coefficients): ~1e-7 relative a round, below 1e-4 after three rounds of Adam
    torch.testing.assert_close(prox0.final_weights, fedavg.final_weights, rtol=1e-4, atol=1e-4)
    prox = run(cfg("fedprox", params={"fedprox": {"mu": 5.0}}))
    assert not torch.allclose(prox.final_weights, prox0.final_weights, rtol=1e-3, atol=1e-3)
    assert prox.config["model"] == "my_mlp" and [r["phase"] for r in prox.rows] == ["main"] * 3


def _python(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in (plugins.ENV, "FDA_DATA_DIR", "RAY_ADDRESS")}
    return subprocess.run([sys.executable, *args], cwd=cwd, env={**base, **(env or {})}, capture_output=True,
                          text=True, timeout=600)


def _final(stdout: str) -> str:
    found = re.search(r"final target accuracy ([0-9.]+) %", stdout)
    assert found, stdout[-2000:]
    return found.group(1)


@pytest.mark.slow
def test_the_tutorial_commands_run_as_written(tmp_path):
    """Every command of the page, from a folder outside the package: the CLI (in this process and on Ray actors,
    where the recipe runs), the grid file on the local backend's workers and on Tune's trial processes (their tables
    agree: the same serial runs), the error without --import, and an installed entry point instead of the flag."""
    write_tutorial(tmp_path)
    commands = [line.split()[1:] for line in block("plugin-commands", "").strip().splitlines()]
    assert len(commands) == 4
    outs = []
    for args in commands:
        p = _python(args, tmp_path)
        assert p.returncode == 0, (args, p.stderr[-3000:])
        outs.append(p.stdout)
    _final(outs[0])
    # the Ray run's recipe ran in actors: the serial run of the same config gives the same numbers
    serial = _python([*commands[1][:-4], "--executor", "serial", "--num-sources", "2"], tmp_path)
    assert serial.returncode == 0, serial.stderr[-3000:]
    assert _final(outs[1]) == _final(serial.stdout)
    tables = []
    for out in ("sweeps/prox-local", "sweeps/prox-tune"):
        summary = (tmp_path / out / "summary.md").read_text()
        rows = [line for line in summary.splitlines() if line.startswith(("| FedProx", "| FedGP"))][:3]
        assert len(rows) == 3 and all(re.search(r"\| \d+\.\d\d \|$", r) for r in rows), summary
        assert re.search(r"plugins my_fda@[0-9a-f]{12} \(3 trials\)", summary), summary
        tables.append(rows)
    assert tables[0] == tables[1]
    plain = commands[0][:2] + commands[0][4:]  # without --import my_fda
    assert commands[0][2:4] == ["--import", "my_fda"]
    hint = "; a plug-in's names need its module: --import MODULE (docs/plugins.md)"
    p = _python(plain, tmp_path)
    assert p.returncode == 2 and p.stderr == f"error: unrecognized arguments: --fedprox-mu 0.1{hint}\n"
    p = _python(commands[1][:2] + commands[1][4:], tmp_path)
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [p.stderr.strip()]
    assert p.stderr.startswith("error: dataset='my-blobs' is invalid: known datasets: ") and \
        p.stderr.strip().endswith(hint)
    # a config file written by --print-config names the plug-in, and runs without the flag
    p = _python([*commands[0], "--print-config"], tmp_path)
    assert p.returncode == 0 and "import: [my_fda]" in p.stdout, p.stderr[-2000:]
    (tmp_path / "run.yaml").write_text(p.stdout)
    p = _python(["-m", "fda_ray", "--config", "run.yaml"], tmp_path)
    assert p.returncode == 0 and _final(p.stdout) == _final(outs[0]), p.stderr[-2000:]
    # collect reads the file grid's records with the plug-in, and names what it lacks without it
    p = _python(["-m", "fda_ray.collect", "--import", "my_fda", "sweeps/prox-local"], tmp_path)
    assert p.returncode == 0 and "plugins my_fda@" in p.stdout, p.stderr[-2000:]
    p = _python(["-m", "fda_ray.collect", "sweeps/prox-local"], tmp_path)
    assert p.returncode == 2 and p.stderr.strip().endswith(hint), p.stderr
    # an installed package's entry point: no flag needed
    dist = tmp_path / "my_fda-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-fda\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[fda_ray.plugins]\nmy-fda = my_fda\n")
    p = _python(plain, tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert p.returncode == 0, p.stderr[-3000:]
    assert _final(p.stdout) == _final(outs[0])


def test_a_dataset_is_registered_once_with_its_defaults(clean_plugins):
    """DATASETS.add takes the loader, the defaults and the environment count in one call; a dataset registered
    without defaults is one line naming the field and the call that fixes it; a plug-in's dataset notes its
    loader's module (not fda-ray's wrapper) for the other processes."""
    from fda_ray.data import DATASETS, count_environments
    from fda_ray.core.config import RunConfig

    def load_rings(data_dir=None, download=False):
        raise AssertionError("not loaded by a config")

    load_rings.__module__ = "plug_rings"  # as if defined in an importable plug-in module
    sys.modules["plug_rings"] = type(sys)("plug_rings")
    DATASETS.add("plug-rings", load_rings)
    with pytest.raises(ValueError, match=r"^dataset='plug-rings' is invalid: it is registered without default "
                                         r"settings: register it with DATASETS.add\('plug-rings', loader, "):
        RunConfig(dataset="plug-rings")
    assert "plug_rings" in plugins.loaded()
    DATASETS.add("plug-rings-2", load_rings, environments=lambda d: 7,
                 defaults={**DATASETS.get("fashion-mnist").defaults, "partition": "domainbed", "num_sources": None})
    assert RunConfig(dataset="plug-rings-2").resolved().num_sources == 6  # 7 environments, one the target
    assert count_environments("plug-rings-2", None) == 7


def test_the_pages_aggregation_rule_runs_as_fedda_at_half(clean_plugins, tmp_path, monkeypatch):
    """The page's rule, 0.5 g_T + 0.5 FedAvg(g_i), is FedDA at beta = 0.5 (weights summing to 1) written another way:
    a run of the page's method gives FedDA's rounds (same seeds; another summation order, so to float32 rounding)."""
    from fda_ray import RunConfig, run

    (tmp_path / "plug_my_rule.py").write_text(block("plugin-rule: my_rule.py", "python"))
    monkeypatch.syspath_prepend(str(tmp_path))
    import plug_my_rule  # noqa: F401  (registers half_half)

    base = dict(dataset="synthetic", rounds=2, executor="serial", seed=3)
    mine = run(RunConfig(method="half_half", **base)).rows
    fedda = run(RunConfig(method="fedda", beta=0.5, **base)).rows
    assert len(mine) == len(fedda) == 4  # 2 warm-up + 2 main rounds
    for a, b in zip(mine, fedda):
        assert math.isclose(a["loss"], b["loss"], rel_tol=1e-4), (a["round"], a["loss"], b["loss"])
    assert mine[-1]["loss"] != run(RunConfig(method="fedda", beta=0.9, **base)).rows[-1]["loss"]


# ---------------------------------------------------------------- a worker that cannot import what the command did

def test_a_worker_that_cannot_import_a_plugin_says_so_in_one_line(tmp_path, monkeypatch, clean_plugins, capsys):
    """The worker side of a plug-in the command imported (issue 63, class 3): WorkerImportError names the plug-in,
    the kind of process, its host, the import's own error and what to do; it crosses processes (pickled); the failed
    load is remembered, so that a later lookup in that process (a retried job) raises it again instead of answering
    "unknown method" with a did-you-mean; and a command that it escapes prints it as one line."""
    import pickle

    from fda_ray.core import interrupts
    from fda_ray.train.client import RECIPES

    folder = tmp_path / "plugs"
    folder.mkdir()
    (folder / "plug_dep.py").write_text("import my_helper_dep  # the shell's sys.path only\n"
                                        "from fda_ray.train.client import RECIPES\n\n"
                                        "RECIPES.add('plug_dep_recipe', lambda client, task, inputs: 42)\n")
    monkeypatch.setenv(plugins.ENV, json.dumps([["plug_dep", str(folder)]]))
    with pytest.raises(plugins.WorkerImportError) as e:
        plugins.load_in_worker("local worker process")
    w = e.value
    assert not isinstance(w, ValueError)  # not bad input (exit 2): the workers' environment (exit 1)
    assert (w.module, w.kind, w.error) == ("plug_dep", "local worker process",
                                           "ModuleNotFoundError: No module named 'my_helper_dep' (plug_dep.py:1)")
    assert str(w).startswith("plug-in 'plug_dep' cannot be imported in a local worker process (host ") and \
        "): ModuleNotFoundError: No module named 'my_helper_dep' (plug_dep.py:1); a local worker is a fresh " \
        "process with the command's sys.path and environment" in str(w) and "\n" not in str(w)
    assert plugins.worker_import_hint("plug_dep", None, "my_helper_dep", "Ray client actor").startswith(
        "install 'my_helper_dep' where the workers run (on every node of a cluster), or put its folder on PYTHONPATH")
    assert str(pickle.loads(pickle.dumps(w))) == str(w)
    with pytest.raises(plugins.WorkerImportError, match="No module named 'my_helper_dep'"):  # a retried job
        plugins.load_in_worker("local worker process")
    with pytest.raises(plugins.PluginError, match="No module named 'my_helper_dep'"):  # never "unknown recipe"
        RECIPES.get("plug_dep_recipe")
    # found behind a Ray error's cause and an exception chain, and told by a command as one line
    wrapped = RuntimeError("ray.get failed")
    wrapped.cause = w
    try:
        try:
            raise wrapped
        except RuntimeError as inner:
            raise KeyError("later") from inner
    except KeyError as outer:
        assert plugins.worker_import_error(outer) is w
    assert plugins.worker_import_error(ValueError("x")) is None
    assert plugins.explain in interrupts.CRASH_EXPLAINERS
    assert interrupts._explained(wrapped)
    assert capsys.readouterr().err == f"error: {w}\n"


@pytest.mark.parametrize("source, error, hint", [
    (None, "ModuleNotFoundError: No module named 'plug_gone'", "its folder {folder} is not there: install the "
                                                               "plug-in where the workers run"),
    ("import os\nif True:\n    raise OSError('no licence server')\n", "OSError: no licence server (plug_gone.py:3)",
     "its import fails in this process and not in the command's"),
])
def test_a_worker_import_hint_follows_the_cause(tmp_path, monkeypatch, clean_plugins, source, error, hint):
    """The plug-in's own folder missing where the worker runs (another node), or its import raising there."""
    if source is not None:
        (tmp_path / "plug_gone.py").write_text(source)
    monkeypatch.setenv(plugins.ENV, json.dumps([["plug_gone", str(tmp_path)]]))
    with pytest.raises(plugins.WorkerImportError) as e:
        plugins.load_in_worker("Ray client actor")
    assert e.value.error == error and e.value.hint.startswith(hint.format(folder=tmp_path))
    assert str(e.value).startswith("plug-in 'plug_gone' cannot be imported in a Ray client actor (host ")


def _shell_only_dependency(folder: Path) -> None:
    """The tutorial's folder, plus plug_dep.py: the tutorial's module that first imports my_helper_dep, from
    deps/, a folder that only the command puts on its sys.path (_SHELL_ONLY), as a user's shell or notebook may."""
    write_tutorial(folder)
    (folder / "deps").mkdir()
    (folder / "deps" / "my_helper_dep.py").write_text("VALUE = 1\n")
    (folder / "plug_dep.py").write_text("import my_helper_dep  # on the command's sys.path only\n"
                                        + block("plugin-module: my_fda.py", "python"))


# the command, with deps/ on its own sys.path only (its workers do not inherit that: Ray's start from Ray's
# environment; a spawned pool worker would, so the local test's plug-in fails in workers by itself)
_SHELL_ONLY = ("import sys; sys.path.insert(0, 'deps'); from fda_ray.experiments.commands import main; "
               "sys.exit(main(sys.argv[1:]))")


def _one_error_line(p: subprocess.CompletedProcess, module: str, kind: str, missing: str) -> str:
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert p.returncode == 1, (p.returncode, p.stdout[-2000:], p.stderr[-3000:])
    assert len(errors) == 1, p.stderr[-3000:]
    assert errors[0].startswith(f"error: plug-in {module!r} cannot be imported in a {kind} (host "), errors[0]
    assert f"ModuleNotFoundError: No module named {missing!r} ({module}.py:" in errors[0], errors[0]
    assert "Traceback" not in p.stderr and "did you mean" not in p.stderr + p.stdout, p.stderr[-3000:]
    assert "unknown" not in errors[0]
    return errors[0]


def _no_trial_trained(out: Path) -> None:
    trained = [f for f in out.rglob("*") if f.name in ("rows.json", "state.pt")]
    assert not trained and not (out / "summary.md").exists(), trained


@pytest.mark.slow
def test_a_ray_client_actor_that_cannot_import_a_plugin_stops_the_run_in_one_line(tmp_path):
    """`--executor ray`: the actors load the plug-ins when they start, while the driver loads the data; the driver's
    first call to them (before round 1) tells the failure in one line, exit 1 (before: Ray's ActorDiedError, with
    the actor's and the driver's tracebacks)."""
    _shell_only_dependency(tmp_path)
    p = _python(["-c", _SHELL_ONLY, "--import", "plug_dep", "--dataset", "my-blobs", "--method", "fedprox",
                 "--rounds", "1", "--executor", "ray", "--num-sources", "2"], tmp_path)
    _one_error_line(p, "plug_dep", "Ray client actor", "my_helper_dep")
    assert "round " not in p.stdout and "final target accuracy" not in p.stdout, p.stdout


@pytest.mark.slow
def test_a_tune_trial_process_that_cannot_import_a_plugin_stops_the_sweep_in_one_line(tmp_path):
    """`--backend tune`: the sweep loads its plug-ins in a Ray worker of each node before the launch (the trial
    processes' environment), so it stops before any trial runs, without Tune's retries (before: each trial failed
    max_failures + 1 times, then the sweep's summary and its error line)."""
    _shell_only_dependency(tmp_path)
    p = _python(["-c", _SHELL_ONLY, "sweep", "--import", "plug_dep", "--grid", "my-prox.yaml", "--profile", "quick",
                 "--methods", "fedprox_0", "--rounds", "1", "--backend", "tune", "--out", "sweeps/t"], tmp_path)
    _one_error_line(p, "plug_dep", "Tune trial process", "my_helper_dep")
    assert "Tune runs it again" not in p.stderr and "FAILED" not in p.stdout, p.stderr[-3000:]
    _no_trial_trained(tmp_path / "sweeps" / "t")


@pytest.mark.slow
def test_a_tune_trial_that_cannot_import_a_plugin_after_the_check_ends_the_launch_without_retries(tmp_path):
    """The check before a launch passes, yet a trial process cannot import the plug-in (as on a node that joined
    after the check; here the plug-in fails in Ray actors only: Tune's trial processes are actors, the check's tasks
    are not). The failing trial is named in one note, not retried (the same import fails again), the trials not run
    are reported with why, and the sweep ends with one error line and exit 1."""
    _plugin_failing_where(tmp_path, "plug_late", "import ray", "ray.is_initialized() and "
                          "ray.get_runtime_context().get_actor_id() is not None", "my_actor_only_dep")
    p = _python(["-m", "fda_ray.sweep", "--import", "plug_late", "--grid", "my-prox.yaml", "--profile", "quick",
                 "--methods", "fedprox_0,fedprox_1", "--rounds", "1", "--backend", "tune", "--max-concurrent", "1",
                 "--out", "sweeps/t"], tmp_path)
    assert p.returncode == 1, p.stderr[-3000:]
    assert "Tune runs it again" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-3000:]
    (note,) = [x for x in p.stderr.splitlines() if x.startswith("note: ")]
    assert " failed: plug-in 'plug_late' cannot be imported in a Tune trial process (host " in note
    assert "No module named 'my_actor_only_dep' (plug_late.py:3)" in note and note.endswith(
        "the running trials finish, then the sweep ends (no retry: the same import fails again)"), note
    (error,) = [x for x in p.stderr.splitlines() if x.startswith("error: ")]
    assert error.startswith("error: 2 trial(s) failed: fedprox_") and "plug-in 'plug_late' cannot be imported" in error
    assert error.endswith(" --resume"), error
    out = tmp_path / "sweeps" / "t"
    assert not [f for f in out.rglob("*") if f.name in ("rows.json", "state.pt")]
    assert "## Failed trials (2)" in (out / "summary.md").read_text()


def _plugin_failing_where(folder: Path, module: str, setup: str, condition: str, dependency: str) -> None:
    """The tutorial's folder, and its module as `module` that imports `dependency` (which nothing has) where
    `condition` holds: in some processes only, as a library installed only in the command's."""
    write_tutorial(folder)
    (folder / f"{module}.py").write_text(f"{setup}\nif {condition}:  # some processes only\n    import {dependency}\n"
                                         + block("plugin-module: my_fda.py", "python"))


@pytest.mark.slow
def test_a_local_worker_process_that_cannot_import_a_plugin_stops_the_sweep_in_one_line(tmp_path):
    """`--backend local`: a spawned pool worker inherits the sweep's sys.path and environment, so here the plug-in
    itself fails in worker processes only (a library that only the command's process has). The first trial's job
    fails before its run starts; the sweep stops at once, exit 1 (before: the trial was retried in the same worker,
    which then ran without the plug-in: "dataset='my-blobs' is invalid: known datasets: ...")."""
    _plugin_failing_where(tmp_path, "plug_child", "import multiprocessing",
                          "multiprocessing.parent_process() is not None", "my_worker_only_dep")
    p = _python(["-m", "fda_ray.sweep", "--import", "plug_child", "--grid", "my-prox.yaml", "--profile", "quick",
                 "--methods", "fedprox_0,fedprox_1", "--rounds", "1", "--backend", "local", "--workers", "1",
                 "--out", "sweeps/l"], tmp_path)
    _one_error_line(p, "plug_child", "local worker process", "my_worker_only_dep")
    assert "runs again" not in p.stderr and "FAILED" not in p.stdout, p.stderr[-3000:]
    _no_trial_trained(tmp_path / "sweeps" / "l")


# ---------------------------------------------------------------- a plug-in's mistakes, each one line (probe report)

def _blobs(n: int = 40, m: int = 10, d: int = 16, k: int = 4) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(n, d, generator=g), torch.randint(0, k, (n,), generator=g),
            torch.randn(m, d, generator=g), torch.randint(0, k, (m,), generator=g))


@pytest.mark.parametrize("make, expected", [
    (lambda a, b, c, d: _split(a, b, c, d, num_classes=3), "y_train holds the label 3, and num_classes=3 allows 0..2"),
    (lambda a, b, c, d: _split(a, b - 1, c, d), "y_train holds the label -1: class indices are 0..3"),
    (lambda a, b, c, d: _split(a, b * 0 + 0.5, c, d), "y_train holds the float label 0.5: class indices are whole"),
    (lambda a, b, c, d: _split(a, b[:, None].repeat(1, 2), c, d), "y_train has shape (40, 2): (n,) class indices"),
    (lambda a, b, c, d: _split((a * 10).clamp(0, 255).to(torch.uint8), b, c, d),
     "x_train holds uint8 values: features are float32"),
    (lambda a, b, c, d: _split(a, b, c[:, :8], d), "x_test has samples of shape (8,), x_train's are (16,)"),
    (lambda a, b, c, d: _split(a, b[:-5], c, d), "y_train holds 35 labels for 40 samples: one label per sample"),
    (lambda a, b, c, d: (a, b, c, d), "its loader's result is a tuple, not a fda_ray.data.Split"),
    (lambda a, b, c, d: _split(a, b, c, d, num_classes=0), "num_classes is 0: a whole number of classes"),
])
def test_a_plugin_split_that_breaks_the_contract_is_one_line(make, expected):
    from fda_ray.data.base import SplitInvalid, check_split

    with pytest.raises(SplitInvalid) as e:
        check_split("plug-blobs", make(*_blobs()))
    assert str(e.value).startswith(f"dataset 'plug-blobs' is invalid: {expected}") and "\n" not in str(e.value)


def _split(*tensors, num_classes=4):
    from fda_ray.data import Split

    return Split(*tensors, num_classes=num_classes)


def test_a_plugin_split_that_converts_without_loss_is_converted():
    """int32 labels (docs/plugins.md's own loader on an .npz saved with them), whole-number float labels, (n, 1)
    labels, numpy arrays, float64 features and a numpy class count become the contract's types, with the same
    values as the plain int64 / float32 Split."""
    from fda_ray.data.base import check_split

    a, b, c, d = _blobs()
    plain = check_split("plug-blobs", _split(a, b, c, d))
    assert plain.y_train is b and plain.x_train is a  # nothing converted: the loader's own tensors
    for variant in (_split(a, b.int(), c, d.int()), _split(a, b.float(), c, d.float()),
                    _split(a, b[:, None], c, d[:, None]), _split(a.numpy(), b.numpy(), c.numpy(), d.numpy()),
                    _split(a.double(), b, c.double(), d, num_classes=np.int64(4))):
        got = check_split("plug-blobs", variant)
        assert got.y_train.dtype == got.y_test.dtype == torch.int64 and got.x_train.dtype == torch.float32
        assert torch.equal(got.y_train, plain.y_train) and torch.equal(got.y_test, plain.y_test)
        assert torch.equal(got.x_train, plain.x_train) and type(got.num_classes) is int


def test_a_plugin_loader_that_cannot_find_its_file_is_a_missing_dataset(clean_plugins, capsys):
    """A naive loader's np.load of a missing file is a missing dataset (exit 2, the path named), never a refused
    write ("free the space"); an environment count that differs from the registered one blames the registration."""
    from fda_ray.data import DATASETS, DatasetNotFound, Split, load
    from fda_ray.experiments import cli

    def missing(data_dir=None, download=False):
        return np.load("/nonexistent/plug-blobs.npz")

    defaults = DATASETS.get("fashion-mnist").defaults
    DATASETS.add("plug-missing", missing, defaults=defaults)
    with pytest.raises(DatasetNotFound, match=r"^dataset 'plug-missing' could not be read: "
                                              r"/nonexistent/plug-blobs.npz: No such file or directory; searched: "):
        load("plug-missing")
    assert cli.main(["--dataset", "plug-missing", "--rounds", "1", "--executor", "serial"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "could not be read" in err and "free the space" not in err

    a, b, c, d = _blobs()
    envs = tuple((a[i::3], b[i::3]) for i in range(3))
    DATASETS.add("plug-envs", lambda data_dir=None, download=False: Split(
        a[:0], b[:0], c[:0], d[:0], 4, environments=envs, env_names=("e0", "e1", "e2")), defaults=defaults,
        environments=4)
    with pytest.raises(ValueError, match=r"^dataset 'plug-envs' is invalid: it is registered with environments=4 "
                                         r"and its loader returned 3 \(e0, e1, e2\)"):
        load("plug-envs")


class _Tuple(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(x), x


class _Dict(_Tuple):
    def forward(self, x):
        return {"logits": self.fc(x)}


class _TwoArgs(_Tuple):
    def forward(self, x, mask):
        return self.fc(x)


class _Squeezed(_Tuple):
    def forward(self, x):
        return self.fc(x)[:, 0]


@pytest.mark.parametrize("model, expected", [
    (_Tuple(), "its forward returns a tuple, not a tensor: return the (n, 4) outputs alone"),
    (_Dict(), "its forward returns a dict, not a tensor"),
    (_TwoArgs(), "it cannot take its inputs of shape (16,) as its forward's one argument (TypeError: "),
    (torch.nn.Flatten(), "it has no parameters to train"),
    (None, "its builder returned NoneType, not a torch.nn.Module"),
    (_Squeezed(), "it gives outputs of shape (n,) (one number per sample), the data needs (4,)"),
])
def test_a_plugin_model_mistake_is_one_line(model, expected):
    from types import SimpleNamespace

    from fda_ray.runtime.experiment import check_model_fits

    a, b, _, _ = _blobs()
    setting = SimpleNamespace(target_train=(a, b), num_outputs=4, aux_tasks=(), input_shape=(16,))
    with pytest.raises(ValueError) as e:
        check_model_fits(model, "plug_model", setting, "plug-blobs")
    assert str(e.value).startswith(f"model='plug_model' is invalid for dataset 'plug-blobs': {expected}")
    check_model_fits(torch.nn.Linear(16, 4), "plug_model", setting, "plug-blobs")  # the fitting one passes


def test_a_logged_zero_d_tensor_is_stored_as_its_number():
    from fda_ray.runtime.loop import logged

    t = torch.tensor([3.0, 4.0]).norm()
    got = logged("plug_m", {"delta_norm": t, "each": [torch.tensor(1.5), 2.0], "plain": 0.25})
    assert got == {"delta_norm": float(t), "each": [1.5, 2.0], "plain": 0.25}
    assert type(got["delta_norm"]) is float and json.dumps(got)
    with pytest.raises(ValueError, match=r"^method 'plug_m' logged norms= a tensor of shape \(2,\)"):
        logged("plug_m", {"norms": torch.ones(2)})


def _family(name: str, fam: str, fields: dict[str, float], base: type | None = None):
    """An Algorithm class `name` of family `fam` whose Params has `fields` (a float each)."""
    from dataclasses import make_dataclass

    from fda_ray.algorithms import Algorithm, Params
    from fda_ray.algorithms.base import param

    params = make_dataclass(f"{name}Params", [(k, float, param(v, "a field", low=0.0, high=10.0))
                                              for k, v in fields.items()],
                            bases=(base or Params,), frozen=True, namespace={"family": fam})
    return type(name, (Algorithm,), {"name": name, "family": fam, "Params": params})


def test_a_family_flag_that_clashes_is_one_line(clean_plugins, capsys):
    """Family `lr`'s field `source` would be --lr-source, the built-in flag; two families' fields can give one flag
    (my_fam.x and my.fam_x). Each is one line naming both (exit 2), --help included, not argparse's traceback."""
    from fda_ray.algorithms import ALGORITHMS
    from fda_ray.experiments import cli

    ALGORITHMS.add("plug_lr", _family("plug_lr", "lr", {"source": 0.5}))
    with pytest.raises(plugins.PluginError, match=r"^lr.source is invalid: its flag --lr-source \(.*\) is already "
                                                  r"the built-in flag --lr-source \(lr_source\): rename"):
        cli.parser()
    assert cli.main(["--help"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: lr.source is invalid: its flag")
    del ALGORITHMS._items["plug_lr"]
    ALGORITHMS.add("plug_a", _family("plug_a", "my_fam", {"x": 1.0}))
    ALGORITHMS.add("plug_b", _family("plug_b", "my", {"fam_x": 1.0}))
    with pytest.raises(plugins.PluginError, match=r"^my.fam_x is invalid: its flag --my-fam-x \(.*\) is already "
                                                  r"family 'my_fam' parameter 'x''s flag"):
        cli.parser()


def test_a_second_params_class_under_a_family_is_refused(clean_plugins):
    """A family's parameters are one Params class's: a second one under the name (a subclass extending FDAParams,
    another class under 'fedprox') is refused as it is registered, not dropped silently; reusing the class is fine."""
    from fda_ray.algorithms import ALGORITHMS
    from fda_ray.algorithms.fda import FDA
    from fda_ray.algorithms.fda.params import FDAParams

    first = _family("plug_one", "plug_fam", {"mu": 1.0})
    ALGORITHMS.add("plug_one", first)
    ALGORITHMS.add("plug_same", type("plug_same", (first,), {"name": "plug_same"}))  # the same Params: fine
    with pytest.raises(ValueError, match=r"^method 'plug_two' is invalid: its family 'plug_fam' already has the "
                                         r"parameters of .*plug_oneParams \(method 'plug_one'\)"):
        ALGORITHMS.add("plug_two", _family("plug_two", "plug_fam", {"nu": 1.0}))
    extended = _family("plug_ext", "fda", {"gamma": 0.5}, base=FDAParams)
    with pytest.raises(ValueError, match=r"^method 'plug_ext' is invalid: its family 'fda' already has"):
        ALGORITHMS.add("plug_ext", type("plug_ext", (FDA,), {"name": "plug_ext", "Params": extended.Params}))
    assert "plug_two" not in ALGORITHMS.names() and "plug_ext" not in ALGORITHMS.names()


def test_a_dataset_with_partial_defaults_names_what_they_lack(clean_plugins):
    from fda_ray.core.config import DATASET_DEFAULT_KEYS, RunConfig
    from fda_ray.data import DATASETS

    for name in DATASETS.names():  # every built-in gives every key the config reads
        assert set(DATASETS.get(name).defaults) >= set(DATASET_DEFAULT_KEYS), name
    DATASETS.add("plug-partial", lambda data_dir=None, download=False: None, defaults={"model": "simple_cnn"})
    with pytest.raises(ValueError, match=r"^dataset='plug-partial' is invalid: its registered defaults lack "
                                         r"model_weights, partition, .*oracle_lr_target: start from"):
        RunConfig(dataset="plug-partial")


def test_an_entry_point_function_that_raises_is_one_line_and_remembered(tmp_path, monkeypatch, clean_plugins):
    _installed(tmp_path, monkeypatch, "plug_ep_fn",
               "from fda_ray.train.models import MODELS\n\ndef setup():\n    MODELS.add('simple_cnn', None)\n",
               "fn = plug_ep_fn:setup")
    expected = (r"^entry point fda_ray.plugins:fn='plug_ep_fn:setup' is invalid: calling it failed: ValueError: "
                r"model 'simple_cnn' is registered twice \(first by fda_ray.train.models\): pick another name for this "
                r"model \(plug_ep_fn.py:4\)$")
    with pytest.raises(plugins.PluginError, match=expected):
        plugins.load_pending()
    with pytest.raises(plugins.PluginError, match=expected):  # a later lookup raises it again
        plugins.load_pending()


def test_an_abbreviated_import_flag_is_loaded():
    assert plugins.from_argv(["--imp", "a", "--i=b", "--impo=c,d", "--im"]) == ["a", "b", "c", "d"]
    assert plugins.from_argv(["--in", "a", "--", "--imp", "b"]) == []


def test_a_name_clash_and_a_syntax_error_point_at_the_plugins_line(tmp_path, monkeypatch, clean_plugins):
    (tmp_path / "plug_clash.py").write_text("from fda_ray.algorithms import ALGORITHMS\n\n\n"
                                            "ALGORITHMS.add('fedgp', object)\n")
    (tmp_path / "plug_syntax.py").write_text("x = 1\ndef f(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(plugins.PluginError, match=r"^import='plug_clash' is invalid: importing it failed: ValueError: "
                                                  r"method 'fedgp' is registered twice \(first by fda_ray\..*\): pick "
                                                  r"another name for this method \(plug_clash.py:4\)$"):
        plugins.load(["plug_clash"])
    with pytest.raises(plugins.PluginError, match=r"^import='plug_syntax' is invalid: importing it failed: "
                                                  r"SyntaxError: .* \(plug_syntax.py:2\)$"):
        plugins.load(["plug_syntax"])


def test_the_console_script_finds_a_plugin_in_the_current_folder(tmp_path, monkeypatch, clean_plugins):
    """`fda-ray` starts with its bin folder as sys.path[0], not the working directory that `python -m` puts there:
    preload puts it there as `python -m` does, so the same --import works from both."""
    (tmp_path / "plug_here.py").write_text("HERE = True\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path), os.getcwd())])
    with pytest.raises(plugins.PluginError):  # what `fda-ray` did: not found
        plugins.load(["plug_here"])
    assert plugins.preload(["--import", "plug_here", "--method", "fedgp"]) is None
    assert sys.modules["plug_here"].HERE and sys.path[0] == str(tmp_path)
    del sys.modules["plug_here"]


def test_a_name_registered_in_main_is_told_in_a_worker_without_retries(monkeypatch, clean_plugins):
    """A recipe registered by a script's __main__ (of a function from an importable module, even): another process
    imports the module, not the registration; its lookup there raises WorkerImportError (no retry mends it) saying
    to move the registration into a module, not "unknown recipe ... --import MODULE"."""
    from fda_ray.train.client import RECIPES

    monkeypatch.delenv(plugins.MAIN_ENV, raising=False)
    exec(compile("RECIPES.add('plug_main_recipe', len)\n", "script.py", "exec"),
         {"__name__": "__main__", "RECIPES": RECIPES})
    assert json.loads(os.environ[plugins.MAIN_ENV]) == ["recipe plug_main_recipe"]
    assert plugins.ray_env()[plugins.MAIN_ENV] == os.environ[plugins.MAIN_ENV]
    del RECIPES._items["plug_main_recipe"]  # as in a worker: the name is not registered there
    with pytest.raises(plugins.WorkerImportError, match=r"recipe 'plug_main_recipe' is registered in the command's "
                                                        r"__main__ .*; move its registration into a module"):
        RECIPES.get("plug_main_recipe")
    with pytest.raises(ValueError, match="unknown recipe 'plug_other'"):  # an unknown name stays one
        RECIPES.get("plug_other")
