"""Results pages whose numbers come from the records (fda_ray.experiments.pages): every committed page's generated
blocks equal what its trial records give, a typed number that disagrees fails the check and is rewritten, and
the statistics behind the blocks (fda_ray.experiments.tables) against hand computations."""
from __future__ import annotations

import math
import statistics

import pytest

from fda_ray.experiments import pages, tables


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
    assert half == pytest.approx(4.303 * math.sqrt(13.0) / math.sqrt(3))  # t_{0.975, 2} = 4.303
    assert tables.short_ci(values) == f"63.0 ± {half:.1f}" and tables.short_ci([5.0]) == "5.0"
    assert tables.t975(1) == 12.706 and tables.t975(22) == 2.086 and tables.t975(100) == 1.96
    with pytest.raises(ValueError, match="df=0 is invalid"):
        tables.t975(0)
    final = {("a", 0.0): {0: 70.0, 1: 72.0}, ("b", 0.0): {0: 69.0, 1: 73.0, 2: 50.0}, ("a", 1.0): {2: 40.0}}
    assert tables.paired_differences(final, "a", "b", [0.0, 1.0]) == [1.0, -1.0]


def test_the_build_note_names_each_directorys_build_or_says_it_is_unknown(tmp_path, monkeypatch):
    import json

    from fda_ray.core.build import FIELDS, build

    monkeypatch.setattr(pages, "RESULTS", tmp_path)
    for name, env in (("x", {**build(), "python": "3.11.7"}), ("y", None), ("z", None)):
        d = tmp_path / name / "trials" / f"{name}-trial"
        d.mkdir(parents=True)
        (d / "rows.json").write_text(json.dumps({"config": {}, "rows": [], "seconds": 0.0,
                                                 **({"environment": env} if env else {})}))
    here = ", ".join(f"{k} {build()[k]}" for k in FIELDS)
    assert pages.render("build x y z") == (f"Build. `x`: {here} (1 trials); `y`, `z`: an unknown build (their records "
                                           "predate build recording: a rerun on another build may move cells by "
                                           "points).")
    with pytest.raises(ValueError, match="'w' has no finished trial"):
        pages.render("build w")
