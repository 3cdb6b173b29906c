"""Partitions and shifts (build_setting) on a tiny hand-built Split whose samples carry their own index."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fda_ray.core.config import RunConfig
from fda_ray.data.base import Split, add_noise
from fda_ray.runtime.partitions import LABEL_SHIFT_SOURCE_CLASSES, LABEL_SHIFT_TARGET_CLASSES, build_setting

N_TRAIN, N_TEST = 1000, 200


def _images(n: int, offset: int) -> torch.Tensor:
    x = torch.zeros(n, 1, 28, 28)
    x[:, 0, 0, 0] = torch.arange(n, dtype=torch.float32) + offset  # sample id (exact in float32)
    return x


@pytest.fixture(scope="module")
def split() -> Split:
    ytr = torch.from_numpy(np.random.default_rng(0).permutation(np.arange(N_TRAIN) % 10).astype(np.int64))
    yte = torch.arange(N_TEST, dtype=torch.int64) % 10
    # test ids start at 10000 so train and test samples can be told apart
    return Split(_images(N_TRAIN, 0), ytr, _images(N_TEST, 10000), yte, num_classes=10)


def ids(pair) -> list[int]:
    return pair[0][:, 0, 0, 0].long().tolist()


def classes(pair) -> set[int]:
    return set(pair[1].tolist())


def check_pairs_consistent(split: Split, pair) -> None:
    """Each (x, y) in a setting is rows of the split: y matches the label of the row the id names."""
    x, y = pair
    assert len(x) == len(y)
    i = x[:, 0, 0, 0].long()
    if len(i) and int(i.min()) >= 10000:
        assert torch.equal(split.y_test[i - 10000], y)
    else:
        assert int(i.max()) < N_TRAIN if len(i) else True
        assert torch.equal(split.y_train[i], y)


def cfg(**kw) -> RunConfig:
    return RunConfig(**{"dataset": "fashion-mnist", "method": "fedgp", **kw})


# ---------------------------------------------------------------- homo

def test_homo_shards(split):
    s = build_setting(split, cfg(partition="homo", target_labelled=30).resolved())
    assert len(s.sources) == 9
    shard = N_TRAIN // 10
    groups = [ids(p) for p in s.sources] + [ids(s.target_pool)]
    assert all(len(g) == shard for g in groups)
    flat = [i for g in groups for i in g]
    assert len(set(flat)) == len(flat) == 10 * shard  # disjoint
    assert all(0 <= i < N_TRAIN for i in flat)
    assert len(s.target_train[0]) == 30
    assert set(ids(s.target_train)) <= set(ids(s.target_pool))
    # the target's test set is the dataset's test set
    assert sorted(ids(s.target_test)) == list(range(10000, 10000 + N_TEST))
    for p in (*s.sources, s.target_train, s.target_pool, s.target_test):
        check_pairs_consistent(split, p)
    assert s.num_outputs == 10 and s.input_shape == (1, 28, 28) and s.task == "classification" and s.noise == 0.0


def test_homo_seed_determines_partition(split):
    a = build_setting(split, cfg(partition="homo", target_labelled=30, seed=1).resolved())
    b = build_setting(split, cfg(partition="homo", target_labelled=30, seed=1).resolved())
    c = build_setting(split, cfg(partition="homo", target_labelled=30, seed=2).resolved())
    assert [ids(p) for p in a.sources] == [ids(p) for p in b.sources]
    assert ids(a.target_train) == ids(b.target_train) and ids(a.target_pool) == ids(b.target_pool)
    assert [ids(p) for p in a.sources] != [ids(p) for p in c.sources]
    assert set(ids(a.target_pool)) != set(ids(c.target_pool))


def test_homo_caps(split):
    s = build_setting(split, cfg(partition="homo", target_labelled=10, samples_per_client=40, test_samples=25,
                                 batch_source=16).resolved())
    assert all(len(p[0]) == 40 for p in s.sources)
    assert len(s.target_pool[0]) == 40 and len(s.target_train[0]) == 10
    assert len(s.target_test[0]) == 25 and len(set(ids(s.target_test))) == 25
    assert all(10000 <= i < 10000 + N_TEST for i in ids(s.target_test))
    # capping keeps the start of each uncapped shard
    full = build_setting(split, cfg(partition="homo", target_labelled=10).resolved())
    for capped, whole in zip(s.sources, full.sources):
        assert ids(capped) == ids(whole)[:40]


def test_homo_target_fraction(split):
    s = build_setting(split, cfg(partition="homo", target_fraction=0.25).resolved())
    assert len(s.target_train[0]) == 25  # 25 % of the 100-sample shard


# ---------------------------------------------------------------- label shift

def test_label_shift_eta0(split):
    s = build_setting(split, cfg(partition="label_shift", eta=0.0, batch_source=16, target_fraction=0.15).resolved())
    assert len(s.sources) == 9
    src_classes = set().union(*(classes(p) for p in s.sources))
    assert src_classes == set(LABEL_SHIFT_TARGET_CLASSES) == {0, 1, 2, 3, 4, 5, 7}
    tgt = classes(s.target_train) | classes(s.target_test)
    assert tgt == set(LABEL_SHIFT_SOURCE_CLASSES) == {8, 6, 9}
    target_part = 300  # all of classes 8, 6, 9
    k = int(round(0.15 * target_part))
    assert len(s.target_train[0]) == k
    assert len(s.target_test[0]) == target_part - k
    assert not set(ids(s.target_train)) & set(ids(s.target_test))
    src_ids = [i for p in s.sources for i in ids(p)]
    assert len(src_ids) == len(set(src_ids)) == 700
    assert not set(src_ids) & (set(ids(s.target_train)) | set(ids(s.target_test)))
    # the target's test set is drawn from the training split (train ids), not the dataset's test set
    assert all(i < N_TRAIN for i in ids(s.target_test))
    for p in (*s.sources, s.target_train, s.target_test):
        check_pairs_consistent(split, p)


def test_label_shift_eta_half_mixes(split):
    s = build_setting(split, cfg(partition="label_shift", eta=0.5, batch_source=16, target_fraction=0.15).resolved())
    src_y = torch.cat([p[1] for p in s.sources])
    tgt_y = torch.cat([s.target_train[1], s.target_test[1]])
    assert set(src_y.tolist()) == set(range(10)) and set(tgt_y.tolist()) == set(range(10))
    # every class is halved (100 per class, round(0.5 * 100) = 50 on each side)
    assert torch.bincount(src_y, minlength=10).tolist() == [50] * 10
    assert torch.bincount(tgt_y, minlength=10).tolist() == [50] * 10
    assert len(s.target_train[0]) == int(round(0.15 * 500))
    assert not set(ids(s.target_train)) & set(ids(s.target_test))


def test_label_shift_eta_intermediate(split):
    s = build_setting(split, cfg(partition="label_shift", eta=0.2, batch_source=16, target_fraction=0.15).resolved())
    src_y = torch.cat([p[1] for p in s.sources])
    counts = torch.bincount(src_y, minlength=10).tolist()
    for c in LABEL_SHIFT_SOURCE_CLASSES:
        assert counts[c] == 20
    for c in LABEL_SHIFT_TARGET_CLASSES:
        assert counts[c] == 80


def test_label_shift_explicit_count_and_test_cap(split):
    s = build_setting(split, cfg(partition="label_shift", eta=0.0, batch_source=16, target_labelled=40, test_samples=50).resolved())
    assert len(s.target_train[0]) == 40 and len(s.target_test[0]) == 50
    assert not set(ids(s.target_train)) & set(ids(s.target_test))


def test_label_shift_default_labelled_share_is_15_percent(split):
    s = build_setting(split, cfg(partition="label_shift", eta=0.0).resolved())
    assert len(s.target_train[0]) == int(round(0.15 * 300))


def test_label_shift_labelled_takes_all_raises(split):
    with pytest.raises(ValueError, match="target_labelled"):
        build_setting(split, cfg(partition="label_shift", eta=0.0, batch_source=16, target_labelled=300).resolved())


# ---------------------------------------------------------------- classes4

def test_classes4(split):
    s = build_setting(split, cfg(partition="classes4", target_fraction=0.1, batch_source=8).resolved())
    clients = [p[1] for p in s.sources] + [torch.cat([s.target_train[1], s.target_test[1]])]
    assert len(clients) == 10
    for i, y in enumerate(clients):
        held = set(y.tolist())
        assert 1 <= len(held) <= 4, (i, held)
        assert i % 10 in held, (i, held)
    # every training sample goes to exactly one client
    all_ids = [i for p in s.sources for i in ids(p)] + ids(s.target_train) + ids(s.target_test)
    assert sorted(all_ids) == list(range(N_TRAIN))
    target_part = len(s.target_train[0]) + len(s.target_test[0])
    assert len(s.target_train[0]) == max(2, int(round(0.1 * target_part)))
    for p in (*s.sources, s.target_train, s.target_test):
        check_pairs_consistent(split, p)


def test_classes4_reproducible(split):
    a = build_setting(split, cfg(partition="classes4", target_fraction=0.1, batch_source=8, seed=5).resolved())
    b = build_setting(split, cfg(partition="classes4", target_fraction=0.1, batch_source=8, seed=5).resolved())
    c = build_setting(split, cfg(partition="classes4", target_fraction=0.1, batch_source=8, seed=6).resolved())
    assert [ids(p) for p in a.sources] == [ids(p) for p in b.sources]
    assert [ids(p) for p in a.sources] != [ids(p) for p in c.sources]


# ---------------------------------------------------------------- source_classes (Auto-weighted FDA Table 12)

@pytest.mark.parametrize("k", [1, 3, 9])
def test_source_classes_regroups_the_sources_and_keeps_homos_target(split, k):
    s = build_setting(split, cfg(partition="source_classes", source_classes=k, target_labelled=30, batch_source=8).resolved())
    h = build_setting(split, cfg(partition="homo", target_labelled=30, batch_source=8).resolved())
    # the target's labelled set, pool and test set are homo's (the same draws come first)
    for a, b in ((s.target_train, h.target_train), (s.target_pool, h.target_pool), (s.target_test, h.target_test)):
        assert ids(a) == ids(b)
    # the sources hold homo's source samples of every class some source holds (a class no source drew, as
    # class 9 when k = 1, is left out, as in NIID-Bench), regrouped: source i holds k classes, i mod 10 among them
    held = set().union(*(classes(p) for p in s.sources))
    homo = [i for p in h.sources for i, y in zip(ids(p), p[1].tolist()) if y in held]
    assert sorted(i for p in s.sources for i in ids(p)) == sorted(homo)
    assert (k > 1) or held == set(range(9))
    for i, p in enumerate(s.sources):
        assert len(classes(p)) == k and i % 10 in classes(p), (i, classes(p))
        check_pairs_consistent(split, p)


def test_source_classes_beyond_the_datasets_classes_is_an_error(split):
    with pytest.raises(ValueError, match=r"source_classes=11 is invalid: dataset 'fashion-mnist' has 10 classes"):
        build_setting(split, cfg(partition="source_classes", source_classes=11, batch_source=8).resolved())
    with pytest.raises(ValueError, match=r"source_classes=0 is invalid"):
        cfg(partition="source_classes", source_classes=0)


# ---------------------------------------------------------------- noise

def test_add_noise_zero_is_identity():
    x = torch.rand(3, 1, 4, 4)
    assert add_noise(x, 0.0, torch.Generator().manual_seed(0)) is x
    assert add_noise(x, 0, None) is x


def test_add_noise_reproducible_and_std():
    x = torch.full((200_000,), 0.5)
    before = x.clone()
    a = add_noise(x, 0.3, torch.Generator().manual_seed(7))
    b = add_noise(x, 0.3, torch.Generator().manual_seed(7))
    c = add_noise(x, 0.3, torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(x, before)  # not in place
    assert a.dtype == x.dtype and a.shape == x.shape
    noise = a - x
    assert abs(float(noise.std()) - 0.3) < 0.005
    assert abs(float(noise.mean())) < 0.005
    assert float(a.max()) > 1.0 and float(a.min()) < 0.0  # no clipping


# ---------------------------------------------------------------- bad input

def test_target_labelled_larger_than_shard(split):
    with pytest.raises(ValueError, match="target_labelled"):
        build_setting(split, cfg(partition="homo", target_labelled=N_TRAIN // 10 + 1).resolved())


def test_batch_source_larger_than_shard(split):
    with pytest.raises(ValueError, match="batch_source"):
        build_setting(split, cfg(partition="homo", target_labelled=10, samples_per_client=20, batch_source=32).resolved())
