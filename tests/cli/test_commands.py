"""The command line as operators use it (issue 25): object stores through storage options
(a flag and ``LANCE_STORAGE_OPTIONS``, no ``AWS_*`` variables), ``--as-of`` on the reading
commands, tables by default and exactly the old JSON with ``--json``, totals in
``describe``, ``head``, ``--version``, help on every argument and the console script.

Real namespaces on disk (and on a moto S3 server), the CLI run through ``main(argv)`` and,
for the entry point and the environment variable, as a subprocess.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_lance import __version__, cli
from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.read.scan import open_leaf
from tests.support import BUCKET, EVENTS_SCHEMA, events

REPO = Path(__file__).resolve().parents[2]
D = dt.date


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def json_lines(text: str) -> list[Any]:
    return [json.loads(line) for line in text.splitlines()]


def env_without_aws(**extra: str) -> dict[str, str]:
    """This process's environment without any AWS setting or proxy, plus ``extra``: the CLI
    may reach a store only through what the command itself is given."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith("AWS_")
        and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    env.pop(cli.options.STORAGE_OPTIONS_ENV, None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["NO_PROXY"] = "127.0.0.1,localhost"
    return {**env, **extra}


@pytest.fixture
def daily_edited(daily: PartitionedNamespace) -> PartitionedNamespace:
    """Three days, one written twice (two fragments), a deletion, and a later overwrite."""
    daily.write(events(30))  # ids 0-29 over 2025-12-10..12
    daily.write(events(6, start=D(2025, 12, 10), days=1, first_id=100))  # a 2nd fragment
    daily.delete("id = 3")  # a deletion file in 2025-12-10
    return daily


# -- help, version, the console script -----------------------------------------------------------
def _parsers(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, Any]]:
    for action in parser._actions:
        yield path, action
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield f"{path} (commands)", choice
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_argument_and_command_has_help() -> None:
    missing = [
        f"{path}: {action.dest or action.metavar}"
        for path, action in _parsers(cli.build_parser(), "lance-partitioned")
        if not action.help or action.help == argparse.SUPPRESS
    ]
    assert missing == []


def test_version_names_the_package_and_pylance(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"python -m airflow_provider_lance {__version__} (pylance ")


def test_the_console_script_runs_the_cli(
    daily_edited: PartitionedNamespace, tmp_path: Path
) -> None:
    """``[project.scripts]`` names ``cli:main``; the script pip generates for it (this is
    its template) runs it, under the script's own name."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"lance-partitioned": "airflow_provider_lance.cli:main"}
    module, function = scripts["lance-partitioned"].split(":")
    script = tmp_path / "bin" / "lance-partitioned"
    script.parent.mkdir()
    script.write_text(
        f"#!{sys.executable}\n"
        "import re\nimport sys\n"
        f"from {module} import {function}\n"
        "if __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
        f"    sys.exit({function}())\n"
    )
    script.chmod(0o755)

    def call(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(script), *argv],
            env=env_without_aws(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    done = call("--version")
    assert (done.returncode, done.stdout.split()[:2]) == (0, ["lance-partitioned", __version__])
    done = call("describe", daily_edited.uri, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["totals"]["rows"] == daily_edited.count_rows()
    done = call("describe", "--help")
    assert done.stdout.startswith("usage: lance-partitioned describe")
    done = call("describe", str(tmp_path / "nothing"))
    assert done.returncode == 2
    assert done.stderr.startswith("error: ")


# -- describe: totals ----------------------------------------------------------------------------
def test_describe_shows_totals_from_fragment_metadata(
    daily_edited: PartitionedNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    partitions = daily_edited.partitions()
    leaves = [open_leaf(daily_edited.storage, p) for p in partitions]
    fragments = sum(len(t.get_fragments()) for t in leaves)
    data_bytes = sum(
        os.path.getsize(os.path.join(t.uri.removeprefix("file://"), "data", f.path))
        for t in leaves
        for frag in t.get_fragments()
        for f in frag.metadata.files
    )
    assert (len(partitions), fragments) == (3, 4)

    code, out, _ = run(capsys, "describe", daily_edited.uri, "--json")
    doc = json.loads(out)
    assert code == 0
    assert doc["totals"] == {
        "partitions": 3,
        "rows": 35,  # 30 + 6 - the deleted id 3
        "bytes": data_bytes,
        "fragments": 4,
    }
    by_day = {p["values"]["event_date"]: p for p in doc["partitions"]}
    assert (by_day["2025-12-10"]["rows"], by_day["2025-12-10"]["fragments"]) == (15, 2)
    assert (by_day["2025-12-11"]["rows"], by_day["2025-12-11"]["fragments"]) == (10, 1)
    assert doc["version"] == doc["latest_version"] == daily_edited.version
    assert [f["name"] for f in doc["schema"]] == EVENTS_SCHEMA.names

    code, out, _ = run(capsys, "describe", daily_edited.uri)
    assert code == 0
    lines = out.splitlines()
    assert "rows        35" in lines
    assert "fragments   4" in lines
    assert f"bytes       {data_bytes / 1024:.1f} KiB ({data_bytes})" in lines
    cells = next(line for line in lines if "event_date=2025-12-10" in line).split()
    # spec, read_version, rows, bytes (a number and its unit), fragments, values
    assert cells[:3] == ["v1", str(by_day["2025-12-10"]["read_version"]), "15"]
    assert cells[5:] == ["2", "event_date=2025-12-10"]

    code, out, _ = run(capsys, "describe", daily_edited.uri, "--partitions", "1")
    assert code == 0
    assert "partitions (the first 1 of 3):" in out
    assert "2 more (--partitions all lists every one)" in out
    assert sum("event_date=" in line for line in out.splitlines()) == 1
    code, out, _ = run(capsys, "describe", daily_edited.uri, "--partitions", "1", "--json")
    assert len(json.loads(out)["partitions"]) == 1


# -- --as-of -------------------------------------------------------------------------------------
def test_as_of_reads_a_version_a_moment_or_a_tag(
    daily_edited: PartitionedNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    before = daily_edited.version
    daily_edited.tag("before-overwrite")
    moment = dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    daily_edited.write(events(2, start=D(2025, 12, 11), days=1, first_id=500), mode="overwrite")
    daily_edited.write(events(1, start=D(2025, 12, 20), days=1, first_id=900))
    assert daily_edited.count_rows() == 35 - 10 + 2 + 1

    for as_of in (str(before), "before-overwrite", moment):
        code, out, err = run(capsys, "describe", daily_edited.uri, "--as-of", as_of, "--json")
        assert code == 0, err
        doc = json.loads(out)
        assert (doc["version"], doc["latest_version"]) == (before, daily_edited.version)
        assert doc["totals"]["rows"] == 35
        code, out, _ = run(
            capsys, "prune", daily_edited.uri, "event_date >= DATE '2025-12-11'", "--as-of", as_of
        )
        assert "2025-12-20" not in out
        assert "event_date=2025-12-11" in out
        code, out, _ = run(
            capsys,
            "head",
            daily_edited.uri,
            "-n",
            "100",
            "--filter",
            "event_date = DATE '2025-12-11'",
            "--columns",
            "id",
            "--as-of",
            as_of,
            "--json",
        )
        assert sorted(r["id"] for r in json_lines(out)) == list(range(1, 30, 3))

    code, out, _ = run(capsys, "describe", daily_edited.uri, "--as-of", str(before))
    assert f"version     v{before} (the latest is v{daily_edited.version})" in out.splitlines()
    code, out, _ = run(capsys, "history", daily_edited.uri, "--as-of", "before-overwrite", "--json")
    assert max(e["version"] for e in json_lines(out)) <= before
    assert json_lines(out)[0]["operation"] == "delete"

    assert run(capsys, "describe", daily_edited.uri, "--as-of", "no-such-tag")[0] == 2
    code, _, err = run(capsys, "head", daily_edited.uri, "--as-of", "2001-01-01")
    assert code == 2
    assert "before" in err
    code, _, err = run(capsys, "verify", daily_edited.uri, "--as-of", str(before), "--fix")
    assert code == 2
    assert "--fix changes the latest state" in err
    code, out, _ = run(capsys, "verify", daily_edited.uri, "--as-of", str(before))
    assert (code, json.loads(out)["ok"]) == (0, True)


# -- head ----------------------------------------------------------------------------------------
def test_head_peeks_at_rows(
    daily_edited: PartitionedNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys,
        "head",
        daily_edited.uri,
        "-n",
        "3",
        "--filter",
        "id < 8",
        "--columns",
        "id,country",
        "--columns",
        "event_date",
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["id", "country", "event_date"]
    assert len(lines) == 4
    rows = [line.split() for line in lines[1:]]
    assert all(len(r) == 3 and r[2].startswith("2025-12-1") for r in rows)

    code, out, _ = run(
        capsys, "head", daily_edited.uri, "-n", "50", "--filter", "country IS NULL", "--json"
    )
    got = json_lines(out)
    expected = daily_edited.to_table(filter="country IS NULL").to_pylist()
    assert sorted(r["id"] for r in got) == sorted(r["id"] for r in expected)
    assert all(r["country"] is None and len(r["event_date"]) == 10 for r in got)
    code, out, _ = run(capsys, "head", daily_edited.uri, "-n", "2", "--filter", "country IS NULL")
    assert all(line.split()[2] == "NULL" for line in out.splitlines()[1:])

    code, out, _ = run(capsys, "head", daily_edited.uri)
    assert len(out.splitlines()) == 1 + 10
    code, out, _ = run(capsys, "head", daily_edited.uri, "--filter", "id > 100000")
    assert (code, out) == (0, "(none)\n")
    assert run(capsys, "head", daily_edited.uri, "--filter", "id > 100000", "--json")[1] == ""
    assert run(capsys, "head", daily_edited.uri, "--columns", "nope")[0] == 2
    assert run(capsys, "head", daily_edited.uri, "--filter", "nope = 1")[0] == 2
    assert run(capsys, "head", daily_edited.uri, "-n", "-1")[0] == 2


# -- tables by default, the old JSON with --json, "(none)" ----------------------------------------
def test_listings_are_tables_and_json_is_the_old_output(
    daily_edited: PartitionedNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    txn = daily_edited.begin("append", txn_id="load.2025-12-10")
    txn.stage(events(2, first_id=700))
    daily_edited.commit(txn.txn_id)
    daily_edited.tag("eod")
    where = "event_date <= DATE '2025-12-11'"

    expected = {
        ("prune", where): [
            json.dumps(p.to_dict(), ensure_ascii=False) for p in daily_edited.prune(where)
        ],
        ("transactions",): [json.dumps(i.to_dict()) for i in daily_edited.transactions()],
        ("history",): [json.dumps(e.to_dict(), ensure_ascii=False) for e in daily_edited.history()],
        ("tag", "list"): [json.dumps(t.to_dict()) for t in daily_edited.tags()],
    }
    for argv, lines in expected.items():
        command, *rest = argv
        full = (
            ["tag", "list", daily_edited.uri]
            if command == "tag"
            else [command, daily_edited.uri, *rest]
        )
        code, out, _ = run(capsys, *full, "--json")
        assert (code, out.splitlines()) == (0, lines), argv
        code, out, _ = run(capsys, "--json", *full)  # also before the command
        assert (code, out.splitlines()) == (0, lines), argv
        code, out, _ = run(capsys, *full)
        assert code == 0
        assert not out.lstrip().startswith("{"), argv  # a table

    _, out, _ = run(capsys, "prune", daily_edited.uri, where)
    assert out.splitlines()[0].split() == ["spec", "read_version", "values", "directory"]
    assert [line.split()[2] for line in out.splitlines()[1:]] == [
        "event_date=2025-12-10",
        "event_date=2025-12-11",
    ]
    _, out, _ = run(capsys, "transactions", daily_edited.uri)
    header, row = out.splitlines()
    assert header.split()[:3] == ["txn_id", "state", "mode"]
    assert row.split()[:3] == ["load.2025-12-10", "published", "append"]
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    assert today in row.split()  # a date reads 2025-12-10, then the time
    _, out, _ = run(capsys, "history", daily_edited.uri, "--limit", "2")
    header, newest, _ = out.splitlines()
    assert header.split()[:4] == ["version", "committed", "(UTC)", "operation"]
    assert newest.split()[:2] == [str(daily_edited.history(1)[0].version), today]
    _, out, _ = run(capsys, "tag", "list", daily_edited.uri)
    assert out.splitlines()[1].split()[:3] == ["eod", str(daily_edited.version), today]


def test_empty_listings_say_none(daily: PartitionedNamespace, capsys) -> None:
    for argv in (
        ["prune", daily.uri, "event_date = DATE '2030-01-01'"],
        ["transactions", daily.uri],
        ["tag", "list", daily.uri],
        ["head", daily.uri],
    ):
        code, out, _ = run(capsys, *argv)
        assert (code, out) == (0, "(none)\n"), argv
        code, out, _ = run(capsys, *argv, "--json")
        assert (code, out) == (0, ""), argv  # scripts: no lines, as before
    code, out, _ = run(capsys, "recover", daily.uri)
    assert out == "aborted 0 abandoned transaction(s): (none)\n"
    code, out, _ = run(capsys, "recover", daily.uri, "--json")
    assert json.loads(out) == {"aborted": []}
    code, out, _ = run(capsys, "describe", daily.uri)
    assert "partitions:\n  (none)\n" in out
    assert "rows        0" in out.splitlines()


# -- storage options -----------------------------------------------------------------------------
def test_storage_options_from_the_flag_and_the_variable() -> None:
    options = cli.options
    env = {
        options.STORAGE_OPTIONS_ENV: json.dumps(
            {"allow_http": True, "aws_region": "eu-west-1", "timeout": 30, "gone": None}
        )
    }
    flags = [options.storage_option("aws_region=us-east-1"), options.storage_option("x=a=b")]
    assert options.storage_options(flags, env) == {
        "allow_http": True,
        "aws_region": "us-east-1",  # the flag wins
        "timeout": 30,
        "gone": None,
        "x": "a=b",
    }
    # a flag's bare number is seconds for a duration option, text for any other
    flags = [options.storage_option(t) for t in ("timeout=30", "aws_secret_access_key=007")]
    assert options.storage_options(flags, {}) == {"timeout": 30.0, "aws_secret_access_key": "007"}
    assert options.storage_options([], {options.STORAGE_OPTIONS_ENV: " "}) is None
    with pytest.raises(argparse.ArgumentTypeError, match="KEY=VALUE"):
        options.storage_option("allow_http")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "LANCE_STORAGE_OPTIONS is not valid JSON"),
        ('["a"]', "LANCE_STORAGE_OPTIONS must be a JSON object"),
        ('{"aws_secret_access_key": ["s3cr3t"]}', "'aws_secret_access_key' must be a string"),
    ],
)
def test_bad_storage_options_exit_2(
    daily_edited: PartitionedNamespace,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    raw: str,
    message: str,
) -> None:
    monkeypatch.setenv("LANCE_STORAGE_OPTIONS", raw)
    code, _, err = run(capsys, "describe", daily_edited.uri)
    assert code == 2
    assert message in err
    with pytest.raises(SystemExit) as exited:
        cli.main(["describe", daily_edited.uri, "--storage-option", "no-equals-sign"])
    assert exited.value.code == 2
    assert "is not KEY=VALUE" in capsys.readouterr().err


# -- an S3-compatible store, no AWS_* variables ----------------------------------------------------
@pytest.fixture(scope="module")
def s3_ns(storage_options: dict[str, str]) -> PartitionedNamespace:
    from airflow_provider_lance.namespace import PartitionField

    ns = PartitionedNamespace.create(
        f"s3://{BUCKET}/cli-events",
        schema=EVENTS_SCHEMA,
        partition_fields=[PartitionField("event_date", "event_date")],
        storage_options=storage_options,
    )
    ns.write(events(12))
    return ns


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.upper().startswith("AWS_") or key.lower() in ("http_proxy", "https_proxy"):
            monkeypatch.delenv(key)
    monkeypatch.delenv("LANCE_STORAGE_OPTIONS", raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.mark.integration
@pytest.mark.s3
@pytest.mark.usefixtures("no_aws")
def test_the_cli_reaches_s3_with_storage_option_flags(
    s3_ns: PartitionedNamespace, storage_options: dict[str, str], capsys
) -> None:
    flags = [a for k, v in storage_options.items() for a in ("--storage-option", f"{k}={v}")]
    code, out, err = run(capsys, "describe", s3_ns.uri, *flags, "--json")
    assert code == 0, err
    assert json.loads(out)["totals"]["rows"] == 12
    # before the command too; a duration given as a bare number is seconds
    code, out, err = run(
        capsys, *flags, "--storage-option", "timeout=30", "head", s3_ns.uri, "-n", "2"
    )
    assert code == 0, err
    assert len(out.splitlines()) == 3
    code, out, err = run(capsys, "prune", s3_ns.uri, "event_date = DATE '2025-12-10'", *flags)
    assert code == 0, err
    assert "event_date=2025-12-10" in out


@pytest.mark.integration
@pytest.mark.s3
@pytest.mark.usefixtures("no_aws")
def test_the_cli_reaches_s3_with_the_environment_variable(
    s3_ns: PartitionedNamespace,
    storage_options: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    typed = {**storage_options, "allow_http": True, "client_max_retries": 2}  # as JSON types
    monkeypatch.setenv("LANCE_STORAGE_OPTIONS", json.dumps(typed))
    code, out, err = run(capsys, "history", s3_ns.uri, "--json")
    assert code == 0, err
    assert [e["operation"] for e in json_lines(out)] == ["write", "create"]

    done = subprocess.run(
        [sys.executable, "-m", "airflow_provider_lance", "describe", s3_ns.uri],
        env=env_without_aws(LANCE_STORAGE_OPTIONS=json.dumps(typed)),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "rows        12" in done.stdout.splitlines()
    assert not any(k.upper().startswith("AWS_") for k in env_without_aws())
