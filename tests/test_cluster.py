"""cluster.yaml, and its commented on-premise variant, pass Ray's own cluster-config validation (the
schema and checks `ray up` applies), and keep the promises the file makes: no port open to the world,
the pinned packages fda-ray needs, a head with no GPU and no driver-only resource (trial drivers are placed
beside their clients), a spot GPU type, and no committed records copied to the nodes."""
from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

import fda_ray.experiments.tune as ft

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
    assert re.search(r"pip install -q -c \S*fda-ray/constraints.txt -e \S*fda-ray", setup) and "load('fashion-mnist'" in setup
    # The dashboard listens on the head's loopback only (reach it with `ray dashboard`, an SSH tunnel).
    assert all("--dashboard-host=127.0.0.1" in c for c in config["head_start_ray_commands"] if "--head" in c)
    assert "." in config["file_mounts"].values()


def test_aws_config_opens_no_port_to_the_world_and_its_head_has_no_gpu_and_no_driver_resource():
    config = _aws()
    assert config["provider"]["type"] == "aws"
    nodes = config["available_node_types"]
    # Ray's auto-created security group opens SSH to 0.0.0.0/0; every node type names its own group instead.
    assert all(n["node_config"].get("SecurityGroupIds") for n in nodes.values())
    assert not any(v in ("0.0.0.0/0", "::/0") for v in _leaves(config))
    head, workers = nodes[config["head_node_type"]], [n for k, n in nodes.items() if k != config["head_node_type"]]
    # A small CPU head: no GPU, and no fda_driver (drivers are placed beside their clients; --pin-drivers is
    # for nodes that declare it by hand), so trials may run on any node.
    driver_resource = getattr(ft, "DRIVER_RESOURCE", "fda_driver")
    assert head["resources"].get("GPU", 0) == 0 and head["resources"].get("CPU", 0) >= 1
    assert "fda_driver" not in head["resources"] and driver_resource not in head["resources"]
    assert not any("fda_driver" in c for c in config["head_start_ray_commands"])
    assert not any("fda_driver" in c for c in _local()["head_start_ray_commands"])
    assert workers and all(w["resources"]["GPU"] >= 1 and w["max_workers"] > w.get("min_workers", 0) for w in workers)


def test_aws_config_has_a_spot_gpu_type_beside_the_on_demand_one():
    config = _aws()
    nodes = config["available_node_types"]
    market = {k: n["node_config"].get("InstanceMarketOptions", {}).get("MarketType") for k, n in nodes.items()}
    spot = [k for k, m in market.items() if m == "spot"]
    assert spot == ["gpu_spot_worker"], market
    assert market[config["head_node_type"]] is None  # the head (the sweep's process) is never preempted
    on_demand = nodes["gpu_worker"]
    s = nodes["gpu_spot_worker"]
    assert market["gpu_worker"] is None
    # the same machine, so a trial retried after a preemption runs on the same hardware
    assert s["node_config"]["InstanceType"] == on_demand["node_config"]["InstanceType"]
    assert s["resources"] == on_demand["resources"] and s["resources"]["GPU"] >= 1
    assert s.get("min_workers", 0) == 0 and s["max_workers"] >= 1


@pytest.mark.parametrize("load", [_aws, _local], ids=["aws", "local"])
def test_committed_records_are_not_copied_to_the_nodes(load):
    config = load()
    assert "docs/results" in config["rsync_exclude"] and ".git" in config["rsync_exclude"]


def test_rsync_with_rays_own_arguments_leaves_docs_results_out(tmp_path):
    # The arguments Ray's SSH command runner gives rsync for file_mounts (the local directory gets a trailing
    # "/"), run for real into a local directory: docs/results and .git stay behind, the package goes.
    from ray.autoscaler._private.command_runner import SSHCommandRunner

    assert shutil.which("rsync"), "rsync is not installed (apt-get install rsync; `ray up` needs it too)"

    args = SSHCommandRunner._create_rsync_filter_args(None, {"rsync_exclude": _aws()["rsync_exclude"]})
    out = subprocess.run(["rsync", "-an", "--out-format=%n", *args, f"{ROOT}/", f"{tmp_path}/"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert "fda_ray/__init__.py" in out and "cluster.yaml" in out
    assert not any(f.startswith("docs/results") or f == ".git" or f.startswith(".git/") for f in out)
    assert any(f.startswith("docs/") for f in out)  # only the records are left out of docs/
    # what a checkout holds beside its sources (a README install's .venv is gigabytes) stays behind too
    src = tmp_path / "checkout"
    for rel in (".venv/lib/torch.so", "data/MNIST/x", ".gpucache/a", "build/b", "tracking/t", "fda_ray/x.py"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("x")
    out = subprocess.run(["rsync", "-an", "--out-format=%n", *args, f"{src}/", f"{tmp_path / 'copy'}/"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert "fda_ray/x.py" in out and not any(f.split("/")[0] in (".venv", "data", ".gpucache", "build", "tracking")
                                              for f in out), out


def test_pinned_ray_matches_the_installed_one():
    # `ray up` and `ray job submit` need the same Ray on the laptop and the cluster.
    import ray

    pins = dict(re.findall(r'"([a-z\[\],]+)==([0-9.]+)"', CLUSTER.read_text()))
    assert pins["ray[default,tune]"] == ray.__version__


def test_the_heads_boto3_is_pinned_and_outlives_rays_defaults():
    """The autoscaler launches workers through boto3, which Ray's AWS defaults install unpinned in their
    head_setup_commands (replaced by any of one's own): cluster.yaml states it, pinned, and it survives
    prepare_config (what `ray up` merges)."""
    commands = prepare_config(copy.deepcopy(_aws()))["head_setup_commands"]
    assert len([c for c in commands if re.search(r'pip install -q "boto3==[0-9]+\.[0-9]+\.[0-9]+"', c)]) == 1
    assert not any("boto3>=" in c for c in commands)


def test_a_broken_config_is_rejected():
    # The validation is real: a config without a provider type fails it.
    config = _aws()
    del config["provider"]["type"]
    with pytest.raises(Exception):
        validate_config(prepare_config(config))


def _nodes() -> tuple[dict, dict, list[dict]]:
    config = _aws()
    nodes = config["available_node_types"]
    head = nodes[config["head_node_type"]]
    return config, head, [n for k, n in nodes.items() if k != config["head_node_type"]]


def test_aws_nodes_are_hardened():
    config, head, workers = _nodes()
    for node in (head, *workers):
        nc = node["node_config"]
        # IMDSv2 only: a request without a session token gets nothing from the metadata service.
        assert nc["MetadataOptions"]["HttpTokens"] == "required" and nc["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
        assert all(m["Ebs"]["Encrypted"] is True for m in nc["BlockDeviceMappings"])
        # A pinned image id (or the placeholder README's command fills in), never "latest" resolved at launch.
        assert re.fullmatch(r"ami-[0-9a-f]{8,17}|ami-fdaray-replace-with-pinned-image", nc["ImageId"]), nc["ImageId"]
    # Our own instance profiles: without one, Ray gives the head full EC2 and S3 access.
    assert head["node_config"]["IamInstanceProfile"]["Arn"].endswith(":instance-profile/fda-ray-head")
    assert all(w["node_config"]["IamInstanceProfile"]["Arn"].endswith(":instance-profile/fda-ray-worker") for w in workers)
    # https (or signed apt) only: no plain-http URL in what the nodes run, no torchvision download.
    commands = "\n".join(config["setup_commands"] + config["head_start_ray_commands"] + config["worker_start_ray_commands"])
    assert "http://" not in commands and "download=True" not in commands


def test_head_policy_is_least_privilege():
    policy = json.loads((ROOT / "cluster-iam" / "head-policy.json").read_text())
    cluster = _aws()["cluster_name"]
    actions = [(st, a) for st in policy["Statement"] for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])]
    assert all(st["Effect"] == "Allow" for st, _ in actions)
    assert not any("*" in a or a.startswith("s3:") for _, a in actions)  # no wildcard action, no S3
    for st, a in actions:
        if a in ("ec2:TerminateInstances", "ec2:StopInstances", "ec2:StartInstances", "ec2:DeleteTags"):
            # only this cluster's instances (Ray tags every node it launches with its cluster name)
            assert st["Condition"]["StringEquals"]["ec2:ResourceTag/ray-cluster-name"] == cluster, a
        if a == "iam:PassRole":
            assert st["Resource"].endswith(":role/fda-ray-worker")
        if a == "ec2:CreateTags":
            assert "Condition" in st
    trust = json.loads((ROOT / "cluster-iam" / "trust.json").read_text())
    assert trust["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}


def test_readme_commands_fill_every_placeholder_and_the_result_validates():
    readme = (ROOT / "docs" / "ray-and-clusters.md").read_text()  # the cluster page holds the AWS commands
    text = CLUSTER.read_text()
    config_lines = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    placeholders = set(re.findall(r"[a-z]*-?fdaray-replace-[a-z-]+", config_lines))
    assert placeholders == {"sg-fdaray-replace-with-your-group", "fdaray-replace-with-account",
                            "ami-fdaray-replace-with-pinned-image"}
    subs = dict(re.findall(r'-e "s/([a-z-]*fdaray-replace-[a-z-]+)/\$([A-Z]+)/"', readme))
    assert set(subs) == placeholders  # README's sed line replaces each of them
    assert "aws ssm get-parameter" in readme and "cluster-iam/head-policy.json" in readme
    fake = {"SG": "sg-0123456789abcdef0", "ACCOUNT": "123456789012", "AMI": "ami-0123456789abcdef0"}
    for placeholder, var in subs.items():
        text = text.replace(placeholder, fake[var])
    assert "fdaray-replace" not in "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    filled = yaml.safe_load(text)
    validate_config(prepare_config(copy.deepcopy(filled)))
    head = filled["available_node_types"][filled["head_node_type"]]["node_config"]
    assert head["ImageId"] == fake["AMI"] and fake["ACCOUNT"] in head["IamInstanceProfile"]["Arn"]


def test_on_premise_variant_binds_ray_to_the_private_network_and_firewalls_it():
    config = _local()
    ips = [config["provider"]["head_ip"], *config["provider"]["worker_ips"]]
    head_start = " ".join(config["head_start_ray_commands"])
    assert f"--node-ip-address={config['provider']['head_ip']}" in head_start
    assert "--dashboard-host=127.0.0.1" in head_start
    assert all("--node-ip-address=" in c for c in config["worker_start_ray_commands"] if "ray start" in c)
    setup = " ".join(config["setup_commands"])
    # deny by default, SSH open, every other port only from the cluster's own hosts, then enabled
    assert "ufw default deny incoming" in setup and "ufw allow 22/tcp" in setup and "ufw --force enable" in setup
    allowed = re.search(r"for ip in ([0-9. ]+); do sudo ufw allow from \$ip", setup)
    assert allowed and sorted(allowed.group(1).split()) == sorted(ips)
    assert setup.index("ufw --force enable") > setup.index("ufw allow 22/tcp")  # never locks out SSH


def test_the_local_variant_turns_token_authentication_on_everywhere_with_one_token():
    """Ray 2.60 turns token authentication on for `ray start --head` only where a token file exists, and never for
    a joining node (a head with one refused the workers): every start command of the local variant sets it with the
    token in the synced repository, the sweep's shell too, and git keeps that file out of the repository."""
    config = _local()
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    token = "RAY_AUTH_MODE=token RAY_AUTH_TOKEN=$(cat ~/fda-ray/.ray-token)"
    assert all(token in c for c in starts if "ray start" in c) and sum("ray start" in c for c in starts) == 2
    setup = " ".join(config["setup_commands"])
    assert "test -s ~/fda-ray/.ray-token" in setup and f"echo 'export {token}' >> ~/.bashrc" in setup
    assert ".ray-token" not in config["rsync_exclude"] and "rsync_filter" not in config
    ignored = subprocess.run(["git", "check-ignore", "-q", ".ray-token"], cwd=CLUSTER.parent).returncode
    assert ignored == 0
