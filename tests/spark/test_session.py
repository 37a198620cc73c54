"""The PySpark install check: Python files and JVM of one Spark release line."""

from __future__ import annotations

import logging

import pytest
from pyspark.sql import SparkSession

from airflow_provider_lance.namespace.errors import InstallationError
from airflow_provider_lance.spark.session import _check_releases, check_pyspark, is_connect


def test_the_test_session_passes_the_check(spark: SparkSession) -> None:
    assert not is_connect(spark)
    check_pyspark(spark)  # the suite's own install is consistent


def test_python_files_of_another_minor_release_are_refused_with_the_fix() -> None:
    with pytest.raises(InstallationError) as caught:
        _check_releases("4.2.0", "4.3.0")  # pyspark-client 4.2 installed over pyspark 4.3
    message = str(caught.value)
    assert "4.2.0" in message
    assert "4.3.0" in message
    assert "pip install --force-reinstall 'pyspark==4.3.0' 'pyspark-client==4.3.0'" in message


def test_a_patch_difference_only_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="airflow_provider_lance.spark.session"):
        _check_releases("4.2.0", "4.2.1")
    assert "4.2.0" in caplog.text
    assert "4.2.1" in caplog.text
