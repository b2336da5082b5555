"""``python -m datamount.mount.serve``: the process that serves a mount (started by ``datamount mount``)."""

from datamount.mount.mounting import _serve_from_pipe

if __name__ == "__main__":
    _serve_from_pipe()
