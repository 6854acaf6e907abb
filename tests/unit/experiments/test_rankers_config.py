"""Ranker configs: the shipped file validates; names resolve; bad tables are refused by field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.errors import ConfigError
from training.experiments.rankers_config import RankerCatalog, parse_ranker
from training.rankers import register_ranker

REPO = Path(__file__).resolve().parents[3]


def test_shipped_catalog_loads() -> None:
    catalog = RankerCatalog.load(REPO / "rankers.toml")
    assert {"bm25", "bm25-notitle", "hybrid", "ltr:v3", "ltr:v4", "ltr:v4+ce"} <= set(catalog.names())
    ltr = catalog.get("ltr:v4+ce")
    assert (ltr.key, ltr.ranker, ltr.stages[-1]) == ("ltr:v4+ce@v1", "ltr", "cross-encoder")
    assert ltr.options == {"cross_encoder": "on", "model": "models/ltr/default"}


def test_registered_but_undeclared_resolves_at_version_zero() -> None:
    register_ranker("test-undeclared")(lambda context: None)  # type: ignore[arg-type,return-value]
    config = RankerCatalog({}).get("test-undeclared")
    assert (config.key, config.ranker, config.params) == ("test-undeclared@v0", "test-undeclared", ())


def test_unknown_name_lists_the_choices() -> None:
    with pytest.raises(ConfigError, match=re.escape("Unknown ranker 'nope'; expected one of: ")):
        RankerCatalog({}).get("nope")


def test_declared_but_unregistered_runner_fails_before_running() -> None:
    catalog = RankerCatalog.from_mapping({"rankers": {"future": {"version": 1, "ranker": "not-yet"}}})
    assert catalog.get("future").ranker == "not-yet"
    with pytest.raises(ConfigError, match=re.escape("Ranker 'future' (rankers.toml) runs 'not-yet'")):
        catalog.check_runnable("future")


def test_digest_tracks_content_not_description() -> None:
    base = {"version": 1, "ranker": "bm25", "params": {"k1": 1.2}}
    a = parse_ranker("x", base)
    assert parse_ranker("x", {**base, "description": "new words"}).digest == a.digest
    assert parse_ranker("x", {**base, "params": {"k1": 1.3}}).digest != a.digest


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"version": 0}, "version must be an integer >= 1, got 0."),
        ({"version": "2"}, "version must be an integer >= 1, got '2'."),
        ({"version": 1, "stages": ["bm25", "magic"]}, "stages must be a list drawn from"),
        ({"version": 1, "params": {"a": [1]}}, "params must be a table of scalar values"),
        ({"version": 1, "weights": 3}, "unknown key(s) weights"),
    ],
)
def test_bad_tables_name_the_field(table: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_ranker("x", table)


def test_bad_name_is_refused() -> None:
    with pytest.raises(ConfigError, match=re.escape("[rankers.'Bad Name']: bad name")):
        parse_ranker("Bad Name", {"version": 1})
