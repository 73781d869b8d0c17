"""Every work a page cites by author and year has its entry in docs/bibliography.md.

A citation in the text is "Name et al., 2020", "Name and Other (2019)", "Name's (1994)",
"(Name 2019)" and the like; its entry is a bullet of the bibliography that names the
author (the first surname of the citation) and the year.
"""

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"
CITATION = re.compile(
    r"\b(?P<name>[A-Z][a-zà-ÿ]+(?:[- ][A-Z][a-zà-ÿ]+)?)(?:'s)?"
    r"(?:\s+et\s+al\.|\s+and\s+[A-Z][a-zà-ÿ]+|(?:,\s+[A-Z][a-zà-ÿ]+)+\s+and\s+[A-Z][a-zà-ÿ]+)?"
    r",?\s+\(?(?P<year>(?:19|20)\d\d)\b"
)
# Capitalised words a year can follow that are not authors.
NOT_AUTHORS = {
    "In", "On", "The", "See", "From", "Since", "By", "Of", "Before", "After", "Until",
    "Version", "Python", "January", "February", "March", "April", "May", "June", "July",
    "August", "September", "October", "November", "December", "Xeon", "Zen", "Windows",
}  # fmt: skip


def entries() -> list[str]:
    text = (DOCS / "bibliography.md").read_text(encoding="utf-8")
    return [b for b in re.split(r"\n(?=- )", text) if b.startswith("- ")]


def citations() -> list[tuple[str, str, str]]:
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        if page.name == "bibliography.md" or "_outputs" in page.parts:
            continue
        text = page.read_text(encoding="utf-8")
        for m in CITATION.finditer(text):
            if m["name"].split()[0] not in NOT_AUTHORS:
                out.append((str(page.relative_to(DOCS)), m["name"].split()[-1], m["year"]))
    return out


def test_the_citation_pattern():
    found = [(m["name"], m["year"]) for m in CITATION.finditer(
        "as (Kaplan et al., 2020; Hoffmann et al., 2022) say; Hendrycks and Gimpel, 2016; "
        "Gers, Schmidhuber and\nCummins, 2000; the model is Hockney's (1994); (Shazeer 2019)"
    )]  # fmt: skip
    assert found == [("Kaplan", "2020"), ("Hoffmann", "2022"), ("Hendrycks", "2016"),
                     ("Gers", "2000"), ("Hockney", "1994"), ("Shazeer", "2019")]  # fmt: skip


def test_every_cited_work_has_an_entry():
    bib = entries()
    cited = citations()
    assert len(cited) > 20  # the pattern finds the book's citations at all
    missing = sorted(
        {(name, year, page) for page, name, year in cited
         if not any(name in b and f"({year})" in b for b in bib)}
    )  # fmt: skip
    assert not missing, "cited, with no bibliography entry of that author and year:\n" + "\n".join(
        f"  {name} {year} ({page})" for name, year, page in missing
    )
