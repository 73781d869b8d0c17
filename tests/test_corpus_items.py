"""The rule for items that read a corpus (hooks/corpus.py and the root conftest.py).

Only the items that read makemore's names.txt or tinyshakespeare depend on it: without
the file they are skipped, naming SITP_DATA_DIR, and under CI=true they fail with that
reason. The end-to-end tests run pytest, with the book's conftest, on a page whose
fences read the corpus or not, and on a test that carries the marker.
"""

import doctest
import shutil
from pathlib import Path

import pytest
from hooks import corpus

ROOT = Path(__file__).resolve().parent.parent


def test_the_examples_of_hooks_corpus():
    result = doctest.testmod(corpus)
    assert result.attempted >= 3 and result.failed == 0


@pytest.mark.parametrize(
    "code, files",
    [
        ("from sitp.data import prepare_shakespeare\nshards, tok = prepare_shakespeare()", {"t"}),
        ("import sitp.data\nsitp.data.download.download_tinyshakespeare()", {"t"}),
        ("from sitp.data import load_names\nwords = load_names('makemore')", {"n"}),
        ("words = load_names('offline')\nwords = load_names()", set()),
        ("text = 'load_tinyshakespeare() is in section 5.2'  # load_tinyshakespeare()", set()),
        ("subprocess.run([sys.executable, '-m', 'sitp', 'train', '--data', 'shakespeare'])", {"t"}),
        ("os.system('python -m sitp train --model gpt --data makemore')", {"n"}),
        ("run(['sitp', 'train', '--data', 'names'])", set()),  # the census names, offline
        (">>> text = load_tinyshakespeare(\n...     )", {"t"}),  # not a program: its words
    ],
)
def test_corpora_read_by(code, files):
    names = {"t": "tinyshakespeare.txt", "n": "names.txt"}
    assert corpus.corpora_read_by(code) == {names[f] for f in files}


@pytest.fixture
def no_corpus(monkeypatch, tmp_path):
    """No SITP_DATA_DIR, an empty sitp cache, and not in CI."""
    monkeypatch.delenv("SITP_DATA_DIR", raising=False)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("SITP_CACHE", str(tmp_path / "cache"))
    return tmp_path


def test_missing_corpus_names_sitp_data_dir(no_corpus, monkeypatch):
    why = corpus.missing_corpus(["tinyshakespeare.txt"])
    assert why.startswith("SITP_DATA_DIR is not set") and "tinyshakespeare.txt" in why
    data = no_corpus / "data"
    data.mkdir()
    (data / "names.txt").write_text("emma\n")
    monkeypatch.setenv("SITP_DATA_DIR", str(data))
    assert corpus.missing_corpus(["names.txt"]) is None
    why = corpus.missing_corpus(["names.txt", "tinyshakespeare.txt"])
    assert why.startswith(f"SITP_DATA_DIR={data} holds no tinyshakespeare.txt:")
    with pytest.raises(ValueError, match="unknown corpus"):
        corpus.missing_corpus(["input.txt"])


def test_sitps_cache_counts_only_for_items_that_read_through_sitp(no_corpus):
    cached = corpus.CACHED["tinyshakespeare.txt"]()
    cached.parent.mkdir(parents=True)
    cached.write_text("First Citizen:\n")
    assert cached.is_relative_to(no_corpus / "cache")
    assert corpus.missing_corpus(["tinyshakespeare.txt"], cached=True) is None
    assert "SITP_DATA_DIR is not set" in corpus.missing_corpus(["tinyshakespeare.txt"])


@pytest.mark.parametrize("value, ci", [("true", True), ("TRUE", True), ("", False), ("0", False)])
def test_in_ci(monkeypatch, value, ci):
    monkeypatch.setenv("CI", value)
    assert corpus.in_ci() is ci


def test_the_copy_run_test_is_where_the_conftest_looks_for_it():
    """A renamed copy-run test would lose its marker (and fail without the corpus)."""
    name, function = corpus.COPY_RUN_TEST
    source = (ROOT / "tests" / name).read_text(encoding="utf-8")
    assert f"def {function}(" in source
    signature = source.split(f"def {function}(", 1)[1].split(")", 1)[0]
    assert "page" in [p.strip() for p in signature.split(",")], signature


PAGE = """# A page

```python
print("reads nothing")
```

```python
from sitp.data import load_tinyshakespeare

text = load_tinyshakespeare()
```

```{.python continuation}
print(len(text))
```

```python
words = ["emma", "ava"]
```
"""

OTHER_PAGE = """# Another page

```python
print("reads nothing either")
```
"""

TESTS = """
from pathlib import Path

import pytest


@pytest.mark.needs_corpus("names.txt")
def test_reads_names():
    pass


def test_reads_nothing():
    pass


@pytest.mark.parametrize("page", [Path("page.md"), Path("other.md")], ids=["page", "other"])
def test_page_runs_as_a_reader_pastes_it(page):
    pass
"""


@pytest.fixture
def book_run(pytester, no_corpus):
    """pytest, with the book's conftest and hooks, on PAGE, OTHER_PAGE and TESTS."""
    pytester.makeconftest((ROOT / "conftest.py").read_text(encoding="utf-8"))
    shutil.copytree(ROOT / "hooks", pytester.path / "hooks")
    pytester.makefile(".md", page=PAGE, other=OTHER_PAGE)
    pytester.makepyfile(test_copy_run=TESTS)
    args = ["--markdown-docs", "--markdown-docs-syntax=superfences", "-p", "no:xdist"]
    args += ["-p", "no:cacheprovider", "-rA", "page.md", "other.md", "test_copy_run.py"]
    return lambda: pytester.runpytest_subprocess(*args)


def _outcomes(result) -> dict[str, str]:
    """Each item's outcome from the -rA summary: {"page.md::[CodeFence#2]...": "SKIPPED"}."""
    out = {}
    for line in result.stdout.lines:
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "SKIPPED", "ERROR", "FAILED"):
            out[rest.split(" - ")[0].strip()] = word
    return out


def test_only_the_items_that_read_the_corpus_skip_without_it(book_run):
    result = book_run()
    # the fences that read nothing, the test without the marker, the other page's copy-run
    result.assert_outcomes(passed=5, skipped=4)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]3[]] *SITP_DATA_DIR is not set*reads tinyshakespeare.txt*",
            "SKIPPED [[]1[]] *SITP_DATA_DIR is not set: this test reads names.txt*",
        ]
    )
    passed = [name for name, word in _outcomes(result).items() if word == "PASSED"]
    assert sorted(passed) == [
        "other.md::[CodeFence#1][line:3]",
        "page.md::[CodeFence#1][line:3]",
        "page.md::[CodeFence#4][line:17]",
        "test_copy_run.py::test_page_runs_as_a_reader_pastes_it[other]",
        "test_copy_run.py::test_reads_nothing",
    ], result.stdout.str()


def test_under_ci_they_fail_naming_sitp_data_dir(book_run, monkeypatch):
    monkeypatch.setenv("CI", "true")
    result = book_run()
    result.assert_outcomes(passed=5, errors=4)
    result.stdout.fnmatch_lines(["*CI=true and a corpus is missing: SITP_DATA_DIR is not set*"])
    errors = sorted(name for name, word in _outcomes(result).items() if word == "ERROR")
    assert errors == [
        "page.md::[CodeFence#2][line:7]",
        "page.md::[CodeFence#3][line:13]",
        "test_copy_run.py::test_page_runs_as_a_reader_pastes_it[page]",
        "test_copy_run.py::test_reads_names",
    ], result.stdout.str()


def test_with_the_corpus_they_run(book_run, monkeypatch, tmp_path):
    """With the files in SITP_DATA_DIR nothing is skipped; the fence that loads the corpus
    reads it (a copy that is not tinyshakespeare fails its digest check: it really ran)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "names.txt").write_text("emma\n")
    (data / "tinyshakespeare.txt").write_text("First Citizen:\n")
    monkeypatch.setenv("SITP_DATA_DIR", str(data))
    monkeypatch.setenv("CI", "true")
    result = book_run()
    outcomes = _outcomes(result)
    assert "SKIPPED" not in outcomes.values() and "ERROR" not in outcomes.values()
    assert outcomes["page.md::[CodeFence#2][line:7]"] == "FAILED"
    result.stdout.fnmatch_lines(["*ChecksumError*SITP_DATA_DIR*"])
