"""A page's static quality from its link density and size (``retrieval.index.page_quality``)."""

from __future__ import annotations

import pytest

from core.types import DocId, Document
from retrieval.index.page_quality import TIERS, page_quality, quality_of


@pytest.mark.parametrize(
    ("link_words", "score"),
    [(0, 1.0), (30, 1.0), (40, 0.85), (50, 0.85), (60, 0.7), (70, 0.7), (80, 0.55), (100, 0.55)],
)
def test_quality_falls_with_link_density_in_tiers(link_words: int, score: float) -> None:
    quality = page_quality(100, link_words, crawled=True)
    assert quality.score == score
    assert quality.link_density == link_words / 100
    assert (quality.reasons == ()) == (score == 1.0)


def test_a_demoted_page_says_why() -> None:
    quality = page_quality(1000, 980, crawled=True)
    assert quality.reasons == ("98% of its words are links",)
    assert quality.score == 0.55


def test_a_near_empty_crawled_page_is_demoted_but_a_short_record_is_not() -> None:
    assert page_quality(12, 0, crawled=True).score == 0.7
    assert page_quality(12, 0, crawled=True).reasons == ("near empty (12 words)",)
    assert page_quality(12, 0, crawled=False).score == 1.0  # a title-only corpus record


def test_every_score_is_a_tier() -> None:
    scores = {page_quality(200, n, crawled=True).score for n in range(0, 201)}
    assert scores == {1.0, *TIERS}


def test_a_collection_record_without_links_is_at_full_quality() -> None:
    record = Document(doc_id=DocId(1), url="beir://cranfield/1", title="Flow", body="")
    assert quality_of(record).score == 1.0
    page = Document(doc_id=DocId(2), url="http://site.test/stub", title="Stub", body="moved")
    assert quality_of(page).score == 0.7


def test_a_page_kept_at_full_quality_gives_no_reason() -> None:
    kept = page_quality(100, 35, crawled=True)  # density .35: nearer 1 than the first tier
    assert kept.score == 1.0 and kept.reasons == ()
