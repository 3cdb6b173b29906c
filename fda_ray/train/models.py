"""Model registry: the NIID-Bench simple CNN, DomainBed's MNIST CNN, ResNet-18, and the synthetic
experiment's one-hidden-layer sigmoid network.

Each builder takes (input_shape, num_outputs, **options) and returns an nn.Module; parameters are
initialised from torch's global RNG, which the engine seeds per (trial seed, "init") before building.
A model class may add `forward_stacked(params, x)`, K copies of itself with stacked parameters in one pass,
which fda_ray.train.cohort trains client cohorts with (the others go through torch.func.vmap).
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from fda_ray.core.registry import MODELS  # defined in the core: the config checks model names without torch
from fda_ray.kernels.pool import reference as relu_max_pool_reference
from fda_ray.kernels.pool import MaxPool2x2, relu_max_pool2x2


CONV_LAYOUTS = ("grouped", "per_model")


def conv_layout(device: torch.device | str) -> str:
    """How a stacked forward runs its convolutions on `device`: $FDA_RAY_CONV_LAYOUT if set (for measuring), else
    "grouped" on a GPU (one kernel launch a layer for all K models) and "per_model" on CPUs (measured faster there:
    benchmarks/fused_ops.py)."""
    import os

    chosen = os.environ.get("FDA_RAY_CONV_LAYOUT", "")
    if chosen:
        if chosen not in CONV_LAYOUTS:
            raise ValueError(f"FDA_RAY_CONV_LAYOUT={chosen!r} is invalid: one of {', '.join(CONV_LAYOUTS)}")
        return chosen
    return "grouped" if torch.device(device).type == "cuda" else "per_model"


def _linear_stacked(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """K linear layers at once: x (K, B, in), w (K, out, in), b (K, out) -> (K, B, out)."""
    return torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))


class SimpleCNN(nn.Module):
    """NIID-Bench "simple CNN": conv5x5(6) - pool - conv5x5(16) - pool - fc 120 - fc 84 - fc classes, ReLU.

    1x28x28 input gives 16*4*4 = 256 features, 3x32x32 gives 16*5*5 = 400.
    """

    def __init__(self, in_channels: int, image_size: int, num_classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        side = ((image_size - 4) // 2 - 4) // 2
        self.fc1 = nn.Linear(16 * side * side, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (n, C, H, W) -> (n, classes)
        # self.pool(torch.relu(.)) in one C++ pass on CPUs, the same numbers (fda_ray.kernels.pool)
        x = relu_max_pool2x2(self.conv1(x))
        x = relu_max_pool2x2(self.conv2(x))
        x = x.flatten(1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)

    @staticmethod
    def forward_stacked(p: dict[str, torch.Tensor], x: torch.Tensor, layout: str = "per_model") -> torch.Tensor:
        """K models at once (fda_ray.train.cohort): p holds each parameter stacked (K, ...), x (K, B, C, H, W) ->
        (K, B, classes). The linear layers run once for all K as batched matmuls. The convolutional trunk
        (`layout`, conv_layout): "grouped", all K as one grouped convolution (HFTA's fused Conv2d) and one
        max-pool over the K * channels, a fixed number of operators whatever K (on a GPU each operator is a kernel
        launch); "per_model", one small convolution per model (measured faster on CPUs: the grouped
        convolution's backward pass is slower there, docs/ray-and-clusters.md)."""
        k, b = x.shape[:2]
        if layout == "grouped":
            # (K, B, C, H, W) -> (B, K*C, H, W): model i's channels are group i
            h = x.transpose(0, 1).reshape(b, k * x.shape[2], *x.shape[3:])
            w1, w2 = p["conv1.weight"], p["conv2.weight"]  # (K, O, C, kh, kw)
            h = F.conv2d(h, w1.reshape(-1, *w1.shape[2:]), p["conv1.bias"].reshape(-1), groups=k)
            # ReLU and pooling as a GPU runs them (its layout's operators, counted by benchmarks/fused_ops.py)
            h = relu_max_pool_reference(h)  # (B, K*6, ., .)
            h = F.conv2d(h, w2.reshape(-1, *w2.shape[2:]), p["conv2.bias"].reshape(-1), groups=k)
            h = relu_max_pool_reference(h)  # (B, K*16, s, s)
            h = h.reshape(b, k, -1).transpose(0, 1)  # (K, B, 16*s*s), each model's features in torch's flatten order
        else:
            feats = []
            for i in range(k):
                hi = relu_max_pool2x2(F.conv2d(x[i], p["conv1.weight"][i], p["conv1.bias"][i]))
                hi = relu_max_pool2x2(F.conv2d(hi, p["conv2.weight"][i], p["conv2.bias"][i]))
                feats.append(hi.flatten(1))  # (B, features)
            h = torch.stack(feats)  # (K, B, features)
        h = torch.relu(_linear_stacked(h, p["fc1.weight"], p["fc1.bias"]))
        h = torch.relu(_linear_stacked(h, p["fc2.weight"], p["fc2.bias"]))
        return _linear_stacked(h, p["fc3.weight"], p["fc3.bias"])


class ColoredMNISTCNN(nn.Module):
    """DomainBed's MNIST_CNN featurizer (four 3x3 convs 64, 128/2, 128, 128, each ReLU + GroupNorm(8),
    global average pool) followed by a linear classifier."""

    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        chans = [(in_channels, 64, 1), (64, 128, 2), (128, 128, 1), (128, 128, 1)]
        layers: list[nn.Module] = []
        for cin, cout, stride in chans:
            layers += [nn.Conv2d(cin, cout, 3, stride=stride, padding=1), nn.ReLU(), nn.GroupNorm(8, cout)]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.classifier = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.pool(self.features(x)).flatten(1))


class FrozenBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm that stays in eval mode (running statistics fixed), for pretrained backbones."""

    def train(self, mode: bool = True) -> "FrozenBatchNorm2d":
        return super().train(False)


class SigmoidMLP(nn.Module):
    """One hidden layer with sigmoid activation (the synthetic experiment of Auto-weighted FDA Appendix B)."""

    def __init__(self, in_features: int, num_outputs: int, hidden: int = 64) -> None:
        super().__init__()
        self.hidden = nn.Linear(in_features, hidden)
        self.out = nn.Linear(hidden, num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.sigmoid(self.hidden(x)))

    @staticmethod
    def forward_stacked(p: dict[str, torch.Tensor], x: torch.Tensor, layout: str = "per_model") -> torch.Tensor:
        """K models at once (fda_ray.train.cohort): x (K, B, d) -> (K, B, outputs) (no convolutions: `layout` is
        the same either way)."""
        h = torch.sigmoid(_linear_stacked(x, p["hidden.weight"], p["hidden.bias"]))
        return _linear_stacked(h, p["out.weight"], p["out.bias"])


@MODELS.register("simple_cnn")
def simple_cnn(input_shape: tuple[int, ...], num_outputs: int) -> nn.Module:
    c, h, _ = input_shape
    return SimpleCNN(c, h, num_outputs)


@MODELS.register("mnist_cnn")
def mnist_cnn(input_shape: tuple[int, ...], num_outputs: int) -> nn.Module:
    """DomainBed's MNIST_CNN (ColoredMNIST, RotatedMNIST): any input channels, any classes."""
    return ColoredMNISTCNN(input_shape[0], num_outputs)


MODELS.add("colored_mnist_cnn", mnist_cnn)  # its earlier name: configs and sweeps that name it still run

# torchvision's file names for the IMAGENET1K_V1 weights in its hub cache (torchvision.models.ResNet*_Weights).
IMAGENET_FILES = {"resnet18": "resnet18-f37072fd.pth", "resnet50": "resnet50-0676ba61.pth",
                  "resnet101": "resnet101-63fe2227.pth"}
RESNET18_IMAGENET_FILE = IMAGENET_FILES["resnet18"]


def imagenet_arch(model: str) -> str:
    """The torchvision architecture whose ImageNet file a model loads (resnet18_multitask, shot_resnet18 -> resnet18)."""
    return model.replace("_multitask", "").replace("shot_", "")


def pretrained_path(value: str, model: str = "resnet18") -> str:
    """The weights file a config's model_weights names: a path, or 'imagenet' for torchvision's cache file of
    the model's ImageNet weights (torch.hub.get_dir()/checkpoints/resnet18-f37072fd.pth for ResNet-18, where
    torchvision would put its download)."""
    if value == "imagenet":
        name = IMAGENET_FILES[imagenet_arch(model)]
        return str(Path(torch.hub.get_dir()) / "checkpoints" / name)
    return str(Path(value).expanduser())


def _shown(names: list[str], n: int = 2) -> str:
    return ", ".join(repr(k) for k in names[:n]) + (", ..." if len(names) > n else "")


def load_weights(path: str, arch: str, field: str = "model_weights") -> dict[str, torch.Tensor]:
    """The state dict a weights file holds, checked against torchvision's `arch` (its ImageNet layout: 1000
    classes), or a one-line ValueError `model_weights=<path> is invalid: <why>`: no such file, not a torch file,
    cut short, not a state dict of tensors, or tensors that do not fit the model (missing, unexpected or of
    another shape). The preflight calls it before any work; the model's build calls it again where it loads."""
    import io

    import torchvision

    from fda_ray.core.user_files import DamagedFileError, read_bytes, torch_damage

    data = read_bytes(path, field)
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # torch's safe loader raises any of several types for a file it cannot read
        raise DamagedFileError(field, path, torch_damage(data, e)) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        held = f"a dict with keys {_shown(list(map(str, state)))}" if isinstance(state, dict) else \
            f"a {type(state).__name__}"
        raise DamagedFileError(field, path, f"not a state dict of tensors (it holds {held}); save "
                                            f"torchvision.models.{arch}(...).state_dict() with torch.save")
    with torch.device("meta"):  # the model's names and shapes only: no memory, no initialisation
        expected = {k: tuple(v.shape) for k, v in getattr(torchvision.models, arch)(weights=None).state_dict().items()}
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [f"{k!r} {tuple(state[k].shape)} here, {expected[k]} in the model" for k in expected
              if k in state and tuple(state[k].shape) != expected[k]]
    if missing or unexpected or shapes:
        parts = [f"{len(missing)} missing ({_shown(missing)})" if missing else "",
                 f"{len(unexpected)} unexpected ({_shown(unexpected)})" if unexpected else "",
                 f"{len(shapes)} of another shape ({shapes[0]}{', ...' if len(shapes) > 1 else ''})" if shapes else ""]
        raise DamagedFileError(field, path, f"its tensors do not fit torchvision's {arch}: "
                                            f"{'; '.join(x for x in parts if x)}")
    return state


def _resnet(arch: str, input_shape: tuple[int, ...], num_outputs: int, weights_path: str | None,
            freeze_bn: bool) -> nn.Module:
    import torchvision

    model = getattr(torchvision.models, arch)(weights=None)
    if weights_path is not None:
        model.load_state_dict(load_weights(weights_path, arch))
    if input_shape[0] != 3:
        model.conv1 = nn.Conv2d(input_shape[0], 64, 7, stride=2, padding=3, bias=False)
    model.fc = nn.Linear(model.fc.in_features, num_outputs)
    if freeze_bn and weights_path is not None:
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.__class__ = FrozenBatchNorm2d  # picklable, unlike a patched train method
                m.eval()
    return model


@MODELS.register("resnet18")
def resnet18(input_shape: tuple[int, ...], num_outputs: int, weights_path: str | None = None,
             freeze_bn: bool = True) -> nn.Module:
    """torchvision ResNet-18; `weights_path` loads an ImageNet state dict from a local file (no hub download).

    With pretrained weights the final fc is replaced by a fresh one for `num_outputs`, and BatchNorm layers
    are frozen as the Auto-weighted FDA authors' DomainBed copy freezes them, and DomainBed did before its commit
    3dfdc8e (2024; it has since defaulted to ResNet-50 with freeze_bn off) (`freeze_bn`: eval mode, so the running
    statistics stay ImageNet's; their affine weights still train), the backbone of the seeds' DomainBed experiments.
    """
    return _resnet("resnet18", input_shape, num_outputs, weights_path, freeze_bn)


@MODELS.register("resnet50")
def resnet50(input_shape: tuple[int, ...], num_outputs: int, weights_path: str | None = None,
             freeze_bn: bool = True) -> nn.Module:
    """torchvision ResNet-50, as resnet18 (FedWCA's Office-Home backbone)."""
    return _resnet("resnet50", input_shape, num_outputs, weights_path, freeze_bn)


@MODELS.register("resnet101")
def resnet101(input_shape: tuple[int, ...], num_outputs: int, weights_path: str | None = None,
              freeze_bn: bool = True) -> nn.Module:
    """torchvision ResNet-101, as resnet18 (FSSDA's Office-31 backbone for every method)."""
    return _resnet("resnet101", input_shape, num_outputs, weights_path, freeze_bn)


HEAD_ACTIVATIONS = ("linear", "leaky_relu")  # MultiHead's head outputs: Healthcare FDA App. A.1's logits, or the authors' code's
HEAD_SLOPE = 0.2  # the authors' nn.LeakyReLU(negative_slope=0.2): the 128-d layer's and (in their code) the heads'


class MultiHead(nn.Module):
    """Healthcare FDA's multi-task model (A.1, Fig. 5): a trunk, a shared 128-d layer with LeakyReLU(0.2), and one
    linear head per task on it: the main head (`head`) and one per auxiliary task (`aux_heads.k`). The output
    concatenates the heads' outputs, the main head's first (fda_ray.core.multitask's layout), so every recipe,
    evaluation and flat layout treats it as one tensor-valued model. GP excludes the `aux_heads.` layers.

    head_activation: "linear" (the paper: the heads "output several classification logits") or "leaky_relu" (the
    authors' code, models/resnet_mlt.py: `pred = leaky_relu(fc_out[i](x))` on every head, the main one included;
    the auxiliary losses then read leaky_relu(logits)). A plain attribute, not a parameter: it changes no tensor of
    the flat layout, and a method family may set it on a built model (fda_ray.algorithms.healthcare)."""

    AUX_PREFIX = "aux_heads."

    def __init__(self, trunk: nn.Module, features: int, main_outputs: int, aux_classes: tuple[int, ...],
                 hidden: int = 128, head_activation: str = "linear") -> None:
        super().__init__()
        self.trunk = trunk
        self.embed = nn.Sequential(nn.Linear(features, hidden), nn.LeakyReLU(HEAD_SLOPE))
        self.head = nn.Linear(hidden, main_outputs)
        self.aux_heads = nn.ModuleList(nn.Linear(hidden, c) for c in aux_classes)
        self.head_activation = head_activation

    @property
    def head_activation(self) -> str:
        return self._head_activation

    @head_activation.setter
    def head_activation(self, value: str) -> None:
        if value not in HEAD_ACTIVATIONS:
            raise ValueError(f"head_activation={value!r} is invalid: one of {', '.join(HEAD_ACTIVATIONS)}")
        self._head_activation = value

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (n, ...) -> (n, main + sum C_k)
        h = self.embed(self.trunk(x).flatten(1))  # (n, 128): h^{l-1}, shared by every head
        out = torch.cat([self.head(h), *(g(h) for g in self.aux_heads)], 1)
        if self._head_activation == "leaky_relu":  # elementwise: the same as on each head's output
            out = F.leaky_relu(out, HEAD_SLOPE)
        return out


class ConvTrunk(nn.Module):
    """The simple CNN's convolutional part (conv5x5(6) - pool - conv5x5(16) - pool), flattened."""

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = relu_max_pool2x2(self.conv1(x))  # F.max_pool2d(torch.relu(.), 2), fda_ray.kernels.pool
        return relu_max_pool2x2(self.conv2(x)).flatten(1)


@MODELS.register("multitask_cnn")
def multitask_cnn(input_shape: tuple[int, ...], num_outputs: int, aux_classes: tuple[int, ...] = (),
                  head_activation: str = "linear") -> nn.Module:
    """Healthcare FDA's multi-head model on a small CNN trunk (runs here): the simple CNN's convolutions, then the
    128-d LeakyReLU(0.2) layer and the heads (head_activation: MultiHead's)."""
    c, h, _ = input_shape
    side = ((h - 4) // 2 - 4) // 2
    return MultiHead(ConvTrunk(c), 16 * side * side, num_outputs, tuple(aux_classes), head_activation=head_activation)


@MODELS.register("resnet18_multitask")
def resnet18_multitask(input_shape: tuple[int, ...], num_outputs: int, aux_classes: tuple[int, ...] = (),
                       weights_path: str | None = None, head_activation: str = "linear") -> nn.Module:
    """Healthcare FDA's model: ResNet-18 (ImageNet weights from a local file) whose fc becomes Linear(512, 128),
    LeakyReLU(0.2) and one head per task (head_activation: MultiHead's). BatchNorm trains as in the authors' code
    (not frozen)."""
    trunk = resnet18(input_shape, 1, weights_path=weights_path, freeze_bn=False)
    trunk.fc = nn.Identity()
    return MultiHead(trunk, 512, num_outputs, tuple(aux_classes), head_activation=head_activation)


MULTI_HEAD_MODELS = ("multitask_cnn", "resnet18_multitask")


class WeightNormLinear(nn.Module):
    """A linear layer with weight normalisation, w_m = g_m v_m / |v_m| (SHOT's classifier: torch's weightNorm on
    nn.Linear, the same weight_g (M, 1) / weight_v (M, q) parameters). FedWCA's Eq. 1 reads the class directions v_m."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        lin = nn.Linear(in_features, out_features)
        self.weight_v = nn.Parameter(lin.weight.detach().clone())  # (M, q)
        self.weight_g = nn.Parameter(lin.weight.detach().norm(dim=1, keepdim=True))  # (M, 1): starts as a plain Linear
        self.bias = nn.Parameter(lin.bias.detach().clone())

    def weight(self) -> torch.Tensor:
        return self.weight_g * self.weight_v / self.weight_v.norm(dim=1, keepdim=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight(), self.bias)


class ShotNet(nn.Module):
    """SHOT's network as FedWCA uses it (FedWCA Sec. 5, Models): f = backbone + bottleneck (Linear -> BatchNorm -> Dropout,
    256 wide), g = a weight-normalised linear classifier. FedWCA trains and aggregates f; g stays the source's.
    `features(x)` is f(x) (n, 256), the space of Eq. 1's cosines, Eq. 4's prototypes and FINCH's first layer."""

    def __init__(self, backbone: nn.Module, feat_dim: int, num_classes: int, bottleneck: int = 256,
                 dropout: float = 0.5) -> None:
        super().__init__()
        self.backbone = backbone
        self.bottleneck = nn.Sequential(nn.Linear(feat_dim, bottleneck), nn.BatchNorm1d(bottleneck), nn.Dropout(dropout))
        self.classifier = WeightNormLinear(bottleneck, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:  # (n, ...) -> (n, bottleneck)
        return self.bottleneck(self.backbone(x).flatten(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (n, ...) -> (n, classes)
        return self.classifier(self.features(x))


def _lenet_trunk(in_channels: int) -> nn.Module:
    """SHOT's digit LeNetBase: conv5x5(20) - pool - ReLU - conv5x5(50) - Dropout2d(0.5) - pool - ReLU. The poolings
    are nn.MaxPool2d(2) through the CPU kernel (fda_ray.kernels.pool.MaxPool2x2: the same numbers)."""
    return nn.Sequential(nn.Conv2d(in_channels, 20, 5), MaxPool2x2(), nn.ReLU(),
                         nn.Conv2d(20, 50, 5), nn.Dropout2d(0.5), MaxPool2x2(), nn.ReLU())


@MODELS.register("shot_lenet")
def shot_lenet(input_shape: tuple[int, ...], num_outputs: int) -> nn.Module:
    """FedWCA's Digit-Five model: SHOT's LeNet, randomly initialised, with the bottleneck and the weight-normalised
    classifier (3 x 32 x 32 inputs give 50 * 5 * 5 features, 28 x 28 give 50 * 4 * 4)."""
    trunk = _lenet_trunk(input_shape[0])
    with torch.no_grad():
        feat = trunk(torch.zeros(1, *input_shape)).numel()
    return ShotNet(trunk, feat, num_outputs)


def _shot_resnet(arch: str, input_shape: tuple[int, ...], num_outputs: int, weights_path: str | None) -> nn.Module:
    trunk = _resnet(arch, input_shape, 1, weights_path, freeze_bn=False)  # SHOT trains the BatchNorms
    feat = trunk.fc.in_features
    trunk.fc = nn.Identity()
    return ShotNet(trunk, feat, num_outputs)


@MODELS.register("shot_resnet18")
def shot_resnet18(input_shape: tuple[int, ...], num_outputs: int, weights_path: str | None = None) -> nn.Module:
    """FedWCA's PACS model: ResNet-18 (ImageNet weights from a local file) + SHOT's bottleneck and classifier."""
    return _shot_resnet("resnet18", input_shape, num_outputs, weights_path)


@MODELS.register("shot_resnet50")
def shot_resnet50(input_shape: tuple[int, ...], num_outputs: int, weights_path: str | None = None) -> nn.Module:
    """FedWCA's Office-Home model: ResNet-50 (ImageNet weights from a local file) + SHOT's bottleneck and classifier."""
    return _shot_resnet("resnet50", input_shape, num_outputs, weights_path)


SHOT_MODELS = ("shot_lenet", "shot_resnet18", "shot_resnet50")


@MODELS.register("mlp_sigmoid")
def mlp_sigmoid(input_shape: tuple[int, ...], num_outputs: int, hidden: int = 64) -> nn.Module:
    return SigmoidMLP(input_shape[0], num_outputs, hidden)


def build_model(name: str, input_shape: tuple[int, ...], num_outputs: int, **options) -> nn.Module:
    return MODELS.get(name)(input_shape, num_outputs, **options)
