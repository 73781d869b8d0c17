"""Token data at scale (chapter 5.2): the tinyshakespeare download, uint16 shards,
batches read through np.memmap, the in-order stream, bits per byte, and gradient
accumulation in the trainer."""

import doctest
import hashlib
import io
import json
import math
import os
import resource
import socket
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

import sitp
import sitp.train.trainer
from sitp.data import download, tokens
from sitp.data.download import ChecksumError, OfflineError, download_tinyshakespeare
from sitp.data.tokens import (
    ByteTokenizer,
    CharTokenizer,
    ShardStream,
    TokenShards,
    bits_per_byte,
    encode_text,
    estimate_bpb,
    prepare_shakespeare,
    write_shards,
)
from sitp.models import MODELS
from sitp.train.trainer import TrainConfig, Trainer, UsageError

SHARED = Path(os.environ.get("SITP_DATA_DIR", "/nonexistent")) / "tinyshakespeare.txt"
# skipped without it, failing under CI=true (hooks/corpus.py)
needs_shared = pytest.mark.needs_corpus("tinyshakespeare.txt")

TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n"
) * 3


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SITP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SITP_DATA_DIR", raising=False)
    return tmp_path / "cache"


def closed_port_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/input.txt"


class FakeResponse(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ------------------------------------------------------------------------ download
def test_the_pinned_digest_is_tinyshakespeares():
    assert download.TINYSHAKESPEARE_BYTES == 1_115_394
    digest = download.TINYSHAKESPEARE_SHA256
    assert digest.startswith("86c4e6aa") and digest.endswith("65ed") and len(digest) == 64


@needs_shared
def test_sitp_data_dir_copy_is_checked_and_read_in_place(cache, monkeypatch, tmp_path):
    monkeypatch.setenv("SITP_DATA_DIR", str(SHARED.parent))
    assert download_tinyshakespeare() == SHARED
    text = download.load_tinyshakespeare()
    assert len(text) == 1_115_394 and text.startswith("First Citizen:")
    assert not cache.exists()  # nothing copied
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tinyshakespeare.txt").write_bytes(b"x" * 1_115_394)
    monkeypatch.setenv("SITP_DATA_DIR", str(bad))
    with pytest.raises(ChecksumError, match="SITP_DATA_DIR"):
        download_tinyshakespeare()


def test_download_is_checked_then_cached(cache, monkeypatch):
    body = TEXT.encode()
    facts = {"num_bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    calls = []

    def urlopen(url, timeout):
        calls.append(url)
        return FakeResponse(body)

    monkeypatch.setattr(download.urllib.request, "urlopen", urlopen)
    path = cache / "shakespeare.txt"
    assert download_tinyshakespeare(url="http://x/input.txt", path=path, **facts) == path
    assert path.read_bytes() == body
    download_tinyshakespeare(url="http://x/input.txt", path=path, **facts)  # from the cache
    assert len(calls) == 1
    assert [p.name for p in cache.iterdir()] == ["shakespeare.txt"]  # no temporary left
    with pytest.raises(ChecksumError, match="not the expected one"):
        download_tinyshakespeare(url="http://x/input.txt", path=cache / "bad.txt", sha256="0" * 64)
    assert not (cache / "bad.txt").exists()  # a bad download writes nothing


def test_offline_error_says_where_to_put_the_file(cache):
    with pytest.raises(OfflineError) as info:
        download_tinyshakespeare(url=closed_port_url(), sha256="0" * 64, timeout=5)
    message = str(info.value)
    assert "offline" in message and "SITP_DATA_DIR" in message
    assert str(cache / "tinyshakespeare" / "input.txt") in message


# ---------------------------------------------------------------------- tokenizers
@needs_shared
def test_char_tokenizer_of_shakespeare_has_nanogpts_65_characters():
    text = SHARED.read_text()
    tok = CharTokenizer(text)
    assert tok.vocab_size == 65 and tok.chars[:3] == ["\n", " ", "!"]
    assert tok.decode(tok.encode(text[:1000])) == text[:1000]


def test_tokenizers_round_trip_and_reject_bad_input():
    tok = CharTokenizer(TEXT)
    assert tok.decode(tok.encode(TEXT)) == TEXT
    with pytest.raises(ValueError, match="'Z' is not in"):
        tok.encode("Zounds")
    assert ByteTokenizer().decode(ByteTokenizer().encode("naïve ☃")) == "naïve ☃"
    assert tokens.tokenizer_id(tok) == tokens.tokenizer_id(CharTokenizer(TEXT[::-1]))
    with pytest.raises(TypeError, match="encode"):
        encode_text(TEXT, object(), "unused")


class Huge:  # a tokenizer whose vocabulary does not fit in uint16
    vocab_size = 70_000

    def encode(self, text):
        return [0]

    def decode(self, ids):
        return ""


def test_vocabularies_beyond_uint16_are_refused(tmp_path):
    with pytest.raises(ValueError, match="65,536"):
        encode_text(TEXT, Huge(), tmp_path)


# --------------------------------------------------------------------------- shards
def test_encode_text_writes_the_split_as_shards(tmp_path):
    tok = CharTokenizer(TEXT)
    shards = encode_text(TEXT, tok, tmp_path, shard_size=100)
    cut = int(len(TEXT) * 0.9)  # nanoGPT's split
    train, val = shards.split("train"), shards.split("val")
    assert [s.num_tokens for s in train] == [100] * (cut // 100) + [cut % 100]
    assert shards.shards[-len(val) :] == val  # the last shards are the validation ones
    assert shards.num_tokens("train") == cut and shards.num_tokens("val") == len(TEXT) - cut
    on_disk = [np.fromfile(tmp_path / s.file, dtype="<u2") for s in shards.shards]
    assert tok.decode(np.concatenate(on_disk)) == TEXT
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["vocab_size"] == tok.vocab_size == shards.vocab_size
    assert meta["tokenizer"] == tok.name and meta["num_tokens"] == len(TEXT)
    assert all((tmp_path / s.file).stat().st_size == 2 * s.num_tokens for s in shards.shards)


class Counting(CharTokenizer):
    calls = 0

    def encode(self, text):
        Counting.calls += 1
        return super().encode(text)


def test_encoding_is_skipped_when_the_shards_match(tmp_path):
    Counting.calls = 0
    first = encode_text(TEXT, Counting(TEXT), tmp_path, shard_size=64)
    assert not first.reused and Counting.calls == 2
    again = encode_text(TEXT, Counting(TEXT), tmp_path, shard_size=64)
    assert again.reused and Counting.calls == 2  # nothing encoded
    encode_text(TEXT, Counting(TEXT), tmp_path, shard_size=80)  # another sharding
    assert Counting.calls == 4
    shard = tmp_path / TokenShards(tmp_path).shards[0].file
    shard.write_bytes(shard.read_bytes()[:-2])  # a damaged shard
    assert not encode_text(TEXT, Counting(TEXT), tmp_path, shard_size=80).reused
    assert Counting.calls == 6
    assert len(list(tmp_path.glob("shard_*.bin"))) == len(TokenShards(tmp_path).shards)


def test_write_shards_streams_documents(tmp_path):
    tok = ByteTokenizer()
    docs = (f"document {i}: " + "word " * i for i in range(40))
    shards = write_shards(docs, tok, tmp_path, shard_size=128, val_shards=2, separator=0)
    sizes = [s.num_tokens for s in shards.shards]
    assert sizes[:-1] == [128] * (len(sizes) - 1) and 0 < sizes[-1] <= 128
    assert [s.split for s in shards.shards] == ["train"] * (len(sizes) - 2) + ["val"] * 2
    stream = np.concatenate([np.asarray(shards.memmap(s)) for s in shards.shards])
    texts = bytes(stream.tolist()).split(b"\0")[1:]
    assert texts == [(f"document {i}: " + "word " * i).encode() for i in range(40)]
    with pytest.raises(ValueError, match="lower shard_size"):
        write_shards(["tiny"], tok, tmp_path / "few", shard_size=128)


def test_token_ids_out_of_range_are_refused(tmp_path):
    class Liar(CharTokenizer):
        def encode(self, text):
            return [self.vocab_size]

    with pytest.raises(ValueError, match=r"lie in \[0, "):
        encode_text(TEXT, Liar(TEXT), tmp_path)


# ------------------------------------------------------------------------- batches
def test_get_batch_is_nanogpts_on_one_shard(tmp_path):
    tok = CharTokenizer(TEXT)
    shards = encode_text(TEXT, tok, tmp_path)  # one train shard, one val shard
    B, T = 6, 16
    x, y = shards.get_batch("train", B, T, generator=sitp.Generator().manual_seed(3))
    assert x.shape == (B, T) and y.shape == (B, T) and x.dtype == sitp.int64 == y.dtype
    data = np.array(tok.encode(TEXT[: int(len(TEXT) * 0.9)]))
    ix = sitp.randint(len(data) - T, (B,), generator=sitp.Generator().manual_seed(3)).numpy()
    np.testing.assert_array_equal(x.numpy(), np.stack([data[i : i + T] for i in ix]))
    np.testing.assert_array_equal(y.numpy(), np.stack([data[i + 1 : i + 1 + T] for i in ix]))
    again = shards.get_batch("train", B, T, generator=sitp.Generator().manual_seed(3))
    np.testing.assert_array_equal(again[0].numpy(), x.numpy())  # reproducible


class Numbers:  # token i is the text "i "; a stream of consecutive ids is easy to check
    vocab_size = 1000
    name = "numbers"

    def encode(self, text):
        return [int(word) for word in text.split()]

    def decode(self, ids):
        return "".join(f"{i} " for i in ids)


def test_windows_stay_inside_one_shard_and_reach_every_shard(tmp_path):
    text = " ".join(map(str, range(1000)))
    shards = write_shards([text], Numbers(), tmp_path, shard_size=100)  # shard 9: val
    T = 8
    x, y = shards.get_batch("train", 400, T, generator=sitp.Generator().manual_seed(0))
    window_BT1 = np.concatenate([x.numpy(), y.numpy()[:, -1:]], axis=1)
    assert (np.diff(window_BT1, axis=1) == 1).all()  # consecutive tokens
    shard_B = window_BT1[:, 0] // 100
    assert (window_BT1[:, -1] // 100 == shard_B).all()  # no window crosses a shard
    assert set(shard_B.tolist()) == set(range(9))  # every train shard, never the val one


def test_get_batch_reads_only_its_windows_of_a_huge_shard(tmp_path, monkeypatch):
    """A 2 GiB shard (sparse: zeros but for marks) gives batches without being read."""
    n = 2**30  # tokens: 2 GiB on disk
    path = tmp_path / "shard_000000.bin"
    with open(path, "wb") as f:
        f.truncate(2 * n)
        for k in range(0, n, n // 64):  # a mark every 16M tokens: its index in the file
            f.seek(2 * k)
            f.write(np.arange(k % 60000, k % 60000 + 8, dtype="<u2").tobytes())
    shard = {"file": path.name, "split": "train", "num_tokens": n, "num_bytes": n}
    meta = {"format": tokens.FORMAT, "dtype": "<u2", "vocab_size": 65536, "tokenizer": "t"}
    meta |= {"key": {}, "num_tokens": n, "shards": [shard]}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    (tmp_path / "shard_000001.bin").write_bytes(np.zeros(10, "<u2").tobytes())

    def refuse(*args, **kwargs):
        raise AssertionError("the loader read a whole file")

    monkeypatch.setattr(np, "fromfile", refuse)
    monkeypatch.setattr(Path, "read_bytes", refuse)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    shards = TokenShards(tmp_path)
    x, y = shards.get_batch("train", 32, 64, generator=sitp.Generator().manual_seed(0))
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < 200 * 1024, f"peak memory grew by {grown} KiB"
    r = sitp.randint(n - 64, (32,), generator=sitp.Generator().manual_seed(0)).numpy()
    with open(path, "rb") as f:
        for b, i in enumerate(r):
            f.seek(2 * int(i))
            window = np.frombuffer(f.read(2 * 65), dtype="<u2")
            assert (x[b].numpy() == window[:-1]).all() and (y[b].numpy() == window[1:]).all()
    # windows at the marks read their values back
    mm = shards.memmap(shards.shards[0])
    assert mm[n // 64 * 3 + 2] == (n // 64 * 3) % 60000 + 2


def test_shard_stream_reads_in_order_and_resumes(tmp_path):
    tok = CharTokenizer(TEXT)
    shards = encode_text(TEXT, tok, tmp_path, shard_size=50)
    B, T = 2, 5
    train = np.concatenate([np.asarray(shards.memmap(s)) for s in shards.split("train")])
    stream = ShardStream(shards, "train", B, T, loop=False)
    seen = list(stream)
    per_shard = [(s.num_tokens - 1) // (B * T) for s in shards.split("train")]
    assert len(seen) == sum(per_shard)
    x0, y0 = seen[0]
    np.testing.assert_array_equal(x0.numpy().reshape(-1), train[: B * T])
    np.testing.assert_array_equal(y0.numpy().reshape(-1), train[1 : B * T + 1])
    x4, _ = seen[per_shard[0]]  # the first batch of the second shard
    np.testing.assert_array_equal(x4.numpy().reshape(-1), train[50 : 50 + B * T])

    looping = ShardStream(shards, "train", B, T)
    for _ in range(7):
        next(looping)
    state = looping.state_dict()
    ahead = [next(looping)[0].numpy() for _ in range(len(seen) + 3)]  # wraps around
    resumed = ShardStream(shards, "train", B, T)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    for expected in ahead:
        np.testing.assert_array_equal(next(resumed)[0].numpy(), expected)
    with pytest.raises(ValueError, match="no 'val' shard holds a batch"):
        ShardStream(shards, "val", 64, 64)


# -------------------------------------------------------------------- bits per byte
def tiny_gpt(vocab_size, block_size=16):
    spec = MODELS["gpt"]
    sitp.manual_seed(0)
    config = spec.make_config(
        vocab_size=vocab_size, block_size=block_size, n_layer=1, n_head=2, n_embd=16
    )
    return spec.build(config)


def test_char_level_bpb_is_the_loss_in_bits_on_ascii(tmp_path):
    tok = CharTokenizer(TEXT)
    shards = encode_text(TEXT, tok, tmp_path)
    assert shards.num_bytes("val") == shards.num_tokens("val")  # ASCII: a byte a character
    model = tiny_gpt(tok.vocab_size)
    loss, bpb = estimate_bpb(model, shards, "val", batch_size=2, block_size=8)
    n, nbytes = shards.num_tokens("val"), shards.num_bytes("val")
    assert bpb == loss / math.log(2) * n / nbytes  # exactly
    assert bpb == pytest.approx(loss / math.log(2), rel=1e-15)
    stream = ShardStream(shards, "val", 2, 8, loop=False)
    with sitp.no_grad():
        losses = [model.eval()(x, y)[1].item() for x, y in stream]
    assert loss == pytest.approx(float(np.mean(losses)), rel=1e-12)


def test_bytes_are_counted_as_utf8_whatever_the_tokenizer(tmp_path):
    text = "Þou art ſo naïve — ☃ " * 20
    chars = encode_text(text, CharTokenizer(text), tmp_path / "c", shard_size=30)
    raw = encode_text(text, ByteTokenizer(), tmp_path / "b", shard_size=30)
    for split in ("train", "val"):
        assert chars.num_bytes(split) == raw.num_bytes(split) == raw.num_tokens(split)
        assert chars.num_tokens(split) < raw.num_tokens(split)
    # the same bits per byte from a per-token loss that is higher by the tokens per byte
    per_char = 2.0 * raw.num_tokens("val") / chars.num_tokens("val")
    assert bits_per_byte(per_char, chars.num_tokens("val"), chars.num_bytes("val")) == (
        pytest.approx(bits_per_byte(2.0, raw.num_tokens("val"), raw.num_bytes("val")))
    )
    with pytest.raises(ValueError, match="positive"):
        bits_per_byte(1.0, 10, 0)


@needs_shared
def test_prepare_shakespeare_is_nanogpts_split(cache, monkeypatch):
    monkeypatch.setenv("SITP_DATA_DIR", str(SHARED.parent))
    shards, tok = prepare_shakespeare()
    assert tok.vocab_size == 65
    assert shards.num_tokens("train") == 1_003_854 and shards.num_tokens("val") == 111_540
    assert shards.root.is_relative_to(cache)
    assert prepare_shakespeare()[0].reused


# ------------------------------------------------------------ gradient accumulation
def make_trainer(tmp_path, model="gpt", **config):
    tiny = {"gpt": {"n_layer": 1, "n_embd": 16, "n_head": 2}, "mlp": {"n_hidden": 16}}[model]
    return Trainer(TrainConfig(model=model, seed=0, **config), tmp_path, tiny)


@pytest.mark.parametrize("model", ["gpt", "mlp"])  # padded sequences; context windows
def test_two_half_batches_give_the_full_batchs_gradients(model, tmp_path):
    grads = {}
    for K in (1, 2, 4):
        trainer = make_trainer(tmp_path / str(K), model, batch_size=8, grad_accum=K)
        X, Y = trainer.splits.tensors["train"]
        ix = sitp.arange(8) * 37
        trainer.optimizer.zero_grad(set_to_none=True)
        loss = trainer.accumulate_gradients(X[ix], Y[ix])
        grads[K] = (loss, [p.grad.numpy().copy() for p in trainer.model.parameters()])
    loss1, g1 = grads[1]
    for K in (2, 4):
        lossK, gK = grads[K]
        assert lossK == pytest.approx(loss1, rel=1e-5)
        for a, b in zip(g1, gK):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def test_grad_accum_must_divide_the_batch(tmp_path):
    with pytest.raises(UsageError, match="divisor of batch_size 8"):
        make_trainer(tmp_path, batch_size=8, grad_accum=3)


def test_resume_with_grad_accum_is_exact(tmp_path, monkeypatch):
    options = {"steps": 8, "batch_size": 8, "grad_accum": 2, "eval_every": 4, "save_every": 4}
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    quiet = {"log": lambda line: None, "progress": False}
    make_trainer(whole, **options).run(**quiet)

    real_save = sitp.train.checkpoint.save_checkpoint

    def save_then_die(*args, **kwargs):
        real_save(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(sitp.train.trainer.ckpt, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        make_trainer(parts, **options).run(**quiet)
    monkeypatch.undo()
    resumed = Trainer.resume(parts)
    assert resumed.step == 4 and resumed.config.grad_accum == 2
    resumed.run(**quiet)
    a, b = (load_file(str(d / "model.safetensors")) for d in (whole, parts))
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)  # bit for bit


def test_docstring_examples_run():
    result = doctest.testmod(tokens, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 5
