"""python -m fda_ray.collect and fda_ray.results.load on committed records: every number recomputed here from the
trials' rows.json by hand (the final round's accuracy per seed; mean and Student's t half-width)."""
from __future__ import annotations

import csv
import io
import json
import math
import shutil
import statistics
from pathlib import Path

import pytest
from fda_ray.experiments.records import moved_by_a_documented_default

from fda_ray import results
from fda_ray.experiments import collect
from fda_ray.experiments.tables import t975

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def _finals(directory: Path, row: str, value: float) -> dict[int, float]:
    """seed -> the final round's accuracy (%) of the row's trials at the value, read from the raw records."""
    out = {}
    for rec in sorted((directory / "trials").iterdir()):
        trial = json.loads((rec / "trial.json").read_text())
        if trial["row"] == row and trial["value"] == value and (rec / "rows.json").is_file():
            rows = [r for r in json.loads((rec / "rows.json").read_text())["rows"] if r.get("accuracy") is not None]
            out[trial["seed"]] = 100 * max(rows, key=lambda r: r["round"])["accuracy"]
    return out


def _csv(dirs: list[Path], capsys, *more: str) -> list[dict]:
    assert collect.main([*map(str, dirs), "--format", "csv", *more]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def test_a_grid_cell_is_the_seeds_mean_and_t_interval_beside_the_paper(capsys):
    d = RESULTS / "fmnist-noise-seeds-0.6"
    seeds = _finals(d, "fedgp_beta1", 0.6)
    assert len(seeds) == 3
    vals = [seeds[s] for s in sorted(seeds)]
    mean = statistics.fmean(vals)
    half = t975(2) * statistics.stdev(vals) / math.sqrt(3)
    line = next(r for r in _csv([d], capsys) if r["row"] == "fedgp_beta1" and float(r["value"]) == 0.6)
    assert int(line["n"]) == 3
    assert float(line["mean"]) == pytest.approx(mean, rel=1e-12)
    assert float(line["half_width_95"]) == pytest.approx(half, rel=1e-12)
    assert float(line["paper"]) == 63.71 and float(line["gap"]) == pytest.approx(mean - 63.71, rel=1e-12)
    assert collect.main([str(d)]) == 0
    md = capsys.readouterr().out
    assert f"| FedGP_1 | {mean:.1f} ± {half:.1f} (n=3) / 63.7 [{mean - 63.71:+.1f}] |" in md


def test_directories_of_one_grid_pool_their_seeds_and_a_shared_trial_counts_once(capsys):
    a, b = RESULTS / "fmnist-noise", RESULTS / "fmnist-noise-seeds-0.6"
    first, second = _finals(a, "fedgp_beta1", 0.6), _finals(b, "fedgp_beta1", 0.6)
    pooled = {**second, **first}  # a trial in both: read from the first directory named
    shared = {p.name for p in (a / "trials").iterdir() if (p / "rows.json").is_file()} & \
        {p.name for p in (b / "trials").iterdir() if (p / "rows.json").is_file()}
    assert shared  # the seeds rerun added seeds 1 and 2 beside seed 0's key
    line = next(r for r in _csv([a, b], capsys) if r["row"] == "fedgp_beta1" and float(r["value"]) == 0.6)
    assert int(line["n"]) == len(pooled)
    assert float(line["mean"]) == pytest.approx(statistics.fmean(pooled.values()), rel=1e-12)
    assert line["directories"] == f"{a};{b}"
    assert collect.main([str(a), str(b)]) == 0
    assert f"{len(shared)} trial(s) recorded in more than one directory were read from the first." in \
        capsys.readouterr().out


def test_a_search_table_is_its_selection_and_the_reruns_test_accuracy(capsys):
    d = RESULTS / "search-beta"
    sel = json.loads((d / "selection.json").read_text())["studies"]["fedgp @ noise 0.6"]
    rerun = []
    for key in sel["reruns"]["target_val"]:
        rows = json.loads((d / "trials" / key / "rows.json").read_text())["rows"]
        rerun.append(100 * [r["accuracy"] for r in rows if r.get("accuracy") is not None][-1])
    point = next(t["point"] for t in sel["trials"] if t["key"] == sel["selected"]["target_val"])
    line = next(r for r in _csv([d], capsys) if r["row"] == "fedgp @ noise 0.6" and r["label"] == "target_val")
    assert json.loads(line["selected"]) == point
    assert float(line["mean"]) == pytest.approx(statistics.fmean(rerun), rel=1e-12) and int(line["n"]) == len(rerun)
    assert collect.main([str(d), "--format", "latex"]) == 0
    tex = capsys.readouterr().out
    assert tex.count(r"\begin{tabular}") == 1 and r"target\_val" in tex and "_val" not in tex.replace(r"\_val", "")


def test_latex_escapes_and_lays_out_one_tabular_per_grid(capsys):
    assert collect.main([str(RESULTS / "fmnist-noise-seeds-0.6"), "--format", "latex", "--digits", "2"]) == 0
    tex = capsys.readouterr().out
    assert tex.count(r"\begin{tabular}") == 1
    body = tex.split(r"\midrule")[1].split(r"\bottomrule")[0]
    assert r"FedGP\_1 & " in body and "_" not in body.replace(r"\_", "")  # every underscore escaped
    assert body.count(r" \\") == len(body.strip().splitlines())  # every line a table row
    assert collect._tex("a_b & 5% {x} ->") == r"a\_b \& 5\% \{x\} $\to$"


def test_latex_says_how_many_seeds_each_cell_holds(capsys):
    """The header names the seeds when every cell has as many; where they differ, each cell carries [n]."""
    assert collect.main([str(RESULTS / "fmnist-noise-quick"), "--format", "latex"]) == 0
    tex = capsys.readouterr().out
    assert "95 % half-width over 3 seed(s)" in tex and "[3]" not in tex
    assert collect.main([str(RESULTS / "fmnist-noise"), "--format", "latex"]) == 0
    tex = capsys.readouterr().out
    assert "[seeds] where the cells' seeds differ" in tex
    assert "14.9 $\\pm$ 6.9 [3] (18.6)" in tex and "82.4 [1] (83.9)" in tex


@pytest.mark.parametrize("args,message", [
    ([], "dirs=[] is invalid"),
    (["/nonexistent/x"], "dir='/nonexistent/x' is invalid: not a folder"),
    (["--last", "0", "docs/results/fmnist-noise"], "last=0 is invalid"),
    (["--format", "xls", "docs/results/fmnist-noise"], "--format: invalid choice: 'xls'"),
    # outputs checked before the records are read (a table computed, then not written, was lost in a traceback)
    (["docs/results/fmnist-noise-quick", "--out", "/proc/fda-collect/t.md"],
     "out='/proc/fda-collect/t.md' is invalid: cannot write in /proc"),
    (["docs/results/fmnist-noise-quick", "--out", "docs/results"], "out='docs/results' is invalid: it is a directory"),
    (["docs/results/fmnist-noise-quick", "--figure", "curves", "--figure-out", "/proc/fda_fig"],
     "figure_out='/proc/fda_fig' is invalid: cannot write in /proc"),
    (["docs/results/fmnist-noise-quick", "--scale", "1e308"], "scale=1e+308 is invalid: a positive number that keeps"),
    (["docs/results/fmnist-noise-quick", "--scale", "-inf"], "scale=-inf is invalid"),
    (["docs/results/fmnist-noise-quick", "--metric", "accuracx"],
     "metric='accuracx' is invalid: one of accuracy, loss, "),
])
def test_bad_input_is_one_line_and_exit_code_2(args, message, capsys):
    assert collect.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_collect_out_makes_its_folder_as_parquet_does(tmp_path, capsys):
    out = tmp_path / "new" / "folder" / "t.md"
    assert collect.main([str(RESULTS / "fmnist-noise-quick"), "--out", str(out)]) == 0
    assert out.read_text().startswith("## noise (quick profile)") and capsys.readouterr().err == ""


def test_a_folder_without_a_summary_needs_grid(tmp_path, capsys):
    src = RESULTS / "fmnist-noise-seeds-0.6" / "trials"
    shutil.copytree(src, tmp_path / "trials")
    assert collect.main([str(tmp_path)]) == 2
    assert "has no sweep.json nor a summary.md with a 'Command:' line; pass --grid NAME" in capsys.readouterr().err
    rows = _csv([tmp_path], capsys, "--grid", "noise")
    line = next(r for r in rows if r["row"] == "fedgp_beta1" and float(r["value"]) == 0.6)
    assert line["profile"] == "found" and int(line["n"]) == 3


def test_results_load_is_every_round_of_every_trial_with_config_and_build(tmp_path, capsys):
    d = RESULTS / "fmnist-noise-seeds-0.6"
    df = results.load(d)
    recs = [json.loads((p / "rows.json").read_text()) for p in sorted((d / "trials").iterdir())
            if (p / "rows.json").is_file()]
    assert len(df) == sum(len(r["rows"]) for r in recs)
    assert list(df.columns[:6]) == list(results.IDENTITY)
    one = recs[0]
    rows = df[df.trial == sorted(p.name for p in (d / "trials").iterdir() if (p / "rows.json").is_file())[0]]
    assert list(rows["round"]) == [r["round"] for r in one["rows"]]
    assert list(rows["accuracy"]) == [r["accuracy"] for r in one["rows"]]
    assert set(rows["lr_source"]) == {one["config"]["lr_source"]} and set(rows["rounds"]) == {one["config"]["rounds"]}
    assert set(rows["build_torch"]) == {one["environment"]["torch"]}
    assert set(rows["build_code"]) == {one["environment"]["code"]}
    # a damaged record is left out with one warning line; the others load
    shutil.copytree(d, tmp_path / "s", ignore=shutil.ignore_patterns("*.png", "*.pdf", "*.parquet"))
    victim = sorted((tmp_path / "s" / "trials").iterdir())[0]
    (victim / "rows.json").write_text('{"rows": [')
    capsys.readouterr()
    df2 = results.load(tmp_path / "s")
    assert victim.name not in set(df2.trial) and len(df2) < len(df)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: trial {victim.name} in ") and err[0].endswith("left out")
    with pytest.raises(FileNotFoundError, match="is a folder of trial records"):
        results.load(tmp_path / "nothing")


def _last_round(directory: Path, column: str) -> dict[tuple[str, float], dict[int, object]]:
    """(row, value) -> {seed: the final round's raw `column`} from the records (no fda-ray code)."""
    out: dict[tuple[str, float], dict[int, object]] = {}
    for rec in sorted((directory / "trials").iterdir()):
        if not (rec / "rows.json").is_file():
            continue
        trial = json.loads((rec / "trial.json").read_text())
        rows = [r for r in json.loads((rec / "rows.json").read_text())["rows"] if r.get(column) is not None]
        if rows:
            out.setdefault((trial["row"], trial["value"]), {})[trial["seed"]] = max(rows, key=lambda r: r["round"])[column]
    return out


def test_a_list_valued_metric_is_its_entries_mean_and_scale_1_keeps_it_as_recorded(capsys):
    # FSSDA's devices' imitation lambdas: a list per round; collect averages it, --scale 1 prints it as recorded
    d = RESULTS / "fssda-fmnist"
    raw = _last_round(d, "imitation_lambda_i")
    key = next(k for k in raw if k[0] == "fssda_iid")
    by_seed = {s: statistics.fmean(v) for s, v in raw[key].items()}
    lines = _csv([d], capsys, "--metric", "imitation_lambda_i", "--scale", "1")
    line = next(r for r in lines if r["row"] == key[0] and float(r["value"]) == key[1])
    assert float(line["mean"]) == pytest.approx(statistics.fmean(by_seed.values()), rel=1e-12)
    assert 0 < float(line["mean"]) <= 1  # a weight, not a percentage
    assert collect.main([str(d), "--metric", "imitation_lambda_i", "--scale", "1"]) == 0
    assert "imitation_lambda_i, final round: mean" in capsys.readouterr().out  # no "(%)"


def test_average_column_and_paired_differences_are_computed_from_the_seeds(capsys):
    d = RESULTS / "fedwca-fmnist"
    raw = _last_round(d, "accuracy")
    rows = sorted({k[0] for k in raw})
    values = sorted({k[1] for k in raw})
    assert "fedwca" in rows and len(values) > 1
    assert collect.main([str(d), "--average", "--paired", "fedwca", "--digits", "2"]) == 0
    md = capsys.readouterr().out
    # Avg.: the mean over the columns of each column's mean over seeds
    col_means = [statistics.fmean(100 * x for x in raw[("fedwca", v)].values()) for v in values]
    table_line = next(x for x in md.splitlines() if x.startswith("| FedWCA |"))
    assert table_line.endswith(f"| {statistics.fmean(col_means):.2f} |")
    # paired: FedWCA minus another row over every (column, seed) both have
    other = next(r for r in rows if r != "fedwca")
    diffs = [100 * (raw[("fedwca", v)][s] - raw[(other, v)][s]) for v in values for s in sorted(raw[("fedwca", v)])
             if s in raw.get((other, v), {})]
    mean = statistics.fmean(diffs)
    half = t975(len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    wins = sum(x > 0 for x in diffs)
    assert f": {mean:+.2f} (95 % interval {mean - half:+.2f} to {mean + half:+.2f}; higher in {wins} of {len(diffs)})" \
        in md
    assert collect.main([str(d), "--paired", "nope"]) == 2
    assert "paired='nope' is invalid" in capsys.readouterr().err


def test_figures_from_collect_curves_and_a_heatmap_on_one_colour_scale(tmp_path, capsys):
    from fda_ray.experiments import figures

    drawn = []
    real = figures.grid_heatmap

    def spy(*args, **kw):
        drawn.append(real(*args, **kw))
        return drawn[-1]

    figures.grid_heatmap = spy
    try:
        assert collect.main([str(RESULTS / "fedwca-temperatures"), "--figure", "heatmap", "--panels",
                             "val_accuracy,accuracy", "--figure-out", str(tmp_path / "hm")]) == 0
    finally:
        figures.grid_heatmap = real
    capsys.readouterr()
    (d,) = drawn
    assert (tmp_path / "hm.png").is_file() and (tmp_path / "hm.pdf").is_file()
    assert list(d.scales) == ["val_accuracy", "accuracy"]
    assert d.scales["val_accuracy"] == d.scales["accuracy"]  # one colour scale for the comparison
    raw = {k: v for k, v in _last_round(RESULTS / "fedwca-temperatures", "accuracy").items()}
    val = _last_round(RESULTS / "fedwca-temperatures", "val_accuracy")
    every = [100 * statistics.fmean(x.values()) for x in (*raw.values(), *val.values())]
    assert d.scales["accuracy"] == pytest.approx((min(every), max(every)), rel=1e-12)
    # a grid whose columns vary one field has no heat map
    assert collect.main([str(RESULTS / "fssda-paradigm"), "--figure", "heatmap"]) == 2
    assert "a heat map needs two" in capsys.readouterr().err
    assert collect.main([str(RESULTS / "fssda-paradigm"), "--figure", "curves", "--figure-out",
                         str(tmp_path / "cv")]) == 0
    assert (tmp_path / "cv.png").is_file()


def test_results_load_gives_a_shared_trial_a_set_of_rows_per_value(capsys):
    # the noise grid's Source Only is one trial evaluated at every noise level: load gives its accuracy at each
    d = RESULTS / "fmnist-noise-quick"
    df = results.load(d)
    shared = df[(df.row == "source_only")]
    assert set(shared.value) == {0.0, 0.4, 0.8}
    for rec in (d / "trials").iterdir():
        trial = json.loads((rec / "trial.json").read_text())
        if trial["row"] != "source_only":
            continue
        last = max(json.loads((rec / "rows.json").read_text())["rows"], key=lambda r: r["round"])
        for i, v in enumerate(trial["values"]):
            got = shared[(shared.trial == rec.name) & (shared.value == v) & (shared["round"] == last["round"])]
            assert list(got.accuracy) == [last["eval_noise_accuracy"][i]]
            # its noise column is the level evaluated (it was the trained 0.0 at every level: a filter on noise mixed
            # the noise-0.4 numbers into noise 0), as the sweep's results.parquet has it
            assert list(got.noise) == [v] and list(got.trained_noise) == [0.0]
            assert len(shared[(shared.trial == rec.name) & (shared.noise == v) & (shared["round"] == last["round"])]) == 1


def test_results_parquet_and_load_share_their_columns_and_values(tmp_path):
    """A sweep's results.parquet holds fda_ray.results.load's columns (the docs say so; value, kind and
    trial_seconds were load's only), with the same values, the shared Source Only trial included; the parquet's
    own are the grid's (grid, grid_variable, grid_value) and load's own its directory (and config_seed, the config's
    seed beside the identity's)."""
    import pyarrow.parquet as pq

    from fda_ray.experiments.records import collect
    from fda_ray.experiments.trials import plan
    from fda_ray.papers.grids import GRIDS

    d = RESULTS / "fmnist-noise-quick"
    m = json.loads((d / "sweep.json").read_text())
    trials = plan(GRIDS[m["name"]], m["profile"], rows=m["rows"], values=m["values"], seeds=m["seeds"],
                  overrides=m["overrides"])
    rows, _ = collect(trials, GRIDS[m["name"]], d / "trials")
    from fda_ray.experiments.backends import write_parquet

    write_parquet(rows, tmp_path / "r.parquet")
    pq_df = pq.read_table(tmp_path / "r.parquet").to_pandas()
    df = results.load(d)
    assert set(df.columns) - set(pq_df.columns) == {"directory", "config_seed"}
    assert set(pq_df.columns) - set(df.columns) == {"grid", "grid_variable", "grid_value"}
    assert (pq_df.value == pq_df.grid_value).all()
    key = ["trial", "value", "round"]
    both = df.merge(pq_df, on=key, suffixes=("", "_pq"))
    assert len(both) == len(df) == len(pq_df)
    for col in ("accuracy", "loss", "noise", "seed", "kind", "trial_seconds", "lr_source"):
        a, b = both[col], both[f"{col}_pq"]
        assert ((a == b) | (a.isna() & b.isna())).all(), col


def _committed_manifests():
    return sorted(d for d in RESULTS.iterdir() if (d / "sweep.json").is_file())


def test_every_committed_sweep_has_a_manifest_equal_to_its_command_and_it_plans_the_committed_trial_keys():
    """The manifests written for the directories from before them say what their commands said (a folder run in
    chunks: its last chunk's command, whose trials the manifest's union of the chunks holds), and planning a grid
    sweep from its manifest gives the keys of the trials committed under it (no key moved)."""
    from fda_ray.experiments import manifest as mf
    from fda_ray.experiments.arguments import chunk_manifest, manifest_from_command
    from fda_ray.experiments.records import Trial
    from fda_ray.experiments.trials import plan
    from fda_ray.papers.grids import GRIDS

    dirs = _committed_manifests()
    assert len(dirs) >= 39
    for d in dirs:
        command = next(line[len("Command: `"):line.rindex("`")] for line in (d / "summary.md").read_text().splitlines()
                       if line.startswith("Command: `"))
        m, last = mf.read(d), manifest_from_command(command)
        if m != last:  # chunks: the last chunk's command, and merging it into the union changes nothing
            assert m.kind == "grid" and m.command == last.command and m.name in GRIDS, d.name
            assert chunk_manifest(m, last, GRIDS[m.name]) == m, d.name
        if m.kind != "grid" or m.name not in GRIDS:
            continue
        trials = {(t.row, t.value, t.seed): t for t in plan(
            GRIDS[m.name], m.profile, rows=list(m.rows) if m.rows else None,
            values=list(m.values) if m.values else None, seeds=m.seeds, overrides=dict(m.overrides))}
        planned = {cell: t.key for cell, t in trials.items()}
        committed = [Trial.from_dict(json.loads((r / "trial.json").read_text())) for r in (d / "trials").iterdir()
                     if (r / "trial.json").is_file()]
        # a committed trial the manifest plans has the key the plan gives it, and its record sits under that key
        # (a sweep chunked before sweep.json kept every chunk: its manifest plans its last chunk; a partial one's
        # plan has trials not run yet)
        matched = [t for t in committed if (t.row, t.value, t.seed) in planned]
        assert matched, d.name
        for t in matched:
            now = trials[(t.row, t.value, t.seed)]
            if t.key != now.key:  # only where a documented default changed (the record keeps its own settings)
                assert moved_by_a_documented_default(d / "trials" / t.key, now), (d.name, t.key, now.key)
            assert (d / "trials" / t.key).is_dir(), (d.name, t.key)


@pytest.mark.parametrize("text,why", [("{", "not JSON (Expecting property name"),
                                      ('{"kind": "grid"}', "it lacks 'name', 'profile'"),
                                      ('{"kind": "table", "name": "x", "profile": "quick"}', "kind='table'")])
def test_a_damaged_manifest_is_one_line_naming_the_file(text, why, tmp_path):
    from fda_ray.experiments import manifest as mf

    (tmp_path / mf.FILE).write_text(text)
    with pytest.raises(mf.ManifestError) as e:
        mf.read(tmp_path)
    assert str(e.value).startswith(f"sweep.json={str(tmp_path / mf.FILE)!r} is invalid: ") and why in str(e.value)
    assert "\n" not in str(e.value)


def test_collect_of_a_search_shows_its_reference_rows_and_names_the_oracle(capsys):
    """The search's summary puts the reference rows (FedDA_Auto, FedGP_Auto) beside the selections; collect left
    them out, and printed the oracle as 'oracle' alone."""
    import json
    from pathlib import Path

    from fda_ray.experiments import collect
    from fda_ray.experiments.tables import mean_ci

    folder = Path(__file__).resolve().parents[1] / "docs" / "results" / "search-beta"
    assert collect.main([str(folder)]) == 0
    out = capsys.readouterr().out
    refs = json.loads((folder / "selection.json").read_text())["references"]
    m, half, _ = mean_ci(refs["0.6"]["fedda_auto"])
    assert f"| fedda_auto @ noise 0.6 | reference | - | {m:.1f} ± {half:.1f} (n=3) |" in out
    assert "| oracle (reads test labels) |" in out and "| oracle |" not in out


@pytest.mark.parametrize("flags,what", [(["--paired", "fedgp_auto"], "paired='fedgp_auto'"),
                                        (["--figure", "curves"], "figure='curves'")])
def test_collect_says_a_grid_only_option_does_not_apply_to_a_search(flags, what, capsys):
    from pathlib import Path

    from fda_ray.experiments import collect

    folder = Path(__file__).resolve().parents[1] / "docs" / "results" / "search-beta"
    assert collect.main([str(folder), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {what} is invalid here: it reads a grid's rows, and {folder} is a search")
    assert err.count("\n") == 1


def test_collects_build_line_names_what_the_summary_names(capsys):
    """collect's Build line names a record's build as summary.md does: the libraries, the code, the aggregation
    kernels and the CPU capability (it left out the last two)."""
    from fda_ray.experiments import collect

    d = RESULTS / "fmnist-ablation-seeds"
    recorded = next(line for line in (d / "summary.md").read_text().splitlines() if line.startswith("Recorded by "))
    named = recorded[len("Recorded by "):recorded.rindex(" (")]
    assert collect.main([str(d)]) == 0
    (build,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Build: ")]
    assert build == f"Build: {named}." and "aggregation cpp" in build and "cpu " in build


def test_a_records_non_finite_numbers_are_strict_json_and_read_back_as_numbers(tmp_path):
    """A record is strict JSON (a NaN or an infinity as a string) and reads back with the numbers: a final round
    whose loss overflowed stays inf (written as null, it fell back to the round before's finite loss), and a null
    ("not computed") stays None."""
    import math

    from fda_ray.experiments.records import _save_json, read_rows
    from fda_ray.experiments.tables import final_accuracies

    rows = [{"row": "r", "grid_value": 0.0, "seed": 0, "trial": "t", "round": i, "loss": x, "accuracy": math.nan,
             "val": None}
            for i, x in enumerate((3.0, 2.0, math.inf))]
    (tmp_path / "t").mkdir()
    _save_json({"rows": rows}, tmp_path / "t" / "rows.json")
    text = (tmp_path / "t" / "rows.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    back = read_rows(tmp_path / "t")["rows"]
    assert back[2]["loss"] == math.inf and math.isnan(back[0]["accuracy"]) and back[0]["val"] is None
    assert final_accuracies(back, metric="loss", scale=1.0) == {("r", 0.0): {0: math.inf}}


@pytest.mark.parametrize("figure", ["curves", "sweep"])
def test_a_figure_into_a_read_only_results_folder_is_refused_in_one_line(figure, tmp_path, monkeypatch, capsys):
    """The figure's default place (the table's first directory) is checked before any work, as --figure-out is
    (before: an OSError traceback from the figure's write, exit 1). A read-only mount: every file made there is
    refused with EROFS (root passes os.access, so the probe writes)."""
    import errno
    import os
    import tempfile

    d = tmp_path / "ro"
    shutil.copytree(RESULTS / "fmnist-noise-quick", d)
    real = tempfile.mkstemp

    def read_only(*a, **k):
        if str(k.get("dir", "")).startswith(str(d)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(k["dir"]))
        return real(*a, **k)

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    assert collect.main([str(d), "--figure", figure]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    name = "accuracy" if figure == "sweep" else figure
    assert len(err) == 1 and err[0].startswith(f"error: figure={str(d / name) + '.png'!r} is invalid: cannot write in "
                                               f"{d} (Read-only file system); the figure goes to the table's first "
                                               "directory"), err
    assert captured.out == "" and "Traceback" not in captured.err
    assert collect.main([str(d)]) == 0  # the table alone reads a read-only folder


def test_average_on_a_table_of_one_column_says_why_it_has_no_avg_column(capsys):
    """--average on one column (before: silently no Avg. column): one line under the table says it is left out."""
    d = RESULTS / "fmnist-noise-seeds-0.6"
    assert collect.main([str(d), "--average"]) == 0
    md = capsys.readouterr().out
    assert "| Avg. |" not in md and md.count(collect.ONE_COLUMN) == 1
    assert collect.main([str(d), "--average", "--format", "latex"]) == 0
    assert f"% {collect.ONE_COLUMN}" in capsys.readouterr().out
    assert collect.main([str(d)]) == 0 and collect.ONE_COLUMN not in capsys.readouterr().out  # not asked: not said


def test_a_metric_that_is_not_a_fraction_is_shown_as_recorded_by_default(capsys):
    """--metric loss (before: the loss x100 under a "(%)" header): a loss, or a metric with a number outside [0, 1],
    is shown as recorded; a fraction stays in %; --scale still decides when given."""
    d = RESULTS / "fmnist-noise-quick"
    raw = _last_round(d, "loss")
    (key, value), seeds = next(iter(raw.items()))
    mean = statistics.fmean(seeds.values())
    line = next(r for r in _csv([d], capsys, "--metric", "loss") if r["row"] == key and float(r["value"]) == value)
    assert float(line["mean"]) == pytest.approx(mean, rel=1e-12)
    assert collect.main([str(d), "--metric", "loss"]) == 0
    md = capsys.readouterr().out
    assert "loss, final round: mean" in md and "(%)" not in md
    assert collect.main([str(d), "--metric", "loss", "--scale", "100"]) == 0  # an explicit scale wins
    assert "loss, final round (%): mean" in capsys.readouterr().out
    assert collect.main([str(d)]) == 0 and "accuracy, final round (%): mean" in capsys.readouterr().out
    assert not collect.is_fraction([{"m": 0.5}, {"m": [0.2, 3.0]}], "m")
    assert collect.is_fraction([{"m": 0.5}, {"m": "[0.2, 1.0]"}, {"m": None}], "m")


def test_a_resume_over_records_of_a_moved_default_says_which_default_moved(tmp_path):
    """A resume whose planned trial's key moved because fda-ray's default changed (here the label-shift auto rows'
    target batch, 4 in the committed records, 16 since) named only two keys ("another key: ... there, ... here"):
    it names the field, the record's value and today's."""
    import shutil

    from fda_ray.experiments import manifest as mf
    from fda_ray.experiments.records import changed_settings
    from fda_ray.experiments.trials import plan
    from fda_ray.papers.grids import GRIDS

    d = RESULTS / "fmnist-label-shift"
    m = mf.read(d)
    cell = next(t for t in plan(GRIDS[m.name], m.profile, seeds=m.seeds, overrides=dict(m.overrides))
                if t.row == "fedda_auto" and t.value == 0.3)
    # the old record, kept beside the rerun's under its old key (the key moved with the default)
    old = next(r for r in (d / "trials").iterdir() if r.name.startswith("fedda_auto-eta0.3-seed0-")
               and r.name != cell.key)
    assert (d / "trials" / cell.key).is_dir()  # (the rerun at today's default, beside it)
    shutil.copytree(old, tmp_path / old.name)
    why = changed_settings([cell], tmp_path)
    assert why == "trial fedda_auto at 0.3, seed 0 was recorded before fda-ray's default changed (batch_target 4 " \
                  "there, 16 here: docs/methods.md)", why


def _copy(tmp_path, name: str) -> Path:
    import shutil

    shutil.copytree(RESULTS / name, tmp_path / name)
    return tmp_path / name


def _set_last(record: Path, **fields) -> None:
    data = json.loads((record / "rows.json").read_text())
    data["rows"][-1].update(fields)
    (record / "rows.json").write_text(json.dumps(data))


def test_a_cell_recorded_with_two_settings_reads_the_one_sweep_json_plans(tmp_path, capsys):
    """A resume with --new-settings keeps the old records beside the new: collect kept whichever key sorted last,
    without a word, under a title naming the new settings. It reads the record the folder's sweep.json plans and
    says which it left out."""
    d = _copy(tmp_path, "fmnist-noise-seeds-0.6")
    before = _csv([d], capsys)
    planned = d / "trials" / "fedda-noise0.6-seed0-bfd409c0"
    other = d / "trials" / "fedda-noise0.6-seed0-ffffffff"  # (sorts last: the one the table used to read)
    import shutil

    shutil.copytree(planned, other)
    trial = json.loads((other / "trial.json").read_text())
    (other / "trial.json").write_text(json.dumps({**trial, "key": other.name}))
    _set_last(other, accuracy=0.01)
    assert _csv([d], capsys) == before
    assert collect.main([str(d)]) == 0
    err = capsys.readouterr().err
    assert "1 record(s) left out, recorded with other settings than its sweep.json plans" in err and other.name in err


def test_grid_names_only_a_folder_without_a_sweep_json_and_reads_only_that_grids_records(tmp_path, capsys):
    """--grid relabelled a noise sweep as Table 11's eta columns beside Table 11's numbers; a folder of FedWCA
    records read with --grid noise showed as Table 10's Source Only."""
    assert collect.main([str(RESULTS / "fmnist-noise"), "--grid", "label-shift"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: grid='label-shift' is invalid for dir={str(RESULTS / 'fmnist-noise')!r}: its sweep.json says it ran "
        "grid 'noise'; --grid names the grid of a folder of records without one")
    import shutil

    found = tmp_path / "found"
    shutil.copytree(RESULTS / "fedwca-fmnist" / "trials", found / "trials")
    assert collect.main([str(found), "--grid", "noise"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(f"warning: {found}: ") and "not of grid 'noise''s rows, methods and dataset" in err[0]
    assert err[-1] == f"error: dir={str(found)!r} is invalid: no finished trial with a 'accuracy' to read"
    shutil.copytree(RESULTS / "fmnist-noise-seeds-0.6" / "trials", found / "trials", dirs_exist_ok=True)
    rows = _csv([found], capsys, "--grid", "noise")  # the noise grid's own records among them: read
    assert {r["label"] for r in rows} == {"FedDA_0.5", "FedGP_0.5", "FedGP_1"}


def test_a_diverged_seed_is_a_nan_cell_not_a_traceback(tmp_path, capsys):
    """A final round's NaN (kept as NaN by the records, on purpose) crashed collect and the sweep's summary in
    statistics.stdev; the cell's mean is NaN and it has no spread."""
    from fda_ray.experiments.tables import mean_ci

    m, half, sd = mean_ci([1.0, float("nan"), 2.0])
    assert math.isnan(m) and math.isnan(half) and math.isnan(sd)
    m, half, _ = mean_ci([1.0, float("inf")])
    assert m == float("inf") and math.isnan(half)
    d = _copy(tmp_path, "fmnist-noise-seeds-0.6")
    _set_last(d / "trials" / "fedda-noise0.6-seed0-bfd409c0", accuracy="NaN")
    assert collect.main([str(d)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("| FedDA_0.5 |"))
    assert line.startswith("| FedDA_0.5 | nan ± nan (n=3)"), line


@pytest.mark.parametrize("metric", ["predicted_rule", "phase", "seed", "noise"])
def test_metric_names_a_number_each_round_logs_not_text_or_a_setting(metric, capsys):
    """A text column (predicted_rule, phase) was a traceback; a setting (seed, noise) printed "1.0 ± 2.5"."""
    assert collect.main([str(RESULTS / "fmnist-noise-seeds-0.6"), "--metric", metric]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: metric={metric!r} is invalid: one of accuracy, loss, ") and "\n" not in err, err


def test_trials_not_finished_are_said_and_nothing_is_written_over_an_inputs_records(tmp_path, capsys):
    """A mid-sweep table's n fell from 3 to 2 without a word; --out DIR/trials/<key>/rows.json replaced that
    record with the table; --figure sweep over two folders drew the pooled seeds over the first one's figures."""
    d = _copy(tmp_path, "fmnist-noise-seeds-0.6")
    running = d / "trials" / "fedda-noise0.6-seed0-bfd409c0"
    (running / "rows.json").unlink()
    rows = _csv([d], capsys)
    assert next(r for r in rows if r["row"] == "fedda")["n"] == "2"
    assert collect.main([str(d)]) == 0
    assert capsys.readouterr().err.strip() == (f"warning: {d}: 1 trial(s) not finished (running, or cut off: no "
                                               f"rows.json) left out: {running.name}")
    record = d / "trials" / "fedda-noise0.6-seed1-8cb91969" / "rows.json"
    before = record.read_bytes()
    for out in (record, d / "sweep.json"):
        assert collect.main([str(d), "--format", "csv", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: out={str(out)!r} is invalid: it would write over {d}'s records ("), err
    assert record.read_bytes() == before
    e = _copy(tmp_path, "fmnist-noise")
    assert collect.main([str(d), str(e), "--figure", "sweep"]) == 2
    assert "figure='sweep' is invalid with 2 directories of one grid" in capsys.readouterr().err


def test_a_uri_given_to_the_readers_says_how_to_bring_the_sweep_here(capsys):
    """collect and results.load read local folders; a sweep written to s3:// or gs:// was 'not a folder'."""
    from fda_ray import results as res

    assert collect.main(["s3://bucket/sweeps/noise"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: dir='s3://bucket/sweeps/noise' is invalid: not a folder; it reads local folders: bring the sweep here "
        "first (aws s3 sync s3://bucket/sweeps/noise ./LOCAL), then name ./LOCAL")
    with pytest.raises(FileNotFoundError, match=r"gsutil -m rsync -r gs://b/x \./LOCAL"):
        res.load("gs://b/x")


def test_a_search_directory_refuses_the_grid_tables_options(capsys):
    """--metric (even one no record logs), --last, --average and --scale were ignored on a search folder, whose
    table is its reruns' test accuracy."""
    folder = str(RESULTS / "search-beta")
    assert collect.main([folder, "--metric", "nonexistent", "--last", "3"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: metric='nonexistent', last=3 are invalid here: a search directory's table is its selections' reruns' "
        "test accuracy (selection.json); they read a grid's rounds")
    assert collect.main([folder, str(RESULTS / "fmnist-noise-seeds-0.6"), "--last", "2"]) == 0
    assert capsys.readouterr().err.strip() == ("note: last=2 is for the grid tables; a search directory's table is "
                                               "its selections' reruns' test accuracy")
