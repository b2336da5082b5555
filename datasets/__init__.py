"""What a dataset is on a store: ``.list`` files, manifests and versions, upload, packing, reading rows, and the
public datasets.

The core: :mod:`.names`, :mod:`.listfile` (checking a ``.list``), :mod:`.manifest`, :mod:`.layout` (where each part
lives in a store), :mod:`.catalog` (committing, finding and removing versions), :mod:`.verify`. Writing versions:
:mod:`.upload`, :mod:`.pack` (and :mod:`.pack_ray`), :mod:`.importing`, all through :mod:`.shard_writer` for
shards. Reading them: :mod:`.rows`; getting them back out as files: :mod:`.export`; to another store:
:mod:`.copying`. The public area: :mod:`.public`.
"""

from datamount.datasets import catalog, layout, public
from datamount.datasets.catalog import commit, dataset_names, latest, remove, resolve, versions
from datamount.datasets.copying import CopyResult, copy_version
from datamount.datasets.errors import (
    CommitConflictError,
    DatasetNotFoundError,
    DownloadError,
    DownloadNotFoundError,
    InstallConflictError,
    InvalidDatasetNameError,
    ListFormatError,
    ListProblem,
    ManifestError,
    MapFunctionError,
    MissingDependencyError,
    MissingPartError,
    PublicConfigError,
    RayUnreachableError,
    SourceFormatError,
    SourceNotFoundError,
    StreamFormatError,
)
from datamount.datasets.export import ExportResult, export
from datamount.datasets.importing import import_batches
from datamount.datasets.listfile import ParsedList, parse_list
from datamount.datasets.manifest import FileEntry, Kind, Manifest, ShardEntry
from datamount.datasets.names import DatasetRef, parse_ref, validate_name
from datamount.datasets.pack import pack
from datamount.datasets.pack_ray import pack_ray
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.public import imagenet, imdb, mnist, wmt14
from datamount.datasets.rows import RowSource, open_rows
from datamount.datasets.transform import map_version
from datamount.datasets.upload import UploadResult, upload
from datamount.datasets.verify import RepairReport, VerifyReport, repair, verify

__all__ = [
    "CommitConflictError",
    "CopyResult",
    "DatasetNotFoundError",
    "DatasetRef",
    "DownloadError",
    "DownloadNotFoundError",
    "ExportResult",
    "FileEntry",
    "InstallConflictError",
    "InvalidDatasetNameError",
    "Kind",
    "ListFormatError",
    "ListProblem",
    "Manifest",
    "ManifestError",
    "MapFunctionError",
    "MissingDependencyError",
    "MissingPartError",
    "ParsedList",
    "Progress",
    "PublicConfigError",
    "RayUnreachableError",
    "RepairReport",
    "RowSource",
    "ShardEntry",
    "Silent",
    "SourceFormatError",
    "SourceNotFoundError",
    "StreamFormatError",
    "UploadResult",
    "VerifyReport",
    "catalog",
    "commit",
    "copy_version",
    "dataset_names",
    "export",
    "imagenet",
    "imdb",
    "import_batches",
    "latest",
    "layout",
    "map_version",
    "mnist",
    "open_rows",
    "pack",
    "pack_ray",
    "parse_list",
    "parse_ref",
    "public",
    "remove",
    "repair",
    "resolve",
    "upload",
    "validate_name",
    "verify",
    "versions",
    "wmt14",
]
