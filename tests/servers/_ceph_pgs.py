"""Print the state of every placement group of a Ceph cluster as JSON (``{"active+clean": 48}``), asking each PG's
primary OSD: without ceph-mgr (which the test clusters do without) ``ceph status`` has no PG figures.

Run by the system's Python, which has Debian's ``python3-rados``: ``python3 _ceph_pgs.py CEPH_CONF``.
"""

import json
import sys
from collections import Counter

import rados  # type: ignore[import-not-found]

TIMEOUT = 10


def main() -> None:
    cluster = rados.Rados(conffile=sys.argv[1])
    cluster.connect(timeout=TIMEOUT)
    try:
        _, out, _ = cluster.mon_command(json.dumps({"prefix": "osd dump", "format": "json"}), b"", timeout=TIMEOUT)
        states: Counter[str] = Counter()
        for pool in json.loads(out)["pools"]:
            for n in range(pool["pg_num"]):
                pgid = f"{pool['pool']}.{n:x}"
                query = json.dumps({"prefix": "query", "pgid": pgid})
                code, out, _ = cluster.pg_command(pgid, query, b"", timeout=TIMEOUT)
                states[json.loads(out)["state"] if code == 0 else "unanswered"] += 1
    finally:
        cluster.shutdown()
    print(json.dumps(dict(states)))


if __name__ == "__main__":
    main()
