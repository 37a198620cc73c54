"""A store that refuses writes fails every writing task at its first try (issue 39).

Real task runs (``dag.test()``) against a namespace on S3 (moto) whose connection holds
read-only credentials (a proxy answers writes with 403 AccessDenied, see
``tests/namespace/io/failing_stores.py``): write, delete, maintain (compaction, version
cleanup), tag and recover each fail with ``AirflowFailException``, their retry unburnt.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.airflow.conftest import RunResult
from tests.namespace.io.failing_stores import ReadOnlyS3, prepare
from tests.support import moto_s3

pytestmark = pytest.mark.s3

BUCKET = "read-only-tasks"
RunDag = Callable[..., RunResult]
TASKS = ["write", "delete", "maintain", "clean_up", "tag", "recover"]


@pytest.fixture
def read_only_connection(
    monkeypatch: pytest.MonkeyPatch, no_aws_environment: None
) -> Iterator[ReadOnlyS3]:
    """``lance_read_only``: the bucket of a namespace :func:`prepare` made, reached through
    credentials that may only read."""
    root = f"s3://{BUCKET}/{uuid.uuid4().hex}"  # moto's buckets outlive its servers
    with moto_s3(BUCKET) as options:
        prepare(root, options)
        with ReadOnlyS3(options["aws_endpoint"]) as proxy:
            extra = {
                "root": root,
                "storage_options": {**options, "aws_endpoint": proxy.endpoint},
            }
            monkeypatch.setenv(
                "AIRFLOW_CONN_LANCE_READ_ONLY", json.dumps({"conn_type": "lance", "extra": extra})
            )
            yield proxy


def test_every_writing_task_fails_at_once_on_a_read_only_store(
    run_dag: RunDag, read_only_connection: ReadOnlyS3
) -> None:
    run = run_dag("lance_test_read_only_store")
    assert run.state == "failed"
    for task in TASKS:
        assert run.states[task] == "failed", (task, run.states)
        assert run.tries[task] == 1, (task, run.tries)  # not retried: no retry can help
    assert read_only_connection.refused  # the store was asked, and refused
    failures = [
        line.split("AirflowFailException: ", 1)[1]
        for line in run.output.splitlines()
        if "AirflowFailException: " in line
    ]
    assert len(failures) == len(TASKS), failures
    for failure in failures:
        assert " failed: StorageAccessError: cannot " in failure, failure
        assert "the store refused access" in failure, failure
    for action in ("write of", "delete in", "maintenance of", "create of tag", "recovery of"):
        assert any(f.startswith(action) for f in failures), (action, failures)
    assert "OSError" not in run.output


def test_a_permanent_failure_lance_raised_itself_fails_the_task_at_once(
    read_only_connection: ReadOnlyS3,
) -> None:
    """The last line of defence: Lance's own ``OSError`` for a refused write, had it
    escaped the core's translation, fails the task as the core's error would."""
    import lance
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider_lance.common import lance_errors
    from airflow_provider_lance.hooks.connection import LanceConnectionConfig

    extra = json.loads(os.environ["AIRFLOW_CONN_LANCE_READ_ONLY"])["extra"]
    config = LanceConnectionConfig.from_fields(extras=extra)
    uri = f"{extra['root']}/ns/__manifest"
    table = lance.dataset(uri, storage_options=dict(config.storage_options or {}))
    with pytest.raises(OSError, match="lacked the necessary privileges") as raw:
        table.delete("object_id = 'nothing'")
    with pytest.raises(AirflowFailException) as failure, lance_errors("deleting"):
        raise raw.value
    message = str(failure.value)
    assert message.startswith("deleting failed: StorageAccessError: LanceError(IO): "), message
    assert "the store refused access (no permission); check the credentials" in message
    assert ".rs:" not in message
