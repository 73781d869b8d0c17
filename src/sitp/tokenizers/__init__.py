"""sitp.tokenizers: a byte-level BPE tokenizer, trained on the reader's corpus (chapter 5.1).

* :mod:`sitp.tokenizers.bpe` — :class:`BPETokenizer`: training, encoding, decoding,
  special tokens, save and load; :data:`GPT4_PATTERN`, the pre-split.
* :mod:`sitp.tokenizers.kernels` — the numba loops: pair counts and merges for
  training, the joins of encoding.

An application (layer 6 of docs/layout.md).

Example:
    >>> from sitp.tokenizers import BPETokenizer
    >>> tok = BPETokenizer.train("to be or not to be " * 8, 262, special_tokens=["<|eot|>"])
    >>> ids = tok.encode("to be<|eot|>", allowed_special="all")
    >>> tok.decode(ids)
    'to be<|eot|>'
"""

from sitp.tokenizers.bpe import GPT4_PATTERN, BPETokenizer
