"""Complete models of the book, one module per model, in the order the chapters build them.

* :mod:`sitp.models.bigram` — the bigram language model by counting (chapter 1).
"""
