"""The deployment templates under deploy/ keep their promises, checked without SLURM, Kubernetes or Docker:

- deploy/slurm/fda-ray.sbatch is run for real, with stand-ins for srun, scontrol and python on PATH that record
  their command lines: the Ray head and one worker per other node started through srun with SLURM's CPUs and a
  node-local temporary directory, the sweep called with --address, --out, --resume auto and the job's arguments,
  python3 found first, and the sweep's exit code as the job's;
- deploy/kuberay/rayjob.yaml is a RayJob for the installed Ray, a GPU-less head, a GPU group that scales from 0,
  and a sweep writing to S3;
- deploy/docker/Dockerfile installs what cluster.yaml's nodes install, at the same versions;
- .dockerignore leaves the history and the committed records out of the image, and nothing the image needs."""
from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "deploy" / "slurm" / "fda-ray.sbatch"
RAYJOB = ROOT / "deploy" / "kuberay" / "rayjob.yaml"
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
CLUSTER = ROOT / "cluster.yaml"
PIN = re.compile(r'"([A-Za-z0-9_.\-]+(?:\[[a-z,]+\])?)==([0-9][0-9A-Za-z.+]*)"')


def _pins(text: str) -> dict[str, str]:
    return dict(PIN.findall(text))


# ---------------------------------------------------------------- SLURM

def _directives() -> list[tuple[int, str]]:
    return [(i, ln[len("#SBATCH"):].strip()) for i, ln in enumerate(SBATCH.read_text().splitlines())
            if ln.startswith("#SBATCH")]


def test_sbatch_script_is_valid_bash_and_its_directives_come_first():
    subprocess.run(["bash", "-n", str(SBATCH)], check=True)
    lines = SBATCH.read_text().splitlines()
    assert lines[0].startswith("#!") and "bash" in lines[0]
    directives = _directives()
    opts = {d.split("=")[0] for _, d in directives}
    assert {"--requeue", "--nodes", "--time", "--gpus-per-node"} <= opts
    assert "--cpus-per-task" in opts or "--exclusive" in opts
    # sbatch reads directives only up to the first command: every one must stand before it
    first_command = next(i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#"))
    assert all(i < first_command for i, _ in directives)
    assert lines[first_command].strip() == "set -euo pipefail"


_STUB = '''#!{python}
import json, os, sys, time
name = os.path.basename(sys.argv[0])
args = sys.argv[1:]
with open(os.path.join(os.environ["STUB_LOG"], name + ".jsonl"), "a") as f:
    f.write(json.dumps({{"argv": args, "auth_mode": os.environ.get("RAY_AUTH_MODE"),
                        "token": os.environ.get("RAY_AUTH_TOKEN")}}) + "\\n")
if name == "scontrol":
    assert args[:2] == ["show", "hostnames"], args
    print("\\n".join(os.environ["FAKE_NODES"].split()))
elif name == "srun":
    if "hostname" in args:
        print("127.0.1.1 10.0.0.1 fe80::1")
    elif any(os.path.basename(a) == "ray" for a in args):  # (PATH's ray, or the one beside $PYTHON)
        if os.environ.get("FAKE_RAY_FAILS"):
            sys.exit(1)
        time.sleep(60)  # `ray start --block` runs until the job stops it
elif name in ("python", "python3"):
    if args[0] == "-c" and "secrets" in args[1]:
        print("ab" * 32)
    elif args[0] == "-c" and "ray.nodes()" in args[1]:
        # a node is alive once its `ray start` has been called, and at most FAKE_ALIVE are
        started = os.path.join(os.environ["STUB_LOG"], "srun.jsonl")
        with open(started) as f:
            n = sum(1 for ln in f if '"start"' in ln and ('"ray"' in ln or '/ray"' in ln))
        print(min(n, int(os.environ["FAKE_ALIVE"])))
    elif args[0] == "-c" and "pyarrow" in args[1]:
        sys.exit(int(os.environ["FAKE_RECORDS"]))
    elif args[:2] == ["-m", "fda_ray.sweep"]:
        sys.exit(int(os.environ.get("FAKE_SWEEP_RC", "0")))
    else:
        sys.exit("unexpected python call: " + repr(args))
'''


@pytest.fixture
def slurm(tmp_path):
    """Runs the sbatch script as SLURM would on the first of three nodes, with recording stand-ins."""
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir()
    log.mkdir()
    for name in ("srun", "scontrol", "python"):
        stub = bin_dir / name
        stub.write_text(_STUB.format(python=sys.executable))
        stub.chmod(stub.stat().st_mode | stat.S_IEXEC)

    def run(*args: str, restarts: int | None = 0, out: str | None = None, **env: str):
        base = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "STUB_LOG": str(log),
                "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "n[1-3]", "SLURM_CPUS_PER_TASK": "16",
                "FAKE_NODES": "n1 n2 n3", "FAKE_ALIVE": "3", "FAKE_RECORDS": "1", "RAY_POLL_S": "0.1",
                "OUT": out or str(tmp_path / "out"), "PYTHON": str(bin_dir / "python")}
        if restarts is not None:
            base["SLURM_RESTART_COUNT"] = str(restarts)
        for f in log.iterdir():
            f.unlink()
        p = subprocess.run(["bash", str(SBATCH), *args], env={**base, **env}, capture_output=True, text=True,
                           timeout=60, cwd=tmp_path)

        def calls(name: str) -> list[dict]:
            f = log / f"{name}.jsonl"
            return [json.loads(ln) for ln in f.read_text().splitlines()] if f.exists() else []

        return p, calls

    return run


def _ray_starts(calls) -> tuple[dict, list[dict]]:
    starts = [c for c in calls("srun") if any(Path(a).name == "ray" for a in c["argv"])]
    heads = [c for c in starts if "--head" in c["argv"]]
    assert len(heads) == 1, starts
    return heads[0], [c for c in starts if "--head" not in c["argv"]]


def _node(argv: list[str]) -> str:
    return argv[argv.index("-w") + 1]


def test_sbatch_starts_the_head_and_a_worker_per_node_then_the_sweep(slurm, tmp_path):
    p, calls = slurm("--grid", "noise", "--profile", "paper", "--gpus-per-client", "0.1")
    assert p.returncode == 0, p.stderr
    head, workers = _ray_starts(calls)
    # the head on the first node, a worker on each other one, each a blocking `ray start` under srun
    assert _node(head["argv"]) == "n1" and sorted(_node(w["argv"]) for w in workers) == ["n2", "n3"]
    for call in (head, *workers):
        argv = call["argv"]
        ray = argv[argv.index("ray"):]
        assert ray[:2] == ["ray", "start"] and "--block" in ray
        assert "--num-cpus=16" in ray and "--cpus-per-task=16" in argv  # SLURM_CPUS_PER_TASK
        assert "--temp-dir=/tmp/ray-4242" in ray  # node-local, short, one per job
        # token authentication, with the same token on every node
        assert call["auth_mode"] == "token" and call["token"] == "ab" * 32
    assert "--node-ip-address=10.0.0.1" in head["argv"] and "--port=6379" in head["argv"]
    assert "--dashboard-host=127.0.0.1" in head["argv"]  # the dashboard on the head's loopback only
    assert all("--address=10.0.0.1:6379" in w["argv"] for w in workers)
    sweeps = [c for c in calls("python") if c["argv"][:2] == ["-m", "fda_ray.sweep"]]
    assert len(sweeps) == 1
    assert sweeps[0]["argv"] == ["-m", "fda_ray.sweep", "--address", "10.0.0.1:6379", "--out", str(tmp_path / "out"),
                                 "--resume", "auto", "--grid", "noise", "--profile", "paper", "--gpus-per-client", "0.1"]
    assert sweeps[0]["token"] == "ab" * 32


@pytest.mark.parametrize("restarts", [0, 1, None], ids=["first-run", "requeued", "no-restart-count"])
def test_sbatch_leaves_resuming_to_the_sweep(slurm, tmp_path, restarts):
    """A first run, a requeued job and a resubmitted one run the same command: `--resume auto` continues the sweep
    where OUT holds its records and starts it where OUT holds none (tests/test_sweep.py), a path or a URI alike."""
    for out in (None, "s3://bucket/sweeps/noise"):
        p, calls = slurm("--grid", "noise", restarts=restarts, out=out)
        assert p.returncode == 0, p.stderr
        sweep = [c["argv"] for c in calls("python") if c["argv"][:2] == ["-m", "fda_ray.sweep"]]
        assert len(sweep) == 1 and sweep[0][sweep[0].index("--resume") + 1] == "auto"
        assert sweep[0][sweep[0].index("--out") + 1] == (out or str(tmp_path / "out"))


def test_sbatch_runs_python3_first_and_says_when_there_is_none(slurm, tmp_path):
    bin_dir = tmp_path / "bin"
    (bin_dir / "python3").write_text((bin_dir / "python").read_text())
    (bin_dir / "python3").chmod(0o755)
    p, calls = slurm("--grid", "noise", PYTHON="")
    assert p.returncode == 0, p.stderr
    assert calls("python3") and not calls("python")  # python3 first
    (bin_dir / "python3").unlink()
    (bin_dir / "python").unlink()
    only_bash = tmp_path / "only-bash"  # a PATH with bash and the stand-ins, and no Python
    only_bash.mkdir()
    (only_bash / "bash").symlink_to(shutil.which("bash"))
    p, calls = slurm("--grid", "noise", PYTHON="", PATH=f"{bin_dir}:{only_bash}")
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        "error: PYTHON= is invalid: no python3 or python on PATH; activate fda-ray's environment (or name it in VENV) "
        "or set PYTHON"]
    assert not calls("srun")  # nothing started


def test_sbatch_exits_with_the_sweeps_exit_code(slurm):
    p, calls = slurm("--grid", "noise", FAKE_SWEEP_RC="3")
    assert p.returncode == 3 and "sweep exit code: 3" in p.stdout


def test_sbatch_keeps_rays_temporary_directory_short(slurm):
    p, calls = slurm("--grid", "noise", TMPDIR="/scratch")
    head, _ = _ray_starts(calls)
    assert p.returncode == 0 and "--temp-dir=/scratch/ray-4242" in head["argv"]
    # a long TMPDIR would make Ray's unix socket paths longer than the 107 bytes allowed
    p, calls = slurm("--grid", "noise", TMPDIR="/local/scratch/a-very-long-site-specific/job-directory")
    head, workers = _ray_starts(calls)
    assert p.returncode == 0 and all("--temp-dir=/tmp/ray-4242" in c["argv"] for c in (head, *workers))


def test_sbatch_gives_up_when_the_nodes_do_not_join(slurm):
    # two of three nodes ever come up: after RAY_WAIT_S the job fails, before the sweep starts
    p, calls = slurm("--grid", "noise", FAKE_ALIVE="2", RAY_WAIT_S="2")
    assert p.returncode != 0 and "2 of 3 Ray nodes joined" in p.stderr
    assert not [c for c in calls("python") if c["argv"][:2] == ["-m", "fda_ray.sweep"]]
    # a `ray start` that ends at once is reported without waiting out RAY_WAIT_S
    p, calls = slurm("--grid", "noise", FAKE_ALIVE="0", FAKE_RAY_FAILS="1", RAY_WAIT_S="50")
    assert p.returncode != 0 and "ray start step ended" in p.stderr
    assert not [c for c in calls("python") if c["argv"][:2] == ["-m", "fda_ray.sweep"]]


def test_sbatch_refuses_to_run_outside_slurm(slurm):
    p, calls = slurm("--grid", "noise", SLURM_JOB_ID="")
    assert p.returncode != 0 and "sbatch" in p.stderr and not calls("srun")


# ---------------------------------------------------------------- KubeRay

def _rayjob() -> dict:
    return yaml.safe_load(RAYJOB.read_text())


def _gpus(container: dict) -> float:
    res = container.get("resources", {})
    return max(float(res.get(k, {}).get("nvidia.com/gpu", 0)) for k in ("limits", "requests"))


def test_rayjob_is_a_rayjob_for_the_installed_ray():
    import ray

    job = _rayjob()
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    spec = job["spec"]
    assert spec["shutdownAfterJobFinishes"] is True
    cluster = spec["rayClusterSpec"]
    assert cluster["rayVersion"] == ray.__version__ and cluster["enableInTreeAutoscaling"] is True


def test_rayjob_has_a_gpu_less_head_and_a_gpu_group_that_scales_from_zero():
    cluster = _rayjob()["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert head["containers"] and all(_gpus(c) == 0 for c in head["containers"])
    groups = cluster["workerGroupSpecs"]
    assert groups
    for g in groups:
        assert g["minReplicas"] == 0 and g["maxReplicas"] >= 1 and g.get("replicas", 0) == 0
        containers = g["template"]["spec"]["containers"]
        assert float(containers[0]["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    every = head["containers"] + [c for g in groups for c in g["template"]["spec"]["containers"]]
    # Kubernetes pulls a :latest image Always by default, which fails for an image loaded into the node (kind load)
    assert all(c.get("imagePullPolicy") == "IfNotPresent" for c in every)
    images = {c["image"] for c in head["containers"]} | {c["image"] for g in groups for c in g["template"]["spec"]["containers"]}
    assert images == {"fda-ray:latest"}  # the Dockerfile's tag (its build command)
    assert "-t fda-ray:latest" in DOCKERFILE.read_text()
    # records are written from the head (the sweep) and the workers (trials): both get the S3 settings
    for pod in (head, *(g["template"]["spec"] for g in groups)):
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod["containers"]:
            assert any(e.get("secretRef", {}).get("name") == "fda-ray-s3" for e in c.get("envFrom", []))


def test_rayjob_entrypoint_is_a_sweep_writing_to_s3():
    from fda_ray.experiments.arguments import parser

    argv = shlex.split(_rayjob()["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "fda_ray.sweep"]
    a = parser().parse_args(argv[3:])  # the sweep's own parser accepts it
    assert a.out.startswith("s3://") and a.grid == "noise" and float(argv[argv.index("--gpus-per-client") + 1]) > 0
    assert a.address is None  # a Ray job: RAY_ADDRESS is set for it
    assert a.resume == "auto"  # the first submission starts, a resubmission continues


# ---------------------------------------------------------------- Docker

def test_dockerfile_installs_what_the_cluster_nodes_install():
    cluster = yaml.safe_load(CLUSTER.read_text())
    node_pins = _pins("\n".join(cluster["setup_commands"]))
    docker = DOCKERFILE.read_text()
    image_pins = _pins("\n".join(ln for ln in docker.splitlines() if ln.startswith("RUN")))
    assert {"ray[default,tune]", "torch", "torchvision", "numpy", "pyarrow", "matplotlib"} <= set(node_pins)
    assert image_pins == node_pins
    import ray

    assert image_pins["ray[default,tune]"] == ray.__version__ == _rayjob()["spec"]["rayClusterSpec"]["rayVersion"]
    instructions = [ln.split(None, 1) for ln in docker.splitlines() if ln and not ln.startswith(("#", " "))]
    assert instructions[0][0] == "FROM" and "3.11" in instructions[0][1]
    assert ["COPY", ". /opt/fda-ray"] in instructions and any(
        i[0] == "RUN" and re.search(r"pip install -c /opt/fda-ray/constraints.txt (-e )?/opt/fda-ray\b", i[1]) for i in instructions)
    # g++ for the kernels, Fashion-MNIST from Debian's package through the repository's script, wget for
    # KubeRay's probes; and not root at run time
    assert re.search(r"apt-get install[^\n]*\bg\+\+", docker) and re.search(r"apt-get install[^\n]*\bwget", docker)
    assert "bash /tmp/fashion-mnist.sh" in docker and "COPY datasets/fashion-mnist.sh /tmp/fashion-mnist.sh" in docker
    assert "dataset-fashion-mnist" in (ROOT / "datasets" / "fashion-mnist.sh").read_text()
    users = [i[1].strip() for i in instructions if i[0] == "USER"]
    assert users and users[-1] not in ("root", "0")


def _ignored(path: str, patterns: list[str]) -> bool:
    """Roughly Docker's rule: a pattern matches a path from the context root, or one of its parent directories."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    ignored = False
    for pat in patterns:
        negate, pat = pat.startswith("!"), pat.lstrip("!")
        alternatives = [pat, pat[3:]] if pat.startswith("**/") else [pat]
        if any(fnmatch.fnmatchcase(pre, alt) for pre in prefixes for alt in alternatives):
            ignored = not negate
    return ignored


def test_dockerignore_leaves_out_history_and_records_but_not_what_the_image_needs():
    patterns = [ln.strip() for ln in DOCKERIGNORE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    for pat in (".git", "docs/results", "sweeps", "runs"):
        assert pat in patterns
    for path in (".git/HEAD", "docs/results/fmnist-noise/summary.md", "sweeps/noise-quick/summary.md",
                 "fda_ray/__pycache__/x.pyc", "__pycache__/y.pyc", "fda_ray.egg-info/PKG-INFO"):
        assert _ignored(path, patterns), path
    # what the Dockerfile copies and installs stays in the build context
    needed = ["pyproject.toml", "README.md", "datasets/fashion-mnist.sh", "fda_ray/__init__.py",
              "fda_ray/kernels/csrc", "fda_ray/data/__init__.py", "fda_ray/papers"]
    for path in needed:
        assert (ROOT / path).exists(), path
        assert not _ignored(path, patterns), path


# ---------------------------------------------------------------- the docs

def test_deploy_readme_points_to_the_cluster_page_and_the_page_names_every_template():
    readme = (ROOT / "deploy" / "README.md").read_text()
    assert len(readme.splitlines()) <= 45 and "docs/ray-and-clusters.md" in readme
    page = (ROOT / "docs" / "ray-and-clusters.md").read_text()
    for f in ("deploy/slurm/fda-ray.sbatch", "deploy/kuberay/rayjob.yaml", "deploy/docker/Dockerfile",
              "cluster-iam/sweep-s3-policy.json"):
        assert f in page and (ROOT / f).exists(), f
    # the quota codes and the command that reads one
    assert "L-DB2E81BA" in page and "L-3819A6DF" in page
    assert "aws service-quotas get-service-quota --service-code ec2 --quota-code L-DB2E81BA" in page


def test_s3_policy_is_one_bucket_and_attached_to_both_roles():
    policy = json.loads((ROOT / "cluster-iam" / "sweep-s3-policy.json").read_text())
    assert policy["Version"] == "2012-10-17"
    for st in policy["Statement"]:
        actions = [st["Action"]] if isinstance(st["Action"], str) else st["Action"]
        resources = [st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"]
        assert st["Effect"] == "Allow"
        assert all(a.startswith("s3:") and "*" not in a for a in actions), actions
        assert all(r in ("arn:aws:s3:::BUCKET", "arn:aws:s3:::BUCKET/*") for r in resources), resources
    # the docs fill in the bucket and attach the policy to the head's and the workers' roles
    page = (ROOT / "docs" / "ray-and-clusters.md").read_text()
    assert 'sed "s/BUCKET/$BUCKET/g" cluster-iam/sweep-s3-policy.json' in page
    attach = re.search(r"for r in ([a-z -]+); do\s*\n\s*aws iam put-role-policy --role-name \$r[^\n]*fda-ray-s3", page)
    assert attach and set(attach.group(1).split()) == {"fda-ray-head", "fda-ray-worker"}


def test_docs_manual_recipe_parses_as_shell_and_its_sweep_as_a_sweep():
    from fda_ray.experiments.arguments import parser

    # the three commands for machines a lab already has: a head, workers joining it, a sweep with --address
    page = (ROOT / "docs" / "ray-and-clusters.md").read_text()
    block = re.search(r"<!-- recipe: machines you have -->\n```bash\n(.*?)```", page, re.S)
    assert block, "docs/ray-and-clusters.md lost its manual recipe"
    subprocess.run(["bash", "-n"], input=block.group(1), text=True, check=True)
    text = block.group(1)
    assert re.search(r"ray start --head --port=6379", text) and re.search(r"ray start --address=\S+:6379", text)
    sweep = shlex.split(next(ln for ln in text.splitlines() if "fda_ray.sweep" in ln), comments=True)
    a = parser().parse_args(sweep[sweep.index("fda_ray.sweep") + 1:])
    assert a.address and a.address.endswith(":6379") and a.out


def test_sbatch_names_out_after_its_grid_and_runs_the_ray_beside_python(slurm, tmp_path):
    """OUT defaulted to $HOME/sweeps/noise-paper whatever the grid (a label-shift job resumed into a noise folder's
    name); `ray start` came from PATH while Python came from $PYTHON (another Ray, or none)."""
    beside = tmp_path / "bin" / "ray"
    beside.write_text("#!/bin/sh\nexit 0\n")
    beside.chmod(0o755)
    p, calls = slurm("--grid", "label-shift", "--profile", "paper", OUT="")
    assert p.returncode == 0, p.stderr
    sweeps = [c for c in calls("python") if c["argv"][:2] == ["-m", "fda_ray.sweep"]]
    assert sweeps[0]["argv"][4:6] == ["--out", str(tmp_path / "sweeps" / "label-shift-paper")]
    head, workers = _ray_starts(calls)
    assert all(str(beside) in c["argv"] for c in (head, *workers))
    p, calls = slurm("--search=my/searches/beta-wide.yaml", OUT="")
    sweeps = [c for c in calls("python") if c["argv"][:2] == ["-m", "fda_ray.sweep"]]
    assert sweeps[0]["argv"][4:6] == ["--out", str(tmp_path / "sweeps" / "beta-wide-quick")]
