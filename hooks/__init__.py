"""The book's machinery: the Markdown extension both builders run (book_markdown.py), the
MkDocs hooks (book.py), a page's code and outputs (pagecode.py) and the Markdown fence
parser of the tests (fences.py)."""
