"""``datamount diff``: what changed from one version to another (:func:`datamount.datasets.diff.diff_versions`)."""

from __future__ import annotations

import click
from rich.markup import escape

from datamount.cli.completion import complete_datasets
from datamount.cli.formatting import counted, echo_json, json_option, plain_table, print_table
from datamount.cli.options import store_options
from datamount.datasets import catalog, parse_ref
from datamount.datasets.diff import CATEGORIES, JSON_LABELS_LIMIT, Category, VersionDiff, diff_versions, label_order
from datamount.storage import Store

#: Labels shown in the table at most (those whose count changed most); ``--json`` has them all.
LABEL_ROWS = 30


@click.command()
@click.argument("first", metavar="A[@N]", shell_complete=complete_datasets)
@click.argument("second", metavar="[B[@M]]", required=False, shell_complete=complete_datasets)
@store_options
@click.option(
    "-n", "--samples", type=click.IntRange(min=0), default=5, show_default=True, help="Rows shown of each category."
)
@json_option
def diff(first: str, second: str | None, store: Store, samples: int, as_json: bool) -> None:
    """Show what changed from version A to version B: rows added, removed, changed (other bytes or labels) and
    unchanged, and the rows per label in each, from their manifests and lists alone (no file is read).

    A plain name is its latest version, and B may be another dataset: 'diff cats@1 cats@3', 'diff cats@1 cats'
    (against the latest), 'diff cats@1' (the same), 'diff cats' (the latest against the version before it),
    'diff cats@2 dogs'.
    """
    a, b = version_pair(store, first, second)
    found = diff_versions(store, a, b)
    if as_json:
        echo_json("diff", found.to_json(samples=samples))
        return
    click.echo(summary(found))
    if found.kind_a != found.kind_b:
        click.echo(f"kind: {found.kind_a} -> {found.kind_b}")
    if found.columns_a != found.columns_b:
        click.echo(f"columns: {', '.join(found.columns_a)} -> {', '.join(found.columns_b)}")
    for note in found.notes:
        click.echo(f"note: {note}")
    _echo_labels(found)
    for category in CATEGORIES:
        _echo_samples(found, category, samples)


def version_pair(store: Store, first: str, second: str | None) -> tuple[str, str]:
    """The two versions the command line names: ``A B`` as they are; ``A@N`` alone against A's latest version;
    ``A`` alone, its latest version against the one before it."""
    if second is not None:
        return first, second
    parsed = parse_ref(first)
    if parsed.version is not None:
        return first, parsed.name
    newest = catalog.resolve(store, first)
    earlier = [version for version in catalog.versions(store, newest.name) if version < newest.version]
    if not earlier:
        raise click.UsageError(
            f"{newest.name} has one version (@{newest.version}): name two to compare, e.g. "
            f"'datamount diff {newest.ref} OTHER'"
        )
    return f"{newest.name}@{earlier[-1]}", newest.ref


def summary(found: VersionDiff) -> str:
    """The one line that sums a diff up."""
    how = "" if found.compared == "rows" else ", by shard"
    changed = f"{found.changed:,} changed"
    if found.kind_a == found.kind_b == "image" and found.changed:
        changed += f" ({found.changed_bytes:,} in bytes, {found.changed_labels:,} in labels)"
    return (
        f"{found.a_ref} -> {found.b_ref}: {found.added:,} added, {found.removed:,} removed, {changed}, "
        f"{found.unchanged:,} unchanged ({counted(found.rows_a, 'row')} -> {found.rows_b:,}{how})"
    )


def _echo_labels(found: VersionDiff) -> None:
    if not (found.distinct_labels_a or found.distinct_labels_b):
        return
    if not found.labels_are_classes:
        click.echo(
            f"labels: {found.distinct_labels_a:,} distinct in {found.a_ref}, {found.distinct_labels_b:,} in "
            f"{found.b_ref} (not classes: no table; --json has their counts up to {JSON_LABELS_LIMIT:,})"
        )
        return
    before, after = found.label_counts_a, found.label_counts_b
    labels = sorted(before.keys() | after.keys(), key=label_order)
    shown = labels
    if len(labels) > LABEL_ROWS:  # those that changed most, in label order
        moved = sorted(labels, key=lambda label: -abs(after.get(label, 0) - before.get(label, 0)))[:LABEL_ROWS]
        shown = sorted(moved, key=label_order)
    table = plain_table("label", found.a_ref, found.b_ref, "change")
    for label in shown:
        change = after.get(label, 0) - before.get(label, 0)
        table.add_row(escape(label), f"{before.get(label, 0):,}", f"{after.get(label, 0):,}", f"{change:+,}")
    print_table(table)
    if len(shown) < len(labels):
        click.echo(f"... and {counted(len(labels) - len(shown), 'more label')} whose counts changed less (--json)")


def _echo_samples(found: VersionDiff, category: Category, limit: int) -> None:
    total = getattr(found, category)
    rows = found.sample_rows(category, limit)
    if not rows:
        return
    click.echo(f"{category} ({total:,}{f', the first {len(rows)}' if len(rows) < total else ''}):")
    columns = found.columns_b if category == "added" else found.columns_a
    key = columns[0] if columns else "key"
    label = columns[1] if len(columns) > 1 else "label"
    if category != "changed":
        table = plain_table("row", key, label)
        for row in rows:
            number, value = (row.row_b, row.label_b) if category == "added" else (row.row_a, row.label_a)
            table.add_row(str(number), escape(row.key), escape(value or ""))
    else:
        images = found.kind_a == found.kind_b == "image"
        table = plain_table("row a", "row b", key, f"{label} a", f"{label} b", *(["bytes"] if images else []))
        for row in rows:
            cells = [
                str(row.row_a),
                str(row.row_b),
                escape(row.key),
                escape(row.label_a or ""),
                escape(row.label_b or ""),
            ]
            table.add_row(*cells, *(["changed" if row.bytes_changed else "same"] if images else []))
    print_table(table)
