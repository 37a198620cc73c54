"""Who wrote a leaf version: the transaction properties every commit of this project puts
on the Lance versions it makes (a transaction and its incarnation, and for a table operation
its kind), and reading them back (``history``, roll-backs)."""

from __future__ import annotations

import lance

#: Leaf-commit properties naming the transaction (and its incarnation) that made a version.
TXN_PROPERTY = "partitioned-namespace.txn_id"
INCARNATION_PROPERTY = "partitioned-namespace.incarnation"
#: The table operation (``merge``, ``delete``, ``optimize``) a leaf version was made by.
OPERATION_PROPERTY = "partitioned-namespace.operation"


def committed_by(ds: lance.LanceDataset, version: int) -> str | None:
    """The tag (``txn_id#incarnation``) recorded on a leaf version; None: not ours (pylance
    fact: test_fact_transaction_properties_are_read_back_per_version_and_restore_has_none)."""
    try:
        txn = ds.read_transaction(version)
    except TypeError:  # pylance 14 cannot read back a Rewrite that remapped indices
        return None
    props = (txn.transaction_properties or {}) if txn is not None else {}
    txn_id = props.get(TXN_PROPERTY)
    return None if txn_id is None else f"{txn_id}#{props.get(INCARNATION_PROPERTY, '0')}"


def owner_properties(owner: str, operation: str | None = None) -> dict[str, str]:
    """The transaction properties tagging a leaf version with ``owner`` (``txn#k``) and,
    for a table operation's, its kind."""
    txn_id, _, incarnation = owner.rpartition("#")
    out = {TXN_PROPERTY: txn_id, INCARNATION_PROPERTY: incarnation}
    if operation is not None:
        out[OPERATION_PROPERTY] = operation
    return out
