"""Generators for single runs' files: a run's Parquet file (python -m fda_ray --parquet) and the synthetic grid's
grid.json."""
from __future__ import annotations

import json

from tools.pages import records
from tools.pages.engine import GENERATORS


@GENERATORS.register("run-file")
def run_file(name: str, file: str, what: str = "final", metric: str = "accuracy", round: str | None = None,
             digits: str = "2") -> str:
    """One run's `metric` (%) from docs/results/<name>/<file>.parquet (every round of a `python -m fda_ray
    --parquet` run): what=final (its last row), peak (its best round) or at (round=N, as the rows number it)."""
    import pyarrow.parquet as pq

    path = records.RESULTS / name / f"{file}.parquet"
    if not path.is_file():
        raise ValueError(f"run-file: {str(path)!r} does not exist")
    t = pq.read_table(path, columns=["round", metric]).to_pylist()
    got = [(r["round"], 100 * r[metric]) for r in t if r[metric] is not None]
    if what == "final":
        x = got[-1][1]
    elif what == "peak":
        x = max(v for _, v in got)
    elif what == "at" and round is not None:
        hit = [v for k, v in got if k == int(round)]
        if not hit:
            raise ValueError(f"run-file: {file!r} has no round {round}")
        x = hit[-1]
    else:
        raise ValueError(f"what={what!r} is invalid: final, peak, or at with round=N")
    return f"{x:.{int(digits)}f}"


@GENERATORS.register("synthetic-agreement")
def synthetic_agreement(name: str, kind: str) -> str:
    """The synthetic grid's share of cells where the rule predicted at initialisation is the best after training
    (fda_ray.experiments.synthetic_grid.agreement, recomputed from the cells of docs/results/<name>/grid.json):
    kind static or auto: "44"."""
    from fda_ray.experiments.synthetic_grid import agreement

    if kind not in ("static", "auto"):
        raise ValueError(f"kind={kind!r} is invalid: static or auto")
    result = json.loads((records.RESULTS / name / "grid.json").read_text())
    return f"{100 * agreement({'config': result['config'], 'cells': result['cells']})[f'agreement_{kind}']:.0f}"


@GENERATORS.register("synthetic")
def synthetic(name: str, what: str, arg: str = "") -> str:
    """A number of the synthetic grid's docs/results/<name>/grid.json (written by python -m fda_ray.synthetic_grid):
    what = near_static or near_auto (the share, %, of cells where the predicted rule is within 1 % of the best),
    stable_static or stable_auto (cells whose winner no trial disputes, "n of N"), trials_static or trials_auto
    (the per-trial agreement's range, "a-b"), wins:<predicted|actual_static|actual_auto> with arg a rule (cells
    won), beta with arg fedda_auto or fedgp_auto (the estimated beta's mean over cells, 2 decimals), mse with
    arg "<size>:<source>:<rule>" (a cell's mean test MSE, 3 decimals), seconds (the cells' compute, minutes), or
    eq11_changes / eq11_agreement (with eq (11)'s approximation of FedGP's Delta for the Monte-Carlo value: the cells
    whose predicted rule changes, and the agreement share at the static beta, %)."""
    result = json.loads((records.RESULTS / name / "grid.json").read_text())
    cells = [c for row in result["cells"] for c in row]
    if what in ("near_static", "near_auto"):
        return f"{100 * result[what.replace('near', 'near_best')]:.0f}"
    if what in ("stable_static", "stable_auto"):
        return f"{round(result[what] * len(cells))} of {len(cells)}"
    if what in ("trials_static", "trials_auto"):
        v = result[f"agreement_{what.split('_')[1]}_trials"]
        return f"{100 * min(v):.0f}-{100 * max(v):.0f}"
    if what.startswith("wins:"):
        return str(result[f"wins_{what.split(':', 1)[1]}"][arg])
    if what == "beta":
        return f"{sum(c['beta'][arg] for c in cells) / len(cells):.2f}"
    if what == "mse":
        size, source, rule = arg.split(":")
        cfg = result["config"]
        c = result["cells"][cfg["sizes"].index(int(size))][cfg["sources"].index(int(source))]
        return f"{c['test_mse'][rule]:.3f}"
    if what == "seconds":
        return f"{result['seconds'] / 60:.0f}"
    if what in ("eq11_changes", "eq11_agreement"):
        # the prediction with eq (11)'s approximation of FedGP's Delta in place of the Monte-Carlo value
        rules = ("target_only", "source_only", "fedda", "fedgp")
        pred = [min(rules, key=lambda r: (c["delta"]["fedgp_eq11"] if r == "fedgp" else c["delta"][r], rules.index(r)))
                for c in cells]
        if what == "eq11_changes":
            return str(sum(p != c["predicted"] for p, c in zip(pred, cells)))
        return f"{100 * sum(p == c['actual_static'] for p, c in zip(pred, cells)) / len(cells):.0f}"
    raise ValueError(f"what={what!r} is invalid: near_*, stable_*, trials_*, wins:<key>, beta, mse, seconds, "
                     "eq11_changes or eq11_agreement")


DIAGNOSE_RULES = {"target_only": "Target only", "source_only": "Source only", "fedda": "FedDA", "fedgp": "FedGP",
                  "fedda_auto": "FedDA auto", "fedgp_auto": "FedGP auto"}


@GENERATORS.register("diagnose")
def diagnose(name: str, file: str, side: str, what: str, digits: str = "3") -> str:
    """A number or a rule of a `python -m fda_ray.diagnose --json` record, docs/results/<name>/<file>.json, on its
    `side` (true or estimated): what = best_static or best (the rule, named), sigma, d-mean (the sources' mean d_i),
    delta2:<rule> (its Delta^2, eq (9)'s bound), and on the true side of a record that has them (fda_ray.diagnose
    since the exact column) exact:<rule> (the several-source Delta^2 itself of a rule linear in g_T), best-linear
    and exact-best-linear (among those rules, the one the bound ranks first and the one the exact value does)."""
    if side not in ("true", "estimated"):
        raise ValueError(f"side={side!r} is invalid: true or estimated")
    path = records.RESULTS / name / f"{file}.json"
    if not path.is_file():
        raise ValueError(f"diagnose: {str(path)!r} does not exist")
    q = json.loads(path.read_text())[side]
    if q is None:
        raise ValueError(f"diagnose: {file!r} has no {side} values")
    if what in ("best_static", "best"):
        return DIAGNOSE_RULES[q[what]]
    exact = q.get("delta2_exact")
    if what in ("best-linear", "exact-best-linear") or what.startswith("exact:"):
        if not exact:
            raise ValueError(f"diagnose: {file!r} has no exact Delta^2 on its {side} side (a record written before "
                             "the exact column, or the estimated side): rerun its command")
        if what == "best-linear":  # (ties: the order diagnose lists the rules in)
            return DIAGNOSE_RULES[min(exact, key=lambda r: (q["delta2"][r], list(exact).index(r)))]
        if what == "exact-best-linear":
            return DIAGNOSE_RULES[min(exact, key=lambda r: (exact[r], list(exact).index(r)))]
        if what[len("exact:"):] not in exact:
            raise ValueError(f"what={what!r} is invalid: exact:<rule> for a rule of {', '.join(exact)}")
        return f"{exact[what[len('exact:'):]]:.{int(digits)}g}"
    if what == "sigma":
        x = q["sigma"]
    elif what == "d-mean":
        x = sum(q["d_i"]) / len(q["d_i"])
    elif what.startswith("delta2:") and what[len("delta2:"):] in q["delta2"]:
        x = q["delta2"][what[len("delta2:"):]]
    else:
        raise ValueError(f"what={what!r} is invalid: best_static, best, sigma, d-mean, delta2:<rule>, exact:<rule>, "
                         "best-linear or exact-best-linear")
    return f"{x:.{int(digits)}g}"


@GENERATORS.register("bench-sweep")
def bench_sweep(name: str) -> str:
    """The sweep benchmark's tables (python -m benchmarks.sweep --json) from docs/results/bench-sweep/<name>.json,
    under a line naming the machine, the column, torch and Ray, and the date it ran."""
    from benchmarks.sweep import table

    result = _bench_result(name, "bench-sweep")
    m = result["machine"]
    extra = " ".join(result.get("extra") or [])
    head = (f"{result['grid']} grid, {result['profile']} profile, column {result['values']}, {result['seeds']} "
            f"seed(s){' (' + extra + ')' if extra else ''}; {m['cpus']} CPUs, {m['gpu'] or 'no GPU'}; torch "
            f"{m['torch']}, Ray {m['ray']}, Python {m['python']}; {m['date']}.")
    return head + "\n\n" + table(result)


LEASE_MARGIN_S = 8  # seconds trimmed from both ends of a step's window (the sampler's start is known to a few s)


def _lease_steps(name: str) -> dict[str, dict]:
    """steps.txt's steps, each with the samples (busy %, memory MiB) inside it. Sample k lies at `setup` seconds
    (setup.txt; the sampler starts after the set-up) plus its time since the first sample; LEASE_MARGIN_S seconds
    are left out at both ends of each step, so a sample near a step's edge, whose step the few seconds'
    uncertainty leaves open, counts for neither."""
    import csv
    import datetime
    import re

    folder = records.RESULTS / "bench-sweep" / name
    if not (folder / "steps.txt").is_file():
        raise ValueError(f"gpu-lease: {str(folder / 'steps.txt')!r} does not exist")
    setup = re.search(r"^setup (\d+) s", (folder / "setup.txt").read_text(), re.M)
    if setup is None:
        raise ValueError(f"gpu-lease: {str(folder / 'setup.txt')!r} names no 'setup N s' line")
    samples: list[tuple[float, float, float]] = []  # (s since the lease's start, busy %, memory MiB)
    first = None
    for row in csv.reader((folder / "smi.csv").read_text().splitlines()):
        try:
            t = datetime.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
            busy, mem = float(row[1]), float(row[2])
        except (ValueError, IndexError):
            continue
        first = first or t
        samples.append((int(setup.group(1)) + (t - first).total_seconds(), busy, mem))
    steps: dict[str, dict] = {}
    for line in (folder / "steps.txt").read_text().splitlines():
        if m := re.match(r"== (\S+) start (\d+) s", line):
            steps[m.group(1)] = {"start": int(m.group(2))}
        elif m := re.match(r"== (\S+) rc=(\d+) (\d+) s", line):
            steps[m.group(1)].update(rc=int(m.group(2)), seconds=int(m.group(3)))
    for s in steps.values():
        lo, hi = s["start"] + LEASE_MARGIN_S, s["start"] + s.get("seconds", 0) - LEASE_MARGIN_S
        s["samples"] = [(b, m) for t, b, m in samples if lo <= t <= hi]
    return steps


@GENERATORS.register("gpu-lease")
def gpu_lease(name: str) -> str:
    """One GPU lease's steps (tools/gpu-sweep-check.sh's records in docs/results/bench-sweep/<name>/): each step's
    start, seconds and exit code (steps.txt), and nvidia-smi's samples (smi.csv, once a second) inside it: the mean
    busy share and the most device memory in use (every process: CUDA contexts and allocator caches included)."""
    steps = _lease_steps(name)
    lines = ["| step | started (s) | seconds | exit | GPU busy (%, mean) | GPU memory (GiB, peak) |",
             "|---|---:|---:|---:|---:|---:|"]
    for step, s in steps.items():
        inside = s["samples"]
        busy = f"{sum(b for b, _ in inside) / len(inside):.0f}" if inside else "-"
        mem = f"{max(m for _, m in inside) / 1024:.1f}" if inside else "-"
        lines.append(f"| {step} | {s['start']} | {s.get('seconds', '-')} | {s.get('rc', '-')} | {busy} | {mem} |")
    return "\n".join(lines)


@GENERATORS.register("bench-ratio")
def bench_ratio(name: str, backend: str) -> str:
    """One backend's wall time over the local backend's in docs/results/bench-sweep/<name>.json, as the
    bench-sweep table's `x local` column prints it: "1.13"."""
    from benchmarks.sweep import x_local

    result = _bench_result(name, "bench-ratio")
    ratio = x_local(result, backend)
    if ratio is None:
        have = ", ".join(r["backend"] for r in result["backends"])
        raise ValueError(f"bench-ratio: {name!r} has no local and {backend!r} rows (it has {have})")
    return f"{ratio:.2f}"


@GENERATORS.register("bench-speedup")
def bench_speedup(name: str, base: str, other: str) -> str:
    """How many times faster backend `other` ran than `base` in docs/results/bench-sweep/<name>.json (the walls'
    ratio, measured side by side in one benchmark): "1.12"."""
    walls = {r["backend"]: r["wall_seconds"] for r in _bench_result(name, "bench-speedup")["backends"]}
    if base not in walls or other not in walls:
        raise ValueError(f"bench-speedup: {name!r} has no {base!r} and {other!r} rows (it has {', '.join(walls)})")
    return f"{walls[base] / walls[other]:.2f}"


@GENERATORS.register("bench-minutes")
def bench_minutes(name: str, backend: str) -> str:
    """One backend's wall time in minutes in docs/results/bench-sweep/<name>.json: "21.4"."""
    walls = {r["backend"]: r["wall_seconds"] for r in _bench_result(name, "bench-minutes")["backends"]}
    if backend not in walls:
        raise ValueError(f"bench-minutes: {name!r} has no {backend!r} row (it has {', '.join(walls)})")
    return f"{walls[backend] / 60:.1f}"


@GENERATORS.register("fused-ops")
def fused_ops(name: str, layout: str, field: str) -> str:
    """One number of docs/results/bench-fused/<name>.json (python -m benchmarks.fused_ops --json) for one convolution
    layout: `fused` / `unfused` (ATen operators a trial-step dispatches, fused or one trial alone), `ratio` (fused
    over unfused, "1.19"), `speedup` (a round's seconds one trial after another over fused, "1.07"),
    `unfused_seconds` / `fused_seconds` (those rounds' seconds, "3.09"), and in a result that has them
    `conv_seconds` (the fused round's convolutions' seconds), `conv_share` (their percent of the fused round) and
    `bound` (the most fusing can gain with them as they are: benchmarks.fused_ops.bound)."""
    from benchmarks.fused_ops import bound

    layouts = _result_file("bench-fused", name, "fused-ops")["layouts"]
    if layout not in layouts:
        raise ValueError(f"fused-ops: layout={layout!r} is invalid: {name!r} has {', '.join(layouts)}")
    m = layouts[layout]
    values = {"fused": f"{m['fused_aten_per_step']:.0f}", "unfused": f"{m['unfused_aten_per_step']:.0f}",
              "ratio": f"{m['fused_aten_per_step'] / m['unfused_aten_per_step']:.2f}",
              "speedup": f"{m['round_seconds_unfused'] / m['round_seconds_fused']:.2f}",
              "unfused_seconds": f"{m['round_seconds_unfused']:.2f}", "fused_seconds": f"{m['round_seconds_fused']:.2f}"}
    if m.get("conv_seconds_fused"):
        values.update(conv_seconds=f"{m['conv_seconds_fused']:.2f}", bound=f"{bound(m):.2f}",
                      conv_share=f"{100 * m['conv_seconds_fused'] / m['round_seconds_fused']:.0f}")
    if field not in values:
        raise ValueError(f"fused-ops: field={field!r} is invalid: one of {', '.join(values)}")
    return values[field]


def _bench_result(name: str, generator: str) -> dict:
    """docs/results/bench-sweep/<name>.json, a python -m benchmarks.sweep --json result."""
    return _result_file("bench-sweep", name, generator)


def _result_file(folder: str, name: str, generator: str) -> dict:
    """docs/results/<folder>/<name>.json, a benchmark's --json result; a missing one names the path."""
    path = records.RESULTS / folder / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"{generator}: {str(path)!r} does not exist")
    return json.loads(path.read_text())


@GENERATORS.register("bench-served")
def bench_served(name: str) -> str:
    """Served trials beside the same trials unfused (python -m benchmarks.served --json) from
    docs/results/bench-served/<name>.json: its command, a line naming the machine and the trials, and the table."""
    from benchmarks.served import table

    result = _result_file("bench-served", name, "bench-served")
    m = result["machine"]
    head = (f"`{result['command']}`: {result['grid']} grid, {result['profile']} profile, column {result['values']}, "
            f"{result['seeds']} seed(s), {result['runs'][0]['trials']} trials, device {result['device']}; {m['cpus']} "
            f"CPUs, {m['gpu'] or 'no GPU'}; torch {m['torch']}, Ray {m['ray']}; {m['date']}.")
    return head + "\n\n" + table(result)


@GENERATORS.register("compiled-step")
def compiled_step(name: str) -> str:
    """A fused step eager and compiled (python -m benchmarks.compiled_step --json) from
    docs/results/bench-fused/<name>.json: its command, a line naming the machine and the rows, and the table."""
    from benchmarks.compiled_step import table

    r = _result_file("bench-fused", name, "compiled-step")
    m = r["machine"]
    head = (f"`{r['command']}`: {r['rows']} rows ({r['trials']} trials x {r['clients']} clients), batch {r['batch']}, "
            f"device {r['device']}, {r['threads']} thread(s); {m['cpus']} CPUs, {m['gpu'] or 'no GPU'}; torch "
            f"{r['torch']}; {m['date']}.")
    return head + "\n\n" + table(r)


@GENERATORS.register("bench-pool")
def bench_pool(name: str) -> str:
    """The pooling kernel beside PyTorch's ops (python -m benchmarks.pool --json) from
    docs/results/bench-pool/<name>.json: its command, a line naming the machine, and the table."""
    from benchmarks.pool import table

    r = _result_file("bench-pool", name, "bench-pool")
    m = r["machine"]
    head = (f"`{r['command']}`: batch {r['batch']}, {r['threads']} thread(s); {m['cpus']} CPUs, "
            f"{m['gpu'] or 'no GPU'}; torch {r['torch']}; {m['date']}.")
    return head + "\n\n" + table(r)


@GENERATORS.register("bench-pool-step")
def bench_pool_step(name: str, kind: str) -> str:
    """How many times faster a training step ran with the pooling kernel (`kind`: plain, the simple CNN; fused, its
    stacked rows; lenet, SHOT's LeNet) in docs/results/bench-pool/<name>.json: "1.50"."""
    rows = {row["kind"]: row for row in _result_file("bench-pool", name, "bench-pool-step")["training"]}
    if kind not in rows:
        raise ValueError(f"bench-pool-step: kind={kind!r} is invalid: one of {', '.join(rows)}")
    return f"{rows[kind]['reference_ms'] / rows[kind]['kernel_ms']:.2f}"


@GENERATORS.register("gpu-lease-memory")
def gpu_lease_memory(name: str, step: str, per: str = "1") -> str:
    """The most device memory (GiB) in use inside one step of a lease (as `gpu-lease` reads it), divided by `per`
    (the trials it ran at once): "9.4"."""
    got = _lease_steps(name).get(step)
    if got is None or not got["samples"]:
        raise ValueError(f"gpu-lease-memory: {name!r} has no samples inside a step {step!r}")
    return f"{max(m for _, m in got['samples']) / 1024 / int(per):.1f}"
