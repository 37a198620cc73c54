"""The demo deletes nothing it did not make (issue 25): ``python -m airflow_provider_lance demo
DIR`` and ``scripts/demo.sh DIR`` on a directory holding a user's files refuse (exit 2) and
leave every file as it was; a directory an earlier demo made is replaced; ``--force``
replaces anything."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_lance import cli
from airflow_provider_lance.namespace import PartitionedNamespace

REPO = Path(__file__).resolve().parents[2]


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command line in a process of its own (this worktree's package)."""
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_lance", "demo", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "LANCE_LOG": "error"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_directory_holding_a_users_file_is_refused_and_kept(tmp_path: Path) -> None:
    target = tmp_path / "mine"
    target.mkdir()
    (target / "thesis.txt").write_text("four years of work")
    done = demo(str(target))
    assert done.returncode == 2, done.stderr
    assert "thesis.txt" in done.stderr
    assert "--force" in done.stderr
    assert sorted(p.name for p in target.iterdir()) == ["thesis.txt"]
    assert (target / "thesis.txt").read_text() == "four years of work"


def test_a_file_in_place_of_the_directory_is_refused_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("keep me")
    assert cli.main(["demo", str(target), "--force"]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert target.read_text() == "keep me"


def test_a_symlink_is_refused_and_its_target_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "data.bin").write_bytes(b"\x00\x01")
    (tmp_path / "link").symlink_to(real)
    assert cli.main(["demo", str(tmp_path / "link")]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert (real / "data.bin").read_bytes() == b"\x00\x01"


def test_an_empty_or_absent_directory_is_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["demo", str(empty)]) == 0
    assert PartitionedNamespace.open(empty).count_rows() > 0
    assert cli.main(["demo", str(tmp_path / "absent" / "events")]) == 0
    assert (tmp_path / "absent" / "events" / cli.DEMO_MARKER).is_file()


def test_the_demos_own_directory_is_replaced_but_not_once_a_user_file_is_added(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "events"
    assert cli.main(["demo", str(target)]) == 0
    first = PartitionedNamespace.open(target).count_rows()
    assert cli.main(["demo", str(target)]) == 0  # made by the demo: replaced
    assert PartitionedNamespace.open(target).count_rows() == first  # not appended to
    capsys.readouterr()
    (target / "my-notes.md").write_text("mine")
    assert cli.main(["demo", str(target)]) == 2
    err = capsys.readouterr().err
    assert "my-notes.md" in err
    assert "--force" in err
    assert (target / "my-notes.md").read_text() == "mine"
    assert PartitionedNamespace.open(target).count_rows() == first


def test_force_replaces_a_directory_whatever_it_holds(tmp_path: Path) -> None:
    target = tmp_path / "scratch"
    target.mkdir()
    (target / "old.txt").write_text("disposable")
    done = demo(str(target), "--force")
    assert done.returncode == 0, done.stderr
    assert not (target / "old.txt").exists()
    assert PartitionedNamespace.open(target).count_rows() > 0


# -- scripts/demo.sh ------------------------------------------------------------------------
@pytest.fixture
def demo_sh(tmp_path: Path) -> Path:
    """A copy of the repository's scripts whose installer fails loudly: demo.sh must refuse
    before it installs (or deletes) anything."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "demo.sh", repo / "scripts" / "demo.sh")
    (repo / "scripts" / "bootstrap.sh").write_text("echo 'bootstrap ran' >&2\nexit 97\n")
    return repo


@pytest.mark.parametrize("where", ["argument", ".demo/events", ".demo/lance", ".demo/landing"])
def test_demo_sh_refuses_a_directory_it_did_not_make(demo_sh: Path, where: str) -> None:
    target = demo_sh / ("mine" if where == "argument" else where)
    target.mkdir(parents=True)
    (target / "keep.txt").write_text("the user's")
    args = [str(target)] if where == "argument" else []
    done = subprocess.run(
        ["bash", str(demo_sh / "scripts" / "demo.sh"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "bootstrap ran" not in done.stderr
    assert str(target) in done.stderr or where in done.stderr
    assert "--force" in done.stderr
    assert (target / "keep.txt").read_text() == "the user's"


@pytest.mark.parametrize("without", ["JAVA_HOME", "PATH"])
def test_demo_sh_checks_for_java_before_it_installs(
    demo_sh: Path, tmp_path: Path, without: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    if without == "JAVA_HOME":
        env["JAVA_HOME"] = str(tmp_path / "no-jdk")
        expected = f"JAVA_HOME={tmp_path / 'no-jdk'} has no bin/java"
    else:
        tools = tmp_path / "tools"  # what the script needs, without java
        tools.mkdir()
        for tool in ("bash", "dirname", "ls", "sed", "head"):
            (tools / tool).symlink_to(shutil.which(tool) or tool)
        env["PATH"] = str(tools)
        expected = "no java is on PATH"
    done = subprocess.run(
        ["bash", str(demo_sh / "scripts" / "demo.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert "bootstrap ran" not in done.stderr
    assert expected in done.stderr
    assert "Java 17" in done.stderr
