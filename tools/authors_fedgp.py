"""Run the FedGP authors' own non-iid script (jackyzyb/AutoFedGP, `main_noniid.py`) on this machine's
Fashion-MNIST, and keep what it records, so that a cell of docs/results/fmnist-noise.md can be set beside the
authors' code on the same data (FedGP, Table 10: FedGP with beta = proj_w).

    python tools/authors_fedgp.py --repo PATH/TO/AutoFedGP --out docs/results/authors-fedgp \\
        --iter noise_0.6_seed8 -- --dataset fmnist --n_target_samples 100 --n_parties 10 \\
        --use_sim --proj_w 1 --partition homo --noise 0.6 --train_seed 8

Everything after `--` goes to main_noniid.py unchanged (the line above is the shipped
scripts/noniid_exp/run_fedgp_0.5.sh with proj_w 1 and a seed). fda-ray does not import or ship the authors'
code: --repo is a checkout of it (`git clone https://github.com/jackyzyb/AutoFedGP`).

The published repository does not run as it stands, and this runner supplies what is missing, nothing else:
- `main_noniid.py` imports a `utils` package that the repository does not contain (`utils.constants`,
  `utils.data_sampler`, `utils.utils`). Of it the script calls only `deterministic(seed)`; the runner provides
  that as in the code the authors credit (nicchiou/domain_adapt_cxr): seed `random`, NumPy and torch (and
  cuDNN deterministic). The other two names are imported and never called.
- It imports `imgaug`, which never runs in the script and does not import under NumPy 2: an empty module
  stands in for it.
- It reads Fashion-MNIST through torchvision with download=True from its `--datadir`: the runner unpacks the
  four idx files of --data (default: Debian's dataset-fashion-mnist) into `DATADIR/FashionMNIST/raw/`, where
  torchvision finds them and downloads nothing. Each is checked first as fda-ray's loader checks it
  (fda_ray.data.releases and read_idx: a file of the release's size must be Zalando's release, any file must be a
  whole IDX file); a damaged one is one line naming it and the command that repairs --data, exit 2, and no file
  (no .part) is left in DATADIR.
It also needs scikit-learn, pandas and tqdm (imported by the script; `pip install scikit-learn pandas tqdm`).

The script writes `experiments/<exp_dir>/server_results_<iter>.json` (the global model's test accuracy after
each of its rounds, `["test"]["acc"]`) and `args_<iter>.json`; the runner copies both to --out with a
`run_<iter>.json` beside them (the repository's commit, this machine's torch and NumPy, the wall time, the
command). `python -m tools.pages` reads them (the `authors-run` block).
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

FASHION_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte")
DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")

# The modules the repository imports but does not contain (the module docstring says why each is what it is).
SHIMS = {
    "utils/__init__.py": "",
    "utils/constants.py": '"""Imported by main_noniid.py, never read."""\n',
    "utils/data_sampler.py": (
        '"""Imported by main_noniid.py, never called."""\n\n\n'
        "def get_subset_indices(*args, **kwargs):\n"
        "    raise NotImplementedError('not part of the published repository')\n\n\n"
        "def get_train_valid_indices(*args, **kwargs):\n"
        "    raise NotImplementedError('not part of the published repository')\n"),
    "utils/utils.py": (
        '"""deterministic(seed), as in nicchiou/domain_adapt_cxr, which main_noniid.py credits."""\n'
        "import random\n\nimport numpy as np\nimport torch\n\n\n"
        "def deterministic(seed):\n"
        "    if seed is not None:\n"
        "        torch.manual_seed(seed)\n"
        "        torch.cuda.manual_seed(seed)\n"
        "        np.random.seed(seed)\n"
        "        random.seed(seed)\n"
        "        torch.backends.cudnn.enabled = False\n"
        "        torch.backends.cudnn.benchmark = False\n"
        "        torch.backends.cudnn.deterministic = True\n"),
    "imgaug/__init__.py": '"""Stands in for imgaug, which main_noniid.py imports and never uses."""\n',
    "imgaug/augmenters.py": '"""Stands in for imgaug.augmenters (imported, never used)."""\n',
}


def checked_idx(path: Path) -> bytes:
    """The uncompressed bytes of Fashion-MNIST file `path` (NAME or NAME.gz), checked as fda-ray's loader checks
    them: a file of the release's size must be the release (sha256, fda_ray.data.releases), and any file must be
    whole (a gzip stream cut short, fewer values than the IDX header declares). ValueError '<path>: <why>'."""
    from fda_ray.data.releases import content_problem, read_content
    from fda_ray.data.standard import parse_idx

    try:
        data = read_content(path)  # a gzip stream cut short, a file that is no gzip: one line, not EOFError
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    if (problem := content_problem("Fashion-MNIST", path, data)) is not None:
        raise ValueError(f"{path}: {problem}")
    parse_idx(path, data)  # the header and the values it declares
    return data


def prepare_datadir(source: Path, datadir: Path) -> Path:
    """Unpack the four Fashion-MNIST idx files (NAME or NAME.gz in `source`) into DATADIR/FashionMNIST/raw/,
    torchvision's layout; returns that folder. A missing file is a FileNotFoundError, a damaged one (checked_idx)
    a ValueError ending in the command that repairs `source`: one line each, naming the file. A file is written
    whole, then renamed; one that fails leaves no .part behind."""
    from fda_ray.data.releases import repair_command

    raw = datadir / "FashionMNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for name in FASHION_FILES:
        dst = raw / name
        if dst.exists():
            try:
                checked_idx(dst)
                continue
            except ValueError:  # a copy an earlier run made of a damaged --data (unchecked then): written again
                pass
        src = next((p for p in (source / name, source / f"{name}.gz") if p.exists()), None)
        if src is None:
            raise FileNotFoundError(f"data={str(source)!r}: neither {name} nor {name}.gz is there "
                                    "(Debian: apt-get install dataset-fashion-mnist)")
        try:
            data = checked_idx(src)
        except ValueError as e:  # damaged: nothing of it is copied
            raise ValueError(f"data={str(source)!r} is invalid: {str(e).splitlines()[0]}; to get it again: "
                             f"{repair_command('Fashion-MNIST', source)}") from None
        part = raw / f"{name}.{os.getpid()}.part"  # renamed when whole: runs side by side share the folder
        try:
            part.write_bytes(data)
            part.replace(dst)
        finally:
            part.unlink(missing_ok=True)  # a write that failed (a full disk, Ctrl-C) leaves no half file
    return raw


def write_shims(root: Path) -> None:
    for rel, text in SHIMS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _commit(repo: Path) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _arg(args: list[str], name: str, default: str) -> str:
    return args[args.index(name) + 1] if name in args else default


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, theirs = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    from fda_ray.core.parsing import OneLineParser, first_paragraph

    # (a bad or unknown flag is one line, exit 2, as fda-ray's programs; main_noniid.py's own flags go after --)
    p = OneLineParser(prog="python tools/authors_fedgp.py", description=first_paragraph(__doc__))
    p.add_argument("--repo", required=True, type=Path, help="a checkout of jackyzyb/AutoFedGP")
    p.add_argument("--out", required=True, type=Path, help="where the run's records are copied")
    p.add_argument("--iter", required=True, help="the run's name (main_noniid.py's --iter_idx)")
    p.add_argument("--data", type=Path, default=DEBIAN_FASHION, help="folder of the four Fashion-MNIST idx files")
    p.add_argument("--work", type=Path, default=Path("/tmp/authors-fedgp"), help="scratch folder")
    a = p.parse_or_exit_code(ours)
    if isinstance(a, int):
        return a
    if not (a.repo / "main_noniid.py").exists():
        print(f"error: repo={str(a.repo)!r} has no main_noniid.py (a checkout of jackyzyb/AutoFedGP)",
              file=sys.stderr)
        return 2
    for name in ("--iter_idx", "--datadir"):
        if name in theirs:
            print(f"error: {name} is set by this runner (--iter, --work)", file=sys.stderr)
            return 2
    try:
        prepare_datadir(a.data, a.work / "data")
    except (FileNotFoundError, ValueError) as e:  # missing or damaged: before the authors' script runs
        print(f"error: {e}", file=sys.stderr)
        return 2
    shims = a.work / "shims"
    write_shims(shims)
    exp_dir = _arg(theirs, "--exp_dir", "fl_noniid")
    cmd = [sys.executable, "main_noniid.py", *theirs, "--iter_idx", a.iter, "--datadir", str(a.work / "data")]
    env = {**os.environ, "PYTHONPATH": str(shims)}
    start = time.time()
    rc = subprocess.run(cmd, cwd=a.repo, env=env).returncode
    wall = time.time() - start
    if rc != 0:
        print(f"error: main_noniid.py exited with {rc}", file=sys.stderr)
        return rc
    import numpy
    import torch
    a.out.mkdir(parents=True, exist_ok=True)
    made = a.repo / "experiments" / exp_dir
    for name in (f"server_results_{a.iter}.json", f"args_{a.iter}.json"):
        shutil.copyfile(made / name, a.out / name)
    run = {"repository": "jackyzyb/AutoFedGP", "commit": _commit(a.repo), "script": "main_noniid.py",
           "arguments": theirs, "iter_idx": a.iter, "wall_s": round(wall, 1),
           "environment": {"python": platform.python_version(), "torch": torch.__version__,
                           "numpy": numpy.__version__, "machine": platform.machine()},
           "command": "python tools/authors_fedgp.py --repo AutoFedGP --out " + str(a.out) + f" --iter {a.iter} -- "
                      + " ".join(theirs)}
    (a.out / f"run_{a.iter}.json").write_text(json.dumps(run, indent=2) + "\n")
    print(f"{a.iter}: {wall:.0f} s; records in {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
