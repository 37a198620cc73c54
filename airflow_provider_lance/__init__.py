"""airflow-provider-lance: partitioned Lance datasets for Apache Airflow and PySpark.

The format lives in :mod:`airflow_provider_lance.namespace` (no Airflow, no Spark).
"""

import os

__version__ = "0.1.0"

#: What Lance logs unless the user says otherwise. Lance's Rust logger reads ``LANCE_LOG``
#: once, when ``lance`` is first imported (this package is imported before it), and warns
#: "No existing dataset at ..., it will be created" for every table it creates: one line
#: per new partition, which is this format's normal operation and not worth a warning.
#: Everything else Lance warns about still shows. Set ``LANCE_LOG`` (e.g. ``info`` or
#: ``debug``) before the first import to choose Lance's logging yourself.
DEFAULT_LANCE_LOG = "warn,lance::dataset::write::insert=error"

os.environ.setdefault("LANCE_LOG", DEFAULT_LANCE_LOG)
