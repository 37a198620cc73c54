"""Which incarnation of a transaction is current, from its ``__manifest`` row and headers."""

from __future__ import annotations

from collections.abc import Callable

from airflow_provider_lance.namespace.errors import InvalidArgumentError
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.format.txn_row import TransactionHeader, TxnRecord, TxnState

from .kernel import TransactionContext
from .lifecycle import load_records
from .store import TransactionStore


def current_of(
    txn_id: str, stored: TxnRecord | None, header_of: Callable[[int], TransactionHeader | None]
) -> TxnRecord | None:
    """The current incarnation of ``txn_id``: no row and a header, 1 STAGED; a row ABORTED
    in k and a header for k+1, k+1 STAGED; otherwise the row."""
    if stored is None:
        header = header_of(1)
        return None if header is None else TxnRecord.staged(header)
    if stored.state is TxnState.ABORTED:
        header = header_of(stored.incarnation + 1)
        if header is not None:
            return TxnRecord.staged(header)
    return stored


def resolve(ctx: TransactionContext, state: NamespaceState, txn_id: str) -> TxnRecord | None:
    """The current incarnation of ``txn_id`` as of ``state`` (None: none). Headers are read from
    storage after ``state``, never from the cache (a collected one must not look staged again)."""
    stored = load_records(state, [txn_id]).get(txn_id)
    return current_of(txn_id, stored, stored_header(ctx.store, txn_id))


def stored_header(
    store: TransactionStore, txn_id: str
) -> Callable[[int], TransactionHeader | None]:
    """``header_of`` for :func:`current_of`: headers as storage holds them now."""
    return lambda k: store.load(txn_id, k, fresh=True)


def only(header: TransactionHeader) -> Callable[[int], TransactionHeader | None]:
    """``header_of`` for :func:`current_of` from one header (listed after the state)."""
    return lambda k: header if k == header.incarnation else None


def staged_source(ctx: TransactionContext, state: NamespaceState, txn_id: str) -> TxnRecord:
    """A source of a combined transaction: it must exist and still be staged."""
    record = resolve(ctx, state, txn_id)
    if record is None:
        raise InvalidArgumentError(f"no transaction {txn_id!r} in this namespace")
    if record.state is not TxnState.STAGED:
        into = f" into {record.merged_into}" if record.merged_into else ""
        raise InvalidArgumentError(
            f"transaction {txn_id} is {record.state.value}{into}; only staged transactions "
            "can be committed together"
        )
    return record


def current(ctx: TransactionContext, header: TransactionHeader) -> TxnRecord:
    """The record of exactly this incarnation (ABORTED if a newer one replaced it)."""
    return of_incarnation(header, resolve(ctx, ctx.load_state(), header.txn_id))


def of_incarnation(header: TransactionHeader, record: TxnRecord | None) -> TxnRecord:
    """``record`` (the current incarnation) as seen by ``header``'s incarnation."""
    if record is None or record.incarnation < header.incarnation:
        return TxnRecord.staged(header)
    if record.incarnation > header.incarnation:
        return TxnRecord(header.txn_id, header.incarnation, TxnState.ABORTED, error="superseded")
    return record
