"""Time travel as tasks: naming a past state in a template, and tagging states.

Every ``__manifest`` version is a complete state of the namespace; the core reads one by
its version, by a moment or by a tag (``as_of``). Templates render text, so
:func:`as_of_value` reads that text back, one way for every operator: digits are a
version, an ISO timestamp with a time of day is a moment, anything else a tag name (tag
names are never only digits). A tag pins a state for good (maintenance keeps it and all it
reads): :class:`LanceTagOperator` tags each daily publish, e.g. ``eod-{{ ds }}``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from airflow.providers.common.compat.sdk import BaseOperator

from airflow_provider_lance import validation as v
from airflow_provider_lance.common import lance_errors
from airflow_provider_lance.hooks.lance import DEFAULT_CONN_ID, LancePartitionedHook

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_lance.namespace import PartitionedNamespace

TagAction = Literal["create", "delete"]
ACTIONS: tuple[str, ...] = ("create", "delete")


def as_of_value(value: Any) -> int | dt.datetime | str | None:
    """What ``as_of`` names, from a template's rendering or a native value.

    ``None`` / blank / ``"None"``: the latest state. An int or a text of digits: a
    ``__manifest`` version. A datetime, or an ISO timestamp text with a time of day
    (``2025-12-10T18:00:00Z``; without a zone it is UTC): the latest version committed
    at or before it. Any other text: a tag name (``eod-2025-12-10``; a bare date such as
    ``2025-12-10`` is a tag name too: write ``2025-12-10T00:00:00`` for the moment).
    """
    try:
        v.as_of(value, v.never)
    except v.Refused as refused:
        raise v.error(None, refused, "as_of") from None
    if value is None or isinstance(value, (int, dt.datetime)):
        return value
    text = str(value).strip()
    if v.absent(text):
        return None
    if text.isdigit():
        return int(text)
    if v.MOMENT.match(text):
        return dt.datetime.fromisoformat(text)
    return text


class LanceTagOperator(v.ArgumentChecks, BaseOperator):
    """Create or delete a tag: a name pinning one ``__manifest`` version (and every leaf
    version it reads) until it is deleted; readers name it with ``as_of``.

    Safe to retry and to run again: creating a tag that already points at the version
    ``as_of`` names, or (without ``as_of``) that exists at all, changes nothing; deleting
    a tag that is not there changes nothing. A tag that exists on another version than
    the ``as_of`` given fails the task (no retries), unless ``replace`` moves it.

    :param tag: the tag's name, e.g. ``"eod-{{ ds }}"`` (templated).
    :param action: ``create`` or ``delete`` (templated).
    :param as_of: the state to tag: a version, an ISO timestamp or another tag
        (templated; default: the latest version). See :func:`as_of_value`.
    :param replace: move an existing tag of that name to the state ``as_of`` names (the
        latest, without ``as_of``). Deleting and creating are two steps: a crash between
        them leaves no tag, which the retry creates.
    :param namespace: relative name or full URI (templated).
    :return: (XCom) ``{"uri", "tag", "action", "version", "changed", "manifest_version"}``:
        ``version`` is the tagged version (None after a delete).
    """

    template_fields: Sequence[str] = ("tag", "action", "as_of", "namespace")
    ui_color = "#e8e1c6"
    argument_checks = {
        "tag": v.tag_name,
        "action": v.choice(ACTIONS),
        "as_of": v.as_of,
        "replace": v.flag(),
        "namespace": v.namespace,
        "lance_conn_id": v.conn_id,
    }

    def __init__(
        self,
        *,
        tag: str,
        action: TagAction | str = "create",
        as_of: int | dt.datetime | str | None = None,
        replace: bool = False,
        namespace: str | None = None,
        lance_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.tag = tag
        self.action = action
        self.as_of = as_of
        self.replace = replace
        self.namespace = namespace
        self.lance_conn_id = lance_conn_id
        self.check_arguments()

    def check_combination(self, known: Mapping[str, Any]) -> None:
        if known.get("action") == "delete" and (not v.absent(self.as_of) or self.replace):
            raise v.Refused(
                "as_of and replace say which state a created tag names: a delete takes neither"
            )

    def execute(self, context: Context) -> dict[str, Any]:
        self.check_arguments(rendered=True)
        name = self.tag.strip()
        as_of = as_of_value(self.as_of)
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = hook.namespace_uri(self.namespace)
        with lance_errors(f"{self.action} of tag {name!r} in {uri}"):
            ns = hook.open(uri)
            if self.action == "create":
                version, changed = self._create(ns, name, as_of)
            else:
                version, changed = None, self._delete(ns, name)
            latest = ns.version
        self.log.info(
            "tag %r of %s: %s%s",
            name,
            uri,
            f"{self.action}d" if changed else "already so",
            "" if version is None else f" (version {version})",
        )
        return {
            "uri": uri,
            "tag": name,
            "action": self.action,
            "version": version,
            "changed": changed,
            "manifest_version": latest,
        }

    def _create(
        self, ns: PartitionedNamespace, name: str, as_of: int | dt.datetime | str | None
    ) -> tuple[int, bool]:
        from airflow_provider_lance.namespace import check_tag_name

        check_tag_name(name)  # a malformed name is refused before anything is looked up
        existing = {t.name: t.version for t in ns.tags()}.get(name)
        if existing is None:
            return ns.tag(name, as_of).version, True
        if as_of is None and not self.replace:
            return existing, False  # a retry, or the DAG run again: the tag stays
        wanted = ns.state(as_of).version  # the latest without as_of
        if wanted == existing:
            return existing, False
        if not self.replace:
            from airflow_provider_lance.namespace.errors import TagExistsError

            raise TagExistsError(
                f"tag {name!r} already exists on __manifest version {existing}, not "
                f"{wanted}; delete it first or set replace=True to move it"
            )
        self.log.info("moving tag %r from version %d to %d", name, existing, wanted)
        ns.untag(name)
        return ns.tag(name, wanted).version, True

    def _delete(self, ns: PartitionedNamespace, name: str) -> bool:
        from airflow_provider_lance.namespace import check_tag_name

        check_tag_name(name)
        if name not in {t.name for t in ns.tags()}:
            self.log.info("no tag %r in %s: nothing to delete", name, ns.uri)
            return False
        ns.untag(name)
        return True
