"""``sitp chat DIR --web`` (chapter 8): one chat page on 127.0.0.1 whose replies stream.

A small server on the standard library's :class:`http.server.ThreadingHTTPServer`,
bound to 127.0.0.1 only (the page is for the machine it runs on). Two routes:

* ``GET /`` is the page, ``chat.html`` beside this file: plain HTML, CSS and
  JavaScript that load nothing from anywhere else. It keeps the conversation and sends
  all of it with each message, so the server holds no state between requests.
* ``POST /chat`` takes ``{"messages": [{"role": "user", "content": "..."}, ...]}`` and
  answers with Server-Sent Events (``text/event-stream``): one ``data:`` event per text
  piece as the model draws it, ``{"text": "..."}``, then an ``event: done`` whose data is
  ``{"reply": "..."}``, the whole reply. The page reads them with ``fetch`` (an
  ``EventSource`` can only ``GET``).

A request that cannot be answered (not JSON, a malformed conversation, a character the
tokenizer lacks, a message longer than the model's block) gets a 400 with
``{"error": "..."}``, the message of the ``ValueError`` that the generation raised
before its first piece (a wrong path gets a 404, a body without a length or over 1 MiB
a 411 or 413, a ``Host`` other than this server a 403). One model draws one reply at a
time: the generation holds a lock, and a second request waits for it.

Example:
    >>> server = make_server(lambda messages: iter(["Hel", "lo"]), port=0)
    >>> server.server_address[0]
    '127.0.0.1'
    >>> server.server_close()
"""

from __future__ import annotations

import http.server
import json
import sys
import threading
from importlib import resources

#: The address the server binds: this machine only.
HOST = "127.0.0.1"
#: The largest request body read, in bytes.
MAX_BODY = 1 << 20
#: Seconds a connection may stay silent while the server reads its request.
READ_TIMEOUT = 30


class ChatServer(http.server.ThreadingHTTPServer):
    """The HTTP server: ``pieces(messages)`` yields a reply's text pieces.

    ``pieces`` raises ``ValueError`` (on the first ``next``) for a conversation it cannot
    answer; :func:`sitp.posttrain.cli.reply_pieces` does, and ``sitp chat --web`` passes
    it with the checkpoint's model.
    """

    daemon_threads = True  # Ctrl-C does not wait for a reply being drawn

    def __init__(self, pieces, port: int):
        self.pieces = pieces
        self.lock = threading.Lock()  # one model: one generation at a time
        self.page = resources.files(__package__).joinpath("chat.html").read_bytes()
        super().__init__((HOST, port), _Handler)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}/"


class _BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class _Handler(http.server.BaseHTTPRequestHandler):
    server: ChatServer
    timeout = READ_TIMEOUT  # a client that stops sending mid-request is dropped
    protocol_version = "HTTP/1.1"  # the stream is chunked: its end is marked, not a close

    def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
        pass  # quiet, as the REPL is

    def _send(self, status: int, content_type: str, body: bytes):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self._common_headers()
        if content_type.startswith("text/html"):  # the page may load nothing from elsewhere
            self.send_header(
                "Content-Security-Policy",
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'",
            )
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str):
        body = json.dumps({"error": message}).encode()
        self._send(status, "application/json", body)

    def _ours(self) -> bool:
        """Whether the request names this server as its host; a page of another site
        that a DNS name rebound to 127.0.0.1 does not, and gets a 403."""
        port = self.server.server_address[1]
        if self.headers.get("Host") in (f"{HOST}:{port}", f"localhost:{port}"):
            return True
        self._error(403, f"this server answers as {HOST}:{port} only")
        return False

    def do_GET(self):
        if not self._ours():
            return
        if self.path.split("?")[0] in ("/", "/index.html"):
            self._send(200, "text/html; charset=utf-8", self.server.page)
        else:
            self._error(404, f"no page at {self.path}; the chat is at /")

    def do_POST(self):
        if not self._ours():
            return
        try:
            if self.path != "/chat":
                raise _BadRequest(404, f"nothing to POST at {self.path}; messages go to /chat")
            messages = self._messages()
            with self.server.lock:
                self._stream(messages)
        except _BadRequest as error:
            self._error(error.status, str(error))
        except (ConnectionError, TimeoutError):  # the client left, or stopped sending
            self.close_connection = True
        except Exception as error:  # a fault of ours before the stream began: one line each
            print(f"sitp chat: error while answering: {error!r}", file=sys.stderr)
            self._error(500, f"the server failed: {error}")

    def _messages(self):
        """The request's conversation, or a _BadRequest saying what is wrong with it."""
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise _BadRequest(411, "the request needs a Content-Length") from None
        if not 0 <= length <= MAX_BODY:
            raise _BadRequest(413, f"a request body of {length} bytes; at most {MAX_BODY}")
        data = self.rfile.read(length)  # read before any answer, which closes the socket
        kind = self.headers.get("Content-Type", "").split(";")[0].strip()
        if kind != "application/json":
            raise _BadRequest(400, f"send JSON (Content-Type: application/json), not {kind!r}")
        try:
            body = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise _BadRequest(400, f"the body is not JSON: {error}") from None
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise _BadRequest(400, 'send {"messages": [{"role": "user", "content": "..."}]}')
        return body["messages"]

    def _stream(self, messages):
        """The reply as Server-Sent Events, or a 400 if the generation refuses before
        its first piece."""
        pieces = self.server.pieces(messages)
        try:
            first = next(pieces, None)
        except ValueError as error:
            raise _BadRequest(400, " ".join(str(error).split())) from None
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self._common_headers()
        self.end_headers()
        reply = []
        try:
            if first is not None:
                for piece in _chain(first, pieces):
                    reply.append(piece)
                    self._event("message", {"text": piece})
            self._event("done", {"reply": "".join(reply)})
            self._chunk(b"")  # the last chunk: the stream is complete
        except (ConnectionError, TimeoutError):
            raise
        except Exception as error:  # told to the page and the terminal, never a traceback
            print(f"sitp chat: error while drawing a reply: {error!r}", file=sys.stderr)
            self._event("error", {"error": f"the reply failed: {error}"})
            self._chunk(b"")

    def _common_headers(self):
        # no-cache, not no-store: Chromium reports a no-store fetch that it has read as a
        # stream to its end as failed (net::ERR_ABORTED; Playwright issue 42742).
        self.send_header("Cache-Control", "no-cache")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Connection", "close")  # one request per connection

    def _event(self, name: str, data: dict):
        head = "" if name == "message" else f"event: {name}\n"
        self._chunk(f"{head}data: {json.dumps(data)}\n\n".encode())

    def _chunk(self, data: bytes):
        """One chunk of HTTP/1.1's chunked encoding, sent at once (an empty one ends it)."""
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def _chain(first, rest):
    yield first
    yield from rest


def make_server(pieces, port: int = 8008) -> ChatServer:
    """The chat server bound to 127.0.0.1:``port`` (0: a free port); not yet serving.

    Raises:
        OSError: the port is taken or may not be bound.
    """
    return ChatServer(pieces, port)


def serve(server: ChatServer) -> int:
    """Prints ``serving on URL`` and serves until Ctrl-C; returns 130, as the REPL does."""
    print(f"serving on {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        return 130
    finally:
        server.server_close()
    return 0


__all__ = ["ChatServer", "make_server", "serve"]
