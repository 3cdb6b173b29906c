"""Results pages whose numbers come from the records (tools.pages): every committed page's generated
blocks equal what its trial records give, a typed number that disagrees fails the check and is rewritten, and
the statistics behind the blocks (fda_ray.experiments.tables) against hand computations."""
from __future__ import annotations

import math
import statistics

import pytest

from tools import pages
from fda_ray.experiments import tables


@pytest.mark.slow  # (5-26 s: the fast tier stays within 8 minutes on 2 cores)
def test_every_committed_page_matches_its_records(capsys):
    assert pages.main(["--check"]) == 0, capsys.readouterr().out
    found = [p for p in pages.pages() if pages.BLOCK.search(p.read_text())]
    assert len(found) >= 1  # the check looked at generated blocks, not at pages without any


def test_a_typed_number_that_disagrees_with_the_records_fails_the_check_and_is_rewritten(tmp_path, capsys):
    page = tmp_path / "page.md"
    good = "by <!-- records: gap-range fmnist-ablation fedda -->{}<!-- /records --> points\n"
    right = pages.render("gap-range fmnist-ablation fedda")
    page.write_text(good.format("1.3 to 18.6"))  # the number the page once had
    assert pages.main(["--check", str(page)]) == 1
    assert capsys.readouterr().out.strip() == f"{page}: gap-range fmnist-ablation fedda: differs from the records"
    assert pages.main([str(page)]) == 0
    assert page.read_text() == good.format(right)
    assert pages.main(["--check", str(page)]) == 0
    # the range is the records' own: FedGP's rows minus FedDA's final accuracy, column by column
    s = pages.load_sweep("fmnist-ablation")
    final = tables.final(list(s.rows))
    gaps = [statistics.fmean(final[(k, v)].values()) - statistics.fmean(final[("fedda", v)].values())
            for k in s.row_keys if k != "fedda" for v in s.values]
    assert right == f"{min(gaps):.1f} to {max(gaps):.1f}"


def test_a_table_block_is_the_sweeps_own_summary_table():
    text = (pages.RESULTS / "fmnist-ablation" / "summary.md").read_text()
    assert pages.render("table fmnist-ablation") in text


def test_a_stale_summary_file_fails_the_check_and_is_rewritten_keeping_the_runs_own_lines(tmp_path, monkeypatch,
                                                                                           capsys):
    """A results folder's summary.md written by an older summariser (mean ± std) fails --check and is rewritten
    with today's tables (mean ± the 95 % half-width, as every block prints it); the run's own lines stay."""
    import shutil

    from tools.pages.summary_files import refreshed

    for name in ("fmnist-noise-quick", "search-beta"):
        shutil.copytree(pages.RESULTS / name, tmp_path / name)
    monkeypatch.setattr(pages.records, "RESULTS", tmp_path)
    monkeypatch.setattr(pages.engine, "pages", lambda root=None: [])  # the summary files only
    for name in ("fmnist-noise-quick", "search-beta"):
        assert refreshed(tmp_path / name) == (tmp_path / name / "summary.md").read_text()  # committed: current
    sweep = tmp_path / "fmnist-noise-quick" / "summary.md"
    current = sweep.read_text()
    assert "| Source Only | 81.43 ± 2.05 (n=3) / 83.94 |" in current  # Student's t, 2 df: 2.05 = 4.303 x 0.83 / sqrt 3
    old = current.replace("81.43 ± 2.05", "81.43 ± 0.83").replace("± the 95 % confidence half-width", "± std")
    old = old.replace("Wall time: ", "Wall time (as that run wrote it): ")
    # the predicted-rule section is the records' too (the shared Source Only trial's noise-0 estimates were once
    # counted under every noise level): rendered again
    predicted = next(line for line in current.splitlines() if line.startswith("| Source Only | target_only"))
    old = old.replace(predicted, "| Source Only | target_only 150 | target_only 150 | target_only 150 |")
    sweep.write_text(old)
    assert pages.main(["--check"]) == 1
    assert "fmnist-noise-quick/summary.md: its tables differ from the records" in capsys.readouterr().out
    assert sweep.read_text() == old  # --check changes nothing
    assert pages.main([]) == 0
    assert sweep.read_text() == current.replace("Wall time: ", "Wall time (as that run wrote it): ")
    assert pages.main(["--check"]) == 0


def test_an_unknown_generator_or_sweep_is_a_one_line_error(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("<!-- records: nope x -->1<!-- /records -->\n")
    assert pages.main(["--check", str(page)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: {page}: unknown generator 'nope'; known: "
                                              + ", ".join(pages.GENERATORS.names()))


def test_mean_and_95_percent_interval_by_hand():
    values = [60.0, 62.0, 67.0]
    mean, half, sd = tables.mean_ci(values)
    assert mean == pytest.approx(63.0) and sd == pytest.approx(math.sqrt(13.0))
    # t_{0.975, 2} in closed form: 0.95 / sqrt(2 x 0.975 x 0.025) = 4.30265...
    assert half == pytest.approx(0.95 / math.sqrt(2 * 0.975 * 0.025) * math.sqrt(13.0) / math.sqrt(3), rel=1e-12)
    assert tables.short_ci(values) == f"63.0 ± {half:.1f}" and tables.short_ci([5.0]) == "5.0"
    # df 1 is the Cauchy's tan(0.475 pi); the others the tables' values to their 9 digits; a large df the normal's
    assert tables.t975(1) == pytest.approx(math.tan(0.475 * math.pi), rel=1e-12)
    for df, t in ((3, 3.182446305), (4, 2.776445105), (10, 2.228138852), (22, 2.073873068), (30, 2.042272456),
                  (100, 1.983971519)):
        assert tables.t975(df) == pytest.approx(t, abs=1e-9)
    assert tables.t975(10 ** 8) == pytest.approx(1.959963985, abs=1e-7)
    assert tables.t_cdf(0.0, 5) == 0.5 and tables.t_cdf(-2.5, 7) == pytest.approx(1 - tables.t_cdf(2.5, 7), abs=1e-15)
    with pytest.raises(ValueError, match="df=0 is invalid"):
        tables.t975(0)
    final = {("a", 0.0): {0: 70.0, 1: 72.0}, ("b", 0.0): {0: 69.0, 1: 73.0, 2: 50.0}, ("a", 1.0): {2: 40.0}}
    assert tables.paired_differences(final, "a", "b", [0.0, 1.0]) == [1.0, -1.0]


def test_the_build_note_names_each_directorys_build_or_says_it_is_unknown(tmp_path, monkeypatch):
    import json

    from fda_ray.core.build import FIELDS, build

    monkeypatch.setattr(pages.records, "RESULTS", tmp_path)  # what every generator reads at call time
    for name, env in (("x", {**build(), "python": "3.11.7"}), ("y", None), ("z", None)):
        d = tmp_path / name / "trials" / f"{name}-trial"
        d.mkdir(parents=True)
        (d / "rows.json").write_text(json.dumps({"config": {}, "rows": [{"round": 0}], "seconds": 0.0,
                                                 **({"environment": env} if env else {})}))
    here = ", ".join(f"{k} {build()[k]}" for k in FIELDS if build()[k] is not None)  # (no aggregation here)
    assert pages.render("build x y z") == (f"Build. `x`: {here} (1 trials); `y`, `z`: an unknown build (their records "
                                           "predate build recording: a rerun on another build may move cells by "
                                           "points).")
    with pytest.raises(ValueError, match="'w' has no finished trial"):
        pages.render("build w")


# ---------------------------------------------------------------- the seed pages' generators, against hand computations
# Each expected value is computed from the sweep's rows here, without the generator's helpers: a generator that
# picked the wrong round, seed, row or rounding would differ.

def _by_run(name: str, metric: str = "accuracy") -> dict[tuple[str, float, int], list[float]]:
    """(row, value, seed) -> the metric (%) round by round, from the raw rows."""
    out: dict[tuple[str, float, int], list[tuple[int, float]]] = {}
    for r in pages.load_sweep(name).rows:
        if r.get(metric) is not None:
            out.setdefault((r["row"], r["grid_value"], int(r["seed"])), []).append((r["round"], 100 * r[metric]))
    return {k: [x for _, x in sorted(v)] for k, v in out.items()}


def _seeds(name, row, value, metric="accuracy"):
    return [run[-1] for (k, v, _), run in sorted(_by_run(name, metric).items()) if k == row and v == value]


def test_every_records_comment_on_a_page_opens_a_block_the_check_reads():
    # a spec holding ">" (an arrow) would not match pages.BLOCK and its text would never be checked
    for page in pages.pages():
        text = page.read_text()
        assert text.count("<!-- records:") == len(pages.BLOCK.findall(text)), page


def test_options_are_keyword_arguments():
    oracle = statistics.fmean(_seeds("conditions", "oracle", 0.0))
    assert pages.render("cell conditions oracle 0 digits=1") == f"{oracle:.1f}"
    with pytest.raises(TypeError):
        pages.render("cell conditions oracle 0 nope=1")


def test_acc_auc_table_rows_are_mean_and_half_width_of_acc_and_auc():
    text = pages.render("acc-auc-table conditions CheXpert")
    acc, auc = _seeds("conditions", "fedavg", 0.0), _seeds("conditions", "fedavg", 0.0, "auc")
    half = lambda xs: 4.303 * statistics.stdev(xs) / math.sqrt(3)
    assert (f"| FedAvg | {statistics.fmean(acc):.2f} ± {half(acc):.2f} | 53.28 ± 2.44 | "
            f"{statistics.fmean(auc):.2f} ± {half(auc):.2f} | 54.13 ± 3.77 |") in text.splitlines()
    # the best federated row is in bold, the Oracle (higher) is not
    assert text.count("**") == 4 and "| Oracle | **" not in text


def test_std_table_gives_the_std_and_the_mean_best_round():
    text = pages.render("std-table noniid-000 MNIST")
    runs = [r for (k, _, _), r in sorted(_by_run("noniid-000").items()) if k == "fedavg"]
    last = [r[-1] for r in runs]
    assert f"(std {statistics.stdev(last):.2f}) | 60.11 | {statistics.fmean(max(r) for r in runs):.2f} |" in text


def test_value_table_has_one_line_per_value_and_the_auc_at_round_n():
    text = pages.render('value-table aux-alpha alpha a:A fedavg_finetune_auxinfo_gp:G round=10'.replace(
        "a:A", "fedavg_finetune_auxinfo:A"))
    line = next(x for x in text.splitlines() if x.startswith("| 0.2 |"))
    auc10 = [run[9] for (k, v, _), run in _by_run("aux-alpha", "auc").items()
             if k == "fedavg_finetune_auxinfo_gp" and v == 0.2]
    assert line.endswith(f" | {statistics.fmean(auc10):.2f} |") and len(auc10) == 3
    assert tables.short_ci(_seeds("aux-alpha", "fedavg_finetune_auxinfo", 0.2)).split(" ±")[0] in line


def test_per_seed_lists_each_seeds_final_numbers():
    acc, auc = _seeds("conditions", "oracle", 0.0), _seeds("conditions", "oracle", 0.0, "auc")
    assert pages.render("per-seed conditions oracle:O metrics=accuracy,auc") == "O " + ", ".join(
        f"{a:.2f} / {b:.2f}" for a, b in zip(acc, auc))


def test_cell_diff_std_and_spread():
    gp, fa = _seeds("conditions", "fedavg_finetune_gp", 0.0), _seeds("conditions", "fedavg", 0.0)
    assert pages.render("cell conditions fedavg 0") == f"{statistics.fmean(fa):.2f}"
    d = statistics.fmean(gp) - statistics.fmean(fa)
    assert pages.render("diff conditions fedavg_finetune_gp fedavg") == f"{d:.1f}"
    assert pages.render("std conditions fedavg") == f"{statistics.stdev(fa):.2f}"
    s = pages.load_sweep("aux-alpha")
    means = [statistics.fmean(_seeds("aux-alpha", "fedavg_finetune_auxinfo_gp", v, "auc")) for v in s.values]
    assert pages.render("spread aux-alpha fedavg_finetune_auxinfo_gp metric=auc") == f"{max(means) - min(means):.1f}"


def test_wins_and_paired_range_pair_by_seed():
    a, b = _seeds("conditions", "fedavg_finetune_gp", 0.0), _seeds("conditions", "fedavg_finetune_auxinfo_gp", 0.0)
    d = [x - y for x, y in zip(a, b)]
    pair = "conditions fedavg_finetune_gp fedavg_finetune_auxinfo_gp"
    assert pages.render(f"wins {pair}") == f"{sum(x > 0 for x in d)} of 3"
    assert pages.render(f"paired-range {pair}") == f"{min(d):.2f}-{max(d):.2f}"


def test_paper_gap_range_is_the_distance_to_the_papers_numbers():
    s = pages.load_sweep("noniid-000")
    gaps = [s.grid.paper[k][0.4] - statistics.fmean(_seeds("noniid-000", k, 0.4)) for k in s.row_keys]
    assert pages.render("paper-gap-range noniid-000") == f"{min(gaps):.0f}-{max(gaps):.0f}"


def test_final_peak_and_round_ranges_over_runs():
    runs = [r for (k, _, _), r in sorted(_by_run("noniid-000").items()) if k == "fedavg_finetune"]
    last = [r[-1] for r in runs]
    assert pages.render("final-range noniid-000 fedavg_finetune") == f"{min(last):.1f}-{max(last):.1f}"
    best = [max(r) for r in runs]
    assert pages.render("peak-range noniid-000 fedavg_finetune") == f"{min(best):.1f}-{max(best):.1f}"
    at = [r.index(max(r)) + 1 for r in runs]  # rounds counted from 1
    assert pages.render("peak-range noniid-000 fedavg_finetune what=round") == f"{min(at)}-{max(at)}"
    drops = [max(r) - r[-1] for r in runs]
    assert pages.render("peak-range noniid-000 fedavg_finetune what=drop") == f"{min(drops):.1f}-{max(drops):.1f}"
    r25 = [r[24] for r in runs]
    assert pages.render("round-range noniid-000 25 fedavg_finetune") == f"{min(r25):.1f}-{max(r25):.1f}"


def test_last_best_counts_the_runs_best_in_their_last_round():
    runs = [r for (k, _, _), r in _by_run("conditions", "auc").items() if k in ("fedavg_finetune_gp", "oracle")]
    n = sum(r.index(max(r)) == len(r) - 1 for r in runs)
    assert pages.render("last-best conditions fedavg_finetune_gp oracle metric=auc") == f"{n} of 6"


def _last_raw(name, row, value, seed):
    rs = [r for r in pages.load_sweep(name).rows if r["row"] == row and r["grid_value"] == value and r["seed"] == seed]
    return max(rs, key=lambda r: r["round"])


def test_split_table_bolds_the_best_of_each_split_by_its_lead():
    text = pages.render("split-table fssda-temperature fssda_iid:I fssda_noniid:N lambda_row=L")
    lines = text.splitlines()
    assert lines[0] == "| method | T = 1 | T = 2 | T = 4 | T = 8 |" and "**" not in text  # one row a split
    lam = [statistics.fmean(_last_raw("fssda-temperature", k, 8.0, sd)["imitation_lambda_i"]) for k in
           ("fssda_iid", "fssda_noniid") for sd in range(3)]
    assert lines[-1].endswith(f"| {statistics.fmean(lam[:3]):.2f} / {statistics.fmean(lam[3:]):.2f} |")
    both = pages.render("split-table fssda-lambda fssda_iid:a fssda_lambda0.9_iid:b")
    assert both.count("**") == 2 * 4  # each column's best is bold
    assert pages.render("split-table fssda-lambda fssda_iid:a fssda_lambda0.9_iid:b lead=100").count("**") == 0


def test_teacher_table_and_last_mean_read_the_last_rounds_teacher_and_lambda():
    teach = [100 * statistics.fmean(_last_raw("fssda-fmnist", "fssda_iid", 1.0, sd)["teacher_accuracy"])
             for sd in range(3)]
    lam = [statistics.fmean(_last_raw("fssda-fmnist", "fssda_iid", 1.0, sd)["imitation_lambda_i"]) for sd in range(3)]
    line = pages.render("teacher-table fssda-fmnist fssda_iid:T").splitlines()[-1]
    assert line.split(" | ")[2] == f"{tables.short_ci(teach)} / {statistics.fmean(lam):.2f}"
    assert pages.render("last-mean fssda-fmnist teacher_accuracy fssda_iid 1") == f"{statistics.fmean(teach):.1f}"
    w = [statistics.fmean(dev[2] for dev in _last_raw("fssda-fmnist", "fssda_iid", 3.0, sd)["imitation_weights_i"])
         for sd in range(3)]
    assert pages.render("last-range fssda-fmnist imitation_weights_i fssda_iid value=3 index=2 scale=1 digits=2") == \
        f"{min(w):.2f}-{max(w):.2f}"
    first = [100 * _last_raw("fssda-fmnist", "fssda_iid", 3.0, sd)["teacher_accuracy"][0] for sd in range(3)]
    assert pages.render("last-range fssda-fmnist teacher_accuracy fssda_iid value=3 index=0 digits=1") == \
        f"{min(first):.1f}-{max(first):.1f}"


def test_student_teacher_counts_the_runs_near_their_teacher():
    gaps = []
    for v in pages.load_sweep("fssda-fmnist").values:
        for sd in range(3):
            r = _last_raw("fssda-fmnist", "fssda_noniid", v, sd)
            gaps.append(abs(100 * (r["accuracy"] - statistics.fmean(r["teacher_accuracy"]))))
    assert pages.render("student-teacher fssda-fmnist fssda_noniid within=3") == f"{sum(g <= 3 for g in gaps)} of 12"
    far = [g for g in gaps if g > 3]
    assert pages.render("student-teacher fssda-fmnist fssda_noniid within=3 what=outside") == \
        f"{min(far):.1f}-{max(far):.1f}"


def test_reach_is_the_first_round_the_mean_curve_reaches_the_goal():
    def curve(row):
        runs = [r for (k, _, _), r in sorted(_by_run("fssda-paradigm").items()) if k == row]
        return [statistics.fmean(x) for x in zip(*runs)]
    goal = curve("fssda_serial")[-1]
    first = next(i + 1 for i, m in enumerate(curve("fssda_iid")) if m >= goal)
    assert pages.render("reach fssda-paradigm fssda_serial fssda_iid") == str(first)
    table = pages.render("reach-table fssda-paradigm fssda_serial fssda_iid:P")
    assert f"final {goal:.1f} %" in table and table.endswith(f" | {first} |")


def test_paired_table_and_gaps():
    a, b = _seeds("fssda-lambda", "fssda_noniid", 3.0), _seeds("fssda-lambda", "fssda_lambda0.9_noniid", 3.0)
    d = [x - y for x, y in zip(a, b)]
    text = pages.render("paired-table fssda-lambda fssda_{split} fssda_lambda0.9_{split}")
    seeds = ", ".join(f"{x:+.1f}" for x in d)
    assert text.splitlines()[-1].endswith(f"**{statistics.fmean(d):+.1f}** ({seeds}) |")
    assert pages.render("gaps fssda-lambda fssda_lambda0.9_noniid:fssda_noniid value=3") == \
        f"{-statistics.fmean(d):.1f}-{-statistics.fmean(d):.1f}"
    means = [statistics.fmean(_seeds("fssda-fmnist", "fedgp_iid", v)) for v in pages.load_sweep("fssda-fmnist").values]
    assert pages.render("row-range fssda-fmnist fedgp_iid") == f"{min(means):.1f}-{max(means):.1f}"


def _last5(name, row, value, grid=None):
    rows = (pages.load_found(name, grid) if grid else pages.load_sweep(name)).rows
    runs: dict[int, list] = {}
    for r in rows:
        if r["row"] == row and r["grid_value"] == value:
            runs.setdefault(int(r["seed"]), []).append((r["round"], 100 * r["accuracy"]))
    return {sd: (statistics.fmean(x for _, x in sorted(v)[-5:]), sorted(v)[-1][1]) for sd, v in sorted(runs.items())}


def test_load_found_reads_every_seed_recorded_where_load_sweep_reads_the_commands():
    assert set(_last5("domainbed-colored-quick", "fedgp", 2.0)) == {0}  # the command: one seed
    found = _last5("domainbed-colored-quick", "fedgp", 2.0, "domainbed-colored")
    assert set(found) == {0, 1, 2}  # a later launch added seeds 1 and 2
    spec = "cell domainbed-colored-quick fedgp 2 last=5 seed=1 grid=domainbed-colored"
    assert pages.render(spec) == f"{found[1][0]:.2f}"


def test_domainbed_table_ranking_and_row_mean_use_the_last_5_rounds():
    q = "domainbed-colored-quick"
    l5 = [_last5(q, "fedda", v)[0] for v in (0.0, 1.0, 2.0)]
    line = next(x for x in pages.render(f"domainbed-table {q}").splitlines() if x.startswith("| FedDA |"))
    assert line.startswith("| FedDA | " + " | ".join(f"{f:.2f}" for _, f in l5) + " | "
                           + " | ".join(f"{a:.2f}" for a, _ in l5)
                           + f" | {statistics.fmean(a for a, _ in l5):.2f} | 60.49 (2.54)")
    assert pages.render(f"row-mean {q} fedda last=5") == f"{statistics.fmean(a for a, _ in l5):.2f}"
    ranking = pages.render(f"domainbed-ranking {q}").splitlines()[2]
    assert ranking.startswith("- -90% (test_env 2), by the last-5 mean: ") and f"FedDA {l5[2][0]:.1f}" in ranking
    got = [float(x.rsplit(" ", 1)[1]) for x in ranking.split(": ", 1)[1].split(" > ")]
    assert got == sorted(got, reverse=True)


def test_seed_table_gives_each_seeds_last_5_and_final():
    runs = _last5("domainbed-colored-quick", "fedgp", 2.0, "domainbed-colored")
    line = pages.render("seed-table domainbed-colored-quick 2 fedgp:G grid=domainbed-colored").splitlines()[-1]
    assert line.startswith("| G (last 5 / final) | " + " | ".join(f"{a:.2f} / {f:.2f}" for a, f in runs.values()))
    l5 = [a for a, _ in runs.values()]
    assert f"| {statistics.fmean(l5):.2f} ({statistics.stdev(l5):.2f}) |" in line


def test_one_seed_grid_generators_beside_the_paper():
    name = "fmnist-target-size"
    s = pages.load_sweep(name)
    final = {(k, v): _seeds(name, k, v) for k in s.row_keys for v in s.values}
    assert all(len(x) == 1 for x in final.values())  # one seed
    m = {kv: x[0] for kv, x in final.items()}
    assert pages.render(f"rise {name} fedgp") == f"{m[('fedgp', 1000)] - m[('fedgp', 100)]:.1f}"
    d = [f"{m[('fedgp', v)] - m[('fedda', v)]:.1f}" for v in (100, 200, 500, 1000)]
    assert pages.render(f"diffs {name} fedgp fedda") == f"{d[0]}, {d[1]}, {d[2]} and {d[3]}"
    g = [m[(k, v)] - s.grid.paper[k][v] for k in s.row_keys for v in s.values]
    assert pages.render(f"near-paper {name}") == f"{sum(abs(x) <= 3 for x in g)} of 16"
    gap = m[("fedgp", 100)] - s.grid.paper["fedgp"][100]
    assert pages.render(f"paper-gap {name} fedgp 100") == f"{gap:+.2f}".replace("-", "\u2212")
    ga = [m[(k, v)] - m[("fedgp", v)] for k in ("fedda_auto", "fedgp_auto") for v in (100, 200)]
    spec = f"gaps {name} fedda_auto:fedgp fedgp_auto:fedgp value=100,200 sep=to"
    assert pages.render(spec) == f"{min(ga):.1f} to {max(ga):.1f}"
    assert pages.render(f"paper-table {name} 'columns=a|b|c|d'").splitlines()[0] == "| method | a | b | c | d |"
    renamed = pages.render(f"paper-table {name} 'columns=a|b|c|d'").splitlines()
    assert renamed[2:] == pages.render(f"table {name}").splitlines()[2:]


def test_peak_and_tail_range_of_one_run():
    run = _by_run("fmnist-target-size")[("fedgp", 100, 0)]
    assert pages.render("peak fmnist-target-size fedgp 100") == f"{max(run):.1f}"
    assert pages.render("peak fmnist-target-size fedgp 100 what=round") == str(run.index(max(run)) + 1)  # from 1
    assert pages.render("tail-range fmnist-target-size fedgp 100") == f"{min(run[-10:]):.1f}-{max(run[-10:]):.1f}"


# ---------------------------------------------------------------- the Fashion-MNIST grids' prose generators

def _raw(name, row, value, seed=None):
    """One cell's rows from the sweep's records, in round order (one seed, or every seed)."""
    rs = [r for r in pages.load_sweep(name).rows if r["row"] == row and r["grid_value"] == value
          and (seed is None or r["seed"] == seed)]
    return sorted(rs, key=lambda r: (r["seed"], r["round"]))


def test_seed_list_gives_each_seeds_final_or_best_number_and_their_spread():
    runs = {sd: [100 * r["accuracy"] for r in _raw("fmnist-noise", "oracle", 0.4, sd)] for sd in range(3)}
    last = [runs[sd][-1] for sd in range(3)]
    assert pages.render("seed-list fmnist-noise oracle 0.4 join=and") == \
        f"{last[0]:.2f}, {last[1]:.2f} and {last[2]:.2f}"
    assert pages.render("seed-list fmnist-noise oracle 0.4 what=spread digits=1") == f"{max(last) - min(last):.1f}"
    best = [max(runs[sd]) for sd in range(3)]
    assert pages.render("seed-list fmnist-noise oracle 0.4 what=peak digits=1") == ", ".join(f"{x:.1f}" for x in best)


def test_at_round_counts_rounds_from_1_and_reads_any_logged_metric():
    run = _raw("fmnist-noise", "fedgp_beta1", 0.8)
    assert pages.render("at-round fmnist-noise fedgp_beta1 0.8 3") == f"{100 * run[2]['accuracy']:.1f}"
    ft = _raw("fmnist-noise", "finetune_offline", 0.4, 1)
    loss = ft[0]["train_loss_target"]  # the first fine-tuning epoch
    assert pages.render("at-round fmnist-noise finetune_offline 0.4 first metric=train_loss_target seed=1 scale=1 "
                        "digits=0 group=yes") == f"{loss:,.0f}".replace(",", " ")
    with pytest.raises(ValueError, match="3 seeds"):
        pages.render("at-round fmnist-noise fedgp 0.4 3")


def test_run_mean_averages_a_list_metric_over_the_main_rounds_and_its_sources():
    import json

    def mean_beta(v):
        rs = [r for r in _raw("fmnist-noise", "fedda_auto", v, 0) if r["phase"] == "main"]
        per = [json.loads(r["beta_i"]) if isinstance(r["beta_i"], str) else r["beta_i"] for r in rs]
        return statistics.fmean(statistics.fmean(b) for b in per)
    assert pages.render("run-mean fmnist-noise beta_i fedda_auto 0.4 seed=0") == f"{mean_beta(0.4):.4f}"
    means = [mean_beta(v) for v in (0.0, 0.2, 0.4, 0.6, 0.8)]
    assert pages.render("run-mean-range fmnist-noise beta_i fedda_auto seed=0") == f"{min(means):.3f}-{max(means):.3f}"


def test_epochs_count_from_the_first_fine_tuning_round():
    # the noise grid records only the fine-tuning epochs, the label-shift grid the Source Only rounds before them
    runs = [_raw("fmnist-noise", "finetune_offline", 0.4, sd) for sd in range(3)]
    at = [[r["accuracy"] for r in run].index(max(r["accuracy"] for r in run)) + 1 for run in runs]
    assert pages.render("peak-range fmnist-noise finetune_offline value=0.4 what=epoch") == f"{min(at)}-{max(at)}"
    run = _raw("fmnist-label-shift", "finetune_offline", 0.3)
    tune = [r["accuracy"] for r in run if r["phase"] == "finetune"]
    assert pages.render("peak fmnist-label-shift finetune_offline 0.3 what=epoch") == str(tune.index(max(tune)) + 1)
    assert pages.render("peak fmnist-label-shift finetune_offline 0.3 what=round") == \
        str(run[[r["accuracy"] for r in run].index(max(tune))]["round"] + 1)


def test_final_range_takes_several_columns():
    last = [100 * _raw("fmnist-noise", "fedda", v, sd)[-1]["accuracy"] for v in (0.4, 0.6)
            for sd in ({0, 1, 2} if v == 0.4 else {0})]
    assert pages.render("final-range fmnist-noise fedda value=0.4,0.6") == f"{min(last):.1f}-{max(last):.1f}"


def test_paper_gap_max_is_the_largest_gap_in_size_with_its_sign():
    s = pages.load_sweep("fmnist-label-shift")
    gaps = [statistics.fmean(_seeds("fmnist-label-shift", "fedgp_auto", v)) - s.grid.paper["fedgp_auto"][v]
            for v in s.values]
    g = max(gaps, key=abs)
    assert pages.render("paper-gap-max fmnist-label-shift fedgp_auto") == f"{g:+.2f}".replace("-", "\u2212")
    assert pages.render("paper-gap-max fmnist-label-shift fedgp_auto sign=no digits=1") == f"{abs(g):.1f}"
    some = [gaps[s.values.index(v)] for v in (0.15, 0.05)]
    assert pages.render("paper-gap-max fmnist-label-shift fedgp_auto value=0.15,0.05 sign=no") == \
        f"{max(map(abs, some)):.2f}"


def test_tail_list_width_and_range_read_the_last_rounds():
    run = [100 * r["accuracy"] for r in _raw("fmnist-label-shift", "fedda", 0.0)]
    assert pages.render("tail-list fmnist-label-shift fedda 0 n=4") == ", ".join(f"{x:.1f}" for x in run[-4:])
    before = run[-10:-1]  # the nine rounds before the last
    assert pages.render("tail-range fmnist-label-shift fedda 0 n=9 skip=1") == f"{min(before):.1f}-{max(before):.1f}"
    widths = []
    for v in (0.45, 0.05):
        r = [100 * x["accuracy"] for x in _raw("fmnist-label-shift", "fedgp_beta1", v)][-10:]
        widths.append(max(r) - min(r))
    assert pages.render("tail-width fmnist-label-shift fedgp_beta1 value=0.45,0.05 digits=2") == f"{max(widths):.2f}"


def test_std_range_and_one_seeds_peak_in_a_cell_of_several():
    sds = [statistics.stdev(_seeds("fmnist-noise", k, 0.4)) for k in ("fedda", "fedgp_beta1", "target_only")]
    assert pages.render("std-range fmnist-noise fedda fedgp_beta1 target_only value=0.4 digits=2") == \
        f"{min(sds):.2f}-{max(sds):.2f}"
    runs = {k: [100 * r["accuracy"] for r in _raw("fmnist-noise", k, 0.4, 1)] for k in ("fedda", "fedgp")}
    assert pages.render("peak fmnist-noise fedda 0.4 seed=1 digits=2") == f"{max(runs['fedda']):.2f}"
    at = [r.index(max(r)) + 1 for r in runs.values()]
    assert pages.render("peak-range fmnist-noise fedda fedgp value=0.4 seed=1 what=round") == f"{min(at)}-{max(at)}"


def test_fedwca_generators_by_hand_from_the_raw_records():
    """fedwca-guard, fedwca-beta, fedwca-alpha and fedwca-domains against the rows.json files read directly."""
    import json

    def runs(sweep, *rows):
        for rec in sorted((pages.RESULTS / sweep / "trials").iterdir()):
            t = json.loads((rec / "trial.json").read_text())
            if t["row"] in rows and (rec / "rows.json").is_file():
                yield t, json.loads((rec / "rows.json").read_text())["rows"]

    guard = [r["prototype_guard"] for _, rs in runs("fedwca-ablation", "fedwca", "one_hot") for r in rs
             if r.get("prototype_guard") is not None]
    assert pages.render("fedwca-guard fedwca-ablation fedwca one_hot grid=fedwca-ablation") == \
        f"{min(guard):.0f}-{max(guard):.0f}"
    beta = [statistics.fmean(b[1] for b in r["beta"]) for _, rs in runs("fedwca-ablation", "fedwca") for r in rs
            if r.get("beta") is not None]
    assert pages.render("fedwca-beta fedwca-ablation fedwca grid=fedwca-ablation") == \
        f"{min(beta):.2f}-{max(beta):.2f}, {statistics.fmean(beta):.2f} on average"
    top, own = [], []
    for _, rs in runs("fedwca-ablation", "fedwca"):
        for r in rs:
            if r.get("alpha") is not None:
                for k, a in enumerate(r["alpha"]):
                    top.append(max(a))
                    own.append(a.index(max(a)) == r["clusters"][k])
    assert pages.render("fedwca-alpha fedwca-ablation fedwca grid=fedwca-ablation") == \
        f"{statistics.fmean(top):.2f}, on its own cluster {100 * statistics.fmean(own):.0f} % of the time"
    last = [rs[-1]["domain_accuracy"] for t, rs in runs("fedwca-ablation", "fedwca") if t["value"] == 1.0]
    got = pages.render("fedwca-domains fedwca-ablation fedwca 1 grid=fedwca-ablation")
    assert got.split(", ")[0] == f"clean {100 * statistics.fmean(x[0] for x in last):.1f}" and len(last) == 3
    assert [w.split(" ")[0] for w in got.split(", ")] == ["clean", "rotate-45", "invert", "edges"]


def test_moved_table_clusters_and_purity_by_hand():
    """moved-table is after minus before paired by seed; fedwca-clusters and fedwca-purity read the last round's
    partition of each FedWCA run."""
    import json

    a, b = pages.load_sweep("fedwca-fmnist"), pages.load_sweep("fedwca-fmnist-eq4")
    fa, fb = tables.final(list(a.rows)), tables.final(list(b.rows))
    lines = pages.render("moved-table fedwca-fmnist fedwca-fmnist-eq4").splitlines()
    local = next(line for line in lines if line.startswith("| Local |")).split(" | ")
    d = [fa[("local", 0.0)][s] - fb[("local", 0.0)][s] for s in (0, 1, 2)]
    assert local[1] == f"{statistics.fmean(d):+.1f}"
    purity, sizes = [], []
    for rec in sorted((pages.RESULTS / "fedwca-fmnist" / "trials").glob("fedwca-*")):
        rows = json.loads((rec / "rows.json").read_text())["rows"]
        purity.append(rows[-1]["cluster_purity"])
        sizes.append(rows[-1]["num_clusters"])
    assert len(purity) == 15
    text = pages.render("fedwca-purity fedwca-fmnist")
    assert text.startswith(f"{sum(p >= 1 for p in purity)} of 15 runs have every cluster on one domain")
    assert text.endswith(f"; {min(sizes)}-{max(sizes)} clusters for 4 domains")
    table = pages.render("fedwca-clusters fedwca-fmnist").splitlines()
    assert len(table) == 2 + 15 and sorted(int(r.split(" | ")[-2]) for r in table[2:]) == sorted(sizes)


# ---------------------------------------------------------------- one run's curve and logged estimates beside the paper
# (paper-diff, tail-rise, run-peak, near-paper-rounds, logged-range), from the rows.json files read directly

def _record(sweep, row, value, seed=0):
    """One trial's rounds from docs/results/<sweep>/trials/*/rows.json, in round order."""
    import json

    for rec in sorted((pages.RESULTS / sweep / "trials").iterdir()):
        t = json.loads((rec / "trial.json").read_text())
        if t["row"] == row and float(t["value"]) == value and t["seed"] == seed:
            return sorted(json.loads((rec / "rows.json").read_text())["rows"], key=lambda r: r["round"])
    raise AssertionError(f"no record of {row} at {value}, seed {seed} in {sweep}")


def _minus(text):
    return text.replace("-", "\u2212")


def test_paper_diff_is_the_last_5_mean_minus_the_papers_number_in_points_or_stds():
    acc = [100 * r["accuracy"] for r in _record("domainbed-colored-quick", "source_only", 2.0)]
    gap = statistics.fmean(acc[-5:]) - 27.77  # Auto-weighted FDA Table 3, Source Only, -90%; its std 0.82
    assert pages.render("paper-diff domainbed-colored-quick source_only 2") == _minus(f"{gap:+.2f}")
    assert pages.render("paper-diff domainbed-colored-quick source_only 2 unit=std digits=1") == \
        _minus(f"{gap / 0.82:+.1f}")
    assert pages.render("paper-diff domainbed-colored-quick source_only 2 last=1") == _minus(f"{acc[-1] - 27.77:+.2f}")
    # two seeds found in the paper profile's directory: the mean of their last-5 means
    seeds = [statistics.fmean(100 * r["accuracy"] for r in _record("domainbed-colored-paper", "fedgp_auto", 1.0, sd)
                              [-5:]) for sd in (0, 1)]
    assert pages.render("paper-diff domainbed-colored-paper fedgp_auto 1 grid=domainbed-colored") == \
        _minus(f"{statistics.fmean(seeds) - 76.43:+.2f}")
    # FedAvg's number is Table 1's, which prints no std
    with pytest.raises(ValueError, match="prints no std"):
        pages.render("paper-diff domainbed-colored-quick fedavg_all 2 unit=std")


def test_tail_rise_and_run_peak_read_one_runs_curve():
    acc = [100 * r["accuracy"] for r in _record("domainbed-colored-paper", "fedda_auto", 2.0)]
    assert len(acc) == 52  # 2 warm-up rounds and 50
    spec = "domainbed-colored-paper fedda_auto 2 grid=domainbed-colored"
    assert pages.render(f"tail-rise {spec}") == _minus(f"{acc[-1] - acc[-11]:+.1f}")
    assert pages.render(f"tail-rise {spec} n=3") == _minus(f"{acc[-1] - acc[-4]:+.1f}")
    assert pages.render(f"run-peak {spec}") == f"{max(acc):.1f}"
    assert pages.render(f"run-peak {spec} what=round") == str(acc.index(max(acc)) + 1)  # from 1
    with pytest.raises(ValueError, match="2 seeds"):
        pages.render("run-peak domainbed-colored-paper fedgp_auto 1 grid=domainbed-colored")


def test_near_paper_rounds_lists_the_rounds_whose_5_round_mean_is_near_the_paper():
    acc = [100 * r["accuracy"] for r in _record("domainbed-colored-quick", "fedavg_all", 2.0)]
    near = [i + 1 for i in range(4, len(acc)) if abs(statistics.fmean(acc[i - 4:i + 1]) - 10.92) <= 3]
    assert near == list(range(near[0], near[-1] + 1))  # one stretch of rounds
    assert pages.render("near-paper-rounds domainbed-colored-quick fedavg_all 2") == f"{near[0]}-{near[-1]}"
    assert pages.render("near-paper-rounds domainbed-colored-quick source_only 2") == "none"
    assert pages._ranges([5, 6, 7, 9, 12, 13]) == "5-7, 9, 12-13" and pages._ranges([4]) == "4"


def test_logged_range_spans_every_sources_value_over_the_phases_rounds():
    main = [r for r in _record("domainbed-colored-paper", "fedda_auto", 2.0) if r["phase"] == "main"]
    beta = [b for r in main for b in r["beta_i"]]
    spec = "domainbed-colored-paper fedda_auto 2 grid=domainbed-colored"
    assert pages.render(f"logged-range {spec.replace('fedda_auto', 'beta_i fedda_auto')}") == \
        f"{min(beta):.2f}-{max(beta):.2f}"
    w = [r["target_weight"] for r in main]  # a number per round, not a list
    assert pages.render(f"logged-range {spec.replace('fedda_auto', 'target_weight fedda_auto')} digits=3") == \
        f"{min(w):.3f}-{max(w):.3f}"
    cos = [c for r in main[-20:] for c in r["cosine_mean_i"]]
    assert max(cos) < 0  # negative: written "a to b" with typographic minuses
    assert pages.render(f"logged-range {spec.replace('fedda_auto', 'cosine_mean_i fedda_auto')} last=20") == \
        f"{_minus(f'{min(cos):.2f}')} to {_minus(f'{max(cos):.2f}')}"


# ---------------------------------------------------------------- claims with their seed spread

def test_cell_ci_order_and_diff_ci_state_means_with_their_95_percent_intervals_by_hand():
    t2 = 4.303  # t_{0.975, 2}: three seeds
    cells = {k: _seeds("fmnist-noise", k, 0.4) for k in ("fedda_auto", "fedgp_auto", "target_only")}
    assert all(len(v) == 3 for v in cells.values())

    def ci(v):
        return f"{statistics.fmean(v):.1f} ± {t2 * statistics.stdev(v) / math.sqrt(3):.1f}"

    assert pages.render("cell-ci fmnist-noise fedda_auto 0.4") == ci(cells["fedda_auto"])
    assert pages.render("cell-ci fmnist-noise fedda_auto 0 digits=2") == f"{_seeds('fmnist-noise', 'fedda_auto', 0.0)[0]:.2f} (one seed)"
    assert pages.render("order fmnist-noise 0.4 fedda_auto fedgp_auto target_only") == \
        f"FedDA_Auto {ci(cells['fedda_auto'])} > FedGP_Auto {ci(cells['fedgp_auto'])} > Target Only {ci(cells['target_only'])}"
    # a claim that no longer holds for the means is an error, so the page's check fails
    with pytest.raises(ValueError, match="'target_only' .* is not above 'fedda_auto'"):
        pages.render("order fmnist-noise 0.4 target_only fedda_auto")
    d = [a - b for a, b in zip(cells["fedda_auto"], cells["target_only"])]  # paired by seed
    m, h = statistics.fmean(d), t2 * statistics.stdev(d) / math.sqrt(3)
    assert pages.render("diff-ci fmnist-noise fedda_auto target_only value=0.4") == \
        f"{m:+.1f} points (95 % interval {m - h:+.1f} to {m + h:+.1f}; higher in {sum(x > 0 for x in d)} of 3)"
    with pytest.raises(ValueError, match="not positive"):
        pages.render("diff-ci fmnist-noise target_only fedda_auto value=0.4")
    with pytest.raises(ValueError, match="an interval needs 2 or more"):
        pages.render("diff-ci fmnist-noise fedda_auto target_only value=0.2")


def test_a_block_inside_a_fenced_code_block_is_an_example_not_checked(tmp_path):
    page = tmp_path / "page.md"
    example = "```markdown\nby <!-- records: gap-range fmnist-ablation fedda -->1 to 2<!-- /records --> points\n```\n"
    live = "by <!-- records: gap-range fmnist-ablation fedda -->1 to 2<!-- /records --> points\n"
    page.write_text(example)
    assert pages.main(["--check", str(page)]) == 0
    page.write_text(example + live)
    assert pages.main(["--check", str(page)]) == 1  # the same block outside the fence is read


def test_search_ci_reads_the_reruns_the_search_recorded():
    import json

    sel = json.loads((pages.RESULTS / "search-beta" / "selection.json").read_text())
    t2 = 4.303  # t_{0.975, 2}: the 3 fresh seeds

    def ci(v):
        return f"{statistics.fmean(v):.2f} ± {t2 * statistics.stdev(v) / math.sqrt(3):.2f}"

    # the rule's selection rerun on seeds 1-3, and a reference row, as the search's own selection.json has them
    assert pages.render('search-ci search-beta "fedgp @ noise 0.6" oracle') == ci(sel["reruns"]["fedgp @ noise 0.6"]["oracle"])
    assert pages.render("search-ci search-beta 0.6 fedda_auto") == ci(sel["references"]["0.6"]["fedda_auto"])
    d = [a - b for a, b in zip(sel["references"]["0.6"]["fedda_auto"], sel["reruns"]["fedda @ noise 0.6"]["oracle"])]
    m, h = statistics.fmean(d), t2 * statistics.stdev(d) / math.sqrt(3)
    assert pages.render('search-diff-ci search-beta 0.6 fedda_auto "fedda @ noise 0.6" oracle') == \
        f"{m:+.1f} points (95 % interval {m - h:+.1f} to {m + h:+.1f}; higher in {sum(x > 0 for x in d)} of 3)"
    with pytest.raises(ValueError, match="no rerun of rule 'nope'"):
        pages.render('search-ci search-beta "fedgp @ noise 0.6" nope')


def test_run_file_reads_a_single_runs_parquet():
    import pyarrow.parquet as pq

    rows = pq.read_table(pages.RESULTS / "fmnist-personalised" / "apfl.parquet").to_pylist()
    acc = [100 * r["accuracy"] for r in rows]
    assert pages.render("run-file fmnist-personalised apfl") == f"{acc[-1]:.2f}"
    assert pages.render("run-file fmnist-personalised apfl what=peak digits=1") == f"{max(acc):.1f}"
    r50 = [100 * r["accuracy"] for r in rows if r["round"] == 50][-1]
    assert pages.render("run-file fmnist-personalised apfl what=at round=50") == f"{r50:.2f}"
    with pytest.raises(ValueError, match="what='best' is invalid"):
        pages.render("run-file fmnist-personalised apfl what=best")


def test_synthetic_agreement_is_recomputed_from_the_cells():
    import json

    cells = [c for row in json.loads((pages.RESULTS / "synthetic-grid" / "grid.json").read_text())["cells"] for c in row]
    for kind in ("static", "auto"):
        share = sum(c["predicted"] == c[f"actual_{kind}"] for c in cells) / len(cells)
        assert pages.render(f"synthetic-agreement synthetic-grid {kind}") == f"{100 * share:.0f}"


def test_synthetic_numbers_by_hand_from_the_committed_grid():
    """The `synthetic` generator's numbers against the committed grid.json, counted here from its cells' per-trial
    winners and test MSEs (not from the summary keys the generator reads)."""
    import json

    result = json.loads((pages.RESULTS / "synthetic-grid" / "grid.json").read_text())
    cells = [c for row in result["cells"] for c in row]
    n_trials = result["config"]["trials"]
    for kind in ("static", "auto"):
        stable = sum(len(set(c[f"trials_{kind}"])) == 1 for c in cells)
        assert pages.render(f"synthetic synthetic-grid stable_{kind}") == f"{stable} of {len(cells)}"
        shares = [100 * sum(c["trials_predicted"][t] == c[f"trials_{kind}"][t] for c in cells) / len(cells)
                  for t in range(n_trials)]
        assert pages.render(f"synthetic synthetic-grid trials_{kind}") == f"{min(shares):.0f}-{max(shares):.0f}"
        mse = [{r: c["test_mse"][{"fedda": "fedda_auto", "fedgp": "fedgp_auto"}.get(r, r) if kind == "auto" else r]
                for r in ("target_only", "source_only", "fedda", "fedgp")} for c in cells]
        near = sum(m[c["predicted"]] <= 1.01 * min(m.values()) for c, m in zip(cells, mse))
        assert pages.render(f"synthetic synthetic-grid near_{kind}") == f"{100 * near / len(cells):.0f}"
    won = sum(min(c["test_mse"], key=lambda r: c["test_mse"][r] if r in ("target_only", "source_only", "fedda",
                                                                            "fedgp") else float("inf")) == "fedgp"
              for c in cells)
    assert pages.render("synthetic synthetic-grid wins:actual_static fedgp") == str(won)
    beta = sum(c["beta"]["fedda_auto"] for c in cells) / len(cells)
    assert pages.render("synthetic synthetic-grid beta fedda_auto") == f"{beta:.2f}"
    size, source = result["config"]["sizes"][-1], result["config"]["sources"][-1]
    assert pages.render(f"synthetic synthetic-grid mse {size}:{source}:fedgp") == \
        f"{result['cells'][-1][-1]['test_mse']['fedgp']:.3f}"
    rules = ("target_only", "source_only", "fedda", "fedgp")
    eq11 = [min(rules, key=lambda r: c["delta"]["fedgp_eq11" if r == "fedgp" else r]) for c in cells]
    assert pages.render("synthetic synthetic-grid eq11_changes") == str(sum(p != c["predicted"]
                                                                             for p, c in zip(eq11, cells)))
    assert pages.render("synthetic synthetic-grid eq11_agreement") == \
        f"{100 * sum(p == c['actual_static'] for p, c in zip(eq11, cells)) / len(cells):.0f}"
    with pytest.raises(ValueError, match="what='nope' is invalid"):
        pages.render("synthetic synthetic-grid nope")


def test_meets_paper_lists_the_rounds_where_the_seeds_mean_curve_is_near_the_papers_number():
    paper = pages.load_sweep("fmnist-noise").grid.paper["fedgp"][0.4]
    runs = [run for (k, v, _), run in _by_run("fmnist-noise").items() if k == "fedgp" and v == 0.4]
    assert len(runs) == 3
    mean = [statistics.fmean(r[i] for r in runs) for i in range(len(runs[0]))]
    hits = [i + 1 for i, m in enumerate(mean) if abs(m - paper) <= 1.0]  # rounds counted from 1
    got = pages.render("meets-paper fmnist-noise fedgp 0.4")
    listed = []
    for part in got.split(" of ")[0].split(", "):
        a, _, b = part.partition("-")
        listed += list(range(int(a), int(b or a) + 1))
    assert listed == hits and got.endswith(f" of {len(mean)}")


def test_reseeded_table_puts_the_old_number_beside_the_reruns_mean_and_interval():
    table = pages.render("reseeded-table fmnist-noise fmnist-noise")  # the same sweep on both sides: seed 0 = old
    line = next(x for x in table.splitlines() if x.startswith("| FedGP_0.5 | noise 0.4 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    vals = _seeds("fmnist-noise", "fedgp", 0.4)
    mean, half = statistics.fmean(vals), 4.303 * statistics.stdev(vals) / math.sqrt(3)
    paper = pages.load_sweep("fmnist-noise").grid.paper["fedgp"][0.4]
    assert cells[2] == cells[3] == f"{vals[0]:.1f}"
    assert cells[4] == f"{mean:.1f} ± {half:.1f}" and cells[5] == "3" and cells[6] == f"{paper:.1f}"
    assert cells[7].replace("\u2212", "-").split()[0] == f"{mean - paper:+.1f}"
    assert cells[8] == ("yes" if abs(mean - paper) <= half else "no")
    one = next(x for x in table.splitlines() if x.startswith("| FedGP_0.5 | noise 0.2 |"))
    assert one.rstrip().endswith("| - |")  # one seed: no interval to hold the paper's number


def test_diff_ci_checks_the_words_within_or_outside_the_spread():
    vals = {k: _seeds("fmnist-noise", k, 0.4) for k in ("fedda_auto", "fedgp", "target_only")}
    d = [a - b for a, b in zip(vals["fedda_auto"], vals["fedgp"])]
    low = statistics.fmean(d) - 4.303 * statistics.stdev(d) / math.sqrt(3)
    right, wrong = ("outside", "within") if low > 0 else ("within", "outside")
    assert pages.render(f"diff-ci fmnist-noise fedda_auto fedgp value=0.4 spread={right}") == \
        pages.render("diff-ci fmnist-noise fedda_auto fedgp value=0.4")
    with pytest.raises(ValueError, match=f"no longer {wrong} the seeds' spread"):
        pages.render(f"diff-ci fmnist-noise fedda_auto fedgp value=0.4 spread={wrong}")
    with pytest.raises(ValueError, match="spread='beyond' is invalid"):
        pages.render("diff-ci fmnist-noise fedda_auto fedgp value=0.4 spread=beyond")


def test_moved_share_is_the_largest_move_over_its_cells_interval():
    a, b = (tables.final(list(pages.load_sweep(n).rows)) for n in ("fssda-fmnist", "fssda-fmnist-previous"))
    shares = []
    for kv, now in a.items():
        d = [now[sd] - b[kv][sd] for sd in now]
        half = 4.303 * statistics.stdev(now.values()) / math.sqrt(3)
        shares.append(abs(statistics.fmean(d)) / half)
    assert pages.render("moved-share fssda-fmnist fssda-fmnist-previous") == f"{max(shares):.2f}"


def test_best_column_names_the_value_with_the_highest_final_mean():
    runs = _by_run("fssda-lambda")
    s = pages.load_sweep("fssda-lambda")
    for row in ("fssda_lambda0.1_noniid", "fssda_iid"):
        means = {v: statistics.fmean(run[-1] for (k, vv, _), run in runs.items() if k == row and vv == v)
                 for v in s.values}
        assert pages.render(f"best-column fssda-lambda {row}") == s.grid.value_label(max(means, key=means.get))
    with pytest.raises(ValueError, match="has no row 'nope'"):
        pages.render("best-column fssda-lambda nope")


def test_wall_reads_the_summarys_wall_time_line():
    line = next(x for x in (pages.RESULTS / "fedwca-temperatures" / "summary.md").read_text().splitlines()
                if x.startswith("Wall time: "))
    words = line.split()  # "Wall time: 1429 s for 25 trials; ..."
    assert pages.render("wall fedwca-temperatures") == f"{int(words[2]) // 1000} {int(words[2]) % 1000:03d} s for " \
                                                       f"{words[5]} trials"
    with pytest.raises(FileNotFoundError):
        pages.render("wall no-such-sweep")


def _by_hand_gaps(name, grid=None):
    """paper-gaps' lines recomputed from the records: (label, held out) -> (mean, seeds, paper, what the rounds say)."""
    s = pages.load_found(name, grid) if grid else pages.load_sweep(name)
    out = {}
    for key in s.row_keys:
        for v in s.values:
            paper = s.grid.paper.get(key, {}).get(v)
            runs, knn = {}, {}
            for r in s.rows:
                if r["row"] == key and r["grid_value"] == v and r.get("accuracy") is not None:
                    runs.setdefault(int(r["seed"]), {})[int(r["round"])] = 100 * r["accuracy"]
                    if r.get("phase") == "knn":  # kNN-Per's evaluation round: the trial's number on its own
                        knn[int(r["seed"])] = 100 * r["accuracy"]
            if paper is None or not runs:
                continue
            seeds = [knn[sd] if sd in knn else statistics.fmean(run[k] for k in sorted(run)[-5:])
                     for sd, run in runs.items()]
            mean = statistics.fmean(seeds)
            if abs(mean - paper) <= 3:
                continue
            rounds = sorted(set.intersection(*(set(run) for run in runs.values())))
            curve = [statistics.fmean(run[k] for run in runs.values()) for k in rounds]
            says = []
            if len(seeds) > 1 and min(seeds) <= paper <= max(seeds):
                says.append("inside")
            move = curve[-1] - curve[-11]
            if (mean < paper and move >= 3) or (mean > paper and move <= -3):
                says.append("rising" if move > 0 else "falling")
            if any(abs(statistics.fmean(curve[i - 4:i + 1]) - paper) <= 3 for i in range(4, len(curve))):
                says.append("meets")
            out[(s.grid.row(key).label, s.grid.value_label(v).split(" (")[0])] = (mean, len(seeds), paper, says)
    return out


@pytest.mark.parametrize("name,grid", [("domainbed-colored-quick", None), ("domainbed-colored-paper", "domainbed-colored")])
def test_paper_gaps_lists_each_gap_over_3_points_with_what_its_rounds_say(name, grid):
    spec = f"paper-gaps {name}" + (f" grid={grid}" if grid else "")
    lines = pages.render(spec).splitlines()[2:]
    want = _by_hand_gaps(name, grid)
    assert len(lines) == len(want) > 0
    for line in lines:
        label, env, ours, paper, gap, says = [c.strip() for c in line.strip("|").split("|")]
        mean, n, p, kinds = want[(label, env)]
        assert ours == f"{mean:.2f} ({n})" and paper == f"{p:.2f}" and gap == _minus(f"{mean - p:+.2f}")
        found = [k for k, text in (("inside", "inside our seeds' range"), ("rising", "still rising"),
                                   ("falling", "still falling"), ("meets", "meets it at rounds")) if text in says]
        assert found == kinds and (says == "open") == (not kinds)
    if grid is None:  # one seed: the same rounds the one-run generators name
        assert pages.render(f"tail-rise {name} source_only 2") in dict(
            (tuple(c.strip() for c in x.strip("|").split("|")[:2]), x) for x in lines)[("Source Only", "-90%")]
        assert f"meets it at rounds {pages.render(f'near-paper-rounds {name} fedavg_all 2')} of 50" in \
            next(x for x in lines if x.startswith("| FedAvg (all clients) | -90% |"))


def test_trial_time_is_the_summarys_sum_of_the_finished_trials_own_times():
    import json

    import re

    name = "domainbed-colored-mnist-quick"  # run in chunks: the last launch ran a part of its trials
    # the sweep's trials (a trial rerun under new settings leaves its old record beside, under its old key)
    keys = {r["trial"] for r in pages.load_sweep(name).rows}
    rows = [pages.RESULTS / name / "trials" / k / "rows.json" for k in keys]
    assert len(list((pages.RESULTS / name / "trials").glob("*/rows.json"))) > len(rows)  # (such records are here)
    total = sum(json.loads(p.read_text())["seconds"] for p in rows)
    m = re.fullmatch(r"([\d ]+) s for (\d+) trials", pages.render(f"wall {name}"))
    assert m and int(m[2]) < len(rows)  # the last launch's wall time, not the folder's
    got = pages.render(f"trial-time {name}")
    assert got == f"{round(total):,} s ({round(total) / 3600:.1f} h)".replace(",", " ")  # (the summary rounds)
    with pytest.raises(ValueError, match="names no finished trials' own run time"):
        pages.render("trial-time search-beta")  # a search's summary says no such thing


def test_trials_done_counts_the_finished_records_only(monkeypatch, tmp_path):
    import shutil

    real = sorted((pages.RESULTS / "domainbed-colored-mnist-paper" / "trials").iterdir())[:2]
    trials = tmp_path / "chunked" / "trials"
    for rec in real:
        shutil.copytree(rec, trials / rec.name)
    started = trials / "started"  # stopped before its last round: a trial.json and no rows.json
    started.mkdir()
    shutil.copy(real[0] / "trial.json", started / "trial.json")
    monkeypatch.setattr(pages.records, "RESULTS", tmp_path)
    assert pages.render("trials-done chunked") == "2"
    with pytest.raises(ValueError, match="is not a folder"):
        pages.render("trials-done missing")


def test_gpu_lease_reads_each_steps_samples_inside_its_window(monkeypatch, tmp_path):
    monkeypatch.setattr(pages.records, "RESULTS", tmp_path)
    lease = tmp_path / "bench-sweep" / "lease"
    lease.mkdir(parents=True)
    (lease / "setup.txt").write_text("setup 4 s\n3.12.3 ray 2.60.0\n")
    (lease / "steps.txt").write_text("== build start 4 s (limit 200)\n== build rc=0 30 s\n"
                                     "== sweep start 34 s (limit 200)\n== sweep rc=124 40 s\ndone 74 s\n")
    # one sample a second from t = 4 s (the set-up's end): 0 % / 10 MiB while building, then 50 % and 80 % in turn
    # with 1024 MiB, one 4096 MiB sample at t = 50 s (inside sweep's trimmed window, 42-66 s) and one 8192 MiB at
    # t = 36 s (inside the step, outside its window: a sample near an edge counts for neither step)
    rows = []
    for k in range(70):
        t = 4 + k
        busy, mem = (0, 10) if t < 34 else (50 + 30 * (k % 2), 1024)
        mem = 4096 if t == 50 else 8192 if t == 36 else mem
        rows.append(f"2026/11/28 04:{40 + k // 60}:{k % 60:02d}.500, {busy}, {mem}")
    (lease / "smi.csv").write_text("\n".join(rows) + "\nnot a sample\n")
    got = pages.render("gpu-lease lease").splitlines()
    sweep = [50 + 30 * (k % 2) for k in range(70) if 42 <= 4 + k <= 66]  # 13 at 50 %, 12 at 80 %
    assert len(sweep) == 25 and sum(sweep) / 25 == 64.4
    assert got[2] == "| build | 4 | 30 | 0 | 0 | 0.0 |"
    assert got[3] == "| sweep | 34 | 40 | 124 | 64 | 4.0 |"
    (lease / "setup.txt").write_text("no line\n")
    with pytest.raises(ValueError, match="names no 'setup N s' line"):
        pages.render("gpu-lease lease")


def test_bench_ratio_is_a_backends_wall_over_the_local_one(monkeypatch, tmp_path):
    import json

    monkeypatch.setattr(pages.records, "RESULTS", tmp_path)
    (tmp_path / "bench-sweep").mkdir()
    rows = [{"backend": "local", "wall_seconds": 80.0}, {"backend": "tune-actors", "wall_seconds": 90.4}]
    (tmp_path / "bench-sweep" / "b.json").write_text(json.dumps({"backends": rows}))
    assert pages.render("bench-ratio b tune-actors") == "1.13"  # 90.4 / 80 = 1.13
    assert pages.render("bench-ratio b local") == "1.00"
    with pytest.raises(ValueError, match="has no local and 'tune' rows"):
        pages.render("bench-ratio b tune")


def test_near_paper_counts_what_the_gap_table_leaves_out_on_the_same_metric():
    """A DomainBed page's "N of M cells within 3 points" and its table of the other cells read the same metric
    (the last-5 mean): N plus the table's rows is M."""
    near, total = (int(x) for x in pages.render("near-paper domainbed-colored-mnist-quick last=5").split(" of "))
    table = pages.render("paper-gaps domainbed-colored-mnist-quick").splitlines()
    listed = sum(1 for line in table[2:] if line.startswith("| "))  # the rows under the header and the separator
    assert near + listed == total
    assert pages.render("near-paper domainbed-colored-mnist-quick") != pages.render(
        "near-paper domainbed-colored-mnist-quick last=5")  # the final round's count is another number here


def test_a_generator_missing_a_key_is_a_line_naming_the_block(tmp_path, monkeypatch, capsys):
    """A block whose records lack what it reads (a KeyError deep in a generator) is one line naming the block and
    the missing key, exit 2, not the bare key."""
    page = tmp_path / "page.md"
    page.write_text("x <!-- records: cell fmnist-noise fedgp 0.4 -->1<!-- /records -->\n")

    def missing(spec):
        raise KeyError(2)

    monkeypatch.setattr(pages.engine, "render", missing)
    assert pages.main(["--check", str(page)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {page}: cell fmnist-noise fedgp 0.4: the records hold no 2") and "\n" not in err


def test_diagnose_reads_the_exact_column_and_ranks_the_linear_rules_by_bound_and_by_exact_value(monkeypatch, tmp_path):
    """The bound ranks FedDA first among the rules linear in g_T, the exact value FedDA auto; a record written
    before the exact column (or its estimated side) is a one-line error naming the file."""
    import json

    bound = {"target_only": 0.6, "source_only": 0.3, "fedda": 0.2, "fedgp": 0.1, "fedda_auto": 0.25, "fedgp_auto": 0.05}
    exact = {"target_only": 0.6, "source_only": 0.28, "fedda": 0.19, "fedda_auto": 0.125}
    side = {"best_static": "fedgp", "best": "fedgp_auto", "sigma": 1.0, "d_i": [0.5, 1.5], "delta2": bound}
    (tmp_path / "dg").mkdir()
    (tmp_path / "dg" / "new.json").write_text(json.dumps({"true": {**side, "delta2_exact": exact}, "estimated": side}))
    (tmp_path / "dg" / "old.json").write_text(json.dumps({"true": side, "estimated": side}))
    monkeypatch.setattr(pages.records, "RESULTS", tmp_path)
    run = pages.GENERATORS.get("diagnose")
    assert run("dg", "new", "true", "best-linear") == "FedDA"
    assert run("dg", "new", "true", "exact-best-linear") == "FedDA auto"
    assert run("dg", "new", "true", "exact:fedda_auto", digits="2") == "0.12"
    assert run("dg", "new", "true", "d-mean") == "1"
    with pytest.raises(ValueError, match="'old' has no exact"):
        run("dg", "old", "true", "exact:fedda")
    with pytest.raises(ValueError, match="exact:<rule> for a rule of"):
        run("dg", "new", "true", "exact:fedgp")


def test_fused_ops_bound_is_the_unfused_round_over_the_fused_rounds_convolutions(monkeypatch, tmp_path):
    """A fused round on a CPU takes at least its convolutions' time (fusing leaves their arithmetic as it is):
    the speed-up it can reach is the unfused round's seconds over those; a result from before the column has none."""
    import json

    from benchmarks.fused_ops import table

    m = {"unfused_events_per_step": 500.0, "unfused_aten_per_step": 180.0, "fused_events_per_step": 2000.0,
         "fused_aten_per_step": 580.0, "round_seconds_unfused": 3.0, "round_seconds_fused": 2.5}
    result = {"trials": ["a"] * 8, "layouts": {"per_model": {**m, "conv_seconds_unfused": 1.9,
                                                             "conv_seconds_fused": 1.6}, "grouped": m}}
    (tmp_path / "bench-fused").mkdir()
    (tmp_path / "bench-fused" / "r.json").write_text(json.dumps(result))
    monkeypatch.setattr(pages.records, "RESULTS", tmp_path)
    run = pages.GENERATORS.get("fused-ops")
    assert run("r", "per_model", "bound") == "1.88"  # 3.0 / 1.6
    assert run("r", "per_model", "conv_seconds") == "1.60" and run("r", "per_model", "conv_share") == "64"
    with pytest.raises(ValueError, match="field='bound' is invalid"):
        run("r", "grouped", "bound")
    lines = table(result).splitlines()
    assert lines[2].endswith("| 1.20x | 1.60 | 1.88x |") and lines[3].endswith("| 1.20x | - | - |")
