"""Host facets from the ``site`` field's suffix terms; facet names checked."""

from __future__ import annotations

import pytest

from core.errors import BadParameter
from retrieval.index.lexical_schema import host_suffixes
from retrieval.query.facets import FacetValue, hosts_of, parse_facets, top_values


def _site_terms(hosts: dict[str, int]) -> dict[str, int]:
    """The ``site`` term counts an index holding ``hosts`` (host → documents) would have."""
    terms: dict[str, int] = {}
    for host, count in hosts.items():
        name, _, port = host.partition(":")
        for suffix in host_suffixes(name) + ([host] if port else []):
            terms[suffix] = terms.get(suffix, 0) + count
    return terms


def test_hosts_are_the_terms_with_documents_of_their_own() -> None:
    terms = _site_terms({"docs.python.org": 5, "python.org": 2, "example.org": 3, "127.0.0.1:8099": 4})
    assert hosts_of(terms) == {"docs.python.org": 5, "python.org": 7, "example.org": 3, "127.0.0.1:8099": 4}


def test_shards_add_up_and_the_largest_come_first() -> None:
    one, two = _site_terms({"a.example": 2, "b.example": 1}), _site_terms({"b.example": 4})
    assert top_values("host", [one, two], 5) == [FacetValue("b.example", 5), FacetValue("a.example", 2)]
    assert top_values("lang", [{"en": 1, "de": 3}, {"en": 3}], 1) == [FacetValue("en", 4)]


def test_facet_names_are_checked() -> None:
    assert parse_facets(" host, LANG,host") == ("host", "lang")
    assert parse_facets("") == ()
    with pytest.raises(BadParameter, match="unknown facet 'size'"):
        parse_facets("host,size")
