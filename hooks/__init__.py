"""The book's machinery: MkDocs hooks (book.py) and the Markdown fence parser of the tests (fences.py)."""
