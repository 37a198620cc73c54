"""The index commands: ``indices`` (a table, or JSON lines), the indexes ``describe`` shows,
``create-index``, ``optimize-indices`` and ``drop-index`` (their result as one JSON
document), and bad input: exit 2 with one line saying what is wrong, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_lance import cli
from airflow_provider_lance.namespace import PartitionedNamespace
from tests.support import events

#: Runs each command (argv lists, JSON) through ``main`` in one child process: its exit code
#: and stderr, or what it raised.
RUN_EACH = """
import contextlib, io, json, sys
from airflow_provider_lance import cli
out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:
        code = f"raised {type(exc).__name__}: {exc}"
    out.append([code, err.getvalue()])
print(json.dumps(out))
"""


def main(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = cli.main(list(argv))
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def test_create_list_describe_optimize_and_drop_indexes(
    daily: PartitionedNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    daily.write(events(30))
    uri = daily.uri
    assert main(capsys, "indices", uri).strip() == "(none)"

    out = main(capsys, "create-index", uri, "id", "btree", "--name", "by_id", "--txn-id", "i1")
    result = json.loads(out)
    assert (result["operation"], result["txn_id"], result["rows_indexed"]) == (
        "create_index",
        "i1",
        30,
    )
    scoped = "event_date = DATE '2025-12-10'"
    out = main(capsys, "create-index", uri, "country", "BITMAP", "--filter", scoped)
    assert json.loads(out)["rows_indexed"] == 10
    daily.write(events(4, first_id=100))  # rows the indexes do not cover yet

    lines = main(capsys, "indices", uri).splitlines()
    assert lines[0].split() == [
        "name",
        "column",
        "type",
        "filter",
        "partitions",
        "indexed",
        "rows",
        "indexed",
        "rows",
        "not",
        "indexed",
        "params",
    ]
    assert lines[1].split()[:3] == ["by_id", "id", "BTREE"]
    assert lines[1].split()[-5:] == ["3", "3", "30", "4", "NULL"]  # NULL filter earlier
    # a filter ends in a quote: quoted as a cell, so it cannot read as something else
    assert lines[2].split("  ")[:4] == [
        "country_idx",
        "country",
        "BITMAP",
        "'event_date = DATE \\'2025-12-10\\''",
    ]
    assert lines[2].split()[-5:] == ["1", "1", "10", "2", "NULL"]
    docs = [json.loads(line) for line in main(capsys, "indices", uri, "--json").splitlines()]
    assert [d["name"] for d in docs] == ["by_id", "country_idx"]
    assert (docs[0]["rows_indexed"], docs[0]["rows_unindexed"]) == (30, 4)
    assert docs[1]["filter"] == scoped
    before = daily.version

    out = main(capsys, "optimize-indices", uri, "--name", "by_id")
    assert json.loads(out)["rows_indexed"] == 4
    [doc] = [json.loads(line) for line in main(capsys, "indices", uri, "--json").splitlines()][:1]
    assert doc["rows_unindexed"] == 0
    # a past state shows the indexes as they were
    past = main(capsys, "indices", uri, "--as-of", str(before), "--json").splitlines()
    assert json.loads(past[0])["rows_unindexed"] == 4

    described = main(capsys, "describe", uri)
    assert "\nindexes:\n" in described
    assert "  by_id        id       BTREE" in described
    assert [d["name"] for d in json.loads(main(capsys, "describe", uri, "--json"))["indices"]] == [
        "by_id",
        "country_idx",
    ]

    out = main(capsys, "drop-index", uri, "country_idx")
    assert json.loads(out)["operation"] == "drop_index"
    assert [i.name for i in daily.list_indices()] == ["by_id"]
    assert [line.split()[0] for line in main(capsys, "indices", uri).splitlines()] == [
        "name",
        "by_id",
    ]


def test_params_are_json_values_or_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np
    import pyarrow as pa

    from airflow_provider_lance.namespace import PartitionField

    schema = pa.schema([("day", pa.int32()), ("v", pa.list_(pa.float32(), 4))])
    ns = PartitionedNamespace.create(
        tmp_path / "vectors",
        schema=schema,
        partition_fields=[PartitionField("day", "day")],
    )
    vectors = np.random.default_rng(3).random((200, 4), dtype=np.float32)
    days = pa.array([i % 2 for i in range(200)], pa.int32())
    ns.write(
        pa.table(
            {"day": days, "v": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 4)},
            schema=schema,
        )
    )
    argv = ["create-index", ns.uri, "v", "IVF_FLAT", "--param", "num_partitions=2"]
    out = main(capsys, *argv, "--param", "metric=cosine", "--no-shared-model")
    assert json.loads(out)["rows_indexed"] == 200
    [info] = ns.list_indices()
    assert (info.params["num_partitions"], info.params["metric"]) == (2, "cosine")
    assert info.shared_model is False


#: Bad input, as a user types it on a namespace with the index ``by_id``: what stderr says.
BAD_INPUT = [
    (["create-index", "{uri}", "id", "HNSW"], "error: unknown index type 'HNSW'; pylance's"),
    (["create-index", "{uri}", "nope", "BTREE"], "nope"),
    (["create-index", "{uri}", "id", "BTREE", "--name", "a/b"], "an index name must be"),
    (["create-index", "{uri}", "id", "BTREE", "--param", "=4"], "'=4' is not KEY=VALUE"),
    (["create-index", "{uri}", "id", "BTREE", "--param", "name=x"], "name is not an index param"),
    (["create-index", "{uri}", "id", "BTREE", "--param", "index_uuid=x"], "set by the namespace"),
    (["create-index", "{uri}", "id", "BTREE", "--param", "bogus=3"], "BTREE takes no param"),
    (
        ["create-index", "{uri}", "country", "INVERTED", "--param", "with_positions=true"],
        "unknown parameter 'with_positions' for index type INVERTED (did you mean 'with_p",
    ),
    (["create-index", "{uri}", "country", "IVF_PQ"], "a vector index (IVF_PQ) needs a"),
    (["create-index", "{uri}", "id", "BTREE", "--name", "by_id"], "is declared already"),
    (["drop-index", "{uri}", "nope"], "error: no index named 'nope' is declared"),
    (["optimize-indices", "{uri}", "--name", "nope"], "error: no index named 'nope'"),
    (["optimize-indices", "{uri}", "nope = 1"], "nope"),
    (["indices", "{uri}", "--as-of", "999"], "999"),
]


def test_bad_input_exits_2_with_one_line_and_no_traceback(daily: PartitionedNamespace) -> None:
    daily.write(events(30))
    daily.create_scalar_index("id", "BTREE", "by_id")
    version = daily.version
    commands = [[a.format(uri=daily.uri) for a in argv] for argv, _ in BAD_INPUT]
    done = subprocess.run(
        [sys.executable, "-c", RUN_EACH, json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for (argv, says), (code, err) in zip(BAD_INPUT, results, strict=True):
        assert code == 2, (argv, code, err)
        assert "Traceback" not in err, argv
        assert says in err.strip().splitlines()[-1], (argv, err)
    assert PartitionedNamespace.open(daily.uri).version == version
