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
ORDER = ("", "io", "format", "read", "write", "txn", "ops|admin", "facade|worker")
CORE = Path(__file__).resolve().parents[2] / "airflow_provider_lance" / "namespace"
PREFIX = "airflow_provider_lance.namespace"


def _floor(module: str) -> int:
    """The ORDER index of a dotted module path under namespace/ ('' for the root modules)."""
    head = (
        module.split(".")[0]
        if "." in module
        else (module if module in ("facade", "worker") else "")
    )
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


def test_outer_packages_use_the_public_api() -> None:
    """Outside the core, only the public API, `errors` and `worker` (the internal interface of
    the provider's own layers: Spark executors, the CLI, operators that read rows) are imported."""
    allowed = {"errors", "worker"}
    wrong = []
    package = CORE.parent
    for path in sorted(package.rglob("*.py")):
        if CORE in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            modules = []
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            for name in modules:
                if not name.startswith(PREFIX + "."):
                    continue
                inner = name[len(PREFIX) + 1 :]
                if inner in allowed:
                    continue
                wrong.append(f"{path.relative_to(package.parent)}:{node.lineno} -> {name}")
    assert not wrong, (
        "import the public API (airflow_provider_lance.namespace) instead:\n" + "\n".join(wrong)
    )


def test_every_public_name_resolves() -> None:
    """The lazy exports of the public API name modules that exist after every move."""
    import airflow_provider_lance.namespace as api

    assert sorted(api.__all__) == sorted(api._EXPORTS)
    for name in api.__all__:
        assert getattr(api, name) is not None, name
