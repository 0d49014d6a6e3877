"""The exceptions of the `picket` package.

Every error the client library can report is a `PicketError` subclass carrying a stable
`.rule` (a short snake_case name to branch on) and the library's message. For a refusal by the
server (`RefusedError`) `.rule` is the server's own rule name (`not_holder`,
`fenced_not_acknowledged`, `invalid_argument`, ... see docs/api.md, "Errors"); for everything
else it is the kind of failure (`unavailable`, `held`, `wait_timed_out`, `session_lost`, ...).
Bad arguments are refused in Python before anything is sent, with the built-in `TypeError` or
`ValueError` naming the argument.
"""

from __future__ import annotations

from typing import Any, Dict, Optional


class LostReason:
    """Why a session or a lock was lost.

    `kind` is one of `revoked`, `unknown_session`, `keepalive_expired`, `closed`,
    `keepalive_refused`, `force_released`, `ended`; `str(reason)` says it in words. Kind-specific
    fields (present as attributes, else None): `ttl` (keepalive_expired), `rule` and
    `server_message` (keepalive_refused), `revision` and `force_release_id` (force_released,
    ended), `cause` (ended: `closed`, `expired` or `revoked`).
    """

    __slots__ = ("kind", "message", "ttl", "rule", "server_message", "revision",
                 "force_release_id", "cause")

    def __init__(self, fields: Dict[str, Any]):
        self.kind: str = fields["kind"]
        self.message: str = fields["message"]
        self.ttl: Optional[float] = fields.get("ttl")
        self.rule: Optional[str] = fields.get("rule")
        self.server_message: Optional[str] = fields.get("server_message")
        self.revision: Optional[int] = fields.get("revision")
        self.force_release_id: Optional[int] = fields.get("force_release_id")
        self.cause: Optional[str] = fields.get("cause")

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"LostReason(kind={self.kind!r}, message={self.message!r})"


class PicketError(Exception):
    """Base of every Picket error. `.rule` is stable; `.message` is for people."""

    rule: str = "picket_error"

    def __init__(self, message: str, rule: Optional[str] = None, **fields: Any):
        super().__init__(message)
        self.message = message
        if rule is not None:
            self.rule = rule
        for name, value in fields.items():
            setattr(self, name, value)


class ConfigError(PicketError, ValueError):
    """The client's configuration is unusable: rule `no_endpoints`, `bad_endpoint`,
    `bad_credential`, `bad_config` or `bad_tls` (`.what`: ca, cert or key)."""


class UnavailableError(PicketError):
    """No replica answered within the retry budget (rule `unavailable`). The request may or may
    not have been applied. `.attempts`, `.elapsed` (seconds), `.last` (the last error),
    `.tls_mismatch` (`plaintext_to_tls`, `tls_to_plaintext`, `untrusted_server`,
    `client_certificate_required` or None) and `.tls_hint`."""

    rule = "unavailable"


class RefusedError(PicketError):
    """The server refused the request. `.rule` is the server's rule (docs/api.md, "Errors"),
    `.code` the gRPC status name (`FAILED_PRECONDITION`, ...), `.field` the request field at
    fault for `invalid_argument`, `.oldest_available_revision` for `compacted`."""


class LostError(PicketError):
    """A session or a lock is lost. `.reason` is a `LostReason`."""


class SessionLostError(LostError):
    """The session is lost, and with it every lock it held (rule `session_lost`)."""

    rule = "session_lost"


class LockLostError(LostError):
    """This lock was force-released while its session lives on (rule `lock_lost`)."""

    rule = "lock_lost"


class HeldError(PicketError):
    """`try_lock` / `try_acquire_permit` found the key held (rule `held`): `.holder_session_id`
    and `.token` name the oldest holder."""

    rule = "held"


class WaitTimeoutError(PicketError, TimeoutError):
    """A wait with a timeout was not granted in time; the server removed the wait (rule
    `wait_timed_out`)."""

    rule = "wait_timed_out"


class BadAnswerError(PicketError):
    """The server's answer lacked a field it must carry (rule `bad_answer`: a server bug)."""

    rule = "bad_answer"


class CompactedError(PicketError):
    """A watch asked for history the server no longer keeps (rule `compacted`): re-read the
    state and watch from `.oldest_available_revision`."""

    rule = "compacted"


class CancelledCallError(PicketError):
    """The call was cancelled before it was answered (rule `cancelled`)."""

    rule = "cancelled"


class ReleasedError(PicketError, RuntimeError):
    """The lock was released already (rule `released`), or the session closed (rule
    `closed`)."""

    rule = "released"


class UsedAfterForkError(PicketError, RuntimeError):
    """A client, session or lock made before `fork()` was used in the child (rule
    `used_after_fork`): make a new `Client` in the child."""

    rule = "used_after_fork"


class FencingError(PicketError):
    """A `FencingGate` refused a write; nothing was recorded."""


class StaleTokenError(FencingError):
    """A later token was already accepted for the key (rule `stale_token`) or for the slot
    (rule `stale_slot_token`): the lock has moved on, the writer must stop. `.key`, `.token`,
    `.highest` and, for a slot, `.slot`."""

    rule = "stale_token"


class BelowEvictionFloorError(FencingError):
    """The gate forgot the key to stay within its capacity and the token is below its eviction
    floor (rule `below_eviction_floor`): re-acquire the lock and retry with the new token."""

    rule = "below_eviction_floor"


class FencingKeyTooLongError(FencingError, ValueError):
    """The fencing key is longer than the gate takes (rule `key_too_long`)."""

    rule = "key_too_long"


_KINDS = {
    "no_endpoints": ConfigError,
    "bad_endpoint": ConfigError,
    "bad_credential": ConfigError,
    "bad_config": ConfigError,
    "bad_tls": ConfigError,
    "unavailable": UnavailableError,
    "refused": RefusedError,
    "session_lost": SessionLostError,
    "lock_lost": LockLostError,
    "held": HeldError,
    "wait_timed_out": WaitTimeoutError,
    "bad_answer": BadAnswerError,
    "compacted": CompactedError,
    "cancelled": CancelledCallError,
    "released": ReleasedError,
    "closed": ReleasedError,
    "used_after_fork": UsedAfterForkError,
    "stale_token": StaleTokenError,
    "stale_slot_token": StaleTokenError,
    "below_eviction_floor": BelowEvictionFloorError,
    "key_too_long": FencingKeyTooLongError,
}


def _from_core(kind: str, message: str, fields: Dict[str, Any]) -> PicketError:
    """Called by the extension module: the exception for a failure of `kind`."""
    cls = _KINDS.get(kind, PicketError)
    fields = dict(fields)
    if isinstance(fields.get("reason"), dict):
        fields["reason"] = LostReason(fields["reason"])
    rule = fields.pop("rule", None) if kind == "refused" else kind
    return cls(message, rule=rule, **fields)
