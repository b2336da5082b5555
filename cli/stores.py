"""``datamount stores`` and ``datamount doctor``."""

from __future__ import annotations

import click
from rich.console import Console
from rich.markup import escape

from datamount.cli.formatting import plain_table
from datamount.cli.options import backend_options, options_dict
from datamount.storage import profiles
from datamount.storage.doctor import Report, run_doctor
from datamount.storage.redact import redact_options, redact_url


@click.command()
def stores() -> None:
    """List the configured stores and say which one is the default."""
    config = profiles.load_config()
    default = profiles.resolve(None, config)
    console = Console()
    console.print(f"config file: {config.path}{'' if config.path.exists() else ' (none)'}")
    console.print(f"default store: {redact_url(default.url)}  [dim]({default.source})[/dim]")
    if not config.profiles:
        console.print(escape("no named stores; add [stores.NAME] tables to the config file to name some"))
        return
    table = plain_table("name", "url", "options", "default")
    for profile in config.profiles.values():
        options = ", ".join(f"{k}={v!r}" for k, v in sorted(redact_options(profile.options).items()))
        table.add_row(profile.name, redact_url(profile.url), options, "*" if profile.name == default.name else "")
    console.print(table)


@click.command()
@click.argument("store", required=False)
@click.option("--quick", is_flag=True, help="Smaller probes: a few seconds even on slow stores.")
@backend_options
def doctor(store: str | None, quick: bool, options: tuple[str, ...]) -> None:
    """Check that STORE (a URL, path or profile; default: the default store) works, and measure it.

    Lists, writes, reads back and deletes a probe object, then measures latency and throughput for small and large
    objects. The exit status is 0 only when the store is usable.
    """
    sizes = {"small_count": 8, "large_size": 2 << 20} if quick else {}
    report = run_doctor(store, **sizes, **options_dict(options))
    _print_report(report)
    if not report.ok:
        raise click.exceptions.Exit(1)


def _print_report(report: Report) -> None:
    console = Console()
    console.print(f"[bold]datamount doctor[/bold] {escape(report.target)}")
    steps = plain_table("check", "result", "time")
    steps.add_column("detail", overflow="fold")
    for step in report.steps:
        result = "[green]ok[/green]" if step.ok else "[red]FAILED[/red]"
        steps.add_row(step.name, result, f"{step.seconds * 1000:.0f} ms", escape(step.detail))
    console.print(steps)
    if report.measurements:
        figures = plain_table("measure", "value")
        for figure in report.measurements:
            figures.add_row(figure.name, f"{figure.value:,.1f} {figure.unit}")
        console.print(figures)
    for advice in report.advice:
        console.print(f"[yellow]hint:[/yellow] {escape(advice)}")
    console.print("[green]the store is usable[/green]" if report.ok else "[red]the store is not usable[/red]")
