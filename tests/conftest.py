"""Shared test fixtures: one torch thread (CI has 2 cores), tiny generated datasets.

FDA_RAY_TEST_THREADS=k runs the suite's torch work and the tiny runs with k threads instead of 1, and
FDA_RAY_KERNELS=reference forces the PyTorch reference of the kernels: `.ci/run` repeats the order-sensitive
tests that way, so an assertion that only holds for one summation order fails on the developer's machine
(a different SIMD width reorders sums the same way a different thread count does).
"""
from __future__ import annotations

import gzip
import os
import shutil
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

TEST_THREADS = int(os.environ.get("FDA_RAY_TEST_THREADS", "1"))
torch.set_num_threads(TEST_THREADS)
# FedWCA's pre-trained source models are cached on disk (fda_ray.algorithms.fedwca): not in the user's home. Set
# before any Ray worker starts, so the actors see it too.
os.environ["FDA_RAY_CACHE_DIR"] = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fda-ray-test-cache-{os.getpid()}")
# Ray's temporary folder (its sessions, and the address file a `ray start` or a test cluster leaves for ray.init()
# to join) is the suite's own: a dead cluster's address file left in the machine's /tmp/ray by anything else made
# every plain ray.init() here fail to join it, and the suite's clusters leave nothing there. Short: Ray's socket
# paths live under it.
_RAY_TMPDIR = None if "RAY_TMPDIR" in os.environ else tempfile.mkdtemp(prefix="fdaray-", dir="/tmp")
if _RAY_TMPDIR:
    os.environ["RAY_TMPDIR"] = _RAY_TMPDIR


@pytest.fixture(autouse=True, scope="session")
def _ray_tmpdir_removed_at_the_end():
    """The suite's Ray folder goes when the suite ends (its Ray stopped first)."""
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()
    if _RAY_TMPDIR:  # made here, not the user's
        shutil.rmtree(_RAY_TMPDIR, ignore_errors=True)


@pytest.fixture(autouse=True, scope="session")
def _tracking_outside_the_checkout(tmp_path_factory):
    """A sweep into an object store tracks to $FDA_RAY_TRACKING_DIR (default ./tracking): the tests' go to a
    temporary folder, not into the checkout."""
    import os

    os.environ["FDA_RAY_TRACKING_DIR"] = str(tmp_path_factory.mktemp("tracking"))
    yield


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array in IDX format (gzip if the name ends with .gz)."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape)
    data = header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def sigint_as_in_a_terminal() -> None:
    """preexec_fn for a child the test will Ctrl-C: SIGINT back to its default action.

    A shell without job control starts its background commands with SIGINT ignored (POSIX), and an ignored
    signal stays ignored across exec; Python then installs no KeyboardInterrupt handler, so a test run from
    such a background job (`bash .ci/run &` in a script) would Ctrl-C a child that cannot hear it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def make_fmnist_dir(root: Path, n_train: int = 1200, n_test: int = 300, seed: int = 0) -> Path:
    """Four IDX files of a tiny learnable Fashion-MNIST stand-in: class k brightens row band k."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)

    def make(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 10, size=n).astype(np.uint8)
        x = rng.integers(0, 60, size=(n, 28, 28)).astype(np.uint8)
        for i, k in enumerate(y):
            x[i, 2 * k + 4 : 2 * k + 7, :] = 220
        return x, y

    xtr, ytr = make(n_train)
    xte, yte = make(n_test)
    write_idx(root / "train-images-idx3-ubyte.gz", xtr)
    write_idx(root / "train-labels-idx1-ubyte.gz", ytr)
    write_idx(root / "t10k-images-idx3-ubyte.gz", xte)
    write_idx(root / "t10k-labels-idx1-ubyte.gz", yte)
    return root


@pytest.fixture(scope="session")
def fmnist_dir(tmp_path_factory) -> Path:
    return make_fmnist_dir(tmp_path_factory.mktemp("fmnist"))


@pytest.fixture
def tiny(fmnist_dir):
    """A factory of tiny RunConfigs on the generated Fashion-MNIST files."""
    from fda_ray.core.config import RunConfig

    def make(**kw) -> RunConfig:
        base = dict(dataset="fashion-mnist", data_dir=str(fmnist_dir), num_sources=3, rounds=2, warmup_rounds=1,
                    samples_per_client=128, test_samples=100, target_labelled=32, threads=TEST_THREADS)
        base.update(kw)
        return RunConfig(**base)

    return make


@pytest.fixture
def fmnist5(fmnist_dir):
    """A factory of tiny seed-002 RunConfigs: FMNIST-5 built from the generated Fashion-MNIST files (300 images a
    domain), 3 devices x 40 images of each domain, fmnist-m -> rotate-45, 3 labelled target images per class."""
    from fda_ray.core.config import RunConfig

    def make(**kw) -> RunConfig:
        base = dict(dataset="fmnist-5", data_dir=str(fmnist_dir), method="fssda", num_sources=3, rounds=2,
                    samples_per_client=40, test_env=2, source_envs=(1,), batch_source=16, batch_target=16,
                    threads=TEST_THREADS)
        base.update(kw)
        return RunConfig(**base)

    return make


@pytest.fixture
def fedwca5(fmnist_dir):
    """A factory of tiny seed-003 RunConfigs: FMNIST-5 from the generated files (300 images a domain), source
    fmnist-m, 2 clients per other domain (8) of 40 images (25 train, 6 validation, 9 test), the source model trained
    on 80 images for 2 epochs, 2 rounds of 1 epoch."""
    from fda_ray.core.config import RunConfig

    def make(**kw) -> RunConfig:
        params = {"fedwca": {"source_epochs": 2, "local_epochs": 1, **kw.pop("fedwca", {})}}
        base = dict(dataset="fmnist-5", data_dir=str(fmnist_dir), method="fedwca", rounds=2, samples_per_client=40,
                    clients_per_domain=2, source_envs=(1,), batch_source=16, batch_target=16, threads=TEST_THREADS,
                    params=params)
        base.update(kw)
        return RunConfig(**base)

    return make


@pytest.fixture
def conditions(fmnist_dir):
    """A factory of tiny RunConfigs on fmnist-conditions built from the generated Fashion-MNIST files (84 training
    and 42 test images per domain)."""
    from fda_ray.core.config import RunConfig

    def make(**kw) -> RunConfig:
        base = dict(dataset="fmnist-conditions", data_dir=str(fmnist_dir), rounds=2, target_labelled=16,
                    samples_per_client=48, test_samples=40, batch_source=16, batch_target=8, threads=TEST_THREADS)
        base.update(kw)
        return RunConfig(**base)

    return make


def same_state(a, b) -> bool:
    """Exact equality of client states (dicts, lists, tensors: torch.equal), for states from the same code."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b))
    return a == b


def assert_resume_equals_uninterrupted(cfg, after: int = 2) -> None:
    """A run resumed from its checkpoint after `after` rounds (the server state and the clients' states) gives the
    uninterrupted run's rows and final weights exactly: the same code path runs twice."""
    from fda_ray.runtime.engine import SerialExecutor, build_experiment, run, run_rounds

    whole = run(cfg)
    saved = {}
    exp = build_experiment(cfg)
    run_rounds(exp, SerialExecutor(exp.clients), checkpoint=lambda c: saved.setdefault(c["next_round"], c))
    exp2 = build_experiment(cfg)
    resumed = run_rounds(exp2, SerialExecutor(exp2.clients), resume=saved[after])
    assert torch.equal(resumed.final_weights, whole.final_weights)
    assert [r["accuracy"] for r in resumed.rows] == [r["accuracy"] for r in whole.rows]


@pytest.fixture
def no_ray():
    """A test that starts its own local Ray (ray.init with its own settings) and shuts it down after."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    yield
    if ray.is_initialized():
        ray.shutdown()



def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def s3_bucket(monkeypatch):
    """An S3 bucket on a local S3 server (moto's, in a thread, on loopback): pyarrow, Ray Tune and boto3 reach it
    through $AWS_ENDPOINT_URL, as they would reach MinIO or Ceph. Yields its URI, s3://<bucket>; processes started
    after the fixture (Ray workers) inherit the environment."""
    import boto3
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    import uuid

    bucket = f"fda-sweeps-{uuid.uuid4().hex[:8]}"  # (moto keeps its buckets per process: one of our own)
    boto3.client("s3").create_bucket(Bucket=bucket)
    try:
        yield f"s3://{bucket}"
    finally:
        server.stop()
