"""Tests of sitp.data: corpora, the makemore downloader, the vocabulary, datasets.

No test touches the internet: the downloader is tested against a local
http.server on 127.0.0.1, and the offline corpus with the network blocked.
"""

import doctest
import hashlib
import http.server
import importlib
import os
import random
import re
import socket
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import sitp
from sitp.data import (
    IGNORE_INDEX,
    ChecksumError,
    DownloadError,
    OfflineError,
    Vocab,
    build_context_dataset,
    build_sequence_dataset,
    build_token_stream,
    cache_dir,
    census_first_names,
    download,
    download_makemore_names,
    get_batch,
    load_names,
    split_words,
)
from sitp.data.download import MAKEMORE_FACTS, FileFacts, check_facts, write_atomically


def as_list(t):
    """A tensor as nested Python lists; checks that it is an int64 sitp tensor."""
    assert isinstance(t, sitp.Tensor) and t.dtype == sitp.int64
    return t.tolist()


# --------------------------------------------------------------------------- corpora


@pytest.fixture
def no_network(monkeypatch):
    """Makes every attempt to open a connection fail loudly."""

    def refuse(*args, **kwargs):
        raise AssertionError("a test tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def test_offline_corpus_needs_no_network(no_network):
    words = load_names("offline")
    assert words == load_names()
    assert len(words) == 5163
    assert words[:5] == ["james", "john", "robert", "michael", "mary"]


def test_offline_corpus_is_clean_and_deterministic():
    words = census_first_names()
    assert all(re.fullmatch(r"[a-z]+", w) for w in words)
    assert len(set(words)) == len(words)
    assert census_first_names() == words
    assert max(len(w) for w in words) == 11
    assert min(len(w) for w in words) == 2


def test_load_names_from_a_file(tmp_path):
    path = tmp_path / "names.txt"
    path.write_text("emma\n  olivia \n\nava\n")
    assert load_names(path) == ["emma", "olivia", "ava"]
    assert load_names(str(path)) == ["emma", "olivia", "ava"]


def test_load_names_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_names(tmp_path / "nope.txt")


# --------------------------------------------------------------------------- vocabulary


def test_vocab_of_the_offline_corpus():
    words = load_names()
    vocab = Vocab(words)
    assert len(vocab) == 27
    assert vocab.itos == ["."] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    assert vocab.stoi["."] == 0 and vocab.stoi["a"] == 1 and vocab.stoi["z"] == 26
    assert all(vocab.stoi[ch] == i for i, ch in enumerate(vocab.itos))
    assert all(vocab.decode(vocab.encode(w)) == w for w in words)


def test_vocab_rejects_unknown_and_boundary_characters():
    vocab = Vocab(["ab"])
    with pytest.raises(KeyError):
        vocab.encode("abc")
    with pytest.raises(ValueError):
        Vocab(["a.b"])
    assert vocab.decode(np.array([0, 1, 2, 0])) == ".ab."
    assert Vocab(["ba"]) == Vocab(["ab"])


# --------------------------------------------------------------------------- splits


def test_split_sizes_and_contents():
    words = load_names()
    train, val, test = split_words(words, seed=42)
    n = len(words)
    assert (len(train), len(val), len(test)) == (
        int(0.8 * n),
        int(0.9 * n) - int(0.8 * n),
        n - int(0.9 * n),
    )
    assert (len(train), len(val), len(test)) == (4130, 516, 517)
    assert sorted(train + val + test) == sorted(words)
    assert words == load_names()  # the input is not shuffled in place


def test_split_is_deterministic_with_a_seed():
    words = [f"w{i}" for i in range(100)]
    assert split_words(words, seed=1) == split_words(words, seed=1)
    assert split_words(words, seed=1) != split_words(words, seed=2)


def test_split_matches_the_makemore_lectures():
    words = [f"w{i}" for i in range(1000)]
    lecture = list(words)
    random.seed(42)
    random.shuffle(lecture)
    n1, n2 = int(0.8 * len(lecture)), int(0.9 * len(lecture))
    assert split_words(words) == (lecture[:n1], lecture[n1:n2], lecture[n2:])


def test_split_with_other_fractions():
    parts = split_words(list("abcdefghij"), fractions=(0.5, 0.5), seed=0)
    assert [len(p) for p in parts] == [5, 5]
    with pytest.raises(ValueError):
        split_words(list("abc"), fractions=(0.5, 0.6))


# --------------------------------------------------------------------------- datasets

# The two-word example, by hand. Vocab(["emma", "ava"]): . a e m v -> 0 1 2 3 4
#   emma: ...->e  ..e->m  .em->m  emm->a  mma->.
#   ava:  ...->a  ..a->v  .av->a  ava->.
EXPECTED_X = [
    [0, 0, 0], [0, 0, 2], [0, 2, 3], [2, 3, 3], [3, 3, 1],
    [0, 0, 0], [0, 0, 1], [0, 1, 4], [1, 4, 1],
]  # fmt: skip
EXPECTED_Y = [2, 3, 3, 1, 0, 1, 4, 1, 0]


def test_context_dataset_by_hand():
    vocab = Vocab(["emma", "ava"])
    assert vocab.itos == [".", "a", "e", "m", "v"]
    X, Y = build_context_dataset(["emma", "ava"], vocab, block_size=3)
    assert tuple(X.shape) == (9, 3) and tuple(Y.shape) == (9,)
    assert X.dtype == sitp.int64 and Y.dtype == sitp.int64
    assert as_list(X) == EXPECTED_X
    assert as_list(Y) == EXPECTED_Y


def test_context_dataset_block_size_one_is_bigrams():
    vocab = Vocab(["emma"])
    X, Y = build_context_dataset(["emma"], vocab, block_size=1)
    pairs = [(vocab.itos[x[0]], vocab.itos[y]) for x, y in zip(as_list(X), as_list(Y))]
    assert pairs == [(".", "e"), ("e", "m"), ("m", "m"), ("m", "a"), ("a", ".")]


def test_context_dataset_size_on_the_corpus():
    words = load_names()
    X, Y = build_context_dataset(words, Vocab(words), block_size=3)
    n = sum(len(w) + 1 for w in words)
    assert tuple(X.shape) == (n, 3) and tuple(Y.shape) == (n,)


def test_sequence_dataset_by_hand():
    vocab = Vocab(["emma", "ava"])
    X, Y = build_sequence_dataset(["emma", "ava"], vocab, block_size=6)
    assert as_list(X) == [[0, 2, 3, 3, 1, 0], [0, 1, 4, 1, 0, 0]]
    assert as_list(Y) == [[2, 3, 3, 1, 0, -1], [1, 4, 1, 0, -1, -1]]
    assert IGNORE_INDEX == -1
    # where Y is not ignored, it is X shifted left by one
    Xn, Yn = np.array(as_list(X)), np.array(as_list(Y))
    keep = Yn[:, :-1] != IGNORE_INDEX
    assert (Yn[:, :-1][keep] == Xn[:, 1:][keep]).all()


def test_sequence_dataset_too_short_block():
    vocab = Vocab(["emma"])
    with pytest.raises(ValueError):
        build_sequence_dataset(["emma"], vocab, block_size=4)
    X, _ = build_sequence_dataset(["emma"], vocab)
    assert tuple(X.shape) == (1, 5)


def test_token_stream_and_batches():
    words = ["emma", "ava", "olivia"]
    vocab = Vocab(words)
    stream = build_token_stream(words, vocab)
    assert vocab.decode(as_list(stream)) == ".emma.ava.olivia."
    X, Y = get_batch(stream, batch_size=16, block_size=4, generator=sitp.Generator().manual_seed(0))
    assert tuple(X.shape) == (16, 4) and tuple(Y.shape) == (16, 4)
    text = ".emma.ava.olivia."
    for x, y in zip(as_list(X), as_list(Y)):
        assert x[1:] == y[:-1]
        assert vocab.decode(x + y[-1:]) in text
    X2, Y2 = get_batch(
        stream, batch_size=16, block_size=4, generator=sitp.Generator().manual_seed(0)
    )
    assert as_list(X2) == as_list(X) and as_list(Y2) == as_list(Y)
    # without a generator, the default one: sitp.manual_seed makes it repeatable
    sitp.manual_seed(1)
    X3, _ = get_batch(stream.numpy(), batch_size=16, block_size=4)
    sitp.manual_seed(1)
    X4, _ = get_batch(stream.numpy(), batch_size=16, block_size=4)
    assert as_list(X3) == as_list(X4)
    with pytest.raises(ValueError):
        get_batch(stream, batch_size=1, block_size=len(text))


# --------------------------------------------------------------------------- downloader


class FakeServer:
    """A local HTTP server with a table of path -> bytes; counts its requests."""

    def __init__(self):
        self.files = {}
        self.requests = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.path)
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)
        self.thread.start()

    def url(self, path):
        return f"http://127.0.0.1:{self.httpd.server_port}{path}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private sitp cache directory for one test, with no SITP_DATA_DIR copy."""
    monkeypatch.setenv("SITP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SITP_DATA_DIR", raising=False)
    return tmp_path / "cache"


FAKE = b"emma\nolivia\nava"
FAKE_FACTS = FileFacts(num_bytes=len(FAKE), num_lines=3, sha256=hashlib.sha256(FAKE).hexdigest())


def closed_port_url():
    """A URL on 127.0.0.1 where nothing listens: connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/names.txt"


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("SITP_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "sitp"
    monkeypatch.setenv("SITP_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("SITP_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "sitp"


def test_download_then_cache(server, cache):
    server.files["/names.txt"] = FAKE
    path = download_makemore_names(url=server.url("/names.txt"), facts=FAKE_FACTS)
    assert path == cache / "makemore" / "names.txt"
    assert path.read_bytes() == FAKE
    assert server.requests == ["/names.txt"]
    # the second call reads the cache and makes no request
    assert download_makemore_names(url=server.url("/names.txt"), facts=FAKE_FACTS) == path
    assert server.requests == ["/names.txt"]
    # force downloads again
    download_makemore_names(url=server.url("/names.txt"), facts=FAKE_FACTS, force=True)
    assert len(server.requests) == 2
    assert sorted(p.name for p in path.parent.iterdir()) == ["names.txt"]  # no temp files left


def test_checksum_mismatch_writes_nothing(server, cache):
    server.files["/names.txt"] = FAKE
    wrong = FileFacts(num_bytes=len(FAKE), num_lines=3, sha256="0" * 64)
    with pytest.raises(ChecksumError, match="SHA-256"):
        download_makemore_names(url=server.url("/names.txt"), facts=wrong)
    assert not (cache / "makemore" / "names.txt").exists()


def test_size_and_line_checks(server, cache):
    server.files["/names.txt"] = FAKE + b"\nzoe"
    with pytest.raises(ChecksumError, match="bytes"):
        download_makemore_names(url=server.url("/names.txt"), facts=FAKE_FACTS)
    server.files["/bad.txt"] = b"Emma\nolivia\nava"  # right size and lines, wrong content
    with pytest.raises(ChecksumError, match="line 1"):
        download_makemore_names(url=server.url("/bad.txt"), facts=FileFacts(len(FAKE), 3))


def test_damaged_cache_is_downloaded_again(server, cache):
    server.files["/names.txt"] = FAKE
    path = cache / "makemore" / "names.txt"
    path.parent.mkdir(parents=True)
    path.write_bytes(FAKE[:-3])  # an interrupted copy
    assert download_makemore_names(url=server.url("/names.txt"), facts=FAKE_FACTS) == path
    assert path.read_bytes() == FAKE
    assert server.requests == ["/names.txt"]


def test_offline_error_says_what_to_do(cache):
    with pytest.raises(OfflineError) as info:
        download_makemore_names(url=closed_port_url(), facts=FAKE_FACTS, timeout=5)
    message = str(info.value)
    assert isinstance(info.value, ConnectionError)
    assert "offline" in message
    assert str(cache / "makemore" / "names.txt") in message  # where to put the file
    assert 'load_names("offline")' in message
    assert not (cache / "makemore" / "names.txt").exists()


def test_http_error_is_a_download_error(server, cache):
    with pytest.raises(DownloadError, match="404"):
        download_makemore_names(url=server.url("/missing.txt"), facts=FAKE_FACTS)


def fake_makemore_bytes():
    """Bytes with the facts of makemore's names.txt (size, lines, a-z), not its names."""
    rng = random.Random(0)
    n, total = MAKEMORE_FACTS.num_lines, MAKEMORE_FACTS.num_bytes - (MAKEMORE_FACTS.num_lines - 1)
    lengths = [total // n] * n
    for i in range(total - sum(lengths)):
        lengths[i] += 1
    names = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(k)) for k in lengths]
    return "\n".join(names).encode()


SHARED = Path(os.environ.get("SITP_DATA_DIR", "/nonexistent")) / "names.txt"
# skipped without it, failing under CI=true (hooks/corpus.py)
needs_shared = pytest.mark.needs_corpus("names.txt")


@needs_shared
def test_makemore_placed_by_hand_loads_offline(cache, no_network):
    path = cache / "makemore" / "names.txt"
    path.parent.mkdir(parents=True)
    path.write_bytes(SHARED.read_bytes())
    words = load_names("makemore")
    assert len(words) == 32_033 and load_names("names") == words


def test_a_copy_with_the_facts_but_not_the_digest_is_rejected(cache, no_network):
    data = fake_makemore_bytes()  # right size, lines and letters; wrong names
    assert len(data) == 228_145
    path = cache / "makemore" / "names.txt"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    with pytest.raises(ChecksumError, match="SHA-256"):
        check_facts(data, MAKEMORE_FACTS)
    with pytest.raises(AssertionError, match="network"):  # damaged cache: download again
        load_names("makemore")


@needs_shared
def test_sitp_data_dir_is_read_in_place_and_checked(cache, no_network, monkeypatch, tmp_path):
    monkeypatch.setenv("SITP_DATA_DIR", str(SHARED.parent))
    assert download_makemore_names() == SHARED
    assert len(load_names("names")) == 32_033
    assert not (cache / "makemore").exists()  # nothing copied to the cache
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "names.txt").write_bytes(fake_makemore_bytes())
    monkeypatch.setenv("SITP_DATA_DIR", str(bad))
    with pytest.raises(ChecksumError, match="SITP_DATA_DIR"):
        load_names("names")


def test_makemore_not_cached_and_offline(cache, monkeypatch):
    monkeypatch.setattr(download, "MAKEMORE_URL", closed_port_url())
    with pytest.raises(OfflineError, match="offline"):
        load_names("makemore")


# --------------------------------------------------------------------------- atomic write


def test_write_atomically_replaces_whole_files(tmp_path, monkeypatch):
    path = tmp_path / "d" / "names.txt"
    write_atomically(path, b"old")
    assert path.read_bytes() == b"old"
    calls = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append((a, b)), real_replace(a, b)))
    write_atomically(path, b"new")
    assert path.read_bytes() == b"new"
    assert len(calls) == 1 and os.path.dirname(calls[0][0]) == str(path.parent)


def test_write_atomically_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "names.txt"
    write_atomically(path, b"old")

    def crash(a, b):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        write_atomically(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["names.txt"]  # the temp file is gone


# --------------------------------------------------------------------------- docstrings


@pytest.mark.parametrize(
    "module",
    ["sitp.data", "sitp.data.names", "sitp.data.download", "sitp.data.vocab", "sitp.data.datasets"],
)
def test_docstring_examples_run(module, monkeypatch, no_network):
    monkeypatch.delenv("SITP_CACHE", raising=False)
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
