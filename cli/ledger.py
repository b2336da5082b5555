"""``datamount ledger check``: did a training job consume every row exactly once per epoch?"""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from datamount.cli.formatting import echo_json, json_option, print_table
from datamount.readers.ledger import Ledger, check


@click.group(name="ledger")
def ledger() -> None:
    """Visitation ledgers: which rows each rank of a job consumed (docs/sharding.md)."""


@ledger.command(name="check")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--epoch", "epochs", type=click.IntRange(min=0), multiple=True, help="Only this epoch (repeatable).")
@json_option
def check_command(paths: tuple[Path, ...], epochs: tuple[int, ...], as_json: bool) -> None:
    """Put together the ledgers in PATHS (files, or folders of *.json ledgers: one per rank, or per rank and
    resume) and report, per epoch, the rows consumed more than once and the rows never consumed.

    Exit status 1 when an epoch checked has either.
    """
    files = [found for path in paths for found in (sorted(path.rglob("*.json")) if path.is_dir() else [path])]
    if not files:
        raise click.UsageError(f"no ledger (*.json) in {', '.join(map(str, paths))}")
    reports = [report for report in check(Ledger.load(file) for file in files) if not epochs or report.epoch in epochs]
    missing = sorted(set(epochs) - {report.epoch for report in reports})
    if missing:
        raise click.UsageError(f"the ledgers record no epoch {', '.join(map(str, missing))}")
    exact = all(report.exact for report in reports)
    if as_json:
        echo_json("ledger check", {"ledgers": len(files), "exact": exact, "epochs": [r.to_dict() for r in reports]})
    else:
        table = Table("epoch", "rows", "consumed", "twice or more", "never", "", box=None)
        for report in reports:
            verdict = "exact" if report.exact else "NOT EXACT"
            table.add_row(
                *map(str, (report.epoch, report.rows, report.consumed, report.duplicates, report.gaps)), verdict
            )
        print_table(table)
        for report in reports:
            if report.duplicates:
                twice = _examples(report.duplicate_examples, report.duplicates)
                click.echo(f"epoch {report.epoch}: consumed more than once: rows {twice}")
            if report.gaps:
                click.echo(f"epoch {report.epoch}: never consumed: rows {_examples(report.gap_examples, report.gaps)}")
        click.echo(f"{len(files)} ledgers, {len(reports)} epochs: {'every row exactly once' if exact else 'NOT exact'}")
    if not exact:
        raise click.exceptions.Exit(1)


def _examples(rows: list[int], total: int) -> str:
    more = f" and {total - len(rows):,} more" if total > len(rows) else ""
    return ", ".join(map(str, rows)) + more
