"""fda_ray.core.build: the code version ignores comments and docstrings and sees any statement; a sweep resumed
into records of another build refuses in one line unless --mix-builds; records that name no build warn."""
from __future__ import annotations

import json

from fda_ray.core.build import FIELDS, build, code_version, differences, fingerprint
from fda_ray.experiments import summary, sweep
from fda_ray.experiments.trials import plan
from fda_ray.papers.grids import GRIDS


def test_the_code_version_sees_statements_not_comments_or_docstrings():
    base = fingerprint([("m.py", "def f(x):\n    return x + 1\n")])
    assert fingerprint([("m.py", '"""A module."""\ndef f(x):\n    """Adds one."""\n    return x + 1  # why\n')]) == base
    assert fingerprint([("m.py", "def f(x):\n    return x + 2\n")]) != base
    assert fingerprint([("n.py", "def f(x):\n    return x + 1\n")]) != base  # a module moved is another version
    assert fingerprint([("k.cu", "a\n")]) != fingerprint([("k.cu", "a \n")])  # kernel sources: their text
    assert len(code_version()) == 12 and code_version() == build()["code"]


def test_differences_name_the_fields_two_builds_disagree_on():
    here = build()
    assert differences(dict(here), here) == []
    assert differences(None, here) == [] and differences({}, here) == []
    other = {**here, "torch": "1.0.0", "code": "000000000000"}
    assert differences(other, here) == [f"torch 1.0.0 -> {here['torch']}", f"code 000000000000 -> {here['code']}"]
    assert differences({"torch": here["torch"]}, here) == []  # a record without a field cannot disagree on it


def _independent(trials: list) -> list:
    """The trials no other starts from (a made-up record of one that others start from has no weights.pt: a resume
    would run it again, and say so)."""
    sources = {t.weights_from for t in trials}
    return [t for t in trials if t.key not in sources]


def _record(out, key: str, environment: dict | None) -> None:
    d = out / "trials" / key
    d.mkdir(parents=True)
    (d / "rows.json").write_text(json.dumps({"config": {}, "rows": [{"round": 0}], "seconds": 0.0,
                                             **({"environment": environment} if environment else {})}))


def test_a_resumed_sweep_refuses_records_of_another_build(tmp_path, fmnist_dir, capsys):
    key = _independent(plan(GRIDS["noise"], "quick"))[0].key
    out = tmp_path / "sweep"
    args = ["--grid", "noise", "--data-dir", str(fmnist_dir), "--out", str(out), "--resume", "--dry-run"]
    _record(out, key, {**build(), "torch": "1.0.0", "python": "3.11.7"})
    assert sweep.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: resume=True is invalid: 1 trial(s) in {out / 'trials'} were recorded by another build "
                   f"(torch 1.0.0 -> {build()['torch']}); pass --mix-builds to add this build's trials to them, "
                   "or choose another --out"]
    assert sweep.main(args + ["--mix-builds"]) == 0  # told to mix
    capsys.readouterr()


def test_records_of_this_build_resume_and_records_without_one_warn(tmp_path, fmnist_dir, capsys):
    trials = _independent(plan(GRIDS["noise"], "quick"))
    out = tmp_path / "sweep"
    args = ["--grid", "noise", "--data-dir", str(fmnist_dir), "--out", str(out), "--resume", "--dry-run"]
    _record(out, trials[0].key, {**build(), "python": "3.11.7"})
    assert sweep.main(args) == 0
    assert "warning" not in capsys.readouterr().err
    _record(out, trials[1].key, None)  # recorded before builds were
    assert sweep.main(args) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"warning: 1 trial(s) in {out / 'trials'} name no build (recorded before builds were): they may "
                   "come from another one"]
    assert FIELDS == ("torch", "torchvision", "numpy", "code", "aggregation", "cpu", "plugins")


def test_the_constraints_file_is_the_installed_build_and_every_install_uses_it():
    import re
    from importlib import metadata
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    pins = dict(re.findall(r"^([a-z]+)==(\S+)$", (root / "constraints.txt").read_text(), flags=re.M))
    assert {"torch", "torchvision", "numpy", "ray", "pyarrow", "matplotlib"} <= set(pins)
    for dist, version in pins.items():  # CI installs with it: what is installed is what it pins
        assert metadata.version(dist) == version, dist
    for name in ("cluster.yaml", "deploy/docker/Dockerfile"):  # their explicit pins agree with it
        text = (root / name).read_text()
        found = dict(re.findall(r'"([a-z]+)(?:\[[a-z,]+\])?==([0-9][0-9.]*)"', text))
        assert found and all(pins[d] == v for d, v in found.items()), (name, found)
    assert "pip install -q -c /home/ubuntu/fda-ray/constraints.txt -e" in (root / "cluster.yaml").read_text()
    assert "pip install -c /opt/fda-ray/constraints.txt" in (root / "deploy/docker/Dockerfile").read_text()
    readme, ci = (root / "README.md").read_text(), (root / ".ci/run").read_text()
    assert 'python3 -m pip install -q -c constraints.txt -e ".[test]"' in readme and \
        'python3 -m pip install -q -c constraints.txt -e ".[test]"' in ci
    assert "pip install -c constraints.txt -e ." in readme


def test_the_summary_names_the_builds_that_recorded_its_table(tmp_path):
    """summary.md says which build recorded the table's trials, that several builds mix, and how many trials are
    of an unknown build; trials outside the table are not counted."""
    from fda_ray.core.storage import StoragePath

    out = tmp_path / "sweep"
    here = {**build(), "python": "3.11.7"}
    _record(out, "a", here)
    _record(out, "b", here)
    records = StoragePath(str(out / "trials"))
    found, text = summary.builds_line(records, {"a", "b"})
    named = ", ".join(f"{k} {here[k]}" for k in FIELDS if here[k] is not None)  # (no aggregation named here)
    assert text == f"\nRecorded by {named} (2 trials).\n" and found == [{**{k: here[k] for k in FIELDS}, "trials": 2}]
    _record(out, "c", {**here, "torch": "1.0.0"})
    _record(out, "d", None)
    _record(out, "e", None)  # not in the table
    _, text = summary.builds_line(records, {"a", "b", "c", "d"})
    old = named.replace(f"torch {here['torch']}", "torch 1.0.0")
    assert f"{named} (2 trials)" in text and f"{old} (1 trials)" in text
    assert "; 1 trials recorded before builds were kept: their build is unknown" in text
    assert "(several builds: the table mixes their numbers)" in text
    _, text = summary.builds_line(records, {"d", "e"})
    assert text == "\nRecorded by an unknown build.\n"
    # a field one record does not name cannot disagree: a method that aggregates without the kernels is one build
    # with the kernel runs of the same libraries
    _record(out, "f", {**here, "aggregation": "cpp"})
    _, text = summary.builds_line(records, {"a", "b", "f"})
    merged = {**here, "aggregation": "cpp"}
    assert text == "\nRecorded by " + ", ".join(f"{k} {merged[k]}" for k in FIELDS if merged[k] is not None) + \
        " (3 trials).\n"


def test_a_record_names_the_aggregation_that_ran_and_the_cpu(tiny, tmp_path):
    """rows.json's environment names the kernels' implementation the trial's aggregation really ran (cpp here, or
    reference where the C++ kernel cannot be built; reference when asked) and the CPU capability."""
    from fda_ray import kernels
    from fda_ray.experiments.records import Trial, trial_key
    from fda_ray.experiments.trials import run_trial
    from fda_ray.kernels.loader import cpu_capability

    def env_of(**kw):
        params = dict(tiny(rounds=1, **kw).to_dict())
        t = Trial(trial_key("x", "noise", 0.0, 0, params), "x", 0.0, 0, params)
        run_trial(t, tmp_path)
        return json.loads((tmp_path / t.key / "rows.json").read_text())["environment"]

    env = env_of(method="fedgp")
    assert env["aggregation"] == kernels.implementation("cpu") and env["cpu"] == cpu_capability()
    assert env_of(method="fedgp", aggregation_impl="reference")["aggregation"] == "reference"
    kernels.forget_ran()
    assert kernels.ran() is None  # nothing through the kernels since: a record names no aggregation


def test_a_resume_under_another_aggregation_or_cpu_refuses(tmp_path, tiny):
    """A kernel that built when the records were made and falls back to the reference now (or another CPU) counts
    like a change of torch, where this machine runs the trials; a cluster's nodes are not this machine."""
    import pytest

    from fda_ray.core.storage import StoragePath

    cfg = tiny(method="fedgp").resolved()
    out = tmp_path / "sweep"
    _record(out, "a", {**build("cpp"), "python": "3.11.7"})
    records = StoragePath(str(out / "trials"))
    with pytest.raises(sweep.SweepError, match=r"recorded by another build \(aggregation cpp -> reference\)"):
        sweep.same_build(records, False, cfg.replace(aggregation_impl="reference"))
    sweep.same_build(records, True, cfg.replace(aggregation_impl="reference"))  # --mix-builds
    sweep.same_build(records, False, cfg.replace(aggregation_impl="reference"), here_runs=False)  # a cluster's
    _record(out, "b", {**build(sweep.expected_aggregation(cfg)), "cpu": "SOMEOTHER", "python": "3.11.7"})
    with pytest.raises(sweep.SweepError, match=r"\(cpu SOMEOTHER -> "):
        sweep.same_build(records, False, cfg)
    sweep.same_build(records, False, cfg, here_runs=False)


def test_ninja_comes_with_the_package_so_the_kernel_builds_anywhere():
    """torch.utils.cpp_extension builds the C++ kernel with ninja: a dependency of the package (the PyPI wheel, at
    the pinned version), so a machine without Debian's ninja-build (the Docker image, cluster.yaml's nodes) builds
    the kernel instead of falling back to the reference."""
    from importlib import metadata
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parents[1]
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.startswith("ninja") for d in deps)
    assert "ninja==" + metadata.version("ninja") in (root / "constraints.txt").read_text()
    from torch.utils.cpp_extension import verify_ninja_availability

    verify_ninja_availability()  # raises where torch finds none


def test_the_supported_pythons_are_those_the_pins_exist_for():
    """pyproject's requires-python is what constraints.txt's build installs on (numpy 2.4.6 and pandas 3.1.1 publish
    no wheels for 3.10), and the README says the same."""
    import sys
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parents[1]
    assert tomllib.loads((root / "pyproject.toml").read_text())["project"]["requires-python"] == ">=3.11"
    assert sys.version_info >= (3, 11)
    assert "(Python 3.11 or newer)" in (root / "README.md").read_text()


def test_the_refusal_counts_every_trial_of_another_build(tmp_path, tiny):
    """Trials of one other build that fall in several groups (one names its aggregation, one names none: a method
    that aggregates without the kernels) are all counted in the refusal's line (it counted one group's)."""
    import pytest

    from fda_ray.core.storage import StoragePath

    cfg = tiny(method="fedgp").resolved()
    out = tmp_path / "sweep"
    other = {**build("cpp"), "torch": "0.0.1", "python": "3.11.7"}
    _record(out, "a", other)
    _record(out, "b", {**other, "aggregation": None})
    _record(out, "c", {**other, "aggregation": None})
    with pytest.raises(sweep.SweepError, match=r"3 trial\(s\) in .* were recorded by another build \(torch 0\.0\.1 -> "):
        sweep.same_build(StoragePath(str(out / "trials")), False, cfg)
