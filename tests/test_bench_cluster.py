"""python -m benchmarks.cluster: bad input in one line; on a real local cluster of 1 and 2 nodes, the trials
spread over the nodes and the table's columns follow from the records."""
from __future__ import annotations

import json

import pytest

from benchmarks import cluster as bench


@pytest.mark.parametrize("args, field", [(["--nodes", "0"], "nodes"), (["--nodes", "a,b"], "nodes"),
                                         (["--trials", "0"], "trials"), (["--executor", "spark"], "executor")])
def test_bad_input_is_one_line(args, field, capsys):
    assert bench.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {field}=")


def test_a_trial_is_one_cpu_serially_and_its_clients_too_under_ray():
    from fda_ray.experiments.tune import resources

    serial, ray_ = (bench.trials(2, 2, None, ex)[0] for ex in ("serial", "ray"))
    assert resources(serial.config().resolved()).bundles == [{"CPU": 1.0}]
    # the driver, then the four clients (3 sources and the target) on one actor of 4 CPUs
    assert resources(ray_.config().resolved()).bundles == [{"CPU": 1.0}, {"CPU": 4.0}]
    assert len({t.key for t in bench.trials(3, 2, None, "serial")}) == 3  # one trial per seed, each its own record


@pytest.mark.slow
def test_the_trials_spread_over_the_nodes(fmnist_dir, capsys):
    assert bench.main(["--nodes", "1,2", "--trials", "2", "--rounds", "2", "--samples", "128",
                       "--data-dir", str(fmnist_dir), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["nodes"], r["slots"], r["nodes_used"]) for r in rows] == [(1, 1, 1), (2, 2, 2)]
    for r in rows:
        assert r["wall_s"] > 0 and 0 < r["driver_share"] < 1 and r["trials_per_min"] == pytest.approx(
            60 * 2 / r["wall_s"])
        # the slots' time is the trials' own run time plus the overhead
        assert r["overhead_s_per_trial"] * 2 + 2 * r["trial_s_median"] == pytest.approx(
            r["slots"] * r["wall_s"], rel=1e-9)  # (the median of two trials is their mean)


def test_a_node_that_misses_rays_startup_limit_is_started_again_once(monkeypatch, capsys):
    """Ray gives a node 30 s to register; on a busy 2-core machine one can miss it: the cluster is started again once
    (the first shut down), and a second miss, or another error, is raised."""
    import ray.cluster_utils

    made = []

    class Fake:
        def __init__(self, **kw):
            self.down = False
            made.append(self)

        def add_node(self, **kw):
            if len(made) <= fails:
                raise Exception("The current node timed out during startup. This could happen ...")

        def wait_for_nodes(self):
            pass

        def shutdown(self):
            self.down = True

    monkeypatch.setattr(ray.cluster_utils, "Cluster", Fake)
    fails = 1
    got = bench._start_cluster(2, 1.0)
    assert got is made[1] and made[0].down and not made[1].down
    assert "did not register within Ray's 30 s; starting it again" in capsys.readouterr().err
    made.clear()
    fails = 2
    with pytest.raises(Exception, match="timed out during startup"):
        bench._start_cluster(2, 1.0)
    assert len(made) == 2 and all(c.down for c in made)
