"""The ``trawl`` Typer app: every command group, registered by plain imports.

Heavy libraries (torch, tantivy, LightGBM, sentence-transformers) are imported inside
the commands that need them, so ``trawl --help`` stays fast.
"""

from __future__ import annotations

import os
from typing import Annotated

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer

from cli import block as block_cli
from cli import crawl, dataset, demo, embed, evaluate, experiment, index, inspect, search, serve, train
from cli import pagerank as pagerank_cli
from cli import replay as replay_cli
from cli import reprocess as reprocess_cli
from cli import run as run_cli
from cli.console import widen_help_for_logs
from cli.failures import TrawlGroup
from cli.help import hide_flag_types
from core.logging import configure_logging

app = typer.Typer(
    name="trawl",
    help=(
        "Trawl: crawl, index, evaluate and serve a web search engine.\n\n"
        "Example: trawl demo   (crawls the local Python docs, indexes them and serves http://127.0.0.1:8000/)"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=TrawlGroup,  # a failure ends in one line (cli.failures); --debug adds the traceback
)
hide_flag_types()


@app.callback()
def _main(
    log_level: Annotated[str, typer.Option("--log-level", help="DEBUG, INFO, WARNING or ERROR.")] = "WARNING",
    debug: Annotated[
        bool, typer.Option("--debug", help="On a failure, print the traceback before the one-line error.")
    ] = False,
) -> None:
    configure_logging(log_level)


app.add_typer(index.index_app, name="index")
app.command("eval")(evaluate.eval_command)
app.command("search")(search.search_command)
app.command("serve")(serve.serve_command)
app.add_typer(serve.shard_app, name="shard")
app.command("crawl")(crawl.crawl_command)
app.command("run")(run_cli.run_command)
app.add_typer(block_cli.block_app, name="block")
app.command("inspect")(inspect.inspect_command)
app.command("replay")(replay_cli.replay_command)
app.command("reprocess")(reprocess_cli.reprocess_command)
app.add_typer(embed.embed_app, name="embed")
app.command("pagerank")(pagerank_cli.pagerank_command)
app.add_typer(train.train_app, name="train")
app.command("demo")(demo.demo_command)
app.add_typer(experiment.experiment_app, name="experiment")
app.add_typer(dataset.dataset_app, name="dataset")


def main() -> None:
    widen_help_for_logs()
    app()


if __name__ == "__main__":
    main()
