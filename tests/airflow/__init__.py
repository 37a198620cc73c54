"""Airflow provider tests: hook, operators, sensor, trigger, example DAGs, compose file."""
