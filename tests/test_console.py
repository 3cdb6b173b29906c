"""The sweep's console (fda_ray.experiments.console): the time left weighted by each row's measured cost, worked
out by hand on a fake clock; a status block redrawn in place on a terminal and plain lines elsewhere; and a quiet
sweep on Ray Tune that shows none of Ray's and Tune's own boxes, hints and INFO lines unless --verbose."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fda_ray.experiments.console import Progress


@dataclass
class T:
    key: str
    row: str
    value: float = 0.4
    seed: int = 0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_time_left_is_weighted_by_each_rows_measured_cost():
    clock = Clock()
    out = io.StringIO()
    p = Progress(5, "noise", stream=out, live=False, clock=clock)
    cheap = [T(f"c{i}", "target_only") for i in range(2)]
    dear = [T(f"d{i}", "fedgp") for i in range(3)]
    p.expect(cheap + dear)
    assert p.left() is None  # nothing measured yet
    p.started(cheap[0])
    p.started(dear[0])
    clock.now += 10
    p.line(cheap[0], "done")  # target_only: 10 s
    # the mean over finished trials would say 10 s a trial; fedgp has no measurement yet: the mean (10 s) stands in
    assert p.left() == pytest.approx((1 * 10 + 2 * 10 + max(0, 10 - 10)) / 2)
    p.started(cheap[1])
    clock.now += 90
    p.line(dear[0], "done")  # fedgp: 100 s
    # to run: fedgp x2 at 100 s; running: target_only started 90 s ago, expected 10 s -> 0 left; 2 at once
    assert p.left() == pytest.approx((2 * 100 + 0) / 2)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[1/5] done: target_only noise=0.4 seed 0; elapsed 0m10s, left ~0m15s")
    assert lines[1].startswith("[2/5] done: fedgp noise=0.4 seed 0; elapsed 1m40s, left ~1m40s")
    assert "\x1b[" not in out.getvalue()  # not a terminal: plain lines only


def test_on_a_terminal_the_block_is_redrawn_in_place_with_each_running_trials_round():
    clock = Clock()
    out = io.StringIO()
    p = Progress(2, "noise", stream=out, live=True, clock=clock)
    a, b = T("a", "fedgp"), T("b", "fedda")
    p.expect([a, b])
    p.started(a, rounds=52)
    p.started(b, rounds=52)
    p.at_round("a", {"round": 11, "accuracy": 0.5})
    text = out.getvalue()
    assert "\x1b[2F\x1b[J" in text  # the one-trial block (2 lines) erased before the two-trial block is drawn
    last = text.rsplit("\x1b[J", 1)[-1].splitlines()
    assert last == ["2 running, 0 done, 0 failed of 2; elapsed 0m00s, left unknown until a trial finishes",
                    "  fedgp noise=0.4 seed 0: round 12/52", "  fedda noise=0.4 seed 0: starting"]
    clock.now += 5
    p.line(a, "FAILED")
    p.close()
    tail = out.getvalue().rsplit("\x1b[J", 1)[-1]
    assert tail == ""  # closed: the block is erased, the settled line stays above it
    assert "[1/2] FAILED: fedgp noise=0.4 seed 0" in out.getvalue()


@pytest.mark.slow
def test_a_quiet_sweep_on_tune_shows_no_ray_or_tune_boxes_and_verbose_does(fmnist_dir, tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text("name: g\ndataset: fashion-mnist\nvariable: noise\nvalues: [0.4]\nrows:\n"
                    "  - {key: target_only, label: Target Only, method: target_only}\nprofiles:\n  quick:\n    fields: {rounds: 1, "
                    "samples_per_client: 128, test_samples: 100, num_sources: 2}\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("FDA_RAY_QUIET", None)
    base = [sys.executable, "-m", "fda_ray.sweep", "--grid", str(grid), "--data-dir", str(fmnist_dir), "--no-figures"]
    quiet = subprocess.run([*base, "--out", str(tmp_path / "q")], capture_output=True, text=True, env=env, timeout=600)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    said = quiet.stdout + quiet.stderr
    for noise in ("Configuration for experiment", "To visualize your results with TensorBoard", "INFO",
                  "Token authentication", "No CUDA runtime is found", "View detailed results", "experiment state to"):
        assert noise not in said
    assert "[1/1] done: target_only noise=0.4 seed 0" in quiet.stdout and "| Target Only |" in quiet.stdout
    # Tune's per-round results reach the tracker in the sweep's process: TensorBoard events under --out
    from test_tracking import tensorboard_scalars

    (rec,) = (tmp_path / "q" / "trials").iterdir()
    rows = __import__("json").loads((rec / "rows.json").read_text())["rows"]
    steps = [s for s, _ in tensorboard_scalars(tmp_path / "q" / "tensorboard" / rec.name)["accuracy"]]
    assert steps == [r["round"] for r in rows if r.get("accuracy") is not None]
    loud = subprocess.run([*base, "--out", str(tmp_path / "v"), "--verbose"], capture_output=True, text=True, env=env,
                          timeout=600)
    assert loud.returncode == 0, loud.stderr[-2000:]
    said = loud.stdout + loud.stderr  # Ray's and Tune's own output, shown when asked for
    # Tune's own lines: its configuration box (drawn at its first status report, which a trial that ends first may
    # never reach: seen missing once in a loaded slow-tier run) or its closing line; the token-auth notice depends on
    # the machine: not asserted
    assert "Configuration for experiment" in said or "and experiment state to" in said


def test_progress_pickles_without_its_stream_and_trackers():
    # Tune pickles its callbacks, which hold the Progress, into its experiment state
    import pickle

    out = io.StringIO()
    p = Progress(3, "noise", stream=out, live=False)
    p.observers.append(object())
    p.expect([T("a", "fedgp")])
    q = pickle.loads(pickle.dumps(p))
    assert q.stream is sys.stdout and q.observers == [] and q.queued == {"fedgp": 1} and q.total == 3
    assert p.stream is out and len(p.observers) == 1  # the live one keeps both


def test_the_block_never_wraps_or_scrolls_a_small_terminal():
    """A line wider than the terminal wraps, a block taller than it scrolls: either way the redraw's cursor-up
    clears too little. The block is cut to the terminal: lines to its width, running trials to its height."""
    from fda_ray.experiments.console import fit

    out = io.StringIO()
    p = Progress(30, "noise", stream=out, live=True)
    p.terminal_size = lambda: (40, 6)
    for i in range(12):
        p.started(T(f"k{i}", "fedgp_auto_with_a_long_row_name"), 52)
    frames = [f for f in out.getvalue().split("\x1b[") if f]
    last = frames[-1].split("J", 1)[-1] if "J" in frames[-1][:4] else frames[-1]
    lines = [ln for ln in last.splitlines() if ln]
    assert len(lines) == 5 and all(len(ln) <= 39 for ln in lines)
    assert lines[-1] == "  ... and 9 more running"
    assert fit(["short", "x" * 100], 30, 24) == ["short", "x" * 26 + "..."]
    assert fit(["a", "b"], 80, 24) == ["a", "b"]


def test_a_quiet_worker_drops_only_the_systemexit_that_ray_raises_as_it_ends_the_process(monkeypatch, capsys):
    """Ray ends a trial process with SIGTERM, whose handler raises SystemExit; when that lands in a callback (a
    WeakSet's, during garbage collection) Python prints "Exception ignored in ...: SystemExit" and Ray forwards it to
    the sweep's console. A quiet worker drops those; any other unraisable error is still printed."""
    import sys

    from fda_ray.core import quiet

    import logging

    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
    monkeypatch.setattr(logging.getLogger("torch.utils.cpp_extension"), "level", logging.NOTSET)  # (put back)
    monkeypatch.setenv(quiet.QUIET_ENV, "1")
    quiet.quiet_worker()
    quiet.quiet_worker()  # (once only: not wrapped twice)
    assert getattr(sys.unraisablehook, "_fda_ray", False)

    class Ends:
        def __init__(self, error: BaseException) -> None:
            self.error = error

        def __del__(self) -> None:
            raise self.error

    Ends(SystemExit(1))  # dropped at once: its __del__'s exception cannot be raised
    assert capsys.readouterr().err == ""
    Ends(ValueError("a real fault"))
    err = capsys.readouterr().err
    assert "Exception ignored" in err and "ValueError: a real fault" in err


def test_a_trial_stopped_on_its_last_round_is_counted_done():
    """ASHA's rung on a trial's last report stops a trial that trained every round: the line says so and the count
    is a finished trial's (the selection counts it finished); one cut at a rung says how many rounds it trained (the
    records' rounds 0 to 9 are "10 rounds", not a "round 10" that no file holds)."""
    import io

    from fda_ray.experiments.console import Progress, stopped_line
    from fda_ray.experiments.records import Trial

    assert stopped_line({"round": 9}, False) == "stopped early (after 10 rounds)"
    assert stopped_line({"round": 0}, False) == "stopped early (after 1 round)"
    assert stopped_line({"round": 9}, True) == "done (stopped on its last round)"
    p = Progress(2, "noise", stream=io.StringIO())
    for key, complete in (("a", True), ("b", False)):
        p.line(Trial(key, "fedgp", 0.2, 0, {}), stopped_line({"round": 3}, complete))
    assert (p.done, p.stopped, p.failed) == (1, 1, 0)


def test_two_object_store_outs_with_one_leaf_get_their_own_tune_error_logs():
    """An --out on an object store keeps Tune's tracebacks in a local file: named by the leaf alone, s3://a/x and
    s3://b/x (two sweeps at once) wrote one file."""
    from fda_ray.core.storage import StoragePath
    from fda_ray.experiments.console import tune_errors_log

    a, b = tune_errors_log(StoragePath("s3://a/x")), tune_errors_log(StoragePath("s3://b/x"))
    assert a != b and "fda-ray-x-" in a and a == tune_errors_log(StoragePath("s3://a/x"))
    assert tune_errors_log(StoragePath("/tmp/sweeps/x")) == "/tmp/sweeps/x/tune/errors.log"
