"""``datamount ui``: a local, read-only web app to look at the datasets of stores and at what training waited for.

===================  ===============================================================================
module               job
===================  ===============================================================================
:mod:`.app`          the pages, and the rules every request goes through (GET only, escaping, errors)
:mod:`.browse`       what the pages show, read through the catalog and the row sources
:mod:`.stores`       the stores a server shows, by the key its URLs name them with
:mod:`.values`       how a value is shown: images by their bytes' type, thumbnails, text
:mod:`.stats_file`   a reader statistics file (``DATAMOUNT_STATS_FILE``), per rank over time
:mod:`.charts`       charts drawn on the server as SVG
:mod:`.server`       serving the app on a socket (uvicorn)
===================  ===============================================================================

Needs the ``ui`` extra: ``pip install 'datamount[ui]'``.
"""

from datamount.ui.app import create_app
from datamount.ui.server import serve
from datamount.ui.stores import StoreShelf

__all__ = ["StoreShelf", "create_app", "serve"]
