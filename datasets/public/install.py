"""Public datasets in a store's ``public/`` area: which exist, installing them (download or ``--from``), removing.

Each public dataset is one ordinary dataset, ``public/NAME``, kept as Parquet shards: ``reader("mnist")`` reads it
like any upload (its rows end with their ``split``), and ``datamount.datasets.public.mnist.train()`` reads one split the
way Paddle's module does. Installing downloads the published files into a cache (checked against their md5,
resumed after a cut, retried with backoff) or takes them from ``--from PATH``, converts them and commits the
dataset by writing its manifest last: an install that fails or is killed leaves nothing visible, and installing an
installed dataset does nothing.

What an install writes on local disk: each download into the cache folder as ``FILE.part``, renamed to ``FILE`` once
its md5 matches (a ``.part`` is kept when the install stops, and the next one resumes it: nothing under a final name
is ever partial); the shards into a draft pack folder of the store and their scratch files into the system's
temporary folder. A failure, Ctrl-C or SIGTERM removes the draft shards and the scratch files; after SIGKILL the
scratch files stay, and the draft shards until the next install or ``public rm`` of the dataset removes them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from datamount.datasets import catalog, locks
from datamount.datasets.errors import DatasetNotFoundError, PublicConfigError, SourceFormatError, SourceNotFoundError
from datamount.datasets.manifest import Manifest
from datamount.datasets.names import PUBLIC_NAMESPACE, validate_name
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.public import imagenet, imdb, mnist, wmt14
from datamount.datasets.public.download import SITE_COPY_HINT, RetryPolicy, fetch, md5_file
from datamount.datasets.public.spec import PublicDataset, RemoteFile, Sources
from datamount.datasets.public.writer import PublicWriter
from datamount.datasets.shard_writer import DEFAULT_ROW_GROUP_BYTES, DEFAULT_SHARD_BYTES
from datamount.storage import IntegrityError, Store, open_store
from datamount.storage.redact import redact_url
from datamount.storage.termination import sigterm_unwinds

#: A mirror of the published files (``URL/NAME/FILE``, e.g. ``https://mirror.example/datasets/mnist/t10k-...gz``),
#: used instead of the published URLs.
MIRROR_ENV = "DATAMOUNT_PUBLIC_MIRROR"

_REGISTRY: dict[str, PublicDataset] = {spec.name: spec for spec in (mnist.SPEC, imdb.SPEC, imagenet.SPEC, wmt14.SPEC)}


def public_datasets() -> list[PublicDataset]:
    """Every public dataset datamount knows, by name."""
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


def get(name: str) -> PublicDataset:
    """The public dataset ``name`` (``mnist``, ``imdb``, ``imagenet``, ``wmt14``, or one registered)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise DatasetNotFoundError(f"no public dataset named {name!r}; datamount knows: {known}") from None


def register(spec: PublicDataset, *, replace: bool = False) -> PublicDataset | None:
    """Make ``spec`` installable by its name; return the spec it replaces (``replace=True``), if any.

    For a site that serves its own copy of a dataset's files (``get("mnist").with_checksums(...)``), or a dataset
    of its own built the same way.
    """
    previous = _REGISTRY.get(spec.name)
    if previous is not None and not replace:
        raise ValueError(f"a public dataset named {spec.name!r} is already registered; pass replace=True")
    _REGISTRY[spec.name] = spec
    return previous


def unregister(name: str) -> PublicDataset:
    """Forget the public dataset ``name``; return its spec."""
    get(name)
    return _REGISTRY.pop(name)


def download_dir() -> Path:
    """Where downloaded files are kept: datamount's folder in the XDG cache folder."""
    return platformdirs.user_cache_path("datamount") / "downloads"


@dataclass(frozen=True)
class InstallResult:
    """What ``install`` did: the dataset's committed manifest, and whether this call created it."""

    spec: PublicDataset
    manifest: Manifest
    created: bool

    @property
    def splits(self) -> dict[str, int]:
        """Rows by split."""
        return self.manifest.splits


def install(
    name: str,
    *,
    store: Store | str | None = None,
    source: str | os.PathLike[str] | None = None,
    mirror: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    retry: RetryPolicy | None = None,
    progress: Progress | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    checksums: str | os.PathLike[str] | None = None,
) -> InstallResult:
    """Install public dataset ``name`` into the store's public area (a no-op when it is installed).

    Parameters
    ----------
    source
        A file or folder holding the published files (or, for ImageNet, the archives or extracted trees); without
        it the files are downloaded.
    mirror
        A base URL serving the files as ``MIRROR/NAME/FILE`` (default ``$DATAMOUNT_PUBLIC_MIRROR``); the files
        must still have the published md5.
    cache_dir
        Where downloads are kept (default: :func:`download_dir`).
    retry
        Attempts, backoff and timeouts of each download.
    progress
        Receives the ``download`` and conversion phases.
    checksums
        A file in ``md5sum``'s format (``MD5  NAME`` lines) giving the md5s of a site's own copies of some of the
        files (``source`` or ``mirror``), checked instead of the published ones.
    """
    spec = get(name)
    if checksums is not None:
        spec = spec.with_checksums(read_checksums(checksums, spec))
    target = open_store(store)
    existing = catalog.latest(target, spec.dataset_name)
    if existing is not None:
        return InstallResult(spec, existing, created=False)
    report = progress or Silent()
    with sigterm_unwinds():  # SIGTERM, as Ctrl-C, removes the shards written so far and their local scratch files
        if source is not None:
            sources = _local_sources(spec, Path(source).expanduser())
        elif spec.downloadable:
            sources = _downloaded_sources(spec, _mirror(mirror), Path(cache_dir or download_dir()), retry, report)
        else:
            raise SourceNotFoundError(
                f"{spec.name} cannot be downloaded; install it with --from PATH: {spec.source_help}"
            )
        return _build(spec, target, sources, report, shard_bytes=shard_bytes, row_group_bytes=row_group_bytes)


def _build(
    spec: PublicDataset, store: Store, sources: Sources, report: Progress, *, shard_bytes: int, row_group_bytes: int
) -> InstallResult:
    """Convert the sources into a new version and commit it, unless another install committed one meanwhile; then
    remove what no version uses (left by this install or a killed one) if no other install is at work."""
    try:
        with locks.writing(store, spec.dataset_name, purpose="install"):
            writer = PublicWriter(store, spec, shard_bytes=shard_bytes, row_group_bytes=row_group_bytes)
            try:
                spec.build(sources, writer, report)
                winner = catalog.latest(store, spec.dataset_name)
                if winner is not None:  # another install of the same dataset committed while this one ran: keep it
                    writer.abort()
                    return InstallResult(spec, winner, created=False)
                manifest = writer.commit()
            except BaseException:
                writer.abort()
                raise
    finally:
        catalog.remove_unused_parts(store, spec.dataset_name)
    return InstallResult(spec, manifest, created=True)


def _mirror(mirror: str | None) -> str | None:
    chosen = mirror or os.environ.get(MIRROR_ENV) or None
    if chosen is not None and not chosen.startswith(("http://", "https://")):
        raise PublicConfigError(
            f"the mirror {redact_url(chosen)!r} is not an http:// or https:// URL (from --mirror or ${MIRROR_ENV})"
        )
    return chosen


def file_urls(spec: PublicDataset, file: RemoteFile, mirror: str | None) -> tuple[str, ...]:
    """Where a file is downloaded from: the mirror's copy (``MIRROR/NAME/FILE``), else its published URLs."""
    return (f"{mirror.rstrip('/')}/{spec.name}/{file.name}",) if mirror else file.urls


def _downloaded_sources(
    spec: PublicDataset, mirror: str | None, cache: Path, retry: RetryPolicy | None, report: Progress
) -> Sources:
    files = {
        file.name: fetch(
            file_urls(spec, file, mirror), cache / spec.name / file.name, md5=file.md5, retry=retry, progress=report
        )
        for file in spec.files
    }
    return Sources(files, _checksums(spec))


def read_checksums(path: str | os.PathLike[str], spec: PublicDataset) -> dict[str, str]:
    """The md5s of ``path``, in ``md5sum``'s format (``MD5  NAME`` or ``MD5 *NAME``; a NAME's folders are ignored),
    by file name: each a 32-digit hex md5 of one of ``spec``'s files, or :class:`SourceFormatError` naming the line."""
    where = os.fspath(path)
    try:
        lines = Path(where).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise SourceNotFoundError(f"{where} does not exist") from None
    known = {file.name for file in spec.files}
    found: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        match = _MD5SUM_LINE.fullmatch(line.strip())
        if match is None:
            raise SourceFormatError(f"{where}:{number}: not an md5sum line ('MD5  NAME'): {line[:80]!r}")
        digest, file_name = match.group(1).lower(), os.path.basename(match.group(2))
        if file_name not in known:
            raise SourceFormatError(
                f"{where}:{number}: {spec.name} has no file named {file_name!r}; its files: {', '.join(sorted(known))}"
            )
        found[file_name] = digest
    if not found:
        raise SourceFormatError(f"{where}: no md5sum lines")
    return found


#: A line of ``md5sum``'s output: the hex md5, a space, then `` `` (text) or ``*`` (binary), then the name.
_MD5SUM_LINE = re.compile(r"([0-9a-fA-F]{32}) [ *](.+)")


def _local_sources(spec: PublicDataset, path: Path) -> Sources:
    """The published files found at ``path`` (the file itself, or in the folder), each checked against its md5.
    ImageNet reads its folder itself."""
    if not path.exists():
        raise SourceNotFoundError(f"{path} does not exist")
    if spec.needs_source:
        return Sources({}, _checksums(spec), folder=path)
    files = {file.name: _find(file, path, spec) for file in spec.files}
    for file in spec.files:
        found = md5_file(files[file.name])
        if found != file.md5:
            raise IntegrityError(
                f"{files[file.name]}: its md5 is {found}, the published {file.name}'s is {file.md5}: the file is "
                f"damaged or is not the published one; {SITE_COPY_HINT}"
            )
    return Sources(files, _checksums(spec), folder=path if path.is_dir() else path.parent)


def _find(file: RemoteFile, path: Path, spec: PublicDataset) -> Path:
    if path.is_file():
        if len(spec.files) == 1:
            return path
        raise SourceNotFoundError(f"{spec.name} needs {len(spec.files)} files; give the folder that holds them")
    for alias in file.aliases:
        if (path / alias).is_file():
            return path / alias
    raise SourceNotFoundError(f"{path} holds no {file.name} ({spec.name} is built from {spec.source_help})")


def _checksums(spec: PublicDataset) -> Mapping[str, str]:
    return {file.name: file.md5 for file in spec.files}


@dataclass(frozen=True)
class PublicStatus:
    """A dataset of the store's public area and, when it is there, its manifest: one datamount installs (``spec``),
    or one a user put there (``datamount upload LIST public/NAME``, ``import``; ``spec`` is ``None``)."""

    name: str
    spec: PublicDataset | None
    manifest: Manifest | None

    @property
    def installed(self) -> bool:
        return self.manifest is not None

    @property
    def splits(self) -> dict[str, int]:
        """Rows by split (none when not installed)."""
        return self.manifest.splits if self.manifest is not None else {}


def status(store: Store | str | None = None) -> list[PublicStatus]:
    """Every public dataset datamount knows, with its manifest where it is installed in the store, then the other
    datasets of the store's public area."""
    target = open_store(store)
    specs = public_datasets()
    found = [PublicStatus(spec.name, spec, catalog.latest(target, spec.dataset_name)) for spec in specs]
    known = {spec.dataset_name for spec in specs}
    for name in catalog.dataset_names(target):
        if name.startswith(PUBLIC_NAMESPACE + "/") and name not in known:
            manifest = catalog.latest(target, name)
            if manifest is not None:
                found.append(PublicStatus(name.partition("/")[2], None, manifest))
    return found


def dataset_name(name: str, store: Store) -> str:
    """The dataset that public dataset ``name`` is in ``store``: ``public/NAME``, for one datamount installs, or for
    one a user put in the public area; else a :class:`DatasetNotFoundError` naming the ones datamount knows."""
    if name in _REGISTRY:
        return _REGISTRY[name].dataset_name
    if "/" not in name:
        uploaded = f"{PUBLIC_NAMESPACE}/{validate_name(name)}"
        if catalog.versions(store, uploaded):
            return uploaded
    return get(name).dataset_name


def remove(name: str, *, store: Store | str | None = None, wait: float = locks.WAIT_SECONDS) -> list[int]:
    """Remove public dataset ``name`` (every version) from the store's public area; return the versions removed
    (waiting up to ``wait`` seconds for the installs at work on it: :func:`~datamount.datasets.catalog.remove`)."""
    target = open_store(store)
    found = dataset_name(name, target)
    if not catalog.versions(target, found):
        catalog.remove_unused_parts(target, found)  # what a killed install left
        raise DatasetNotFoundError(f"the public dataset {name} is not installed in {target.url}")
    return catalog.remove(target, found, wait=wait)
