"""The package's layout (ARCHITECTURE.md, docs/layout.md): imports go one way, down the layers.

Three checks, each printing what it found (``pytest -s tests/test_layout.py`` shows it):

* imports inside functions ("late" imports) are only those of optional or slow heavy
  dependencies, each with a ``# late: <reason>`` comment on its line;
* the import graph of ``src/sitp`` (top-level and late imports) has no circle of more
  than three modules;
* the import-linter contracts of pyproject.toml (``lint-imports``) hold.

The graph is read from the sources with :mod:`ast`; nothing is imported.
"""

from __future__ import annotations

import ast
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PACKAGE = SRC / "sitp"

#: What may be imported inside a function: optional dependencies, and slow ones that
#: only some calls need. ``sitp.kernels.cuda`` (the device backend) imports numba.cuda.
LATE_ALLOWED = (
    "numba.cuda",
    "numba_cuda",  # optional: without it numba's own CUDA target answers
    "sitp.kernels.cuda",
    "matplotlib",
    "torch",
    "safetensors",
    "plotext",
    "cupy",
    "onnx",
    "onnxruntime",
)
#: (module, import): late imports allowed in one module only. sitp.cuda reads numba's
#: config after it has chosen the simulator (NUMBA_ENABLE_CUDASIM), which numba reads
#: when it is first imported.
LATE_ALLOWED_IN = {
    ("sitp.cuda", "numba.config"),
    ("sitp.cuda", "numba"),
    # sitp.distributed initialises MPI in init_process_group, not when sitp is imported.
    ("sitp.distributed._c10d", "mpi4py.MPI"),
    ("sitp.distributed._c10d", "mpi4py"),
    # `python -m sitp.distributed.run` must find the launcher unimported when the package
    # (which imports spawn) is imported first: runpy warns otherwise.
    ("sitp.distributed.spawn", "sitp.distributed.run"),
}
#: The largest circle of modules that import each other.
MAX_CYCLE = 3


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache  # parsed once for the three tests that read the package's imports
def sources() -> dict[str, tuple[Path, ast.Module]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        out[module_name(path)] = (path, ast.parse(path.read_text(), str(path)))
    return out


def imported(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules
) -> list[str]:
    """The modules an import statement names: ``import a.b`` is ``a.b``; ``from a import
    b`` is ``a.b`` where that is a module, else ``a``. Relative imports are resolved."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parent = module.split(".")
        drop = node.level - 1 if is_package else node.level
        parent = parent[: len(parent) - drop] if drop else parent
        base = ".".join(parent + ([base] if base else []))
    names = [f"{base}.{alias.name}" for alias in node.names]
    sub = [n for n in names if n in modules]
    return sub + ([base] if len(sub) < len(names) else [])


@functools.cache  # walked once per module for the three tests
def imports(tree: ast.Module) -> tuple[tuple[ast.Import | ast.ImportFrom, bool], ...]:
    """(node, late) for every import statement; late: inside a function."""
    late = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            late.update(id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return tuple(
        (node, id(node) in late)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    )


def is_allowed(module: str, name: str) -> bool:
    if (module, name) in LATE_ALLOWED_IN:
        return True
    return any(name == a or name.startswith(a + ".") for a in LATE_ALLOWED)


def late_imports():
    """[(module, line, names, source line)] of every import inside a function."""
    srcs = sources()
    out = []
    for module, (path, tree) in srcs.items():
        lines = path.read_text().splitlines()
        for node, late in imports(tree):
            if late:
                names = imported(node, module, path.name == "__init__.py", srcs)
                if isinstance(node, ast.ImportFrom):  # from numba import cuda: numba.cuda
                    names += [f"{node.module}.{a.name}" for a in node.names if node.module]
                out.append((module, node.lineno, names, lines[node.lineno - 1].strip()))
    return out


def test_late_imports_are_only_the_optional_heavy_ones():
    found = late_imports()
    print(f"\n{len(found)} imports inside functions:")
    bad = []
    for module, line, names, text in found:
        print(f"  {module}:{line}: {text}")
        ok = any(is_allowed(module, n) for n in names)
        reason = text.partition("# late:")[2].strip()
        if not ok:
            bad.append(
                f"{module}:{line}: {text}  (not an optional heavy dependency: "
                f"import it at the top of the module)"
            )
        elif not reason:
            bad.append(f"{module}:{line}: {text}  (say why on the line: `# late: <reason>`)")
    assert not bad, "late imports that should not be:\n" + "\n".join(bad)


def import_graph() -> dict[str, set[str]]:
    """module -> the sitp modules it imports (at the top or inside functions)."""
    srcs = sources()
    graph = {m: set() for m in srcs}
    for module, (path, tree) in srcs.items():
        for node, _ in imports(tree):
            for name in imported(node, module, path.name == "__init__.py", srcs):
                while name and name not in srcs and "." in name:
                    name = name.rpartition(".")[0]  # sitp.x.attr: the module sitp.x
                if name in srcs and name != module:
                    graph[module].add(name)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the graph's strongly connected components."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    out.append(sorted(component))
    return out


def test_strongly_connected_components_tiny():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert sorted(strongly_connected(graph)) == [["a", "b", "c"], ["d"], ["e"]]


def test_no_import_cycle_longer_than_three_modules():
    components = sorted(strongly_connected(import_graph()), key=len, reverse=True)
    cycles = [c for c in components if len(c) > 1]
    print(f"\nthe largest import cycle has {len(components[0])} module(s): {components[0]}")
    for c in cycles[1:]:
        print(f"  also: {c}")
    assert len(components[0]) <= MAX_CYCLE, (
        f"{len(components[0])} modules import each other in a circle: {components[0]}"
    )


def test_the_layers_do_not_import_the_root_package():
    """Below the applications, no module imports ``sitp`` itself (the root imports them:
    that would be a circle through everything). Applications may, as a script does."""
    applications = (
        "sitp.models",
        "sitp.data",
        "sitp.train",
        "sitp.tokenizers",
        "sitp.posttrain",
        "sitp.bench",
        "sitp.examples",
        "sitp.exercises",
        "sitp._config",
        "sitp.__main__",
    )
    graph = import_graph()
    users = sorted(m for m, deps in graph.items() if "sitp" in deps)
    print("\nmodules that import the root package:", users)
    low = [m for m in users if not any(m == a or m.startswith(a + ".") for a in applications)]
    assert not low, f"import the submodule you need, not `sitp`: {low}"
    assert not any(m in graph["sitp"] for m in users), "the root imports a module that imports it"


def test_import_contracts_hold():
    script = Path(sys.executable).with_name("lint-imports")
    command = [str(script)] if script.exists() else [shutil.which("lint-imports") or ""]
    if not command[0]:
        why = "lint-imports is not installed (pip install import-linter; the test extra)"
        if os.environ.get("CI", "").strip().lower() in ("true", "1"):
            pytest.fail(f"CI=true: {why}")  # make test installs it: never skip there
        pytest.skip(why)
    run = subprocess.run([*command, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    print(run.stdout[-4000:], run.stderr[-2000:])
    assert run.returncode == 0, "lint-imports: a contract is broken\n" + run.stdout[-4000:]
