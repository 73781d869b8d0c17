"""sitp.tokenizers: the byte-level BPE of chapter 5.1.

Held to two references: a pure-Python BPE written here (the merges, in order) and
tiktoken, given our own ranks (the ids of every chunk of tinyshakespeare).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
import regex
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from sitp.tokenizers import GPT4_PATTERN, BPETokenizer

SMALL_TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n"
    "Café, naïve, Ærøskøbing, Προμηθεύς, 東京 2024 — 12345 emoji 🙂🙂 tabs\tand   spaces  \n"
) * 3


# A test that reads tinyshakespeare says so: without it, it is skipped, or fails under
# CI=true (hooks/corpus.py).
needs_corpus = pytest.mark.needs_corpus("tinyshakespeare.txt")


def corpus() -> str:
    """tinyshakespeare from $SITP_DATA_DIR (make test sets it), for tests marked needs_corpus."""
    return (Path(os.environ["SITP_DATA_DIR"]) / "tinyshakespeare.txt").read_text(encoding="utf-8")


def reference_merges(text: str, num_merges: int, pattern: str = GPT4_PATTERN):
    """BPE as the textbook states it: count the pairs of every chunk, join the most
    frequent (ties: the smallest pair), repeat. Stops early when no pair is left."""
    chunks = Counter(regex.findall(pattern, text))
    words = [(list(chunk.encode("utf-8")), n) for chunk, n in chunks.items()]
    merges = []
    for m in range(num_merges):
        pairs = Counter()
        for word, n in words:
            for pair in zip(word, word[1:]):
                pairs[pair] += n
        if not pairs:
            break
        best = min(pairs, key=lambda pair: (-pairs[pair], pair))
        merges.append(best)
        new = 256 + m
        for word, _ in words:
            i = 0
            while i < len(word) - 1:
                if (word[i], word[i + 1]) == best:
                    word[i : i + 2] = [new]
                i += 1
    return merges


@pytest.fixture(scope="module")
def small():
    return BPETokenizer.train(SMALL_TEXT, 256 + 60, special_tokens=["<|endoftext|>", "<|pad|>"])


def test_merges_equal_the_reference_on_small_text():
    tok = BPETokenizer.train(SMALL_TEXT, 256 + 80)
    assert tok.merges == reference_merges(SMALL_TEXT, 80)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="ab c\nédé🙂", max_size=120), st.integers(0, 30))
def test_merges_equal_the_reference_with_ties_and_runs(text, num_merges):
    expected = reference_merges(text, num_merges)
    if len(expected) < num_merges:  # the text runs out of pairs first
        with pytest.raises(ValueError, match="no pair left"):
            BPETokenizer.train(text, 256 + num_merges)
    else:
        assert BPETokenizer.train(text, 256 + num_merges).merges == expected


@needs_corpus
def test_merges_equal_the_reference_on_a_slice_of_the_corpus():
    text = corpus()[:30_000]
    assert BPETokenizer.train(text, 256 + 60).merges == reference_merges(text, 60)


@pytest.fixture(scope="module")
def small_tiktoken(small):
    return tiktoken.Encoding(
        name="sitp-small",
        pat_str=GPT4_PATTERN,
        mergeable_ranks=small.mergeable_ranks(),
        special_tokens=small.special_tokens,
    )


@settings(max_examples=100, deadline=None)
@given(st.text())
def test_decode_encode_round_trip(small, small_tiktoken, text):
    ids = small.encode_ordinary(text)
    assert small.decode(ids) == text
    assert ids == small_tiktoken.encode_ordinary(text)
    assert small.decode(small.encode(text.replace("<|", "<"))) == text.replace("<|", "<")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=20), st.sampled_from(["<|endoftext|>", "<|pad|>"]))))
def test_special_tokens_round_trip(small, parts):
    text = "".join(parts)
    ids = small.encode(text, allowed_special="all")
    assert small.decode(ids) == text
    assert ids.count(small.special_tokens["<|pad|>"]) == text.count("<|pad|>")


@needs_corpus
def test_tiktoken_on_our_ranks_gives_the_same_ids_on_the_whole_corpus():
    text = corpus()
    tok = BPETokenizer.train(text, 256 + 512, special_tokens=["<|endoftext|>"])
    enc = tiktoken.Encoding(
        name="sitp-test",
        pat_str=GPT4_PATTERN,
        mergeable_ranks=tok.mergeable_ranks(),
        special_tokens=tok.special_tokens,
    )
    ids = tok.encode_ordinary(text)
    assert ids == enc.encode_ordinary(text)
    assert tok.decode(ids) == text
    documents = "<|endoftext|>".join([text[:5000], text[5000:9000], SMALL_TEXT])
    assert tok.encode(documents, allowed_special="all") == enc.encode(
        documents, allowed_special="all"
    )


def test_tiktoken_agrees_on_unicode(small, small_tiktoken):
    assert small.encode_ordinary(SMALL_TEXT) == small_tiktoken.encode_ordinary(SMALL_TEXT)


def test_save_and_load_round_trip(small, tmp_path):
    path = small.save(tmp_path / "bpe")
    state = json.loads(path.read_text(encoding="utf-8"))
    assert state["format"] == "sitp-bpe" and state["version"] == 1
    assert state["merges"][0] == list(small.merges[0])
    loaded = BPETokenizer.load(tmp_path / "bpe")
    assert loaded.merges == small.merges
    assert loaded.special_tokens == small.special_tokens
    assert loaded.pattern == small.pattern
    text = SMALL_TEXT + "<|pad|>"
    assert loaded.encode(text, allowed_special="all") == small.encode(text, allowed_special="all")
    assert BPETokenizer.load(path).vocab == small.vocab  # the file itself works too
    assert [p.name for p in (tmp_path / "bpe").iterdir()] == ["tokenizer.json"]  # no temp file


def test_vocab_size_too_small():
    with pytest.raises(ValueError, match="vocab_size=255 is too small"):
        BPETokenizer.train(SMALL_TEXT, 255)
    with pytest.raises(ValueError, match="vocab_size >= 257"):
        BPETokenizer.train(SMALL_TEXT, 256, special_tokens=["<|endoftext|>"])
    assert BPETokenizer.train(SMALL_TEXT, 256).merges == []


def test_text_too_short_for_the_vocab():
    with pytest.raises(ValueError, match="no pair left to merge after 1 merges"):
        BPETokenizer.train("ab", 300)


def test_special_tokens_in_text_must_be_allowed(small):
    with pytest.raises(ValueError, match="contains the special token '<\\|pad\\|>'"):
        small.encode("hello <|pad|>")
    with pytest.raises(ValueError, match="unknown special tokens \\['<\\|eot\\|>'\\]"):
        small.encode("hello", allowed_special={"<|eot|>"})
    with pytest.raises(ValueError, match="allowed_special must be"):
        small.encode("hello", allowed_special="<|pad|>")
    ids = small.encode("hi<|pad|><|endoftext|>", allowed_special={"<|pad|>"} | {"<|endoftext|>"})
    assert ids[-2:] == [small.special_tokens["<|pad|>"], small.special_tokens["<|endoftext|>"]]
    assert small.special_tokens["<|pad|>"] not in small.encode_ordinary("<|pad|>")


def test_ids_out_of_range(small):
    with pytest.raises(ValueError, match=f"token id {small.vocab_size} is out of range"):
        small.decode([1, small.vocab_size])
    with pytest.raises(ValueError, match="token id -1 is out of range"):
        small.decode([-1])


def test_bad_merges_and_files(tmp_path):
    with pytest.raises(ValueError, match="merge 0 joins \\(256, 1\\)"):
        BPETokenizer([(256, 1)])
    with pytest.raises(ValueError, match="special token ids must be 257..257"):
        BPETokenizer([(1, 2)], {"<|x|>": 300})
    with pytest.raises(FileNotFoundError, match="no saved tokenizer"):
        BPETokenizer.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="is not a sitp BPE tokenizer"):
        BPETokenizer.load(tmp_path)


def test_partial_utf8_is_replaced_on_decode(small):
    assert small.decode_bytes(small.encode_ordinary("🙂")) == "🙂".encode()
    assert small.decode(list("🙂".encode())[:2]) == "\ufffd"  # half a character
    with pytest.raises(UnicodeDecodeError):
        small.decode([0xF0], errors="strict")
