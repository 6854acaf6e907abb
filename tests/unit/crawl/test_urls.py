"""canonicalize_url: the examples that matter, and the two properties (total, idempotent)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from crawl.urls import canonicalize_url, host_of, origin_of


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("HTTP://Example.COM:80/a/./b/../c?b=2&a=1&utm_source=x#top", "http://example.com/a/c?a=1&b=2"),
        ("https://example.com:443", "https://example.com/"),
        ("http://example.com:8080/", "http://example.com:8080/"),
        ("http://bücher.de/ä?x=ü", "http://xn--bcher-kva.de/%C3%A4?x=%C3%BC"),
        ("http://a.com/%7e/%2f?q=a b", "http://a.com/~/%2F?q=a%20b"),
        ("http://a.com/x;jsessionid=ABC?PHPSESSID=1&k=v&fbclid=z&gclid=q", "http://a.com/x?k=v"),
        ("http://user:pw@a.com/", "http://a.com/"),
        ("http://a.com./x", "http://a.com/x"),
        ("http://[::FFFF:1.2.3.4]:81/", "http://[::ffff:102:304]:81/"),
        ("http://a.com/a/../../b", "http://a.com/b"),
        ("http://a.com/?b&a=", "http://a.com/?a=&b"),
        ("mailto:someone@example.com", ""),
        ("javascript:void(0)", ""),
        ("http://a.com:99999/", ""),
        ("http://[::1/", ""),
        ("", ""),
    ],
)
def test_canonical_forms(raw: str, expected: str) -> None:
    assert canonicalize_url(raw) == expected


def test_relative_links_resolve_against_the_base() -> None:
    base = "http://a.com/docs/guide/index.html"
    assert canonicalize_url("../api.html#x", base=base) == "http://a.com/docs/api.html"
    assert canonicalize_url("//b.com/p", base=base) == "http://b.com/p"
    assert canonicalize_url("?page=2", base=base) == "http://a.com/docs/guide/index.html?page=2"


def test_host_and_origin() -> None:
    url = canonicalize_url("HTTP://A.com:8080/x?y=1")
    assert (host_of(url), origin_of(url)) == ("a.com:8080", "http://a.com:8080")


_TRICKY = "%/.?&=#;:@[]\\ abcfAF019~_-+ü"
url_like = st.one_of(
    st.text(),
    st.text(alphabet=_TRICKY, max_size=40).map(lambda t: "http://a.com/" + t),
    st.text(alphabet=_TRICKY, max_size=20).map(lambda t: "http://" + t),
    st.builds(
        lambda scheme, host, path, query: f"{scheme}://{host}{path}{query}",
        st.sampled_from(["http", "HTTPS", "ftp", "hTtP"]),
        st.one_of(
            st.text(min_size=1, max_size=20),
            st.from_regex(r"[A-Za-z0-9.\-]{1,20}(:[0-9]{1,6})?", fullmatch=True),
        ),
        st.text(max_size=30).map(lambda t: "/" + t),
        st.text(max_size=30).map(lambda t: "?" + t),
    ),
)


@settings(max_examples=400, deadline=None)
@given(url_like)
def test_canonicalize_never_raises_and_is_idempotent(raw: str) -> None:
    once = canonicalize_url(raw)
    assert isinstance(once, str)
    assert canonicalize_url(once) == once


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40))
def test_canonicalize_with_any_base_never_raises(raw: str, base: str) -> None:
    once = canonicalize_url(raw, base=base)
    assert canonicalize_url(once) == once


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(
        ["http://a.com/", "http://a.com/x/y.html", "https://a.com:8443/d/?q=1", "http://a.com/x/"]
    ),
    st.text(alphabet="abc/.?#:%&=\\", max_size=25),
)
def test_fast_join_agrees_with_urljoin(base: str, ref: str) -> None:
    """The string fast path for relative links is an optimization, not a new meaning.

    Except where ``urljoin`` departs from RFC 3986 and we do not: it collapses empty
    segments (``x//y`` → ``x/y``, also written ``x\\/y``) and treats an empty query
    (``?``) as absent, so those references are left out.
    """
    from urllib.parse import urljoin

    # A backslash is a slash in http(s) URLs (WHATWG), so "\\/" is an empty segment too.
    assume("//" not in ref.replace("\\", "/") and ref.split("#", 1)[0] != "?")
    assert canonicalize_url(ref, base=base) == canonicalize_url(urljoin(base, ref.strip()))
