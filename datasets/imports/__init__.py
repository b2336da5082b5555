"""``datamount import --from-format``: datasets held in another tool's format (WebDataset, MosaicML MDS, litdata,
Hugging Face ``datasets``, Parquet) stored as a new version, in one checked pass over the source."""
