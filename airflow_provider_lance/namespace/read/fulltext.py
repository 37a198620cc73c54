"""Full-text search across partitions, ranked with the term statistics of all of them.

Lance ranks a full-text query by BM25 over one table's statistics: a term weighs
IDF = ln((N - n + 0.5) / (n + 0.5) + 1), n of the table's N documents holding it. Leaves
hold different shares of a term, so their own scores do not compare. Each leaf's query is
rewritten term by term with ``MatchQuery`` boosts IDF_total / IDF_leaf (n and N summed over
the searched leaves), so a leaf scores its rows as one table of all the searched rows would,
but for the document-length normalisation (each leaf keeps its own average length). A
phrase, which takes no boost, is kept as a MUST clause and its terms are added as boosted
SHOULD clauses: the leaf's scores are then c times the global ones and divided by c here.
A multi-column match (a string on several indexed columns) keeps each row's best column:
searched column by column, it is exact; nested in a boolean query, each column is weighed
by its words' summed IDFs (exact for one word). A fuzzy word counts as one word.

pylance's query objects show nothing of their arguments (no attributes, no pickle): they
are read from the Debug text Lance prints of a query in a plan (pylance fact:
test_fact_a_query_plan_shows_the_arguments_of_a_full_text_query).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeAlias

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance.query import (
    BooleanQuery,
    BoostQuery,
    DocumentGranularity,
    FullTextOperator,
    FullTextQuery,
    FullTextQueryType,
    MatchQuery,
    MultiMatchQuery,
    Occur,
    PhraseQuery,
)

from airflow_provider_lance.namespace.errors import InvalidArgumentError, SchemaError
from airflow_provider_lance.namespace.format.schema import NamespaceSchema
from airflow_provider_lance.namespace.io.storage import first_line

from .leaf import ROW_ID, Leaf
from .remembered import KeptPerStorage

TextQueryLike: TypeAlias = "str | Mapping[str, Any] | FullTextQuery"


# -- the query, as a tree of plain values --------------------------------------------------
@dataclass(frozen=True)
class Match:
    column: str | None  # None: every column with an inverted index
    terms: str
    boost: float = 1.0
    fuzziness: int | None = 0  # None: by term length
    max_expansions: int = 50
    operator: str = "OR"
    prefix_length: int = 0
    granularity: str | None = None

    def words(self) -> Counter[str]:
        """The query's words (split at white space; Lance tokenizes each as it does the
        whole), with how often each is given."""
        return Counter(self.terms.split())

    def term(self, word: str) -> Term:
        column = self.column or ""
        return Term(column, word, self.fuzziness, self.max_expansions, self.prefix_length)


@dataclass(frozen=True)
class Phrase:
    column: str
    terms: str
    slop: int = 0
    granularity: str | None = None

    def words(self) -> Counter[str]:
        return Counter(self.terms.split())

    def term(self, word: str) -> Term:
        return Term(self.column, word, 0, 50, 0)


@dataclass(frozen=True)
class Multi:  # each column scored on its own, the best one counts
    matches: tuple[Match, ...]


@dataclass(frozen=True)
class Boolean:
    must: tuple[Query, ...] = ()
    should: tuple[Query, ...] = ()
    must_not: tuple[Query, ...] = ()


@dataclass(frozen=True)
class Boosting:
    positive: Query
    negative: Query
    negative_boost: float


Query: TypeAlias = "Match | Phrase | Multi | Boolean | Boosting"


@dataclass(frozen=True)
class Term:
    """What a document count is of: one word in one column, matched as the query does."""

    column: str
    word: str
    fuzziness: int | None
    max_expansions: int
    prefix_length: int


def scored(query: Query) -> Iterable[Match | Phrase]:
    """The matches and phrases whose terms score (not those that only exclude rows)."""
    if isinstance(query, (Match, Phrase)):
        yield query
    elif isinstance(query, Multi):
        yield from query.matches
    elif isinstance(query, Boolean):
        for part in (*query.must, *query.should):
            yield from scored(part)
    else:  # the negative's score is subtracted: it counts too
        yield from scored(query.positive)
        yield from scored(query.negative)


def columns_of(query: Query) -> set[str]:
    if isinstance(query, (Match, Phrase)):
        return {query.column} if query.column else set()
    if isinstance(query, Multi):
        return {c for m in query.matches for c in columns_of(m)}
    if isinstance(query, Boolean):
        return {c for q in (*query.must, *query.should, *query.must_not) for c in columns_of(q)}
    return columns_of(query.positive) | columns_of(query.negative)


# -- statistics ----------------------------------------------------------------------------
@dataclass
class Counts:
    """Documents (non-NULL values) per column and documents holding each term."""

    docs: dict[str, int] = field(default_factory=dict)
    matches: dict[Term, int] = field(default_factory=dict)

    def idf(self, term: Term) -> float | None:
        """Lance's BM25 IDF of ``term``; None if no document holds it."""
        n, total = self.matches.get(term, 0), self.docs.get(term.column, 0)
        if n <= 0 or total <= 0:
            return None
        return math.log((total - n + 0.5) / (n + 0.5) + 1.0)

    def add(self, other: Counts) -> None:
        for c, n in other.docs.items():
            self.docs[c] = self.docs.get(c, 0) + n
        for t, n in other.matches.items():
            self.matches[t] = self.matches.get(t, 0) + n


@dataclass(frozen=True)
class LeafStats:
    """A leaf's counts as Lance ranks it (``local``) and as they add to the total."""

    local: Counts
    total: Counts


def leaf_stats(leaf: Leaf, terms: Sequence[Term], prefilter: bool) -> LeafStats | None:
    """Counts of ``terms`` in ``leaf``; a leaf searched without an index under a prefilter
    is ranked by Lance over the rows that pass it, so its local counts are those."""
    total = _counts(leaf, terms, None)
    indexed = set(inverted_columns(leaf.table))
    flat = {t.column for t in terms if leaf.column(t.column) not in indexed}
    if not (prefilter and flat and leaf.residual is not None):
        return LeafStats(total, total)
    local = leaf.with_filter(lambda sql: _counts(leaf, [t for t in terms if t.column in flat], sql))
    if local is None:
        return None
    merged = Counts({**total.docs, **local.docs}, {**total.matches, **local.matches})
    return LeafStats(merged, total)


def _counts(leaf: Leaf, terms: Sequence[Term], filter_sql: str | None) -> Counts:
    counts = Counts()
    for column in sorted({t.column for t in terms}):
        docs = functools.partial(_docs, leaf, column, filter_sql)
        counts.docs[column] = _kept(leaf, filter_sql, column, docs)
    for term in terms:
        matches = functools.partial(_matches, leaf, term, filter_sql)
        counts.matches[term] = _kept(leaf, filter_sql, term, matches)
    return counts


#: Document counts of leaf versions (which never change), per storage.
_COUNTS: KeptPerStorage[tuple[str, int, Any], int] = KeptPerStorage(1 << 16)


def _kept(leaf: Leaf, filter_sql: str | None, what: Any, count: Callable[[], int]) -> int:
    """``count()``, kept for the leaf's pinned version (a prefiltered count is not kept)."""
    version = leaf.task.partition.read_version
    if version is None or filter_sql is not None:
        return count()
    key = (leaf.task.partition.location, version, what)
    return _COUNTS.get(leaf.task.scan.storage, key, count)


def _docs(leaf: Leaf, column: str, filter_sql: str | None) -> int:
    """The leaf's documents in ``column`` (its non-NULL values), as Lance's BM25 counts them."""
    where = f"{_quoted(leaf.column(column) or column)} IS NOT NULL"
    if filter_sql is not None:
        where += f" AND ({filter_sql})"
    return int(leaf.table.count_rows(filter=where))


def _matches(leaf: Leaf, term: Term, filter_sql: str | None) -> int:
    """The leaf's documents holding ``term`` (pylance's ``count_rows(full_text_query=)``
    counts every row: the matching row ids are read instead)."""
    query = MatchQuery(
        term.word,
        leaf.column(term.column) or term.column,
        fuzziness=term.fuzziness,  # type: ignore[arg-type]
        max_expansions=term.max_expansions,
        prefix_length=term.prefix_length,
    )
    rows = leaf.table.to_table(
        columns=[],
        with_row_id=True,
        full_text_query=query,
        filter=filter_sql,
        prefilter=filter_sql is not None,
        disable_scoring_autoprojection=True,
    )
    return int(rows.num_rows)


def inverted_columns(dataset: lance.LanceDataset) -> list[str]:
    """The leaf columns with a full-text (inverted) index."""
    return [
        name
        for index in dataset.describe_indices()
        if "Inverted" in index.type_url
        for name in index.field_names
    ]


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# -- the query a leaf runs -----------------------------------------------------------------
@dataclass(frozen=True)
class Rewrite:
    """Builds one leaf's pylance query: its terms weighed by the total statistics, every
    score ``scale`` times the global one, its columns under the leaf's names."""

    local: Counts
    total: Counts
    names: Callable[[str], str]
    scale: float = 1.0

    def ratio(self, term: Term) -> float | None:
        """IDF_total / IDF_leaf (None: the leaf or the total holds no document with it)."""
        here, there = self.local.idf(term), self.total.idf(term)
        return None if here is None or there is None else there / here

    def build(self, query: Query) -> FullTextQuery | None:
        """The leaf's query (None: no row of the leaf can match)."""
        if isinstance(query, Match):
            return self._match(query)
        if isinstance(query, Phrase):
            return self._phrase(query)
        if isinstance(query, Multi):
            return self._multi(query)
        if isinstance(query, Boolean):
            return self._boolean(query)
        positive, negative = self.build(query.positive), self.build(query.negative)
        if positive is None or negative is None:
            return positive
        return BoostQuery(positive, negative, negative_boost=query.negative_boost)

    def _match(self, query: Match) -> FullTextQuery | None:
        occur = Occur.MUST if query.operator == "AND" else Occur.SHOULD
        clauses: list[tuple[Occur, FullTextQuery]] = []
        for word, times in query.words().items():
            term = query.term(word)
            if self.total.matches.get(term, 0) == 0:
                continue  # in no searched row (or a stop word): Lance drops it too
            ratio = self.ratio(term)
            if ratio is None:
                if occur is Occur.MUST:
                    return None
                continue
            boost = self.scale * query.boost * times * ratio
            clauses.append((occur, _match(query, word, self.names, boost)))
        return _combined(clauses)

    def _phrase(self, query: Phrase) -> FullTextQuery | None:
        clauses: list[tuple[Occur, FullTextQuery]] = [(Occur.MUST, plain(query, self.names))]
        for word, times in query.words().items():
            term = query.term(word)
            if self.total.matches.get(term, 0) == 0:
                continue
            ratio = self.ratio(term)
            if ratio is None:
                return None  # a word of the phrase is in no row of the leaf
            boost = times * (self.scale * ratio - 1.0)
            if boost > 0:
                words = Match(query.column, word, granularity=query.granularity)
                clauses.append((Occur.SHOULD, _match(words, word, self.names, boost)))
        return BooleanQuery(clauses) if len(clauses) > 1 else clauses[0][1]

    def _multi(self, query: Multi) -> FullTextQuery | None:
        kept, boosts = [], []
        for match in query.matches:
            pairs = [
                (times * here, times * there)
                for word, times in match.words().items()
                if (here := self.local.idf(match.term(word))) is not None
                and (there := self.total.idf(match.term(word))) is not None
            ]
            if pairs:  # (nested only) exact for one word, else weighed by summed IDFs
                kept.append(self.names(match.column or ""))
                ratio = sum(t for _, t in pairs) / sum(h for h, _ in pairs)
                boosts.append(self.scale * match.boost * ratio)
        if not kept:
            return None
        first = query.matches[0]
        operator = FullTextOperator(first.operator)
        return MultiMatchQuery(first.terms, kept, boosts=boosts, operator=operator)

    def _boolean(self, query: Boolean) -> FullTextQuery | None:
        clauses: list[tuple[Occur, FullTextQuery]] = []
        for part in query.must:
            built = self.build(part)
            if built is None:
                return None
            clauses.append((Occur.MUST, built))
        clauses += [(Occur.SHOULD, b) for p in query.should if (b := self.build(p)) is not None]
        if not clauses:
            return None
        clauses += [(Occur.MUST_NOT, plain(p, self.names)) for p in query.must_not]
        return BooleanQuery(clauses)


def leaf_rewrite(query: Query, stats: LeafStats, names: Callable[[str], str]) -> Rewrite:
    """The rewrite of ``query`` for a leaf; its scale keeps every phrase boost >= 0."""
    rewrite = Rewrite(stats.local, stats.total, names)
    ratios = [
        r
        for part in scored(query)
        if isinstance(part, Phrase)
        for word in part.words()
        if (r := rewrite.ratio(part.term(word))) is not None
    ]
    scale = max([1.0, *(1.0 / r for r in ratios)])
    return replace(rewrite, scale=scale)


def _combined(clauses: list[tuple[Occur, FullTextQuery]]) -> FullTextQuery | None:
    if not clauses:
        return None
    return clauses[0][1] if len(clauses) == 1 else BooleanQuery(clauses)


def _granularity(value: str | None) -> DocumentGranularity | None:
    return None if value is None else DocumentGranularity(value)


def _match(query: Match, words: str, names: Callable[[str], str], boost: float) -> MatchQuery:
    return MatchQuery(
        words,
        names(query.column or ""),
        boost=boost,
        fuzziness=query.fuzziness,  # type: ignore[arg-type]
        max_expansions=query.max_expansions,
        operator=FullTextOperator(query.operator),
        prefix_length=query.prefix_length,
        document_granularity=_granularity(query.granularity),
    )


def plain(query: Query, names: Callable[[str], str]) -> FullTextQuery:
    """``query`` as pylance's, unchanged but for the leaf's column names."""
    if isinstance(query, Match):
        return _match(query, query.terms, names, query.boost)
    if isinstance(query, Phrase):
        return PhraseQuery(
            query.terms,
            names(query.column),
            slop=query.slop,
            document_granularity=_granularity(query.granularity),
        )
    if isinstance(query, Multi):
        first = query.matches[0]
        return MultiMatchQuery(
            first.terms,
            [names(m.column or "") for m in query.matches],
            boosts=[m.boost for m in query.matches],
            operator=FullTextOperator(first.operator),
        )
    if isinstance(query, Boolean):
        return BooleanQuery(
            [(Occur.MUST, plain(q, names)) for q in query.must]
            + [(Occur.SHOULD, plain(q, names)) for q in query.should]
            + [(Occur.MUST_NOT, plain(q, names)) for q in query.must_not]
        )
    positive, negative = plain(query.positive, names), plain(query.negative, names)
    return BoostQuery(positive, negative, negative_boost=query.negative_boost)


# -- reading the user's query ----------------------------------------------------------------
def parse(query: Any, schema: NamespaceSchema) -> Query:
    """``query`` (a string, pylance's dict ``{"query": ..., "columns": [...]}`` or one of
    its query objects) as a tree; its columns are checked against ``schema``."""
    if isinstance(query, str):
        tree: Query = Match(None, query)
    elif isinstance(query, Mapping):
        tree = _from_dict(query)
    elif isinstance(query, FullTextQuery):
        tree = _from_object(query, schema)
    else:
        raise InvalidArgumentError(
            "full_text_query must be a string, a dict {'query': ..., 'columns': [...]} or a "
            f"lance.query object (MatchQuery, PhraseQuery, ...), got {type(query).__name__}"
        )
    for column in sorted(columns_of(tree)):
        check_text_column(schema, column)
    return tree


def _from_dict(query: Mapping[str, Any]) -> Query:
    unknown = sorted(set(query) - {"query", "columns"})
    text, columns = query.get("query"), query.get("columns")
    if unknown or not isinstance(text, str):
        raise InvalidArgumentError(
            "a full_text_query dict has 'query' (a string) and optionally 'columns' (a list "
            f"of column names); got keys {sorted(query)}"
        )
    if columns is None:
        return Match(None, text)
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns) or not columns:
        raise InvalidArgumentError(
            f"full_text_query['columns'] must be a list of column names, got {columns!r}"
        )
    return across([str(c) for c in columns], text)


def across(columns: Sequence[str], text: str) -> Query:
    """``text`` matched in ``columns`` as Lance does a string: the best column counts."""
    matches = tuple(Match(c, text) for c in columns)
    return matches[0] if len(matches) == 1 else Multi(matches)


def check_text_column(schema: NamespaceSchema, column: str) -> None:
    dtype = schema.field(column).type
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        dtype = dtype.value_type
    if not (pa.types.is_string(dtype) or pa.types.is_large_string(dtype)):
        raise SchemaError(
            f"full-text search needs a text column; {column!r} is {schema.field(column).type}"
        )


_SUPPORTED = (
    "MatchQuery, PhraseQuery, MultiMatchQuery, BooleanQuery and BoostQuery (and a string "
    "or a dict {'query': ..., 'columns': [...]})"
)


def _from_object(query: FullTextQuery, schema: NamespaceSchema) -> Query:
    if query.query_type() is FullTextQueryType.COMBINED_FIELDS:
        raise InvalidArgumentError(
            f"CombinedFieldsQuery (BM25F) is not supported across partitions; use {_SUPPORTED}"
        )
    scratch = _scratch(schema.active)
    wrapped = BooleanQuery([(Occur.SHOULD, query)])
    try:
        text = scratch.scanner(full_text_query=wrapped, limit=1).explain_plan(True)
    except (ValueError, OSError) as exc:
        named = _FIELD.search(str(exc))
        if named is not None:  # the column's own error: unknown or not text
            check_text_column(schema, named.group(1))
        raise InvalidArgumentError(f"bad full_text_query: {first_line(exc)}") from exc
    start = text.find("should=[")
    if start < 0:
        raise InvalidArgumentError(f"cannot read the full_text_query from Lance's plan: {text}")
    (node,) = DebugText(text, start + len("should=")).value()
    return _to_query(node)


#: How Lance names the column a query cannot search.
_FIELD = re.compile(r"FTS field (?:path )?'([^']+)'")


@functools.lru_cache(maxsize=8)
def _scratch(schema: pa.Schema) -> lance.LanceDataset:
    """An empty in-memory table of ``schema``: Lance plans queries against it."""
    plain_schema = pa.schema([pa.field(f.name, f.type) for f in schema])
    return lance.write_dataset(plain_schema.empty_table(), f"memory://fts-{id(schema):x}")


def _to_query(node: Any) -> Query:
    """A query from its Debug text: ``Kind(KindQuery { field: value, ... })``."""
    if not isinstance(node, Node) or len(node.args) != 1 or not isinstance(node.args[0], Node):
        raise InvalidArgumentError(f"unexpected part {node!r} in a full_text_query")
    f = node.args[0].fields
    if node.name == "Match":
        return _match_of(f)
    if node.name == "Phrase":
        granularity = _granularity_of(f.get("document_granularity"))
        return Phrase(f["column"], f["terms"], int(f.get("slop", 0)), granularity)
    if node.name == "MultiMatch":
        return Multi(tuple(_match_of(m.fields) for m in f["match_queries"]))
    if node.name == "Boolean":
        parts = {k: tuple(_to_query(q) for q in f.get(k, [])) for k in _OCCURS}
        return Boolean(parts["must"], parts["should"], parts["must_not"])
    if node.name == "Boost":
        positive, negative = _to_query(f["positive"]), _to_query(f["negative"])
        return Boosting(positive, negative, float(f["negative_boost"]))
    raise InvalidArgumentError(
        f"full-text queries of kind {node.name} are not supported across partitions; use "
        f"{_SUPPORTED}"
    )


_OCCURS = ("must", "should", "must_not")


def _match_of(f: Mapping[str, Any]) -> Match:
    return Match(
        f["column"],
        f["terms"],
        float(f.get("boost", 1.0)),
        None if f.get("fuzziness") is None else int(f["fuzziness"]),
        int(f.get("max_expansions", 50)),
        str(f.get("operator", "Or")).upper(),
        int(f.get("prefix_length", 0)),
        _granularity_of(f.get("document_granularity")),
    )


def _granularity_of(value: Any) -> str | None:
    if value is None:
        return None
    return {"Row": "row", "ListElement": "list_element"}.get(str(value), str(value).lower())


# -- Rust's Debug text -----------------------------------------------------------------------
@dataclass(frozen=True)
class Node:
    """``Name(args, key=value)`` or ``Name { key: value }`` of Rust's Debug output."""

    name: str
    args: tuple[Any, ...] = ()
    fields: Mapping[str, Any] = field(default_factory=dict)


_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)'
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<punct>[()\[\]{},:=]))"
)
_ESCAPE = re.compile(r"\\(u\{[0-9a-fA-F]+\}|.)")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}


class DebugText:
    """A reader of values in Rust's Debug notation, starting at ``pos`` of ``text``."""

    def __init__(self, text: str, pos: int = 0) -> None:
        self.text, self.pos = text, pos

    def _next(self) -> tuple[str, str]:
        found = _TOKEN.match(self.text, self.pos)
        if found is None or found.lastgroup is None:
            raise InvalidArgumentError(f"cannot read Lance's query text at {self.pos}")
        self.pos = found.end()
        return found.lastgroup, found.group(found.lastgroup)

    def _peek(self) -> str:
        found = _TOKEN.match(self.text, self.pos)
        return "" if found is None else found.group(0).strip()

    def value(self) -> Any:
        kind, token = self._next()
        if kind == "str":
            return _ESCAPE.sub(_unescape, token[1:-1])
        if kind == "num":
            return float(token) if any(c in token for c in ".eE") else int(token)
        if token == "[":
            return self._items("]")[0]
        if kind != "name":
            raise InvalidArgumentError(f"unexpected {token!r} in Lance's query text")
        return self._named(token)

    def _named(self, name: str) -> Any:
        if self._peek() == "(":
            self._next()
            args, fields = self._items(")")
            if name == "Some" and len(args) == 1:
                return args[0]
            return Node(name, tuple(args), fields)
        if self._peek() == "{":
            self._next()
            return Node(name, (), self._items("}")[1])
        return {"None": None, "true": True, "false": False, "inf": math.inf}.get(name, name)

    def _items(self, close: str) -> tuple[list[Any], dict[str, Any]]:
        args: list[Any] = []
        fields: dict[str, Any] = {}
        while self._peek() != close:
            saved = self.pos
            kind, token = self._next()
            if kind == "name" and self._peek() in ("=", ":"):
                self._next()
                fields[token] = self.value()
            else:
                self.pos = saved
                args.append(self.value())
            if self._peek() == ",":
                self._next()
        self._next()
        return args, fields


def _unescape(found: re.Match[str]) -> str:
    code = found.group(1)
    if code.startswith("u{"):
        return chr(int(code[2:-1], 16))
    return _ESCAPES.get(code, code)


# -- the search --------------------------------------------------------------------------------
MapLeaves: TypeAlias = "Callable[[Callable[[Leaf], Any], Sequence[Leaf]], list[Any]]"


class TextSearch:
    """A full-text query over many leaves, ranked by ``_score`` (descending)."""

    rank = "_score"
    descending = True

    def __init__(self, query: Any, schema: NamespaceSchema) -> None:
        self.query = parse(query, schema)
        self._stats: dict[str, LeafStats] = {}

    @property
    def columns(self) -> list[str]:
        return sorted(columns_of(self.query))

    def prepare(self, leaves: Sequence[Leaf], map_leaves: MapLeaves, prefilter: bool) -> None:
        """Count the query's terms in every leaf, and add them up."""
        if not columns_of(self.query):
            self.query = self._on_indexed_columns(leaves, map_leaves)
        columns = columns_of(self.query)
        leaves = [leaf for leaf in leaves if all(leaf.column(c) for c in columns)]
        terms = sorted(
            {part.term(w) for part in scored(self.query) for w in part.words()},
            key=lambda t: (t.column, t.word, str(t.fuzziness)),
        )
        found = map_leaves(lambda leaf: leaf_stats(leaf, terms, prefilter), leaves)
        total = Counts()
        for stats in found:
            if stats is not None:
                total.add(stats.total)
        self._stats = {
            leaf.task.object_id: LeafStats(stats.local, total)
            for leaf, stats in zip(leaves, found, strict=True)
            if stats is not None
        }

    def _on_indexed_columns(self, leaves: Sequence[Leaf], map_leaves: MapLeaves) -> Query:
        """A string without columns searches the columns with a full-text index, as Lance
        does: here, those with one in any searched leaf."""
        assert isinstance(self.query, Match)
        names = leaves[0].task.scan.namespace_schema.active.names if leaves else []

        def indexed(leaf: Leaf) -> set[str]:
            found = set(inverted_columns(leaf.table))
            return {n for n in names if leaf.column(n) in found}

        columns = sorted(set().union(*map_leaves(indexed, leaves)))
        if not columns:
            raise InvalidArgumentError(
                "a full_text_query string searches the columns with a full-text index, and "
                "no searched partition has one: name the column, e.g. "
                f"full_text_query={{'query': {self.query.terms!r}, 'columns': ['text']}} "
                "(searched without an index), or create an INVERTED index"
            )
        return across(columns, self.query.terms)

    def top(
        self, leaf: Leaf, columns: list[str], filter_sql: str | None, limit: int | None
    ) -> pa.Table | None:
        """The leaf's best ``limit`` rows (all matches for None), scored globally. A
        multi-column match is searched column by column and each row keeps its best score
        (the best ``limit`` by that are among the columns' best ``limit``)."""
        stats = self._stats.get(leaf.task.object_id)
        if stats is None:
            return None
        rewrite = leaf_rewrite(self.query, stats, lambda c: leaf.column(c) or c)
        parts = self.query.matches if isinstance(self.query, Multi) else (self.query,)
        found = []
        for part in parts:
            query = rewrite.build(part)
            if query is not None:
                found.append(self._search(leaf, query, columns, filter_sql, limit))
        if not found:
            return None
        best = found[0] if len(found) == 1 else best_per_row(found, self.rank, limit)
        scaled = pc.divide(best.column(self.rank), pa.scalar(rewrite.scale, pa.float32()))
        return best.set_column(best.schema.get_field_index(self.rank), self.rank, scaled)

    def _search(
        self,
        leaf: Leaf,
        query: FullTextQuery,
        columns: list[str],
        filter_sql: str | None,
        limit: int | None,
    ) -> pa.Table:
        return leaf.table.to_table(
            columns=[*columns, self.rank, ROW_ID],
            full_text_query=query,
            filter=filter_sql,
            prefilter=filter_sql is not None,
            limit=limit,
            with_row_id=True,
            disable_scoring_autoprojection=True,
        )


def best_per_row(tables: Sequence[pa.Table], rank: str, limit: int | None) -> pa.Table:
    """The rows of ``tables`` (one row may be in several), each once with its best
    ``rank``, best first; the first ``limit``."""
    rows = pa.concat_tables(tables)
    rows = rows.take(pc.sort_indices(rows, [(rank, "descending"), (ROW_ID, "ascending")]))
    _, first = np.unique(rows.column(ROW_ID).to_numpy(), return_index=True)
    best = rows.take(pa.array(np.sort(first)))
    return best if limit is None else best.slice(0, limit)
