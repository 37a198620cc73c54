"""Command line: ``python -m airflow_provider_lance {demo,describe,prune} ...``."""

from airflow_provider_lance.cli import main

raise SystemExit(main())
