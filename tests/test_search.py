"""Searches with honest model selection (fda_ray.search, fda_ray.selection, fda_ray.papers.searches): the validation
splits, the selection rules, a tiny search end to end on Ray Tune with ASHA, and that no selection but the
oracle reads a test label."""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
import json
import re

import numpy as np
import pyarrow.parquet as pq
import pytest
import ray
import torch

from fda_ray.experiments import sweep
from fda_ray.experiments.search import (
    is_settled, point_of, run_search, search_trials, study_table, studies, trial_rows)
from fda_ray.papers.selection import RULES, best_so_far, final_value, select
from fda_ray.experiments.records import read_rows
from fda_ray.experiments.trials import run_trial
from fda_ray.papers.grids import Profile, Row
from fda_ray.papers.searches import SEARCHES, Dim, Search

from conftest import TEST_THREADS

TINY = {"num_sources": 2, "rounds": 4, "warmup_rounds": 0, "samples_per_client": 128, "test_samples": 100,
        "target_labelled": 40, "batch_target": 8, "threads": TEST_THREADS}


def tiny_search(**kw) -> Search:
    base = dict(name="tiny-beta", dataset="fashion-mnist", methods=("fedgp",), space=(Dim("beta", "uniform", 0.0, 1.0),),
                variable="noise", values=(0.4,), rules=("target_val", "source_val", "oracle"),
                profiles={"quick": Profile(dict(TINY))}, fixed={"val_share": 0.25, "source_val_share": 0.25},
                references=(Row("fedgp_auto", "FedGP_Auto", "fedgp_auto"),), rerun_seeds=1, grace_period=1,
                note="a test")
    base.update(kw)
    return Search(**base)


# ---------------------------------------------------------------- the validation splits

def test_validation_splits_are_held_out_seeded_and_never_trained_on(tiny, fmnist_dir):
    from fda_ray.data import load
    from fda_ray.runtime.partitions import build_setting

    split = load("fashion-mnist", str(fmnist_dir))
    plain = build_setting(split, tiny().resolved())
    cfg = tiny(val_share=0.25, source_val_share=0.2)
    held = build_setting(split, cfg.resolved())
    x, y = plain.target_train
    tx, ty = held.target_train
    vx, vy = held.target_val
    assert (len(ty), len(vy)) == (24, 8)  # 32 labelled: a quarter held out
    # the two parts are the labelled set, disjoint: every labelled image is in exactly one of them
    key = lambda t: [bytes(r.numpy().tobytes()) for r in t]  # noqa: E731
    assert sorted(key(tx) + key(vx)) == sorted(key(x))
    assert not set(key(tx)) & set(key(vx))
    for (sx, _), (px, _) in zip(held.sources, plain.sources):
        assert len(sx) == len(px) - round(0.2 * len(px))
    assert len(held.source_val[1]) == sum(round(0.2 * len(p[1])) for p in plain.sources)
    assert torch.equal(held.target_test[1], plain.target_test[1])  # the test set is unchanged
    again = build_setting(split, cfg.resolved())
    assert torch.equal(again.target_val[0], vx)  # seeded by (seed, purpose)
    other = build_setting(split, tiny(val_share=0.25, seed=1).resolved())
    assert not torch.equal(other.target_val[0], vx)


def test_validation_on_device_shards_hides_the_held_out_labels(fmnist5, fmnist_dir):
    """FSSDA's labelled target samples live on the devices: the held-out ones become unlabelled there."""
    from fda_ray.data.base import UNLABELLED
    from fda_ray.data import load
    from fda_ray.runtime.partitions import build_setting

    split = load("fmnist-5", str(fmnist_dir))
    plain = build_setting(split, fmnist5().resolved())
    held = build_setting(split, fmnist5(val_share=0.3).resolved())
    labelled = lambda s: sum(int((y != UNLABELLED).sum()) for _, y in s.target_parts)  # noqa: E731
    assert labelled(plain) == 30 and labelled(held) == 21 and len(held.target_val[1]) == 9
    assert len(held.target_train[1]) == 21
    assert [len(y) for _, y in held.target_parts] == [len(y) for _, y in plain.target_parts]


def test_validation_metrics_read_only_their_split(tiny):
    from fda_ray.runtime.engine import run

    h = run(tiny(val_share=0.25, source_val_share=0.2))
    for r in h.rows:
        for m in ("val_accuracy", "val_loss", "source_val_accuracy", "source_val_loss", "accuracy"):
            assert r[m] is not None
    assert "val_accuracy" not in run(tiny()).rows[-1]  # nothing held out: no validation columns


@pytest.mark.parametrize("field,value", [("val_share", 1.0), ("val_share", 0.0), ("source_val_share", -0.1),
                                         ("val_share", True)])
def test_bad_shares_are_one_line_errors(tiny, field, value):
    with pytest.raises(ValueError, match=f"{field}={value!r} is invalid: a share in \\(0, 1\\)"):
        tiny(**{field: value})


def test_validation_share_too_large_for_the_target(tiny):
    from fda_ray.runtime.engine import build_experiment

    with pytest.raises(ValueError, match="val_share=0.99 is invalid: it would hold out all 32"):
        build_experiment(tiny(val_share=0.99))


# ---------------------------------------------------------------- selection rules (pure)

def _rows(*values, metric="val_accuracy"):
    return [{"round": i, metric: v, "accuracy": 0.5} for i, v in enumerate(values)]


def test_select_takes_the_finished_trial_with_the_best_final_value_ties_to_the_earlier():
    trials = [("a", _rows(0.9, 0.3), True), ("b", _rows(0.1, 0.6), True), ("c", _rows(0.2, 0.6), True),
              ("d", _rows(0.9, 0.95), False)]  # d stopped early: not selectable
    assert select(trials, "target_val") == "b"
    assert select([t for t in trials if t[0] != "b"], "target_val") == "c"
    assert select([("x", _rows(0.5), False)], "target_val") is None
    assert final_value([{"v": 1.0}, {"v": None}], "v") == 1.0
    assert best_so_far([None, 0.2, 0.1, 0.5]) == [None, 0.2, 0.2, 0.5]
    assert RULES["oracle"].oracle and not any(RULES[r].oracle for r in ("target_val", "source_val", "client_val"))


def test_search_definitions_plan_valid_trials_and_extend_their_points():
    for name, s in SEARCHES.items():
        for profile in s.profiles:
            for study in studies(s):
                trials = search_trials(s, profile, study, 3)
                assert len({t.key for t in trials}) == 3, name
                assert search_trials(s, profile, study, 5)[:3] == trials  # --num-samples extends, --resume finds
                for t in trials:
                    for d in s.space:
                        v = point_of(s, t.params)[d.name]
                        assert (v in d.values) if d.kind == "choice" else d.low <= v <= d.high
        assert not RULES[s.rules[0]].oracle  # what the scheduler optimises is never the test set
    wca = SEARCHES["fedwca-temperatures"].samples("fedwca", 1.0, 30)  # FedWCA's 5 x 5 set: each point once
    assert len(wca) == 25 and len({tuple(p.values()) for p in wca}) == 25
    with pytest.raises(ValueError, match="loguniform"):
        Dim("x", "loguniform", 0.0, 1.0)
    with pytest.raises(ValueError, match="the first rule is what the scheduler optimises"):
        tiny_search(rules=("oracle", "target_val"))


# ---------------------------------------------------------------- selection never reads a test label

def test_corrupting_the_test_labels_leaves_every_validation_selection_unchanged(fmnist_dir, tmp_path, monkeypatch):
    """The same study run twice, the second time with the target's test labels shuffled: the test accuracies
    move, the validation columns do not (bit for bit: the same code path), and neither do the selections of the
    validation rules."""
    import fda_ray.runtime.experiment as experiment

    search = tiny_search()
    study = studies(search)[0]
    trials = search_trials(search, "quick", study, 4, {"data_dir": str(fmnist_dir)})
    clean = tmp_path / "clean"
    for t in trials:
        run_trial(t, clean)
    build = experiment.build_setting

    def corrupted(split, cfg):
        s = build(split, cfg)
        perm = torch.from_numpy(np.random.default_rng(0).permutation(len(s.target_test[1])))
        return dataclasses.replace(s, target_test=(s.target_test[0], (s.target_test[1][perm] + 3) % 10))

    monkeypatch.setattr(experiment, "build_setting", corrupted)
    bad = tmp_path / "corrupted"
    for t in trials:
        run_trial(t, bad)
    a, b = study_table(search, trials, clean), study_table(search, trials, bad)
    moved = 0
    for t in trials:
        ra, rb = read_rows(clean / t.key)["rows"], read_rows(bad / t.key)["rows"]
        for x, y in zip(ra, rb):
            assert (x["val_accuracy"], x["source_val_accuracy"]) == (y["val_accuracy"], y["source_val_accuracy"])
            moved += x["accuracy"] != y["accuracy"]
    assert moved > 0  # the corruption reached the test set
    for rule in ("target_val", "source_val"):
        assert a["selected"][rule] == b["selected"][rule] is not None


# ---------------------------------------------------------------- end to end on Ray Tune

@pytest.mark.slow
def test_tiny_search_on_tune_with_asha_selects_by_validation_and_reruns(fmnist_dir, tmp_path, monkeypatch, capsys,
                                                                         no_ray):
    search = tiny_search()
    monkeypatch.setitem(SEARCHES, search.name, search)
    out = tmp_path / "search"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    args = ["--search", search.name, "--num-samples", "6", "--max-concurrent", "1", "--data-dir", str(fmnist_dir),
            "--out", str(out)]
    assert sweep.main(args) == 0
    sel = json.loads((out / "selection.json").read_text())
    table = sel["studies"]["fedgp @ noise 0.4"]
    status = [e["status"] for e in table["trials"]]
    assert "stopped" in status and "finished" in status  # ASHA stopped some early, let others finish
    # the selected configuration is the finished trial with the best final validation accuracy (recomputed here)
    records = out / "trials"
    finished = {e["key"]: read_rows(records / e["key"])["rows"][-1]["val_accuracy"]
                for e in table["trials"] if e["status"] == "finished" and (records / e["key"] / "rows.json").exists()}
    best = max(finished.values())
    assert finished[table["selected"]["target_val"]] == best
    assert list(finished).index(table["selected"]["target_val"]) == min(i for i, v in enumerate(finished.values())
                                                                        if v == best)
    for e in table["trials"]:
        if e["status"] == "stopped":
            rows, done = trial_rows(records / e["key"])
            assert not done and rows[-1]["round"] < TINY["rounds"] - 1 and is_settled(records / e["key"])
            stopped = json.loads((records / e["key"] / "stopped.json").read_text())
            assert stopped["environment"]["torch"] == torch.__version__
    # the reruns: every rule's selection and the reference on the fresh seed 1, test accuracy reported
    reruns = table["reruns"]
    assert set(reruns) == {"target_val", "source_val", "oracle"}
    for keys in reruns.values():
        assert [json.loads((records / k / "trial.json").read_text())["seed"] for k in keys] == [1]
    assert len(sel["references"]["0.4"]["fedgp_auto"]) == 1
    text = (out / "summary.md").read_text()
    assert "test-set oracle (reads test labels)" in text and "FedGP_Auto" in text
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert {r["search_phase"] for r in rows} == {"search", "rerun"}
    for rule, keys in reruns.items():  # each rule's choice and reruns say so (two rules: one trial, both named)
        for k in [table["selected"][rule], *keys]:
            assert all(rule in r["selected_by"].split(",") for r in rows if r["trial"] == k)
    assert all(r["selected_by"] is None for r in rows if r["trial"] not in
               {k for ks in reruns.values() for k in ks} | set(table["selected"].values()))
    assert all(r["val_accuracy"] is not None and r["accuracy"] is not None for r in rows)
    # every trial's resolved config and build, stopped ones too (from stopped.json), as a grid sweep's parquet has
    assert all(r["build_torch"] == torch.__version__ and r["lr_source"] is not None and r["rounds"] is not None
               for r in rows)
    assert (out / "trajectory.png").stat().st_size > 0
    # resumable: nothing settled runs again
    capsys.readouterr()
    assert sweep.main(args + ["--resume"]) == 0
    printed = capsys.readouterr().out
    assert "6 trials, 6 settled before" in printed and "done before" in printed
    assert json.loads((out / "selection.json").read_text())["studies"]["fedgp @ noise 0.4"]["selected"] == table["selected"]
    # the same from Python
    from fda_ray.experiments.search import search as run_from_python

    sel = run_from_python(search, out=out, num_samples=6, max_concurrent=1, data_dir=str(fmnist_dir))
    assert sel["studies"]["fedgp @ noise 0.4"]["selected"] == table["selected"]


@pytest.mark.parametrize("args,message", [
    (["--search", "nope"], "search='nope' is invalid: a search file (.yaml, .yml, .json) or one of the known searches: beta"),
    (["--search", "beta", "--grid", "noise"], "grid='noise' is invalid with --search beta"),
    (["--search", "beta", "--backend", "local"], "scheduler='asha' is invalid with --backend local"),
    (["--search", "beta", "--seeds", "2"], "seeds=2 is invalid with --search"),
    (["--search", "beta", "--num-samples", "0"], "num_samples=0 is invalid"),
    (["--search", "beta", "--scheduler", "hyperband"], "scheduler='hyperband' is invalid: one of asha, none"),
    (["--search", "beta", "--methods", "ditto"], "methods='ditto' is invalid: search 'beta' searches fedgp, fedda"),
    (["--search", "beta", "--beta", "0.3"], "beta=0.3 is invalid here: search 'beta' searches it"),
    ([], "grid=None is invalid: name a grid"),
])
def test_search_bad_input_is_one_line_exit_2(args, message, capsys, tmp_path):
    assert sweep.main(args + ["--out", str(tmp_path / "x"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_optuna_search_draws_in_the_space_selects_by_validation_and_resumes(fmnist_dir, tmp_path, monkeypatch, capsys,
                                                                            no_ray):
    """--search-alg optuna: Optuna's TPE draws the points through Tune; --resume tells it the settled ones and
    runs only the rest of --num-samples."""
    search = tiny_search(references=(), rules=("target_val", "oracle"))
    monkeypatch.setitem(SEARCHES, search.name, search)
    out = tmp_path / "optuna"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    args = ["--search", search.name, "--search-alg", "optuna", "--scheduler", "none", "--max-concurrent", "1",
            "--data-dir", str(fmnist_dir), "--out", str(out), "--track", "tensorboard"]
    assert sweep.main(args + ["--num-samples", "3"]) == 0
    table = json.loads((out / "selection.json").read_text())["studies"]["fedgp @ noise 0.4"]
    assert [e["status"] for e in table["trials"]] == ["finished"] * 3
    # every study trial's rounds reach the trackers, as a random search's do (an Optuna study's reached none)
    from test_tracking import tensorboard_scalars

    for e in table["trials"]:
        rows = read_rows(out / "trials" / e["key"])["rows"]
        logged = tensorboard_scalars(out / "tensorboard" / e["key"])["accuracy"]
        assert logged == [(r["round"], pytest.approx(r["accuracy"])) for r in rows], e["key"]
    betas = [e["point"]["beta"] for e in table["trials"]]
    assert len(set(betas)) == 3 and all(0.0 <= b <= 1.0 for b in betas)
    vals = [e["val_accuracy"] for e in table["trials"]]
    assert table["selected"]["target_val"] == table["trials"][vals.index(max(vals))]["key"]
    capsys.readouterr()
    assert sweep.main(args + ["--num-samples", "4", "--resume"]) == 0
    assert "4 trials (Optuna), 3 settled before" in capsys.readouterr().out
    again = json.loads((out / "selection.json").read_text())["studies"]["fedgp @ noise 0.4"]["trials"]
    assert [e["key"] for e in again[:3]] == [e["key"] for e in table["trials"]] and len(again) == 4


def test_a_python_search_calls_summary_says_what_the_call_changed(tmp_path, monkeypatch):
    """search() from Python has no command line to read: its summary names the call with its arguments, says what
    the call changed beside the profile (from its sweep.json: it said only "50 rounds as in the paper"), and how to
    go on after an interruption (not `search(...) --resume`)."""
    from fda_ray.experiments import search as search_module
    from fda_ray.experiments.manifest import read as read_manifest
    from fda_ray.papers.searches import SEARCHES

    seen = {}

    def ran(search, **kw):  # the launch itself is tested elsewhere: here what the call hands over
        seen.update(kw)
        return 130

    monkeypatch.setattr(search_module, "run_search", ran)
    from fda_ray.core.quiet import QUIET_ENV

    monkeypatch.setenv(QUIET_ENV, "0")
    monkeypatch.delenv("RAY_AIR_NEW_OUTPUT", raising=False)
    with pytest.raises(KeyboardInterrupt):
        search_module.search("beta", out=tmp_path / "s", methods=["fedgp"], rounds=2, samples_per_client=200)
    # quiet as the command is, before Tune starts (its configuration boxes and hints printed from Python)
    assert os.environ[QUIET_ENV] == "1" and os.environ["RAY_AIR_NEW_OUTPUT"] == "0"
    with pytest.raises(ValueError, match="^verbose='yes' is invalid: True or False$"):
        search_module.search("beta", out=tmp_path / "s", methods=["fedgp"], verbose="yes")
    command = seen["command"]
    assert command == ("fda_ray.search.search('beta', profile='quick', methods=['fedgp'], rounds=2, "
                       "samples_per_client=200)")
    text = search_module.summarize(SEARCHES["beta"], "quick", {}, {}, {}, command, 4, "asha", "random",
                                   read_manifest(tmp_path / "s"))
    assert "The command changed: rounds=2, samples_per_client=200, methods=fedgp (the tables are what ran)." in text
    assert search_module.resume_hint(command) == f"`{command}` again with the same out (settled trials are kept)"
    assert search_module.resume_hint("python -m fda_ray.sweep --search beta") == \
        "`python -m fda_ray.sweep --search beta --resume`"


def test_a_python_search_holds_its_folders_lock(tmp_path, monkeypatch):
    """search() from Python takes `out`'s lock as the command does: a sweep or a second search() into the same
    folder is refused in one line while it runs (both ran every trial into one folder before), and the lock is
    given back when the call ends, however it ends."""
    from fda_ray.core import locks
    from fda_ray.experiments import search as search_module

    out = tmp_path / "s"
    seen = {}

    def ran(search, **kw):  # while the search runs: its lock is this process's, and another writer is refused
        seen["holder"] = locks.holder(out / locks.LOCK_FILE)
        with pytest.raises(locks.LockedError, match=r"^out='.*s' is invalid: another sweep writes there now"):
            with locks.held(out, "out", "python -m fda_ray.sweep --search beta --resume"):
                pass
        return 130

    monkeypatch.setattr(search_module, "run_search", ran)
    with pytest.raises(KeyboardInterrupt):
        search_module.search("beta", out=out, methods=["fedgp"], rounds=2)
    assert seen["holder"]["pid"] == os.getpid() and seen["holder"]["command"].startswith("fda_ray.search.search(")
    assert not (out / locks.LOCK_FILE).exists()  # given back
    with locks.held(out, "out", "another sweep"):  # and the other way round: a search() into a folder held
        with pytest.raises(ValueError, match="another sweep writes there now"):
            search_module.search("beta", out=out, methods=["fedgp"], rounds=2)


def test_a_search_without_a_note_summarises():
    """`note` is optional in a search file: the summary opens with the space (it failed on note[0] once every trial
    had run)."""
    from fda_ray.experiments.search import summarize
    from fda_ray.papers.searches import SEARCHES

    search = dataclasses.replace(SEARCHES["beta"], note="")
    text = summarize(search, "quick", {}, {}, {}, "python -m fda_ray.sweep --search my.yaml", 4, "asha", "random")
    assert "\nSpace: beta ~ uniform[0, 1]; 4 trials a study" in text
    noted = summarize(SEARCHES["beta"], "quick", {}, {}, {}, "cmd", 4, "asha", "random")
    assert "\nStatic beta of FedGP and FedDA" in noted


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in (Path(__file__).resolve().parents[1] / "docs" /
                                                                  "results").glob("search-*/sweep.json")))
def test_a_committed_search_plans_the_trials_its_records_hold(folder):
    """Each committed search's command, run today, plans the trials in its folder (the same keys: the same fields):
    a change to a search's settings (fssda-temperature lost its grid's Adam when SGD became FSSDA's default) would
    otherwise leave its documented command training other trials than the page reports."""
    import re

    from fda_ray.experiments.search import load_search, search_trials, studies

    root = Path(__file__).resolve().parents[1] / "docs" / "results" / folder
    manifest = json.loads((root / "sweep.json").read_text())
    search = load_search(manifest["name"])
    recorded = {p.name for p in (root / "trials").iterdir()}
    for study in studies(search, values=manifest["values"], methods=manifest["rows"]):
        mine = sorted(k for k in recorded
                      if re.match(rf"{re.escape(study.method)}-s\d\d-{search.variable}{study.value:g}-seed0-", k))
        planned = [t.key for t in search_trials(search, manifest["profile"], study, len(mine),
                                                manifest["overrides"])]
        assert mine and sorted(planned) == mine, (study, planned[:2], mine[:2])


@pytest.mark.slow
def test_optuna_drawing_a_point_again_reuses_its_trial_instead_of_failing_the_study(fmnist_dir, tmp_path,
                                                                                    monkeypatch, capsys, no_ray):
    """A space of choices alone: Optuna's TPE draws a point again (4 samples of 2 points), whose trial is the finished
    one; it reports that trial's result once (ASHA failed the whole study on a trial that reported nothing)."""
    search = tiny_search(space=(Dim("beta", "choice", values=(0.2, 0.8)),), references=(),
                         rules=("target_val", "oracle"))
    monkeypatch.setitem(SEARCHES, search.name, search)
    out = tmp_path / "optuna"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    assert sweep.main(["--search", search.name, "--search-alg", "optuna", "--num-samples", "4", "--max-concurrent",
                       "1", "--data-dir", str(fmnist_dir), "--out", str(out)]) == 0
    table = json.loads((out / "selection.json").read_text())["studies"]["fedgp @ noise 0.4"]
    assert {e["point"]["beta"] for e in table["trials"]} <= {0.2, 0.8}
    assert table["selected"]["target_val"] in {e["key"] for e in table["trials"]}


def test_a_resumed_trial_counts_its_earlier_reports_for_ashas_rungs(fmnist_dir, tmp_path):
    """ASHA's time is the reports a trial made, those before a resume included (training_iteration restarts at 1 in
    the new process: a resumed trial's round 19 met a new trial's round 9 at a rung): run_trial hands the trainable
    the rows it goes on from (after its checks of the state), [] for a trial from round 0."""
    from fda_ray.experiments.search import search_trials, studies
    from fda_ray.experiments.tune import REPORTS_DONE, asha

    search = tiny_search(fixed={"val_share": 0.25, "source_val_share": 0.25, "data_dir": str(fmnist_dir)})
    trial = search_trials(search, "quick", studies(search)[0], 1)[0]
    seen: list[list] = []

    def cut(row):
        if row["round"] == 1:
            raise KeyboardInterrupt  # cut off after its second round (state.pt holds rounds 0 and 1)

    from fda_ray.runtime.failures import RunInterrupted

    with pytest.raises(RunInterrupted):
        run_trial(trial, tmp_path, report=cut, on_resume=seen.append)
    run_trial(trial, tmp_path, on_resume=seen.append)
    assert [[r["round"] for r in rows] for rows in seen] == [[], [0, 1]]
    assert asha("val_accuracy", 51, 10, 2)._time_attr == REPORTS_DONE


def test_ashas_max_t_fits_the_longest_trial_a_searched_knob_plans(tmp_path):
    """A knob that sets the rounds (warmup_rounds here): max_t is one more than the longest trial's rounds, for the
    random search's trials and for Optuna's (the space's corners), so no trial is cut at max_t and left out."""
    from fda_ray.experiments.search import corner_trials, scheduler_for, search_trials, studies

    search = tiny_search(space=(Dim("warmup_rounds", "choice", values=(1, 4)),), grace_period=5)
    study = studies(search)[0]
    longest = TINY["rounds"] + 4 + 1
    for trials in (search_trials(search, "quick", study, 2), corner_trials(search, "quick", study)):
        assert scheduler_for(search, "asha", "val_accuracy", trials)._max_t == longest


@pytest.mark.parametrize("edit,message", [
    (dict(space=(Dim("beta", "uniform", 0.0, 1.3),)), "space[0].high=1.3 is invalid: beta takes a number in [0, 1]"),
    (dict(space=(Dim("lr_source", "loguniform", 1e-4, 1e-2), Dim("fedwca.temp_a", "choice", values=(0.1, -1.0)))),
     "space[1].values[1]=-1.0 is invalid: fedwca.temp_a takes"),
    (dict(fixed={}), "rules[0]='target_val' is invalid: it reads val_accuracy, which a trial reports only with "
                     "held-out target samples (val_share > 0"),
    (dict(fixed={"val_share": 0.25}), "rules[1]='source_val' is invalid: it reads source_val_accuracy"),
    # a fixed field's or the profile's own error, as it is (it was blamed on the first knob's bound: "space[0].low=0.0
    # is invalid: beta takes a finite number > 0")
    (dict(fixed={"val_share": 0.25, "source_val_share": 0.25, "lr_target": -1.0}),
     "profile 'quick': lr_target=-1.0 is invalid: a finite number > 0"),
    (dict(profiles={"quick": Profile({**TINY, "samples_per_client": -5})}),
     "profile 'quick': samples_per_client=-5 is invalid: a positive integer"),
])
def test_a_search_file_that_could_fail_mid_search_is_one_line_before_any_trial(edit, message, tmp_path):
    """What a draw or a report would fail on in the middle of a search (a bound outside its field's range, a rule
    whose column no trial reports) is one line when the file is read."""
    from fda_ray.experiments.search import load_search
    from fda_ray.papers.files import DefinitionFileError, search_to_dict, dump

    path = tmp_path / "s.yaml"
    path.write_text(dump(search_to_dict(tiny_search(**edit)), "yaml"))
    with pytest.raises(DefinitionFileError) as e:
        load_search(str(path))
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("edit,message", [
    (dict(references=(Row("fedgp_auto", "a", "fedgp_auto"), Row("fedgp_auto", "b", "fedda_auto"))),
     "references[1].key='fedgp_auto' is invalid: given twice"),
    (dict(methods=("fedgp", "fedgp")), "methods[1]='fedgp' is invalid: given twice"),
    (dict(values=(0.4, 0.4)), "values[1]=0.4 is invalid: given twice"),
])
def test_a_search_names_each_study_and_reference_once(edit, message):
    with pytest.raises(ValueError) as e:
        tiny_search(**edit)
    assert message in str(e.value)


def test_a_search_refuses_an_override_of_its_settings_fields(capsys, tmp_path):
    """--noise with the beta search (its settings are noise levels), --test-env with fssda-temperature (its setting
    sets source_envs and test_env): a study sets them, so the flag would be dropped without a word; one line."""
    assert sweep.main(["--search", "beta", "--noise", "0.3", "--dry-run", "--out", str(tmp_path / "a")]) == 2
    assert capsys.readouterr().err == ("error: noise=0.3 is invalid here: search 'beta' sets it for each of its "
                                       "settings (noise: choose them with --values)\n")
    assert sweep.main(["--search", "fssda-temperature", "--test-env", "4", "--dry-run", "--out",
                       str(tmp_path / "b")]) == 2
    assert "test_env=4 is invalid here: search 'fssda-temperature' sets it" in capsys.readouterr().err


@pytest.mark.slow
def test_a_search_run_in_chunks_reports_every_chunk_and_refuses_other_settings(fmnist_dir, tmp_path, monkeypatch,
                                                                              capsys):
    """--values 0.2, then --values 0.4 --resume: the folder's summary, selection.json and sweep.json hold both
    studies (the first chunk's were left in trials/ and in no output). A resume with another --rounds, or with the
    other search algorithm, would start other trials beside the recorded ones: one line, exit 2, nothing changed."""
    search = tiny_search(values=(0.2, 0.4), references=(), rules=("target_val", "oracle"))
    monkeypatch.setitem(SEARCHES, search.name, search)
    out = tmp_path / "chunks"
    base = ["--search", search.name, "--backend", "local", "--scheduler", "none", "--num-samples", "1",
            "--data-dir", str(fmnist_dir), "--out", str(out), "--no-figures"]
    assert sweep.main(base + ["--values", "0.2"]) == 0
    assert sweep.main(base + ["--values", "0.4", "--resume"]) == 0
    sel = json.loads((out / "selection.json").read_text())
    assert set(sel["studies"]) == {"fedgp @ noise 0.2", "fedgp @ noise 0.4"}
    assert json.loads((out / "sweep.json").read_text())["values"] == [0.2, 0.4]
    assert "noise 0.2" in (out / "summary.md").read_text()
    before = sorted(p.name for p in (out / "trials").iterdir())
    capsys.readouterr()
    assert sweep.main(base + ["--values", "0.4", "--resume", "--rounds", "3"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"resume=True is invalid: trial fedgp-s00 at 0\.[24], seed 0 was recorded with other settings "
                     r"\(.*rounds 4 there, 3 here", err) and len(err.strip().splitlines()) == 1, err
    optuna = [x if x != "local" else "tune" for x in base]  # (Optuna runs on Tune; refused before Ray starts)
    assert sweep.main(optuna + ["--resume", "--search-alg", "optuna", "--dry-run"]) == 2
    assert "holds a random search's trials of study fedgp @ noise 0.2" in capsys.readouterr().err
    assert sorted(p.name for p in (out / "trials").iterdir()) == before


@pytest.mark.parametrize("kw,message", [
    (dict(profile="big"), "profile='big' is invalid: search 'beta' has quick, paper"),
    (dict(num_samples=0), "num_samples=0 is invalid: an integer >= 1"),
    (dict(scheduler="hyperband"), "scheduler='hyperband' is invalid: one of asha, none"),
    (dict(search_alg="bohb"), "search_alg='bohb' is invalid: one of random, optuna"),
    (dict(rerun_seeds=0), "rerun_seeds=0 is invalid: an integer >= 1"),
    (dict(values=[0.5]), "values=0.5 is invalid: search 'beta' has noise in 0.2, 0.6"),
])
def test_the_python_search_checks_its_arguments_as_the_command_does(kw, message, tmp_path):
    """fda_ray.search.search: the command's checks, one line each, before any work (num_samples=0 ran 8 trials,
    scheduler='hyperband' ran ASHA and recorded 'hyperband', profile='big' was a KeyError)."""
    from fda_ray.experiments.search import search as run_from_python

    with pytest.raises(ValueError) as e:
        run_from_python("beta", out=str(tmp_path / "s"), **kw)
    assert str(e.value) == message and not (tmp_path / "s").exists()


def test_the_python_search_refuses_a_folder_that_holds_another_search(tmp_path):
    """Called on a folder of another search, it replaced that search's summary and selection; now one line, as the
    command's --resume; its own folder gets a sweep.json (collect reads it)."""
    from fda_ray.experiments.manifest import Manifest, read as read_manifest, write as write_manifest
    from fda_ray.experiments.search import search as run_from_python
    from fda_ray.core.storage import storage_path

    out = storage_path(tmp_path / "s")
    out.mkdir()
    write_manifest(out, Manifest(kind="search", name="beta", profile="quick", command="python -m fda_ray.sweep "
                                                                                      "--search beta"))
    with pytest.raises(ValueError, match=r"out='.*s' is invalid for search 'lr': .*beta"):
        run_from_python("lr", out=str(tmp_path / "s"))
    assert read_manifest(out).name == "beta"


def test_results_load_counts_a_trial_asha_stopped_on_its_last_round(tmp_path):
    """A rung on a trial's last report: ASHA stops it after every round trained (stopped.json, complete: true); the
    selection counts it finished, and results.load now has its rows too (it read rows.json only)."""
    import shutil

    import fda_ray.results

    src = Path(__file__).resolve().parents[1] / "docs" / "results" / "search-beta" / "trials"
    keys = sorted(p.name for p in src.iterdir() if (p / "rows.json").is_file())[:2]
    for k in keys:
        shutil.copytree(src / k, tmp_path / "trials" / k)
    whole = fda_ray.results.load(tmp_path)
    stopped = tmp_path / "trials" / keys[1]
    data = json.loads((stopped / "rows.json").read_text())
    (stopped / "stopped.json").write_text(json.dumps({"rows": data["rows"], "stopped_after": data["rows"][-1]["round"],
                                                      "complete": True, "environment": data.get("environment")}))
    (stopped / "rows.json").unlink()
    again = fda_ray.results.load(tmp_path)
    assert len(again) == len(whole) and list(again.trial.unique()) == keys
    cols = ["trial", "round", "accuracy", "val_accuracy", "beta", "rounds"]
    assert again[cols].equals(whole[cols])
    config = {**data["config"], "lr_source": 0.123}  # stopped.json names what the trial ran with: read, not resolved
    (stopped / "stopped.json").write_text(json.dumps({"rows": data["rows"], "complete": True, "config": config}))
    assert set(fda_ray.results.load(tmp_path).query(f"trial == '{keys[1]}'").lr_source) == {0.123}
    (stopped / "stopped.json").write_text(json.dumps({"rows": data["rows"][:3], "complete": False}))
    assert list(fda_ray.results.load(tmp_path).trial.unique()) == keys[:1]  # cut at a rung: not finished
    (stopped / "stopped.json").write_text("{damaged")
    assert list(fda_ray.results.load(tmp_path).trial.unique()) == keys[:1] and (stopped / "stopped.json").is_file()


@pytest.mark.parametrize("dim,message", [
    ({"name": "beta", "kind": "uniform", "low": "zero", "high": 1.0}, "space[0].low='zero' is invalid: a number"),
    ({"name": "beta", "kind": "choice", "values": [0.2, 0.4], "low": 0.0},
     "space[0].low=0.0 is invalid: not read by kind 'choice'"),
    ({"name": "beta", "kind": "uniform", "low": 0.0, "high": 1.0, "values": [0.5]},
     "space[0].values=[0.5] is invalid: not read by kind 'uniform'"),
])
def test_a_search_files_dimension_is_checked_once_and_every_key_is_read(dim, message, tmp_path):
    """The line names the file once (it said it twice), and a key the dimension's kind ignores is refused."""
    from fda_ray.experiments.search import load_search
    from fda_ray.papers.files import DefinitionFileError, dump, search_to_dict

    data = search_to_dict(tiny_search())
    data["space"] = [dim]
    (tmp_path / "s.yaml").write_text(dump(data, "yaml"))
    with pytest.raises(DefinitionFileError) as e:
        load_search(str(tmp_path / "s.yaml"))
    assert str(e.value).startswith(f"search file '{tmp_path / 's.yaml'}': {message}")
    assert str(e.value).count("search file") == 1


def test_a_dry_run_counts_the_trials_a_choice_space_has(capsys, tmp_path):
    assert sweep.main(["--search", "fedwca-temperatures", "--num-samples", "30", "--dry-run", "--out",
                       str(tmp_path / "x")]) == 0
    out = capsys.readouterr().out
    assert "1 studies x 25 trials (its space has 25 points)" in out and out.count(": fedwca @ ") == 25


def test_a_search_chunk_is_the_union_of_the_folders_and_this_launchs_studies():
    """The resume of a search (the command's --resume and the Python search() alike) runs and reports every chunk's
    methods and values, in the search's order; another profile or other fields are another search (as it is)."""
    from fda_ray.experiments.arguments import search_chunk
    from fda_ray.experiments.manifest import Manifest

    beta = SEARCHES["beta"]
    held = Manifest(kind="search", name="beta", profile="quick", rows=("fedda",), values=(0.6,))
    new = Manifest(kind="search", name="beta", profile="quick", rows=("fedgp",), values=(0.2,))
    merged = search_chunk(held, new, beta)
    assert (merged.rows, merged.values) == (("fedgp", "fedda"), (0.2, 0.6))
    assert search_chunk(held, dataclasses.replace(new, rows=None), beta).rows is None  # all methods
    assert search_chunk(held, dataclasses.replace(new, profile="paper"), beta) == \
        dataclasses.replace(new, profile="paper")
    assert search_chunk(None, new, beta) == new


def test_a_search_whose_out_was_moved_while_it_ran_selects_nothing(fmnist_dir, tmp_path, monkeypatch, capsys):
    """As a grid sweep: --out moved away mid-search ends in one error line and exit 1, no selection.json or summary
    over part of its trials (the Python search(), which takes no lock, is not judged by one)."""
    import shutil

    from fda_ray.core import locks
    from fda_ray.experiments import search as search_mod

    out = tmp_path / "s"
    seen = []

    def moved(*a, **kw):
        seen.append(1)
        shutil.move(str(out), str(tmp_path / "elsewhere"))
        (out / "trials").mkdir(parents=True)
        return []

    monkeypatch.setattr("fda_ray.experiments.backends.run_local", moved)
    with locks.held(out, "out", "test"):
        from fda_ray.papers.searches import SEARCHES

        code = search_mod.run_search(SEARCHES["beta"], profile="quick", out=out, num_samples=1,
                                     backend="local", workers=1, max_concurrent=None, max_failures=0,
                                     scheduler="none", search_alg="random", methods=["fedgp"], values=[0.6],
                                     overrides={"data_dir": str(fmnist_dir), "rounds": 1}, address=None,
                                     command="python -m fda_ray.sweep --search beta", no_figures=True)
    err = capsys.readouterr().err.strip().splitlines()
    assert seen and code == 1 and err[-1].startswith(f"error: out={str(out)!r} was removed, moved or replaced while "
                                                     "the search ran")
    assert not (out / "selection.json").exists()


@pytest.mark.slow
def test_an_optuna_study_cut_off_by_ctrl_c_says_so_and_its_resume_continues_the_cut_off_trials(fmnist_dir, tmp_path,
                                                                                                capsys, no_ray):
    """Ctrl-C of an Optuna study ended in a traceback (a result Optuna had drawn but Tune never started has no
    config), exit 1, no summary; its --resume drew new points while the cut-off trials' records stayed 'to run', and
    kept the first num_samples records by mtime, which left finished trials out of the selection for good. Now:
    exit 130 with the resume line; the resume continues each cut-off trial from its last round and the study is its
    num_samples trials, every one finished."""
    import signal
    import subprocess
    import sys

    from conftest import sigint_as_in_a_terminal

    spec = tmp_path / "cut.yaml"
    spec.write_text(
        "name: optuna-cut\ndataset: fashion-mnist\nmethods: [fedgp]\n"
        "space:\n- {name: beta, kind: choice, values: [0.25, 0.5, 0.75]}\n"
        "- {name: lr_target, kind: loguniform, low: 1e-4, high: 1e-2}\n"
        "variable: noise\nvalues: [0.6]\nrules: [target_val]\n"
        "profiles:\n  quick:\n    fields: {num_sources: 2, rounds: 40, warmup_rounds: 1, samples_per_client: 128, "
        "test_samples: 100, target_labelled: 32}\n"
        "fixed: {val_share: 0.25}\nnum_samples: {quick: 4}\nrerun_seeds: 1\ngrace_period: 100\n")
    out = tmp_path / "cut"
    args = ["--search", str(spec), "--search-alg", "optuna", "--scheduler", "none", "--max-concurrent", "2",
            "--data-dir", str(fmnist_dir), "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "fda_ray.sweep", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            cwd=str(Path(__file__).parents[1]), preexec_fn=sigint_as_in_a_terminal)
    deadline = time.time() + 400

    def cut_now() -> bool:
        recs = list((out / "trials").glob("*-optuna-*")) if (out / "trials").is_dir() else []
        done = [r for r in recs if (r / "rows.json").is_file()]
        running = [r for r in recs if (r / "state.pt").is_file() and not (r / "rows.json").is_file()]
        return bool(done) and bool(running)

    while time.time() < deadline and proc.poll() is None and not cut_now():
        time.sleep(0.05)
    assert proc.poll() is None, "the study ended before it could be cut off"
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1].endswith("--resume"), stderr[-2000:]
    # (a trial started just before the signal may have no round saved yet: it starts again from round 0)
    cut_off = {r.name for r in (out / "trials").glob("*-optuna-*")
               if (r / "state.pt").is_file() and not (r / "rows.json").is_file()}
    assert cut_off
    assert sweep.main(args + ["--resume"]) == 0
    capsys.readouterr()
    for name in cut_off:  # each went on from its last round, not from round 0 (nor left behind)
        attempts = json.loads((out / "trials" / name / "nodes.json").read_text())
        assert len(attempts) == 2 and attempts[1]["from_round"] >= 1 and (out / "trials" / name / "rows.json").is_file()
    study = json.loads((out / "selection.json").read_text())["studies"]["fedgp @ noise 0.6"]["trials"]
    finished = {r.name for r in (out / "trials").glob("*-optuna-*") if (r / "rows.json").is_file()}
    assert [e["status"] for e in study] == ["finished"] * 4 and {e["key"] for e in study} == finished


def test_an_optuna_studys_order_is_its_records_own_not_the_files_mtimes(tmp_path):
    """Ties between points go to the earlier trial: the order came from trial.json's mtime, which a copy of the
    folder (cp -r, rsync, an object store) changes, and with it the selection. It is the first attempt's started_at
    that nodes.json records; mtime only for a record without it."""
    from fda_ray.core.storage import StoragePath
    from fda_ray.experiments.search import _started_at

    a, b = tmp_path / "a", tmp_path / "b"
    for d, started in ((a, 100.0), (b, 200.0)):
        d.mkdir()
        (d / "trial.json").write_text("{}")
        (d / "nodes.json").write_text(json.dumps([{"started_at": started, "from_round": 0}]))
    os.utime(a / "trial.json", (1e9, 3e9))  # (a copy: a's file newer than b's)
    assert _started_at(StoragePath(a)) == 100.0 < _started_at(StoragePath(b)) == 200.0
    (b / "nodes.json").unlink()
    assert _started_at(StoragePath(b)) == (b / "trial.json").stat().st_mtime


def test_search_from_python_checks_its_arguments_as_the_command_does(tmp_path):
    """A string for methods was read letter by letter ("methods='f' is invalid"); a number for values, an unknown
    field or a file as out raised Python's own errors; max_failures=-1 (Tune: retry for ever) was taken."""
    from fda_ray.experiments.search import search as run_from_python

    (tmp_path / "file").write_text("x")
    for kw, line in ((dict(methods="fedgp"), "methods='fedgp' is invalid: a list of names (methods=['fedgp'])"),
                     (dict(values=0.6), "values=0.6 is invalid: a list of numbers (values=[0.6])"),
                     (dict(values=["0.6"]), "values=['0.6'] is invalid: a list of numbers (values=[0.6])"),
                     (dict(betta=0.5), "betta=0.5 is invalid: not a RunConfig field; did you mean 'beta'?"),
                     (dict(max_failures=-1), "max_failures=-1 is invalid: an integer >= 0"),
                     (dict(out=tmp_path / "file"), f"out={str(tmp_path / 'file')!r} is invalid: it is a file, not a "
                                                   "directory")):
        with pytest.raises(ValueError) as e:
            run_from_python("beta", **kw)
        assert str(e.value) == line


def test_search_from_python_puts_gpu_clients_in_actors_as_the_command_does(tmp_path, monkeypatch):
    """search(gpus_per_client=0.5) trained its clients on the CPU in the trial's process: the command's defaults
    (client actors, the driver on the GPU) were not applied. A field the user set stays as set."""
    from fda_ray.experiments import search as search_module

    seen = []
    monkeypatch.setattr(search_module, "run_search", lambda search, **kw: seen.append(kw["overrides"]) or 130)
    for i, (given, want) in enumerate((({"gpus_per_client": 0.5}, {"executor": "ray", "device": "cuda"}),
                                       ({"gpus_per_client": 0.5, "executor": "serial"}, {"executor": "serial", "device": "cuda"}),
                                       ({"rounds": 2}, {}))):
        with pytest.raises(KeyboardInterrupt):
            search_module.search("beta", out=tmp_path / f"s{i}", methods=["fedgp"], **given)
        assert seen[-1] == {**given, **want}, seen[-1]


def test_an_optuna_study_of_a_finite_space_holds_at_most_its_points():
    """Optuna drew points again in a space of choices: "[4/4] done" for a study of 2 trials, and every resume
    launched Tune again. The study is capped at the space's points, as the random search's grid is."""
    from fda_ray.experiments.search import space_points

    assert space_points(tiny_search(space=(Dim("beta", "choice", values=(0.25, 0.75)),
                                           Dim("lr_target", "choice", values=(1e-3, 1e-2, 1e-1))))) == 6
    assert space_points(tiny_search()) is None  # (a range: no end of points)


def test_an_optuna_study_of_its_whole_space_runs_every_point_once_cut_off_trials_first():
    """A study as large as its space of choices runs each point once (TPE's random start drew points twice: a study
    of 3 trials ended with 2); the trials an interruption cut off come first, to go on from their last rounds."""
    from fda_ray.experiments.search import _first_points, point_trial, studies, study_base

    search = tiny_search(space=(Dim("beta", "choice", values=(0.25, 0.5, 0.75)),))
    study = studies(search)[0]
    base = study_base(search, "quick", study)
    t = {b: point_trial(base, "fedgp-optuna", "noise", study.value, {"beta": b}) for b in (0.25, 0.5, 0.75)}
    assert _first_points(search, [t[0.5]], [t[0.5], t[0.75]], 2, True) == [{"beta": 0.5}, {"beta": 0.25}]
    assert _first_points(search, [], [], 3, True) == [{"beta": 0.25}, {"beta": 0.5}, {"beta": 0.75}]
    assert _first_points(search, [t[0.5]], [t[0.5]], 3, False) == [{"beta": 0.5}]  # (a range: Optuna draws the rest)


def test_a_resume_keeps_the_folders_rerun_seeds_and_num_samples(tmp_path, capsys):
    """--rerun-seeds was not remembered: a plain --resume after --rerun-seeds 2 reported one seed's rerun (23.50 ±
    57.18, n=2 became 28.00, n=1), and a smaller --num-samples was raised without a word."""
    from fda_ray.core.storage import StoragePath
    from fda_ray.experiments.search import kept_counts

    search = tiny_search()  # (rerun_seeds 1)
    (tmp_path / "selection.json").write_text(json.dumps({"num_samples": 6, "rerun_seeds": 2}))
    kept, n = kept_counts(search, StoragePath(tmp_path), 3, {"num_samples": None, "rerun_seeds": None})
    assert (kept.rerun_seeds, n) == (2, 6) and capsys.readouterr().err == ""
    kept, n = kept_counts(search, StoragePath(tmp_path), 2, {"num_samples": 2, "rerun_seeds": None})
    assert (kept.rerun_seeds, n) == (2, 6)
    assert capsys.readouterr().err.strip() == ("note: num_samples=2 is below the 6 this folder's search ran; it keeps 6 "
                                               "(a resume never reports over fewer)")
    more = dataclasses.replace(search, rerun_seeds=3)
    kept, n = kept_counts(more, StoragePath(tmp_path), 8, {"num_samples": 8, "rerun_seeds": 3})
    assert (kept.rerun_seeds, n) == (3, 8)
    kept, n = kept_counts(search, StoragePath(tmp_path / "none"), 4, {})
    assert (kept.rerun_seeds, n) == (1, 4)  # (a folder without a selection: today's)
