"""Reading ``[KEY.NAME]`` tables from a TOML file: shared by ranker configs and experiment books."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.errors import ConfigError


def read_toml(path: Path) -> dict[str, Any]:
    """The parsed file; a clear ConfigError naming the file when it is not valid TOML."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc


def named_tables(data: Mapping[str, Any], key: str, *, source: str) -> dict[str, Any]:
    """The ``[key.NAME]`` tables of ``data``; anything else at the top level is an error."""
    extra = sorted(set(data) - {key})
    if extra:
        raise ConfigError(f"{source}: unknown top-level key(s) {', '.join(extra)}; expected [{key}.NAME].")
    tables = data.get(key, {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{source}: '{key}' must be a table of [{key}.NAME] tables.")
    return tables
