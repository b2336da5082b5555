"""``datamount stores`` and ``datamount doctor``."""

from __future__ import annotations

import click
from rich.markup import escape

from datamount.cli.formatting import console, echo_json, json_option, plain_table, print_table
from datamount.cli.options import backend_options, options_dict
from datamount.storage import profiles
from datamount.storage.doctor import Report, run_doctor
from datamount.storage.redact import redact_options, redact_url, redact_urls


@click.command()
@json_option
def stores(as_json: bool) -> None:
    """List the configured stores and say which one is the default."""
    config = profiles.load_config()
    default = profiles.resolve(None, config)
    if as_json:
        echo_json(
            "stores",
            {
                "config_file": str(config.path),
                "config_file_exists": config.path.exists(),
                "default": {"name": default.name, "url": redact_url(default.url), "source": default.source},
                "stores": [
                    {
                        "name": profile.name,
                        "url": redact_url(profile.url),
                        "options": redact_options(profile.options),
                        "default": profile.name == default.name,
                    }
                    for profile in config.profiles.values()
                ],
            },
        )
        return
    out = console()
    out.print(f"config file: {config.path}{'' if config.path.exists() else ' (none)'}")
    out.print(f"default store: {redact_url(default.url)}  [dim]({default.source})[/dim]")
    if not config.profiles:
        out.print(escape("no named stores; add [stores.NAME] tables to the config file to name some"))
        return
    table = plain_table("name", "url", "options", "default")
    for profile in config.profiles.values():
        options = ", ".join(f"{k}={v!r}" for k, v in sorted(redact_options(profile.options).items()))
        table.add_row(profile.name, redact_url(profile.url), options, "*" if profile.name == default.name else "")
    print_table(table)


@click.command()
@click.argument("store", required=False)
@click.option("--quick", is_flag=True, help="Smaller probes: a few seconds even on slow stores.")
@backend_options
@json_option
def doctor(store: str | None, quick: bool, options: tuple[str, ...], as_json: bool) -> None:
    """Check that STORE (a URL, path or profile; default: the default store) works, and measure it.

    Lists, writes, reads back and deletes a probe object, then measures latency and throughput for small and large
    objects. The exit status is 0 only when the store is usable.
    """
    sizes = {"small_count": 8, "large_size": 2 << 20} if quick else {}
    report = run_doctor(store, **sizes, **options_dict(options))
    if as_json:
        echo_json(
            "doctor",
            {
                "store": redact_url(report.target),
                "ok": report.ok,
                "steps": [
                    {"name": s.name, "ok": s.ok, "detail": redact_urls(s.detail), "seconds": s.seconds}
                    for s in report.steps
                ],
                "measurements": [{"name": m.name, "value": m.value, "unit": m.unit} for m in report.measurements],
                "advice": list(report.advice),
            },
        )
    else:
        _print_report(report)
    if not report.ok:
        raise click.exceptions.Exit(1)


def _print_report(report: Report) -> None:
    out = console()
    out.print(f"[bold]datamount doctor[/bold] {escape(redact_url(report.target))}")
    steps = plain_table("check", "result", "time")
    steps.add_column("detail", overflow="fold")
    for step in report.steps:
        result = "[green]ok[/green]" if step.ok else "[red]FAILED[/red]"
        steps.add_row(step.name, result, f"{step.seconds * 1000:.0f} ms", escape(redact_urls(step.detail)))
    print_table(steps)
    if report.measurements:
        figures = plain_table("measure", "value")
        for figure in report.measurements:
            figures.add_row(figure.name, f"{figure.value:,.1f} {figure.unit}")
        print_table(figures)
    for advice in report.advice:
        out.print(f"[yellow]hint:[/yellow] {escape(advice)}")
    out.print("[green]the store is usable[/green]" if report.ok else "[red]the store is not usable[/red]")
