"""spark-submit entry points. Importing this package does not import PySpark.

``WRITE_JOB`` is the file to hand to ``spark-submit`` (or to Airflow's SparkSubmitOperator as
its ``application``); run it with ``--help`` for its arguments.
"""

from pathlib import Path

WRITE_JOB = str(Path(__file__).with_name("write.py"))

__all__ = ["WRITE_JOB"]
