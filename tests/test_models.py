"""Every registered model builds on a tiny input and gives finite (batch, outputs); ResNet-18 local weights."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from fda_ray.train.models import MODELS, build_model

NUM_OUTPUTS = 10

# name -> input shapes to build it on
TINY_INPUTS: dict[str, list[tuple[int, ...]]] = {
    "simple_cnn": [(1, 28, 28), (3, 32, 32)],
    "mnist_cnn": [(2, 28, 28), (1, 28, 28)],
    "colored_mnist_cnn": [(2, 28, 28)],
    "resnet18": [(3, 32, 32)],
    "resnet50": [(3, 32, 32)],
    "resnet101": [(3, 32, 32)],
    "mlp_sigmoid": [(50,)],
    "multitask_cnn": [(1, 28, 28), (3, 32, 32)],
    "resnet18_multitask": [(3, 32, 32)],
    "shot_lenet": [(3, 28, 28), (3, 32, 32), (1, 28, 28)],
    "shot_resnet18": [(3, 32, 32)],
    "shot_resnet50": [(3, 32, 32)],
}


def test_every_tiny_input_is_registered():
    assert set(TINY_INPUTS) <= set(MODELS.names())


@pytest.mark.parametrize("name", MODELS.names())
def test_model_forward(name):
    if name not in TINY_INPUTS:
        pytest.fail(f"model {name!r} is registered but tests/test_models.py has no tiny input for it")
    for shape in TINY_INPUTS[name]:
        torch.manual_seed(0)
        model = build_model(name, shape, NUM_OUTPUTS)
        assert isinstance(model, nn.Module)
        model.eval()
        with torch.no_grad():
            out = model(torch.rand(2, *shape))
        assert out.shape == (2, NUM_OUTPUTS), (name, shape)
        assert torch.isfinite(out).all()
        assert any(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("shape, features", [((1, 28, 28), 256), ((3, 32, 32), 400)])
def test_simple_cnn_fc1_features(shape, features):
    model = build_model("simple_cnn", shape, 7)
    assert model.fc1.in_features == features
    assert model.conv1.in_channels == shape[0]
    assert model.fc3.out_features == 7


def test_build_is_seeded_by_global_rng():
    torch.manual_seed(3)
    a = build_model("simple_cnn", (1, 28, 28), 10)
    torch.manual_seed(3)
    b = build_model("simple_cnn", (1, 28, 28), 10)
    torch.manual_seed(4)
    c = build_model("simple_cnn", (1, 28, 28), 10)
    assert torch.equal(a.conv1.weight, b.conv1.weight)
    assert not torch.equal(a.conv1.weight, c.conv1.weight)


def test_mlp_sigmoid_hidden_option():
    m = build_model("mlp_sigmoid", (50,), 3, hidden=17)
    assert m.hidden.in_features == 50 and m.hidden.out_features == 17 and m.out.out_features == 3


def test_unknown_model_lists_known():
    with pytest.raises(ValueError, match="simple_cnn"):
        build_model("no_such_model", (1, 28, 28), 10)


@pytest.fixture(scope="module")
def resnet_weights(tmp_path_factory):
    import torchvision

    torch.manual_seed(11)
    ref = torchvision.models.resnet18(weights=None)
    with torch.no_grad():  # non-default running stats, so that loading them is visible
        for m in ref.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
    state = ref.state_dict()
    path = tmp_path_factory.mktemp("weights") / "resnet18.pth"
    torch.save(state, path)
    return path, state


def test_resnet18_local_weights(resnet_weights):
    path, saved = resnet_weights
    torch.manual_seed(0)
    model = build_model("resnet18", (3, 32, 32), 5, weights_path=str(path))
    assert torch.equal(model.conv1.weight, saved["conv1.weight"])
    assert torch.equal(model.layer3[1].conv2.weight, saved["layer3.1.conv2.weight"])
    assert torch.equal(model.layer1[0].bn1.running_mean, saved["layer1.0.bn1.running_mean"])
    assert model.fc.out_features == 5 and model.fc.weight.shape == (5, 512)

    model.train()
    assert model.training and model.layer1[0].conv1.training
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(bns) == 20
    assert all(not m.training for m in bns)  # BatchNorm stays in eval mode (DomainBed's freeze_bn) ...
    assert all(p.requires_grad for m in bns for p in m.parameters())  # ... its affine weights still train
    assert model.conv1.weight.requires_grad and model.fc.weight.requires_grad

    # a training-mode forward leaves the frozen running statistics alone
    rm = model.bn1.running_mean.clone()
    out = model(torch.rand(2, 3, 32, 32))
    assert out.shape == (2, 5) and torch.isfinite(out).all()
    assert torch.equal(model.bn1.running_mean, rm)
    assert torch.equal(model.bn1.running_mean, saved["bn1.running_mean"])

    model.eval()
    model.train(True)
    assert all(not m.training for m in bns)

    # one Adam step moves the BatchNorm affine weights, never its running statistics
    w = model.bn1.weight.detach().clone()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    torch.nn.functional.cross_entropy(model(torch.rand(4, 3, 32, 32)), torch.tensor([0, 1, 2, 3])).backward()
    opt.step()
    assert not torch.equal(model.bn1.weight, w)
    assert torch.equal(model.bn1.running_mean, saved["bn1.running_mean"])
    assert torch.equal(model.bn1.running_var, saved["bn1.running_var"])


def test_imagenet_weights_name_torchvisions_cache_file(monkeypatch, tmp_path):
    from fda_ray.train.models import pretrained_path

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    assert pretrained_path("imagenet") == str(tmp_path / "hub" / "checkpoints" / "resnet18-f37072fd.pth")
    assert pretrained_path("~/w.pth").endswith("/w.pth") and "~" not in pretrained_path("~/w.pth")


def test_resnet18_without_weights_trains_batchnorm():
    model = build_model("resnet18", (3, 32, 32), 10)
    model.train()
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert all(m.training for m in bns)
    assert all(p.requires_grad for m in bns for p in m.parameters())


def test_resnet18_weights_other_channels(resnet_weights):
    path, saved = resnet_weights
    model = build_model("resnet18", (1, 32, 32), 10, weights_path=str(path))
    assert model.conv1.in_channels == 1
    assert torch.equal(model.layer1[0].conv1.weight, saved["layer1.0.conv1.weight"])
    model.eval()
    with torch.no_grad():
        assert model(torch.rand(2, 1, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize("name", ["multitask_cnn", "resnet18_multitask"])
def test_multi_head_models_concatenate_the_heads_on_a_shared_128_d_layer(name):
    """Healthcare FDA's model: trunk -> Linear(., 128) -> LeakyReLU(0.2) -> the main head and one head per auxiliary
    task, each reading the same 128-d features; the output is the heads' logits side by side."""
    from fda_ray.train.models import MultiHead

    torch.manual_seed(0)
    model = build_model(name, TINY_INPUTS[name][0], 1, aux_classes=(9, 2, 3))
    assert isinstance(model, MultiHead) and model.embed[0].out_features == 128
    assert isinstance(model.embed[1], nn.LeakyReLU) and model.embed[1].negative_slope == 0.2
    model.eval()
    x = torch.rand(4, *TINY_INPUTS[name][0])
    with torch.no_grad():
        out = model(x)
        h = model.embed(model.trunk(x).flatten(1))  # (4, 128)
    assert out.shape == (4, 1 + 9 + 2 + 3)
    assert torch.equal(out[:, :1], model.head(h)) and torch.equal(out[:, 10:12], model.aux_heads[1](h))
    names = [n for n, _ in model.named_parameters()]
    assert {n.split(".")[0] for n in names} == {"trunk", "embed", "head", "aux_heads"}


@pytest.mark.parametrize("name", ["multitask_cnn", "resnet18_multitask"])
def test_leaky_heads_are_leaky_relu_of_each_heads_own_linear_map(name):
    """head_activation leaky_relu (the authors' models/resnet_mlt.py: `pred = leaky_relu(fc_out[i](x))` on every
    head): each head's block of the output is leaky_relu(W h + b, 0.2) with the head's own W and b; the weights
    (names, shapes, values from one seed) are the linear model's, and the default is linear."""
    from torch.nn import functional as F

    from fda_ray.train.models import MultiHead

    shape = TINY_INPUTS[name][0]
    torch.manual_seed(0)
    linear = build_model(name, shape, 1, aux_classes=(9, 2, 3))
    torch.manual_seed(0)
    leaky = build_model(name, shape, 1, aux_classes=(9, 2, 3), head_activation="leaky_relu")
    assert linear.head_activation == "linear" and leaky.head_activation == "leaky_relu"
    assert list(linear.state_dict()) == list(leaky.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(linear.state_dict().values(), leaky.state_dict().values()))
    linear.eval()
    leaky.eval()
    x = torch.rand(5, *shape) * 4 - 2
    with torch.no_grad():
        out = leaky(x)
        h = leaky.embed(leaky.trunk(x).flatten(1))  # (5, 128)
        blocks = [(0, 1, leaky.head)] + [(lo, lo + c, g) for lo, c, g in zip((1, 10, 12), (9, 2, 3), leaky.aux_heads)]
        for lo, hi, lin in blocks:
            expect = F.leaky_relu(h @ lin.weight.T + lin.bias, 0.2)  # the head's own Linear, then LeakyReLU(0.2)
            assert torch.allclose(out[:, lo:hi], expect, rtol=0, atol=1e-6)
            assert torch.equal(out[:, lo:hi], F.leaky_relu(lin(h), negative_slope=0.2))
        plain = linear(x)
    assert (out < 0).any() and not torch.allclose(out, plain)  # some head output is negative: the slope shows
    assert torch.allclose(torch.where(plain < 0, 0.2 * plain, plain), out, rtol=0, atol=1e-6)
    leaky.head_activation = "linear"  # a plain attribute: a family may set it on a built model
    with torch.no_grad():
        assert torch.equal(leaky(x), plain)
    with pytest.raises(ValueError, match=r"head_activation='relu' is invalid: one of linear, leaky_relu"):
        leaky.head_activation = "relu"
    assert isinstance(leaky, MultiHead)


def test_resnet18_multitask_loads_a_local_weights_file(tmp_path):
    """Healthcare FDA's model starts from an ImageNet state dict on disk (here a saved random one): every trunk tensor is the
    file's, BatchNorm included; the heads are new."""
    import torchvision

    torch.manual_seed(3)
    state = torchvision.models.resnet18(weights=None).state_dict()
    torch.save(state, tmp_path / "resnet18-f37072fd.pth")
    model = build_model("resnet18_multitask", (3, 32, 32), 1, aux_classes=(2,),
                        weights_path=str(tmp_path / "resnet18-f37072fd.pth"))
    mine = model.trunk.state_dict()
    assert all(torch.equal(mine[k], v) for k, v in state.items() if not k.startswith("fc."))
    assert isinstance(model.trunk.fc, nn.Identity) and model.training == model.trunk.layer1[0].bn1.training
