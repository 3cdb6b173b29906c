"""RunConfig validation and the papers' defaults; seed derivation; registries."""
from __future__ import annotations

import pytest

from fda_ray.core.config import RunConfig
from fda_ray.algorithms import ALGORITHMS
from fda_ray.core.registry import Registry
from fda_ray.core.seeding import derive_seed


@pytest.mark.parametrize("field,value,allowed", [
    ("noise", -0.1, "a finite number >= 0"),
    ("noise", float("nan"), "a finite number >= 0"),
    ("eta", 0.7, "a share in [0, 0.5]"),
    ("rounds", 0, "an integer >= 1"),
    ("num_sources", 0, "an integer >= 1"),
    ("batch_target", 0, "a positive integer"),
    ("lr_source", 0.0, "a finite number > 0"),
    ("target_fraction", 1.5, "a share in (0, 1]"),
    ("partition", "dirichlet", "one of homo, label_shift, classes4, source_classes, domains"),
    ("auto_beta_rule", "fedavg", "one of fedda, fedgp, fedgp_thresh"),
    ("model", "vgg", "known models: simple_cnn"),
    ("device", "tpu", "'cpu', 'cuda' or 'cuda:<index>'"),
    ("device", "cuda:abc", "'cpu', 'cuda' or 'cuda:<index>'"),
    ("seed", -1, "an integer from 0 to 2^64 - 1"),
    ("seed", 2**64, "an integer from 0 to 2^64 - 1"),  # (it would draw seed 0's numbers: derive_seed reads 64 bits)
])
def test_invalid_fields_name_field_value_and_allowed(field, value, allowed):
    with pytest.raises(ValueError) as e:
        RunConfig(**{field: value})
    msg = str(e.value)
    assert msg.startswith(f"{field}={value!r} is invalid") and allowed in msg and "\n" not in msg


def test_labelled_count_and_fraction_are_exclusive():
    with pytest.raises(ValueError, match="not both"):
        RunConfig(target_labelled=10, target_fraction=0.5)


def test_resolved_paper_defaults():
    c = RunConfig(method="fedgp").resolved()
    assert (c.lr_source, c.lr_target, c.batch_source, c.batch_target, c.target_labelled) == (0.01, 0.005, 64, 16, 100)
    assert c.num_sources == 9 and c.finetune_epochs == c.rounds and c.model == "simple_cnn"
    a = RunConfig(method="fedgp_auto").resolved()
    assert a.batch_target == 4 and a.auto_lr_factor == 0.1 and a.auto_beta_rule == "fedgp_thresh"
    ls = RunConfig(partition="label_shift", eta=0.1).resolved()
    assert ls.target_labelled is None and ls.target_fraction == 0.15
    cifar = RunConfig(dataset="cifar10").resolved()
    assert (cifar.partition, cifar.target_fraction, cifar.lr_source, cifar.auto_lr_factor) == ("classes4", 0.1, 0.005, 0.35)
    assert RunConfig(dataset="synthetic").resolved().num_sources == 8
    # explicit values win over defaults
    assert RunConfig(method="fedgp_auto", batch_target=8).resolved().batch_target == 8


def test_seeds_differ_per_coordinate_and_are_stable():
    base = derive_seed(0, 1, 2, "train/shuffle")
    others = {derive_seed(1, 1, 2, "train/shuffle"), derive_seed(0, 2, 2, "train/shuffle"),
              derive_seed(0, 1, 3, "train/shuffle"), derive_seed(0, 1, 2, "train/noise")}
    assert base not in others and len(others) == 4
    assert derive_seed(0, 1, 2, "train/shuffle") == base and 0 <= base < 2**63


def test_registry_lists_known_names_on_typo():
    r: Registry[int] = Registry("widget")
    r.add("a", 1)
    with pytest.raises(ValueError, match="unknown widget 'b'; known: a"):
        r.get("b")
    with pytest.raises(ValueError, match="registered twice"):
        r.add("a", 2)
    assert set(ALGORITHMS.names()) == {"source_only", "target_only", "fedda", "fedgp", "fedda_auto", "fedgp_auto",
                                       "finetune_offline", "oracle", "fedavg_all", "ditto", "fedrep", "apfl", "knn_per",
                                       "fedavg_finetune", "fedavg_finetune_auxinfo", "fedavg_finetune_gp",
                                       "fedavg_finetune_auxinfo_gp", "fssda", "fssda_serial", "ssda_only", "fl_only",
                                       "fedwca", "shot_source_only", "shot_local", "shot_fedavg"}



def test_registry_home_is_imported_when_first_read_and_once(tmp_path, monkeypatch):
    """A registry filled by its home module: reading it imports the home (which adds to it without importing
    itself again), a home that fails to import fails the read and is tried again on the next one."""
    import sys
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "home_ok.py").write_text("import test_home_registry as t\nt.R.add('b', 2)\nt.R.add('c', 3)\n")
    (tmp_path / "home_bad.py").write_text("raise ImportError('half-installed home')\n")
    mod = type(sys)("test_home_registry")
    monkeypatch.setitem(sys.modules, "test_home_registry", mod)
    mod.R = Registry("widget", home="home_ok")
    mod.R.add("a", 1)  # an outside add first: the home's entries still come first
    assert mod.R.names() == ["b", "c", "a"] and mod.R.get("c") == 3 and "home_ok" in sys.modules
    assert mod.R.home is None
    bad: Registry[int] = Registry("gadget", home="home_bad")
    for _ in range(2):  # not marked loaded after a failure
        with pytest.raises(ImportError, match="half-installed home"):
            bad.names()
    assert bad.home == "home_bad"
    monkeypatch.delitem(sys.modules, "home_ok")

def test_threads_warmup_and_baseline_protocol_resolve_and_validate():
    from fda_ray.core.config import numbers_fields

    assert RunConfig().threads == 1 and RunConfig().resolved().warmup_rounds == 2
    for bad in (0, None, 1.5):
        with pytest.raises(ValueError, match=r"threads=.* is invalid: an integer >= 1"):
            RunConfig(threads=bad)
    with pytest.raises(ValueError, match="baseline_protocol='paper' is invalid: one of authors, loop"):
        RunConfig(baseline_protocol="paper")
    oracle = RunConfig(method="oracle").resolved()
    assert (oracle.warmup_rounds, oracle.lr_target, oracle.batch_target) == (0, 0.003, 64)
    assert RunConfig(method="oracle", warmup_rounds=2, lr_target=0.01).resolved().lr_target == 0.01  # explicit wins
    assert RunConfig(method="oracle", baseline_protocol="loop").resolved().warmup_rounds == 2
    assert RunConfig(dataset="cifar10", method="oracle").resolved().lr_target == 0.0005  # run_oracle.sh's cifar lr
    # which fields identify a trial's numbers: not where or how it runs
    assert {"executor", "cpus_per_client", "gpus_per_client", "clients_per_actor", "ray_address", "client_retries",
            "data_dir", "download"}.isdisjoint(numbers_fields())
    assert {"threads", "aggregation_impl", "device", "lr_target", "baseline_protocol", "seed"} <= numbers_fields()


# ---------------------------------------------------------------- the FDA family's Params, RunConfig keywords

@pytest.mark.parametrize("field,value,allowed", [
    ("beta", 1.5, "a number in [0, 1]"),
    ("beta", "high", "a finite number in [0, 1]"),
    ("projection", "orthogonal", "one of cosine, exact"),
    ("projection", "cosin", "one of cosine, exact; did you mean 'cosine'?"),
    ("filter", 1, "true or false"),
    ("auto_beta_rule", "fedavg", "one of fedda, fedgp, fedgp_thresh (or unset"),
    ("auto_lr_factor", 0.0, "a number > 0 (or unset"),
    ("finetune_epochs", -1, "an integer >= 0 (or unset"),
    ("finetune_epochs", 2.5, "an integer >= 0 (or unset"),
    ("baseline_protocol", "paper", "one of authors, loop"),
    ("log_estimates", "yes", "true or false (or unset"),
    ("faithful_domainbed_auto", 0, "true or false (or unset"),
])
def test_fda_params_are_keywords_with_one_line_errors(field, value, allowed):
    # The same line whichever way the value comes in: a keyword, or the family's params entry
    for kwargs in ({field: value}, {"params": {"fda": {field: value}}}):
        with pytest.raises(ValueError) as e:
            RunConfig(**kwargs)
        assert str(e.value).startswith(f"{field}={value!r} is invalid: {allowed}")


def test_fda_keywords_are_the_family_params_entry():
    from fda_ray.algorithms.fda.params import FDAParams

    cfg = RunConfig(method="fedgp", beta=0.3, filter=False)
    assert cfg == RunConfig(method="fedgp", params={"fda": {"beta": 0.3, "filter": False}})
    assert cfg.params == {"fda": {"beta": 0.3, "filter": False}}
    assert (cfg.beta, cfg.filter, cfg.projection, cfg.finetune_epochs) == (0.3, False, "cosine", None)
    # Only what differs from the defaults is held: a default given is the config left alone
    assert RunConfig(beta=0.5, projection="cosine", log_estimates=None) == RunConfig()
    assert RunConfig().params == {}
    # A keyword given wins over the same name in params; replace changes one and keeps the rest
    assert RunConfig(beta=0.2, params={"fda": {"beta": 0.9, "filter": False}}).params == \
        {"fda": {"beta": 0.2, "filter": False}}
    assert cfg.replace(beta=0.7).params == {"fda": {"beta": 0.7, "filter": False}}
    with pytest.raises(ValueError, match=r"beta=2 is invalid: a number in \[0, 1\]"):  # replaced, still refused
        RunConfig(beta=0.25, params={"fda": {"beta": 2}})
    assert cfg.replace(rounds=3).beta == 0.3
    assert cfg.replace(params={}).beta == 0.5
    with pytest.raises(AttributeError, match="no attribute 'betta'"):
        cfg.betta  # noqa: B018
    # The family reads its own Params; the record lists the parameters at the top level, and rebuilds the config
    r = cfg.resolved()
    p = r.family_params()
    assert isinstance(p, FDAParams) and (p.beta, p.filter, p.finetune_epochs, p.log_estimates) == (0.3, False, 50, True)
    d = r.to_dict()
    assert (d["beta"], d["filter"], d["finetune_epochs"]) == (0.3, False, 50) and "fda" not in d["params"]
    assert RunConfig(**d) == r
    import pickle

    assert pickle.loads(pickle.dumps(r)) == r and pickle.loads(pickle.dumps(r)).beta == 0.3


def test_every_method_resolves_the_fda_params():
    # Every resolved config carries them (the Healthcare FDA family's GP reads beta, projection and filter; the data
    # setting reads baseline_protocol): filled by the dataset, the FDA method, or the neutral settings
    gp = RunConfig(method="fedgp", rounds=7).resolved()
    assert (gp.finetune_epochs, gp.log_estimates, gp.auto_lr_factor, gp.auto_beta_rule) == (7, True, 0.1, "fedgp_thresh")
    target = RunConfig(method="target_only").resolved()
    assert target.log_estimates is False  # it trains no source
    ditto = RunConfig(method="ditto", beta=0.2).resolved()
    assert set(ditto.params) == {"ditto", "fda"} and ditto.beta == 0.2 and ditto.log_estimates is False
    hc = RunConfig(dataset="fmnist-conditions", method="fedavg_finetune_gp", beta=0.25, projection="exact").resolved()
    assert (hc.beta, hc.projection, hc.filter) == (0.25, "exact", True)


def test_a_boolean_is_refused_by_every_field_that_is_not_a_switch():
    """Python's True is the integer 1, and YAML 1.1 reads an unquoted `yes` as True: `rounds: yes` ran 1 round and
    `data_dir: yes` read a folder named True. Only the fields typed bool take one; the others name the field."""
    import dataclasses

    from fda_ray.core.config import RunConfig

    for f in dataclasses.fields(RunConfig):
        switch = "bool" in str(f.type)
        for value in (True, False):
            if switch:
                RunConfig(**{f.name: value})
                continue
            with pytest.raises(ValueError, match=f"^{f.name}={value!r} is invalid: "):
                RunConfig(**{f.name: value})
