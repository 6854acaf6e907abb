from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from core.settings import Settings, load_settings


def test_environment_overrides_nested_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAWL_SEARCH__MAX_PAGE_SIZE", "30")
    monkeypatch.setenv("TRAWL_CRAWL__ALLOW_PRIVATE", "true")
    s = Settings()
    assert (s.search.max_page_size, s.crawl.allow_private) == (30, True)


def test_toml_file_is_read_and_env_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "trawl.toml"
    toml.write_text("data_dir = 'somewhere'\n[search]\nmax_page_size = 20\ndefault_page_size = 5\n")
    monkeypatch.setenv("TRAWL_SEARCH__DEFAULT_PAGE_SIZE", "7")
    monkeypatch.delenv("TRAWL_DATA_DIR", raising=False)
    s = load_settings(toml)
    assert (s.data_dir, s.search.max_page_size, s.search.default_page_size) == (Path("somewhere"), 20, 7)


def test_bad_value_names_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAWL_SEARCH__MAX_PAGE_SIZE", "0")
    with pytest.raises(ValidationError, match="search.max_page_size"):
        Settings()
