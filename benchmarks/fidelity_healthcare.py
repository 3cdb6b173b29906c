"""Fidelity to the authors' code of Healthcare FDA (enyijiang/MIDRC at 95291b2), change by change: before / after / the
authors' formula written out, on one fixed small seeded input.

    python -m benchmarks.fidelity_healthcare     # a Markdown table

before: fda-ray's behaviour before these changes, still the default (the paper: linear heads, BCE-with-logits on the
logit) or, for the `code` profile's settings, what that profile said before (it followed the first commit,
5ee9f7f). after: the code options (HealthcareParams head_activation leaky_relu, binary_loss sigmoid) or the profile
now. reference: the authors' code, written out here (not imported): models/resnet_mlt.py's
`pred = leaky_relu(fc_out[i](x))` on every head, log_softmax on the auxiliary ones, CrossEntropyLoss on those
log-probabilities, and `BCEWithLogitsLoss()(torch.sigmoid(outputs), labels)` on the main one
(federated/federated_*_multi.py, train()).

The input: fda-ray's multitask_cnn (seed 0) with fmnist-conditions' heads (main 1, auxiliary 9, 2, 3) on 32 seeded
1 x 28 x 28 images with seeded labels, and for the training row one source epoch (Adam, lr 1e-4, batch 8: 4 steps)
through fda_ray.train.client against the same epoch written out with the authors' loss. tests/test_healthcare.py and
tests/test_models.py hold their own copies of the formulas and assert what this table shows.
"""
from __future__ import annotations

from fda_ray.core.parsing import first_paragraph

import argparse
import copy

import torch
from torch.nn import functional as F

from fda_ray.core import multitask
from fda_ray.core.contract import ClientTask
from fda_ray.core.layout import ParamLayout
from fda_ray.train.client import Client, run_task
from fda_ray.train.models import MultiHead, build_model

AUX = (("ink_mass", 9), ("flipped", 2), ("brightness", 3))  # fmnist-conditions' auxiliary tasks
SLOPE = 0.2  # the authors' nn.LeakyReLU(negative_slope=0.2)
N, BATCH, LR = 32, 8, 1e-4


def _input() -> tuple[MultiHead, torch.Tensor, torch.Tensor]:
    """The fixed input: the model (linear heads, seed 0), images x (N, 1, 28, 28) and labels y (N, 1 + K)."""
    torch.manual_seed(0)
    model = build_model("multitask_cnn", (1, 28, 28), 1, aux_classes=tuple(c for _, c in AUX))
    g = torch.Generator().manual_seed(1)
    x = torch.rand(N, 1, 28, 28, generator=g) * 2
    y = torch.stack([torch.randint(0, c, (N,), generator=g) for c in (2, *(c for _, c in AUX))], 1)
    return model, x, y


def authors_heads(model: MultiHead, x: torch.Tensor) -> list[torch.Tensor]:
    """resnet_mlt.py's forward on fda-ray's weights: leaky_relu(W_k h + b_k) for the main head and each auxiliary
    one (without the log_softmax, which authors_loss applies)."""
    h = model.embed(model.trunk(x).flatten(1))
    return [F.leaky_relu(F.linear(h, lin.weight, lin.bias), SLOPE) for lin in (model.head, *model.aux_heads)]


def authors_main_loss(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """BCEWithLogitsLoss()(torch.sigmoid(z), y), written out: -mean(y log s(s(z)) + (1 - y) log(1 - s(s(z))))."""
    s = torch.sigmoid(torch.sigmoid(z))
    return -(y * torch.log(s) + (1 - y) * torch.log(1 - s)).mean()


def authors_aux_loss(preds: list[torch.Tensor], y: torch.Tensor) -> torch.Tensor:
    """sum_k CrossEntropyLoss()(log_softmax(pred_k), y_k), as their train() sums the criteria (alpha = 1)."""
    return sum(torch.nn.CrossEntropyLoss()(F.log_softmax(p, dim=1), y[:, k]) for k, p in enumerate(preds, start=1))


def _fmt(v: float, digits: int = 3) -> str:
    return "0" if v == 0 else f"{v:.{digits}g}" if abs(v) >= 1e-3 else f"{v:.2e}"


def _epoch_delta(model: MultiHead, x: torch.Tensor, y: torch.Tensor, head_activation: str, binary_loss: str
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """One source epoch through fda-ray's client with these options, and the same epoch (the client's batches)
    written out with the authors' model and loss: (fda-ray's delta, the authors' delta), each (M,)."""
    net = copy.deepcopy(model)
    net.head_activation = head_activation
    layout = ParamLayout.from_model(net)
    client = Client(0, {"train": (x, y)}, net, layout, seed=0, task="binary", aux_tasks=AUX)
    w0 = layout.flatten_model(net)
    task = ClientTask(0, "epoch", 0, {"lr": LR, "batch": BATCH, "aux_alpha": 1.0, "binary_loss": binary_loss})
    got = run_task(client, task, {"global": w0}).tensors["delta"]
    ref = copy.deepcopy(model)
    opt = torch.optim.Adam(ref.parameters(), lr=LR)
    for xb, yb in client.batches(BATCH, 0, "train"):
        preds = authors_heads(ref, xb)
        loss = authors_main_loss(preds[0][:, 0], yb[:, 0].float()) + authors_aux_loss(preds[1:], yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return got, layout.flatten_model(ref) - w0


def rows() -> list[dict]:
    """One row per measured quantity: {"fix", "quantity", "before", "after", "reference"} (strings)."""
    model, x, y = _input()
    out: list[dict] = []
    with torch.no_grad():
        plain = model(x)  # (N, 1 + 14) the paper's heads
        leaky_model = copy.deepcopy(model)
        leaky_model.head_activation = "leaky_relu"
        leaky = leaky_model(x)
        ref = torch.cat(authors_heads(model, x), 1)
    heads = "leaky heads (head_activation)"
    out.append({"fix": heads, "quantity": "largest abs(head output - authors' leaky_relu(W h + b)), all heads",
                "before": _fmt(float((plain - ref).abs().max())), "after": _fmt(float((leaky - ref).abs().max())),
                "reference": "0"})
    out.append({"fix": heads, "quantity": "share of head outputs < 0 (where the two differ)",
                "before": f"{float((plain < 0).double().mean()):.2f}", "after": "-", "reference": "-"})
    ym = y[:, 0].float()
    with torch.no_grad():
        aux_before = float(multitask.aux_loss(multitask.split_outputs(plain, AUX)[1], y))
        aux_after = float(multitask.aux_loss(multitask.split_outputs(leaky, AUX)[1], y))
        aux_ref = float(authors_aux_loss(authors_heads(model, x)[1:], y))
    out.append({"fix": heads, "quantity": "L_aux (sum of the 3 auxiliary cross-entropies)",
                "before": _fmt(aux_before, 6), "after": _fmt(aux_after, 6), "reference": _fmt(aux_ref, 6)})
    out.append({"fix": heads, "quantity": "abs(L_aux - reference)", "before": _fmt(abs(aux_before - aux_ref)),
                "after": _fmt(abs(aux_after - aux_ref)), "reference": "0"})
    # the double sigmoid on the same outputs z: the authors' leaky main head, so only the loss differs
    z = leaky[:, :1].clone().requires_grad_(True)
    loss_before = multitask.main_loss("binary", z, y[:, 0])
    (g_before,) = torch.autograd.grad(loss_before, z)
    loss_after = multitask.main_loss("binary", z, y[:, 0], binary_loss="sigmoid")
    (g_after,) = torch.autograd.grad(loss_after, z)
    zr = leaky[:, 0].clone().requires_grad_(True)
    loss_ref = authors_main_loss(zr, ym)
    (g_ref,) = torch.autograd.grad(loss_ref, zr)
    dbl = "double sigmoid (binary_loss)"
    lb, la, lr = float(loss_before.detach()), float(loss_after.detach()), float(loss_ref.detach())
    out.append({"fix": dbl, "quantity": "L_main on the same outputs z (the model at its start)", "before": _fmt(lb, 6),
                "after": _fmt(la, 6), "reference": _fmt(lr, 6)})
    out.append({"fix": dbl, "quantity": "abs(L_main - reference)", "before": _fmt(abs(lb - lr)),
                "after": _fmt(abs(la - lr)), "reference": "0"})
    out.append({"fix": dbl, "quantity": "per-sample abs(dL_main/dz), mean",
                "before": _fmt(float(g_before.abs().mean()) * N), "after": _fmt(float(g_after.abs().mean()) * N),
                "reference": _fmt(float(g_ref.abs().mean()) * N)})
    # a trained model's outputs: z = 3 (2 y - 1) + N(0, 1), mostly right and confident
    zt = (3 * (2 * ym - 1) + torch.randn(N, generator=torch.Generator().manual_seed(2))).unsqueeze(1)
    out.append({"fix": dbl, "quantity": "L_main on confident outputs z = 3 (2y - 1) + N(0, 1)",
                "before": _fmt(float(multitask.main_loss("binary", zt, y[:, 0])), 6),
                "after": _fmt(float(multitask.main_loss("binary", zt, y[:, 0], binary_loss="sigmoid")), 6),
                "reference": _fmt(float(authors_main_loss(zt[:, 0], ym)), 6)})
    # both together: Eq. 3 with alpha = 1, and one source epoch
    with torch.no_grad():
        eq3_before = float(multitask.loss("binary", plain, y, AUX, 1.0))
        eq3_after = float(multitask.loss("binary", leaky, y, AUX, 1.0, binary_loss="sigmoid"))
        preds = authors_heads(model, x)
        eq3_ref = float(authors_main_loss(preds[0][:, 0], ym) + authors_aux_loss(preds[1:], y))
    both = "both (the code profile's model and loss)"
    out.append({"fix": both, "quantity": "L_main + 1 x L_aux (Eq. 3)", "before": _fmt(eq3_before, 6),
                "after": _fmt(eq3_after, 6), "reference": _fmt(eq3_ref, 6)})
    d_before, ref_delta = _epoch_delta(model, x, y, "linear", "logit")
    d_after, _ = _epoch_delta(model, x, y, "leaky_relu", "sigmoid")
    out.append({"fix": both,
                "quantity": f"one source epoch ({N // BATCH} Adam steps): largest abs(delta - authors' delta)",
                "before": _fmt(float((d_before - ref_delta).abs().max())),
                "after": _fmt(float((d_after - ref_delta).abs().max())),
                "reference": f"0 (largest abs(delta): {_fmt(float(ref_delta.abs().max()))})"})
    out += _profile_rows()
    return out


def _profile_rows() -> list[dict]:
    """The `code` profile's settings per dataset (chexpert / mimic / midrc): before (the profile as it followed the
    first commit 5ee9f7f, the datasets' 32 / 32 batches), after (fda_ray.papers.grids now), the scripts at 95291b2."""
    from fda_ray.experiments.trials import plan
    from fda_ray.papers import GRIDS

    now = {}
    for name in ("chexpert-000", "mimic-000", "midrc-000"):
        c = next(t.config().resolved() for t in plan(GRIDS[name], "code") if t.row == "fedavg_finetune_gp")
        now[name] = (c.params["healthcare"]["gp_warmup_rounds"], c.rounds, c.batch_source, c.batch_target)

    def cells(i: int) -> str:
        return " / ".join(str(now[n][i]) for n in ("chexpert-000", "mimic-000", "midrc-000"))

    prof = "code profile (chexpert / mimic / midrc)"
    return [
        {"fix": prof, "quantity": "GP warm-up rounds", "before": "0 / 16 / 5", "after": cells(0),
         "reference": "5 / 5 / 5 (`if i < 5:`)"},
        {"fix": prof, "quantity": "rounds", "before": "50 / 80 / 50", "after": cells(1),
         "reference": "80 / 60 / 50 (num_global_epochs)"},
        {"fix": prof, "quantity": "batch source / target",
         "before": "32/32 / 32/32 / 32/32", "after": " / ".join(f"{now[n][2]}/{now[n][3]}" for n in now),
         "reference": "32/32 / 32/32 / 8/16"},
    ]


def table(rs: list[dict]) -> str:
    cols = ("fix", "quantity", "before", "after", "reference")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rs]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="python -m benchmarks.fidelity_healthcare",
                            description=first_paragraph(__doc__)).parse_args(argv)
    torch.set_num_threads(1)
    print(table(rows()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
