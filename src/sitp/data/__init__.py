"""Data for the book's models: corpora, vocabularies, datasets, token shards.

Chapter 1 counts the names and chapter 3 trains on them; Part III trains on
tinyshakespeare, encoded once into token shards on disk. An application (layer 6 of
docs/layout.md).

One concept per module, in the order a reader meets them:

* :mod:`sitp.data.names` — load a corpus (``load_names``), offline by default.
* :mod:`sitp.data.download` — fetch, check and cache names.txt and tinyshakespeare.
* :mod:`sitp.data.vocab` — characters to integers and back (``Vocab``).
* :mod:`sitp.data.datasets` — splits, context windows, sequences, batches.
* :mod:`sitp.data.tokens` — a corpus encoded into ``uint16`` shards, batches read
  through ``np.memmap``, bits per byte (chapter 5.2).
* :mod:`sitp.data.synthetic` — a Markov language whose entropy is known exactly, for
  the scaling sweep (chapter 5.5).

Example:
    >>> from sitp.data import load_names, Vocab, split_words, build_context_dataset
    >>> words = load_names()  # the census names; no network
    >>> vocab = Vocab(words)
    >>> len(vocab), vocab.itos[:4]
    (27, ['.', 'a', 'b', 'c'])
    >>> train, val, test = split_words(words, seed=42)
    >>> X, Y = build_context_dataset(train[:2], vocab, block_size=3)
    >>> tuple(X.shape)[1]
    3
"""

from sitp.data.datasets import (
    IGNORE_INDEX,
    build_context_dataset,
    build_sequence_dataset,
    build_token_stream,
    get_batch,
    split_words,
)
from sitp.data.download import (
    MAKEMORE_URL,
    TINYSHAKESPEARE_URL,
    ChecksumError,
    DownloadError,
    OfflineError,
    cache_dir,
    download_makemore_names,
    download_tinyshakespeare,
    load_tinyshakespeare,
)
from sitp.data.names import census_first_names, load_names, read_names_file
from sitp.data.synthetic import MarkovLanguage, write_language_shards
from sitp.data.tokens import (
    ByteTokenizer,
    CharTokenizer,
    ShardStream,
    Tokenizer,
    TokenShards,
    bits_per_byte,
    encode_text,
    estimate_bpb,
    prepare_shakespeare,
    write_shards,
)
from sitp.data.vocab import BOUNDARY, Vocab

__all__ = [
    "BOUNDARY",
    "IGNORE_INDEX",
    "MAKEMORE_URL",
    "TINYSHAKESPEARE_URL",
    "ByteTokenizer",
    "CharTokenizer",
    "ChecksumError",
    "DownloadError",
    "MarkovLanguage",
    "OfflineError",
    "ShardStream",
    "TokenShards",
    "Tokenizer",
    "Vocab",
    "bits_per_byte",
    "build_context_dataset",
    "build_sequence_dataset",
    "build_token_stream",
    "cache_dir",
    "census_first_names",
    "download_makemore_names",
    "download_tinyshakespeare",
    "encode_text",
    "estimate_bpb",
    "get_batch",
    "load_names",
    "load_tinyshakespeare",
    "prepare_shakespeare",
    "read_names_file",
    "split_words",
    "write_language_shards",
    "write_shards",
]
