"""Bad input, table-driven, across every command line: each case must exit with its code within its time,
print exactly one `error:` line that names the field (or what is wrong), and never a traceback.

Add a case to CASES when a new way to fail is found. `python tests/test_bad_input.py` prints the table
(input, exit code, message, seconds) as it is today.

Placeholders in the arguments: {fm} a tiny Fashion-MNIST directory, {tmp} an empty directory, {file} an
existing file, {labels} / {shape} / {truncated} Fashion-MNIST directories with labels outside 0..9, images of
27 x 27, a truncated image file.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # run as a script too
from conftest import make_fmnist_dir, sigint_as_in_a_terminal, write_idx  # noqa: E402

RUN = ("--data-dir", "{fm}", "--num-sources", "2", "--rounds", "1", "--warmup-rounds", "1",
       "--samples-per-client", "128", "--target-labelled", "32", "--test-samples", "50",
       "--executor", "serial")  # (a run in this process, as the cases expect; the whole-machine default: test_cli)
SWEEP = ("--grid", "noise", "--out", "{tmp}/sweep", "--no-figures")
GRID = ("--sources", "1", "--sizes", "5", "--trials", "1", "--rounds", "3", "--out", "{tmp}/grid")


@dataclass(frozen=True)
class Case:
    module: str
    args: tuple[str, ...]
    code: int
    names: str  # what the error line must contain (the field, or what is wrong)
    seconds: float = 30.0  # the most it may take (a local Ray starts in ~5 s)
    subprocess: bool = False  # run as `python -m module` (Ray; the real entry point)

    @property
    def id(self) -> str:
        shown = self.args
        for base in (RUN, SWEEP, GRID):
            if shown[: len(base)] == base:
                shown = shown[len(base):]
        return f"{self.module.removeprefix('fda_ray.')}:{' '.join(shown)}"


def run_case(c: str, *a: str, code: int = 2, seconds: float = 30.0, sub: bool = False, module: str = "fda_ray") -> Case:
    return Case(module, tuple(a), code, c, seconds, sub)


CASES = [
    # python -m fda_ray: fields
    run_case("method=", *RUN, "--method", "nope"),
    run_case("noise=", *RUN, "--noise", "-1"),
    run_case("noise=", *RUN, "--noise", "nan"),
    run_case("noise=", *RUN, "--noise", "inf"),
    run_case("eta=", *RUN, "--eta", "0.7"),
    run_case("beta=", *RUN, "--beta", "1.5"),
    run_case("rounds=", *RUN, "--rounds", "0"),
    run_case("rounds=", *RUN, "--rounds", "1.5"),
    run_case("seed=", *RUN, "--seed", "-1"),
    run_case("warmup_rounds=", *RUN, "--warmup-rounds", "-1"),
    run_case("num_sources=", *RUN, "--num-sources", "0"),
    # a count past what any data can give: refused before any list of that size is built (it hung, filling memory)
    run_case("num_sources=99999999999999999999999999 is invalid: an integer from 1 to", *RUN, "--num-sources",
             "99999999999999999999999999"),
    run_case("num_sources=100000 is invalid: at most", *RUN, "--num-sources", "100000"),
    run_case("noise='-inf' is invalid: a finite number", *RUN, "--noise", "-inf"),  # (not "expected one argument")
    run_case("lr_source=", *RUN, "--lr-source", "0"),
    run_case("lr_target=", *RUN, "--lr-target", "-0.1"),
    run_case("lr_target=", *RUN, "--lr-target", "nan"),
    run_case("auto_lr_factor=", *RUN, "--auto-lr-factor", "0"),
    run_case("batch_source=", *RUN, "--batch-source", "0"),
    run_case("batch_target=", *RUN, "--batch-target", "0"),
    run_case("target_labelled=", *RUN, "--target-labelled", "0"),
    run_case("target_fraction=", *RUN, "--target-fraction", "1.5"),
    run_case("target_labelled=", *RUN, "--target-labelled", "10", "--target-fraction", "0.1"),
    run_case("projection=", *RUN, "--projection", "nope"),
    run_case("partition=", *RUN, "--partition", "nope"),
    run_case("model=", *RUN, "--model", "nope"),
    run_case("dataset=", *RUN, "--dataset", "nope"),
    run_case("auto_beta_rule=", *RUN, "--auto-beta-rule", "nope"),
    run_case("baseline_protocol=", *RUN, "--baseline-protocol", "nope"),
    run_case("threads=", *RUN, "--threads", "0"),
    run_case("eval_noise=", *RUN, "--eval-noise", "0.1", "-0.1"),
    run_case("finetune_epochs=", *RUN, "--finetune-epochs", "-1"),
    run_case("samples_per_client=", *RUN, "--samples-per-client", "0"),
    run_case("unrecognized arguments", *RUN, "--no-such-flag"),
    # ... the device and the execution fields
    run_case("device=", *RUN, "--device", "gpu"),
    run_case("device=", *RUN, "--device", "cuda:abc"),
    run_case("device=", *RUN, "--device", "cuda"),  # no GPU here
    run_case("executor=", *RUN, "--executor", "nope"),
    run_case("cpus_per_client=", *RUN, "--cpus-per-client", "-1"),
    run_case("cpus_per_client=", *RUN, "--cpus-per-client", "nan"),
    run_case("gpus_per_client=", *RUN, "--gpus-per-client", "-1"),
    run_case("gpus_per_client=", *RUN, "--gpus-per-client", "1.5"),
    # below Ray's granularity (0.0001): a share Ray rounds to 0, and an infinite count of clients per CPU
    run_case("cpus_per_client=1e-320 is invalid: a number of CPUs from 0.0001 to 1024", *RUN, "--cpus-per-client", "1e-320"),
    run_case("cpus_per_client=4096.0 is invalid: a number of CPUs from 0.0001 to 1024", *RUN, "--cpus-per-client",
             "4096"),
    run_case("gpus_per_client=1e-05 is invalid", *RUN, "--gpus-per-client", "1e-5"),
    run_case("clients_per_actor=", *RUN, "--clients-per-actor", "0"),
    run_case("client_retries=", *RUN, "--client-retries", "-1"),
    # ... the model against the data, the weights file
    run_case("model='mlp_sigmoid'", *RUN, "--model", "mlp_sigmoid"),
    run_case("model_weights=", *RUN, "--model", "resnet18", "--model-weights", "{tmp}/missing.pt"),
    run_case("model_weights=", *RUN, "--model-weights", "{file}"),
    # ... outputs, checked before any work
    run_case("parquet=", *RUN, "--parquet", "{tmp}"),
    run_case("parquet=", *RUN, "--parquet", "{file}/x.parquet"),
    run_case("parquet=", *RUN, "--parquet", "/proc/fda-ray.parquet"),
    # ... data: the named directory or nothing, and what is in it
    run_case("data_dir=", *RUN, "--data-dir", "{tmp}/missing"),
    run_case("data_dir=", *RUN, "--data-dir", "{file}"),
    run_case("label values", *RUN, "--data-dir", "{labels}"),
    run_case("28 x 28", *RUN, "--data-dir", "{shape}"),
    run_case("train-images-idx3-ubyte", *RUN, "--data-dir", "{truncated}"),
    # ... clients that cannot train
    run_case("target_labelled=", *RUN, "--target-labelled", "999999"),
    run_case("batch_source=", *RUN, "--batch-source", "100000"),
    run_case("batch_target=", *RUN, "--method", "fedgp_auto", "--target-labelled", "4", "--batch-target", "4"),
    run_case("num_sources=", "--dataset", "synthetic", "--num-sources", "9", "--rounds", "1", "--executor", "serial"),
    # ... FedWCA's source-free setting (FMNIST-5 built from the generated files)
    *[run_case(c, "--dataset", "fmnist-5", "--data-dir", "{fm}", "--method", "fedwca", "--rounds", "1", "--executor",
               "serial", *a) for c, a in [
        ("fedwca.temp_a=", ("--fedwca-temp-a", "0")),
        ("source_envs=[1, 2] is invalid: one source domain", ("--source-envs", "1", "2")),
        ("clients_per_domain=", ("--clients-per-domain", "0")),
        ("samples_per_client=6", ("--samples-per-client", "6")),
        ("model='simple_cnn'", ("--model", "simple_cnn")),
        ("fedwca.revision_interval=", ("--fedwca-revision-interval", "5", "--fedwca-weighting", "local")),
        ("fedwca.weighting=", ("--fedwca-weighting", "nope"))]],
    run_case("partition='domain_clients' is invalid for dataset 'fashion-mnist'", *RUN, "--method", "fedwca"),
    # ... model selection's held-out shares
    run_case("val_share=", *RUN, "--val-share", "1.5"),
    run_case("source_val_share=", *RUN, "--source-val-share", "0"),
    run_case("val_share=0.999 is invalid: it would hold out all", *RUN, "--val-share", "0.999"),
    run_case("val_share=0.2 is invalid for partition 'domain_clients'", "--dataset", "fmnist-5", "--data-dir", "{fm}",
             "--method", "fedwca", "--rounds", "1", "--val-share", "0.2", "--executor", "serial"),
    # ... a run whose numbers diverge: exit 1, the finished rounds kept
    run_case("run stopped in round", *RUN, "--noise", "1e38", "--rounds", "2", code=1, seconds=60),
    # ... Ray: a request no node can hold, a cluster nobody answers at (the real entry point)
    run_case("cpus_per_client=", *RUN, "--executor", "ray", "--cpus-per-client", "100", sub=True, seconds=60),
    run_case("gpus_per_client=", *RUN, "--executor", "ray", "--gpus-per-client", "0.1", sub=True, seconds=60),
    run_case("ray_address=", *RUN, "--executor", "ray", "--ray-address", "127.0.0.1:1", sub=True),
    run_case("ray_address=", *RUN, "--executor", "ray", "--ray-address", "localhost:port", sub=True),
    run_case("ray_address='bogus' is invalid: host:port", *RUN, "--executor", "ray", "--ray-address", "bogus", sub=True),
    # python -m fda_ray.sweep
    *[Case("fda_ray.sweep", a, 2, c) for a, c in [
        (("--grid", "nope", "--out", "{tmp}/s"), "grid="),
        ((*SWEEP, "--profile", "nope"), "profile="),
        ((*SWEEP, "--profile", "code"), "profile='code' is invalid for grid 'noise': one of "),  # conditions' only
        ((*SWEEP, "--backend", "nope"), "backend="),
        ((*SWEEP, "--seeds", "0"), "seeds="),
        ((*SWEEP, "--workers", "0"), "workers="),
        ((*SWEEP, "--max-failures", "-1"), "max_failures="),
        ((*SWEEP, "--values", "abc"), "values="),
        ((*SWEEP, "--values", "0.33"), "values="),
        ((*SWEEP, "--methods", "nope"), "methods="),
        (("--grid", "noise", "--out", "{file}"), "out="),
        (("--grid", "noise", "--out", "/proc/fda-ray-sweep"), "out="),
        ((*SWEEP, "--gpus-per-client", "-1"), "gpus_per_client="),
        ((*SWEEP, "--gpus-per-client", "nan"), "gpus_per_client="),
        ((*SWEEP, "--rounds", "0"), "rounds="),
        ((*SWEEP, "--resume"), "resume="),
        ((*SWEEP, "--backend", "local", "--executor", "ray"), "executor="),
        ((*SWEEP, "--data-dir", "{tmp}/missing"), "data_dir="),
        ((*SWEEP, "--backend", "local", "--device", "cuda"), "device="),
        (("--search", "nope", "--out", "{tmp}/s"), "search="),
        (("--search", "beta", "--out", "{tmp}/s", "--search-alg", "grid"), "search_alg="),
        (("--search", "beta", "--out", "{tmp}/s", "--values", "0.4"), "values="),
        (("--search", "beta", "--out", "{tmp}/s", "--resume"), "resume="),
        (("--search", "beta", "--out", "{tmp}/s", "--data-dir", "{tmp}/missing"), "data_dir="),
        # a count that would plan for ever: capped as --seeds is
        (("--search", "beta", "--out", "{tmp}/s", "--num-samples", "99999999999999999999"),
         "num_samples=99999999999999999999 is invalid: an integer from 1 to"),
        (("--search", "beta", "--out", "{tmp}/s", "--rerun-seeds", "99999999999999999999"), "rerun_seeds="),
    ]],
    Case("fda_ray.sweep", (*SWEEP, "--address", "127.0.0.1:1"), 2, "error: address='127.0.0.1:1'", 30, True),
    Case("fda_ray.sweep", (*SWEEP, "--data-dir", "{fm}", "--gpus-per-client", "0.1"), 2, "gpus_per_client=", 60, True),
    # python -m fda_ray.diagnose
    Case("fda_ray.diagnose", (*RUN, "--at", "nope"), 2, "at="),
    Case("fda_ray.diagnose", (*RUN, "--executor", "ray"), 2, "executor="),
    Case("fda_ray.diagnose", (*RUN, "--method", "nope"), 2, "method="),
    # python -m fda_ray.synthetic_grid
    *[Case("fda_ray.synthetic_grid", (*GRID, *a), 2, c) for a, c in [
        (("--lr", "inf"), "lr="), (("--lr", "-1"), "lr="), (("--sources", "0"), "sources="),
        (("--sources", "1,x"), "sources="), (("--sizes", "1"), "sizes="), (("--trials", "0"), "trials="),
        (("--batch-size", "0"), "batch_size="), (("--sizes", "3"), "sizes="), (("--momentum", "1"), "momentum="),
        (("--draws", "0"), "draws="), (("--beta", "2"), "beta="), (("--out", "{file}"), "out="),
        (("--replot", "--out", "{tmp}"), "replot="),
    ]],
    Case("fda_ray.synthetic_grid", (*GRID, "--lr", "1e30"), 1, "lr="),
    # python -m fda_ray.kernels, python -m benchmarks.engine
    Case("fda_ray.kernels", ("--nope",), 2, "unrecognized arguments"),
    Case("benchmarks.engine", ("--settings", "nope"), 2, "settings="),
    Case("benchmarks.engine", ("--rounds", "1"), 2, "rounds="),
    Case("benchmarks.engine", ("--rounds", "x"), 2, "rounds="),
    Case("benchmarks.engine", ("--device", "cuda:abc"), 2, "device="),
    Case("benchmarks.engine", ("--gpus-per-client", "-1"), 2, "gpus_per_client="),
    Case("benchmarks.cohort", ("--threads", "x"), 2, "threads="),
    Case("benchmarks.cohort", ("--clients", "0"), 2, "clients="),
    Case("benchmarks.cohort", ("--device", "cuda:abc"), 2, "device="),
]


def make_places(root: Path) -> dict[str, str]:
    fm = make_fmnist_dir(root / "fm", n_train=600, n_test=100)
    (root / "a-file").write_text("not a directory")
    bad = {}
    for name in ("labels", "shape", "truncated"):
        d = make_fmnist_dir(root / name, n_train=300, n_test=50)
        bad[name] = str(d)
    write_idx(root / "labels" / "train-labels-idx1-ubyte.gz", np.full(300, 12, dtype=np.uint8))
    write_idx(root / "shape" / "train-images-idx3-ubyte.gz", np.zeros((300, 27, 27), dtype=np.uint8))
    import gzip

    raw = gzip.decompress((root / "truncated" / "train-images-idx3-ubyte.gz").read_bytes())
    (root / "truncated" / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(raw[: len(raw) // 2]))
    return {"fm": str(fm), "file": str(root / "a-file"), **bad}


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, str]:
    return make_places(tmp_path_factory.mktemp("bad"))


NOISE = ("cpp_extension", "UserWarning", "warnings.warn", "INFO", "WARNING", "Token authentication", "Started a local Ray",
         "No CUDA runtime")


def execute(case: Case, places: dict[str, str], tmp: Path) -> tuple[int, str, float]:
    args = [a.format(tmp=tmp, **places) for a in case.args]
    t0 = time.perf_counter()
    if case.subprocess:
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
        env.pop("RAY_ADDRESS", None)
        p = subprocess.run([sys.executable, "-m", case.module, *args], capture_output=True, text=True, env=env,
                           timeout=case.seconds + 60)
        return p.returncode, p.stderr, time.perf_counter() - t0
    module = importlib.import_module(case.module if case.module != "fda_ray" else "fda_ray.experiments.cli")
    main = getattr(module, "main", None) or importlib.import_module(case.module + ".__main__").main
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(args)
        except SystemExit as e:  # an argparse parser that is not OneLineParser
            code = int(e.code or 0)
    return code, err.getvalue(), time.perf_counter() - t0


def error_lines(stderr: str) -> tuple[list[str], list[str]]:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    other = [ln for ln in lines if not ln.startswith(("error:", "warning:")) and not any(n in ln for n in NOISE)]
    return errors, other


def test_there_are_at_least_60_cases_across_the_command_lines():
    assert len(CASES) >= 60
    assert {c.module for c in CASES} >= {"fda_ray", "fda_ray.sweep", "fda_ray.diagnose", "fda_ray.synthetic_grid",
                                         "fda_ray.kernels", "benchmarks.engine", "benchmarks.cohort"}
    assert len({c.id for c in CASES}) == len(CASES)


# The cases that start a Python process (a sweep, Ray) are the slow tier; the in-process ones the fast tier.
@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c.subprocess else c for c in CASES],
                         ids=[c.id for c in CASES])
def test_bad_input_gives_one_line(case: Case, places, tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    code, stderr, seconds = execute(case, places, tmp_path)
    errors, other = error_lines(stderr)
    assert "Traceback" not in stderr, stderr[-2000:]
    assert code == case.code, stderr[-2000:]
    assert len(errors) == 1 and not other, stderr[-2000:]
    assert case.names in errors[0], errors[0]
    assert seconds <= case.seconds, f"{seconds:.1f} s"


if __name__ == "__main__":  # the table of cases as they behave today
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        where = make_places(root / "places")
        print("| command | input | exit | message | s |\n|---|---|---|---|---|")
        for i, c in enumerate(CASES):
            tmp = root / f"case{i}"
            tmp.mkdir()
            code, stderr, s = execute(c, where, tmp)
            errors, _ = error_lines(stderr)
            msg = (errors[0] if errors else stderr.strip().splitlines()[-1] if stderr.strip() else "").replace("|", "\\|")
            msg = msg.replace(str(root), "…")
            print(f"| {c.module} | `{c.id.split(':', 1)[1]}` | {code} | {msg[:150]} | {s:.1f} |", flush=True)


# ---------------------------------------------------------------- interruptions: what is kept

def _run_until(args: list[str], parquet: Path, rows: int) -> subprocess.Popen:
    """Start `python -m fda_ray` and return once --parquet holds `rows` finished rounds."""
    import pyarrow.parquet as pq

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.Popen([sys.executable, "-m", "fda_ray", *args, "--parquet", str(parquet)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
                            preexec_fn=sigint_as_in_a_terminal)
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        if parquet.is_file() and pq.read_metadata(parquet).num_rows >= rows:
            return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the run did not reach {rows} rounds: {proc.communicate()[1][-2000:]}")


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGINT", "SIGKILL"])
def test_a_stopped_run_keeps_its_finished_rounds(sig, places, tmp_path):
    """Ctrl-C: exit 130, one line, every finished round in --parquet. SIGKILL (no chance to write anything):
    --parquet still holds every round finished before the kill, because it is rewritten after each round."""
    import signal

    import pyarrow.parquet as pq

    out = tmp_path / "rounds.parquet"
    args = [a.format(tmp=tmp_path, **places) for a in RUN]
    args[args.index("--rounds") + 1] = "200"
    proc = _run_until(args, out, rows=3)
    os.killpg(proc.pid, getattr(signal, sig))
    _, stderr = proc.communicate(timeout=60)
    kept = pq.read_table(out).to_pylist()
    assert [r["round"] for r in kept] == list(range(len(kept))) and len(kept) >= 3
    assert all(r["accuracy"] is not None and r["method"] == "fedgp" for r in kept)
    if sig == "SIGINT":
        errors, other = error_lines(stderr.replace("interrupted:", "error:"))
        assert proc.returncode == 130 and "Traceback" not in stderr and not other, stderr[-2000:]
        assert len(errors) == 1 and f"the {len(kept)} finished rounds are in {out}" in errors[0]
    else:
        assert proc.returncode == -9


@pytest.mark.slow  # a sweep: the local backend starts a process for it (it imports torch)
def test_a_sweep_whose_every_trial_fails_exits_1(places, tmp_path, monkeypatch):
    """Every trial diverges (a source learning rate of 1e30): each is a failure in the summary, exit 1."""
    import json

    from fda_ray.experiments import sweep

    out = tmp_path / "sweep"
    args = ["--grid", "noise", "--values", "0", "--methods", "fedgp,target_only", "--backend", "local", "--workers", "1",
            "--max-failures", "0", "--data-dir", places["fm"], "--out", str(out), "--no-figures", "--json",
            "--num-sources", "2", "--rounds", "1", "--warmup-rounds", "1", "--samples-per-client", "128",
            "--target-labelled", "32", "--test-samples", "50", "--lr-source", "1e30"]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        code = sweep.main(args)
    summary = json.loads(buf.getvalue()[buf.getvalue().index("{"):])
    assert code == 1 and summary["trials_done"] == 0 and summary["trials"] == len(summary["failures"]) >= 2
    assert all("run stopped in round 0" in f["error"] for f in summary["failures"])
    assert "Failed trials" in (out / "summary.md").read_text()


MISSPELT = [
    (["-m", "fda_ray.sweep", "--grid", "noize", "--dry-run"], "; did you mean 'noise'?"),
    (["-m", "fda_ray.sweep", "--grid", "noise", "--profile", "papr", "--dry-run"], "; did you mean 'paper'?"),
    (["-m", "fda_ray.sweep", "--grid", "noise", "--backend", "tun", "--dry-run"], "; did you mean 'tune'?"),
    (["-m", "fda_ray.sweep", "--grid", "noise", "--methods", "fedgpp", "--dry-run"], "; did you mean 'fedgp'?"),
    (["-m", "fda_ray", "--method", "fedgpp"], "; did you mean 'fedgp'?"),
    (["-m", "fda_ray", "--dataset", "fashion-mnst"], "; did you mean 'fashion-mnist'?"),
    (["-m", "fda_ray", "--partition", "labelshift"], "; did you mean 'label_shift'?"),
    # DomainBed's class names, as its users type them (difflib alone finds nothing close to 'PACS')
    (["-m", "fda_ray", "--dataset", "PACS"], "; did you mean 'pacs'?"),
    (["-m", "fda_ray", "--dataset", "ColoredMNIST"], "; did you mean 'colored-mnist'?"),
]


@pytest.mark.slow  # a Python process per case (each imports torch)
@pytest.mark.parametrize("argv,tail", MISSPELT)
def test_a_misspelt_name_is_told_the_closest_one(argv, tail):
    """One line, exit code 2, ending in the known name closest to the misspelt one (difflib)."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and lines[0].endswith(tail), lines


@pytest.mark.parametrize("argv,tail", MISSPELT)
def test_a_misspelt_name_is_told_the_closest_one_by_the_programs_main(argv, tail, tmp_path):
    """The same cases through each program's main() in this process (the fast tier; the slow tier runs them as the
    `python -m` processes above): exit code 2, one error line, ending in the closest known name."""
    code, stderr, _ = execute(Case(argv[1], tuple(argv[2:]), 2, ""), {}, tmp_path)
    errors, other = error_lines(stderr)
    assert code == 2 and "Traceback" not in stderr, stderr[-2000:]
    assert len(errors) == 1 and not other and errors[0].endswith(tail), stderr[-2000:]


def test_no_suggestion_for_a_name_close_to_nothing():
    from fda_ray.core.registry import did_you_mean

    assert did_you_mean("zzzzzz", ["fedgp", "fedda"]) == "" and did_you_mean(3, ["fedgp"]) == ""
    assert did_you_mean("FedGP", ["fedgp", "fedda"]) == "; did you mean 'fedgp'?"  # case and separators folded
    assert did_you_mean("Fed_GQ", ["fedgp", "fedda"]) == "; did you mean 'fedgp'?"  # (difflib alone: 0.36)
    assert did_you_mean("fedpg", ["fedgp", "fedda"]) == "; did you mean 'fedgp'?"
