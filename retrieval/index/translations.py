"""A document's translation group: the key its translations share, computed where it is indexed.

Two ways to know translations (DECISIONS 72). A page's ``hreflang`` alternates: pages that
declare exactly the same set of versions (themselves included) are one page in several
languages; a site-wide language switcher pointing every page at the other home pages gives
each page its own set, so it groups nothing. Else a language marker in the URL: a dotted part
of the file name (``ch01.de.html``, ``index.html.fr``), a path segment (``/de/guide/x``) or a
``lang``-style parameter (``?lang=de``). A marker counts only when it is a language code and
names the document's own declared or identified language, so ``/it/jobs`` in English or
``/v1/…`` never group; the key is the host and the URL with that marker taken out. The key
is computed from the stored document alone (no second pass over the collection), so the
build, the Ray build and in-place updates agree; ``""`` means no group.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit

__all__ = ["ISO_639_1", "language_marker", "translation_group"]

ISO_639_1 = frozenset(
    "aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy "
    "da de dv dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu "
    "hy hz ia id ie ig ii ik io is it iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb "
    "lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne ng nl nn no nr nv ny oc oj om "
    "or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq sr ss st su sv sw "
    "ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu".split()
)
"""The two-letter language codes: a URL part is a language marker only if it starts with one."""
LANG_PARAMETERS = frozenset({"lang", "language", "hl", "locale", "lng"})
"""Query parameters whose value names the page's language."""
_MARKER = "{lang}"


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def language_marker(part: str, lang: str) -> bool:
    """Whether ``part`` of a URL names language ``lang``: ``de``, ``zh-cn``, ``pt_BR``, ``en-us``
    for ``de``, ``zh``, ``pt``, ``en``; a region or script of at most four letters may follow."""
    if len(part) < 2 or part[:2].lower() != lang or lang not in ISO_639_1:
        return False
    rest = part[2:]
    return not rest or (rest[0] in "-_" and 2 <= len(rest) - 1 <= 4 and rest[1:].isalnum())


def _without_marker(url: str, lang: str) -> str | None:
    """The URL's host, path and query with its language marker replaced by one placeholder;
    None when it has no marker naming ``lang``. The file name is tried first (a Debian
    Reference chapter), then directory segments, then the query's language parameter."""
    parts = urlsplit(url)
    segments = parts.path.split("/")
    name = segments[-1].split(".")
    for i in range(1, len(name)):
        if language_marker(name[i], lang):
            segments[-1] = ".".join([*name[:i], _MARKER, *name[i + 1 :]])
            return f"{parts.netloc}{'/'.join(segments)}?{parts.query}"
    for i, segment in enumerate(segments):
        if language_marker(segment, lang):
            segments[i] = _MARKER
            return f"{parts.netloc}{'/'.join(segments)}?{parts.query}"
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    for i, (key, value) in enumerate(pairs):
        if key.lower() in LANG_PARAMETERS and language_marker(value, lang):
            pairs[i] = (key, _MARKER)
            return f"{parts.netloc}{parts.path}?{urlencode(pairs)}"
    return None


def translation_group(url: str, lang: str, alternates: Sequence[str] = ()) -> str:
    """The key ``url``'s translations share (module doc): ``h`` and a digest of the declared set,
    else ``p`` and a digest of the URL without its language marker, else ``""``."""
    if alternates:
        versions = sorted({url, *alternates})
        if len(versions) > 1:
            return "h" + _digest("\n".join(versions))
    lang = lang.lower()
    if not lang:
        return ""
    unmarked = _without_marker(url, lang)
    return "p" + _digest(unmarked) if unmarked is not None else ""
