"""ParamLayout: flat vector <-> state dict round trips, offsets, layer slices, size checks."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from fda_ray.core.layout import ParamLayout
from fda_ray.train.models import build_model


def bn_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))


def test_simple_cnn_layout_and_round_trip():
    torch.manual_seed(0)
    src = build_model("simple_cnn", (1, 28, 28), 10)
    torch.manual_seed(1)
    dst = build_model("simple_cnn", (1, 28, 28), 10)
    layout = ParamLayout.from_model(src)
    state = src.state_dict()
    assert layout.names == tuple(state)  # every tensor of the simple CNN is a float parameter
    assert layout.num_layers == 10
    assert layout.shapes == tuple(tuple(t.shape) for t in state.values())
    assert int(layout.offsets[0]) == 0
    m = sum(p.numel() for p in src.parameters())
    assert int(layout.offsets[-1]) == layout.size == m
    assert layout.offsets.shape == (layout.num_layers + 1,) and layout.offsets.dtype == torch.int64
    assert bool((layout.offsets[1:] > layout.offsets[:-1]).all())

    flat = layout.flatten_model(src)
    assert flat.shape == (m,) and flat.dtype == torch.float32
    assert not torch.equal(flat, layout.flatten_model(dst))
    w = dst.conv1.weight
    layout.load_into(dst, flat)
    assert dst.conv1.weight is w  # in place
    assert torch.equal(layout.flatten_model(dst), flat)
    for name, t in dst.state_dict().items():
        assert torch.equal(t, state[name]), name


def test_layer_of_slices():
    model = build_model("simple_cnn", (3, 32, 32), 10)
    layout = ParamLayout.from_model(model)
    flat = layout.flatten_model(model)
    state = model.state_dict()
    prev_stop = 0
    for name in layout.names:
        sl = layout.layer_of(name)
        assert sl.start == prev_stop
        assert sl.stop - sl.start == state[name].numel()
        assert torch.equal(flat[sl], state[name].reshape(-1))
        prev_stop = sl.stop
    assert prev_stop == layout.size
    assert layout.layer_of("fc1.weight").stop - layout.layer_of("fc1.weight").start == 120 * 400
    with pytest.raises(ValueError):
        layout.layer_of("no.such.tensor")


def test_batchnorm_layout_round_trip():
    torch.manual_seed(0)
    src = bn_model()
    with torch.no_grad():
        src[1].running_mean.uniform_(-1, 1)
        src[1].running_var.uniform_(0.5, 2)
        src[1].weight.uniform_(0.5, 2)
    src[1].num_batches_tracked.fill_(7)
    torch.manual_seed(1)
    dst = bn_model()
    dst[1].num_batches_tracked.fill_(3)

    layout = ParamLayout.from_model(src)
    assert "1.running_mean" in layout.names and "1.running_var" in layout.names
    assert "1.num_batches_tracked" not in layout.names
    assert len(layout.names) == len(src.state_dict()) - 1
    expected = sum(t.numel() for n, t in src.state_dict().items() if n != "1.num_batches_tracked")
    assert layout.size == expected == int(layout.offsets[-1]) and int(layout.offsets[0]) == 0

    flat = layout.flatten_model(src)
    assert torch.equal(flat[layout.layer_of("1.running_mean")], src[1].running_mean)
    layout.load_into(dst, flat)
    assert torch.equal(dst[1].running_mean, src[1].running_mean)
    assert torch.equal(dst[1].running_var, src[1].running_var)
    assert torch.equal(dst[0].weight, src[0].weight) and torch.equal(dst[4].bias, src[4].bias)
    assert int(dst[1].num_batches_tracked) == 3  # the target keeps its own counter
    assert torch.equal(layout.flatten_model(dst), flat)


def test_from_state_dict_matches_from_model():
    model = bn_model()
    a = ParamLayout.from_model(model)
    b = ParamLayout.from_state_dict(model.state_dict())
    assert a.names == b.names and a.shapes == b.shapes and torch.equal(a.offsets, b.offsets)


@pytest.mark.parametrize("delta", [-1, 1])
def test_load_into_wrong_size(delta):
    model = bn_model()
    layout = ParamLayout.from_model(model)
    before = layout.flatten_model(model)
    with pytest.raises(ValueError, match=str(layout.size)):
        layout.load_into(model, torch.zeros(layout.size + delta))
    assert torch.equal(layout.flatten_model(model), before)  # nothing written


def test_load_into_wrong_rank():
    model = bn_model()
    layout = ParamLayout.from_model(model)
    with pytest.raises(ValueError):
        layout.load_into(model, torch.zeros(layout.size, 1))
