"""spark-submit entry points. Importing this package does not import PySpark.

``WRITE_JOB`` is the file to hand to ``spark-submit`` (or to Airflow's SparkSubmitOperator as
its ``application``); run it with ``--help`` for its arguments.
"""

from pathlib import Path

WRITE_JOB = str(Path(__file__).with_name("write.py"))
#: The environment variable holding the job's storage options (a JSON object).
STORAGE_OPTIONS_ENV = "LANCE_STORAGE_OPTIONS"
#: ``--format`` values (``lance_partitioned``: another namespace, read with the format).
FORMATS = ("parquet", "csv", "json", "table", "lance_partitioned")
#: Exit codes: done, a retry may fix it, bad input, a commit conflict.
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_CONFLICT = 0, 1, 2, 3

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CONFLICT",
    "EXIT_FAILED",
    "EXIT_OK",
    "FORMATS",
    "STORAGE_OPTIONS_ENV",
    "WRITE_JOB",
]
