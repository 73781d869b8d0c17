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

import ast
import importlib
import inspect
import json
import re
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "api" / "torch-names.json"

# The namespaces walked, in the page's order. "torch.Tensor" is a class: its attributes.
NAMESPACES = [
    "torch", "torch.Tensor", "torch.nn", "torch.nn.functional", "torch.nn.init",
    "torch.optim", "torch.optim.lr_scheduler", "torch.utils.data", "torch.autograd",
    "torch.linalg", "torch.serialization", "torch.amp", "torch.accelerator", "torch.backends",
]
# The PyTorch scripts that tests run unchanged with either library (tests/scripts/), and
# the tests that run them.
SCRIPTS = ROOT / "tests" / "scripts"
SCRIPT_TESTS = "test_torch_scripts*.py"


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


def scripts_run() -> list[dict]:
    """The scripts of tests/scripts/ that a test runs: each one's file, the tests that
    name it, the first paragraph of its docstring, and the torch names it uses."""
    tests = {t.name: t.read_text(encoding="utf-8") for t in sorted((ROOT / "tests").glob(SCRIPT_TESTS))}
    out = []
    for script in sorted(SCRIPTS.glob("*.py")):
        quoted = re.compile(r"[\"']%s(\.py)?[\"']" % re.escape(script.stem))
        by = [name for name, text in tests.items() if quoted.search(text)]
        if not by or script.name == "run_with.py":  # the runner, not a script it runs
            continue
        source = script.read_text(encoding="utf-8")
        doc = ast.get_docstring(ast.parse(source)) or ""
        uses = set(torch_names_used(source))
        for local in _local_imports(source):  # the model file a script imports
            uses |= set(torch_names_used(local.read_text(encoding="utf-8")))
        out.append({
            "script": script.name,
            "tests": by,
            "about": " ".join(doc.split("\n\n")[0].split()),
            "uses": sorted(n for n in uses if not any(m.startswith(n + ".") for m in uses)),
        })
    return out


def _local_imports(source: str) -> list[Path]:
    """The files of tests/scripts/ or tests/ that a script imports (its model.py)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        mods = []
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            mods = [node.module]
        elif isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        for m in mods:
            for folder in (SCRIPTS, SCRIPTS.parent):
                if (folder / f"{m}.py").is_file():
                    found.append(folder / f"{m}.py")
    return found


def torch_names_used(source: str) -> list[str]:
    """The dotted torch names a script reaches from its imports of torch, sorted:
    ``nn.LSTM`` after ``import torch.nn as nn`` is ``torch.nn.LSTM``. Methods called on
    tensors and modules (``x.view``) are not names of torch and are not listed."""
    tree = ast.parse(source)
    alias: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch" or a.name.startswith("torch."):
                    alias[a.asname or "torch"] = a.name if a.asname else "torch"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            for a in node.names:
                alias[a.asname or a.name] = f"{node.module}.{a.name}"
    names = set(v for v in alias.values() if v != "torch")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts, inner = [], node
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in alias:
                names.add(".".join([alias[inner.id], *reversed(parts)]))
    # keep the longest chains: torch.nn.utils.clip_grad_norm_, not also torch.nn.utils
    return sorted(n for n in names if not any(m.startswith(n + ".") for m in names))


def render_scripts(scripts: list[dict]) -> list[str]:
    """The page's section on the scripts that run unchanged, with each torch name they
    use checked against sitp."""
    used = sorted({n for s in scripts for n in s["uses"]})
    have = [n for n in used if resolve(sitp_name(n)) is not None or _resolves_as_attribute(n)]
    lines = [
        "## Scripts that run unchanged {#scripts}", "",
        f"{len(scripts)} PyTorch scripts in `tests/scripts/` are run by the tests with "
        "`torch` bound to torch and to sitp (`tests/scripts/run_with.py`), from the same "
        "weights and batches, and their losses compared step by step. Between them they "
        f"reach {len(used)} torch names from their imports ({len(have)} of them in sitp); "
        "the methods they call on tensors and modules are not counted.", "",
        "| script | what it is | torch names | run by |", "|---|---|---:|---|",
    ]
    for s in scripts:
        tests = ", ".join(f"`tests/{t}`" for t in s["tests"])
        lines.append(f"| `{s['script']}` | {s['about']} | {len(s['uses'])} | {tests} |")
    lines.append("")
    for s in scripts:
        names = ", ".join(f"`{n}`" for n in s["uses"])
        lines += [f'??? info "The torch names `{s["script"]}` uses ({len(s["uses"])})"', "",
                  "    " + names, ""]
    return lines


def _resolves_as_attribute(dotted: str) -> bool:
    head, _, last = sitp_name(dotted).rpartition(".")
    target = resolve(head)
    return target is not None and _has(target, last)


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
    lines += render_scripts(scripts_run())
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
