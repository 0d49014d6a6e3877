"""The admin calls and `watch`, shared by `picket.Client` and `picket.aio.Client`: each builds
its request here (arguments checked in Python) and the client runs it its own way. Answers are
the response messages as proto3 JSON with the proto field names (docs/api.md, "Service Admin"):
dicts, every field present, 64-bit integers as ints, enums by name."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple

from ._common import (
    U32_MAX,
    U64_MAX,
    check_bool,
    check_int,
    check_key,
    check_namespace,
    check_str,
    check_text,
)


def _req(method: str, **fields: Any) -> Tuple[str, str]:
    return method, json.dumps({k: v for k, v in fields.items() if v is not None})


def inspect(namespace: Any, key: Any, allow_stale: Any) -> Tuple[str, str]:
    return _req("inspect", namespace=check_namespace(namespace), key=check_key(key),
                allow_stale=check_bool("allow_stale", allow_stale))


def holds(namespace: Any, limit: Any, allow_stale: Any) -> Tuple[str, str]:
    return _req("list_holds", namespace=check_namespace(namespace),
                limit=check_int("limit", limit, 0, 10_000),
                allow_stale=check_bool("allow_stale", allow_stale))


def longest_holds(allow_stale: Any) -> Tuple[str, str]:
    return _req("longest_holds", allow_stale=check_bool("allow_stale", allow_stale))


def classes(namespace: Any, allow_stale: Any) -> Tuple[str, str]:
    return _req("list_classes", namespace=check_namespace(namespace),
                allow_stale=check_bool("allow_stale", allow_stale))


_CLASS_FIELDS = {
    "name": str, "prefix": str, "fenced": bool, "session_ttl_ms_default": int,
    "session_ttl_ms_max": int, "hold_ms_max_expected": int, "owner": str, "runbook_url": str,
    "description": str,
}


def put_class(namespace: Any, spec: Any) -> Tuple[str, str]:
    check_namespace(namespace)
    if not isinstance(spec, dict):
        raise TypeError(f"spec must be a dict of ClassSpec fields, not {type(spec).__name__}")
    for field, value in spec.items():
        kind = _CLASS_FIELDS.get(field)
        if kind is None:
            raise ValueError(f"spec: no ClassSpec field {field!r} (fields: {', '.join(_CLASS_FIELDS)})")
        if kind is int:
            check_int(f"spec[{field!r}]", value, 0, U64_MAX)
        elif kind is bool:
            check_bool(f"spec[{field!r}]", value)
        else:
            check_str(f"spec[{field!r}]", value)
    if "name" not in spec:
        raise ValueError("spec must name the class: spec['name']")
    check_namespace(spec["name"], "spec['name']")
    if "prefix" in spec:
        check_key(spec["prefix"], "spec['prefix']", allow_empty=True)
    return _req("put_class", namespace=namespace, **{"class": spec})


def remove_class(namespace: Any, prefix: Any) -> Tuple[str, str]:
    return _req("remove_class", namespace=check_namespace(namespace),
                prefix=check_key(prefix, "prefix", allow_empty=True))


def set_semaphore(namespace: Any, key: Any, permits: Any, reason: Any) -> Tuple[str, str]:
    return _req("set_semaphore", namespace=check_namespace(namespace), key=check_key(key),
                permits=check_int("permits", permits, 0, 1024), reason=check_text("reason", reason))


def request_force_release(namespace: Any, key: Any, expected_token: Any, reason: Any,
                          revoke_session: Any, holder_session_id: Any) -> Tuple[str, str]:
    return _req(
        "request_force_release", namespace=check_namespace(namespace), key=check_key(key),
        expected_token=check_int("expected_token", expected_token, 1, U64_MAX),
        reason=check_text("reason", reason),
        revoke_session=check_bool("revoke_session", revoke_session),
        holder_session_id=check_int("holder_session_id", holder_session_id, 0, U64_MAX),
    )


def approve_force_release(force_release_id: Any, acknowledged_fenced: Any) -> Tuple[str, str]:
    return _req("approve_force_release",
                force_release_id=check_int("force_release_id", force_release_id, 1, U64_MAX),
                acknowledged_fenced=check_bool("acknowledged_fenced", acknowledged_fenced))


def deny_force_release(force_release_id: Any, reason: Any) -> Tuple[str, str]:
    return _req("deny_force_release",
                force_release_id=check_int("force_release_id", force_release_id, 1, U64_MAX),
                reason=check_text("reason", reason))


def force_releases(allow_stale: Any) -> Tuple[str, str]:
    return _req("list_force_releases", allow_stale=check_bool("allow_stale", allow_stale))


def audit(namespace: Any, key: Any, revision_min: Any, revision_max: Any, limit: Any,
          allow_stale: Any) -> Tuple[str, str]:
    return _req(
        "query_audit",
        namespace=None if namespace is None else check_namespace(namespace),
        key=None if key is None else check_key(key),
        revision_min=check_int("revision_min", revision_min, 0, U64_MAX),
        revision_max=None if revision_max is None else check_int("revision_max", revision_max, 0, U64_MAX),
        limit=check_int("limit", limit, 0, U32_MAX),
        allow_stale=check_bool("allow_stale", allow_stale),
    )


def replica_status() -> Tuple[str, str]:
    return _req("get_replica_status")


def watch_args(namespace: Any, key_prefix: Any, from_revision: Any) -> Tuple[Optional[str], str, int, bool]:
    """(namespace or None, key prefix, from revision, from now)."""
    if namespace is not None:
        check_namespace(namespace)
    check_key(key_prefix, "key_prefix", allow_empty=True)
    if from_revision is None:
        return namespace, key_prefix, 0, True
    return namespace, key_prefix, check_int("from_revision", from_revision, 0, U64_MAX), False


def answer(text: str) -> Dict[str, Any]:
    return json.loads(text)
