"""The Ray Tune API from Python (fda_ray.experiments.tune): a trial's trainable, its resources and search spaces.

    from ray import tune
    import fda_ray.tune as ft
    tuner = tune.Tuner(ft.with_resources(), param_space=ft.search_space(method="fedgp", beta=tune.uniform(0, 1)),
                       run_config=tune.RunConfig(checkpoint_config=tune.CheckpointConfig(num_to_keep=1)))

Each round reports a checkpoint (the resume state); Tune keeps them all unless num_to_keep says otherwise.

Trials fused on fusion servers (each trial stays a Tune trial of its own, so schedulers stop single trials; its
clients' local training is batched on its node's server with the other trials' rounds waiting there):

    space = ft.search_space(method="fedgp", vectorise="on", beta=tune.uniform(0, 1))
    with ft.fusion_servers(space) as served:
        tune.Tuner(ft.with_resources(space, served=served, fuse=8), param_space=space).fit()
"""
from fda_ray.experiments.tune import (DRIVER_RESOURCE, RECORD_KEY, RUN_FIELDS, STATE_FILE, config_from_params,
                                      driver_placement, flat_params, fusion_servers, metrics,
                                      resources, search_space, trainable, with_resources)

__all__ = ["DRIVER_RESOURCE", "RECORD_KEY", "RUN_FIELDS", "driver_placement", "STATE_FILE", "config_from_params",
           "flat_params", "fusion_servers", "metrics", "resources", "search_space", "trainable", "with_resources"]


if __name__ == "__main__":  # a library module run as a program (`python -m fda_ray.tune`): say which program is meant
    import sys

    from fda_ray.experiments.commands import not_a_program

    sys.exit(not_a_program("fda_ray.tune", "python -m fda_ray.sweep --grid NAME --backend tune"))
