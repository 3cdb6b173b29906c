"""The front ends that run many trials: the command line of one run (cli), trial records (trials), where trials
run (backends), grid sweeps (sweep), Ray Tune searches with model selection (search, tune), figures, the
estimator diagnostics (diagnose) and the synthetic grid (synthetic_grid).
"""
