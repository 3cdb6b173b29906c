"""A run's start-up phases (fda_ray.runtime.startup): every run and trial record keeps them, they add up to the
time before the first round's row, a trial's first report carries them, and the sweep's status names one that
took unusually long."""
from __future__ import annotations

import io
import json
import time

import pytest
import ray

from fda_ray.experiments.console import Progress
from fda_ray.experiments.records import Trial, trial_key
from fda_ray.experiments.trials import run_trial
from fda_ray.runtime import startup as S
from fda_ray.runtime.engine import run


def test_a_serial_run_times_its_start_up(tiny):
    t0 = time.perf_counter()
    marks = []
    hist = run(tiny(method="fedgp", rounds=2), lambda row: marks.append(time.perf_counter()))
    st = hist.startup
    assert set(st) == {"device_init", "data_load", "first_collect", "first_aggregation", "first_evaluation",
                       "kernel_load"}
    assert all(v >= 0 for v in st.values())
    # the phases other than kernel_load (inside another one) happen one after the other, before the first row
    spent = sum(v for k, v in st.items() if k != "kernel_load")
    assert spent <= marks[0] - t0
    assert st["kernel_load"] <= st["first_aggregation"] + st["data_load"] + st["device_init"] + 1e-3


@pytest.fixture
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow  # its own local Ray and 4 actor processes
def test_a_ray_runs_actors_start_while_the_data_loads(local_ray, tiny):
    from fda_ray.runtime.driver import run_ray

    hist = run_ray(tiny(method="fedgp", rounds=1, executor="ray"))
    st = hist.startup
    assert {"ray_start", "actors_spawn", "data_load", "actors_start", "data_ship", "first_collect",
            "first_evaluation"} <= set(st)
    assert list(st)[:5] == ["ray_start", "actors_spawn", "device_init", "data_load", "actors_start"]


def test_a_trial_record_keeps_its_phases_and_its_first_report_carries_them(tiny, tmp_path):
    params = dict(tiny(method="target_only", rounds=2).to_dict())
    trial = Trial(trial_key("target_only", "noise", 0.0, 0, params), "target_only", 0.0, 0, params)
    reports = []
    run_trial(trial, tmp_path, report=reports.append)
    record = json.loads((tmp_path / trial.key / "rows.json").read_text())
    assert set(record["startup"]) >= {"data_load", "first_collect", "first_evaluation"}
    assert S.from_report(reports[0]) == record["startup"]  # nothing is added after the first round
    assert all(S.REPORT_KEY not in r for r in reports[1:])
    assert all(S.REPORT_KEY not in row for row in record["rows"])  # the rows stay the numbers


def test_tune_flattened_phases_are_read_too():
    assert S.from_report({"round": 0, "startup/data_load": 2.5, "accuracy": 0.1}) == {"data_load": 2.5}
    assert S.from_report({"round": 0, "startup": {"data_ship": 1.0}}) == {"data_ship": 1.0}
    assert S.from_report({"round": 3}) == {}


def test_the_status_names_a_slow_phase_once():
    out = io.StringIO()
    p = Progress(1, "noise", stream=out, live=False)
    t = Trial("k", "fedgp", 0.4, 0, {})
    p.started(t, 3)
    p.at_round("k", {"round": 0, "startup": {"data_load": 1.0, "first_evaluation": S.SLOW_S["first_evaluation"] + 70}})
    p.at_round("k", {"round": 1})
    notes = [x for x in out.getvalue().splitlines() if x.startswith("note:")]
    assert notes == [f"note: fedgp noise=0.4 seed 0: slow start-up: first_evaluation "
                     f"{S.SLOW_S['first_evaluation'] + 70:.1f} s (usually under {S.SLOW_S['first_evaluation']:g} s)"]
    assert S.slow_phases({"data_load": 1.0}) == []


def test_warming_a_device_is_nothing_on_the_cpu():
    import torch

    from fda_ray.train.device import warm

    warm("cpu")
    assert not torch.cuda.is_initialized()
    S.warm_device("cpu")
    assert not torch.cuda.is_initialized()


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_warming_a_gpu_creates_its_context():
    import torch

    S.warm_device("cuda")
    assert torch.cuda.is_initialized() and torch.backends.cudnn.is_available()


def test_a_client_ships_its_own_shard_not_the_dataset(tiny):
    """data_ship puts each client in the object store once: its pickle holds its shard and model, not the whole
    dataset its shard was cut from (a view of a larger tensor would pickle all of that tensor's storage)."""
    import pickle

    from fda_ray.runtime.experiment import build_experiment

    exp = build_experiment(tiny(method="fedgp"))
    for c in exp.clients:
        shard = sum(t.numel() * t.element_size() for pair in c.views.values() for t in pair)
        model = sum(p.numel() * p.element_size() for p in c.model.parameters())
        storage = sum(t.untyped_storage().nbytes() for pair in c.views.values() for t in pair)
        assert storage == shard  # the views own their storage
        assert len(pickle.dumps(c)) < shard + 2 * model + 200_000  # (+ the optimizer-free model, layout, framing)
