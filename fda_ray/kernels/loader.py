"""Builds and loads the C++ and CUDA kernels through torch.utils.cpp_extension, once, with a persistent cache.

The first call that needs a kernel compiles it (seconds for C++: 7 s on 2 cores; a few minutes for CUDA) into
$FDA_RAY_KERNEL_CACHE (default ~/.cache/fda_ray/kernels/<kind>-torch<version>-py<version>-<cpu>-<sources' digest>:
cache_dir; two checkouts of the same kernels share one build), and later
processes load the cached library in milliseconds; cpp_extension rebuilds only when a source or a flag
changes, and a file lock keeps concurrent processes (Ray workers, sweep trials) from building twice.

Without a compiler, CUDA toolkit or GPU (or when a build fails) the caller falls back to the PyTorch
reference with one logged warning that says why; nothing else changes.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import torch

CSRC = Path(__file__).with_name("csrc")
CPU_SOURCES = (CSRC / "projection.cpp", CSRC / "pool.cpp")
CUDA_SOURCES = (CSRC / "projection_cuda.cu",)
LIB_NAMES = {"cpu": "fda_ray_kernels_cpu", "cuda": "fda_ray_kernels_cuda"}
log = logging.getLogger("fda_ray.kernels")

# "ok" once loaded, an error message once a build or load failed, absent while not tried.
_status: dict[str, str] = {}
_seconds: dict[str, float] = {}  # the time each kind's build or load took in this process (a run's start-up phase)


from fda_ray.core.build import cpu_capability  # noqa: E402  (the build names it too)


def sources_digest(kind: str) -> str:
    """12 hex digits over the kind's sources and headers (their contents, not their paths) and its flags."""
    h = hashlib.sha1()
    for path in (*(CPU_SOURCES if kind == "cpu" else CUDA_SOURCES), *sorted(CSRC.glob("*.h"))):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(" ".join(cpu_flags() if kind == "cpu" else ["-O3"]).encode())
    return h.hexdigest()[:12]


def cache_dir(kind: str) -> Path:
    """Where the `kind` library is built: one folder per torch, Python, CPU capability (cpu) and sources' contents.
    Keyed by the sources' contents, not by the checkout they come from, two checkouts of the same kernels share one
    build (the sources are copied into the folder and compiled from there: cpp_extension rebuilds when the
    source paths in its build file change, which cost a rebuild at every switch between checkouts), and checkouts
    of different kernels keep a build each."""
    base = Path(os.environ.get("FDA_RAY_KERNEL_CACHE") or Path.home() / ".cache" / "fda_ray" / "kernels")
    tag = f"{kind}-torch{torch.__version__.replace('+', '_')}-py{sys.version_info.major}{sys.version_info.minor}"
    tag = f"{tag}-{cpu_capability().lower()}" if kind == "cpu" else tag
    return base / f"{tag}-{sources_digest(kind)}"


def _staged_sources(kind: str, directory: Path) -> tuple[list[str], Path]:
    """The kind's sources copied into `directory`/src (each written atomically, once): (sources, include folder)."""
    src = directory / "src"
    src.mkdir(parents=True, exist_ok=True)
    for path in (*(CPU_SOURCES if kind == "cpu" else CUDA_SOURCES), *sorted(CSRC.glob("*.h"))):
        target = src / path.name
        if not target.is_file() or target.read_bytes() != path.read_bytes():
            tmp = src / f".{path.name}.{os.getpid()}"
            tmp.write_bytes(path.read_bytes())
            os.replace(tmp, target)
    names = CPU_SOURCES if kind == "cpu" else CUDA_SOURCES
    return [str(src / p.name) for p in names], src


def cpu_flags() -> list[str]:
    # OpenMP: at::parallel_for is a template compiled into this library; without -fopenmp it runs serially.
    flags = ["-O3", "-fopenmp"]
    # The build is cached per CPU capability (cache_dir). The float64 sums are compute-bound without wide
    # vectors: AVX-512 doubles their speed again over AVX2 (measured 5.2 vs 3.5 G elements/s per core).
    if cpu_capability() in ("AVX2", "AVX512"):
        flags += ["-mavx2", "-mfma"]
    if cpu_capability() == "AVX512":
        flags += ["-mavx512f", "-mavx512vl", "-mprefer-vector-width=512"]
    return flags


def _cuda_arch_list() -> None:
    """Compile for the GPU that is here (cpp_extension's default without one is every architecture: slow)."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    else:
        os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"


def cuda_home(found: str | None) -> str | None:
    """A CUDA toolkit with headers: $CUDA_HOME, torch's guess, or the newest /usr/local/cuda-*.

    torch guesses from `which nvcc`, which can be a wrapper script outside the toolkit (/usr/local/bin/nvcc)."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), found, "/usr/local/cuda",
                  *sorted((str(p) for p in Path("/usr/local").glob("cuda-*")), reverse=True)]
    for c in candidates:
        if c and (Path(c) / "include" / "cuda_runtime.h").exists() and (Path(c) / "bin" / "nvcc").exists():
            return c
    return None


def build(kind: str, *, verbose: bool = False) -> None:
    """Compile (or load from the cache) the `kind` ("cpu" or "cuda") library into this process; raises on failure."""
    from fda_ray.core.quiet import quiet_worker

    quiet_worker()  # (any process of a quiet run, a client actor's too: torch's no-CUDA notice as cpp_extension loads)
    from torch.utils import cpp_extension

    if kind not in LIB_NAMES:
        raise ValueError(f"kind={kind!r} is invalid: 'cpu' or 'cuda'")
    directory = cache_dir(kind)
    built = directory / f"{LIB_NAMES[kind]}.so"
    compiler = shutil.which(os.environ.get("CXX", "c++")) is not None
    if built.is_file() and (not compiler or not os.access(directory, os.W_OK)):
        # A finished build of these sources and flags (the folder's name is their digest), where cpp_extension could
        # not check it (it needs a compiler, and writes its lock file into the folder: a cache shared read-only, a
        # machine with the library but no compiler): loaded as it is.
        torch.ops.load_library(str(built))
        _status[kind] = "ok"
        return
    directory.mkdir(parents=True, exist_ok=True)
    if kind == "cpu":
        if not compiler:
            raise RuntimeError(f"no C++ compiler ({os.environ.get('CXX', 'c++')}) on PATH")
        sources, include = _staged_sources("cpu", directory)
        cpp_extension.load(name=LIB_NAMES["cpu"], sources=sources,
                           extra_include_paths=[str(include)], extra_cflags=cpu_flags(), extra_ldflags=["-fopenmp"],
                           build_directory=str(directory), is_python_module=False, verbose=verbose)
    else:
        cpp_extension.CUDA_HOME = cuda_home(cpp_extension.CUDA_HOME)
        if cpp_extension.CUDA_HOME is None:
            raise RuntimeError("no CUDA toolkit found (set CUDA_HOME to the directory that holds bin/nvcc and "
                               "include/cuda_runtime.h)")
        _cuda_arch_list()
        sources, include = _staged_sources("cuda", directory)
        cpp_extension.load(name=LIB_NAMES["cuda"], sources=sources,
                           extra_include_paths=[str(include)], extra_cflags=["-O3"], extra_cuda_cflags=["-O3"],
                           build_directory=str(directory), is_python_module=False, verbose=verbose)
    _status[kind] = "ok"


# One thread builds or loads at a time: a fused group's trials (fda_ray.runtime.fusion) aggregate in threads of one
# process, and two threads loading one library would register its operators twice (the second would fail and fall
# back to the reference). Re-entrant: ensure("cuda") ensures "cpu" first.
_ENSURE_LOCK = threading.RLock()


def ensure(kind: str) -> bool:
    """True when the `kind` library is loaded; tries once per process, logs one warning when it cannot."""
    if kind in _status:
        return _status[kind] == "ok"
    with _ENSURE_LOCK:
        return _ensure(kind)


def _ensure(kind: str) -> bool:
    if kind not in _status:
        if kind == "cuda" and not torch.cuda.is_available():
            _status[kind] = "no CUDA device"
            return False
        t0, nested = time.perf_counter(), seconds()
        try:
            if kind == "cuda" and not ensure("cpu"):  # the operators' schemas live in the CPU library
                raise RuntimeError(f"the CPU library is not available: {_status['cpu']}")
            build(kind)
        except Exception as e:  # a missing compiler, a failed build: the reference takes over
            _status[kind] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
            log.warning("fda_ray.kernels: the %s kernel is not available (%s); using the PyTorch reference",
                        kind.upper(), _status[kind])
        finally:
            _seconds[kind] = time.perf_counter() - t0 - (seconds() - nested)  # (the CPU library's own, if loaded)
    return _status[kind] == "ok"


def seconds() -> float:
    """Seconds this process has spent building or loading kernels so far."""
    return sum(_seconds.values())


def status() -> dict[str, str]:
    """What was tried so far: kind -> "ok" or why not."""
    return dict(_status)
