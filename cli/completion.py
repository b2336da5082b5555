"""``datamount completion SHELL``, and what the shells complete besides commands and options: dataset names (and
their versions after ``@``) from the store the command line names, profile names for ``--store``, public datasets."""

from __future__ import annotations

from typing import Any

import click
from click.shell_completion import CompletionItem, get_completion_class

from datamount.datasets import catalog
from datamount.storage import open_store, profiles

SHELLS = ("bash", "zsh", "fish")


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the script with which SHELL completes datamount's commands and options, the dataset names of the
    store a command names (--store, or the default store), their versions after @, and profile names.

    \b
    bash:  eval "$(datamount completion bash)"   in ~/.bashrc
    zsh:   eval "$(datamount completion zsh)"    in ~/.zshrc, after compinit
    fish:  datamount completion fish > ~/.config/fish/completions/datamount.fish
    """
    root = click.get_current_context().find_root().command
    script = get_completion_class(shell)
    assert script is not None  # one of SHELLS
    click.echo(script(root, {}, "datamount", "_DATAMOUNT_COMPLETE").source())


def complete_datasets(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The datasets of the command's store whose names start with ``incomplete``; after ``NAME@``, its versions.
    Nothing when the store cannot be read: a completion never prints an error."""
    from datamount.cli.options import options_dict  # which imports this module, for --store

    try:
        store = open_store(ctx.params.get("store_ref"), check=False, **options_dict(ctx.params.get("options") or ()))
        name, at, _ = incomplete.partition("@")
        if at:
            return [CompletionItem(f"{name}@{version}") for version in catalog.versions(store, name)]
        return [CompletionItem(found) for found in catalog.dataset_names(store) if found.startswith(incomplete)]
    except Exception:
        return []


def complete_public(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The public datasets datamount knows whose names start with ``incomplete``."""
    from datamount.datasets import public as public_datasets  # every public dataset's module: only when asked

    return [CompletionItem(spec.name) for spec in public_datasets.public_datasets() if spec.name.startswith(incomplete)]


def complete_stores(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Profile names starting with ``incomplete``, then the shell's own completion of folders."""
    try:
        names = [name for name in profiles.load_config().profiles if name.startswith(incomplete)]
    except Exception:
        names = []
    return [*(CompletionItem(name) for name in names), CompletionItem(incomplete, type="dir")]
