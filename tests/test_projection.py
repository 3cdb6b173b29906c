"""The projection of the paper reproduction's wall time (benchmarks.projection): the list scheduling against
hand-checked cases, where it stops scaling, the per-trial time model on made-up records, and the script on the
committed records."""
from __future__ import annotations

import contextlib
import io
import json
import random
import re

import pytest

from benchmarks import projection as pj
from tools import pages
from tools.pages import projection as pages_projection
from tools.pages.projection import PAGE_ARGS
from fda_ray.papers.grids import GRIDS
from fda_ray.papers.searches import SEARCHES


def test_five_equal_trials_on_two_slots_take_three_units():
    s = pj.list_schedule([1.0] * 5, [[]] * 5, slots=2)
    assert s.makespan == pytest.approx(3.0)
    assert sorted(s.start) == [0.0, 0.0, 1.0, 1.0, 2.0]


def test_longest_first_on_independent_trials():
    # LPT: 3 and 3 first, then 2 + 2 on ... -> {3, 2}, {3, 2}: 5 (in list order it would be 2+2+3 = 7 on one slot)
    s = pj.list_schedule([2.0, 2.0, 3.0, 3.0], [[]] * 4, slots=2)
    assert s.makespan == pytest.approx(5.0)


def test_a_finetune_trial_follows_the_trial_it_starts_from():
    # source (2) -> finetune (1), and two free trials (1 each), on 2 slots
    s = pj.list_schedule([2.0, 1.0, 1.0, 1.0], [[], [0], [], []], slots=2)
    assert s.start[1] >= s.finish[0] - 1e-12
    assert s.makespan == pytest.approx(3.0)
    # the chain is scheduled first even though a free trial is listed before it
    s = pj.list_schedule([1.0, 1.0, 2.0, 1.0], [[], [], [], [2]], slots=1)
    assert s.start[3] >= s.finish[2] - 1e-12
    assert s.makespan == pytest.approx(5.0)


def test_more_slots_than_trials_gives_the_longest_chain():
    durations, deps = [3.0, 1.0, 2.0, 5.0], [[], [0], [1], []]
    assert pj.critical_path(durations, deps) == pytest.approx(6.0)
    assert pj.list_schedule(durations, deps, slots=10).makespan == pytest.approx(6.0)
    assert pj.list_schedule(durations, deps, slots=10, overhead=0.5).makespan == pytest.approx(7.5)


def test_circular_dependencies_are_refused():
    with pytest.raises(ValueError, match="circle"):
        pj.list_schedule([1.0, 1.0], [[1], [0]], slots=2)


def test_the_projection_never_grows_with_more_gpus():
    rng = random.Random(3)
    durations = [rng.uniform(1, 20) for _ in range(60)]
    deps = [[i - 1] if i % 7 == 6 else [] for i in range(60)]  # some finetune-like pairs
    gpus = list(range(1, 31))  # 30 x 2 slots: one per trial at the end
    spans, stop = pj.project(durations, deps, gpus, trials_per_gpu=2)
    values = [spans[g] for g in gpus]
    assert all(b <= a + 1e-9 for a, b in zip(values, values[1:]))
    assert values[0] > values[-1]  # it did fall
    assert values[-1] == pytest.approx(pj.critical_path(durations, deps))
    assert spans[1] >= sum(durations) / 2 - 1e-9  # no schedule beats the work over the slots


def test_it_stops_scaling_where_the_longest_trial_takes_over():
    # ten trials of 1 and one of 5, one trial per GPU: 2 GPUs take 8 (15 units of work), 3 take 5 = the long one,
    # with 8 trials still sharing slots
    durations = [5.0] + [1.0] * 10
    stop = pj.stop_scaling(durations, [[]] * 11, trials_per_gpu=1)
    assert stop.gpus == 3
    assert stop.makespan == pytest.approx(5.0)
    assert "longest chain" in stop.reason and "8 trials still sharing" in stop.reason
    spans, _ = pj.project(durations, [[]] * 11, [1, 2, 3, 4], trials_per_gpu=1)
    assert [spans[g] for g in (1, 2, 3, 4)] == pytest.approx([15.0, 8.0, 5.0, 5.0])


def test_it_stops_scaling_once_every_trial_has_a_slot():
    stop = pj.stop_scaling([4.0] * 6, [[]] * 6, trials_per_gpu=2)
    assert stop.gpus == 3 and stop.slots == 6
    assert "own slot" in stop.reason


def test_slot_time_scales_with_trials_per_gpu():
    assert pj.slot_seconds(80.0, 8) == pytest.approx(80.0)
    assert pj.slot_seconds(80.0, 16) == pytest.approx(160.0)
    assert pj.slot_seconds(80.0, 4) == pytest.approx(40.0)
    with pytest.raises(ValueError):
        pj.slot_seconds(80.0, 0)


def _cfg(**kw):
    base = dict(dataset="colored-fmnist", model="mnist_cnn", method="fedda", rounds=50, warmup_rounds=2,
                samples_per_client=None, test_samples=None, test_env=0, source_envs=None, target_labelled=None,
                target_fraction=0.001, num_sources=2, params={})
    return {**base, **kw}


def _rec(key, gpu, cfg, seconds, client, rounds=52, row="fedda", value=0.0, seed=0, source="x"):
    return pj.Record(key=key, source=source, gpu=gpu, config=cfg, kind="run", row=row, value=value, seed=seed,
                     seconds=seconds, client_seconds=client, rounds=rounds)


def test_the_time_model_tiers_on_made_up_records():
    pool = 70000
    paper, quick = _cfg(), _cfg(samples_per_client=500, test_samples=1000)
    gpu = _rec("g", True, paper, 300.0, 270.0, source="gpu-dir")
    cpu = _rec("c", False, quick, 290.0, 180.0, source="cpu-dir")
    # environments pool[e::3] (23334, 23333, 23333), 80 % in-split: sources 1 and 2 train 2 x 18667, the held-out
    # environment 0 tests on int(0.2 x 23334)
    trained, test = pj.construction_work(paper, pool)
    assert (trained, test) == (37334, 4666)
    assert pj.construction_work(quick, pool) == (1000, 1000)
    expected_cpu = 52 * (180 / 52 * trained / 1000 + 110 / 52 * test / 1000)
    assert pj.scaled_seconds(cpu, paper, pool) == pytest.approx(expected_cpu)
    other = _rec("f", False, _cfg(dataset="fashion-mnist", model="simple_cnn", samples_per_client=None),
                 250.0, 200.0, row="fedgp", source="cpu-fmnist")
    m = pj.TimeModel([gpu, cpu, other], pool)
    assert m.factor is not None and m.factor.pairs == 1
    assert m.factor.value == pytest.approx(expected_cpu / 300.0)
    # its own GPU record; its own CPU record over F; the same work at another seed; a bigger construction
    assert m.estimate(paper, "run", "nope", "g") == pj.Estimate(300.0, "gpu", ("gpu-dir",), "mnist_cnn")
    e = m.estimate(other.config, "run", "f", "")
    assert e.basis == "cpu/F" and e.seconds == pytest.approx(250.0 / m.factor.value)
    assert m.estimate(other.config, "run", "another-seed", "").basis == "cpu~/F"
    rotated = _cfg(dataset="rotated-fmnist", num_sources=5)
    e = m.estimate(rotated, "run", "r", "")
    assert e.basis == "gpu-scaled" and e.seconds > 300.0  # 5 sources of 9333 > 2 of 18667
    with pytest.raises(pj.NoEstimate, match="no record of model resnet18"):
        m.estimate(_cfg(dataset="vlcs", model="resnet18"), "run", "v", "")
    with pytest.raises(pj.NoEstimate, match="client sizes"):
        m.estimate(_cfg(dataset="pacs", model="mnist_cnn"), "run", "p", "")


def test_the_cluster_benchmarks_row_with_the_most_nodes_gives_the_overhead(tmp_path):
    bench = tmp_path / "cluster.json"
    bench.write_text(json.dumps({"rows": [
        {"nodes": 1, "trials": 8, "wall_s": 100.0, "overhead_s_per_trial": 9.0, "driver_share": 0.1},
        {"nodes": 2, "trials": 8, "wall_s": 60.0, "overhead_s_per_trial": 4.0, "driver_share": 0.1}]}))
    secs, note = pj.overhead_from(str(bench))
    assert secs == 4.0 and "2 nodes" in note
    assert pj.overhead_from(None)[0] == 0.0


PAGE = pj.ROOT / "docs" / "scaling.md"


@pytest.fixture(scope="module")
def page_output() -> str:
    """The page's command's output (PAGE_ARGS, run from the repository root as the page shows it), run here by
    main() itself: independent of the generators' cached projection."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.chdir(pj.ROOT)
        assert pj.main(list(PAGE_ARGS)) == 0
    return out.getvalue()


@pytest.mark.slow  # (5-26 s: the fast tier stays within 8 minutes on 2 cores)
def test_the_script_on_the_committed_records_and_the_page(page_output):
    text = page_output
    assert "| grid | trials |" in text and "| all projected grids |" in text
    for name in [*GRIDS, *SEARCHES]:
        if name.endswith(pj.TWIN_SUFFIX) and name.removesuffix(pj.TWIN_SUFFIX) in GRIDS:
            assert f"| {name} |" not in text, name  # a Fashion-MNIST twin: projected as its MNIST grid, once
            continue
        assert f"| {name} |" in text, name  # projected, or named among those not projected with a reason
    total = next(line for line in text.splitlines() if line.startswith("| grids and searches |"))
    assert total.count("|") >= 8
    assert "the noise grid's 0.4 column" in text
    assert pj.fmnist_pool_size() is not None, ("Fashion-MNIST not found: the page's DomainBed rows need it "
                                               "(bash datasets/fashion-mnist.sh)")
    # docs/scaling.md shows the command, and its blocks (the output, the prose's numbers) are what the records give
    page = PAGE.read_text()
    assert "python -m benchmarks.projection " + " ".join(PAGE_ARGS) in page
    assert "<!-- records: projection -->" in page
    assert pages.main(["--check", str(PAGE)]) == 0, "docs/scaling.md is out of date: python -m tools.pages"
    assert pages.render("projection") == text.strip()


def _cells(text: str, first: str) -> list[str]:
    line = next(x for x in text.splitlines() if x.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip("|").split("|")]


@pytest.mark.slow  # (5-26 s: the fast tier stays within 8 minutes on 2 cores)
def test_the_facts_are_the_numbers_of_the_projections_own_output(page_output):
    text = page_output
    fact = pages_projection.projection_fact
    # the first totals table: set, trials, 1 / 8 / 32 GPU, stops scaling at G, makespan there, why
    totals = text[text.index("The whole reproduction"):]
    for set_, label in pages_projection.SETS.items():
        row = _cells(totals, label)
        assert fact("trials", set=set_) == row[1]
        assert [fact("makespan", gpus=g, set=set_) for g in ("1", "8", "32")] == row[2:5]
        assert fact("stop-gpus", set=set_) == row[5]
        assert fact("makespan-there", set=set_) == row[6]
        assert f"({fact('slots', set=set_)} slots, {row[1]} trials)" in row[7]
        assert row[7].endswith("the longest chain: " + fact("chain", set=set_))
    sharing = re.search(r"with (\d+) trials still sharing", _cells(totals, "grids and searches")[7])
    assert fact("sharing") == (sharing.group(1) if sharing else "0")
    # the check's totals: the last table
    check = text[text.index("Check: "):]
    row = _cells(check, "grids and searches")
    assert [fact("makespan", gpus=g, checked="yes") for g in ("1", "8", "32")] == row[2:5]
    m = re.search(r"model (\S+)\), on 1 GPU at K = 8: projected ([^;]+); measured ([^:]+): ([\d.]+)x", check)
    assert (fact("check-models"), fact("check-projected"), fact("check-measured"), fact("check-ratio")) == m.groups()
    # the planned / projected line, a grid's work, the lines above the tables
    m = re.search(r"Planned: (\d+) trials \((\d+) of the grids, (\d+) of the searches\); projected: (\d+) \((\d+) "
                  r"once each\); not projected: (\d+)\.", text)
    assert m.groups() == (fact("planned"), fact("planned", kind="grid"), fact("planned", kind="search"),
                          fact("projected"), fact("trials"), fact("not-projected"))
    grids = text[text.index("Grids (paper profile)"):text.index("Searches (paper profile")]
    assert fact("work", grid="domainbed-rotated") == _cells(grids, "domainbed-rotated")[4]
    m = re.search(r"Records of the same work \((\d+) sets of 2 or more\): slowest / fastest ([\d.]+) \(median over "
                  r"the sets\), at most ([\d.]+)\.", text)
    assert m.groups() == (fact("spread-sets"), fact("spread-median"), fact("spread-max"))
    m = re.search(r"F = ([\d.]+) \(median of (\d+) pairs, ([\d.]+) to ([\d.]+); model ([^;]+);", text)
    assert m.groups() == (fact("factor"), fact("factor-pairs"), fact("factor-low"), fact("factor-high"),
                          fact("factor-models"))
    assert f"Overhead: {fact('overhead')} per trial" in text


def test_an_unknown_fact_is_one_line_naming_the_known_ones():
    with pytest.raises(ValueError) as err:
        pages.render("projection-fact no-such-fact")
    message = str(err.value)
    assert "\n" not in message and "'no-such-fact'" in message
    for name in pages_projection.FACTS:
        assert name in message
    with pytest.raises(ValueError, match="keywords: gpus, set, checked"):
        pages_projection.projection_fact("makespan", gpu="8")  # a misspelt keyword
