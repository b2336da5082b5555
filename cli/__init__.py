"""The ``datamount`` command."""
