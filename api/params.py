"""Strict parameters: integers in ASCII digits only, bounded, with one wording for every
refusal; and no query parameter a JSON route does not declare.

``int()`` and Pydantic's lax mode take more than a person means by a number: ``"²"``
passes ``str.isdigit`` (and then fails ``int``), Pydantic reads ``" 5"``, ``"+5"``,
``"1_000"`` and ``"1.0"``. Every integer that arrives in a URL goes through here, so a
value is either a plain decimal number inside its range or a 400 that says which
parameter, what was sent and what to send instead.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from core.errors import BadParameter

_DECIMAL = re.compile(r"-?[0-9]{1,20}")
"""Twenty digits hold every 64-bit value; longer is refused before ``int`` reads it."""

DOC_ID_MAX = (1 << 63) - 1


def _strict(value: object) -> object:
    if isinstance(value, str):
        if not _DECIMAL.fullmatch(value):
            raise PydanticCustomError("whole_number", "must be a whole number written in ASCII digits 0-9")
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PydanticCustomError("whole_number", "must be a whole number written in ASCII digits 0-9")
    return value


StrictInt = Annotated[int, BeforeValidator(_strict)]
"""An ``int`` query or body field that takes ASCII digits only (the range is the caller's)."""


def parse_int(text: str, name: str, low: int, high: int) -> int:
    """``text`` as an integer in ``[low, high]``, else :class:`BadParameter` naming ``name``."""
    if not _DECIMAL.fullmatch(text):
        raise BadParameter(f"{name}={text!r} is not a whole number; use {low} to {high}.")
    value = int(text)
    if not low <= value <= high:
        raise BadParameter(f"{name}={value} is out of range; use {low} to {high}.")
    return value


def in_range(value: int, name: str, low: int, high: int) -> int:
    """``value`` (a :data:`StrictInt`) when in ``[low, high]``, else :func:`parse_int`'s refusal."""
    if not low <= value <= high:
        raise BadParameter(f"{name}={value} is out of range; use {low} to {high}.")
    return value


def parse_doc_id(text: str, name: str = "doc_id") -> int:
    """A document id as the API prints it (a decimal string, 1 to 2^63 - 1)."""
    if not _DECIMAL.fullmatch(text) or not 0 < int(text) <= DOC_ID_MAX:
        raise BadParameter(f"{name}={text!r} is not a document id; use the doc_id of a search result.")
    return int(text)


def _declared(dependant: Dependant) -> frozenset[str]:
    """Query parameter names (aliases) a route reads, its dependencies' included."""
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _declared(sub)
    return frozenset(names)


def reject_undeclared_params(request: Request) -> None:
    """A misspelt parameter (``pgae=2``, ``limt=5``) is a 400 naming it, not silently ignored.

    Read from the matched route's own signature, so the list cannot drift from what the
    route takes. For the JSON API only: web pages keep working when a link adds
    ``utm_source`` or the like."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if not isinstance(dependant, Dependant):
        return
    allowed = _declared(dependant)  # cheap to walk; a cache keyed by route would outlive apps
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        expected = f"expected one of: {', '.join(sorted(allowed))}" if allowed else "it takes none"
        raise BadParameter(f"Unknown parameter {', '.join(repr(u) for u in unknown)}; {expected}.")


StrictParams = Depends(reject_undeclared_params)
"""Router dependency of every JSON API router (``APIRouter(dependencies=[StrictParams])``)."""
