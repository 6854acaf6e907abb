"""Query analyzer: turns what a user typed into a :class:`core.types.Query`.

Supported operators: free terms, ``"quoted phrases"``, ``-excluded`` terms and
``-"excluded phrases"``, ``site:host``, ``lang:xx`` and ``filetype:ext``.

It never lets user input reach Tantivy's query parser: the lexical shard builds its
query from the parsed parts. So syntax characters (``: ( ) ^ ~ * [ ] { } \\ + !``),
``AND``/``OR``/``NOT``, regex-looking ``/slashes/``, control characters and emoji are
just text. An unbalanced quote opens a phrase that runs to the end. A query longer
than ``max_chars`` is cut, not refused. What *is* refused, with a
:class:`core.errors.QueryError` (HTTP 400), is a query with nothing to search for and
an operator with an unusable value (``lang:english``), because silently ignoring
those would return results the user did not ask for.
"""

from __future__ import annotations

import re
import unicodedata

from core.errors import QueryError
from core.types import Query

_OPERATOR = re.compile(r"^(site|lang|filetype):(.*)$", re.IGNORECASE)
_LANG = re.compile(r"^[a-z]{2,3}(-[a-z0-9]{2,8})?$")
_FILETYPE = re.compile(r"^[a-z0-9]{1,10}$")
_HOST = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?$")
_SYNTAX = re.compile(r"[:()\^~*\[\]{}\\+!\"<>=/|&;,?#@$%`]")
_TOKEN = re.compile(r'-?"[^"]*"?|\S+')


def clean_text(raw: str, max_chars: int) -> str:
    """Normalize (NFKC), replace control and format characters with spaces, cut to length."""
    text = unicodedata.normalize("NFKC", raw[: max_chars * 2])
    text = "".join(
        " " if unicodedata.category(ch) in {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"} else ch for ch in text
    )
    return text[:max_chars]


def _strip_syntax(token: str) -> str:
    """Syntax characters become spaces, so ``a:b`` is two words and ``(x)`` is ``x``."""
    return " ".join(_SYNTAX.sub(" ", token).split())


def normalize_site(value: str) -> str:
    """``https://www.Example.org/x`` → ``example.org``; QueryError when it is not a host.

    An explicit non-default port is kept (``site:127.0.0.1:8099``): two sites on one
    address are two sites.
    """
    host = value.strip().lower()
    host = re.sub(r"^[a-z][a-z0-9+.-]*://", "", host)
    host = host.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    host = host.rsplit("@", 1)[-1]
    if host.startswith("["):
        raise QueryError(f"site:{value} is not supported: give a host name such as site:python.org.")
    host, _, port = host.partition(":")
    host = host.strip(".")
    if port and not port.isdigit():
        raise QueryError(f"site:{value} has a port that is not a number.")
    if host.startswith("www."):
        host = host[4:]
    try:
        host = host.encode("idna").decode("ascii") if not host.isascii() else host
    except UnicodeError as exc:
        raise QueryError(f"site:{value} is not a valid host name.") from exc
    if not host or not _HOST.match(host):
        raise QueryError(f"site:{value} is not a valid host name; write it like site:docs.python.org.")
    return f"{host}:{int(port)}" if port and int(port) not in (80, 443) else host


def normalize_lang(value: str) -> str:
    """``en-GB`` → ``en``; QueryError when it is not a language code."""
    lang = value.strip().lower()
    if not _LANG.match(lang):
        raise QueryError(f"lang:{value} is not a language code; use an ISO 639-1 code such as lang:en.")
    return lang.split("-", 1)[0]


def normalize_filetype(value: str) -> str:
    """``.PDF`` → ``pdf``; QueryError when it is not a file extension."""
    filetype = value.strip().lower().lstrip(".")
    if not _FILETYPE.match(filetype):
        raise QueryError(f"filetype:{value} is not a file extension; write it like filetype:pdf.")
    return filetype


def parse_query(raw: str, *, max_chars: int = 2048, max_terms: int = 64) -> Query:
    """Parse a user query. Raises :class:`QueryError` only for an unusable request.

    >>> q = parse_query('"slip flow" heat -shock site:example.org')
    >>> (q.terms, q.phrases, q.excluded, q.site)
    (('heat',), ('slip flow',), ('shock',), 'example.org')
    """
    if not isinstance(raw, str):
        raise QueryError("The query must be text.")
    text = clean_text(raw, max_chars)
    cut: list[str] = []
    if len(raw) > max_chars and len(clean_text(raw, max_chars + 1)) > max_chars:
        cut.append(f"only its first {max_chars:,} characters were read")
    terms: list[str] = []
    phrases: list[str] = []
    excluded: list[str] = []
    site = lang = filetype = None
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        negated = token.startswith("-") and len(token) > 1
        body = token[1:] if negated else token
        if body.startswith('"'):
            phrase = _strip_syntax(body.strip('"'))
            if not phrase:
                continue
            if negated:
                excluded.append(phrase)
            elif len(phrase.split()) == 1:
                terms.append(phrase)
            else:
                phrases.append(phrase)
            continue
        operator = _OPERATOR.match(body)
        if operator and not negated and operator.group(2):
            name, value = operator.group(1).lower(), operator.group(2)
            if name == "site":
                site = normalize_site(value)
            elif name == "lang":
                lang = value.lower()
                if not _LANG.match(lang):
                    raise QueryError(
                        f"lang:{value} is not a language code; use an ISO 639-1 code such as lang:en."
                    )
                lang = lang.split("-", 1)[0]
            else:
                filetype = value.lower().lstrip(".")
                if not _FILETYPE.match(filetype):
                    raise QueryError(f"filetype:{value} is not a file extension; write it like filetype:pdf.")
            continue
        words = _strip_syntax(body).split()
        if negated and words:
            excluded.extend(words)
        else:
            terms.extend(words)
    if len(terms) + len(phrases) > max_terms or len(excluded) > max_terms:
        dropped = [*terms[max(0, max_terms - len(phrases)) :], *phrases[max_terms:], *excluded[max_terms:]]
        cut.append(f"only its first {max_terms} words and phrases were searched ({len(dropped)} left out)")
        terms = terms[: max(0, max_terms - len(phrases))]
        phrases = phrases[:max_terms]
    query = Query(
        raw=text,
        terms=tuple(terms),
        phrases=tuple(phrases),
        excluded=tuple(excluded[:max_terms]),
        site=site,
        lang=lang,
        filetype=filetype,
        truncated=("The query is too long: " + "; ".join(cut) + ".") if cut else "",
    )
    if query.is_empty and not (site or lang or filetype):
        if excluded:
            raise QueryError(
                "A query needs at least one word to look for: -word only excludes results; "
                "add a word to search for."
            )
        raise QueryError("The query is empty: type one or more words to search for.")
    return query
