"""``datamount master start|stop`` and ``datamount tasks``: the task master of a dataset, on a Ray cluster."""

from __future__ import annotations

import time

import click

from datamount.cli.completion import complete_datasets
from datamount.cli.formatting import echo_fields, echo_json, json_option
from datamount.cli.options import store_options
from datamount.datasets.rows import DEFAULT_ROWS_PER_SPAN
from datamount.readers.master import (
    DEFAULT_LEASE_TIMEOUT,
    DEFAULT_MAX_FAILURES,
    DEFAULT_NAMESPACE,
    MasterInfo,
    QueueStatus,
    connect,
    start_master,
    stop_master,
)
from datamount.storage import Store

address_option = click.option(
    "--address",
    metavar="ADDRESS",
    help="The Ray cluster: host:port of its head, ray://host:port or auto (default: $RAY_ADDRESS, else the "
    "cluster 'ray start' runs on this machine).",
)
namespace_option = click.option(
    "--namespace",
    default=DEFAULT_NAMESPACE,
    show_default=True,
    help="The Ray namespace the master is named in (one master per dataset and namespace).",
)


@click.group()
def master() -> None:
    """Start or stop the task master of a dataset: trainers using dist_reader(NAME) share its passes."""


@master.command()
@click.argument("name", shell_complete=complete_datasets)
@store_options
@address_option
@namespace_option
@click.option(
    "--lease-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_LEASE_TIMEOUT,
    show_default=True,
    help="Seconds a trainer holds a task before it is handed to another (trainers renew while they read).",
)
@click.option(
    "--max-failures",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_FAILURES,
    show_default=True,
    help="Failures (read errors, expired leases) a task may have in a pass and still be retried.",
)
@click.option("--passes", type=click.IntRange(min=1), help="Passes to run (default: no limit).")
@click.option("--seed", type=int, help="Hand each pass's tasks out in an order drawn from SEED (default: row order).")
@click.option(
    "--rows-per-task",
    type=click.IntRange(min=1),
    default=DEFAULT_ROWS_PER_SPAN,
    show_default=True,
    help="List lines per task of an unpacked dataset (a packed one has a task per row group).",
)
def start(
    name: str,
    store: Store,
    address: str | None,
    namespace: str,
    lease_timeout: float,
    max_failures: int,
    passes: int | None,
    seed: int | None,
    rows_per_task: int,
) -> None:
    """Start the task master of dataset NAME (NAME@N for a version; else the latest, pinned now)."""
    client = start_master(
        name,
        store,
        address=address,
        namespace=namespace,
        lease_timeout=lease_timeout,
        max_failures=max_failures,
        passes=passes,
        shuffle_seed=seed,
        rows_per_task=rows_per_task,
    )
    info = client.info()
    click.echo(f"started the task master of {info.dataset}: {info.tasks} tasks, {_settings(info)}")
    click.echo(f"snapshot: {info.snapshot}")


@master.command()
@click.argument("name", shell_complete=complete_datasets)
@address_option
@namespace_option
def stop(name: str, address: str | None, namespace: str) -> None:
    """Stop the task master of dataset NAME and remove its snapshot."""
    status = stop_master(name, address=address, namespace=namespace)
    if status is None:
        click.echo(f"stopped the task master of {name} (it did not answer; its snapshot may remain)")
        return
    click.echo(f"stopped the task master of {status.dataset} at pass {status.pass_number}: {_counts(status)}")


@click.command()
@click.argument("name", shell_complete=complete_datasets)
@address_option
@namespace_option
@json_option
def tasks(name: str, address: str | None, namespace: str, as_json: bool) -> None:
    """Show the task queue of dataset NAME's master: pass, counts, leases and their owners, troubled tasks."""
    client = connect(name, address=address, namespace=namespace)
    info, status = client.info(), client.status()
    if as_json:
        echo_json("tasks", {"master": info.to_dict(), "queue": status.to_dict()})
        return
    of_passes = f" of {status.passes}" if status.passes else ""
    state = " (all passes run)" if status.finished else ""
    fields = [
        ("master", f"{info.name} (namespace {info.namespace}, restarted {info.restarts} times)"),
        ("dataset", f"{info.dataset}, {info.tasks} tasks"),
        ("settings", _settings(info)),
        ("pass", f"{status.pass_number}{of_passes}{state}"),
        ("tasks", _counts(status)),
        ("snapshot", info.snapshot + (f" (last write failed: {info.snapshot_error})" if info.snapshot_error else "")),
    ]
    echo_fields(fields)
    if status.leases:
        click.echo("\nleases:")
        click.echo(f"  {'task':>6}  {'rows':<23} {'expires in':>10}  owner")
        now = time.time()
        for lease in status.leases:
            rows = f"{lease.task.start}-{lease.task.stop - 1}"
            click.echo(f"  {lease.task.id:>6}  {rows:<23} {lease.deadline - now:>9.0f}s  {lease.owner}")
    if status.troubled:
        click.echo("\nretried or failed:")
        for report in status.troubled:
            rows = f"{report.task.start}-{report.task.stop - 1}"
            click.echo(
                f"  task {report.task.id} (rows {rows}): {report.state}, {report.leases} leases, "
                f"{report.expired} expired, {report.failed_reads} failed reads"
                + (f"; last: {report.reason}" if report.reason else "")
            )


def _settings(info: MasterInfo) -> str:
    passes = str(info.passes) if info.passes else "no limit"
    order = f"shuffled (seed {info.shuffle_seed})" if info.shuffle_seed is not None else "in row order"
    return f"lease {info.lease_timeout:g} s, at most {info.max_failures} failures, passes: {passes}, {order}"


def _counts(status: QueueStatus) -> str:
    return f"{status.todo} todo, {status.pending} pending, {status.done} done, {status.failed} failed"
