"""What a dataset is on a store: ``.list`` files, manifests and versions, upload, packing, reading rows, and the
public datasets.

The core: :mod:`.names`, :mod:`.listfile` (checking a ``.list``), :mod:`.manifest`, :mod:`.layout` (where each part
lives in a store), :mod:`.catalog` (committing, finding and removing versions), :mod:`.verify`. Writing versions:
:mod:`.upload`, :mod:`.pack` (and :mod:`.pack_ray`), :mod:`.importing`, all through :mod:`.shard_writer` for
shards. Reading them: :mod:`.rows`; getting them back out as files: :mod:`.export`; to another store:
:mod:`.copying`; comparing two: :mod:`.diff`. The public area: :mod:`.public`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from datamount.datasets import catalog, layout
from datamount.datasets.catalog import commit, dataset_names, latest, remove, resolve, versions
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
    ReaderNotCalledError,
    SourceFormatError,
    SourceNotFoundError,
    StreamFormatError,
)
from datamount.datasets.lazy_exports import lazy_exports
from datamount.datasets.manifest import FileEntry, Kind, Manifest, ShardEntry
from datamount.datasets.names import DatasetRef, parse_ref, validate_name
from datamount.datasets.progress import Progress, Silent

if TYPE_CHECKING:
    from datamount.datasets import public
    from datamount.datasets.copying import CopyResult, copy_version
    from datamount.datasets.diff import DiffRow, VersionDiff, diff_versions
    from datamount.datasets.export import ExportResult, export
    from datamount.datasets.importing import import_batches
    from datamount.datasets.listfile import ParsedList, parse_list
    from datamount.datasets.pack import pack
    from datamount.datasets.pack_ray import pack_ray
    from datamount.datasets.public import imagenet, imdb, mnist, wmt14
    from datamount.datasets.rows import RowSource, open_rows
    from datamount.datasets.transform import map_version
    from datamount.datasets.upload import UploadResult, upload
    from datamount.datasets.verify import RepairReport, VerifyReport, repair, verify
    from datamount.datasets.webdataset_export import WebDatasetExport, export_webdataset

#: Names whose modules are imported when first used: a command that only reads a manifest (``datamount info``) needs
#: none of them, a process that only reads (``reader(name)``) few, and together they bring ``pyarrow.compute``,
#: ``pyarrow.parquet`` and every public dataset's module.
_LAZY = {
    **dict.fromkeys(["ExportResult", "export"], "datamount.datasets.export"),
    **dict.fromkeys(["ParsedList", "parse_list"], "datamount.datasets.listfile"),
    "pack": "datamount.datasets.pack",
    "pack_ray": "datamount.datasets.pack_ray",
    **dict.fromkeys(["RowSource", "open_rows"], "datamount.datasets.rows"),
    **dict.fromkeys(["UploadResult", "upload"], "datamount.datasets.upload"),
    **dict.fromkeys(["RepairReport", "VerifyReport", "repair", "verify"], "datamount.datasets.verify"),
    **dict.fromkeys(["CopyResult", "copy_version"], "datamount.datasets.copying"),
    **dict.fromkeys(["DiffRow", "VersionDiff", "diff_versions"], "datamount.datasets.diff"),
    "import_batches": "datamount.datasets.importing",
    **dict.fromkeys(["WebDatasetExport", "export_webdataset"], "datamount.datasets.webdataset_export"),
    **dict.fromkeys(["imagenet", "imdb", "mnist", "wmt14"], "datamount.datasets.public"),
    "map_version": "datamount.datasets.transform",
}


__all__ = [
    "CommitConflictError",
    "CopyResult",
    "DatasetNotFoundError",
    "DatasetRef",
    "DiffRow",
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
    "ReaderNotCalledError",
    "RepairReport",
    "RowSource",
    "ShardEntry",
    "Silent",
    "SourceFormatError",
    "SourceNotFoundError",
    "StreamFormatError",
    "UploadResult",
    "VerifyReport",
    "VersionDiff",
    "WebDatasetExport",
    "catalog",
    "commit",
    "copy_version",
    "dataset_names",
    "diff_versions",
    "export",
    "export_webdataset",
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

__getattr__, __dir__ = lazy_exports(globals(), _LAZY, submodules=["public"])
