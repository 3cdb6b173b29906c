"""Run configuration: one frozen, validated dataclass, and the seeds' settings per dataset and method.

Fields left as None take the authors' settings for the dataset and method (the dataset's registered defaults,
fda_ray/data/paper_defaults.py; docs/authors-code.md)
when the config is resolved; `RunConfig.resolved()` returns the fully specified config that a run uses and
records. Invalid values raise ValueError naming the field, the value and what is allowed.

Each method family's hyper-parameters are its own `Params` (fda_ray.algorithms), held in `params[family]`. The
FDA family's (beta, projection, filter, ...: fda_ray.algorithms.fda.params) are also keywords under their own
names, as the seed papers and every recorded grid name them: RunConfig(beta=0.3) sets params["fda"]["beta"],
cfg.beta reads it, and to_dict() lists them at the top level, where every record's config has them.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

PARTITIONS = ("homo", "label_shift", "classes4", "source_classes", "domains", "domainbed", "heldout_domain",
              "domain_shards", "domain_clients")
EXECUTORS = ("serial", "ray")
VECTORISE = ("auto", "on", "off")
# Ray's resource granularity: it rounds a request to 4 decimals, so a smaller share is 0 (and a client count per
# CPU over it, fda_ray.runtime.resources, is infinite)
RESOURCE_STEP = 0.0001
MAX_THREADS = 1024  # more threads than any machine has cores (torch.set_num_threads(100000) segfaults)
# Clients a run may ask for: more than any dataset here has samples (DomainNet's 0.6 million). The partitions refuse
# a count the loaded data cannot give; this bound comes first, before the Ray executor's per-client lists (built while
# the data loads) grow without limit for a typo's 10**26.
MAX_CLIENTS = 1_000_000
# Which seed builds DomainBed's ColoredMNIST / RotatedMNIST environments (fda_ray.data.domainbed): DomainBed's
# --seed 0 for every trial, or the trial's own seed, as the FedGP authors' scripts ran (--seed s --trial_seed s).
ENVIRONMENT_SEEDS = ("domainbed", "trial")
ORACLE_TEST_SHARE = 0.1  # the authors' oracle tests on this share of the target's data, trains on the rest
# The models that load torchvision's ImageNet weights (model_weights="imagenet"; fda_ray.train.models.IMAGENET_FILES)
PRETRAINED_MODELS = ("resnet18", "resnet50", "resnet101", "resnet18_multitask", "shot_resnet18", "shot_resnet50")
# FedWCA (App. C.1): iid clients per target domain (Digit-Five 8, PACS and Office-Home 3).
CLIENTS_PER_DOMAIN: dict[str, int] = {"fmnist-5": 8, "digit-five": 8, "pacs": 3, "office-home": 3}
# The labelled target share of the partitions whose target test set is the rest of the target's part.
PARTITION_LABELLED_FRACTION: dict[str, float] = {"label_shift": 0.15, "classes4": 0.10}


def numbers_fields() -> frozenset[str]:
    """The RunConfig fields that can change what a run computes."""
    return frozenset(f.name for f in dataclasses.fields(RunConfig) if f.metadata.get("numbers", True)) \
        | frozenset(keyword_names())


_KEYWORDS: list[Any] = []  # the keyword family's Params class, once read (None: no family has keywords)


def keyword_params() -> Any:
    """The Params class whose fields are RunConfig keywords (fda_ray.algorithms.fda.params.FDAParams: beta,
    projection, ...), or None; at most one family's are."""
    if not _KEYWORDS:
        from fda_ray.core.registry import family_params

        found = [cls for cls in family_params().values() if getattr(cls, "keywords", False)]
        if len(found) > 1:
            raise TypeError(f"families {', '.join(c.family for c in found)} all set Params.keywords: at most one may")
        _KEYWORDS.append(found[0] if found else None)
    return _KEYWORDS[0]


def keyword_names() -> tuple[str, ...]:
    """The keyword family's parameter names (RunConfig keywords, flags and record columns under these names)."""
    kw = keyword_params()
    return tuple(f.name for f in dataclasses.fields(kw)) if kw is not None else ()


# The settings a dataset's registered defaults give (DATASETS.add(..., defaults=)): what resolving a config reads
# from them, the method families' (the FDA family's auto_* and oracle_lr_target) included. Every built-in dataset
# gives all of them (tests/test_plugins.py); a plug-in's that lacks one is told which, before any work.
DATASET_DEFAULT_KEYS = ("model", "model_weights", "partition", "num_sources", "lr_source", "lr_target",
                        "batch_source", "batch_target", "warmup_rounds", "shuffle", "drop_last", "data_augmentation",
                        "target_labelled", "target_fraction", "auto_batch_target", "auto_beta_rule", "auto_lr_factor",
                        "oracle_lr_target")
_DEFAULTS: dict[str, Any] = {}  # the keyword family's defaults, once read (cfg.beta reads them every call)


def _keyword_defaults() -> dict[str, Any]:
    if not _DEFAULTS:
        kw = keyword_params()
        _DEFAULTS.update({f.name: f.default for f in dataclasses.fields(kw)} if kw is not None else {})
    return _DEFAULTS


def config_names() -> tuple[str, ...]:
    """Every keyword RunConfig(**kw) takes, in order: its fields, params included, then the keyword family's
    parameters."""
    return tuple(f.name for f in dataclasses.fields(RunConfig)) + keyword_names()


def config_keywords() -> list[tuple[type, dataclasses.Field]]:
    """Every keyword a RunConfig is built from, as (owner, field): its fields (params aside) and the keyword
    family's parameters; the command lines are generated from these (fda_ray.experiments.cli)."""
    out: list[tuple[type, dataclasses.Field]] = [(RunConfig, f) for f in dataclasses.fields(RunConfig)
                                                 if f.name != "params"]
    kw = keyword_params()
    return out + ([(kw, f) for f in dataclasses.fields(kw)] if kw is not None else [])


def boolean_word(name: str, value: Any) -> Any:
    """`value` for keyword `name` as a definition file means it: YAML 1.1 reads an unquoted on/off (yes/no) as a
    boolean, so `vectorise: off` arrives as False; for a keyword whose choices are words that is the word ("off",
    or "false" where the words are true/false). Any other value comes back as it is (the field's check refuses it)."""
    if not isinstance(value, bool):
        return value
    for owner, f in config_keywords():
        if f.name == name:
            words = f.metadata.get("choices") or ()
            for word in (("on" if value else "off"), ("true" if value else "false")):
                if word in words:
                    return word
            break
    return value


def _err(field: str, value: Any, allowed: str, names: Any = (), pluggable: bool = False) -> ValueError:
    """The one-line error; `names`: the known names, the closest of which a misspelt value is told of;
    pluggable: a registry's names, which a plug-in may add to (fda_ray.core.plugins)."""
    from fda_ray.core.registry import did_you_mean, plugin_hint

    hint = did_you_mean(value, names) or (plugin_hint() if pluggable else "")
    return ValueError(f"{field}={value!r} is invalid: {allowed}{hint}")


SHARD_CAPS = ("device", "domain")  # RunConfig.shard_cap (fda_ray.runtime.partitions.domain_shards_split)


def _f(default: Any, help: str, choices: tuple[str, ...] | None = None, group: str = "run",
       numbers: bool = True) -> Any:
    """A RunConfig field with its documentation: the CLIs (fda_ray.experiments.cli) are generated from these.
    numbers=False: the field says where or how a run executes, never what it computes (a trial's identity,
    fda_ray.experiments.trials.trial_key, leaves it out)."""
    meta: dict[str, Any] = {"help": help, "group": group, "numbers": numbers}
    if choices is not None:
        meta["choices"] = choices
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class RunConfig:
    """One federated domain adaptation run (one trial). Fields left as None take the authors' settings for
    the dataset and method when the config is resolved (`resolved()`)."""

    dataset: str = _f("fashion-mnist", "dataset (its standard on-disk layout; see datasets/README.md)")
    method: str = _f("fedgp", "method (fda_ray.algorithms)")
    seed: int = _f(0, "trial seed; every draw is seeded by (seed, round, client, purpose)")
    noise: float = _f(0.0, "std of the Gaussian noise on the target's train and test images ([0, 1] pixel units)")
    eta: float = _f(0.5, "label-shift share (partition label_shift); 0.5 = no shift")
    source_classes: int = _f(4, "classes each source holds (partition source_classes, Auto-weighted FDA Table 12: "
                                "source i holds class i mod C plus k - 1 random others)")
    rounds: int = _f(50, "main rounds (one local epoch each)")
    warmup_rounds: int | None = _f(None, "FedAvg warm-up rounds over the sources; default 2 (10 on "
                                         "terra-incognita; 0 for the oracle under the authors' protocol, "
                                         "which trains from scratch)")
    test_env: int = _f(0, "datasets with environments: the target environment, by DomainBed's index (the sorted "
                          "folder order: VLCS 0 C, 1 L, 2 S, 3 V; colored-fmnist 0 +90%, 1 +80%, 2 -90%); "
                          "partition domainbed holds it out and every other environment is one source, partition "
                          "domain_shards splits it over the devices")
    environment_seed: str = _f("domainbed", "colored-* and rotated-* datasets: the seed that builds the environments: "
                                            "domainbed (DomainBed's --seed 0, one construction for every trial) or "
                                            "trial (the trial's seed, as the FedGP authors' scripts ran: --seed s "
                                            "--trial_seed s; docs/authors-code.md)", ENVIRONMENT_SEEDS, group="data")
    source_envs: tuple[int, ...] | None = _f(None, "partition domain_shards: the source environments, by index "
                                                   "(several: multi-source, FSSDA Eq. 5); default every "
                                                   "environment but test_env; partition domain_clients "
                                                   "(FedWCA): the one source domain (default 0), every other "
                                                   "environment a target domain")
    num_sources: int | None = _f(None, "source clients; default 9 (8 for synthetic: D_2..D_9); partition "
                                       "domain_shards: the K devices each domain is split over (default 5)")
    clients_per_domain: int | None = _f(None, "partition domain_clients (FedWCA): iid clients each target "
                                              "domain is split over; default 8 (fmnist-5, digit-five), 3 (pacs, "
                                              "office-home)")
    dirichlet_concentration: float | None = _f(None, "partition domain_shards: split every domain over the "
                                                     "devices by NIID-Bench's Dirichlet label skew with this "
                                                     "concentration (FSSDA's non-iid: 0.1; the paper's letter "
                                                     "beta); default iid equal shards")
    shard_cap: str = _f("device", "partition domain_shards: where --samples-per-client caps, device (each device's "
                                  "shard after the split: every device the same size) or domain (a seeded random "
                                  "samples_per_client x devices of the domain before the split: a Dirichlet split "
                                  "keeps its devices' unequal sizes, as FSSDA's non-iid devices)", SHARD_CAPS,
                        group="data")
    target_labelled_per_class: int | None = _f(None, "partition domain_shards: labelled target samples per class, "
                                                     "drawn from the whole target domain (each stays on the device "
                                                     "holding it); default 3 (FSSDA)")
    val_share: float | None = _f(None, "model selection without target test labels: this share of the target's "
                                       "labelled training samples (seeded by (seed, 'validation/target')) is held "
                                       "out, not trained on, and every round reports the evaluated model's "
                                       "val_accuracy on it; default none (every labelled sample trains)")
    source_val_share: float | None = _f(None, "model selection on the training domains (DomainBed's training-domain "
                                              "validation): this share of every source's samples is held out and "
                                              "every round reports source_val_accuracy, the evaluated model on them "
                                              "together; default none")
    aux_alpha: float | None = _f(None, "Healthcare FDA Eq. 3: the sources' loss is L_main + aux_alpha * L_aux on a dataset "
                                       "with auxiliary labels (fmnist-conditions, the medical CSVs); default 1 for "
                                       "the *_auxinfo methods, 0 (the main task only) otherwise")
    partition: str | None = _f(None, "who holds which samples; default per dataset (fashion-mnist: homo)",
                               PARTITIONS)
    model: str | None = _f(None, "model (fda_ray.train.models); default per dataset")
    model_weights: str | None = _f(None, "resnet18: a local ImageNet state-dict file, or 'imagenet' for "
                                         "torchvision's cache file $TORCH_HOME/hub/checkpoints/resnet18-f37072fd.pth "
                                         "(nothing is downloaded); default 'imagenet' on DomainBed's image datasets")
    data_augmentation: bool | None = _f(None, "DomainBed image datasets: augment the source environments' "
                                              "training reads (DomainBed's transforms); default on there")
    shuffle: bool | None = _f(None, "shuffle each local epoch's batches; default on, off on DomainBed datasets "
                                    "(the authors' DomainBed loaders)")
    drop_last: bool | None = _f(None, "sources drop their last partial batch; default on, off on DomainBed "
                                      "datasets (the authors' DomainBed loaders); the target always keeps it")
    lr_source: float | None = _f(None, "Adam learning rate of the sources; default per dataset (fashion-mnist 0.01)")
    lr_target: float | None = _f(None, "Adam learning rate of the target; default per dataset (fashion-mnist "
                                       "0.005; the authors' oracle 0.003)")
    batch_source: int | None = _f(None, "source batch size; default 64 (32 on DomainBed's image datasets)")
    batch_target: int | None = _f(None, "target batch size (the last partial batch is kept); default 16, "
                                        "4 for auto-weighted methods on fashion-mnist, 64 for the authors' oracle")
    target_labelled: int | None = _f(None, "labelled target samples (a count); default 100 (homo)")
    target_fraction: float | None = _f(None, "... or a share of the target's data; default 0.15 (label_shift), "
                                             "0.1 (classes4)")
    samples_per_client: int | None = _f(None, "cap on each client's shard (quick runs, tests); default all")
    test_samples: int | None = _f(None, "cap on the target test set; default all")
    eval_noise: tuple[float, ...] = _f((), "extra noise levels at which the global model is also evaluated")
    # Each method family's own hyper-parameters (fda_ray.algorithms: its Params), by family: {"ditto": {"lam":
    # 1.0}}. The FDA family's are also keywords (beta=...; module docstring), and only what differs from their
    # defaults is held here. A run reads its method's family's entry; resolved() fills it.
    params: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={
        "help": "method families' hyper-parameters, by family (CLI: --<family>-<field>)", "group": "run",
        "numbers": True})
    data_dir: str | None = _f(None, "dataset directory (default: $FDA_DATA_DIR, ./data, ~/.cache/fda_ray, "
                                    "the system's copy)", group="data", numbers=False)
    download: bool = _f(False, "download the dataset with torchvision (needs internet)", group="data", numbers=False)
    # The float sums of a convolution depend on the thread count: a different count gives different
    # numbers. It is part of the config so that a config gives the same numbers on every executor.
    threads: int = _f(1, "torch threads each client trains with (serial: this process; ray: each actor) "
                         "and the driver aggregates and evaluates with; part of the numbers")
    # Vectorised cohorts (fda_ray.train.cohort) sum in other orders than the per-client loop: numbers within float
    # tolerance of it, so this is part of the numbers too. "off" leaves a trial's identity as it was before.
    vectorise: str = _f("auto", "train clients that run the same local recipe as one batched computation "
                                "(fda_ray.train.cohort): on, off, or auto (off: the loop measured faster on an H100 and "
                                "no slower on CPUs at 1 thread); within float tolerance of off",
                        VECTORISE, group="execution")
    aggregation_impl: str = _f("kernel", "kernel (C++/CUDA, fda_ray.kernels) or reference (the PyTorch "
                                         "specification)", ("kernel", "reference"), group="execution")
    device: str = _f("cpu", "the driver's device (evaluation): cpu or cuda[:i]; under Ray, clients use a GPU "
                            "iff gpus_per_client > 0", group="execution")
    # Execution: where clients train. None of these changes the numbers a run produces.
    executor: str = _f("serial", "serial (this process) or ray (client actors); `python -m fda_ray` without it: ray, "
                                 "pooled to the cores, on a machine with 2 or more", EXECUTORS, group="execution",
                       numbers=False)
    cpus_per_client: float | None = _f(None, "ray: CPUs reserved per client (an actor asks this for each client it "
                                             "hosts); default: `threads` per actor, or a share of the cores that "
                                             "lets every actor be placed (fda_ray.runtime.resources)",
                                       group="execution", numbers=False)
    gpus_per_client: float = _f(0.0, "ray: the GPU share each client actor (process) asks, however many clients "
                                     "it hosts (0 = CPU clients; fda_ray.runtime.resources)", group="execution",
                                numbers=False)
    clients_per_actor: int | None = _f(None, "ray: clients one actor hosts (in turn, side by side on a GPU, or as "
                                             "one vectorised cohort); default: pooled to the machine, one actor per "
                                             "`threads` CPUs or per GPU (a Tune trial's GPU clients: one actor), at "
                                             "most one per client",
                                       group="execution", numbers=False)
    ray_address: str | None = _f(None, "ray: an existing cluster (auto, ray://...); default $RAY_ADDRESS or "
                                       "a local Ray", group="execution", numbers=False)
    client_retries: int = _f(3, "ray: times a failed client round is redone (on a new actor) before the run "
                                "stops", group="execution", numbers=False)

    def __post_init__(self) -> None:
        from fda_ray.core.registry import ALGORITHMS, DATASETS, MODELS

        if self.dataset not in DATASETS:
            raise _err("dataset", self.dataset, f"known datasets: {', '.join(DATASETS.names())}", DATASETS.names(),
                       pluggable=True)
        defaults = DATASETS.get(self.dataset).defaults
        if defaults is None:  # a plug-in's dataset without its settings (docs/plugins.md)
            raise _err("dataset", self.dataset, "it is registered without default settings: register it with "
                       f"DATASETS.add({self.dataset!r}, loader, defaults={{...}}) (docs/plugins.md)")
        lacking = [k for k in DATASET_DEFAULT_KEYS if k not in defaults]
        if lacking:  # (resolving reads each of them: a KeyError traceback otherwise)
            raise _err("dataset", self.dataset, f"its registered defaults lack {', '.join(lacking)}: start from a "
                       f"built-in dataset's, defaults={{**DATASETS.get('fashion-mnist').defaults, 'model': ...}} "
                       "(docs/plugins.md)")
        if self.method not in ALGORITHMS:
            raise _err("method", self.method, f"known methods: {', '.join(ALGORITHMS.names())}", ALGORITHMS.names(),
                       pluggable=True)
        if self.model is not None and self.model not in MODELS:
            raise _err("model", self.model, f"known models: {', '.join(MODELS.names())}", MODELS.names(),
                       pluggable=True)
        if isinstance(self.test_env, float) and self.test_env.is_integer():  # a grid's value (2.0)
            object.__setattr__(self, "test_env", int(self.test_env))
        if not isinstance(self.test_env, int) or isinstance(self.test_env, bool) or self.test_env < 0:
            raise _err("test_env", self.test_env, "an environment index >= 0")
        if self.source_envs is not None:
            try:
                envs = tuple(self.source_envs)
            except TypeError:
                raise _err("source_envs", self.source_envs, "a list of environment indices") from None
            envs = tuple(int(e) if isinstance(e, float) and e.is_integer() else e for e in envs)  # CLI floats
            if not envs or any(not isinstance(e, int) or isinstance(e, bool) or e < 0 for e in envs) \
                    or len(set(envs)) != len(envs):
                raise _err("source_envs", self.source_envs, "distinct environment indices >= 0 (at least one)")
            source_free = self.partition == "domain_clients" or ALGORITHMS.get(self.method).family == "fedwca"
            if self.test_env in envs and not source_free:  # (domain_clients: every other env is a target)
                raise _err("source_envs", envs, f"environments other than test_env={self.test_env}")
            object.__setattr__(self, "source_envs", envs)
        conc = self.dirichlet_concentration
        if conc is not None and not (isinstance(conc, (int, float)) and not isinstance(conc, bool)
                                     and math.isfinite(conc) and conc > 0):
            raise _err("dirichlet_concentration", self.dirichlet_concentration, "a finite number > 0 (or unset: iid)")
        for name in ("target_labelled_per_class", "clients_per_domain"):
            v = getattr(self, name)
            if isinstance(v, float) and v.is_integer():  # a grid's value (8.0)
                object.__setattr__(self, name, int(v))
                v = int(v)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise _err(name, v, "an integer >= 1")
        for name in ("data_augmentation", "shuffle", "drop_last"):
            if getattr(self, name) not in (None, True, False):
                raise _err(name, getattr(self, name), "true or false (or unset: the dataset's default)")
        for name in ("model_weights", "data_dir", "ray_address"):  # (a YAML `yes` would become a path "True")
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise _err(name, getattr(self, name), "a text (a path or an address)")
        if self.model_weights is not None and self.model not in (None, *PRETRAINED_MODELS):
            raise _err("model_weights", self.model_weights, f"only models {', '.join(PRETRAINED_MODELS)} load "
                                                            "pretrained weights")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed < 2**64:
            raise _err("seed", self.seed, "an integer from 0 to 2^64 - 1 (derive_seed reads 64 bits of it)")
        for name in ("noise",):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
                raise _err(name, v, "a finite number >= 0")
        if not (isinstance(self.eta, (int, float)) and not isinstance(self.eta, bool) and 0.0 <= self.eta <= 0.5):
            raise _err("eta", self.eta, "a share in [0, 0.5]")
        if isinstance(self.source_classes, float) and self.source_classes.is_integer():  # a grid's value (9.0)
            object.__setattr__(self, "source_classes", int(self.source_classes))
        if not isinstance(self.source_classes, int) or isinstance(self.source_classes, bool) or self.source_classes < 1:
            raise _err("source_classes", self.source_classes, "an integer >= 1 (at most the dataset's classes)")
        for name in ("val_share", "source_val_share"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 < v < 1.0):
                raise _err(name, v, "a share in (0, 1) (or unset: nothing held out)")
        if self.aux_alpha is not None and not (isinstance(self.aux_alpha, (int, float)) and not isinstance(
                self.aux_alpha, bool) and math.isfinite(self.aux_alpha) and self.aux_alpha >= 0):
            raise _err("aux_alpha", self.aux_alpha, "a finite number >= 0")
        for name, lo in (("rounds", 1), ("warmup_rounds", 0), ("num_sources", 1), ("threads", 1)):
            v = getattr(self, name)
            if v is None and name in ("num_sources", "warmup_rounds"):
                continue
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:  # (a YAML `yes` is True, an int)
                raise _err(name, v, f"an integer >= {lo}")
        if self.threads > MAX_THREADS:  # torch's thread pools crash the process far above any machine's cores
            raise _err("threads", self.threads, f"an integer from 1 to {MAX_THREADS}")
        for name in ("num_sources", "clients_per_domain"):  # (the partition checks a count against the data's size)
            v = getattr(self, name)
            if v is not None and v > MAX_CLIENTS:
                raise _err(name, v, f"an integer from 1 to {MAX_CLIENTS} (each client needs at least one sample)")
        if self.environment_seed not in ENVIRONMENT_SEEDS:
            raise _err("environment_seed", self.environment_seed, f"one of {', '.join(ENVIRONMENT_SEEDS)}",
                       ENVIRONMENT_SEEDS)
        if self.environment_seed == "trial" and not self.dataset.startswith(("colored-", "rotated-")):
            raise _err("environment_seed", self.environment_seed, "trial only for the datasets built from a pool "
                       f"(colored-*, rotated-*); dataset {self.dataset!r} is read as it is")
        if self.partition is not None and self.partition not in PARTITIONS:
            raise _err("partition", self.partition, f"one of {', '.join(PARTITIONS)}", PARTITIONS)
        for name in ("lr_source", "lr_target"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                      and v > 0):
                raise _err(name, v, "a finite number > 0")
        for name in ("batch_source", "batch_target", "target_labelled", "samples_per_client",
                     "test_samples"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise _err(name, v, "a positive integer")
        if self.target_fraction is not None and not (isinstance(self.target_fraction, (int, float)) and not isinstance(
                self.target_fraction, bool) and 0.0 < self.target_fraction <= 1.0):
            raise _err("target_fraction", self.target_fraction, "a share in (0, 1]")
        if self.target_labelled is not None and self.target_fraction is not None:
            raise _err("target_labelled", self.target_labelled, "give target_labelled or target_fraction, not both")
        if not isinstance(self.eval_noise, tuple):  # a list from JSON, a CLI or a Tune search space
            try:
                object.__setattr__(self, "eval_noise", tuple(self.eval_noise))
            except TypeError:
                raise _err("eval_noise", self.eval_noise, "a sequence of noise levels") from None
        for v in self.eval_noise:
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
                raise _err("eval_noise", self.eval_noise, "finite noise levels >= 0")
        self._check_params()
        if not (isinstance(self.device, str) and re.fullmatch(r"cpu|cuda(:\d+)?", self.device)):
            raise _err("device", self.device, "'cpu', 'cuda' or 'cuda:<index>'")
        if self.shard_cap not in SHARD_CAPS:
            raise _err("shard_cap", self.shard_cap, f"one of {', '.join(SHARD_CAPS)}")
        if self.aggregation_impl not in ("kernel", "reference"):
            raise _err("aggregation_impl", self.aggregation_impl, "one of kernel, reference")
        if self.executor not in EXECUTORS:
            raise _err("executor", self.executor, f"one of {', '.join(EXECUTORS)}", EXECUTORS)
        if self.cpus_per_client is not None and not (
                isinstance(self.cpus_per_client, (int, float)) and not isinstance(self.cpus_per_client, bool)
                and RESOURCE_STEP <= self.cpus_per_client <= 1024):
            raise _err("cpus_per_client", self.cpus_per_client, f"a number of CPUs from {RESOURCE_STEP:g} to 1024 "
                       "(fractions allowed, in Ray's steps of 0.0001)")
        g = self.gpus_per_client
        if not (isinstance(g, (int, float)) and not isinstance(g, bool) and (g == 0 or RESOURCE_STEP <= g <= 1
                                                 or (g > 1 and float(g).is_integer()))):
            raise _err("gpus_per_client", g, f"0, a fraction in [{RESOURCE_STEP:g}, 1] or a whole number of GPUs")
        if self.clients_per_actor is not None and (not isinstance(self.clients_per_actor, int)
                                                   or isinstance(self.clients_per_actor, bool)
                                                   or self.clients_per_actor < 1):
            raise _err("clients_per_actor", self.clients_per_actor, "an integer >= 1 (or unset: pooled to the machine)")
        if self.vectorise not in VECTORISE:
            raise _err("vectorise", self.vectorise, f"one of {', '.join(VECTORISE)}", VECTORISE)
        if not isinstance(self.client_retries, int) or isinstance(self.client_retries, bool) or self.client_retries < 0:
            raise _err("client_retries", self.client_retries, "an integer >= 0")

    def _check_params(self) -> None:
        """params: {family: {field: value}}, each entry valid for its family's Params (stored as plain dicts)."""
        from fda_ray.core.registry import family_params

        if not isinstance(self.params, dict):
            raise _err("params", self.params, "a mapping of method family to its parameters")
        known = family_params()
        clean: dict[str, dict[str, Any]] = {}
        for fam, values in self.params.items():
            if fam not in known:
                raise _err("params", {fam: values}, f"families with parameters: {', '.join(known) or '(none)'}")
            if not isinstance(values, dict):
                raise _err(f"params.{fam}", values, f"a mapping of {fam}'s parameters to values")
            known[fam].build(values)  # one line naming family.field on a bad value
            if getattr(known[fam], "keywords", False):  # only what differs from the defaults: equal configs compare equal
                defaults = _keyword_defaults()
                values = {k: v for k, v in values.items() if v != defaults[k] or type(v) is not type(defaults[k])}
                if not values:
                    continue
            clean[fam] = dict(values)
        object.__setattr__(self, "params", clean)

    def family_params(self):
        """The Params of this config's method (its family's entry of `params`, validated, defaults filled: the
        family's per-config ones, Algorithm.param_defaults, then its Params defaults)."""
        from fda_ray.core.registry import ALGORITHMS

        cls = ALGORITHMS.get(self.method)
        return cls.Params.build({**cls.param_defaults(self), **self.params.get(cls.family, {})})

    def replace(self, **changes: Any) -> "RunConfig":
        return dataclasses.replace(self, **changes)

    @property
    def is_resolved(self) -> bool:
        """True for a config that `resolved()` returned (a `replace` of it is a new, unresolved config)."""
        return self.__dict__.get("_resolved", False)

    def require_resolved(self, where: str) -> "RunConfig":
        """This config, which must be resolved: the layers below a trial's boundary (fda_ray.runtime.experiment,
        partitions, executors, driver) read the config a trial resolved once, and never resolve it again."""
        if not self.is_resolved:
            raise TypeError(f"{where} takes a resolved RunConfig: resolve it once where the trial starts "
                            "(cfg.resolved()), then pass that config down")
        return self

    def resolved(self) -> "RunConfig":
        """This config with every None filled: first what the method's family fills (its Algorithm.resolve,
        e.g. the authors' oracle protocol), then its dataset's registered defaults. Done once per trial: the
        result is marked resolved, and resolving it again returns it unchanged at no cost."""
        if self.is_resolved:
            return self
        out = self._resolve()
        # Not fields: equality, to_dict and trial keys ignore them, pickling (Ray, Tune) keeps them.
        object.__setattr__(out, "_resolved", True)
        object.__setattr__(out, "_given", self)
        return out

    @property
    def given(self) -> "RunConfig":
        """The config as its user gave it, before `resolved()` filled it (resolving drops the parameters of
        other families, which the pre-flight warnings still name)."""
        return self.__dict__.get("_given", self)

    def _resolve(self) -> "RunConfig":
        from fda_ray.core.registry import ALGORITHMS, DATASETS

        d = DATASETS.get(self.dataset).defaults
        fill: dict[str, Any] = dict(ALGORITHMS.get(self.method).resolve(self, d))
        for name in ("model", "partition", "lr_source", "lr_target", "batch_source", "batch_target", "num_sources",
                     "warmup_rounds", "shuffle", "drop_last", "data_augmentation"):
            if getattr(self, name) is None and name not in fill:
                fill[name] = d[name]
        if self.model_weights is None and (self.model or d["model"]) == d["model"] and d["model_weights"]:
            fill["model_weights"] = d["model_weights"]  # the dataset's pretrained model, unless another is chosen
        if fill.get("num_sources", self.num_sources) is None:  # DomainBed: one source per other environment
            from fda_ray.core.registry import count_environments

            fill["num_sources"] = count_environments(self.dataset, self.data_dir) - 1
        partition = self.partition or fill.get("partition") or d["partition"]
        if self.target_labelled is None and self.target_fraction is None:
            if partition in PARTITION_LABELLED_FRACTION:
                fill["target_fraction"] = PARTITION_LABELLED_FRACTION[partition]
            else:
                fill["target_labelled"] = d["target_labelled"]
                fill["target_fraction"] = d["target_fraction"]
        if partition == "domain_shards":
            if self.target_labelled_per_class is None:
                fill["target_labelled_per_class"] = 3
            if self.source_envs is None:
                from fda_ray.core.registry import count_environments

                fill["source_envs"] = tuple(e for e in range(count_environments(self.dataset, self.data_dir))
                                            if e != self.test_env)
        if partition == "domain_clients":
            if self.source_envs is None and "source_envs" not in fill:
                fill["source_envs"] = (0,)
            if self.clients_per_domain is None and "clients_per_domain" not in fill:
                fill["clients_per_domain"] = CLIENTS_PER_DOMAIN.get(self.dataset, 8)
        if self.vectorise == "auto":
            # Off wherever it was measured (docs/ray-and-clusters.md, "Vectorised cohorts"): on an H100 the cohort of 10
            # simple-CNN clients took 1.04 s a round against the loop's 0.74 s in one actor; on 2 CPU cores at
            # 1 thread it was within 6 % of the loop. "on" stays a choice (2 threads: 0.79x the loop).
            fill["vectorise"] = "off"
        if self.aux_alpha is None and "aux_alpha" not in fill:
            fill["aux_alpha"] = ALGORITHMS.get(self.method).default_aux_alpha
        # Only the method's family's parameters, every field filled: a run records what it used, and a
        # parameter of another family (ignored, with a warning) does not change a trial's identity. The keyword
        # family's (the FDA family's beta, projection, ...) are every config's: other families read them too
        # (fda_ray.algorithms.fda.params).
        cls, kw = ALGORITHMS.get(self.method), keyword_params()
        params: dict[str, dict[str, Any]] = {}
        if kw is None or cls.family != kw.family:
            own = self.family_params().to_dict()
            if own:
                params[cls.family] = own
        if kw is not None:
            member = cls.param_defaults(self) if cls.family == kw.family else {}
            params[kw.family] = kw.resolved(self, d, member).to_dict()
        fill["params"] = params
        return dataclasses.replace(self, **fill)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data; the keyword family's parameters at the top level (beta, projection, ...),
        where every record's config has held them: RunConfig(**d) builds the same config again."""
        out = dataclasses.asdict(self)
        out["eval_noise"] = list(self.eval_noise)
        if self.source_envs is not None:
            out["source_envs"] = list(self.source_envs)
        kw = keyword_params()
        out["params"] = {fam: dict(v) for fam, v in self.params.items() if kw is None or fam != kw.family}
        out.update({name: getattr(self, name) for name in keyword_names()})
        return out

    def __getattr__(self, name: str) -> Any:
        """The keyword family's parameters by their own names (cfg.beta: params["fda"]["beta"], or its default).
        Python calls this only for a name that is no field or attribute."""
        if name.startswith("_") or name == "params":  # (unpickling looks up __setstate__ before params exists)
            raise AttributeError(name)
        kw = keyword_params()
        if kw is None or name not in keyword_names():
            raise AttributeError(f"'RunConfig' object has no attribute {name!r}")
        return self.__dict__.get("params", {}).get(kw.family, {}).get(name, _keyword_defaults()[name])


_fields_init = RunConfig.__init__


def _init(self: RunConfig, *args: Any, **kwargs: Any) -> None:
    """RunConfig(beta=0.3, ...): the keyword family's parameters by their own names go to params[family] (a
    keyword given wins over the same name in `params`: dataclasses.replace(cfg, beta=0.3) hands both)."""
    names = keyword_names() if kwargs else ()
    given = {k: kwargs.pop(k) for k in [k for k in kwargs if k in names]}
    if given:
        fam = keyword_params().family
        params = kwargs.get("params") or {}
        if isinstance(params, dict):  # (anything else is the params check's one-line error)
            own = params.get(fam) or {}
            if isinstance(own, dict) and own:
                keyword_params().build(own)  # a bad value that the keyword replaces is still bad input: one line
            kwargs["params"] = {**params, fam: {**(own if isinstance(own, dict) else {}), **given}}
    _fields_init(self, *args, **kwargs)


RunConfig.__init__ = _init  # type: ignore[method-assign]
