"""Every snippet of README.md runs as written, in the order a reader meets them.

The README's ```python blocks run in one fresh interpreter, one after another in one global
namespace (a doctest session: a block may use what earlier ones defined), with a temporary
directory as the working directory, so relative paths such as ``lake/events`` land there.
Its ```bash blocks that run the project's command line (``python -m airflow_provider_lance``,
or ``lance-partitioned``)
run at their place in that sequence, in the same directory, against what the blocks before
them made. A failure names the block by its README line; tracebacks point into README.md.

A ```text block after a Python block, introduced by a line ending in "prints:", is that
block's output: the test compares them.

Other bash blocks (installs, the scripts, shell setup for Airflow or spark-submit) are not
run here; each must start with a command listed in ``NOT_RUN``, which names where it is
covered, so a new command-line block cannot go unrun by accident.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
FENCE = re.compile(r"^```(\S*)\s*$")
CLI = ("-m airflow_provider_lance", "lance-partitioned ")

#: The first command of bash blocks that are not run here, and why.
NOT_RUN = {
    "bash scripts/": "the project's scripts (demo, tests, installs): CI runs them",
    "python3 -m venv": "installs: tests/project/test_install.py installs the wheel with plain pip",
    "pip install": "installs: tests/project/test_install.py",
    "git clone": "installs",
    "LANCE_STORAGE_OPTIONS=": "the spark-submit job: tests/spark",
    "export AIRFLOW_CONN_": "connection settings for an Airflow deployment: tests/airflow",
    "source .demo/airflow/env.sh": "starts Airflow's UI on the demo's home",
    "LANCE_LOG=": "a user's own script: tests/project/test_quiet_logs.py",
}


@dataclass(frozen=True)
class Block:
    lang: str
    line: int  # README line of the block's first line of code
    code: str
    prose: str  # the last non-empty line before the opening fence


def readme_blocks(text: str) -> list[Block]:
    lines = text.split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        assert end is not None, f"README.md line {i + 1}: a code block that never closes"
        before = [line for line in lines[:i] if line.strip()]
        found.append(
            Block(
                opening[1],
                i + 2,
                "\n".join(lines[i + 1 : end]) + "\n",
                before[-1] if before else "",
            )
        )
        i = end + 1
    return found


def runs(block: Block) -> bool:
    """Whether the test runs this block (Python always; bash when it runs the command line)."""
    if block.lang == "python":
        return True
    if block.lang == "bash":
        if any(command in block.code for command in CLI):
            return True
        first = block.code.lstrip()
        assert any(first.startswith(prefix) for prefix in NOT_RUN), (
            f"README.md line {block.line}: a bash block that is neither run by this test nor "
            f"listed in NOT_RUN:\n{block.code}"
        )
    return False


#: Runs the blocks (JSON, argv[1]) in order; each Python block's stdout goes to argv[2].
RUNNER = r"""
import contextlib, io, json, subprocess, sys, time, traceback

START = time.monotonic()
blocks = json.load(open(sys.argv[1]))
printed = {}
session = {"__name__": "__main__"}
for block in blocks:
    where = f"README.md: the {block['lang']} block at line {block['line']}"
    print(f"== {time.monotonic() - START:6.1f} s: {where}", file=sys.stderr, flush=True)
    if block["lang"] == "python":
        out = io.StringIO()
        try:
            # padded so that tracebacks name the README's own line numbers
            code = compile("\n" * (block["line"] - 1) + block["code"], "README.md", "exec")
            with contextlib.redirect_stdout(out):
                exec(code, session)
        except BaseException:
            traceback.print_exc()
            print(f"FAILED: {where}", file=sys.stderr)
            sys.exit(1)
        finally:
            printed[block["line"]] = out.getvalue()
            json.dump(printed, open(sys.argv[2], "w"))
    else:
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block["code"]])
        if done.returncode != 0:
            print(f"FAILED: {where} (exit code {done.returncode})", file=sys.stderr)
            sys.exit(1)
spark = session.get("spark")
if spark is not None:
    spark.stop()
"""


def test_every_readme_snippet_runs_as_written(tmp_path: Path) -> None:
    blocks = readme_blocks(README.read_text())
    selected = [b for b in blocks if runs(b)]
    assert sum(b.lang == "python" for b in selected) >= 10  # the parser found the README's blocks

    work = tmp_path / "work"
    work.mkdir()
    # `python` and `.venv/bin/python`, as the README spells them, are this interpreter, and
    # `lance-partitioned` the console script pip makes of the package's entry point
    for bindir in (tmp_path / "bin", work / ".venv" / "bin"):
        bindir.mkdir(parents=True)
        wrapper = bindir / "python"
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        wrapper.chmod(0o755)
    script = tmp_path / "bin" / "lance-partitioned"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m airflow_provider_lance "$@"\n')
    script.chmod(0o755)
    (tmp_path / "blocks.json").write_text(json.dumps([asdict(b) for b in selected]))
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "PYSPARK_PYTHON": sys.executable,
    }
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(tmp_path / "blocks.json"), str(tmp_path / "out.json")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    print(done.stderr)  # the time each block started, shown by pytest -s or on failure
    assert done.returncode == 0, done.stderr[-6000:]

    printed = {int(k): v for k, v in json.loads((tmp_path / "out.json").read_text()).items()}
    for block, after in itertools.pairwise(blocks):
        if block.lang == "python" and after.lang == "text" and after.prose.endswith("prints:"):
            assert printed[block.line] == after.code, (
                f"README.md line {after.line}: the output shown is not what the block at line "
                f"{block.line} prints:\n{printed[block.line]}"
            )


def test_the_parser_finds_blocks_with_their_lines() -> None:
    text = "intro\n\n```python\nx = 1\n```\nIt prints:\n\n```text\n1\n```\n"
    assert readme_blocks(text) == [
        Block("python", 4, "x = 1\n", "intro"),
        Block("text", 9, "1\n", "It prints:"),
    ]
