"""Where a sweep's outputs live: a local directory, a shared filesystem, or an object store (s3://, gs://, ...).

    StoragePath("sweeps/noise-quick")           a local (or NFS/Lustre) directory
    StoragePath("s3://bucket/sweeps/noise")     an object store, through pyarrow.fs (endpoint: $AWS_ENDPOINT_URL)

A StoragePath answers the part of pathlib.Path a sweep uses (`/`, name, parent, exists, is_file, read_text,
write_text, glob, ...), so trial records, summaries and figures are written the same way wherever they go.
Ray's own rule for multi-node Tune is storage every node can reach; a URI is one, and so is a shared
filesystem mounted at the same path on every node.

Writes are atomic everywhere: a reader (a resumed sweep, another node) sees the old file or the new one, never
half of one. Locally a temporary file in the same directory is written, flushed to disk (fsync) and renamed over
the target; on an object store one PUT creates the object whole (a multipart upload appears only when it
completes). Object stores have no directories: `mkdir` does nothing there, and a "directory" exists once an
object lies under it.

Only the URI travels between processes (pickling keeps `uri`): each process (a Tune trial on another node)
builds its own filesystem client, with that node's credentials.
"""
from __future__ import annotations

import contextlib
import fnmatch
import functools
import io
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterator, Union

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def is_uri(where: Any) -> bool:
    """A URI with a scheme other than file:// (s3://bucket/key, gs://..., hdfs://...)."""
    m = _SCHEME.match(str(where)) if isinstance(where, str) else None
    return bool(m) and m.group(1).lower() != "file"


def s3_location(uri: str) -> tuple[str, str] | None:
    """(bucket, key) of an s3:// URI that boto3 can address as it is; None for another scheme or a URI carrying
    pyarrow's options (`?endpoint_override=...`: its endpoint is its own)."""
    if not uri.lower().startswith("s3://") or "?" in uri:
        return None
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key


def sync_hint(where: Any) -> str:
    """For a reader of local folders handed a URI: how to bring it here ("" for a local path)."""
    if not is_uri(str(where)):
        return ""
    scheme = str(where).split("://", 1)[0].lower()
    tool = {"s3": f"aws s3 sync {where} ./LOCAL", "gs": f"gsutil -m rsync -r {where} ./LOCAL"}.get(
        scheme, f"copy {where} to a local folder")
    return f"; it reads local folders: bring the sweep here first ({tool}), then name ./LOCAL"


def _filesystem(root: str) -> Any:
    """One pyarrow filesystem client per (scheme, bucket, endpoint) and process: S3 resolves a bucket's region
    once. The endpoint ($AWS_ENDPOINT_URL: MinIO, Ceph, a test server) is read from the environment, as pyarrow
    and Ray's Tune read it."""
    return _cached_filesystem(root, os.environ.get("AWS_ENDPOINT_URL"), os.environ.get("AWS_ENDPOINT_URL_S3"))


# How long a store's client waits before it gives up on an operation. pyarrow's defaults: GCS retries for about 15
# minutes (a gs:// --out without Google credentials said nothing for 16 minutes, Ctrl-C unheard inside the C++ call);
# S3 waited about 100 s on an endpoint that accepts connections and never answers.
S3_CONNECT_TIMEOUT_S = 5.0
S3_REQUEST_TIMEOUT_S = 15.0
GCS_RETRY_S = 20.0


@functools.lru_cache(maxsize=16)
def _cached_filesystem(root: str, endpoint: str | None, s3_endpoint: str | None) -> Any:
    import datetime

    import pyarrow.fs as pafs

    fs, _ = pafs.FileSystem.from_uri(root)  # (the URI's own options: region, endpoint_override, ...)
    rebuild, (options,) = fs.__reduce__()  # the same client, with time limits where the URI set none
    if isinstance(fs, pafs.S3FileSystem):
        if options.get("connect_timeout", -1) < 0:
            options["connect_timeout"] = S3_CONNECT_TIMEOUT_S
        if options.get("request_timeout", -1) < 0:
            options["request_timeout"] = S3_REQUEST_TIMEOUT_S
        return rebuild(options)
    if isinstance(fs, pafs.GcsFileSystem) and options.get("retry_time_limit") is None:
        options["retry_time_limit"] = datetime.timedelta(seconds=GCS_RETRY_S)
        return rebuild(options)
    return fs


class StoreError(OSError):
    """An object store that did not answer, or refused, an operation on `uri` (pyarrow raises a bare OSError with
    no errno, indistinguishable from a program error): the URI, what was asked and the store's own first line, so
    that a sweep whose store goes down mid-run ends in one line that says so and how to resume."""

    def __init__(self, uri: str, action: str, reason: str) -> None:
        super().__init__(f"the store could not {action} {uri} ({reason})")
        self.uri, self.action, self.reason = uri, action, reason

    def __reduce__(self) -> tuple:  # (a worker's error crosses to the sweep's process: pickled by its own fields)
        return (StoreError, (self.uri, self.action, self.reason))


@contextlib.contextmanager
def asking(uri: str, action: str) -> Iterator[None]:
    """A store call whose failure (not a missing object) becomes a StoreError naming `uri`."""
    try:
        yield
    except (FileNotFoundError, StoreError):
        raise
    except OSError as e:
        text = str(e).strip()
        reason = text.splitlines()[0] if text else type(e).__name__
        raise StoreError(uri, action, reason[:400] + (" ..." if len(reason) > 400 else "")) from e


class StoragePath:
    """A local path or a URI, with the pathlib.Path methods a sweep uses (module docstring)."""

    __slots__ = ("uri",)

    def __init__(self, where: Union[str, os.PathLike, "StoragePath"]) -> None:
        if isinstance(where, StoragePath):
            uri = where.uri
        else:
            s = os.fspath(where)
            if s.startswith("file://"):
                s = s[len("file://"):]
            uri = s.rstrip("/") if is_uri(s) else str(Path(s).expanduser().absolute())
        object.__setattr__(self, "uri", uri)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("StoragePath is immutable")

    def __reduce__(self) -> tuple:
        return (StoragePath, (self.uri,))

    # ------------------------------------------------------------ what it is

    @property
    def is_local(self) -> bool:
        return not is_uri(self.uri)

    @property
    def local(self) -> Path | None:
        """The local path, or None on an object store."""
        return Path(self.uri) if self.is_local else None

    def _remote(self) -> tuple[Any, str]:
        """(filesystem, path inside it): bucket/key for S3 and GCS."""
        m = _SCHEME.match(self.uri)
        rest = self.uri[m.end():]
        bucket = rest.split("/", 1)[0]
        return _filesystem(f"{m.group(0)}{bucket}"), rest

    def __fspath__(self) -> str:
        if not self.is_local:  # a URI must not be opened as a file name by accident
            raise TypeError(f"{self.uri} is not a local path")
        return self.uri

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        return f"StoragePath({self.uri!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoragePath) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    # ------------------------------------------------------------ names

    def __truediv__(self, name: str | os.PathLike) -> "StoragePath":
        if self.is_local:
            return StoragePath(Path(self.uri) / name)
        return StoragePath(f"{self.uri}/{os.fspath(name).strip('/')}")

    @property
    def name(self) -> str:
        return self.uri.rstrip("/").rsplit("/", 1)[-1]

    @property
    def stem(self) -> str:
        return Path(self.name).stem

    @property
    def suffix(self) -> str:
        return Path(self.name).suffix

    @property
    def parent(self) -> "StoragePath":
        if self.is_local:
            return StoragePath(Path(self.uri).parent)
        m = _SCHEME.match(self.uri)
        rest = self.uri[m.end():]
        return self if "/" not in rest else StoragePath(self.uri[:m.end()] + rest.rsplit("/", 1)[0])

    def with_name(self, name: str) -> "StoragePath":
        return self.parent / name

    def with_suffix(self, suffix: str) -> "StoragePath":
        return self.with_name(self.stem + suffix)

    # ------------------------------------------------------------ queries

    def _info(self) -> Any:
        fs, path = self._remote()
        with asking(self.uri, "look up"):
            return fs.get_file_info(path)

    def exists(self) -> bool:
        if self.is_local:
            return os.path.exists(self.uri)
        import pyarrow.fs as pafs

        return self._info().type != pafs.FileType.NotFound

    def is_file(self) -> bool:
        if self.is_local:
            return os.path.isfile(self.uri)
        import pyarrow.fs as pafs

        return self._info().type == pafs.FileType.File

    def is_dir(self) -> bool:
        if self.is_local:
            return os.path.isdir(self.uri)
        import pyarrow.fs as pafs

        return self._info().type == pafs.FileType.Directory

    def mtime(self) -> float:
        """When the file was last written (seconds since the epoch): the object's Last-Modified on a store."""
        if self.is_local:
            return os.stat(self.uri).st_mtime
        info = self._info()
        if info.mtime is None:
            raise FileNotFoundError(f"{self.uri}: no such object")
        return info.mtime.timestamp()

    def iterdir(self) -> Iterator["StoragePath"]:
        """The entries right under this directory (none if it does not exist)."""
        if self.is_local:
            p = Path(self.uri)
            if p.is_dir():
                yield from (StoragePath(c) for c in sorted(p.iterdir()))
            return
        import pyarrow.fs as pafs

        fs, path = self._remote()
        with asking(self.uri, "list"):
            infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=False))
        for info in sorted(infos, key=lambda i: i.path):
            yield self / info.path.rstrip("/").rsplit("/", 1)[-1]

    def glob(self, pattern: str) -> Iterator["StoragePath"]:
        """Entries matching a relative pattern of `/`-separated fnmatch parts ("launch-*", "row-*/trial.json")."""
        if self.is_local:
            yield from (StoragePath(p) for p in sorted(Path(self.uri).glob(pattern)))
            return
        parts = [p for p in pattern.split("/") if p]
        level = [self]
        for i, part in enumerate(parts):
            nxt = []
            for d in level:
                if not any(c in part for c in "*?["):
                    child = d / part
                    if child.exists():
                        nxt.append(child)
                    continue
                nxt += [c for c in d.iterdir() if fnmatch.fnmatchcase(c.name, part)]
            level = nxt
        yield from level

    # ------------------------------------------------------------ reading

    def read_bytes(self) -> bytes:
        if self.is_local:
            return Path(self.uri).read_bytes()
        fs, path = self._remote()
        try:
            with fs.open_input_stream(path) as f:
                return f.read()
        except OSError as e:  # (FileNotFoundError, an OSError, passes through the test below unchanged)
            if isinstance(e, FileNotFoundError):
                raise
            if "not found" in str(e).lower() or "does not exist" in str(e).lower():
                raise FileNotFoundError(f"{self.uri}: no such object") from None
            with asking(self.uri, "read"):
                raise

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read_bytes().decode(encoding, errors)

    # ------------------------------------------------------------ writing (atomic)

    def mkdir(self, parents: bool = True, exist_ok: bool = True) -> None:
        if self.is_local:
            Path(self.uri).mkdir(parents=parents, exist_ok=exist_ok)
        # an object store has no directories: a prefix exists once an object lies under it

    def write_bytes(self, data: bytes) -> None:
        """Atomically (module docstring): the old contents or the new, never half."""
        if self.is_local:
            with atomic_local(self.uri) as tmp:
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())  # on disk before the rename makes it the file: a power cut keeps one whole
            return
        fs, path = self._remote()
        with asking(self.uri, "write"), fs.open_output_stream(path) as f:
            f.write(data)

    def write_text(self, text: str, encoding: str = "utf-8") -> None:
        self.write_bytes(text.encode(encoding))

    def replace(self, target: "StoragePath | str | os.PathLike") -> "StoragePath":
        target = StoragePath(target)
        if self.is_local and target.is_local:
            os.replace(self.uri, target.uri)
        else:  # an object store: copy then delete (the target object appears whole)
            target.write_bytes(self.read_bytes())
            self.unlink()
        return target

    def unlink(self, missing_ok: bool = False, *, marker: bool = True) -> None:
        """marker=False: on S3 with boto3 installed, delete the object alone (pyarrow's delete leaves a directory
        marker object, `prefix/`, where the object was the prefix's last: a probe then left a trace)."""
        if self.is_local:
            Path(self.uri).unlink(missing_ok=missing_ok)
            return
        if not marker and (where := s3_location(self.uri)) is not None:
            try:
                import boto3
            except ImportError:
                pass
            else:
                bucket, key = where
                with asking(self.uri, "delete"):
                    try:
                        boto3.client("s3").delete_object(Bucket=bucket, Key=key)  # (absent: no error, as S3's)
                    except Exception as e:  # noqa: BLE001 (botocore's errors: said as the store's)
                        raise OSError(str(e)) from e
                return
        fs, path = self._remote()
        try:
            with asking(self.uri, "delete"):
                fs.delete_file(path)
        except OSError:  # (FileNotFoundError, or the store's refusal)
            if not missing_ok:
                raise

    # ------------------------------------------------------------ torch objects

    def save_torch(self, obj: Any) -> None:
        import torch

        buf = io.BytesIO()
        torch.save(obj, buf)
        self.write_bytes(buf.getvalue())

    def load_torch(self) -> Any:
        """Tensors and plain data only (weights_only: no code is unpickled)."""
        import torch

        return torch.load(io.BytesIO(self.read_bytes()), weights_only=True)


@contextlib.contextmanager
def atomic_local(where: str | os.PathLike) -> Iterator[Path]:
    """A local file written whole or not at all: the block writes the yielded temporary path, which then replaces
    `where`. The temporary file lies beside the file it becomes (a rename within one filesystem), under a short
    name of its own (the target's name plus a suffix could pass the filesystem's name limit when the target's does
    not). A symlink is written through: its target is replaced and the link stays a link. A block that fails
    leaves the old file as it was and no temporary file behind."""
    path = Path(where)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)  # as an object store: the parents need not exist
    try:
        fd, tmp = tempfile.mkstemp(prefix=".fda-tmp-", dir=path.parent)
    except OSError as e:  # (it names the temporary file, which a user never sees)
        if (named := _naming(e, path)) is e:
            raise
        raise named from e
    os.close(fd)
    try:
        try:
            yield Path(tmp)
        except OSError as e:
            if e.filename not in (None, tmp) or (named := _naming(e, path)) is e:  # another file's, or no errno
                raise
            raise named from e
        if os.path.exists(path):  # the file's mode stays (mkstemp creates 0600)
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _naming(e: OSError, path: Path) -> OSError:
    """`e` naming the file that could not be written: a full disk's write (a torch.save, a JSON dump into the
    temporary file) raises an OSError with no file name, and the error lines read "No space left on device" without
    saying where. The same errno, so the same subclass (OSError's constructor picks it); an OSError without an errno
    (raised by hand, not by the system) is left as it is ("[Errno None] ..." otherwise, its subclass lost)."""
    if e.errno is None:
        return e
    return OSError(e.errno, e.strerror or str(e), str(path))


def storage_path(where: Union[str, os.PathLike, StoragePath]) -> StoragePath:
    return where if isinstance(where, StoragePath) else StoragePath(where)
