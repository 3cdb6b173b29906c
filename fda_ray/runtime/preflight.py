"""Pre-flight checks: everything a run or a sweep needs from the machine, checked before any work is done.

Field validation lives with the fields (RunConfig, GridConfig); these checks need the world outside the config:

    output_file, output_dir   where results will be written: the right kind, writable (probed), so a run never
                              finishes and then fails to save what it computed
    device                    'cuda[:i]' needs that GPU here
    model_weights             the local state-dict file exists and is readable
    ray_address               a cluster answers at that address within RAY_CONNECT_TIMEOUT_S
    autoscaler_node_types     the node types `ray up`'s autoscaler can add (fda_ray.runtime.resources plans a trial
                              on them and refuses, in one line, a request no node can ever hold)
    shared_storage            on a multi-node cluster, every other node sees and writes the sweep's --out
                              (probed by a task pinned to each node)
    ignored_options           options the chosen method or executor does not use (one warning line)

Every failure is a PreflightError (a ValueError): one line, `<field>=<value> is invalid: <why>`.
"""
from __future__ import annotations

import os
import re
import socket
import tempfile
import uuid
from pathlib import Path
from typing import Any, Iterable

from fda_ray.core.storage import StoragePath, is_uri, storage_path
from fda_ray.core.user_files import is_number
from fda_ray.core.config import RunConfig, config_keywords, keyword_names, keyword_params
from fda_ray.core.notices import RunWarning  # (raised here; imported from here by the runtime and the CLIs)

RAY_CONNECT_TIMEOUT_S = 10.0
# Written by `ray up` on the head node: the cluster's node types (the autoscaler can add any of them).
AUTOSCALER_CONFIG = "~/ray_bootstrap_config.yaml"


class PreflightError(ValueError):
    """A run or sweep cannot do its work here; the message is the one line a CLI prints."""


def _err(field: str, value: Any, why: str) -> PreflightError:
    return PreflightError(f"{field}={value!r} is invalid: {why}")


# ---------------------------------------------------------------- outputs

def _exists(p: Path) -> bool:
    try:
        os.stat(p)
        return True
    except OSError:  # absent, or a name the filesystem cannot even look up (too long: checked by _names_fit)
        return False


def _existing_ancestor(p: Path) -> Path:
    anc = p
    while not _exists(anc) and anc != anc.parent:
        anc = anc.parent
    return anc


def _probe_writable(field: str, value: Any, d: Path) -> None:
    """Create and remove a file in directory d: os.access says yes to root on a read-only mount."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".fda-ray-probe-", dir=d)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise _err(field, value, f"cannot write in {d} ({e.strerror or type(e).__name__})") from None


MiB = 1 << 20


def _names_fit(field: str, value: Any, p: Path, anc: Path, below: str = "") -> None:
    """Every name still to be created under `anc` on the way to p/`below` fits the filesystem's name limit, and the
    whole path its path limit (an error now, not after the training)."""
    try:
        name_max, path_max = os.pathconf(anc, "PC_NAME_MAX"), os.pathconf(anc, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    full = p / below if below else p
    for part in full.relative_to(anc).parts if full.is_relative_to(anc) else full.parts:
        if len(os.fsencode(part)) > name_max:
            raise _err(field, str(value), f"the name {part[:40]!r}... is {len(os.fsencode(part))} bytes, over this "
                                          f"filesystem's limit of {name_max}")
    if len(os.fsencode(str(full))) >= path_max:
        raise _err(field, str(value), f"the path of what is written there ({full}) is {len(os.fsencode(str(full)))} "
                                      f"bytes, over this filesystem's limit of {path_max}")


def free_space(field: str, value: Any, where: Path, need: int) -> None:
    """At least `need` bytes free where the outputs go (a rough need: a full disk fails now, not mid-run)."""
    try:
        st = os.statvfs(where)
    except (OSError, AttributeError):
        return
    free = st.f_bavail * st.f_frsize
    if free < need:
        raise _err(field, str(value), f"{where} has {free / MiB:.1f} MiB free, and this needs about "
                                      f"{need / MiB:.0f} MiB; free some space or choose another place")


def output_file(field: str, value: str | os.PathLike, need: int = 16 * MiB) -> Path:
    """A file a run will write at the end (written atomically: a temporary file, then a rename; a symlink is
    written through to its target)."""
    p = Path(value).expanduser().absolute()
    _names_fit(field, value, p, _existing_ancestor(p.parent))  # first: a name too long cannot even be looked up
    if p.is_symlink():
        p = Path(os.path.realpath(p))  # (a dangling link: its target is what gets written)
    if p.is_dir():
        raise _err(field, str(value), "it is a directory; name a file")
    anc = _existing_ancestor(p.parent)
    if not anc.is_dir():
        raise _err(field, str(value), f"{anc} is a file, not a directory")
    if p.exists() and not os.access(p, os.W_OK):
        raise _err(field, str(value), "the file exists and is read-only")
    _probe_writable(field, str(value), anc)
    free_space(field, value, anc, need)
    return p


def output_dir(field: str, value: str | os.PathLike | StoragePath, below: str = "", need: int = 64 * MiB
               ) -> Path | StoragePath:
    """A directory a run or sweep writes into (created if missing): a local path, or a URI (s3://, gs://, ...)
    where a probe object is written and deleted, so bad credentials or a missing bucket fail now. Locally its
    names, and the longest relative path `below` it that will be written, fit the filesystem's limits, and `need`
    bytes are free."""
    if isinstance(value, StoragePath) and not value.is_local or is_uri(value):
        text = value.uri if isinstance(value, StoragePath) else str(value)
        scheme, _, rest = text.partition("://")
        if not rest.strip("/"):  # `s3://`: it was written to a local folder ./s3:
            raise _err(field, text, f"it names no bucket; {scheme}://BUCKET/PREFIX")
        if scheme != scheme.lower():  # pyarrow knows s3, not S3: it refused with credentials advice
            raise _err(field, text, f"write the scheme in lower case: {scheme.lower()}://{rest}")
        if (odd := sorted(set(re.sub(r"[A-Za-z0-9._~/=+@,:-]", "", rest)))):
            # (a space or a non-ASCII letter: Tune cannot parse the URI after the sweep has started; a '#' cut the
            # path there, and Tune's state went to another prefix than the records)
            raise _err(field, text, f"{''.join(odd)!r} in a URI's path; use letters, digits and . _ ~ - / = + @ , :")
        where = storage_path(value)
        probe = where / f".fda-ray-probe-{uuid.uuid4().hex[:12]}"
        try:
            probe.write_bytes(b"fda-ray")
            probe.unlink(marker=False)  # (a dry run leaves no trace)
        except Exception as e:  # pyarrow raises OSError subclasses with the store's own message
            from fda_ray.core.interrupts import cut_line

            why = getattr(e, "reason", None) or (str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
            advice = "the credentials and $AWS_ENDPOINT_URL" if scheme.lower() == "s3" else "the credentials"
            raise _err(field, str(value), f"cannot write there ({cut_line(why, 400)}); check the bucket, "
                                          f"{advice}") from None
        return where
    p = Path(value).expanduser().absolute()
    anc = _existing_ancestor(p)
    _names_fit(field, value, p, anc, below)  # first: a name too long cannot even be looked up
    if p.exists() and not p.is_dir():
        raise _err(field, str(value), "it is a file, not a directory")
    if not anc.is_dir():
        raise _err(field, str(value), f"{anc} is a file, not a directory")
    _probe_writable(field, str(value), anc)
    free_space(field, value, anc, need)
    return p


def layout(field: str, value: Any, where: Path | StoragePath, files: Iterable[str] = (), dirs: Iterable[str] = ()
           ) -> None:
    """What a command writes inside its output folder is not already there as the other kind (a folder where a
    result file goes, a file where the records folder goes): an error now, not after the work."""
    if not isinstance(where, Path):
        return  # an object store: no kinds to collide
    for name in files:
        if (where / name).is_dir():
            raise _err(field, str(value), f"{where / name} is a folder, where this writes a file; move it away")
    for name in dirs:
        if (where / name).exists() and not (where / name).is_dir():
            raise _err(field, str(value), f"{where / name} is a file, where this writes a folder; move it away")


# ---------------------------------------------------------------- device, weights

_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def device(value: str, field: str = "device") -> None:
    """'cpu', or a CUDA device that this machine has."""
    if not _DEVICE.match(value):
        raise _err(field, value, "'cpu', 'cuda' or 'cuda:<index>'")
    if value == "cpu":
        return
    import torch

    if not torch.cuda.is_available():
        raise _err(field, value, "this machine has no CUDA GPU (torch.cuda.is_available() is False); use --device cpu")
    index = int(value.split(":")[1]) if ":" in value else 0
    if index >= torch.cuda.device_count():
        raise _err(field, value, f"this machine has {torch.cuda.device_count()} GPU(s), cuda:0..cuda:{torch.cuda.device_count() - 1}")


def model_weights(value: str | None, model: str = "resnet18") -> None:
    """A pretrained model needs its weights file here: never a silent random initialisation."""
    if value is None:
        return
    from fda_ray.train.models import IMAGENET_FILES, imagenet_arch, pretrained_path

    p = Path(pretrained_path(value, model))
    if not p.is_file():
        arch = imagenet_arch(model)
        where = f"torchvision's cache file {p} is absent" if value == "imagenet" else "no such file"
        raise _err("model_weights", value, f"{where}; put torchvision's ImageNet {arch} file "
                                           f"{IMAGENET_FILES[arch]} in $TORCH_HOME/hub/checkpoints/, or pass "
                                           "--model-weights PATH to a local state dict (e.g. saved with torch.save("
                                           f"torchvision.models.{arch}(weights='DEFAULT').state_dict(), PATH) on a "
                                           "machine with internet)")
    if not os.access(p, os.R_OK):
        raise _err("model_weights", value, "the file is not readable")
    from fda_ray.train.models import load_weights

    load_weights(str(p), imagenet_arch(model or "resnet18"))  # the wrong kind, cut short, another model: now


# ---------------------------------------------------------------- Ray: address and resources

def _host_port(address: str, field: str = "ray_address") -> tuple[str, int] | None:
    """(host, port) of 'host:port' or 'ray://host:port'; None for 'auto', 'local' or a bare host."""
    rest = address.split("://", 1)[1] if "://" in address else address
    if rest in ("auto", "local") or ":" not in rest:
        if "://" not in address and rest not in ("auto", "local"):  # a bare host: Ray's own "Invalid address format"
            raise _err(field, address, "host:port, ray://host:port or auto")
        return None
    host, _, port = rest.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise _err(field, address, "host:port, ray://host:port or auto") from None


def address_and_field(address: str | None, field: str = "ray_address") -> tuple[str | None, str]:
    """The cluster address a run joins and what its messages call it: the option, else $RAY_ADDRESS (named as the
    environment variable: the user never set the option)."""
    if not address and os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"], "$RAY_ADDRESS"
    return address, field


def left_by_ray_start(timeout: float = 2.0) -> tuple[str, str, bool] | None:
    """The cluster Ray itself would join when given no address: `ray start --head` (and a test's
    ray.cluster_utils.Cluster) writes its address to $RAY_TMPDIR/ray/ray_current_cluster (default /tmp/ray/) and
    ray.init() with no address joins it. Returns (file, address, answers) or None without that file. A cluster
    that died without `ray stop` leaves the file behind, and a plain ray.init() then fails for a dead address;
    `ray exec` on a `ray up` head, on the other hand, relies on the file to join the live cluster."""
    try:
        from ray._common.utils import get_ray_address_file
    except ImportError:  # another Ray layout: let ray.init decide as it always does
        return None
    path = get_ray_address_file(None)
    try:
        address = Path(path).read_text().strip()
    except OSError:
        return None
    if not address:
        return None
    try:
        ray_address(address, timeout=timeout)
        return path, address, True
    except PreflightError:
        return path, address, False


def ray_address(address: str | None, timeout: float = RAY_CONNECT_TIMEOUT_S, field: str = "ray_address") -> None:
    """Something listens at the address (ray.init would otherwise wait for it for minutes)."""
    if not address:
        return
    hp = _host_port(address, field)
    if hp is None:
        return
    try:
        socket.create_connection(hp, timeout=timeout).close()
    except OSError as e:
        raise _err(field, address, f"no Ray cluster answers at {hp[0]}:{hp[1]} within {timeout:g} s "
                                   f"({e.strerror or type(e).__name__}); start one with `ray start --head` or "
                                   "`ray up cluster.yaml`, or leave it out for a local Ray") from None
    why = _token_refused(hp, timeout)
    if why:
        raise _err(field, address, why)


def _token_refused(hp: tuple[str, int], timeout: float) -> str | None:
    """Why a cluster with Ray's token authentication on refuses this process (no token, or another one), asked of
    its GCS in one call (GetClusterId, as ray.init's first); None where it answers or is not a Ray GCS. ray.init
    itself printed a C++ log line a second for about 20 s, then blamed the connection."""
    try:
        import grpc
        from ray._private.authentication.grpc_authentication_client_interceptor import (
            _get_authentication_metadata_tuple)
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:  # (another Ray: its own errors then)
        return None
    try:
        sent = _get_authentication_metadata_tuple()
        with grpc.insecure_channel(f"{hp[0]}:{hp[1]}") as channel:
            gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(
                gcs_service_pb2.GetClusterIdRequest(), timeout=timeout, metadata=sent)
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.UNAUTHENTICATED:
            return None  # (not a GCS, or busy: ray.init says what it finds)
        if not sent:
            return ("the cluster there requires Ray's token authentication and this shell has no token: export "
                    "RAY_AUTH_MODE=token RAY_AUTH_TOKEN=<the cluster's token> (or RAY_AUTH_TOKEN_PATH=<its file>), as "
                    "on the cluster's nodes")
        return ("the cluster there refuses this shell's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or "
                "~/.ray/auth_token): use the token the cluster's nodes were started with")
    except Exception:  # noqa: BLE001 (a probe: whatever else happens, ray.init goes on and says it)
        return None
    return None


def _node_types_damage(conf: Any) -> str | None:
    """Why a parsed bootstrap config's node types cannot be read (None when they can): what autoscaler_node_types
    takes of it, in a few words."""
    if not isinstance(conf, dict):
        held = "nothing" if conf is None else f"a {type(conf).__name__}"
        return f"a YAML mapping expected (`ray up` writes one), it holds {held}"
    types = conf.get("available_node_types")
    if types is None:
        return None
    if not isinstance(types, dict):
        return "its available_node_types is not a mapping of node type names to node types"
    for name, t in types.items():
        if not isinstance(t, dict):
            return f"its node type {name!r} is not a mapping"
        resources = t.get("resources")
        if resources is None:  # not declared: nothing known of its shape (as an empty mapping)
            continue
        if not isinstance(resources, dict):
            return f"its node type {name!r} has resources that are not a mapping of resource names to numbers"
        for k, v in resources.items():
            if not (is_number(v) and 0 <= v < float("inf")):
                return f"its node type {name!r} has resource {k!r} = {v!r}, not a number >= 0"
    return None


def autoscaler_node_types(path: str = AUTOSCALER_CONFIG) -> list[dict[str, float]]:
    """The resources of each node type an autoscaling cluster can add ([] without `ray up`'s config file).

    A damaged file (not UTF-8 text, not YAML, not the mapping `ray up` writes, resources that are not numbers) is
    one warning line (a RunWarning naming the file and what is wrong) and [], as no file: Ray's autoscaler cannot
    load such a config either, so it adds no node, and a sweep on the nodes up now should still run; refusing it
    for a file fda-ray only reads to plan ahead would stop work that fits."""
    import warnings

    import yaml  # a dependency of ray[default]

    from fda_ray.core.user_files import DamagedFileError, read_text

    p = Path(path).expanduser()
    if not p.is_file():
        return []
    try:
        text = read_text(p, "autoscaler_config", allow_empty=False)
        try:
            conf = yaml.safe_load(text)
        except yaml.YAMLError as e:  # its message runs to several lines (the context, a caret): the problem only
            mark = getattr(e, "problem_mark", None)
            why = (getattr(e, "problem", None) or type(e).__name__) + (f", line {mark.line + 1}" if mark else "")
            raise DamagedFileError("autoscaler_config", p, f"not YAML ({why})") from None
        why = _node_types_damage(conf)
        if why is not None:
            raise DamagedFileError("autoscaler_config", p, why)
    except DamagedFileError as e:
        warnings.warn(f"{e}; the node types an autoscaler can add are not known here: trials are planned on the "
                      "nodes up now", RunWarning, stacklevel=2)
        return []
    types = conf.get("available_node_types") or {}
    head = conf.get("head_node_type")
    # A worker type declared with max_workers: 0 is never added; any other type is (Ray's default is the
    # cluster's max_workers).
    return [{k: float(v) for k, v in (t.get("resources") or {}).items()}
            for name, t in types.items() if name == head or t.get("max_workers", 1) != 0]


PROBE_TIMEOUT_S = 60.0


def _probe_from_node(where: str, token: str, node: str) -> str | None:
    """On another node: the probe file the sweep wrote must be there with its token, and this node must be able
    to write beside it. Returns None, or why not."""
    here = storage_path(where)
    try:
        seen = (here / f".fda-ray-probe-{token}").read_text()
    except Exception as e:
        return f"the probe file written there is not found from node {node} ({type(e).__name__})"
    if seen != token:
        return f"node {node} reads another file at that path"
    try:
        (here / f".fda-ray-probe-{token}-{node[:12]}").write_text(token)
    except Exception as e:
        return f"node {node} cannot write there ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"
    return None


def _shared_storage_fix(where: StoragePath) -> str:
    """What to do when other nodes cannot use `where`: a local path, another place for it; an object store every
    node reaches by its URI, that node's credentials or endpoint (the advice to use an object store was wrong there)."""
    if where.is_local:
        return "put --out on a filesystem every node mounts at this path, or on an object store (s3://bucket/prefix)"
    return ("give every node the store's credentials and endpoint (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ... in its "
            "environment, or its instance role)")


def shared_storage(field: str, where: str | os.PathLike | StoragePath, *, timeout: float = PROBE_TIMEOUT_S) -> int:
    """On a multi-node Ray cluster (Ray initialised), every other alive node must see and write `where`, the
    directory trials write their records into: a probe file written here is read back, and answered, by a task
    pinned to each other node. A node-local path (/tmp, a laptop's home) fails here, in one line, instead of
    trials writing records the sweep never finds. Returns how many other nodes were probed."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    where = storage_path(where)
    me = ray.get_runtime_context().get_node_id()
    others = [n for n in ray.nodes() if n.get("Alive") and n["NodeID"] != me]
    if not others:
        return 0
    where.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    probe = where / f".fda-ray-probe-{token}"
    probe.write_text(token)
    task = ray.remote(num_cpus=0, max_retries=0)(_probe_from_node)
    try:
        refs = {task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
            str(where), token, n["NodeID"]): n for n in others}
        done, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        if pending:
            n = refs[pending[0]]
            raise _err(field, str(where), f"node {n['NodeManagerAddress']} ({n['NodeID'][:12]}) did not answer a "
                                          f"probe of this directory within {timeout:g} s")
        gone = tuple(getattr(ray.exceptions, n) for n in ("TaskUnschedulableError", "NodeDiedError",
                                                           "WorkerCrashedError") if hasattr(ray.exceptions, n))
        for ref in done:
            try:
                why = ray.get(ref)
            except gone:  # the node left the cluster since ray.nodes() listed it: nothing there to write
                continue
            if why is not None:
                n = refs[ref]
                raise _err(field, str(where), f"the cluster's other nodes cannot use it: {why} (address "
                                              f"{n['NodeManagerAddress']}); {_shared_storage_fix(where)}")
    finally:
        for f in [probe] + [where / f".fda-ray-probe-{token}-{n['NodeID'][:12]}" for n in others]:
            try:
                f.unlink(missing_ok=True)
            except Exception:
                pass
    return len(others)


# ---------------------------------------------------------------- options a run does not use

# The RunConfig options that only some method families read (the rest every run reads): the keyword family's
# parameters (fda_ray.algorithms.fda.params) and the source side's settings.
SOURCE_OPTIONS = ("lr_source", "batch_source", "aux_alpha")


def _keyword_family() -> str | None:
    kw = keyword_params()
    return kw.family if kw is not None else None


def ignored_options(cfg: RunConfig) -> list[str]:
    """The fields set away from their defaults that this config's method, partition or executor never reads
    (`cfg` resolved or not: a field the resolution filled in counts as unset)."""
    from fda_ray.core.registry import ALGORITHMS

    r = cfg.resolved()  # free when cfg is resolved already
    cfg = r.given  # the values the user set
    # The method's family says which of its options it reads (fda_ray.algorithms: Algorithm.uses).
    uses: dict[str, bool] = {name: False for name in (*keyword_names(), *SOURCE_OPTIONS)}
    uses.update(ALGORITHMS.get(cfg.method).uses(r))
    uses.update({
        "eta": r.partition == "label_shift",
        "source_classes": r.partition == "source_classes",
        "source_envs": r.partition in ("domain_shards", "domain_clients"),
        "clients_per_domain": r.partition == "domain_clients",
        "dirichlet_concentration": r.partition == "domain_shards",
        "target_labelled_per_class": r.partition == "domain_shards",
        "cpus_per_client": cfg.executor == "ray",
        "gpus_per_client": cfg.executor == "ray",
        "clients_per_actor": cfg.executor == "ray",
        "ray_address": cfg.executor == "ray",
        "client_retries": cfg.executor == "ray",
    })
    defaults = {f.name: f.default for _, f in config_keywords()}

    def set_by_user(name: str) -> bool:  # differs from what the field resolves to when left unset
        return getattr(r, name) != getattr(cfg.replace(**{name: defaults[name]}).resolved(), name)

    own = ALGORITHMS.get(cfg.method).family
    other = [f"{fam}_{name}" for fam, values in cfg.params.items() if fam != own and fam != _keyword_family()
             for name in values]  # (the keyword family's are named above, by their own names)
    return [name for name, used in uses.items() if not used and set_by_user(name)] + other


def ignored_warning(cfgs: Iterable[RunConfig], names: Iterable[str] | None = None) -> str | None:
    """One line naming the options (of `names`, default all) that no config of `cfgs` uses, or None."""
    cfgs = list(cfgs)
    if not cfgs:
        return None
    first = ignored_options(cfgs[0])
    unused = set(first).intersection(*(ignored_options(c) for c in cfgs[1:]))
    if names is not None:
        unused &= set(names)
    if not unused:
        return None
    methods = "/".join(sorted({c.method for c in cfgs}))
    return (f"{', '.join('--' + n.replace('_', '-') for n in first if n in unused)} not used by method {methods} "
            f"(executor {cfgs[0].executor}, partition {cfgs[0].resolved().partition}): ignored")


def run_notes(cfg: RunConfig, target_samples: int) -> list[str]:
    """Warnings for one run of the resolved `cfg`: options it ignores (judged on the config as given,
    `cfg.given`: resolving drops the parameters of other families); a target that trains on one partial batch."""
    cfg.require_resolved("run_notes")
    notes = [w for w in (ignored_warning([cfg]),) if w]
    if target_samples < cfg.batch_target:
        # The documented fallback (the authors' loaders keep the target's last partial batch): one step per
        # epoch on all of the target's samples, rather than no step at all.
        notes.append(f"the target holds {target_samples} training samples, fewer than batch_target="
                     f"{cfg.batch_target}: it trains one step of {target_samples} samples per epoch")
    return notes


# ---------------------------------------------------------------- a run

def run(cfg: RunConfig) -> None:
    """What one run needs from this machine beyond its config (the data is checked when it is loaded)."""
    device(cfg.device)
    try:
        model_weights(cfg.model_weights, cfg.model or "resnet18")
    except PreflightError as e:
        _dataset_first(cfg, e)
        raise
    if cfg.executor == "ray":
        address, field = address_and_field(cfg.ray_address)
        ray_address(address, field=field)  # (the pair splatted made the field name the timeout: a TypeError)


def _dataset_first(cfg: RunConfig, weights: PreflightError) -> None:
    """Missing weights with a missing dataset: the dataset's line (the paths searched, how to get it) with the
    weights' appended, as one DatasetNotFound, so that fetching the weights does not end in a second try that only
    then says the data are missing too. The data are looked for only on this error path (a loader reads a folder's
    file list), and not where --download would fetch them."""
    from fda_ray.data import load
    from fda_ray.data.base import DatasetNotFound

    if cfg.download:
        return
    try:
        load(cfg.dataset, cfg.data_dir)
    except DatasetNotFound as e:
        raise DatasetNotFound(f"{str(e).splitlines()[0]}; and {weights}") from None
    except Exception:  # a dataset there but unreadable is said when the run loads it: the weights' line stands
        return
