"""What a dataset is on a store: ``.list`` parsing, manifests, upload and the catalog."""

from datamount.datasets.catalog import dataset_names, resolve, verify, versions
from datamount.datasets.errors import (
    DatasetNotFoundError,
    InvalidDatasetNameError,
    ListFormatError,
    ListProblem,
    ManifestError,
)
from datamount.datasets.listfile import Kind, ParsedList, parse_list
from datamount.datasets.manifest import FileEntry, Manifest
from datamount.datasets.names import DatasetRef, parse_ref, validate_name
from datamount.datasets.upload import UploadResult, upload

__all__ = [
    "DatasetNotFoundError",
    "DatasetRef",
    "FileEntry",
    "InvalidDatasetNameError",
    "Kind",
    "ListFormatError",
    "ListProblem",
    "Manifest",
    "ManifestError",
    "ParsedList",
    "UploadResult",
    "dataset_names",
    "parse_list",
    "parse_ref",
    "resolve",
    "upload",
    "validate_name",
    "verify",
    "versions",
]
