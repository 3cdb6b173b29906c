"""The C++ ReLU + 2x2 max-pooling kernel (fda_ray/kernels/csrc/pool.cpp) against its specification,
F.max_pool2d(torch.relu(x), 2), forward and backward.

Equality is exact, on any machine: a maximum picks one of its inputs (no rounding), the gradient is copied to one
element (0 + g, as PyTorch's backward accumulates into zeros), so no sum runs in an order that a SIMD width could
change. The maps hold what a trained network's maps hold and what an edge case needs: ties (constant regions, as a
blank image's background gives), negative regions (ReLU's zeros), NaN and infinities, -0.0 gradients, odd sizes,
and widths that take each of the kernel's paths (8 lanes, 4 lanes, one window at a time)."""
from __future__ import annotations

import os
import shutil

import pytest
import torch
from torch.nn import functional as F

from fda_ray import kernels
from fda_ray.kernels import loader, pool

HAS_CXX = shutil.which(os.environ.get("CXX", "c++")) is not None
needs_kernel = pytest.mark.skipif(kernels.default_impl() == "reference",
                                  reason="$FDA_RAY_KERNELS=reference chooses the reference alone")


def _identical(a: torch.Tensor, b: torch.Tensor) -> None:
    """Bit for bit: the same values, NaN in the same places, the same sign on every zero (a NaN's own sign and
    payload are not a number: x86 makes a negative one where an operation creates it)."""
    assert a.shape == b.shape and a.dtype == b.dtype
    assert torch.equal(a.isnan(), b.isnan())
    assert torch.equal(a.nan_to_num(0.0, 0.0, 0.0), b.nan_to_num(0.0, 0.0, 0.0))
    assert torch.equal(a.isinf(), b.isinf())
    numbers = ~a.isnan()
    assert torch.equal(torch.signbit(a[numbers]), torch.signbit(b[numbers]))


def _map(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """A random map with ties, ReLU's zeros, NaN and infinities in known places."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    n, c, h, w = shape
    x[0] = 0.25  # a constant map: every window a four-way tie
    if n > 1:
        x[1, :, : h // 2] = -1.0  # negative: ReLU's zeros, ties at 0
    if n > 2:
        x[2, 0, 0, 0] = float("nan")  # a NaN in a window's first corner
        x[2, 0, min(1, h - 1), min(1, w - 1)] = float("nan")  # and in its last: the last NaN is taken
        x[2, -1, -1, -1] = float("inf")
        x[2, -1, 0, 0] = -float("inf")
    if n > 3:
        x[3] = torch.round(x[3] * 2) / 2  # coarse values: ties between positive corners
    return x


SHAPES = {
    "simple-cnn-first": (64, 6, 24, 24),  # w 12: 8 lanes, then 4
    "simple-cnn-second": (64, 16, 8, 8),  # w 4: 4 lanes
    "cifar-first": (5, 6, 28, 28),  # w 14: 8 + 4 + 2 one at a time
    "odd": (4, 3, 7, 5),  # the last row and column in no window
    "tiny": (4, 1, 2, 2),
    "wide-odd": (4, 2, 3, 37),  # w 18
}


@needs_kernel
def test_the_kernel_runs_here():
    """A silent fallback would make every comparison below compare the reference with itself."""
    assert HAS_CXX, "these tests expect a C++ compiler (CI installs build-essential)"
    assert pool.uses_kernel(torch.zeros(1, 1, 4, 4)), loader.status()


OPS = {"relu_max_pool2x2": (pool.relu_max_pool2x2, pool.reference),
       "max_pool2x2": (pool.max_pool2x2, pool.reference_max_pool)}


@needs_kernel
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("name", list(SHAPES))
def test_forward_and_backward_equal_the_reference_bit_for_bit(name, op):
    kernel, spec = OPS[op]
    shape = SHAPES[name]
    x = _map(shape, seed=len(name)).requires_grad_()
    h, w = shape[2] // 2, shape[3] // 2
    g = torch.randn(shape[0], shape[1], h, w, generator=torch.Generator().manual_seed(1))
    g[0, 0, 0, :] = -0.0  # a -0.0 gradient arrives as +0.0 in PyTorch's backward
    if shape[0] > 2:
        g[2, -1, -1, -1] = float("inf")
    ref = spec(x)
    out = kernel(x)
    assert type(out.grad_fn).__name__ == "_Pool2x2Backward"  # the kernel ran
    _identical(out, ref)
    (g_ref,) = torch.autograd.grad(ref, x, g)
    (g_out,) = torch.autograd.grad(out, x, g)
    _identical(g_out, g_ref)


@needs_kernel
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")  # (torch's forward AD imports)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("name", ["simple-cnn-second", "odd", "wide-odd"])
def test_double_backward_forward_mode_and_channels_last_equal_the_reference(name, op):
    """A backward with create_graph=True (a gradient penalty, MAML) was refused ("marked with @once_differentiable"),
    forward-mode AD too ("You must implement the jvp function"), and a channels-last map came back NCHW. Each now
    equals PyTorch's own ops bit for bit: the double backward and the tangent gather the routed elements."""
    import torch.autograd.forward_ad as fwAD

    kernel, spec = OPS[op]
    shape = SHAPES[name]
    x = _map(shape, seed=7).requires_grad_()
    rng = torch.Generator().manual_seed(3)
    g = torch.randn(shape[0], shape[1], shape[2] // 2, shape[3] // 2, generator=rng).requires_grad_()
    v = torch.randn(*shape, generator=rng)
    v[0, 0, 0, 0] = float("nan")  # a NaN where a route may be nowhere: dropped, as PyTorch's where drops it
    got = []
    for f in (kernel, spec):
        out = f(x)
        (gx,) = torch.autograd.grad(out, x, g, create_graph=True)
        (gg,) = torch.autograd.grad(gx, g, v)  # d<gx, v>/dg
        with fwAD.dual_level():
            primal, tangent = fwAD.unpack_dual(f(fwAD.make_dual(x.detach(), v)))
        got.append((out.detach(), gx.detach(), gg, primal, tangent))
    assert type(kernel(x).grad_fn).__name__ == "_Pool2x2Backward"  # the kernel ran
    for a, b in zip(*got):
        _identical(a, b)
    xc = x.detach().contiguous(memory_format=torch.channels_last)
    out, ref = kernel(xc), spec(xc)
    _identical(out, ref)
    assert out.stride() == ref.stride()


@needs_kernel
def test_threads_split_the_maps_without_changing_a_bit():
    x = _map((64, 6, 24, 24), seed=5).requires_grad_()
    g = torch.randn(64, 6, 12, 12, generator=torch.Generator().manual_seed(2))
    before = torch.get_num_threads()
    got = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            out = pool.relu_max_pool2x2(x)
            got.append((out.detach(), torch.autograd.grad(out, x, g)[0]))
    finally:
        torch.set_num_threads(before)
    for a, b in zip(*got):
        _identical(a, b)


@needs_kernel
def test_a_non_contiguous_map_and_no_grad_give_the_same_numbers():
    x = _map((6, 4, 12, 10), seed=3)
    t = x.transpose(2, 3)  # (6, 4, 10, 12), not contiguous
    _identical(pool.relu_max_pool2x2(t), pool.reference(t))
    _identical(pool.max_pool2x2(t), pool.reference_max_pool(t))
    with torch.no_grad():
        _identical(pool.relu_max_pool2x2(x), pool.reference(x))
        _identical(pool.MaxPool2x2()(x), torch.nn.MaxPool2d(2)(x))
    assert torch.equal(pool.MaxPool2x2()(x[0]), torch.nn.MaxPool2d(2)(x[0]))  # (C, H, W), as nn.MaxPool2d takes
    empty = torch.zeros(0, 2, 6, 6, requires_grad=True)
    out = pool.relu_max_pool2x2(empty)
    assert out.shape == (0, 2, 3, 3) and torch.autograd.grad(out.sum(), empty)[0].shape == empty.shape


def test_where_the_kernel_does_not_apply_the_reference_runs():
    """A GPU, another dtype, $FDA_RAY_KERNELS=reference and torch.func transforms take the reference; vmap and grad
    over a model that pools still work and agree."""
    assert not pool.uses_kernel(torch.zeros(1, 1, 4, 4, dtype=torch.float64))
    assert not pool.uses_kernel(torch.zeros(1, 1, 4, 4), impl="reference")
    assert not pool.uses_kernel(torch.zeros(1, 4, 4))  # not 4-D
    assert not pool.uses_kernel(torch.zeros(1, 1, 1, 4))  # no 2 x 2 window
    x64 = _map((3, 2, 6, 6), seed=0).double().requires_grad_()
    assert type(pool.relu_max_pool2x2(x64).grad_fn).__name__ == "MaxPool2DWithIndicesBackward0"

    from torch.func import grad, vmap

    xs = torch.randn(3, 2, 1, 8, 8)  # 3 rows of (2, 1, 8, 8)
    loss = lambda x: pool.relu_max_pool2x2(x).square().sum()  # noqa: E731
    seen: list[bool] = []
    real = pool.uses_kernel
    pool.uses_kernel = lambda x, impl=None: seen.append(real(x, impl)) or seen[-1]  # type: ignore[assignment]
    try:
        got = vmap(grad(loss))(xs)
    finally:
        pool.uses_kernel = real  # type: ignore[assignment]
    assert seen and not any(seen)  # under the transforms: the reference
    want = torch.stack([torch.autograd.grad(F.max_pool2d(torch.relu(r.requires_grad_()), 2).square().sum(), r)[0]
                        for r in xs])
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@needs_kernel
def test_the_ops_refuse_bad_input_in_one_line():
    with pytest.raises(RuntimeError, match="x must be a 4-D"):
        torch.ops.fda_ray.relu_max_pool2x2(torch.zeros(2, 4, 4))
    with pytest.raises(RuntimeError, match="x must be Float, got Double"):
        torch.ops.fda_ray.relu_max_pool2x2(torch.zeros(1, 1, 4, 4, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="at least 2 x 2"):
        torch.ops.fda_ray.relu_max_pool2x2(torch.zeros(1, 1, 1, 4))
    _, route = torch.ops.fda_ray.relu_max_pool2x2(torch.zeros(1, 1, 4, 4))
    with pytest.raises(RuntimeError, match="pools to 2 x 2, not 2 x 2|grad has shape"):
        torch.ops.fda_ray.relu_max_pool2x2_backward(torch.zeros(1, 1, 3, 2), route, 4, 4)
    with pytest.raises(RuntimeError, match="pools to 3 x 3, not 2 x 2"):
        torch.ops.fda_ray.relu_max_pool2x2_backward(torch.zeros(1, 1, 2, 2), route, 6, 6)


@needs_kernel
def test_a_simple_cnn_trains_to_the_same_weights_with_the_kernel_and_the_reference(monkeypatch):
    """Ten Adam steps of the simple CNN, with its plain forward and with the stacked one a cohort runs: the same
    weights to the last bit whichever pooling ran (the kernel saves a step's time, not its numbers)."""
    from fda_ray.train.models import SimpleCNN

    def train(kernel: bool) -> list[torch.Tensor]:
        monkeypatch.setattr(pool, "uses_kernel", (lambda x, impl=None: kernel and x.dtype == torch.float32
                                                  and x.device.type == "cpu" and x.dim() == 4))
        torch.manual_seed(0)
        model = SimpleCNN(1, 28, 10)
        stacked = {n: p.detach().clone().unsqueeze(0).repeat(2, *[1] * p.dim()).requires_grad_()
                   for n, p in model.named_parameters()}
        opt = torch.optim.Adam([*model.parameters(), *stacked.values()], lr=1e-2)
        g = torch.Generator().manual_seed(0)
        for _ in range(10):
            x = torch.rand(16, 1, 28, 28, generator=g)
            x[:, :, :6] = 0.0  # a blank band: ties in every layer
            y = torch.randint(0, 10, (16,), generator=g)
            loss = F.cross_entropy(model(x), y)
            out = SimpleCNN.forward_stacked(stacked, torch.stack([x, x.flip(-1)]), layout="per_model")
            loss = loss + F.cross_entropy(out.flatten(0, 1), y.repeat(2))
            opt.zero_grad()
            loss.backward()
            opt.step()
        return [p.detach().clone() for p in (*model.parameters(), *stacked.values())]

    with_kernel, with_reference = train(True), train(False)
    for a, b in zip(with_kernel, with_reference):
        _identical(a, b)


def test_the_benchmark_refuses_bad_input_in_one_line(capsys):
    from benchmarks import pool as bench

    assert bench.main(["--steps", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["error: steps=0 is invalid: an integer >= 1"]


@needs_kernel
def test_the_benchmark_times_both_and_finds_the_same_numbers(tmp_path, capsys):
    import json

    from benchmarks import pool as bench

    out = tmp_path / "p.json"
    assert bench.main(["--batch", "4", "--rows", "2", "--steps", "1", "--repeats", "1", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert set(r["layers"]) == set(bench.MAPS) and [t["kind"] for t in r["training"]] == ["plain", "fused", "lenet"]
    assert all(row["identical"] for row in (*r["layers"].values(), *r["training"]))
    assert all(row[k] > 0 for row in r["layers"].values() for k in ("reference_ms", "kernel_ms"))
    assert bench.table(r) in capsys.readouterr().out


@needs_kernel
def test_shots_lenet_trains_to_the_same_weights_with_the_kernel_and_the_reference(monkeypatch):
    """FedWCA's LeNet (conv - pool - ReLU, twice; dropout and BatchNorm in between): five SGD steps to identical
    weights whichever max-pool ran."""
    from fda_ray.train.models import shot_lenet

    def train(kernel: bool) -> list[torch.Tensor]:
        monkeypatch.setattr(pool, "uses_kernel", (lambda x, impl=None: kernel and x.dtype == torch.float32
                                                  and x.device.type == "cpu" and x.dim() == 4))
        torch.manual_seed(0)
        model = shot_lenet((1, 28, 28), 10)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator().manual_seed(0)
        for _ in range(5):
            x = torch.rand(16, 1, 28, 28, generator=g)
            x[:, :, :6] = 0.0
            loss = F.cross_entropy(model(x), torch.randint(0, 10, (16,), generator=g))
            opt.zero_grad()
            loss.backward()
            opt.step()
        return [t.detach().clone() for t in model.state_dict().values()]

    for a, b in zip(train(True), train(False)):
        assert torch.equal(a, b)
