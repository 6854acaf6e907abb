"""The one table of the API's error codes: each code, its HTTP status and what it means.

Every JSON error answer is ``{"error": code, "detail": message}`` with a code from here;
``api.errors`` maps exception classes onto these codes, the protection middleware and the
health routes answer theirs, and docs/api-errors.md prints the same table (a test keeps
the three in step). One code per kind of mistake: ``bad_query`` is the text of ``q``,
``bad_parameter`` any other parameter (unknown, missing, or a value the route does not take).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["ERROR_CODES", "ErrorCode", "markdown_table"]


class ErrorCode(NamedTuple):
    status: int
    meaning: str


ERROR_CODES: dict[str, ErrorCode] = {
    "bad_query": ErrorCode(400, "The text of q cannot be searched (empty, only exclusions, a bad operator)."),
    "bad_parameter": ErrorCode(
        400, "A parameter or body field is unknown, missing, or has a value the route does not take."
    ),
    "bad_request": ErrorCode(400, "The request asks for something this service's settings cannot do."),
    "bad_document": ErrorCode(400, "A pushed document is not one: the detail names the field."),
    "bad_click": ErrorCode(400, "A click that does not match its search (document or position)."),
    "unauthorized": ErrorCode(401, "The X-API-Key header is missing or wrong."),
    "forbidden": ErrorCode(403, "Admin endpoints are off: no admin key is configured."),
    "key_not_valid": ErrorCode(403, "An IndexNow key that the site does not publish."),
    "not_found": ErrorCode(404, "No such route, document or rule."),
    "not_enabled": ErrorCode(404, "The endpoint needs a directory this service was not given."),
    "unknown_generation": ErrorCode(404, "The index root holds no generation of that id."),
    "unknown_impression": ErrorCode(404, "A click on a search this service never showed (or forgot)."),
    "method_not_allowed": ErrorCode(405, "The route exists but not for this method (see Allow)."),
    "nothing_to_roll_back": ErrorCode(409, "There is no earlier published generation to return to."),
    "index_damaged": ErrorCode(409, "A file of that generation fails its checksum; publishing is refused."),
    "directory_busy": ErrorCode(409, "Another process is writing that directory."),
    "too_large": ErrorCode(413, "The request body is longer than api.max_request_bytes."),
    "uri_too_long": ErrorCode(414, "The URL is longer than the service reads."),
    "urls_not_of_host": ErrorCode(422, "Pushed URLs are not all of the host the key belongs to."),
    "host_not_crawled": ErrorCode(422, "Pushed URLs of a host this crawl does not cover."),
    "rate_limited": ErrorCode(429, "Too many requests from this address; wait for Retry-After."),
    "too_many_requests": ErrorCode(429, "Too many pushes for this host; wait for Retry-After."),
    "internal_error": ErrorCode(500, "A bug: please report it with the request."),
    "index_unavailable": ErrorCode(503, "The index cannot answer (missing, opening, or every shard down)."),
    "storage_unavailable": ErrorCode(503, "The disk is full or the crawl database cannot be reached."),
    "experiments_unavailable": ErrorCode(503, "Experiment logging is not enabled on this service."),
    "not_ready": ErrorCode(503, "The service is still starting (readiness only)."),
}


def markdown_table() -> str:
    """The table as docs/api-errors.md prints it."""
    rows = [f"| `{code}` | {e.status} | {e.meaning} |" for code, e in ERROR_CODES.items()]
    return "\n".join(["| code | HTTP | meaning |", "|---|---|---|", *rows])
