"""Pre-flight checks (fda_ray.preflight) as pure functions: outputs, the Ray address, resource requests
against node shapes (an autoscaler's node types included), the options a run ignores, and the warnings a
run gives (a target smaller than its batch trains one partial batch)."""
from __future__ import annotations

import pickle
import re
import warnings

import pytest
import torch

from fda_ray.runtime import preflight
from fda_ray.core.config import RunConfig
from fda_ray.algorithms import ClientTask
from fda_ray.train.client import run_task
from fda_ray.runtime.engine import RunFailed, RunInterrupted, build_experiment, run_rounds, SerialExecutor
from fda_ray.core.history import History
from fda_ray.runtime.preflight import PreflightError


def test_output_file(tmp_path):
    assert preflight.output_file("parquet", tmp_path / "new" / "deeper" / "r.parquet").name == "r.parquet"
    assert list(tmp_path.iterdir()) == []  # the probe leaves nothing behind, creates no directory
    (tmp_path / "f").write_text("x")
    for bad, why in ((tmp_path, "it is a directory"), (tmp_path / "f" / "r.parquet", "is a file, not a directory"),
                     ("/proc/fda-ray.parquet", "cannot write in /proc")):
        with pytest.raises(PreflightError, match=f"^parquet=.* is invalid: .*{why}"):
            preflight.output_file("parquet", bad)


def test_output_dir(tmp_path):
    assert preflight.output_dir("out", tmp_path / "a" / "b") == tmp_path / "a" / "b"
    (tmp_path / "f").write_text("x")
    for bad, why in ((tmp_path / "f", "it is a file"), (tmp_path / "f" / "sub", "is a file, not a directory"),
                     ("/proc/fda-ray-out", "cannot write in /proc")):
        with pytest.raises(PreflightError, match=f"^out=.* is invalid: .*{why}"):
            preflight.output_dir("out", bad)


def test_ray_address():
    for fine in (None, "", "auto", "local"):
        preflight.ray_address(fine)
    for bad, why in (("127.0.0.1:1", "no Ray cluster answers at 127.0.0.1:1 within 2 s"),
                     ("ray://127.0.0.1:1", "no Ray cluster answers at 127.0.0.1:1"),
                     ("localhost:port", "host:port"),
                     ("bogus", "host:port, ray://host:port or auto")):  # (not Ray's "Invalid address format")
        with pytest.raises(PreflightError, match=f"^ray_address='{bad}' is invalid: {why}"):
            preflight.ray_address(bad, timeout=2)


@pytest.mark.parametrize("refuse,token,why", [
    (True, False, "the cluster there requires Ray's token authentication and this shell has no token: export "
                  "RAY_AUTH_MODE=token RAY_AUTH_TOKEN="),
    (True, True, "the cluster there refuses this shell's token"),
    (False, False, None),
], ids=["no token", "another token", "no authentication"])
def test_a_cluster_with_token_authentication_that_refuses_this_shell_is_one_line(refuse, token, why, monkeypatch):
    """A GCS (Ray's cluster head) with token authentication on: ray.init printed a C++ log line a second for about
    20 s, then "Failed to connect to Ray cluster", no word of the token. One gRPC call (GetClusterId, ray.init's
    first) finds it at once. Here a GCS of our own answers it: UNAUTHENTICATED, or the cluster's id."""
    from concurrent import futures

    import grpc
    from ray._private.authentication import grpc_authentication_client_interceptor as interceptor
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    seen = []

    class GCS(gcs_service_pb2_grpc.NodeInfoGcsServiceServicer):
        def GetClusterId(self, request, context):
            seen.append(dict(context.invocation_metadata()).get("authorization"))
            if refuse:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "InvalidAuthToken: Authentication token is missing "
                                                                "or incorrect")
            return gcs_service_pb2.GetClusterIdReply()

    sent = (("authorization", "Bearer " + "b" * 64),) if token else ()
    monkeypatch.setattr(interceptor, "_get_authentication_metadata_tuple", lambda: sent)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    gcs_service_pb2_grpc.add_NodeInfoGcsServiceServicer_to_server(GCS(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        if why is None:
            preflight.ray_address(f"127.0.0.1:{port}", timeout=5)
        else:
            with pytest.raises(PreflightError, match=f"^ray_address='127.0.0.1:{port}' is invalid: {re.escape(why)}"):
                preflight.ray_address(f"127.0.0.1:{port}", timeout=5)
    finally:
        server.stop(None)
    assert seen == ["Bearer " + "b" * 64 if token else None]  # the shell's own token, as ray.init sends it


def test_a_runs_check_of_its_cluster_address_names_the_field(monkeypatch):
    """preflight.run's check of a run's --ray-address (or $RAY_ADDRESS) on a host:port: one line naming what the user
    set (it passed the field's name as the timeout: every explicit host:port was a TypeError traceback), and a
    listening address passes."""
    import socket

    monkeypatch.setattr(preflight, "RAY_CONNECT_TIMEOUT_S", 2.0)
    monkeypatch.setattr(preflight.ray_address, "__defaults__", (2.0, "ray_address"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = RunConfig(executor="ray", ray_address="127.0.0.1:1")
    with pytest.raises(PreflightError, match=r"^ray_address='127\.0\.0\.1:1' is invalid: no Ray cluster answers"):
        preflight.run(cfg)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    with pytest.raises(PreflightError, match=r"^\$RAY_ADDRESS='127\.0\.0\.1:1' is invalid: no Ray cluster answers"):
        preflight.run(RunConfig(executor="ray"))
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        preflight.run(RunConfig(executor="ray", ray_address=f"127.0.0.1:{port}"))


def test_device():
    preflight.device("cpu")
    with pytest.raises(PreflightError, match="'cpu', 'cuda' or 'cuda:<index>'"):
        preflight.device("cuda:abc")
    if not torch.cuda.is_available():
        with pytest.raises(PreflightError, match="no CUDA GPU"):
            preflight.device("cuda:0")
    else:
        with pytest.raises(PreflightError, match="GPU"):
            preflight.device(f"cuda:{torch.cuda.device_count()}")


def test_ignored_options():
    assert preflight.ignored_options(RunConfig(method="fedgp")) == []
    assert preflight.ignored_options(RunConfig(method="fedgp_auto").resolved()) == []  # filled-in values are not "set"
    assert preflight.ignored_options(RunConfig(method="source_only", beta=0.3, projection="exact")) == ["beta", "projection"]
    assert preflight.ignored_options(RunConfig(method="fedgp", finetune_epochs=3, auto_lr_factor=0.2, eta=0.3)) == \
        ["auto_lr_factor", "finetune_epochs", "eta"]
    assert preflight.ignored_options(RunConfig(gpus_per_client=0.5, client_retries=1)) == ["gpus_per_client", "client_retries"]
    assert preflight.ignored_options(RunConfig(executor="ray", gpus_per_client=0.5)) == []
    assert preflight.ignored_options(RunConfig(method="fedda", partition="label_shift", eta=0.3)) == []
    line = preflight.ignored_warning([RunConfig(method="source_only", beta=0.3), RunConfig(method="target_only", beta=0.3)])
    assert line and line.startswith("--beta not used by method source_only/target_only")
    # in a sweep, an option one trial uses is not reported
    assert preflight.ignored_warning([RunConfig(method="source_only", beta=0.3), RunConfig(method="fedgp", beta=0.3)]) is None


def test_a_target_smaller_than_its_batch_trains_one_partial_batch_and_says_so(tiny):
    cfg = tiny(method="target_only", target_labelled=10, batch_target=16, rounds=1)
    with pytest.warns(preflight.RunWarning, match="the target holds 10 training samples, fewer than batch_target=16: "
                                                  "it trains one step of 10 samples per epoch"):
        exp = build_experiment(cfg)
    task = ClientTask(exp.target_index, "epoch", 0, {"lr": 0.005, "batch": 16})
    result = run_task(exp.clients[exp.target_index], task, {"global": exp.initial_weights()})
    assert result.scalars["num_steps"] == 1 and result.tensors["delta"].abs().sum() > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", preflight.RunWarning)  # a target of 32 at batch 16: nothing to say
        build_experiment(tiny(method="target_only", target_labelled=32, batch_target=16))


def test_run_failed_survives_pickling():
    """A process pool and Ray send a failed trial's exception back: it must unpickle (it has two arguments)."""
    hist = History(config={"method": "fedgp"})
    hist.rows.append({"round": 0, "accuracy": 0.5})
    for cls in (RunFailed, RunInterrupted):
        e = pickle.loads(pickle.dumps(cls("run stopped in round 1: x", hist)))
        assert type(e) is cls and str(e) == "run stopped in round 1: x" and e.history.rows == hist.rows


def test_ctrl_c_in_the_round_loop_keeps_the_finished_rounds(tiny):
    exp = build_experiment(tiny(method="fedgp", rounds=3))
    calls = []

    def progress(row: dict) -> None:
        calls.append(row["round"])
        if len(calls) == 2:
            raise KeyboardInterrupt

    with pytest.raises(RunInterrupted, match=r"stopped by Ctrl-C \(SIGINT\) after 2 finished rounds") as info:
        run_rounds(exp, SerialExecutor(exp.clients), progress)
    assert [r["round"] for r in info.value.history.rows] == [0, 1]


def test_unknown_node_types_make_a_request_no_node_holds_a_warning_not_a_refusal():
    """KubeRay: the sweep joins a cluster whose autoscaler's node types it cannot read (no `ray up` file on the
    head); a GPU group at zero replicas may still serve the request, so it is a warning, not a refusal. Elsewhere a
    joined cluster's current nodes are all there is: a refusal (tests/test_multinode.py)."""
    from fda_ray.runtime import resources

    cpu_only = resources.Cluster(({"CPU": 4.0},), known=False)
    cfg = RunConfig(executor="ray", gpus_per_client=0.1, clients_per_actor=1, num_sources=3).resolved()
    with pytest.warns(preflight.RunWarning, match=r"gpus_per_client=0.1, clients_per_actor=1: a run asks 4 x "
                                                  r"\{CPU: 1, GPU: 0.1\} and no node of this cluster holds it now"):
        line = resources.check(resources.plan(cfg, cpu_only), cpu_only, what="a run")
    assert "node types are unknown here" in line
    assert resources.check(resources.plan(cfg.replace(gpus_per_client=0.0), cpu_only), cpu_only) is None
    # known: a Ray this process started, a joined cluster whose `ray up` file lists its node types, or a joined
    # cluster's current nodes; not on KubeRay, whose autoscaler may add a group no file here describes
    assert resources.nodes_known(joined=False, types=(), kuberay=True)
    assert resources.nodes_known(joined=True, types=(), kuberay=False)
    assert not resources.nodes_known(joined=True, types=(), kuberay=True)
    assert resources.nodes_known(joined=True, types=({"CPU": 48.0, "GPU": 4.0},), kuberay=True)


def test_a_gpu_node_with_too_few_cpus_is_named_with_the_cpu_fix():
    """A trial whose actors each need a GPU and a CPU, on a cluster whose GPU node has 1 CPU (and a CPU node has
    many): giving GPUs freely lets it fit on the CPU node, so the refusal said "lower --gpus-per-client"; what stops
    it is the GPU node's CPUs."""
    from fda_ray.runtime import resources
    from fda_ray.runtime.preflight import PreflightError

    cluster = resources.Cluster(({"CPU": 1.0, "GPU": 1.0}, {"CPU": 16.0}), source="the Ray cluster")
    cfg = RunConfig(executor="ray", gpus_per_client=0.25, clients_per_actor=1, num_sources=3).resolved()
    p = resources.plan(cfg, cluster)
    with pytest.raises(PreflightError, match=r"the nodes with a GPU have too few CPUs for it \(largest \{CPU: 1, "
                                             r"GPU: 1\}\); lower --cpus-per-client"):
        resources.check(p, cluster)
    # no GPU node at all: still said as that
    with pytest.raises(PreflightError, match="no node has a GPU"):
        resources.check(p, resources.Cluster(({"CPU": 16.0},)))


def test_an_object_store_out_that_cannot_be_written_is_one_line(s3_bucket):
    where = preflight.output_dir("out", s3_bucket + "/sweeps/x")  # writable: a probe object written and deleted
    assert str(where) == s3_bucket + "/sweeps/x"
    assert not any(".fda-ray-probe" in p.name for p in where.iterdir())  # the probe object is gone
    import boto3  # ... and left no directory marker (`sweeps/x/`, pyarrow's delete of a prefix's last object)

    bucket = s3_bucket[len("s3://"):]
    assert boto3.client("s3").list_objects_v2(Bucket=bucket).get("Contents", []) == []
    with pytest.raises(PreflightError, match=r"^out='s3://no-such-bucket-fda/x' is invalid: cannot write there \("):
        preflight.output_dir("out", "s3://no-such-bucket-fda/x")


def test_a_joined_cluster_s_workers_get_the_commands_quiet_console_and_node_wait(monkeypatch):
    """ensure_ray joining a cluster hands its workers the command's settings through Ray's runtime_env: `ray start`
    nodes' workers do not inherit the sweep's environment (a quiet sweep printed torch's and the actors' notices)."""
    import ray

    from fda_ray.core.quiet import QUIET_ENV
    from fda_ray.runtime import driver
    from fda_ray.runtime.resources import WAIT_ENV

    seen = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(kw))
    monkeypatch.setattr(preflight, "ray_address", lambda *a, **kw: None)
    monkeypatch.setenv(QUIET_ENV, "1")
    monkeypatch.setenv(WAIT_ENV, "20")
    driver.ensure_ray("127.0.0.1:6431")
    assert seen["address"] == "127.0.0.1:6431"
    env = seen["runtime_env"]["env_vars"]
    assert env[QUIET_ENV] == "1" and env[WAIT_ENV] == "20"


def test_a_missing_dataset_is_said_before_missing_weights_in_one_line(tmp_path, monkeypatch):
    """Both missing: the dataset's line (the paths searched, how to get it), the weights' after it; one try tells
    the user both."""
    from fda_ray.data.base import DatasetNotFound

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))  # no cached ImageNet weights
    cfg = RunConfig(dataset="vlcs", data_dir=str(tmp_path / "data"), executor="serial").resolved()
    with pytest.raises(DatasetNotFound) as e:
        preflight.run(cfg)
    line = str(e.value)
    assert line.startswith("VLCS (vlcs) not found") and "searched: " in line and "\n" not in line
    assert "; and model_weights='imagenet' is invalid: torchvision's cache file" in line
    import fda_ray.data

    monkeypatch.setattr(fda_ray.data, "load", lambda *a, **k: None)  # the dataset there: the weights' own line
    with pytest.raises(PreflightError, match=r"^model_weights='imagenet' is invalid"):
        preflight.run(cfg)


def test_other_nodes_that_cannot_use_out_get_the_advice_for_its_kind():
    """A local --out other nodes cannot see: put it on shared storage; an s3:// --out they cannot use: their
    credentials or endpoint (it told them to use an object store, which --out already was)."""
    from fda_ray.core.storage import storage_path

    assert preflight._shared_storage_fix(storage_path("/tmp/x")).startswith("put --out on a filesystem every node")
    assert preflight._shared_storage_fix(storage_path("s3://bucket/sweeps/x")).startswith(
        "give every node the store's credentials and endpoint")
