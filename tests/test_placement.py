"""A Tune trial's placement group (fda_ray.experiments.tune.resources): the driver and its client actors in one
group, packed on one node when they fit; a GPU share for a driver that aggregates and evaluates on the GPU;
drivers pinned to the nodes that declare fda_driver only when asked."""
from __future__ import annotations

import pytest

import fda_ray.experiments.tune as ft
from fda_ray.experiments import sweep
from fda_ray.runtime.config import RunConfig


def _bundles(**kw):
    cfg = RunConfig(num_sources=3, **kw).resolved()
    return ft.resources(cfg, ft.driver_placement(kw.pop("pin", False)))


def test_driver_and_clients_share_one_packed_group():
    pgf = _bundles(executor="ray", cpus_per_client=1.0, clients_per_actor=1)
    assert pgf.strategy == "PACK" == ft.PLACEMENT_STRATEGY
    # the driver's bundle first, then one per client actor (3 sources and the target)
    assert pgf.bundles == [{"CPU": 1.0}] + [{"CPU": 1.0}] * 4
    assert ft.resources(RunConfig().resolved()).strategy == "PACK"  # a serial trial: one bundle, packed too


def test_a_cuda_driver_asks_a_gpu_share_beside_its_gpu_clients():
    pgf = _bundles(executor="ray", cpus_per_client=1.0, gpus_per_client=0.1, clients_per_actor=2, device="cuda")
    assert pgf.bundles[0] == {"CPU": 1.0, "GPU": 0.1}  # the driver: a client's share of the GPU
    assert pgf.bundles[1:] == [{"CPU": 2.0, "GPU": pytest.approx(0.2)}] * 2
    # a CPU driver asks no GPU; a cuda driver of CPU clients asks a whole one
    assert "GPU" not in _bundles(executor="ray", cpus_per_client=1.0, gpus_per_client=0.1, clients_per_actor=2
                                 ).bundles[0]
    assert ft.driver_gpus(RunConfig(executor="ray", device="cuda")) == 1.0


def test_drivers_are_pinned_only_when_asked():
    assert ft.driver_placement() == {} and ft.driver_placement(True) == {ft.DRIVER_RESOURCE: 1.0}
    cfg = RunConfig(executor="ray", cpus_per_client=1.0, clients_per_actor=1, num_sources=3).resolved()
    assert ft.resources(cfg, ft.driver_placement(True)).bundles[0] == {"CPU": 1.0, ft.DRIVER_RESOURCE: 1.0}


def test_pin_drivers_needs_tune(capsys):
    assert sweep.main(["--grid", "noise", "--backend", "local", "--pin-drivers"]) == 2
    assert capsys.readouterr().err.strip() == ("error: pin_drivers=True is invalid with --backend local: it places "
                                               "Tune trials on Ray nodes")
