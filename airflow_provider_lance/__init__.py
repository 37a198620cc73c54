"""airflow-provider-lance: partitioned Lance datasets for Apache Airflow and PySpark.

The format lives in :mod:`airflow_provider_lance.namespace` (no Airflow, no Spark).
"""

__version__ = "0.1.0"
