"""Planning a grid into trials (every registered grid against the paper's table), the shared-work plan against
plain runs, trial identity, and the planner's one-line errors."""
from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import pytest
import torch

from fda_ray.core.config import RunConfig
from fda_ray.runtime.engine import run
from fda_ray.experiments.records import NOISE_FREE, Trial, is_done, read_rows, result_rows, trial_key
from fda_ray.experiments.trials import plan, run_trial
from fda_ray.papers.grids import GRIDS, Grid, Profile, Row
from fda_ray.papers.paper import TABLE10_FMNIST, TABLE11_FMNIST_LABEL_SHIFT

ROOT = Path(__file__).resolve().parents[1]

# What each published table holds fixed (Auto-weighted FDA C.6 and the grids' captions), beyond the dataset defaults.
TABLE_SETTINGS = {
    "noise": {"partition": "homo", "target_labelled": 100, "eta": 0.5},
    "beta": {"partition": "homo", "noise": 0.4, "target_labelled": 100},
    "label-shift": {"partition": "label_shift", "noise": 0.0, "target_fraction": 0.15},
    "target-size": {"partition": "homo", "noise": 0.4},
    "target-size-noise0.2": {"partition": "homo", "noise": 0.2},
    "target-size-noise0.6": {"partition": "homo", "noise": 0.6},
    "source-classes": {"partition": "source_classes", "noise": 0.4, "target_labelled": 100},  # Auto-weighted FDA Table 12
    "ablation": {"partition": "homo", "target_labelled": 100},  # Auto-weighted FDA Table 2
}


def _cells(trials: list[Trial]) -> set[tuple[str, float, int]]:
    out = set()
    for t in trials:
        for v in (t.values if t.value is None else (t.value,)):
            out.add((t.row, v, t.seed))
    return out


def test_every_grid_is_checked_against_its_table():
    from test_domainbed import DOMAINBED_SETTINGS
    from test_fedwca import SEED_003_GRIDS
    from test_fssda import SEED_002_GRIDS
    from test_healthcare import SEED_000_GRIDS

    assert set(GRIDS) == (set(TABLE_SETTINGS) | set(DOMAINBED_SETTINGS) | SEED_000_GRIDS | SEED_002_GRIDS
                          | SEED_003_GRIDS)


@pytest.mark.parametrize("name", sorted(TABLE_SETTINGS))
def test_every_grid_plans_the_papers_table(name):
    grid = GRIDS[name]
    trials = plan(grid, "paper")
    # every row x value x seed, once
    want = {(r.key, v, s) for r in grid.rows for v in grid.values for s in range(grid.seeds_for(v))}
    assert _cells(trials) == want
    assert len({t.key for t in trials}) == len(trials)
    for t in trials:
        cfg = t.config().resolved()
        row = grid.row(t.row)
        assert cfg.dataset == grid.dataset == "fashion-mnist" and cfg.method == row.method and cfg.seed == t.seed
        assert cfg.rounds == 50 and cfg.num_sources == 9 and cfg.samples_per_client is None
        assert cfg.lr_source == 0.01 and cfg.batch_source == 64 and cfg.threads == 1
        for field, value in {**TABLE_SETTINGS[name], **row.params}.items():
            if field == grid.variable or (field == "noise" and t.value is None):
                continue
            assert getattr(cfg, field) == value, (t.key, field)
        if t.value is not None:
            assert getattr(cfg, grid.variable) == t.value  # the variable is the grid value, not another field
        auto = row.method.endswith("_auto")
        if row.method == "oracle":  # the authors' oracle script
            assert (cfg.warmup_rounds, cfg.lr_target, cfg.batch_target, cfg.baseline_protocol) == (0, 0.003, 64, "authors")
        else:
            assert cfg.warmup_rounds == 2 and cfg.lr_target == 0.005
            # (the authors' auto script passes --target_batch_size 4 in its covariate-shift loop only)
            assert cfg.batch_target == (4 if auto and name != "label-shift" else 16) and cfg.auto_lr_factor == 0.1
        if row.method == "fedgp_auto":
            assert cfg.auto_beta_rule == "fedgp_thresh"


def test_noise_grid_is_table_10_with_fedgp_1_and_shared_source_only():
    grid = GRIDS["noise"]
    assert [r.label for r in grid.rows] == ["Source Only", "Finetune_Offline", "FedDA_0.5", "FedGP_0.5", "FedGP_1",
                                            "FedDA_Auto", "FedGP_Auto", "Target Only", "Oracle"]
    assert set(grid.paper) == set(TABLE10_FMNIST) and grid.paper["fedgp_beta1"][0.8] == 54.18
    assert set(GRIDS["label-shift"].paper) == set(TABLE11_FMNIST_LABEL_SHIFT)
    trials = plan(grid, "paper")
    shared = [t for t in trials if t.value is None]
    assert [(t.row, t.seed, t.values) for t in shared] == [
        ("source_only", 0, (0.0, 0.2, 0.4, 0.6, 0.8)), ("source_only", 1, (0.4,)), ("source_only", 2, (0.4,))]
    assert all(t.save_weights and t.config().resolved().eval_noise == t.values for t in shared)
    finetune = [t for t in trials if t.row == "finetune_offline"]
    assert len(finetune) == 7 and all(t.kind == "finetune" for t in finetune)
    assert {t.weights_from for t in finetune if t.seed == 0} == {shared[0].key}
    fedgp1 = [t for t in trials if t.row == "fedgp_beta1"]
    assert len(fedgp1) == 7 and all(t.config().beta == 1.0 and t.config().method == "fedgp" for t in fedgp1)
    assert len(trials) == 3 + 7 * 8  # shared source_only per seed, the other 8 rows at 7 (value, seed) cells
    # runs first the ones that train no source, heavy ones from the middle of the grid outwards
    heavy = [t.value for t in trials if t.seed == 0 and t.row == "fedgp"]
    assert heavy == [0.4, 0.2, 0.6, 0.0, 0.8]


def test_quick_noise_profile_is_the_papers_setting_with_two_sources_at_three_noise_levels():
    trials = plan(GRIDS["noise"], "quick")
    rows = [r.key for r in GRIDS["noise"].rows if r.key != "fedgp_beta1"]  # fedgp_beta1: not named as method fedgp
    # 3 seeds in every cell: the README's ordering claims need each cell's spread (issue 38)
    assert _cells(trials) == {(k, v, s) for k in rows for v in (0.0, 0.4, 0.8) for s in range(3)}
    assert len(trials) == 3 * (1 + 7 * 3)  # per seed: the shared Source Only run, 7 rows at 3 noise levels
    for t in trials:
        cfg = t.config().resolved()
        assert (cfg.num_sources, cfg.samples_per_client, cfg.test_samples, cfg.rounds) == (2, 6000, 2000, 50)
        assert cfg.vectorise == "on"
        assert cfg.lr_source == 0.01 and cfg.batch_source == 64 and cfg.target_labelled == 100
    assert "2 sources (paper: 9)" in GRIDS["noise"].profiles["quick"].note
    assert all(g.profiles["quick"].note for g in GRIDS.values())  # every quick summary says how it differs


def test_plan_restricts_rows_values_and_overrides():
    grid = GRIDS["label-shift"]
    trials = plan(grid, "quick", rows=["fedgp", "fedda"], values=[0.1], overrides={"rounds": 2})
    assert [(t.row, t.value) for t in trials] == [("fedda", 0.1), ("fedgp", 0.1), ("fedgp_beta1", 0.1)]
    assert all(t.config().rounds == 2 and t.config().partition == "label_shift" and t.config().eta == 0.1
               and t.config().noise == 0.0 for t in trials)
    assert [t.row for t in plan(grid, "quick", rows=["fedgp_beta1"], values=[0.1])] == ["fedgp_beta1"]


def test_a_family_flag_keeps_the_grids_other_family_fields():
    """--fedwca-prototypes eq4 on fedwca-fmnist (whose profile sets fedwca.local_epochs 2): both stand, and the
    trials are the ones recorded with both (their keys); a plain dict merge once dropped local_epochs."""
    grid = GRIDS["fedwca-fmnist"]
    t = plan(grid, "paper", rows=["fedavg"], values=[0.0], seeds=1,
             overrides={"params": {"fedwca": {"prototypes": "eq4", "labelset": "false"}}})[0]
    fam = t.config().resolved().params["fedwca"]
    assert (fam["local_epochs"], fam["prototypes"], fam["labelset"]) == (2, "eq4", False)
    assert (ROOT / "docs" / "results" / "fedwca-fmnist-eq4" / "trials" / t.key / "rows.json").is_file()
    default = plan(grid, "paper", rows=["fedavg"], values=[0.0], seeds=1)[0]
    assert default.config().resolved().params["fedwca"]["local_epochs"] == 2 and default.key != t.key


def test_a_profile_sets_fields_and_the_rows_and_values_run_by_default():
    grid = Grid(name="p", dataset="fashion-mnist", variable="noise", values=(0.0, 0.4, 0.8),
                rows=(Row("fedgp", "FedGP", "fedgp"), Row("fedgp_beta1", "FedGP_1", "fedgp", {"beta": 1.0})), seeds={},
                profiles={"paper": {}, "short": Profile({"rounds": 3, "num_sources": 2}, values=(0.8, 0.0),
                                                        rows=("fedgp",), note="n")})
    assert [(t.row, t.value) for t in plan(grid, "paper", rows=["fedgp_beta1"])] == [
        ("fedgp_beta1", 0.4), ("fedgp_beta1", 0.0), ("fedgp_beta1", 0.8)]
    short = plan(grid, "short")
    # the profile's rows (by key: fedgp is not also fedgp_beta1 here) and values, in the grid's order of work
    assert [(t.row, t.value) for t in short] == [("fedgp", 0.0), ("fedgp", 0.8)]
    # --methods: a method names its rows the profile runs (the profile leaves FedGP_1 out), a row key its row
    assert {t.row for t in plan(grid, "short", rows=["fedgp"])} == {"fedgp"}
    assert {t.row for t in plan(grid, "short", rows=["fedgp", "fedgp_beta1"])} == {"fedgp", "fedgp_beta1"}
    assert {t.row for t in plan(grid, "paper", rows=["fedgp"])} == {"fedgp", "fedgp_beta1"}
    assert all(t.config().rounds == 3 and t.config().num_sources == 2 for t in short)
    assert [t.value for t in plan(grid, "short", values=[0.4])] == [0.4]  # --values still picks any grid value
    assert isinstance(grid.profiles["paper"], Profile) and grid.profiles["paper"].values is None
    with pytest.raises(ValueError, match=r"profile 'short' runs noise=0.3, which is not one of the grid's values"):
        Grid(name="p", dataset="fashion-mnist", variable="noise", values=(0.0,), rows=(Row("a", "A", "fedgp"),),
             seeds={}, profiles={"short": Profile({}, values=(0.3,))})
    with pytest.raises(ValueError, match=r"profile 'short' runs row 'fedda', which is not one of the grid's rows"):
        Grid(name="p", dataset="fashion-mnist", variable="noise", values=(0.0,), rows=(Row("a", "A", "fedgp"),),
             seeds={}, profiles={"short": Profile({}, rows=("fedda",))})


@pytest.mark.parametrize("kw,needle", [
    ({"rows": ["fedavg"]}, "methods='fedavg' is invalid: grid 'noise' has rows source_only"),
    ({"values": [0.3]}, "values=0.3 is invalid: grid 'noise' has noise in 0, 0.2, 0.4, 0.6, 0.8"),
    ({"overrides": {"noise": 0.1}}, "noise=0.1 is invalid here: it is the grid's variable"),
    ({"rows": ["fedgp_beta1"], "overrides": {"beta": 0.3}}, "beta=0.3 is invalid here: row 'fedgp_beta1' sets it"),
    ({"overrides": {"lr_target": -1.0}}, "lr_target=-1.0 is invalid"),
    ({"seeds": 0}, "seeds=0 is invalid"),
])
def test_plan_errors_name_the_field(kw, needle):
    with pytest.raises(ValueError) as e:
        plan(GRIDS["noise"], "paper", **kw)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_trial_key_hashes_only_what_changes_the_numbers():
    base = {"dataset": "fashion-mnist", "method": "fedgp", "seed": 0, "noise": 0.4}
    k = trial_key("fedgp", "noise", 0.4, 0, base)
    same = {**base, "data_dir": "/elsewhere", "executor": "ray", "cpus_per_client": 2.0, "client_retries": 9}
    assert trial_key("fedgp", "noise", 0.4, 0, same) == k
    assert trial_key("fedgp", "noise", 0.4, 0, {**base, "lr_target": 0.005}) == k  # the default, spelt out
    for change in ({"lr_target": 0.001}, {"threads": 2}, {"aggregation_impl": "reference"}, {"rounds": 3}):
        assert trial_key("fedgp", "noise", 0.4, 0, {**base, **change}) != k, change


def test_shared_source_only_and_finetune_equal_plain_runs(fmnist_dir, tmp_path):
    """One source_only trial read at every noise level equals source_only run at that level, and fine-tuning
    from its weights equals a whole finetune_offline run (the plan's shared work changes no number)."""
    tiny = {"num_sources": 3, "rounds": 2, "warmup_rounds": 1, "samples_per_client": 128, "test_samples": 100,
            "target_labelled": 32, "finetune_epochs": 2, "data_dir": str(fmnist_dir)}
    grid = Grid(name="shared", dataset="fashion-mnist", variable="noise", values=(0.0, 0.5),
                rows=(Row("source_only", "Source Only", "source_only"),
                      Row("finetune_offline", "Finetune_Offline", "finetune_offline")),
                seeds={}, profiles={"quick": tiny}, share_source_only=True)
    trials = plan(grid, "quick")
    assert [(t.row, t.kind) for t in trials] == [("source_only", "run"), ("finetune_offline", "finetune"),
                                                ("finetune_offline", "finetune")]
    with pytest.raises(FileNotFoundError, match="run trial source_only-noiseall"):
        run_trial(trials[1], tmp_path)  # its weights are not there yet
    for t in trials:
        run_trial(t, tmp_path)
        assert is_done(tmp_path / t.key)
        # every record names the build that computed it (a torch build alone moves results by points)
        env = read_rows(tmp_path / t.key)["environment"]
        assert (env["torch"], env["numpy"], env["python"]) == (torch.__version__, np.__version__,
                                                               platform.python_version())
        assert "gpu_memory" not in read_rows(tmp_path / t.key)  # a CPU trial records no GPU memory
    rows = [r for t in trials for r in result_rows(t, grid, read_rows(tmp_path / t.key))]
    for noise in (0.0, 0.5):
        plain = run(RunConfig(dataset="fashion-mnist", method="source_only", noise=noise, **tiny))
        mine = [r for r in rows if r["row"] == "source_only" and r["noise"] == noise]
        assert [r["accuracy"] for r in mine] == [r["accuracy"] for r in plain.rows]
        assert [r["loss"] for r in mine] == [r["loss"] for r in plain.rows]  # the loss at that noise, too
        # what the run computed only at noise 0 (the target's training loss, validation, estimates) is None at 0.5,
        # not the noise-0 run's numbers under 0.5's label
        dependent = {k for r in plain.rows for k, x in r.items() if x is not None} - {"accuracy", "loss"} - \
            set(NOISE_FREE)
        assert "train_loss_target" in dependent
        for k in dependent:
            if noise == 0.0:  # the noise it trained at: every column as logged
                assert [r.get(k) for r in mine] == [r.get(k) for r in plain.rows], k
            else:
                assert all(r.get(k) is None for r in mine), k
        full = run(RunConfig(dataset="fashion-mnist", method="finetune_offline", noise=noise, **tiny))
        got = [r["accuracy"] for r in rows if r["row"] == "finetune_offline" and r["noise"] == noise]
        assert got == [r["accuracy"] for r in full.rows if r["phase"] == "finetune"] and len(got) == 2


def test_a_trials_gpu_memory_reads_its_actors_only_on_a_gpu():
    """GpuMemory (a GPU trial's "gpu_memory" record) asks a Ray executor's actors for theirs, keeps the GPU ones,
    and records nothing for a trial on the CPU."""
    from fda_ray.experiments.trials import GpuMemory

    class Executor:
        def gpu_memory(self):
            return [{"peak_allocated": 5, "peak_reserved": 8, "reserved": 8},
                    {"peak_allocated": 0, "peak_reserved": 0, "reserved": 0}]

    cpu = GpuMemory("cpu")
    cpu.read_actors(Executor())
    assert cpu.record() == {} and cpu.actors == []
    if not torch.cuda.is_available():  # here "cuda" without a GPU is refused before a trial runs; the class agrees
        assert GpuMemory("cuda").record() == {}
    else:
        gpu = GpuMemory("cuda")
        gpu.read_actors(Executor())
        memory = gpu.record()["gpu_memory"]
        assert memory["actors"] == [{"peak_allocated": 5, "peak_reserved": 8, "reserved": 8}]
        assert set(memory["process"]) == {"peak_allocated", "peak_reserved"}


def test_a_trial_read_back_is_checked():
    t = plan(GRIDS["noise"], "paper")[1]
    assert Trial.from_dict(t.to_dict()) == t
    with pytest.raises(ValueError, match="kind='train' is invalid"):
        Trial.from_dict({**t.to_dict(), "kind": "train"})
    with pytest.raises(ValueError, match="weights_from=None is invalid"):
        Trial.from_dict({**t.to_dict(), "weights_from": None})


def test_grid_definition_errors():
    with pytest.raises(ValueError, match="share_source_only needs variable 'noise'"):
        Grid(name="x", dataset="fashion-mnist", variable="eta", values=(0.1,), rows=(Row("a", "A", "fedgp"),),
             seeds={}, profiles={}, share_source_only=True)
    with pytest.raises(ValueError, match="row keys must be unique"):
        Grid(name="x", dataset="fashion-mnist", variable="eta", values=(0.1,),
             rows=(Row("a", "A", "fedgp"), Row("a", "B", "fedda")), seeds={}, profiles={})
