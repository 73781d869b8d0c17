"""PyTorch's public names, and which of them sitp implements.

    python scripts/torch_coverage.py          # re-walk torch, write docs/api/torch-names.json
    python scripts/torch_coverage.py --print  # the coverage per namespace, without writing
    python scripts/torch_coverage.py --json   # the walk as JSON on stdout

``walk()`` needs torch; everything else reads the JSON it wrote, so the site build
(``scripts/coverage_page.py``, run by mkdocs-gen-files) needs no torch. A name counts
as implemented when sitp has the same dotted name: ``torch.nn.functional.gelu`` is
implemented when ``sitp.nn.functional.gelu`` exists. ``tests/test_torch_coverage.py``
re-walks the installed torch and fails when the JSON is stale.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "api" / "torch-names.json"

# The namespaces walked, in the page's order. "torch.Tensor" is a class: its attributes.
NAMESPACES = [
    "torch", "torch.Tensor", "torch.nn", "torch.nn.functional", "torch.nn.init",
    "torch.optim", "torch.optim.lr_scheduler", "torch.utils.data", "torch.autograd",
    "torch.linalg",
]


def _kind(obj) -> str:
    if isinstance(obj, types.ModuleType):
        return "module"
    if inspect.isclass(obj):
        return "class"
    if isinstance(obj, (property, types.GetSetDescriptorType, types.MemberDescriptorType)):
        return "attribute"
    if callable(obj):
        return "function"
    return "attribute"


def _public(ns: str, obj) -> dict[str, str]:
    """A namespace's public names and their kinds: ``__all__`` where the module declares
    it (plus its public submodules, which scripts import by dotted path); otherwise every
    name not starting with ``_`` that torch defines (not typing helpers, imported
    modules, or docstring fragments)."""
    if ns == "torch.Tensor":
        return {n: _kind(inspect.getattr_static(obj, n)) for n in dir(obj) if not n.startswith("_")}
    names = {}
    declared = getattr(obj, "__all__", None)
    for n in dir(obj):
        if n.startswith("_"):
            continue
        try:
            v = getattr(obj, n)
        except AttributeError:
            continue
        if isinstance(v, types.ModuleType):
            if v.__name__ == f"{ns}.{n}":
                names[n] = "module"
            continue
        if declared is not None:
            if n in declared:
                names[n] = _kind(v)
            continue
        module = getattr(v, "__module__", None) if (callable(v) or inspect.isclass(v)) else None
        if not isinstance(module, str) or not module.startswith("torch"):
            continue
        if module == "torch._jit_internal" or (n == "Tensor" and ns != "torch"):
            continue
        names[n] = _kind(v)
    if declared is not None:  # a declared name that dir() misses
        for n in declared:
            if n not in names and not n.startswith("_") and hasattr(obj, n):
                names[n] = _kind(getattr(obj, n))
    return dict(sorted(names.items()))


def resolve(dotted: str):
    """The object at a dotted name (a module, or an attribute of one), or None."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            try:
                obj = getattr(obj, p)
            except AttributeError:
                return None
        return obj
    return None


def walk() -> dict:
    """PyTorch's public names per namespace, from the installed torch."""
    import torch

    return {
        "torch_version": torch.__version__.split("+")[0],
        "namespaces": {ns: _public(ns, resolve(ns)) for ns in NAMESPACES},
    }


def load() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


def sitp_name(torch_name: str) -> str:
    return "sitp" + torch_name[len("torch"):]


def coverage(data: dict) -> dict[str, dict[str, bool]]:
    """For each namespace: {name: whether sitp has the same dotted name}."""
    out = {}
    for ns, names in data["namespaces"].items():
        target = resolve(sitp_name(ns))
        out[ns] = {n: target is not None and _has(target, n) for n in names}
    return out


def _has(obj, name: str) -> bool:
    try:
        inspect.getattr_static(obj, name)
        return True
    except AttributeError:
        return hasattr(obj, name)


def render(data: dict) -> str:
    """The generated part of the coverage page (Markdown)."""
    cov = coverage(data)
    lines = ["## Summary", "",
             f"Against PyTorch {data['torch_version']}. A name counts when sitp has it under "
             "the same dotted path; what it accepts is checked by "
             "`tests/test_torch_signatures.py`.", "",
             "| namespace | sitp | PyTorch | share |", "|---|---:|---:|---:|"]
    total_have = total = 0
    for ns, names in cov.items():
        have = sum(names.values())
        total_have, total = total_have + have, total + len(names)
        share = f"{100 * have / len(names):.0f}%" if names else "-"
        anchor = ns.replace(".", "").lower()
        lines.append(f"| [`{ns}`](#{anchor}) | {have} | {len(names)} | {share} |")
    lines += [f"| all | {total_have} | {total} | {100 * total_have / total:.0f}% |", ""]
    for ns, names in cov.items():
        kinds = data["namespaces"][ns]
        have = [n for n, ok in names.items() if ok]
        missing = [n for n, ok in names.items() if not ok]
        lines += [f"## `{ns}` {{#{ns.replace('.', '').lower()}}}", "",
                  f"{len(have)} of {len(names)} names are in `{sitp_name(ns)}`.", ""]
        if have:
            lines += [f'??? success "In sitp ({len(have)})"', "", "    " + _names(have, kinds), ""]
        if missing:
            lines += [f'??? note "Not in sitp ({len(missing)})"', "", "    " + _names(missing, kinds), ""]
    return "\n".join(lines) + "\n"


def _names(names, kinds) -> str:
    mark = {"class": "", "function": "()", "module": " (module)", "attribute": ""}
    return ", ".join(f"`{n}{mark.get(kinds[n], '')}`" for n in names)


def summary(data: dict) -> str:
    cov = coverage(data)
    return "\n".join(f"{ns:28} {sum(v.values()):4} / {len(v):4}" for ns, v in cov.items())


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    data = walk()
    if "--json" in argv:  # to stdout (tests/test_torch_coverage.py walks in a fresh process)
        print(json.dumps(data, indent=1))
        return 0
    if "--print" not in argv:
        DATA.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        print(f"wrote {DATA.relative_to(ROOT)}")
    print(summary(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
