"""The round runtime: a config (config) becomes data partitions (partitions), pre-flight checks (preflight), an
experiment (experiment), an executor that hosts the clients (executors; ray_executor), and the round loop
(loop) run in this process (engine) or on a Ray driver actor (driver). Ray is imported only here and in the
Tune front end (fda_ray.experiments).
"""
