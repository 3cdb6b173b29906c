"""Tune's own output on failure (issue 63, class 6): a trial that raises and is retried, or fails for good, shows as
fda-ray's one line naming the log file that holds Tune's traceback dumps (on the console only with --verbose), and
a sweep that ends with failed trials ends with one error line listing them and the resume command. The local
backend says the same lines (it has no Tune log). The trials: the plug-in tutorial's grid, its recipe raising in
round 1 (tests/test_exit_codes.py's failing plug-in), beside a FedGP row that finishes."""
from __future__ import annotations

import pytest

from test_exit_codes import _failing_tutorial
from test_plugins import _python


def _sweep(folder, backend: str, *more: str):
    return _python(["-m", "fda_ray.sweep", "--import", "my_fda", "--grid", "my-prox.yaml", "--profile", "quick",
                    "--backend", backend, "--out", "sweeps/x", "--data-dir", "data", "--no-figures",
                    "--max-failures", "1", *more], folder)


def _check_lines(p, folder, backend: str, more: str = "") -> list[str]:
    assert p.returncode == 1, p.stderr[-3000:]
    err = p.stderr.strip().splitlines()
    notes = [x for x in err if x.startswith("note: ")]
    assert len(notes) == 2 and {x.split(" failed: ")[0] for x in notes} == \
        {"note: fedprox_0 noise=2 seed 0", "note: fedprox_1 noise=2 seed 0"}, err
    for x in notes:
        assert " failed: run stopped in round 1: RuntimeError: mu went negative in my recipe (my_fda.py:" in x
        assert "again (attempt 2 of 2" in x
    (last,) = [x for x in err if x.startswith("error: ")]
    assert err[-1] == last
    assert last.startswith("error: 2 trial(s) failed: fedprox_") and "fedprox_0 at 2, seed 0" in last and \
        "fedprox_1 at 2, seed 0" in last and "(first: run stopped in round 1: RuntimeError: mu went negative" in last
    assert last.endswith("; the 1 finished trials are kept; resume with: python -m fda_ray.sweep --import my_fda "
                         f"--grid my-prox.yaml --profile quick --backend {backend} --out sweeps/x --data-dir data "
                         f"--no-figures --max-failures 1{more} --resume"), last
    assert "Traceback" not in p.stderr + p.stdout
    return notes + [last]


@pytest.mark.slow  # a Tune sweep in a subprocess
def test_a_failing_trial_on_tune_is_fda_rays_lines_and_tunes_dumps_go_to_the_named_log(tmp_path):
    _failing_tutorial(tmp_path, "RuntimeError", at_round=1)
    p = _sweep(tmp_path, "tune")
    lines = _check_lines(p, tmp_path, "tune")
    log = tmp_path / "sweeps" / "x" / "tune" / "errors.log"
    assert all(f"traceback in {log}" in x for x in lines[:2]) and f"the tracebacks in {log}" in lines[-1]
    assert "Trial task failed" not in p.stderr and "Trials did not complete" not in p.stderr
    dumped = log.read_text()
    assert dumped.count("Trial task failed for trial") == 4 and "Traceback (most recent call last)" in dumped
    assert "RuntimeError: mu went negative in my recipe" in dumped
    # --verbose: Tune's own dumps on the console too (and still in the log)
    again = _sweep(tmp_path, "tune", "--resume", "--verbose")
    assert again.returncode == 1 and "Trial task failed for trial" in again.stderr
    assert log.read_text().count("Trial task failed for trial") == 8


@pytest.mark.slow  # the local backend's worker processes
def test_a_failing_trial_on_the_local_backend_is_the_same_lines(tmp_path):
    _failing_tutorial(tmp_path, "RuntimeError", at_round=1)
    p = _sweep(tmp_path, "local", "--workers", "1")
    lines = _check_lines(p, tmp_path, "local", " --workers 1")
    assert "traceback" not in " ".join(lines)  # no log to name: the workers' errors come back as exceptions


def test_a_failures_line_keeps_a_missing_datasets_hint_whole():
    """A failure's line in the notes and summaries was cut at 300 characters: a missing dataset's hint (the paths
    searched, then the command that gets it) ended mid-command. Lines up to interrupts.LINE_MAX stay whole, a
    longer one says it was cut."""
    from fda_ray.core.interrupts import LINE_MAX, cut_line
    from fda_ray.experiments.backends import failure_line
    from fda_ray.experiments.tune import last_error_line

    hint = ("DatasetNotFound: Fashion-MNIST is not in /data/fmnist (searched /data/fmnist, /data/fmnist/raw, "
            "/usr/share/datasets/fashion-mnist, /root/.cache/fda_ray/FashionMNIST/raw); get it with `bash "
            "/home/researcher/checkouts/fda-ray/datasets/fashion-mnist.sh` (Debian's dataset-fashion-mnist) or pass "
            "--data-dir the folder that holds its four IDX files, gzipped or not: train-images-idx3-ubyte ...")
    assert 300 < len(hint) < LINE_MAX
    assert failure_line(FileNotFoundError(hint.split(": ", 1)[1])) == "FileNotFoundError: " + hint.split(": ", 1)[1]
    assert last_error_line(f"Traceback ...\n  File x\nfda_ray.data.base.{hint}\n") == hint
    long = "ValueError: " + "x" * 2 * LINE_MAX
    assert len(cut_line(long)) == LINE_MAX and cut_line(long).endswith(" ...") and cut_line(hint) == hint


def test_a_fused_groups_error_names_each_failed_member_with_its_own_line():
    """A fused group is one Tune trial: its error carries each failed member's own line (JSON on the exception's
    line, read back from Tune's trace), so that the notes and the summary name trials with their own errors, not
    the group's cut to 300 characters (before: 'RuntimeError: 2 of the group's 2 trials failed: a: ...; b: RunFaile')."""
    import fda_ray.experiments.tune as ft
    from fda_ray.runtime.failures import RunFailed

    a = RunFailed('run stopped in round 0: fedavg: non-finite values; a diverged client "x"; 0 finished rounds kept',
                  None)
    b = ValueError("beta=2 is invalid: in [0, 1] {not JSON}")
    e = ft.group_error({"fedgp-k1": a, "fedda-k2": b}, 3)
    trace = f"Traceback (most recent call last):\n  File \"x.py\", line 1\n{type(e).__module__}.RuntimeError: {e}\n"
    assert ft.member_errors(trace) == {
        "fedgp-k1": 'run stopped in round 0: fedavg: non-finite values; a diverged client "x"; 0 finished rounds kept',
        "fedda-k2": "ValueError: beta=2 is invalid: in [0, 1] {not JSON}"}
    assert ft.member_errors("RuntimeError: trials failed: {}") == {}  # not a group's error
    assert ft.member_errors(None) == {} and ft.member_errors("ValueError: x") == {}


@pytest.mark.slow  # a Tune sweep in a subprocess
def test_a_fused_groups_failing_members_are_each_named_with_their_own_error(tmp_path):
    """--fuse 2 on Tune, every trial diverging (a learning rate of 1e12): each failed member of the fused group gets
    its own note ('(in a fused group of 2) failed: run stopped in round 0: ...'), the summary lists each with its own
    error, and the sweep ends with one error line and the resume command, exit 1."""
    p = _python(["-m", "fda_ray.sweep", "--grid", "noise", "--profile", "quick", "--values", "0.4", "--methods",
                 "fedgp,fedgp_beta1,fedda", "--seeds", "1", "--fuse", "2", "--backend", "tune", "--lr-source", "1e12",
                 "--rounds", "2", "--out", "fz", "--no-figures", "--max-failures", "1"], tmp_path)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    err = p.stderr.splitlines()
    grouped = [x for x in err if x.startswith("note: ") and " (in a fused group of 2) failed: " in x]
    assert sorted(x.split(" (in")[0] for x in grouped) == ["note: fedda noise=0.4 seed 0",
                                                            "note: fedgp noise=0.4 seed 0"], err
    for x in grouped:
        assert " failed: run stopped in round 0: " in x and "a diverged client" in x and \
            "Tune runs the group again, its finished members kept (attempt 2 of 2; " in x, x
        assert "of the group's" not in x
    (last,) = [x for x in err if x.startswith("error: ")]
    assert last.startswith("error: 3 trial(s) failed: ") and "(first: run stopped in round 0: " in last, last
    assert last.endswith(" --resume"), last
    failed = (tmp_path / "fz" / "summary.md").read_text().split("## Failed trials (3)")[1]
    assert failed.count("(2 attempts): run stopped in round 0: ") == 3 and "of the group's" not in failed, failed
