"""What a dataset is on a store: ``.list`` parsing, manifests, upload and the catalog."""

__all__: list[str] = []
