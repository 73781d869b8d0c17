"""``sitp chat DIR --web`` (sitp.posttrain.web): the reply streamed over HTTP is the REPL's
greedy reply, piece for piece; bad requests get a 400 and a one-line message; the page,
in headless Chromium, shows the reply as it streams (tests marked ``browser``, which
launch Chromium as tests/test_site_browser.py does and use its helpers)."""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

import pytest

from sitp.data.tokens import CharTokenizer
from sitp.posttrain import cli, web
from test_posttrain_cli import make_init
from test_site_browser import Visit, browser  # noqa: F401 - browser: the fixture

MAX_NEW = 12  # --max-new-tokens of every reply here
# Messages to the untrained model: the tests use the first whose greedy reply has more
# than one character (most replies of a random model are empty: it draws an end token).
CANDIDATES = ("hi there", "count to 3", "hello", "What is 2+2?")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Two untrained GPTs (block 48): one on bytes, one on 27 characters."""
    root = tmp_path_factory.mktemp("chat-web")
    make_init(root / "bytes")
    make_init(root / "char", base=CharTokenizer("abcdefghijklmnopqrstuvwxyz ?"))
    return root


def greedy(directory, conversation):
    """What the REPL writes for ``conversation``: ``stream_reply`` at temperature 0."""
    model, tok, _, _ = cli.load_model(directory)
    return cli.stream_reply(model, tok, conversation, MAX_NEW, out=io.StringIO())


def a_message(directory):
    """``(message, reply)``: the first candidate whose greedy reply has 2+ characters."""
    for message in CANDIDATES:
        reply = greedy(directory, [{"role": "user", "content": message}])
        if len(reply) >= 2:
            return message, reply
    pytest.fail(f"no message of {CANDIDATES} gets a reply of 2+ characters: add one")


@contextlib.contextmanager
def serving(pieces):
    """``web.make_server(pieces, port=0)`` serving from a thread."""
    server = web.make_server(pieces, port=0)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def model_pieces(directory):
    model, tok, _, _ = cli.load_model(directory)
    return lambda messages: cli.reply_pieces(model, tok, messages, MAX_NEW)


def post(server, body, content_type="application/json"):
    """``(status, content type, response)`` of POST /chat, the response read to its end."""
    conn = http.client.HTTPConnection(*server.server_address, timeout=30)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", "/chat", data, {"Content-Type": content_type})
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type"), response.read().decode()
    finally:
        conn.close()


def events(stream: str):
    """Server-Sent Events as ``(name, data)`` pairs."""
    out = []
    for block in stream.split("\n\n"):
        if not block:
            continue
        name, data = "message", None
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data = json.loads(value)
        out.append((name, data))
    return out


def user(content):
    return {"messages": [{"role": "user", "content": content}]}


def test_streamed_pieces_are_the_repls_reply(checkpoints):
    directory = checkpoints / "bytes"
    message, reply = a_message(directory)
    conversation = [{"role": "user", "content": message}]
    model, tok, _, _ = cli.load_model(directory)
    expected = list(cli.reply_pieces(model, tok, conversation, MAX_NEW))
    with serving(model_pieces(directory)) as server:
        status, kind, stream = post(server, {"messages": conversation})
        # A second turn: the page sends the whole conversation back.
        longer = conversation + [{"role": "assistant", "content": reply}, conversation[0]]
        status2, _, stream2 = post(server, {"messages": longer})
    assert status == 200 and kind.startswith("text/event-stream")
    got = events(stream)
    assert got[-1] == ("done", {"reply": reply})
    assert [data["text"] for name, data in got[:-1]] == expected
    assert "".join(expected) == reply
    assert status2 == 200 and events(stream2)[-1] == ("done", {"reply": greedy(directory, longer)})


def gated_reply(event, first, second, timeout, failure):
    """A reply of two pieces whose second is drawn only once ``event`` is set."""

    def pieces(messages):
        yield first
        if not event.wait(timeout):
            raise RuntimeError(failure)
        yield second

    return pieces


def test_each_piece_is_sent_before_the_next_is_drawn():
    """The server flushes a piece at once: the next is drawn only after the client read it."""
    read_first = threading.Event()
    pieces = gated_reply(read_first, "Hel", "lo", 10, "the client never saw the first piece")
    with serving(pieces) as server:
        conn = http.client.HTTPConnection(*server.server_address, timeout=10)
        conn.request("POST", "/chat", json.dumps(user("hi")), {"Content-Type": "application/json"})
        response = conn.getresponse()
        first = response.readline() + response.readline()
        read_first.set()
        rest = response.read().decode()
        conn.close()
    assert events(first.decode()) == [("message", {"text": "Hel"})]
    assert events(rest) == [("message", {"text": "lo"}), ("done", {"reply": "Hello"})]


def test_one_reply_at_a_time():
    active, most = [0], [0]

    def pieces(messages):
        active[0] += 1
        most[0] = max(most[0], active[0])
        time.sleep(0.05)
        yield "ok"
        active[0] -= 1

    with serving(pieces) as server:
        results = []
        threads = [threading.Thread(target=lambda: results.append(post(server, user("a"))))
                   for _ in range(4)]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert [r[0] for r in results] == [200] * 4 and most[0] == 1


@pytest.mark.parametrize(
    "body,content_type,status,message",
    [
        (b"{not json", "application/json", 400, "the body is not JSON"),
        (b"[1, 2]", "application/json", 400, 'send {"messages"'),
        (user("hello"), "text/plain", 400, "send JSON (Content-Type: application/json)"),
        ({"messages": [{"role": "system", "content": "a"}]}, "application/json", 400,
         "unknown role 'system'"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
         "application/json", 400, "the turns alternate from the user"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
         "application/json", 400, "a prompt must end with the user's message"),
        ({"messages": [{"role": "user", "content": 3}]}, "application/json", 400,
         "content must be a str"),
        (user("a" * 60), "application/json", 400,
         "the message is 64 tokens, more than block_size 48"),
        (user("Hello"), "application/json", 400, "character 'H' is not in this CharTokenizer"),
    ],
    ids=["not-json", "not-messages", "not-json-type", "role", "alternation", "last-turn",
         "content", "too-long", "character"],
)  # fmt: skip
def test_bad_requests_get_a_400_with_a_message(checkpoints, body, content_type, status, message):
    with serving(model_pieces(checkpoints / "char")) as server:
        got_status, kind, text = post(server, body, content_type)
        after = post(server, user("hi there"))  # the server still answers
    assert got_status == status and kind == "application/json", text
    error = json.loads(text)["error"]
    assert message in error and "\n" not in error and "Traceback" not in error, error
    assert after[0] == 200 and events(after[2])[-1][0] == "done"


def raw_post(server, length, body=b""):
    """The server's first bytes in answer to a POST /chat that promises ``length`` bytes
    of body and sends ``body`` (b"" if it closed the connection without a word)."""
    host, port = server.server_address
    head = (f"POST /chat HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json"
            f"\r\nContent-Length: {length}\r\n\r\n")  # fmt: skip
    with socket.create_connection((host, port), timeout=10) as raw:
        raw.sendall(head.encode() + body)
        return raw.recv(1000)


def test_other_paths_and_a_client_that_stops_sending(monkeypatch):
    monkeypatch.setattr(web._Handler, "timeout", 0.5)
    with serving(lambda messages: iter(["ok"])) as server:
        host, port = server.server_address
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/nowhere")
        missing = conn.getresponse()
        assert missing.status == 404 and "the chat is at /" in json.loads(missing.read())["error"]
        conn.close()
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/")
        page = conn.getresponse()
        html = page.read().decode()
        assert page.status == 200 and page.getheader("Content-Type").startswith("text/html")
        assert "default-src 'none'" in page.getheader("Content-Security-Policy")
        assert '<form id="form">' in html and not any(s in html for s in ("http:", "https:"))
        conn.close()
        # A page of another site whose name was rebound to 127.0.0.1, and a body too big.
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("POST", "/chat", json.dumps(user("a")),
                     {"Content-Type": "application/json", "Host": f"example.org:{port}"})  # fmt: skip
        other = conn.getresponse()
        assert other.status == 403 and "answers as 127.0.0.1" in json.loads(other.read())["error"]
        conn.close()
        assert raw_post(server, 2 * web.MAX_BODY).startswith(b"HTTP/1.1 413 ")
        # Promises 100 bytes, sends 2, then waits: the server hangs up on it.
        start = time.monotonic()
        assert raw_post(server, 100, b"{}") == b"" and time.monotonic() - start < 5
        assert post(server, user("a"))[0] == 200


# --------------------------------------------------------- the command, and the page
@contextlib.contextmanager
def chat_command(directory, *extra):
    """``python -m sitp chat DIR --web --port 0 ...`` running; yields ``(url, process)``."""
    process = subprocess.Popen(
        [sys.executable, "-m", "sitp", "chat", str(directory), "--web", "--port", "0",
         "--max-new-tokens", str(MAX_NEW), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # Ctrl-C reaches it even when this process was started with SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        ready, _, _ = select.select([process.stdout], [], [], 120)
        line = process.stdout.readline() if ready else ""
        if not line.startswith("serving on http://127.0.0.1:"):
            process.kill()
            pytest.fail(f"no URL line: {line!r}; stderr: {process.communicate()[1]}")
        yield line.split()[-1], process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_the_command_serves_and_stops_on_ctrl_c(checkpoints):
    directory = checkpoints / "bytes"
    message, reply = a_message(directory)
    with chat_command(directory) as (url, process):
        parts = urlsplit(url)
        assert parts.hostname == "127.0.0.1" and parts.path == "/"
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        conn.request(
            "POST", "/chat", json.dumps(user(message)), {"Content-Type": "application/json"}
        )
        stream = conn.getresponse().read().decode()
        conn.close()
        # The port is taken now: a second server says so in one line.
        taken = subprocess.run([sys.executable, "-m", "sitp", "chat", str(directory), "--web",
                                "--port", str(parts.port)], capture_output=True, text=True,
                               timeout=120)  # fmt: skip
        process.send_signal(signal.SIGINT)
        code = process.wait(30)
        err = process.stderr.read()
    assert events(stream)[-1] == ("done", {"reply": reply})
    assert code in (0, 130) and "Traceback" not in err, err
    assert taken.returncode == 2 and f"cannot serve on 127.0.0.1:{parts.port}" in taken.stderr
    assert len(taken.stderr.strip().splitlines()) == 1, taken.stderr


def test_port_out_of_range_is_a_one_line_error(checkpoints, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main_chat([str(checkpoints / "bytes"), "--web", "--port", "70000"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--port: must be at most 65535" in err, err


WATCH = """() => {
  window.seen = [];
  new MutationObserver(() => {
    const a = document.querySelector('.assistant');
    if (a) window.seen.push(a.textContent);
  }).observe(document.getElementById('log'),
             {subtree: true, childList: true, characterData: true});
}"""


@pytest.mark.browser
def test_the_page_shows_each_piece_as_it_comes(browser):  # noqa: F811 - the fixture
    """A reply whose second piece waits until the page shows the first."""
    shown_first = threading.Event()
    pieces = gated_reply(shown_first, "Hel", "lo!", 15, "the page never showed the first piece")
    with serving(pieces) as server:
        visit = Visit(browser, server.url)
        try:
            page = visit.open("")
            page.fill("#box", "hi")
            page.click("#send")
            page.wait_for_function(
                "() => document.querySelector('.assistant.streaming')?.textContent === 'Hel'"
            )
            assert page.locator("#send").is_disabled()
            shown_first.set()
            page.wait_for_selector(".assistant[data-done='1']")
            assert page.locator(".assistant").text_content() == "Hello!"
            assert page.locator(".user").text_content() == "hi"
            assert page.input_value("#box") == "" and page.locator("#send").is_enabled()
            assert not visit.problems, visit.problems
        finally:
            shown_first.set()
            visit.close()


@pytest.mark.browser
def test_sitp_chat_web_in_chromium(checkpoints, browser):  # noqa: F811 - the fixture
    """Send a message, see the greedy reply stream in; then a message that is too long."""
    directory = checkpoints / "bytes"
    message, reply = a_message(directory)
    with chat_command(directory) as (url, _):
        visit = Visit(browser, url)
        try:
            page = visit.open("")
            page.evaluate(WATCH)
            page.fill("#box", message)
            page.click("#send")
            page.wait_for_selector(".assistant[data-done='1']", timeout=60_000)
            assert page.locator(".user").text_content() == message
            assert page.locator(".assistant").text_content() == reply
            seen = page.evaluate("window.seen")
            assert seen and all(reply.startswith(s) for s in seen), seen
            assert not visit.problems, visit.problems
            assert page.locator("#error").text_content() == ""
            # Too long for the block: the page shows the server's message, keeps the text.
            page.fill("#box", "x" * 60)
            page.click("#send")
            page.wait_for_function("() => document.getElementById('error').textContent")
            assert "more than block_size 48" in page.locator("#error").text_content()
            assert page.locator(".user").count() == 1 and page.input_value("#box") == "x" * 60
            # The 400 itself is what Chromium reports (a response and a console line).
            assert visit.problems and all("400" in p for p in visit.problems), visit.problems
        finally:
            visit.close()
