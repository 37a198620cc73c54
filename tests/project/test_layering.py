"""The namespace core imports neither Airflow nor Spark (executors and scripts rely on it)."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


def test_core_imports_no_airflow_or_spark() -> None:
    code = (
        "import sys, airflow_provider_lance.namespace as ns\n"
        "ns.PartitionedNamespace\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


#: The one module that queries ``__manifest`` rows (its ManifestView), under namespace/.
MANIFEST_MODULE = "format/manifest.py"
#: Lance calls that read (or delete) rows, and the only writers of a filter string.
_ROW_QUERIES = frozenset({"to_table", "to_batches", "scanner", "count_rows", "take", "delete"})
_FILTER_WRITERS = frozenset({"ids_filter", "_sql_literal", "sql_literal"})
_MANIFEST_COLUMNS = frozenset({"OBJECT_ID", "OBJECT_TYPE", "CLAIM", "READ_VERSION", "LOCATION"})


def _opens_manifest(node: ast.AST) -> bool:
    """``<...>manifest.open(...)``, ``open_version(...)``, ``<...>.last_swapped``, a
    ``.dataset`` or a view's ``._ds``: an expression giving a raw ``__manifest`` dataset."""
    if isinstance(node, ast.Attribute):
        return node.attr in ("last_swapped", "dataset", "_ds")
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id == "open_version"
    if isinstance(func, ast.Attribute) and func.attr == "open":
        owner = func.value
        name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        return name.lower().endswith("manifest")
    return False


def raw_manifest_queries(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` of every raw ``__manifest`` query in a module: a row query on a
    raw dataset (or on a name bound to one anywhere in the module: conservative), a
    filter-string writer used, or an f-string of SQL on a ``__manifest`` column."""
    tree = ast.parse(source)
    raw: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.NamedExpr) and _opens_manifest(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            raw.update(t.id for t in targets if isinstance(t, ast.Name))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            is_raw = _opens_manifest(receiver) or (
                isinstance(receiver, ast.Name) and receiver.id in raw
            )
            if is_raw and (
                node.func.attr in _ROW_QUERIES or any(k.arg == "filter" for k in node.keywords)
            ):
                found.append((node.lineno, f"{ast.unparse(node.func)}(...)"))
        elif isinstance(node, ast.Name) and node.id in _FILTER_WRITERS:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names if a.name in _FILTER_WRITERS]
            found.extend((node.lineno, f"import {name}") for name in names)
        elif isinstance(node, ast.JoinedStr) and _is_manifest_sql(node):
            found.append((node.lineno, f"a filter string {ast.unparse(node)}"))
    return sorted(set(found))


def _is_manifest_sql(text: ast.JoinedStr) -> bool:
    """An f-string naming a ``__manifest`` column in SQL (not an error message naming one)."""
    names = {n.id for n in ast.walk(text) if isinstance(n, ast.Name)}
    words = "".join(str(c.value) for c in text.values if isinstance(c, ast.Constant))
    sql = ("=", " IN ", " IS ", "starts_with(", " LIKE ")
    return bool(names & _MANIFEST_COLUMNS) and any(s in words for s in sql)


def test_manifest_queried_by_name() -> None:
    """Only manifest.py (its ManifestView) queries ``__manifest`` rows; everything else asks
    a named question, so what a leaf, a transaction row or a claim is is written once."""
    package = Path(__file__).resolve().parents[2] / "airflow_provider_lance"
    bad = []
    for path in sorted(package.rglob("*.py")):
        if path == package / "namespace" / MANIFEST_MODULE:
            continue
        for line, what in raw_manifest_queries(path.read_text()):
            bad.append(f"{path.relative_to(package.parent)}:{line}: {what}")
    assert not bad, "query __manifest through a ManifestView method instead:\n" + "\n".join(bad)


def test_a_raw_manifest_query_is_found() -> None:
    """The check above sees each kind of raw query (it would pass vacuously otherwise)."""
    source = """
def leaves(ctx, state):
    ds = ctx.manifest.open(3)
    a = ds.to_table(columns=["object_id"])
    b = state.view._ds.to_table()
    c = self._manifest.open().scanner(filter="x")
    d = ctx.manifest.latest().leaf_rows(["object_id"])  # named: fine
    e = leaf.to_table(filter=f"{other} = 1")  # a leaf table: fine
    return ids_filter(["a"]), f"{CLAIM} IS NOT NULL"
"""
    found = [line for line, _ in raw_manifest_queries(source)]
    assert found == [4, 5, 6, 9, 9]


# The core's sub-packages, lowest first: a module may import only its own package and those
# to its left. ops and admin are siblings: neither imports the other.
ORDER = ("", "io", "format", "read", "write", "txn", "ops|admin", "facade|distributed")
#: Modules at the core's root that sit on the top floor (the others are on the lowest).
TOP_MODULES = ("facade", "distributed")
CORE = Path(__file__).resolve().parents[2] / "airflow_provider_lance" / "namespace"
PREFIX = "airflow_provider_lance.namespace"


def _floor(module: str) -> int:
    """The ORDER index of a dotted module path under namespace/ ('' for the root modules)."""
    head = module.split(".")[0] if "." in module else (module if module in TOP_MODULES else "")
    for index, floor in enumerate(ORDER):
        if head in floor.split("|"):
            return index
    raise AssertionError(f"namespace/{module.replace('.', '/')} is in no floor of ORDER")


def _core_imports() -> Iterator[tuple[str, int, str]]:
    """(importing module, line, imported module) for every import inside namespace/."""
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        module = ".".join(parts)
        package = ".".join(rel.parts[:-1])
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = [b for b in base if b]
                    target = ".".join([*base, *(node.module.split(".") if node.module else [])])
                    names = (
                        [target + "." + a.name for a in node.names] if not node.module else [target]
                    )
                elif node.module and node.module.startswith(PREFIX + "."):
                    names = [node.module[len(PREFIX) + 1 :]]
                else:
                    continue
            elif isinstance(node, ast.Import):
                names = [
                    a.name[len(PREFIX) + 1 :] for a in node.names if a.name.startswith(PREFIX + ".")
                ]
            else:
                continue
            for name in names:
                if name:
                    yield module or "__init__", node.lineno, name


def test_subpackages_import_one_way() -> None:
    wrong = []
    for module, line, target in _core_imports():
        if module == "__init__":
            continue  # the public API re-exports from every floor
        source_pkg = module.split(".")[0] if "." in module else ""
        target_pkg = target.split(".")[0] if "." in target else ""
        if source_pkg == target_pkg and source_pkg:
            continue
        if _floor(target) > _floor(module) or {source_pkg, target_pkg} == {"ops", "admin"}:
            wrong.append(f"namespace/{module.replace('.', '/')}.py:{line} -> {target}")
    assert not wrong, "imports against the order " + " < ".join(ORDER) + ":\n" + "\n".join(wrong)


#: Modules of the core that code outside it may import besides the package itself.
PUBLIC_MODULES = ("errors", "testing")


def _imported(node: ast.AST, package: str) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of an import statement in a module of ``package`` (relative
    imports resolved; ``names`` empty for ``import module``)."""
    if isinstance(node, ast.Import):
        return [(a.name, []) for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    module = node.module or ""
    if node.level:
        parts = package.split(".")
        base = parts[: len(parts) - node.level + 1]
        module = ".".join([*base, *([module] if module else [])])
    return [(module, [a.name for a in node.names])]


def non_public_imports(source: str, package: str, public: set[str]) -> list[tuple[int, str]]:
    """``(line, what)`` of every import in a module of ``package`` (outside the core) of a
    core name that is not public: public are the names of the package's ``__all__`` and
    the modules :data:`PUBLIC_MODULES`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for module, names in _imported(node, package):
            if module == PREFIX:
                found += [(node.lineno, n) for n in names if n not in public | set(PUBLIC_MODULES)]
            elif module.startswith(PREFIX + "."):
                inner = module[len(PREFIX) + 1 :]
                if inner not in PUBLIC_MODULES:
                    found.append((node.lineno, module))
    return found


def test_outer_packages_use_the_public_api() -> None:
    """Outside the core, only the public API (``__all__``, what the README and docs/
    document), its ``errors`` and its ``testing`` failpoints are imported."""
    import airflow_provider_lance.namespace as api

    public = set(api.__all__)
    wrong = []
    package = CORE.parent
    for path in sorted(package.rglob("*.py")):
        if CORE in path.parents or path.parent == CORE:
            continue
        rel = path.relative_to(package.parent).with_suffix("")
        dotted = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        pkg = dotted if rel.name == "__init__" else dotted.rpartition(".")[0]
        for line, what in non_public_imports(path.read_text(), pkg, public):
            wrong.append(f"{path.relative_to(package.parent)}:{line} -> {what}")
    assert not wrong, (
        "import the public API (airflow_provider_lance.namespace) instead, or give what is "
        "needed a public, documented home:\n" + "\n".join(wrong)
    )


def test_a_non_public_import_is_found() -> None:
    """The check above sees each way of reaching inside the core (relative ones included)."""
    source = """
from airflow_provider_lance.namespace import PartitionedNamespace, TXN_DIR
from airflow_provider_lance.namespace import errors, testing
from airflow_provider_lance.namespace.errors import StaleStage
from airflow_provider_lance.namespace.testing import failpoint
from airflow_provider_lance.namespace.read.scan import open_leaf
import airflow_provider_lance.namespace.txn.store
from ..namespace.format import schema
from ..namespace import ScanPlan, read_json
from . import reader
"""
    found = non_public_imports(
        source, "airflow_provider_lance.spark", {"PartitionedNamespace", "ScanPlan"}
    )
    assert found == [
        (2, "TXN_DIR"),
        (6, PREFIX + ".read.scan"),
        (7, PREFIX + ".txn.store"),
        (8, PREFIX + ".format"),
        (9, "read_json"),
    ]


def import_cycles(sources: dict[str, str]) -> list[list[str]]:
    """The import cycles among ``sources`` (dotted module name -> its text; a package
    under its own name, its ``__init__`` marked by a trailing ``.__init__``): every set of
    two or more modules that import each other, directly or not. Any import counts
    (inside functions, under ``TYPE_CHECKING``): each is a dependency of the code."""
    modules = {m.removesuffix(".__init__"): m.endswith(".__init__") for m in sources}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, text in sources.items():
        module = name.removesuffix(".__init__")
        package = module if modules[module] else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(text)):
            for target, names in _imported(node, package):
                found = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
                if not found and target in modules:
                    found = [target]
                graph[module].update(t for t in found if t != module)
    return _strongly_connected(graph)


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of ``graph`` with more than one node, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(out)


def _package_sources() -> dict[str, str]:
    package = CORE.parent
    out = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        out[".".join(rel.parts)] = path.read_text()
    return out


def test_no_import_cycles() -> None:
    cycles = import_cycles(_package_sources())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_an_import_cycle_is_found() -> None:
    """The check sees cycles through relative, package, function-level and type-only
    imports, and nothing where imports go one way."""
    sources = {
        "pkg.__init__": "",
        "pkg.a": "from . import b\n",
        "pkg.b": "def f():\n    from pkg.c import x\n",
        "pkg.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\n",
        "pkg.d": "import pkg.e\n",
        "pkg.e": "from pkg import f\n",
        "pkg.f": "from .sub import g\n",
        "pkg.sub.__init__": "",
        "pkg.sub.g": "from ..f import z\n",
        "pkg.h": "from pkg.a import b\nimport os\n",
    }
    assert import_cycles(sources) == [["pkg.a", "pkg.b", "pkg.c"], ["pkg.f", "pkg.sub.g"]]


def test_every_public_name_resolves() -> None:
    """The lazy exports of the public API name modules that exist after every move, and
    the names type checkers see (imported under TYPE_CHECKING) are exactly those."""
    import airflow_provider_lance.namespace as api

    assert sorted(api.__all__) == sorted(api._EXPORTS)
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    typed = {
        alias.asname or alias.name: (node.module or "")
        for node in ast.walk(ast.parse((CORE / "__init__.py").read_text()))
        if isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names
    }
    assert typed == api._EXPORTS
