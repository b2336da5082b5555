"""``datamount import --from-format``: datasets held in another tool's format (WebDataset, MosaicML MDS, litdata,
Hugging Face ``datasets``, Parquet) stored as a new version, in one checked pass over the source."""

from datamount.datasets.imports.importer import FORMATS, import_dataset, open_source
from datamount.datasets.imports.mapping import MappingError
from datamount.datasets.imports.source import SourceError
from datamount.datasets.imports.writer import Imported

__all__ = ["FORMATS", "Imported", "MappingError", "SourceError", "import_dataset", "open_source"]
