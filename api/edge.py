"""The server's edge: how ``trawl serve`` runs uvicorn, and a 414 for an over-long URL.

httptools cannot parse a request target over 65,535 bytes, and uvicorn answers that with
a plain-text 400 before any ASGI middleware sees the request, so ``api.protection``'s 414
never got the chance. :class:`EdgeProtocol` is uvicorn's httptools protocol that counts
the URL as it arrives and answers 414 in the API's JSON shape instead, without buffering
the rest. A subclass, not a raised limit: the limit is the parser's and cannot be raised.
:func:`server_options` is the one place the uvicorn settings live (tests use them too).
"""

from __future__ import annotations

import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_URL_BYTES = (1 << 16) - 1
"""The longest request target httptools parses (``httptools.parser.url_parser``)."""
LINGER_S = 5.0
"""How long the rest of a refused request is read and dropped so the client sees the 414."""


class UrlTooLong(Exception):
    """Raised inside the parser's ``on_url`` callback to stop parsing the request."""


class EdgeProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, answering 414 (JSON) for a URL over :data:`MAX_URL_BYTES`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refused = False

    def on_url(self, url: bytes) -> None:
        if len(self.url) + len(url) > MAX_URL_BYTES:
            self._refused = True
            raise UrlTooLong
        super().on_url(url)

    def data_received(self, data: bytes) -> None:
        if self._refused:  # the rest of a refused request: read and dropped
            return
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a parser error: ours when the error was the URL's length."""
        if not self._refused:
            super().send_400_response(msg)
            return
        body = json.dumps(
            {"error": "uri_too_long", "detail": f"The URL exceeds {MAX_URL_BYTES} bytes."}
        ).encode()
        head = [b"HTTP/1.1 414 URI Too Long\r\n"]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode() + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        # A client still sending its URL would get a reset, and lose the answer, if the
        # socket closed with unread data: half-close, drop what comes, close when it is done.
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()


def server_options() -> dict[str, Any]:
    """uvicorn settings of ``trawl serve`` (and of the tests' server, so they test the same)."""
    return {
        "http": EdgeProtocol,
        "log_level": "warning",
        "proxy_headers": False,  # api.protection reads X-Forwarded-For from trusted proxies only
    }
