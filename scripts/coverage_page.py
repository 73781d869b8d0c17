"""mkdocs-gen-files script (mkdocs.yml): append the coverage tables to docs/api/coverage.md.

Reads docs/api/torch-names.json (PyTorch's names, written by scripts/torch_coverage.py)
and looks each name up in the installed sitp; the site build needs no torch.
"""

import importlib.util
from pathlib import Path

import mkdocs_gen_files

_spec = importlib.util.spec_from_file_location(
    "torch_coverage", Path(__file__).resolve().with_name("torch_coverage.py"))
torch_coverage = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(torch_coverage)

with mkdocs_gen_files.open("api/coverage.md", "a") as page:
    page.write("\n" + torch_coverage.render(torch_coverage.load()))
