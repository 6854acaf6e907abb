"""URL canonicalization: one spelling per resource, decided before every seen-check.

Two URLs that a server treats as the same resource should map to one string, or the
crawler fetches the same page many times (session ids, tracking parameters, default
ports, ``..`` segments, case in the host). The function is total: it never raises and
returns ``""`` for anything that is not a crawlable ``http``/``https`` URL, so callers
can filter with a truth test. It is idempotent: its output maps to itself.

Example::

    >>> canonicalize_url("HTTP://Example.COM:80/a/./b/../c?b=2&a=1&utm_source=x#top")
    'http://example.com/a/c?a=1&b=2'
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import re
from urllib.parse import urljoin, urlsplit

import idna

logger = logging.getLogger(__name__)

__all__ = ["canonicalize_url", "host_of", "origin_of", "TRACKING_PARAMS"]

TRACKING_PARAMS = frozenset(
    {
        "sessionid",
        "session_id",
        "sid",
        "jsessionid",
        "phpsessid",
        "aspsessionid",
        "fbclid",
        "gclid",
        "dclid",
        "msclkid",
        "yclid",
        "mc_cid",
        "mc_eid",
        "_ga",
        "_hsenc",
        "_hsmi",
        "igshid",
    }
)
"""Query keys (lower-cased) that name a visitor or a campaign, never a resource.
Every ``utm_*`` key is dropped as well."""

_DEFAULT_PORTS = {"http": 80, "https": 443}
_HEX = frozenset("0123456789abcdefABCDEF")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_SUB_DELIMS = frozenset("!$&'()*+,;=")
_PATH_SAFE = _UNRESERVED | _SUB_DELIMS | frozenset(":@/")
# In a query component "&" and "=" separate pairs; inside a key or value they stay encoded.
_QUERY_PART_SAFE = (_UNRESERVED | _SUB_DELIMS | frozenset(":@/?")) - frozenset("&=")
_HOST_CHARS = re.compile(r"^[a-z0-9_\-.]+$")
_STRIP_CHARS = re.compile(r"[\t\n\r]")
_SESSION_IN_PATH = re.compile(r";(?:jsessionid|phpsessid|sessionid|sid)=[^/?#]*", re.IGNORECASE)
_MAX_URL_CHARS = 8192


def _normalize_escapes(text: str, safe: frozenset[str]) -> str:
    """Percent-encode what must be encoded and normalize existing escapes.

    Escapes of unreserved characters are decoded (``%7E`` → ``~``), others are
    upper-cased (``%2f`` → ``%2F``); a ``%`` that starts no escape becomes ``%25``.
    Characters outside ``safe`` are encoded as UTF-8. The output is a fixed point.
    """
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "%":
            if i + 2 < n and text[i + 1] in _HEX and text[i + 2] in _HEX:
                code = int(text[i + 1 : i + 3], 16)
                decoded = chr(code)
                out.append(decoded if decoded in _UNRESERVED else "%" + text[i + 1 : i + 3].upper())
                i += 3
                continue
            out.append("%25")
        elif ch in safe:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
        i += 1
    return "".join(out)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4, so ``/a/./b/../c`` and ``/a/c`` are one URL."""
    if "." not in path:
        return path
    output: list[str] = []
    segments = path.split("/")
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == ".":
            if last:
                output.append("")
            continue
        if segment == "..":
            if len(output) > 1:
                output.pop()
            if last:
                output.append("")
            continue
        output.append(segment)
    result = "/".join(output)
    return result if result.startswith("/") else "/" + result


def _canonical_host(raw_host: str) -> str:
    """Lower-case, IDNA-encode and validate a host; ``""`` when it cannot be a host."""
    host = raw_host.strip().rstrip(".").lower()
    if not host:
        return ""
    if host.startswith("[") or ":" in host:
        try:
            address = ipaddress.IPv6Address(host.strip("[]"))
        except ValueError:
            return ""
        return f"[{address.compressed}]"
    if host.isascii():
        return host if _HOST_CHARS.match(host) and ".." not in host else ""
    labels: list[str] = []
    for label in host.split("."):
        if label.isascii():
            labels.append(label)
            continue
        try:
            labels.append(idna.encode(label, uts46=True).decode("ascii").lower())
        except (idna.IDNAError, UnicodeError, ValueError):
            try:
                labels.append(label.encode("idna").decode("ascii").lower())
            except UnicodeError:
                return ""
    encoded = ".".join(labels)
    return encoded if _HOST_CHARS.match(encoded) and ".." not in encoded else ""


def _canonical_query(query: str) -> str:
    pairs: list[tuple[str, str]] = []
    for part in query.split("&"):
        if not part:
            continue
        raw_key, sep, value = part.partition("=")
        key = _normalize_escapes(raw_key, _QUERY_PART_SAFE)
        lowered = key.lower()
        if lowered in TRACKING_PARAMS or lowered.startswith("utm_"):
            continue
        pairs.append((key, sep + _normalize_escapes(value, _QUERY_PART_SAFE)))
    pairs.sort()
    return "&".join(key + value for key, value in pairs)


def _join(base: str, ref: str) -> str:
    """Resolve a reference against a canonical base (RFC 3986 §5.2, dot segments aside).

    ``urljoin`` costs ~10 µs; pages carry hundreds of links, mostly relative. The base
    is canonical, so the common shapes are simple string work; anything unusual goes
    to ``urljoin``. Dot segments are removed later by canonicalization.
    """
    ref = ref.split("#", 1)[0]
    if not ref:
        return base
    first = ref[0]
    if first == "/":
        if ref.startswith("//"):
            return urljoin(base, ref)  # network-path reference: rare, with odd corners
        cut = base.find("/", base.index("://") + 3)
        return (base if cut < 0 else base[:cut]) + ref
    if first == "?":
        return base.split("?", 1)[0] + ref
    head = ref[:8].lower()
    if head.startswith(("http://", "https://")):
        return ref
    colon = ref.find(":")
    if colon >= 0 and not any(c in ref[:colon] for c in "/?#"):
        return urljoin(base, ref)  # another scheme (mailto:, javascript:, ...), or odd
    path_end = base.find("?")
    stem = base if path_end < 0 else base[:path_end]
    return stem[: stem.rfind("/") + 1] + ref


def canonicalize_url(url: str, base: str | None = None) -> str:
    """The canonical spelling of ``url`` (resolved against ``base``), or ``""``.

    ``""`` means "not a crawlable http(s) URL": another scheme, no host, a bad port,
    an invalid IPv6 literal, or a host that IDNA cannot encode. Never raises.
    ``base`` should itself be canonical (the page's URL); others go through ``urljoin``.
    """
    try:
        text = (_STRIP_CHARS.sub("", url) if _has_strip_chars(url) else url).strip()
        if base:
            clean_base, canonical = _clean_base(base)
            if canonical:
                text = _join(clean_base, text).strip()
            else:
                text = urljoin(clean_base, text).strip()
    except ValueError as exc:
        logger.debug("Cannot resolve %r against %r: %s", url, base, exc)
        return ""
    return _canonicalize_absolute(text)


def _has_strip_chars(text: str) -> bool:
    return "\t" in text or "\n" in text or "\r" in text


@functools.lru_cache(maxsize=64)
def _clean_base(base: str) -> tuple[str, bool]:
    """``base`` without tabs and newlines, and whether that is canonical: one answer per page
    (every link of a page has the same base), instead of a regex and a lookup per link."""
    clean = _STRIP_CHARS.sub("", base).strip()
    return clean, _canonicalize_absolute(clean) == clean


@functools.lru_cache(maxsize=4_096)
def _canonicalize_absolute(text: str) -> str:
    """Canonicalize an absolute URL string. Cached: navigation links repeat on every page.

    4,096 entries hold a site's navigation many times over; the cache was 32,768, which
    a long crawl fills with one-off URLs: 6.3 MB (tracemalloc, 60-character URLs) of a
    worker whose peak RSS is held to Scrapy's (issue 16), for hits a small cache gets too."""
    try:
        if len(text) > _MAX_URL_CHARS:
            return ""
        parts = urlsplit(text)
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            return ""
        netloc = parts.netloc.rpartition("@")[2]
        host_part, port_text = netloc, ""
        if netloc.startswith("["):
            closing = netloc.find("]")
            if closing < 0:
                return ""
            host_part, port_text = netloc[: closing + 1], netloc[closing + 1 :]
            if port_text and not port_text.startswith(":"):
                return ""
            port_text = port_text[1:]
        elif ":" in netloc:
            host_part, _, port_text = netloc.rpartition(":")
        host = _canonical_host(host_part)
        if not host:
            return ""
        if port_text:
            if not port_text.isdigit() or not port_text.isascii() or len(port_text) > 5:
                return ""
            port = int(port_text)
            if port == 0 or port > 65535:
                return ""
            if port != _DEFAULT_PORTS[scheme]:
                host = f"{host}:{port}"
        path = parts.path.replace("\\", "/") or "/"
        if not path.startswith("/"):
            path = "/" + path
        path = _normalize_escapes(path, _PATH_SAFE)
        path = _remove_dot_segments(_SESSION_IN_PATH.sub("", path))
        query = _canonical_query(parts.query)
        return f"{scheme}://{host}{path}" + (f"?{query}" if query else "")
    except (ValueError, UnicodeError) as exc:
        logger.debug("Cannot canonicalize %r: %s", text, exc)
        return ""


def host_of(canonical_url: str) -> str:
    """``host[:port]`` of a canonical URL: the unit of politeness (one back queue each)."""
    rest = canonical_url.partition("://")[2]
    return rest.split("/", 1)[0]


def origin_of(canonical_url: str) -> str:
    """``scheme://host[:port]`` of a canonical URL: the unit robots.txt applies to."""
    scheme, _, rest = canonical_url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"
