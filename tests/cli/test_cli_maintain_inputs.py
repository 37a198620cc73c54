"""``maintain``'s ages on the command line: NaN, infinities and ages beyond any date are
refused naming the flag (exit 2), not a Python traceback."""

from __future__ import annotations

import pytest

from airflow_provider_lance import cli
from airflow_provider_lance.namespace import PartitionedNamespace
from tests.support import events


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--older-than-hours", "nan"),
        ("--older-than-hours", "inf"),
        ("--older-than-hours", "1e300"),
        ("--orphan-min-age-hours", "nan"),
        ("--orphan-min-age-hours", "1e20"),
    ],
)
def test_an_age_that_is_no_duration_is_refused(
    daily: PartitionedNamespace, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    daily.write(events(10))
    try:  # refused by the argument parser (NaN, infinities) or by the command (too long)
        code = cli.main(["maintain", daily.uri, "--sweep-orphans", flag, value])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert flag in err
    assert value in err or "number of hours" in err
    assert "Traceback" not in err
