"""One module per storage backend, each a :class:`~datamount.storage.store.Store` subclass."""
