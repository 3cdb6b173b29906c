"""Partitions and shifts: who holds which samples, and the target's feature noise (docs/authors-code.md).

Pure functions of (Split, RunConfig): every random choice comes from a generator seeded by the trial seed
and a purpose, so a setting is the same in every process and executor.
  homo         equal random shards; 9 sources + 1 target; the target's labelled subset is a count or a
               share of its shard; its test set is the dataset's test set (Fashion-MNIST covariate shift).
  label_shift  classes {8, 6, 9} give their first eta share to the sources and the rest to the target;
               classes {0, 1, 2, 3, 4, 5, 7} the first eta share to the target and the rest to the sources;
               15 % of the target's part is labelled (config default), the rest is its test set.
  classes4     client i holds class i mod 10 plus 3 random others, each class split evenly among its
               holders; 10 % of the target's part is labelled (config default), the rest is its test set (CIFAR-10).
  source_classes  the target's shard, labelled subset and test set as in homo; the sources share the other
               shards' samples by class (Auto-weighted FDA Table 12, NIID-Bench "#label k"): source i holds class i mod 10
               plus source_classes - 1 random others, each class split evenly among its holders (a class
               no source drew is left out, as in NIID-Bench).
  domains      each source is one extra domain of the dataset (synthetic D_2..D_9); the target subsamples D_1.
  domainbed    leave one domain out (docs/methods.md; DomainBed's train.py): every environment e is split by
               misc.split_dataset into out_e (the first int(0.2 |env_e|) of a RandomState(seed_hash(seed, e))
               shuffle) and in_e (the rest); the target is environment cfg.test_env: its labelled set the first
               int(target_fraction |in_t|) of in_t reshuffled with the same seed, its test set out_t, its pool
               (the oracle's training data) in_t; every other environment, in index order, is one source
               holding in_e (out_e is DomainBed's source-side validation data, unused here). With
               cfg.faithful_domainbed_auto (the authors' auto script) the labelled set is the first
               int(target_fraction |in_t|) of the environment's own permutation and the test set 20 % of the
               rest, reshuffled.
  heldout_domain  Healthcare FDA (Sec. 5.1): domains with their own train/test tables (the medical CSVs,
               fmnist-conditions); the target is domain cfg.test_env, its labelled set target_labelled samples of a
               seeded permutation of its training table, its test set its test table; every other domain is one
               source holding its training table.
  domain_shards  FSSDA (Sec. IV-A): every source environment (cfg.source_envs) and the target environment
               cfg.test_env is split over K = num_sources devices, as equal random shards (iid) or by NIID-Bench's
               Dirichlet label skew (cfg.dirichlet_concentration), each shard capped at samples_per_client; device
               k's source client holds shard k of every source domain (`source_parts[k]`, one Pair per domain;
               `sources[k]` their concatenation); target_labelled_per_class samples of each class are drawn from
               the devices' target shards together and stay on the device holding them (`target_parts[k]`: the
               shard with label -1 on its unlabelled samples); the target's pool is every held target sample,
               the labelled first (its true labels: the oracle's data); the test set is the unlabelled ones
               (transductive, as SSDA on Office-31 is reported).
  domain_clients  FedWCA (Sec. 3, App. C.1; FedWCA): the source domain cfg.source_envs[0] is the server's
               labelled data (`sources[0]`, capped at samples_per_client x clients_per_domain, the size of a target
               domain's clients together; source-free: only the pre-training reads it); every other environment is a target domain split into cfg.clients_per_domain equal random (iid)
               shards, each capped at samples_per_client and split 64 / 16 / 20 into train / validation / test
               (FedWCA App. C.1). `client_parts[k]` = (train with every label -1: the clients have no labels; validation;
               test) and `client_domains[k]` its environment; the target's sets are their concatenations.
Validation (model selection, fda_ray.papers.selection): cfg.val_share holds out that share of the target's labelled
training samples (a permutation seeded by (seed, "validation/target"); domain_shards: of the labelled samples on
every device, whose labels are then hidden there, so they stay unlabelled training data as the rest), and
cfg.source_val_share that share of every source's samples (seeded per source; partition domainbed: of every
source environment's out-split, DomainBed's training-domain validation data, so the sources still train on their
whole in-split); the target's test set and pool are unchanged.
Noise: x + N(0, std^2), no clipping, drawn afresh every time an image is read, on target train and test only.
The oracle under the authors' protocol (cfg.baseline_protocol = "authors", docs/authors-code.md) takes the target's whole
part instead: a seeded permutation, its first 10 % the oracle's test set, the other 90 % its training set.
"""
from __future__ import annotations

import numpy as np
import torch

from fda_ray.core.registry import ALGORITHMS
from fda_ray.core.config import ORACLE_TEST_SHARE, RunConfig
from fda_ray.data.base import UNLABELLED, Pair, Split
from fda_ray.data.images import concat, take, with_augmentation
from fda_ray.data.setting import Setting
from fda_ray.data.domainbed import seed_hash, split_indices
from fda_ray.core.multitask import main_labels, main_outputs
from fda_ray.core.seeding import np_rng

LABEL_SHIFT_SOURCE_CLASSES = (8, 6, 9)  # D1: mostly target when eta is small
LABEL_SHIFT_TARGET_CLASSES = (0, 1, 2, 3, 4, 5, 7)  # D2: mostly sources when eta is small



def _take(x: torch.Tensor, y: torch.Tensor, idx: np.ndarray) -> Pair:
    t = torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64))
    return x[t], y[t]


def _labelled_count(cfg: RunConfig, pool_size: int) -> int:
    if cfg.target_labelled is not None:
        if cfg.target_labelled > pool_size:
            raise ValueError(f"target_labelled={cfg.target_labelled} is invalid: the target holds only {pool_size} samples")
        return cfg.target_labelled
    frac = cfg.target_fraction
    if frac is None:
        raise ValueError("target_labelled is invalid: give target_labelled or target_fraction")
    return max(2, int(round(frac * pool_size)))


def _cap(idx: np.ndarray, cap: int | None) -> np.ndarray:
    return idx if cap is None else idx[:cap]


def _cap_both_classes(y: torch.Tensor, idx: np.ndarray, cap: int | None, field: str, domain: str) -> np.ndarray:
    """_cap over a domain's table in its own order (Healthcare FDA's tables: the authors' are written shuffled), or a
    one-line ValueError where the cap would keep one class of the several the rows hold: a table listed class by
    class (each positive, then each negative) would train a source on one label and test on a skewed set."""
    kept = _cap(idx, cap)
    main = y if y.ndim == 1 else y[:, 0]  # (n,) or the main task's column of (n, 1 + aux tasks)
    held = torch.unique(main[torch.as_tensor(idx, dtype=torch.long)])
    if len(kept) < len(idx) and len(held) > 1:
        first = torch.unique(main[torch.as_tensor(kept, dtype=torch.long)])
        if len(first) == 1:
            raise ValueError(f"{field}={cap} is invalid for domain {domain}: its table's first {cap} rows are all of "
                             f"class {int(first[0])} (of the {len(held)} its rows hold): the table lists its rows "
                             "sorted by label; write them in a random order (datasets/prepare_chexpert.py and "
                             f"prepare_mimic.py do) or leave {field} unset")
    return kept


def homo_shards(n: int, clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Equal random shards of range(n) (the remainder n mod clients is left out, like NIID-Bench)."""
    perm = rng.permutation(n)
    size = n // clients
    return [perm[k * size : (k + 1) * size] for k in range(clients)]


def label_shift_split(labels: np.ndarray, eta: float, num_sources: int, rng: np.random.Generator
                      ) -> tuple[list[np.ndarray], np.ndarray]:
    """(source index lists, target indices) of the eta label-shift split."""
    src_parts, tgt_parts = [], []
    for c in sorted(set(LABEL_SHIFT_SOURCE_CLASSES) | set(LABEL_SHIFT_TARGET_CLASSES)):
        idx = rng.permutation(np.flatnonzero(labels == c))
        k = int(round(eta * idx.size))
        first, rest = idx[:k], idx[k:]
        if c in LABEL_SHIFT_SOURCE_CLASSES:
            src_parts.append(first)
            tgt_parts.append(rest)
        else:
            tgt_parts.append(first)
            src_parts.append(rest)
    src = rng.permutation(np.concatenate(src_parts))
    return [np.sort(p) for p in np.array_split(src, num_sources)], rng.permutation(np.concatenate(tgt_parts))


def classes4_split(labels: np.ndarray, clients: int, rng: np.random.Generator, num_classes: int = 10,
                   per_client: int = 4) -> list[np.ndarray]:
    """Client i holds class i mod num_classes plus per_client - 1 random others; classes split evenly."""
    holders: list[list[int]] = [[] for _ in range(num_classes)]
    for i in range(clients):
        own = i % num_classes
        others = rng.choice([c for c in range(num_classes) if c != own], size=per_client - 1, replace=False)
        for c in (own, *others.tolist()):
            holders[c].append(i)
    parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
    for c in range(num_classes):
        if not holders[c]:
            continue
        idx = rng.permutation(np.flatnonzero(labels == c))
        for h, chunk in zip(holders[c], np.array_split(idx, len(holders[c]))):
            parts[h].append(chunk)
    return [rng.permutation(np.concatenate(p)) if p else np.zeros(0, dtype=np.int64) for p in parts]


DIRICHLET_MIN_SIZE = 10  # NIID-Bench's min_require_size
DIRICHLET_ATTEMPTS = 1000


def dirichlet_split(labels: np.ndarray, clients: int, concentration: float, rng: np.random.Generator,
                    min_size: int = DIRICHLET_MIN_SIZE) -> list[np.ndarray]:
    """NIID-Bench's label-distribution skew ("noniid-labeldir"; FSSDA's non-iid split with its "beta" = 0.1):
    for each class, shares p ~ Dir(concentration) over the clients, zeroed for clients that already hold their
    fair share n / clients and renormalised; the class's shuffled samples are cut at those shares. Redrawn until
    every client holds >= min_size samples (min(min_size, n // clients) when the data are few). Small
    concentration: each client sees few classes; large: close to iid."""
    n = len(labels)
    if not concentration > 0:
        raise ValueError(f"dirichlet_concentration={concentration!r} is invalid: a number > 0")
    if n < clients:
        raise ValueError(f"clients={clients} is invalid: {n} samples cannot give each client one")
    need = min(min_size, n // clients)
    for _ in range(DIRICHLET_ATTEMPTS):
        parts: list[list[int]] = [[] for _ in range(clients)]
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            p = rng.dirichlet(np.full(clients, float(concentration)))
            if not (np.isfinite(p).all() and p.sum() > 0):  # numpy's gamma draws overflow (1e308: all zero)
                raise ValueError(f"dirichlet_concentration={concentration!r} is invalid: its Dirichlet draws are "
                                 "not shares (they overflow); a smaller number (1e6 is as good as iid)")
            p = np.array([q * (len(part) < n / clients) for q, part in zip(p, parts)])
            if not p.sum() > 0:  # every share fell to clients that hold their fair share already (a tiny
                break  # concentration gives a class to one client): no cut to make; this draw fails, redrawn
            p = p / p.sum()
            cuts = (np.cumsum(p) * len(idx)).astype(int)[:-1]
            for part, chunk in zip(parts, np.split(idx, cuts)):
                part.extend(chunk.tolist())
        else:
            if min(len(part) for part in parts) >= need:
                return [rng.permutation(np.asarray(part, dtype=np.int64)) for part in parts]
    raise ValueError(f"dirichlet_concentration={concentration!r} is invalid here: {DIRICHLET_ATTEMPTS} draws never gave "
                     f"each of {clients} clients {need} of the {n} samples; raise it or use fewer clients")


def oracle_split(whole: Pair, seed: int, test_share: float = ORACLE_TEST_SHARE) -> tuple[Pair, Pair]:
    """(train, test) of the authors' oracle: a permutation of the target's whole part, the first
    int(test_share * n) samples its test set and the rest its training set (oracle_noniid.py)."""
    x, y = whole
    n = int(x.shape[0])
    k = int(test_share * n)
    if k < 1 or k >= n:
        raise ValueError(f"samples_per_client={n} is invalid for the oracle: its test share {test_share:g} of the "
                         f"target's {n} samples must hold at least one sample and leave one to train on")
    perm = np_rng(seed, purpose="oracle-split").permutation(n)
    return _take(x, y, perm[k:]), _take(x, y, perm[:k])


HOLDOUT_FRACTION = 0.2  # DomainBed's --holdout_fraction: each environment's out-split


def _check_held_out(split: Split, cfg: RunConfig, kind: str) -> None:
    """cfg.test_env names one of the split's environments, and the others are cfg.num_sources sources."""
    envs = split.environments
    listing = ", ".join(f"{i} {n}" for i, n in enumerate(split.env_names))
    if cfg.test_env >= len(envs):
        raise ValueError(f"test_env={cfg.test_env} is invalid: dataset {cfg.dataset!r} has {kind} {listing}")
    if cfg.num_sources != len(envs) - 1:
        raise ValueError(f"num_sources={cfg.num_sources} is invalid: holding out one of {cfg.dataset!r}'s {kind} "
                         f"({listing}) leaves {len(envs) - 1} sources")


def domainbed_split(split: Split, cfg: RunConfig) -> tuple[tuple[Pair, ...], Pair, Pair, Pair, tuple[Pair, ...]]:
    """(sources, target's labelled set, target's in-split, target's test set, the sources' out-splits) of
    leave-one-domain-out (the out-splits: DomainBed's training-domain validation data, never trained on)."""
    envs, names = split.environments, split.env_names
    if not envs:
        raise ValueError(f"partition='domainbed' is invalid for dataset {cfg.dataset!r}: it has no environments "
                         "(DomainBed datasets: colored-fmnist, rotated-fmnist, vlcs, ...)")
    _check_held_out(split, cfg, "environments")
    frac = cfg.target_fraction
    sources: list[Pair] = []
    outs: list[Pair] = []
    target: tuple[Pair, Pair, Pair] | None = None
    for e, (x, y) in enumerate(envs):
        n = len(y)
        out_idx, in_idx = split_indices(n, int(n * HOLDOUT_FRACTION), seed_hash(cfg.seed, e))
        if e != cfg.test_env:
            in_idx = _cap(in_idx, cfg.samples_per_client)
            sources.append((take(with_augmentation(x, bool(cfg.data_augmentation)), in_idx), y[in_idx]))
            outs.append((take(x, out_idx), y[out_idx]))
            continue
        if cfg.target_labelled is not None:
            k = cfg.target_labelled
            if k > len(in_idx):
                raise ValueError(f"target_labelled={k} is invalid: environment {names[e]}'s in-split holds "
                                 f"{len(in_idx)} samples")
        else:
            k = int(len(in_idx) * (frac if frac is not None else 0.0))
            if k < 1:
                raise ValueError(f"target_fraction={frac} is invalid: it labels {len(in_idx)} x {frac} < 1 sample of "
                                 f"environment {names[e]}'s in-split")
        if cfg.faithful_domainbed_auto:
            # The authors' auto script: the labelled set is the first k of the environment's own permutation
            # (the one whose first 20 % is the static runs' test set), the test set 20 % of the rest, re-split.
            labelled, rest = split_indices(n, k, seed_hash(cfg.seed, e))
            test_pos, _ = split_indices(len(rest), int(len(rest) * HOLDOUT_FRACTION), seed_hash(cfg.seed, e))
            test = _cap(rest[test_pos], cfg.test_samples)
        else:
            uda, _ = split_indices(len(in_idx), k, seed_hash(cfg.seed, e))  # DomainBed's uda split of in_t
            labelled = in_idx[uda]
            test = _cap(out_idx, cfg.test_samples)
        pool = _cap(in_idx, cfg.samples_per_client)
        target = ((take(x, labelled), y[labelled]), (take(x, pool), y[pool]), (take(x, test), y[test]))
    assert target is not None
    return (tuple(sources), *target, tuple(outs))


def heldout_domain_split(split: Split, cfg: RunConfig) -> tuple[tuple[Pair, ...], Pair, Pair, Pair]:
    """(sources, target's labelled set, target's training pool, target's test set) of Healthcare FDA's protocol
    (Healthcare FDA Sec. 5.1): domain cfg.test_env is the target, every other domain (in index order) one source holding
    its training table; the target's labelled set is the first target_labelled (or target_fraction of its pool)
    samples of a seeded permutation of its training table, its test set its test table, or, for a domain
    without one, the rest of its training table (as an earlier version of the authors' MIMIC script, up to b323012,
    did: the unlabelled remainder). --samples-per-client and --test-samples keep a table's first rows, which must not
    be one class (_cap_both_classes)."""
    envs, tests, names = split.environments, split.env_tests, split.env_names
    _check_held_out(split, cfg, "domains")
    sources: list[Pair] = []
    for e, (x, y) in enumerate(envs):
        if e != cfg.test_env:
            idx = _cap_both_classes(y, np.arange(len(y)), cfg.samples_per_client, "samples_per_client", names[e])
            sources.append((take(with_augmentation(x, bool(cfg.data_augmentation)), idx), y[idx]))
    x, y = envs[cfg.test_env]
    perm = np_rng(cfg.seed, purpose="heldout/labelled").permutation(len(y))
    k = _labelled_count(cfg, len(y))
    if k >= len(y) and tests[cfg.test_env] is None:
        raise ValueError(f"target_labelled={k} is invalid: domain {names[cfg.test_env]} holds {len(y)} samples and "
                         "no test table, so nothing would be left to test on")
    labelled = perm[:k]
    pool = _cap_both_classes(y, np.arange(len(y)), cfg.samples_per_client, "samples_per_client", names[cfg.test_env])
    if tests[cfg.test_env] is not None:
        tx, ty = tests[cfg.test_env]
        t_idx = _cap_both_classes(ty, np.arange(len(ty)), cfg.test_samples, "test_samples", names[cfg.test_env])
        test = (take(tx, t_idx), ty[t_idx])
    else:
        t_idx = _cap(perm[k:], cfg.test_samples)
        test = (take(x, t_idx), y[t_idx])
    return tuple(sources), (take(x, labelled), y[labelled]), (take(x, pool), y[pool]), test


def domain_shards_split(split: Split, cfg: RunConfig) -> tuple[tuple[tuple[Pair, ...], ...], tuple[Pair, ...],
                                                                 Pair, Pair, Pair]:
    """(source_parts, target_parts, target's labelled set, its pool, its test set) of FSSDA's protocol (module
    docstring, domain_shards). Each domain's shards are drawn from a generator seeded by (seed, domain)."""
    envs, names = split.environments, split.env_names
    if not envs:
        raise ValueError(f"partition='domain_shards' is invalid for dataset {cfg.dataset!r}: it has no environments "
                         "(datasets with domains: fmnist-5, office31, pacs, ...)")
    listing = ", ".join(f"{i} {n}" for i, n in enumerate(names))
    for field, e in [("test_env", cfg.test_env)] + [("source_envs", e) for e in cfg.source_envs]:
        if e >= len(envs):
            raise ValueError(f"{field}={e} is invalid: dataset {cfg.dataset!r} has environments {listing}")
    k_dev = cfg.num_sources
    for e in (*cfg.source_envs, cfg.test_env):  # before the devices' lists are built (a huge count: memory)
        if len(envs[e][1]) < k_dev:
            raise ValueError(f"num_sources={k_dev} is invalid: at most {len(envs[e][1])} here (environment {names[e]} "
                             f"holds {len(envs[e][1])} samples; each device needs at least one)")

    def labels_of(e: int) -> np.ndarray:
        return main_labels(envs[e][1], split.aux_tasks).numpy()  # (n_e,) the main task's labels

    def shards(e: int) -> list[np.ndarray]:
        y = labels_of(e)  # (n_e,)
        within = np.arange(len(y))  # the domain's samples the split shares out
        if cfg.shard_cap == "domain" and cfg.samples_per_client is not None:
            # the domain's cap before the split (its own seeded draw: the split's generator is the same as with
            # shard_cap device), so the Dirichlet shares keep their sizes: FSSDA's non-iid devices differ in size
            cap_rng = np_rng(cfg.seed, purpose=f"domain_shards/{e}/cap")
            within = np.sort(cap_rng.permutation(len(y))[: cfg.samples_per_client * k_dev])
        rng = np_rng(cfg.seed, purpose=f"domain_shards/{e}")
        if cfg.dirichlet_concentration is None:
            if len(within) < k_dev:
                raise ValueError(f"num_sources={k_dev} is invalid: environment {names[e]} holds {len(y)} samples")
            parts = homo_shards(len(within), k_dev, rng)
        else:
            parts = dirichlet_split(y[within], k_dev, cfg.dirichlet_concentration, rng)
        if cfg.shard_cap == "domain":
            return [within[p] for p in parts]
        return [_cap(p, cfg.samples_per_client) for p in parts]

    source_parts = [[] for _ in range(k_dev)]
    for e in cfg.source_envs:
        x, y = envs[e]
        x = with_augmentation(x, bool(cfg.data_augmentation))  # (image files: the sources' reads are augmented)
        for k, idx in enumerate(shards(e)):
            source_parts[k].append((take(x, idx), y[idx]))
    x, y = envs[cfg.test_env]
    t_shards = shards(cfg.test_env)
    held = np.concatenate(t_shards)
    labels = labels_of(cfg.test_env)
    rng = np_rng(cfg.seed, purpose="domain_shards/labelled")
    chosen = [rng.permutation(held[labels[held] == c])[: cfg.target_labelled_per_class]
              for c in range(split.num_classes)]
    labelled = np.sort(np.concatenate(chosen))
    unlabelled = np.setdiff1d(held, labelled)
    if unlabelled.size == 0:
        raise ValueError(f"target_labelled_per_class={cfg.target_labelled_per_class} is invalid: it labels every "
                         f"target sample, leaving none to test on")
    target_parts = []
    for idx in t_shards:
        yk = y[idx].clone()
        yk[torch.from_numpy(~np.isin(idx, labelled))] = UNLABELLED
        target_parts.append((take(x, idx), yk))
    pool = np.concatenate([labelled, unlabelled])
    test = _cap(unlabelled, cfg.test_samples)
    return (tuple(tuple(p) for p in source_parts), tuple(target_parts), (take(x, labelled), y[labelled]),
            (take(x, pool), y[pool]), (take(x, test), y[test]))


CLIENT_SPLIT = (0.64, 0.16)  # a FedWCA client's train and validation shares; the test split is the rest (20 %)
MIN_CLIENT_SAMPLES = 7  # the fewest that leave a client 4 train, 1 validation and 2 test samples


def domain_clients_split(split: Split, cfg: RunConfig) -> tuple[Pair, tuple[tuple[Pair, Pair, Pair], ...],
                                                                 tuple[int, ...]]:
    """(the source domain's data, per target client (train unlabelled, validation, test), each client's domain) of
    FedWCA's protocol (module docstring, domain_clients). A domain's shards come from a generator seeded by (seed,
    domain), a client's split from one seeded by (seed, domain, client)."""
    envs, names = split.environments, split.env_names
    if not envs:
        raise ValueError(f"partition='domain_clients' is invalid for dataset {cfg.dataset!r}: it has no environments "
                         "(datasets with domains: fmnist-5, digit-five, pacs, office-home, ...)")
    listing = ", ".join(f"{i} {n}" for i, n in enumerate(names))
    if len(cfg.source_envs) != 1 or cfg.source_envs[0] >= len(envs):
        raise ValueError(f"source_envs={list(cfg.source_envs)} is invalid: one source domain of dataset "
                         f"{cfg.dataset} (environments {listing})")
    src = cfg.source_envs[0]
    x, y = envs[src]
    cap = None if cfg.samples_per_client is None else cfg.samples_per_client * cfg.clients_per_domain
    keep = np.sort(_cap(np_rng(cfg.seed, purpose="domain_clients/source").permutation(len(y)), cap))
    source = _take_pair(with_augmentation(x, bool(cfg.data_augmentation)), y, keep)
    parts, domains = [], []
    for e in range(len(envs)):
        if e == src:
            continue
        x, y = envs[e]
        per = len(y) // cfg.clients_per_domain
        if min(per, cfg.samples_per_client or per) < MIN_CLIENT_SAMPLES:
            field, value = (("samples_per_client", cfg.samples_per_client) if per >= MIN_CLIENT_SAMPLES
                            else ("clients_per_domain", cfg.clients_per_domain))
            raise ValueError(f"{field}={value} is invalid: a client of environment {names[e]} ({len(y)} samples) "
                             f"would hold {min(per, cfg.samples_per_client or per)}, and its 64/16/20 split needs "
                             f"{MIN_CLIENT_SAMPLES}")
        for k, shard in enumerate(homo_shards(len(y), cfg.clients_per_domain,
                                              np_rng(cfg.seed, purpose=f"domain_clients/{e}"))):
            idx = np_rng(cfg.seed, purpose=f"domain_clients/{e}/{k}").permutation(_cap(shard, cfg.samples_per_client))
            n_train, n_val = int(CLIENT_SPLIT[0] * len(idx)), int(CLIENT_SPLIT[1] * len(idx))
            tr, va, te = np.sort(idx[:n_train]), np.sort(idx[n_train:n_train + n_val]), np.sort(idx[n_train + n_val:])
            unlabelled = torch.full_like(y[torch.from_numpy(tr)], UNLABELLED)
            parts.append(((take(x, tr), unlabelled), _take_pair(x, y, va), _take_pair(x, y, te)))
            domains.append(e)
    return source, tuple(parts), tuple(domains)


def _take_pair(x, y: torch.Tensor, idx: np.ndarray) -> Pair:
    return take(x, idx), y[torch.from_numpy(idx)]


def build_setting(split: Split, cfg: RunConfig) -> Setting:
    """The FDA setting of a resolved config on a loaded dataset."""
    cfg.require_resolved("build_setting")
    rng = np_rng(cfg.seed, purpose="partition")
    n_src = cfg.num_sources
    if cfg.partition == "heldout_domain" and not split.env_tests:
        raise ValueError(f"partition='heldout_domain' is invalid for dataset {cfg.dataset!r}: it has no domains "
                         "with their own train/test tables (fmnist-conditions, the medical CSV datasets)")
    if split.env_tests and cfg.partition != "heldout_domain":
        raise ValueError(f"partition={cfg.partition!r} is invalid for dataset {cfg.dataset!r}: its domains "
                         f"({', '.join(split.env_names)}) come with train/test tables; use partition 'heldout_domain'")
    if split.environments and not split.env_tests and cfg.partition not in ("domainbed", "domain_shards",
                                                                            "domain_clients"):
        raise ValueError(f"partition={cfg.partition!r} is invalid for dataset {cfg.dataset!r}: its data are "
                         f"DomainBed environments ({', '.join(split.env_names)}); use partition 'domainbed' (leave one "
                         "domain out) or 'domain_shards' (domains split over devices, FSSDA)")
    ytr = main_labels(split.y_train, split.aux_tasks).numpy()
    if cfg.partition in ("homo", "source_classes", "label_shift", "classes4") and n_src + 1 > len(ytr):
        # before any list of n_src shards is built: a count the data cannot give would otherwise fill the memory
        raise ValueError(f"num_sources={n_src} is invalid: at most {len(ytr) - 1} for dataset {cfg.dataset!r} (its "
                         f"{len(ytr)} training samples over the sources and the target; each client needs at least "
                         "one sample)")
    if cfg.partition in ("homo", "source_classes"):
        shards = homo_shards(len(ytr), n_src + 1, rng)
        if cfg.partition == "homo":
            src_idx = [_cap(s, cfg.samples_per_client) for s in shards[:n_src]]
        else:  # the same target as homo (the same draws first); the sources' samples regrouped by class
            if cfg.source_classes > split.num_classes:
                raise ValueError(f"source_classes={cfg.source_classes} is invalid: dataset {cfg.dataset!r} has "
                                 f"{split.num_classes} classes")
            pool_src = np.concatenate(shards[:n_src])
            parts = classes4_split(ytr[pool_src], n_src, rng, num_classes=split.num_classes,
                                   per_client=cfg.source_classes)
            src_idx = [_cap(pool_src[p], cfg.samples_per_client) for p in parts]
        pool = _cap(shards[n_src], cfg.samples_per_client)
        k = _labelled_count(cfg, pool.size)
        target_train = _take(split.x_train, split.y_train, pool[:k])
        target_pool = _take(split.x_train, split.y_train, pool)
        whole = target_pool
        test_idx = _cap(np_rng(cfg.seed, purpose="test").permutation(len(split.y_test)), cfg.test_samples)
        target_test = _take(split.x_test, split.y_test, np.sort(test_idx))
        sources = tuple(_take(split.x_train, split.y_train, s) for s in src_idx)
    elif cfg.partition in ("label_shift", "classes4"):
        if cfg.partition == "label_shift":
            src_idx, tgt = label_shift_split(ytr, cfg.eta, n_src, rng)
        else:
            parts = classes4_split(ytr, n_src + 1, rng, num_classes=split.num_classes)
            src_idx, tgt = parts[:n_src], parts[n_src]
        src_idx = [_cap(s, cfg.samples_per_client) for s in src_idx]
        tgt = _cap(tgt, cfg.samples_per_client)
        k = _labelled_count(cfg, tgt.size)
        labelled, test = tgt[:k], _cap(tgt[k:], cfg.test_samples)
        if test.size == 0:
            raise ValueError("target_labelled is invalid: it leaves no target samples for the test set")
        sources = tuple(_take(split.x_train, split.y_train, s) for s in src_idx)
        target_train = _take(split.x_train, split.y_train, labelled)
        target_pool = target_train  # the rest of the target's part is its test set
        target_test = _take(split.x_train, split.y_train, test)
        whole = _take(split.x_train, split.y_train, tgt)
    elif cfg.partition == "domainbed":
        sources, target_train, target_pool, target_test, source_outs = domainbed_split(split, cfg)
        whole = target_pool
    elif cfg.partition == "heldout_domain":
        sources, target_train, target_pool, target_test = heldout_domain_split(split, cfg)
        whole = target_pool
    elif cfg.partition == "domain_shards":
        source_parts, target_parts, target_train, target_pool, target_test = domain_shards_split(split, cfg)
        sources = tuple((concat([x for x, _ in parts]), torch.cat([y for _, y in parts])) for parts in source_parts)
        whole = target_pool
    elif cfg.partition == "domain_clients":
        source, client_parts, client_domains = domain_clients_split(split, cfg)
        sources = (source,)
        target_train = (concat([p[0][0] for p in client_parts]), torch.cat([p[0][1] for p in client_parts]))
        target_pool = target_train
        target_test = (concat([p[2][0] for p in client_parts]), torch.cat([p[2][1] for p in client_parts]))
        whole = target_pool
    elif cfg.partition == "domains":
        if len(split.domains) < n_src:
            raise ValueError(f"num_sources={n_src} is invalid: dataset {cfg.dataset!r} has {len(split.domains)} source domains")
        sources = tuple((x[: cfg.samples_per_client], y[: cfg.samples_per_client]) for x, y in split.domains[:n_src])
        perm = rng.permutation(len(split.y_train))
        k = _labelled_count(cfg, perm.size)
        target_train = _take(split.x_train, split.y_train, perm[:k])
        target_pool = (split.x_train, split.y_train)
        target_test = (split.x_test[: cfg.test_samples], split.y_test[: cfg.test_samples])
        whole = target_pool
    else:  # unreachable: RunConfig validates the partition
        raise ValueError(f"partition={cfg.partition!r} is invalid")
    algorithm = ALGORITHMS.get(cfg.method)
    # DomainBed's oracle trains on the target's in-split and is tested on its out-split, as every method is.
    # So does Healthcare FDA's: "fully supervised training on the target domain", tested on its test table.
    if algorithm.oracle_split and cfg.baseline_protocol == "authors" and cfg.partition not in (
            "domainbed", "heldout_domain", "domain_shards", "domain_clients"):
        target_train, target_test = oracle_split(whole, cfg.seed)
        target_pool = target_train
    target_val = source_val = None
    if cfg.val_share is not None:
        if cfg.partition == "domain_clients":
            raise ValueError(f"val_share={cfg.val_share!r} is invalid for partition 'domain_clients': its clients "
                             "hold their own validation splits (val_accuracy is reported without it)")
        if cfg.partition == "domain_shards":
            target_parts, target_train, target_val = hold_out_labelled(target_parts, cfg.val_share, cfg.seed)
        else:
            target_train, target_val = hold_out(target_train, cfg.val_share, cfg.seed, "validation/target",
                                                "val_share", "the target's labelled samples")
    if cfg.source_val_share is not None:
        if cfg.partition in ("domain_shards", "domain_clients"):
            raise ValueError(f"source_val_share={cfg.source_val_share!r} is invalid for partition "
                             f"{cfg.partition!r}: its sources are split by domain (use val_share)")
        if cfg.partition == "domainbed":  # a share of DomainBed's own out-splits: the sources train on all of in_e
            vals = [hold_out(p, cfg.source_val_share, cfg.seed, f"validation/source{i}", "source_val_share",
                             f"source {i}'s out-split")[1] for i, p in enumerate(source_outs)]
        else:
            held = [hold_out(p, cfg.source_val_share, cfg.seed, f"validation/source{i}", "source_val_share",
                             f"source {i}'s samples") for i, p in enumerate(sources)]
            sources = tuple(train for train, _ in held)
            vals = [v for _, v in held]
        source_val = (concat([v[0] for v in vals]), torch.cat([v[1] for v in vals]))
    for i, (x, _) in enumerate(sources):
        if len(x) < cfg.batch_source and cfg.drop_last:
            raise ValueError(f"batch_source={cfg.batch_source} is invalid: source {i} holds only {len(x)} samples")
    n_target = len(target_train[0])
    if n_target <= cfg.batch_target and algorithm.min_target_steps() >= 2:  # (the target keeps its last partial batch)
        raise ValueError(f"batch_target={cfg.batch_target} is invalid: auto-weighting needs >= 2 target steps a "
                         f"round, and the target's {n_target} labelled training samples give 1; a batch_target below "
                         f"{n_target}, or more labelled target samples")
    if cfg.partition != "domain_shards":
        source_parts, target_parts = (), ()
    if cfg.partition != "domain_clients":
        client_parts, client_domains = (), ()
    return Setting(sources, target_train, target_pool, target_test, float(cfg.noise),
                   main_outputs(split.task, split.num_classes), split.input_shape, split.task, split.aux_tasks,
                   source_parts, target_parts, client_parts, client_domains, target_val, source_val)


def hold_out(pair: Pair, share: float, seed: int, purpose: str, field: str, what: str) -> tuple[Pair, Pair]:
    """(the rest, the held-out share) of `pair`: round(share x n) samples (at least 1) of a permutation seeded by
    (seed, purpose); each part keeps the samples' original order. At least one sample must stay to train on."""
    x, y = pair
    n = len(y)
    k = max(1, int(round(share * n)))
    if k >= n:
        raise ValueError(f"{field}={share!r} is invalid: it would hold out all {n} of {what}")
    perm = np_rng(seed, purpose=purpose).permutation(n)
    keep, val = np.sort(perm[k:]), np.sort(perm[:k])
    return (take(x, keep), y[torch.from_numpy(keep)]), (take(x, val), y[torch.from_numpy(val)])


def hold_out_labelled(parts: tuple[Pair, ...], share: float, seed: int) -> tuple[tuple[Pair, ...], Pair, Pair]:
    """domain_shards: (the devices' target shards with the held-out labels hidden (-1), the labelled samples left,
    the held-out ones). The labelled samples are numbered device by device and the held-out share drawn as in
    hold_out."""
    where = [(d, int(i)) for d, (_, y) in enumerate(parts) for i in torch.nonzero(y != UNLABELLED).flatten()]
    n = len(where)
    k = max(1, int(round(share * n)))
    if k >= n:
        raise ValueError(f"val_share={share!r} is invalid: it would hold out all {n} labelled target samples")
    perm = np_rng(seed, purpose="validation/target").permutation(n)
    held = {where[j] for j in perm[:k]}
    new_parts, val_x, val_y, lab_x, lab_y = [], [], [], [], []
    for d, (x, y) in enumerate(parts):
        y = y.clone()
        hide = [i for i in range(len(y)) if (d, i) in held]
        keep = [i for i in range(len(y)) if y[i] != UNLABELLED and (d, i) not in held]
        if hide:
            idx = np.asarray(hide)
            val_x.append(take(x, idx))
            val_y.append(y[torch.from_numpy(idx)].clone())
            y[torch.from_numpy(idx)] = UNLABELLED
        if keep:
            idx = np.asarray(keep)
            lab_x.append(take(x, idx))
            lab_y.append(y[torch.from_numpy(idx)])
        new_parts.append((x, y))
    return tuple(new_parts), (concat(lab_x), torch.cat(lab_y)), (concat(val_x), torch.cat(val_y))
