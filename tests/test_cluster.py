"""cluster.yaml, and its commented on-premise variant, pass Ray's own cluster-config validation (the
schema and checks `ray up` applies), and keep the promises the file makes: no port open to the world,
the pinned packages fda-ray needs, trial drivers on the head."""
from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

import fda_ray.tune as ft

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "cluster.yaml"


def _aws() -> dict:
    return yaml.safe_load(CLUSTER.read_text())


def _local() -> dict:
    # The command cluster.yaml tells users to run to get the on-premise file.
    out = subprocess.run(["sed", "-n", r"s/^#| \{0,1\}//p", str(CLUSTER)], capture_output=True, text=True, check=True)
    return yaml.safe_load(out.stdout)


def _leaves(x):
    if isinstance(x, dict):
        for v in x.values():
            yield from _leaves(v)
    elif isinstance(x, list):
        for v in x:
            yield from _leaves(v)
    else:
        yield x


@pytest.mark.parametrize("load", [_aws, _local], ids=["aws", "local"])
def test_cluster_configs_pass_rays_validation(load):
    config = load()
    validate_config(prepare_config(copy.deepcopy(config)))
    # Every node installs fda-ray and the pinned dependencies, and fetches Fashion-MNIST.
    setup = "\n".join(config["setup_commands"])
    for pkg in ("ray[default,tune]==", "torch==", "torchvision==", "numpy==", "pyarrow=="):
        assert pkg in setup, pkg
    assert re.search(r"pip install -q -e \S*fda-ray", setup) and "load('fashion-mnist'" in setup
    # The dashboard listens on the head's loopback only (reach it with `ray dashboard`, an SSH tunnel).
    assert all("--dashboard-host=127.0.0.1" in c for c in config["head_start_ray_commands"] if "--head" in c)
    assert "." in config["file_mounts"].values()


def test_aws_config_opens_no_port_to_the_world_and_keeps_drivers_on_the_head():
    config = _aws()
    assert config["provider"]["type"] == "aws"
    nodes = config["available_node_types"]
    # Ray's auto-created security group opens SSH to 0.0.0.0/0; every node type names its own group instead.
    assert all(n["node_config"].get("SecurityGroupIds") for n in nodes.values())
    assert not any(v in ("0.0.0.0/0", "::/0") for v in _leaves(config))
    head, workers = nodes[config["head_node_type"]], [n for k, n in nodes.items() if k != config["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0 and head["resources"][ft.DRIVER_RESOURCE] >= 1
    assert workers and all(w["resources"]["GPU"] >= 1 and w["max_workers"] > w.get("min_workers", 0) for w in workers)


def test_pinned_ray_matches_the_installed_one():
    # `ray up` and `ray job submit` need the same Ray on the laptop and the cluster.
    import ray

    pins = dict(re.findall(r'"([a-z\[\],]+)==([0-9.]+)"', CLUSTER.read_text()))
    assert pins["ray[default,tune]"] == ray.__version__


def test_a_broken_config_is_rejected():
    # The validation is real: a config without a provider type fails it.
    config = _aws()
    del config["provider"]["type"]
    with pytest.raises(Exception):
        validate_config(prepare_config(config))
