"""TaskFlow decorators: ``@task.lance_write`` (registered in the provider's info, so Airflow's
``task`` object finds it by name)."""
