"""``datamount ledger check``: did a training job consume every row exactly once per epoch?"""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from datamount.cli.formatting import counted, echo_json, json_option, print_table
from datamount.readers.ledger import EpochReport, Ledger, check

#: ``ledger check``'s exit status when an epoch checked is not exact (the others are every command's: docs/cli.md).
NOT_EXACT = 1


@click.group(name="ledger")
def ledger() -> None:
    """Visitation ledgers: which rows each rank of a job consumed (docs/sharding.md)."""


@ledger.command(name="check")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--epoch", "epochs", type=click.IntRange(min=0), multiple=True, help="Only this epoch (repeatable).")
@json_option
def check_command(paths: tuple[Path, ...], epochs: tuple[int, ...], as_json: bool) -> None:
    """Put together the ledgers in PATHS (files, or folders: one ledger per rank, or per rank and resume) and
    report, per epoch, the rows consumed more than once, the rows never consumed, and the epochs skipped whole.

    Every file in a folder (and in its subfolders) is read as a ledger, whatever its name, but for hidden ones
    (their names start with '.', as the temporary file of a save that was killed); a file that is not a ledger
    stops the check with an error naming it: a ledger left out would hide the rows it counted twice.

    \b
    Exit status:
      0  every row of every epoch checked consumed exactly once
      1  NOT exact: a row consumed twice or more, a row never consumed, or an
         epoch skipped
      2  a file that is not a ledger or is damaged, ledgers of different
         datasets, or a mistake in the command line
      4  a file that cannot be read (no permission)
    """
    files = _ledger_files(paths)
    if not files:
        raise click.UsageError(f"no ledger in {', '.join(map(str, paths))} (hidden files are not read)")
    ledgers = {str(file): Ledger.load(file) for file in files}
    reports = [report for report in check(ledgers) if not epochs or _covers(report, epochs)]
    missing = sorted({epoch for epoch in epochs if not any(_covers(report, (epoch,)) for report in reports)})
    if missing:
        raise click.UsageError(f"the ledgers record no epoch {', '.join(map(str, missing))}")
    exact = all(report.exact for report in reports)
    named = next((one for one in ledgers.values() if one.dataset is not None), None)
    unnamed = [file for file, one in ledgers.items() if one.dataset is None]
    notes = [] if not unnamed else [_unnamed_note(unnamed, named)]
    if as_json:
        echo_json(
            "ledger check",
            {
                "ledgers": len(files),
                "dataset": named.dataset if named else None,
                "split": (named.split or None) if named else None,  # "": the ledgers count the whole version
                "exact": exact,
                "epochs": [r.to_dict() for r in reports],
                "notes": notes,
            },
        )
    else:
        _print_reports(reports, named, len(files))
        for note in notes:
            click.echo(f"note: {note}")
        recorded = sum(not report.skipped for report in reports)
        runs = [(report.epoch, report.skipped_through) for report in reports if report.skipped_through is not None]
        skipped = sum(last - first + 1 for first, last in runs)
        epochs_read = counted(recorded, "epoch") + (f" ({skipped:,} more skipped)" if skipped else "")
        verdict = "every row exactly once" if exact else "NOT exact"
        click.echo(f"{counted(len(files), 'ledger')}, {epochs_read}: {verdict}")
    if not exact:
        raise click.exceptions.Exit(NOT_EXACT)


def _ledger_files(paths: tuple[Path, ...]) -> list[Path]:
    """The files named, and every file not hidden under the folders named; each file once."""
    found: dict[Path, Path] = {}
    for path in paths:
        inside = [path]
        if path.is_dir():
            inside = [
                file
                for file in sorted(path.rglob("*"))
                if file.is_file() and not any(part.startswith(".") for part in file.relative_to(path).parts)
            ]
        for file in inside:
            found.setdefault(file.resolve(), file)
    return list(found.values())


def _covers(report: EpochReport, epochs: tuple[int, ...]) -> bool:
    last = report.epoch if report.skipped_through is None else report.skipped_through
    return any(report.epoch <= epoch <= last for epoch in epochs)


def _unnamed_note(unnamed: list[str], named: Ledger | None) -> str:
    files = ", ".join(unnamed[:3]) + (f" and {len(unnamed) - 3} more" if len(unnamed) > 3 else "")
    against = f"checked against the {named.describe()} of the others by their row count only" if named else ""
    return f"{files} name no dataset (saved before ledgers named theirs){': ' + against if against else ''}"


def _print_reports(reports: list[EpochReport], named: Ledger | None, files: int) -> None:
    if named is not None:
        click.echo(f"{'ledger' if files == 1 else 'ledgers'} of {named.describe()}")
    table = Table("epoch", "rows", "consumed", "twice or more", "never", "", box=None)
    for report in reports:
        verdict = "SKIPPED" if report.skipped else "exact" if report.exact else "NOT EXACT"
        table.add_row(
            _epochs(report), *map(str, (report.rows, report.consumed, report.duplicates, report.gaps)), verdict
        )
    print_table(table)
    for report in reports:
        if report.skipped:
            click.echo(
                f"epoch {_epochs(report)}: skipped: no row consumed, though the ledgers record an earlier and a later "
                "epoch"
            )
            continue
        if report.duplicates:
            twice = _examples(report.duplicate_examples, report.duplicates)
            click.echo(f"epoch {report.epoch}: consumed more than once: rows {twice}")
        if report.gaps:
            click.echo(f"epoch {report.epoch}: never consumed: rows {_examples(report.gap_examples, report.gaps)}")


def _epochs(report: EpochReport) -> str:
    last = report.skipped_through
    return str(report.epoch) if last is None or last == report.epoch else f"{report.epoch}-{last}"


def _examples(rows: list[int], total: int) -> str:
    more = f" and {total - len(rows):,} more" if total > len(rows) else ""
    return ", ".join(map(str, rows)) + more
