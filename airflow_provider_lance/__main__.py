"""Command line: ``python -m airflow_provider_lance COMMAND ...`` (installed as
``lance-partitioned``; see :mod:`airflow_provider_lance.cli`)."""

from airflow_provider_lance.cli import main

raise SystemExit(main())
