"""``trawl block add|list|remove``: the operator's block list of a crawl directory."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from cli.console import make_console
from core.blocklist import BlockList, block
from core.crawldir import CrawlDir
from core.errors import ConfigError

console = make_console(stderr=True)
block_app = typer.Typer(
    no_args_is_help=True,
    help=(
        "Hosts and URL patterns that are neither crawled nor served.\n\n"
        'Example: trawl block add spam.example --data data/crawl --reason "link farm"'
    ),
)

DataOption = Annotated[Path, typer.Option("--data", help="Crawl data directory the rules apply to.")]


@block_app.command("add")
def add_command(
    value: Annotated[
        str, typer.Argument(help="A host (and its subdomains) or a URL glob (http://h/private/*).")
    ],
    data: DataOption,
    reason: Annotated[str, typer.Option("--reason", help="Why; kept for trawl inspect.")] = "",
) -> None:
    """Block a host or URL pattern: no worker leases a matching URL from now on, and
    indexed pages it matches leave search within the incremental indexer's lag.

    Example: trawl block add spam.example --data data/crawl --reason "link farm"
    """
    rule, removed = block(data, value, reason=reason)
    console.print(f"blocked {rule.kind} {rule.value}; {removed} stored page(s) to leave the index")


@block_app.command("list")
def list_command(
    data: DataOption,
    json_out: Annotated[bool, typer.Option("--json", help="Print the rules as JSON on stdout.")] = False,
) -> None:
    """List the rules with their reasons.

    Example: trawl block list --data data/crawl
    """
    if not Path(data).is_dir():  # an empty list for a mistyped path read as "nothing blocked"
        raise ConfigError(f"{data} is not a crawl data directory (no such directory).")
    rules = BlockList(CrawlDir(data).blocklist).rules()
    if json_out:
        typer.echo(json.dumps([{"kind": r.kind, "value": r.value, "reason": r.reason, "added_at": r.added_at}
                               for r in rules]))  # fmt: skip
        return
    table = Table("kind", "value", "reason", "added (UTC)")
    for r in rules:
        table.add_row(r.kind, r.value, r.reason, time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r.added_at)))
    make_console().print(table)


@block_app.command("remove")
def remove_command(
    value: Annotated[str, typer.Argument(help="The host or pattern as it was added.")],
    data: DataOption,
) -> None:
    """Unblock; pages come back to search when they are next fetched.

    Example: trawl block remove spam.example --data data/crawl
    """
    if not BlockList(CrawlDir(data).blocklist).remove(value):
        console.print(f"[red]no rule for {value!r}")
        raise typer.Exit(1)
    console.print(f"unblocked {value}")
