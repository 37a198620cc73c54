"""Airflow's metadata DB prepared and read the way Airflow's own components do it.

``dag.test()`` makes its own run and cannot give it a partition key or consumed asset
events; these helpers let a test serialise the DAGs folder (the DAG processor's step), run
the tasks of a run that Airflow made (a backfill, the scheduler), exactly as ``dag.test()``
runs its own, and read asset events back.
"""

from __future__ import annotations

import io
from typing import Any

from tests.airflow.conftest import RunResult, _collect


def sync_dags_folder() -> None:
    """Serialise the DAGs folder into the metadata DB, as ``dag.test()`` and the DAG
    processor do (backfills, the scheduler and the triggerer read DAGs from there)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.utils.session import create_session

    manager = DagBundlesManager()
    with create_session() as session:
        manager.sync_bundles_to_db(session=session)
    for bundle in manager.get_all_dag_bundles():
        if not bundle.is_initialized:
            bundle.initialize()
        bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
        sync_bag_to_db(bag, bundle.name, bundle.version)


def unpause(dag_id: str) -> None:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        session.get(DagModel, dag_id).is_paused = False


def run_dag_run(dag: Any, run_id: str) -> RunResult:
    """Run the tasks of an existing run to the end, the way ``dag.test()`` runs its own."""
    from airflow import settings
    from airflow.models.dagrun import DagRun
    from airflow.sdk.definitions.dag import _run_task
    from airflow.sdk.log import configure_logging
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.state import DagRunState, TaskInstanceState

    buffer = io.StringIO()
    configure_logging(output=buffer, cache_logger_on_first_use=False, colored_console_log=False)
    session = settings.Session()
    try:
        dr = session.query(DagRun).filter_by(dag_id=dag.dag_id, run_id=run_id).one()
        dr.dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
        dr.state = DagRunState.RUNNING
        session.commit()
        while dr.state == DagRunState.RUNNING:
            session.expire_all()
            schedulable, _ = dr.update_state(session=session)
            for ti in schedulable:
                ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
            session.commit()
            scheduled = [
                ti
                for ti in dr.get_task_instances(session=session)
                if ti.state == TaskInstanceState.SCHEDULED
            ]
            for ti in scheduled:
                _run_task(ti=ti, task=dag.task_dict[ti.task_id], run_triggerer=True)
            if not scheduled and dr.state == DagRunState.RUNNING:
                session.expire_all()
                dr.update_state(session=session)
                session.commit()
        result = _collect(dr)
    finally:
        session.close()
        configure_logging(cache_logger_on_first_use=False, colored_console_log=False)
    result.output = buffer.getvalue()
    return result


def runs_of(dag_id: str) -> list[tuple[str, str | None, str]]:
    """``(run_id, partition_key, run_type)`` of the DAG's runs, oldest first."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        runs = session.query(DagRun).filter_by(dag_id=dag_id).order_by(DagRun.id).all()
        return [(r.run_id, r.partition_key, str(r.run_type)) for r in runs]


def events_of(asset_name: str) -> list[tuple[str | None, dict[str, Any]]]:
    """``(partition_key, extra)`` of every event of the asset named so, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.name == asset_name)
            .order_by(AssetEvent.id)
            .all()
        )
        return [(r.partition_key, dict(r.extra)) for r in rows]


def consumers_of(asset_name: str) -> dict[int, tuple[dict[str, Any], list[str]]]:
    """Every event of the asset named so, by id (oldest first): its extra and the run_ids
    of the runs that consumed it (Airflow's ``dagrun_asset_event`` association: what the
    scheduler gave each asset-triggered run as its ``triggering_asset_events``)."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.name == asset_name)
            .order_by(AssetEvent.id)
            .all()
        )
        return {
            r.id: (dict(r.extra), sorted(run.run_id for run in r.created_dagruns)) for r in rows
        }
