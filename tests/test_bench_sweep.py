"""The sweep benchmark (benchmarks.sweep): trials at once from the records' start and end times, a trial's first
round from its start-up phases, the tables, and (slow tier) both backends run end to end on a tiny column."""
from __future__ import annotations

import json

import pytest

from benchmarks import sweep as bench


def test_trials_at_once_is_the_most_overlapping_intervals():
    assert bench.at_once([]) == 0
    assert bench.at_once([(0, 10), (1, 2), (3, 4), (3.5, 5)]) == 3  # (0, 10), (3, 4), (3.5, 5)
    assert bench.at_once([(0, 1), (1, 2)]) == 1  # one ends as the next starts: one at a time
    assert bench.at_once([(0, 5)] * 4) == 4


def test_a_first_round_is_its_phases_kernel_load_aside():
    st = {"data_load": 1.5, "first_collect": 2.0, "first_evaluation": 0.25, "kernel_load": 0.75}
    assert bench.first_round_seconds(st) == 3.75  # kernel_load lies inside another phase


def _row(backend, wall, phases, busy=None, memory=None, sm=None):
    row = {"backend": backend, "trials": 2, "wall_seconds": wall, "trials_at_once_max": 2, "trials_at_once_mean": 1.5,
           "trial_seconds_median": 4.0, "gpu_busy_percent": busy, "first_round_seconds_median": 1.0,
           "first_round_seconds_max": 2.0, "phases_median_seconds": phases}
    if sm is not None:  # records written before the SM column have none
        row["gpu_sm_percent"] = sm
    if memory is not None:  # records written before the memory column have no such key
        row["gpu_memory_peak_gib"] = memory
    return row


def test_the_table_compares_with_the_local_backend_and_marks_what_is_missing():
    text = bench.table({"backends": [_row("local", 10.0, {"data_load": 0.5}),
                                     _row("tune-actors", 12.5, {"data_load": 0.5, "data_ship": 0.25}, busy=97.0,
                                          memory=9.375, sm=41.0)]})
    lines = text.splitlines()
    assert lines[2] == ("| local | 2 | 10.0 | 1.00 | 12.0 | 2 / 1.5 | 4.0 | not measured | not measured | "
                        "not measured | not measured | 1.00 / 2.00 |")
    assert lines[3].startswith("| tune-actors | 2 | 12.5 | 1.25 | 9.6 | 2 / 1.5 | 4.0 | 97 | 41 | 9.4 | not measured |")
    assert "| data_ship | - | 0.250 |" in lines  # a phase the local backend does not have


def test_a_trials_gpu_memory_is_its_processes_peaks_together():
    gib = 2**30
    record = {"process": {"peak_allocated": gib // 4, "peak_reserved": gib // 2},
              "actors": [{"peak_allocated": gib, "peak_reserved": 2 * gib, "reserved": gib}]}
    assert bench.trial_gpu_memory_gib(record) == 2.5  # the driver's 0.5 and its actor's 2
    assert bench.trial_gpu_memory_gib({"process": {"peak_allocated": 0, "peak_reserved": gib}, "actors": []}) == 1.0
    assert bench.trial_gpu_memory_gib(None) is None  # a CPU trial's record has none


def test_the_gpu_sampler_reads_busy_share_and_memory():
    s = bench.GpuSampler()
    for line in ("35, 1024\n", "97, 9216\n", "[N/A], [N/A]\n", "No devices were found\n", "12, 2048\n"):
        s.add(line)
    assert s.samples == [35.0, 97.0, 12.0]
    assert s.busy() == 48.0 and s.memory_peak_gib() == 9.0
    assert bench.GpuSampler().busy() is None and bench.GpuSampler().memory_peak_gib() is None
    # nvidia-smi dmon -s u: the SMs' activity (its header lines and a "-" left out)
    for line in ("# gpu    sm   mem   enc   dec   jpg   ofa\n", "# Idx     %     %     %     %     %     %\n",
                 "    0    41     7     0     0     0     0\n", "    0     -     -     -     -     -     -\n",
                 "    0    63    12     0     0     0     0\n"):
        s.add_dmon(line)
    assert s.sm == [41.0, 63.0] and s.sm_active() == 52.0 and bench.GpuSampler().sm_active() is None


@pytest.mark.parametrize("error,line", [
    (RuntimeError("tune: the sweep exited 1: boom"), "error: tune: the sweep exited 1: boom"),
    (KeyboardInterrupt(), "error: interrupted while tune ran; the backends before it are kept")])
def test_a_failed_backend_keeps_the_ones_measured_before_it(error, line, monkeypatch, tmp_path, capsys):
    def run_backend(backend, a, flags, extra, out):
        if backend == "tune":
            raise error
        return _row(backend, 10.0, {"data_load": 0.5})

    monkeypatch.setattr(bench, "run_backend", run_backend)
    monkeypatch.setattr(bench, "machine", lambda: {"date": "d", "cpus": 2, "cpu": "x", "gpu": None, "torch": "t",
                                                  "ray": "r", "python": "p"})
    out = tmp_path / "bench.json"
    assert bench.main(["--backends", "local,tune,tune-actors", "--json", str(out)]) == 1
    assert [r["backend"] for r in json.loads(out.read_text())["backends"]] == ["local"]
    captured = capsys.readouterr()
    assert "| local | 2 | 10.0 |" in captured.out
    assert captured.err.strip().splitlines()[-1] == line


def test_bad_arguments_are_one_line(capsys):
    for argv, field in ((["--backends", "dask"], "backends"), (["--device", "tpu"], "device")):
        assert bench.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith(f"error: {field}=")


def test_a_bad_fuse_is_refused_in_one_line_before_any_backend_runs(monkeypatch, capsys):
    """--fuse abc started the benchmark (its fused sweeps would refuse it only when they ran); it is fda-ray sweep's
    own one line (fda_ray.runtime.fusion.parse_fuse), exit 2, and nothing runs."""
    def run_backend(*args):  # noqa: ANN002
        raise AssertionError("a backend ran")

    monkeypatch.setattr(bench, "run_backend", run_backend)
    monkeypatch.setattr(bench, "machine", lambda: {})
    assert bench.main(["--backends", "local-fused", "--fuse", "abc"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: fuse='abc' is invalid: off, auto, or a whole number of trials a group holds (>= 1)"]
    assert bench.invalid(bench.parser().parse_args(["--fuse", "8"])) is None  # the good values as before
    assert bench.invalid(bench.parser().parse_args(["--fuse", "auto"])) is None


@pytest.mark.slow
def test_both_backends_run_a_tiny_column(fmnist_dir, tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = bench.main(["--methods", "target_only", "--backends", "local,tune,local-fused", "--values", "0.0,0.4",
                       "--data-dir", str(fmnist_dir), "--workers", "1", "--json", str(out), "--", "--rounds", "1",
                       "--samples-per-client", "100", "--test-samples", "100"])
    assert code == 0, capsys.readouterr().err[-2000:]
    result = json.loads(out.read_text())
    assert [r["backend"] for r in result["backends"]] == ["local", "tune", "local-fused"]
    for r in result["backends"]:
        # one worker: the unfused local backend runs the two trials one after the other, the fused one together
        assert r["trials"] == 2 and r["trials_at_once_max"] in {"local": (1,), "local-fused": (2,), "tune": (1, 2)}[
            r["backend"]]
        assert {"data_load", "first_collect", "first_evaluation"} <= set(r["phases_median_seconds"])
        assert 0 < r["first_round_seconds_median"] <= r["trial_seconds_median"] <= r["wall_seconds"]
        assert r["gpu_busy_percent"] is None or 0 <= r["gpu_busy_percent"] <= 100
    printed = capsys.readouterr().out
    assert "| local | 2 |" in printed and "| local-fused | 2 |" in printed
