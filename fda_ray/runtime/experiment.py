"""The experiment builder: from a config to everything a run needs (data setting, algorithm, model, clients).

    cfg.resolved() -> pre-flight checks -> dataset -> setting (who holds what) -> the initial model (seeded
    by (seed, "init")) checked against the data -> the algorithm -> one Client per source and the target,
    holding the data views the algorithm asks for.
"""
from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass

import torch

from fda_ray.runtime import preflight
from fda_ray.algorithms import ALGORITHMS, Algorithm
from fda_ray.train.client import Client
from fda_ray.core.config import RunConfig
from fda_ray.data import load as load_dataset
from fda_ray.core.layout import ParamLayout
from fda_ray.train.models import MULTI_HEAD_MODELS, build_model, pretrained_path
from fda_ray.core.seeding import derive_seed
from fda_ray.data.setting import Setting
from fda_ray.runtime.partitions import build_setting


@dataclass
class Experiment:
    """Everything a run needs that is built from the config."""

    cfg: RunConfig  # resolved
    algorithm: Algorithm
    setting: Setting
    model: torch.nn.Module  # the initial model (its weights are the state before round 0)
    layout: ParamLayout
    clients: list[Client]  # sources 0..N-1, then the target at index N

    @property
    def target_index(self) -> int:
        return self.cfg.num_sources

    def initial_weights(self) -> torch.Tensor:
        return self.layout.flatten_model(self.model)  # (M,)


def check_model_fits(model: torch.nn.Module, name: str, setting: Setting, dataset: str) -> None:
    """One forward pass on two training samples: a model that is not a torch module, has nothing to train,
    cannot take the data's inputs as its one argument, or gives anything but one (n, width) tensor of outputs, is
    an error in one line before any round (not a traceback in the middle of one)."""
    def invalid(why: str) -> ValueError:
        return ValueError(f"model={name!r} is invalid for dataset {dataset!r}: {why}")

    if not isinstance(model, torch.nn.Module):  # (a builder that forgot its `return`)
        raise invalid(f"its builder returned {type(model).__name__}, not a torch.nn.Module: a function of "
                      "(input_shape, num_outputs) that returns the model")
    first = next(iter(model.parameters()), None)
    if first is None:
        raise invalid("it has no parameters to train: the methods average and update its weights")
    x = setting.target_train[0][:2]
    width = setting.num_outputs + sum(c for _, c in setting.aux_tasks)  # the main head, then each auxiliary head
    try:
        with torch.no_grad():
            out = model(x.to(first.device))
    except (RuntimeError, ValueError, IndexError, TypeError) as e:  # (TypeError: a forward of more arguments)
        raise invalid(f"it cannot take its inputs of shape {tuple(setting.input_shape)} as its forward's one "
                      f"argument ({type(e).__name__}: {str(e).splitlines()[0][:160]})") from None
    if not isinstance(out, torch.Tensor):  # (a (logits, features) tuple, a dict: the methods read one tensor)
        raise invalid(f"its forward returns a {type(out).__name__}, not a tensor: return the (n, {width}) "
                      "outputs alone")
    if tuple(out.shape) != (len(x), width):
        got = {0: "() (one number for the whole batch)", 1: "(n,) (one number per sample)"}.get(
            out.ndim, f"{tuple(out.shape)[1:]}")
        raise invalid(f"it gives outputs of shape {got}, the data needs ({width},)")


def build_experiment(cfg: RunConfig) -> Experiment:
    cfg = cfg.resolved()  # a no-op for the resolved config of engine.run, run_trial and the Tune trainable
    preflight.run(cfg)  # device, weights file, cluster address: before the data is loaded
    # the environment's switches, read in the model's forward: one line naming the variable (a typo there was
    # blamed on the model, whose fit check runs the forward)
    from fda_ray.kernels import env_impl
    from fda_ray.train.models import conv_layout

    env_impl()
    conv_layout(cfg.device)
    # The driver aggregates and evaluates with the clients' thread count (the serial executor trains here too).
    torch.set_num_threads(cfg.threads)
    # (environment_seed "trial": the trial's seed builds ColoredMNIST / RotatedMNIST, as the FedGP authors ran it)
    built = {"construction_seed": cfg.seed} if cfg.environment_seed == "trial" else {}
    split = load_dataset(cfg.dataset, cfg.data_dir, cfg.download, **built)
    setting = build_setting(split, cfg)
    torch.manual_seed(derive_seed(cfg.seed, purpose="init"))  # the initial global model
    options = {"weights_path": pretrained_path(cfg.model_weights, cfg.model)} if cfg.model_weights else {}
    if cfg.model in MULTI_HEAD_MODELS:
        options["aux_classes"] = tuple(c for _, c in setting.aux_tasks)
    elif setting.aux_tasks:
        raise ValueError(f"model={cfg.model!r} is invalid for dataset {cfg.dataset!r}: its auxiliary labels "
                         f"({', '.join(n for n, _ in setting.aux_tasks)}) need a multi-head model: "
                         f"{', '.join(MULTI_HEAD_MODELS)}")
    try:
        model = build_model(cfg.model, setting.input_shape, setting.num_outputs, **options)
        if isinstance(model, torch.nn.Module):  # (anything else is check_model_fits' line)
            model = model.to(cfg.device)
    except (RuntimeError, ValueError, TypeError) as e:  # e.g. an image model on (n, d) vectors, a wrong state dict
        raise ValueError(f"model={cfg.model!r} is invalid for dataset {cfg.dataset!r} (inputs "
                         f"{tuple(setting.input_shape)}): {str(e).splitlines()[0][:200]}") from None
    check_model_fits(model, cfg.model, setting, cfg.dataset)
    layout = ParamLayout.from_model(model)
    algorithm = ALGORITHMS.get(cfg.method)(cfg, setting, layout, model)
    views = algorithm.views()
    if len(views) != algorithm.num_clients(cfg):
        raise RuntimeError(f"method {cfg.method}: {len(views)} clients' views for {algorithm.num_clients(cfg)} clients")
    if len(views) > cfg.num_sources:  # (FSSDA's devices: no separate target client)
        target_samples = max(len(x) for x, _ in views[cfg.num_sources].values())
        for note in preflight.run_notes(cfg, target_samples):
            warnings.warn(note, preflight.RunWarning, stacklevel=2)
    clients = [Client(i, v, copy.deepcopy(model), layout, seed=cfg.seed, task=setting.task, device=cfg.device,
                      # the target's images carry the target domain's noise; its loader keeps the partial batch
                      noise=setting.noise if i == cfg.num_sources else 0.0,
                      drop_last=cfg.drop_last and i != cfg.num_sources, shuffle=cfg.shuffle,
                      aux_tasks=setting.aux_tasks)
               for i, v in enumerate(views)]
    return Experiment(cfg, algorithm, setting, model, layout, clients)
