"""An import killed part way (SIGKILL, from inside its own process once it has read a given number of rows and a
shard's marker is stored: shards are sent in a thread), then run again in this process: what every format's tests
use to show that an import goes on from its last shard."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from datamount.datasets import catalog
from datamount.datasets.imports import Imported, import_dataset
from datamount.storage import Store

KILLED_IMPORT = """
import json, os, signal, sys
from datamount.datasets.imports import import_dataset
from datamount.storage import open_store

class KilledAfter:
    rows = 0
    def start(self, phase, *, items, size): pass
    def finish(self): pass
    def advance(self, *, items=1, size=0):
        self.rows += items
        if self.rows > int(sys.argv[3]) and any(path.endswith(".done") for path in store.list("datasets/killed")):
            os.kill(os.getpid(), signal.SIGKILL)

store = open_store(sys.argv[2])

import_dataset(sys.argv[1], "killed", store=store, progress=KilledAfter(), **json.loads(sys.argv[4]))
"""


def killed_then_resumed(source: str | Path, store: Store, folder: Path, rows: int, **options: Any) -> Imported:
    """Import ``source`` as ``killed`` into ``store`` (``options``: ``import_dataset``'s) in a process killed once it
    has read more than ``rows`` rows and stored a shard, check that nothing was committed, then import it again here;
    what the second run did."""
    script = folder / "killed_import.py"
    script.write_text(textwrap.dedent(KILLED_IMPORT))
    args = [sys.executable, str(script), str(source), store.url, str(rows), json.dumps(options)]
    killed = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert catalog.versions(store, "killed") == []
    done = import_dataset(source, "killed", store=store, **options)
    assert done.resumed_shards >= 1 and done.resumed_rows > 0
    assert done.resumed_rows + done.written_rows == done.manifest.rows
    assert not [path for path in store.list("datasets/killed") if path.endswith(".done")]
    return done
