"""The blocking API: `picket.Client`, `Session`, `Lock`, `Watch`.

Every blocking call waits with the GIL released; ctrl-c (`KeyboardInterrupt`) ends it, and a
waiting `lock()` then leaves the queue at the server (the client library cancels the wait in the
background). Any number of threads may share one client, its sessions and their locks.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from . import _admin, _picket
from ._common import (
    Lost,
    PathOrPem,
    check_key,
    check_namespace,
    check_seconds,
    core_client,
    lock_args,
    session_event,
)
from ._errors import ReleasedError

log = logging.getLogger("picket")


def _block(pending: "_picket.Pending") -> Any:
    return pending.block()


class Lock:
    """A held lock (or semaphore permit, or shared lock) and its fencing token.

    Pass `token` with every write to the protected resource, and stop writing once `lost`
    fires. Use it as a context manager (released on exit) or call `release()`. A lock that is
    garbage-collected unreleased is released in the background, best effort.
    """

    def __init__(self, core: "_picket.CoreLock", mode: str):
        self._core = core
        self.namespace: str = core.namespace
        """The lock's namespace."""
        self.key: str = core.key
        """The lock's key."""
        self.token: int = core.token
        """The fencing token: the revision of the grant; rises strictly per key."""
        self.slot: Optional[int] = core.slot
        """A semaphore permit's slot (None for a lock): fence per (key, slot)."""
        self.session_id: int = core.session_id
        """The session holding it."""
        self.mode: str = mode
        """`exclusive`, `shared` or `permit`."""
        self.lost = Lost(f"{self.namespace}/{self.key} (token {self.token})")
        """Fires when the lock is lost (session lost, or force-released): see `picket.Lost`."""
        self._released = False
        core.subscribe(self.lost._fire)
        log.debug("took %s/%s (%s) with token %d", self.namespace, self.key, mode, self.token)

    def is_held(self) -> bool:
        """Held as far as this client can tell: not released, not lost, and the session's
        keepalive deadline not passed."""
        return self._core.is_held()

    def release(self) -> None:
        """Releases the lock. Raises `LockLostError` / `SessionLostError` if it was lost
        meanwhile (the critical section ran unprotected from the loss on), `ReleasedError` if
        released already."""
        self._released = True
        _block(self._core.release())
        log.debug("released %s/%s (token %d)", self.namespace, self.key, self.token)

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._released:
            return
        if exc_type is None:
            self.release()
            return
        # The block failed: release, but never hide its exception behind a release error.
        try:
            self.release()
        except Exception as error:  # noqa: BLE001
            log.debug("release after a failed block: %s", error)

    def __repr__(self) -> str:
        slot = "" if self.slot is None else f" slot={self.slot}"
        state = "released" if self._released else ("held" if self.is_held() else "lost")
        return (f"<picket.Lock {self.namespace}/{self.key} token={self.token}{slot} "
                f"{self.mode} {state}>")


class Session:
    """A session: kept alive in the background by the client library; takes locks. Closing
    it (or leaving its `with` block) releases its locks and removes its waits at once."""

    def __init__(self, core: "_picket.CoreSession"):
        self._core = core
        self.id: int = core.id
        """The session id."""
        self.ttl: float = core.ttl
        """The TTL the server granted, in seconds."""
        self.lost = Lost(f"session {self.id}")
        """Fires when the session is lost (and every lock it holds): see `picket.Lost`."""
        self._closed = False
        core.subscribe(session_event(self.lost, self.id))
        log.debug("session %d created (ttl %.3f s)", self.id, self.ttl)

    def is_alive(self) -> bool:
        """Not lost, and its keepalive deadline not passed."""
        return self._core.is_alive()

    @property
    def state(self) -> Dict[str, Any]:
        """The state as the client sees it: `{'state': 'healthy' | 'jeopardy' | 'safe' |
        'lost', ...}` (jeopardy: no keepalive acknowledged for half the TTL)."""
        return self._core.state()

    def lock(self, namespace: str, key: str, *, timeout: Optional[float] = None,
             shared: bool = False) -> Lock:
        """Takes `namespace`/`key`, waiting in the queue until it is granted.

        `timeout` (seconds): give up after that long with `WaitTimeoutError`; the wait is
        removed at the server at its deadline. `shared=True`: a shared lock (held together with
        other shared holders, never with an exclusive one). Raises `SessionLostError` if the
        session is lost meanwhile. ctrl-c ends the wait and leaves the queue."""
        namespace, key, timeout_ms, mode = lock_args(namespace, key, timeout, shared)
        return Lock(_block(self._core.acquire(namespace, key, mode, True, timeout_ms)), mode)

    def try_lock(self, namespace: str, key: str, *, shared: bool = False) -> Lock:
        """Takes `namespace`/`key` if it is free; raises `HeldError` (with the holder's session
        id and token) if not."""
        namespace, key, _, mode = lock_args(namespace, key, None, shared)
        return Lock(_block(self._core.acquire(namespace, key, mode, False, None)), mode)

    def acquire_permit(self, namespace: str, key: str, *, timeout: Optional[float] = None) -> Lock:
        """Takes a permit of the semaphore `namespace`/`key` (declared by an operator with
        `set_semaphore`), waiting while all are held; `lock.slot` is the permit's slot."""
        namespace, key, timeout_ms, _ = lock_args(namespace, key, timeout, False)
        return Lock(_block(self._core.acquire(namespace, key, "permit", True, timeout_ms)), "permit")

    def try_acquire_permit(self, namespace: str, key: str) -> Lock:
        """A permit if one is free and nobody waits; raises `HeldError` if not."""
        namespace, key, _, _ = lock_args(namespace, key, None, False)
        return Lock(_block(self._core.acquire(namespace, key, "permit", False, None)), "permit")

    def cancel_wait(self, namespace: str, key: str) -> Dict[str, Any]:
        """Leaves the queue of `namespace`/`key` (idempotent): `{'removed': bool, 'held_token':
        int | None, 'revision': int}`; `held_token` is set when the cancel raced the grant (the
        session holds the key: release it with `release_token`)."""
        return _block(self._core.cancel_wait(check_namespace(namespace), check_key(key)))

    def close(self) -> Tuple[int, int]:
        """Closes the session: answers (holds released, waits removed). Every lock of the
        session reports `lost` (reason `closed`). Closing again does nothing (answers (0, 0))."""
        if self._closed:
            return (0, 0)
        self._closed = True
        answer = _block(self._core.close())
        log.debug("session %d closed: %d holds released, %d waits removed", self.id, *answer)
        return answer

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except Exception as error:  # noqa: BLE001
            log.debug("close after a failed block: %s", error)

    def __repr__(self) -> str:
        return f"<picket.Session {self.id} ttl={self.ttl:g}s {'alive' if self.is_alive() else 'lost'}>"


class Watch:
    """The lock log as an iterator of events (dicts: proto3 JSON of `picket.v1.Event`). It
    resumes a broken stream by itself; `resume_from` is the revision the next page starts at.
    Iterating blocks (GIL released; ctrl-c ends it)."""

    def __init__(self, core: "_picket.CoreWatcher", from_now: bool):
        self._core = core
        self._page: List[Dict[str, Any]] = []
        if from_now:
            # "From now" is from this call: the stream opens here (its first page is empty and
            # says where it starts), not at the first read.
            self._page = _admin.answer(_block(self._core.next_page()))

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> Dict[str, Any]:
        while not self._page:
            self._page = _admin.answer(_block(self._core.next_page()))
        return self._page.pop(0)

    def next_page(self) -> List[Dict[str, Any]]:
        """The next page of events (possibly empty): pages end at revision boundaries."""
        if self._page:
            page, self._page = self._page, []
            return page
        return _admin.answer(_block(self._core.next_page()))

    @property
    def resume_from(self) -> int:
        return self._core.resume_from()


class Client:
    """A handle on a Picket cluster: any replica list; the client follows the leader.

    ```
    client = picket.Client(["127.0.0.1:7401", "127.0.0.1:7402", "127.0.0.1:7403"])
    with client.session() as session:
        with session.lock("orders", "invoice/42") as lock:
            write(lock.token)
    ```

    Arguments (all but `endpoints` by keyword; durations in seconds):
    `name` (the session identity's name; default: the program's file name), `host` (default: the
    host name), `session_ttl` (default: the cluster's), `rpc_timeout` (5), `connect_timeout`
    (2), `retry_budget` (15), `wait_slice` (30), `clock_drift_ppm` (10 000), `principal` and
    `roles` (dev clusters: `x-picket-principal` / `x-picket-roles`), `bearer_token` (OIDC),
    `tls` (TLS with the public web roots), `ca`, `cert`, `key` (paths or PEM bytes: a CA bundle,
    and a client certificate and key for mutual TLS), `tls_domain` (the name to check the
    replicas' certificates against), `transport` (`stream`, the default, or `unary`).
    Connects lazily, on the first call.
    """

    def __init__(
        self,
        endpoints: Union[str, Iterable[str]],
        *,
        name: Optional[str] = None,
        host: Optional[str] = None,
        session_ttl: Optional[float] = None,
        rpc_timeout: Optional[float] = None,
        connect_timeout: Optional[float] = None,
        retry_budget: Optional[float] = None,
        wait_slice: Optional[float] = None,
        clock_drift_ppm: Optional[int] = None,
        principal: Optional[str] = None,
        roles: Optional[Union[str, Iterable[str]]] = None,
        bearer_token: Optional[str] = None,
        tls: bool = False,
        ca: Optional[PathOrPem] = None,
        cert: Optional[PathOrPem] = None,
        key: Optional[PathOrPem] = None,
        tls_domain: Optional[str] = None,
        transport: str = "stream",
    ):
        self._core = core_client(
            endpoints, name=name, host=host, session_ttl=session_ttl, rpc_timeout=rpc_timeout,
            connect_timeout=connect_timeout, retry_budget=retry_budget, wait_slice=wait_slice,
            clock_drift_ppm=clock_drift_ppm, principal=principal, roles=roles,
            bearer_token=bearer_token, tls=tls, ca=ca, cert=cert, key=key,
            tls_domain=tls_domain, transport=transport,
        )
        self._sessions: "weakref.WeakSet[Session]" = weakref.WeakSet()
        self._mutex = threading.Lock()

    @property
    def leader(self) -> str:
        """The endpoint the client currently believes leads."""
        return self._core.leader_guess()

    def session(self) -> Session:
        """Creates a session (kept alive in the background until closed or lost). Use it as a
        context manager to close it on exit."""
        session = Session(_block(self._core.create_session()))
        with self._mutex:
            self._sessions.add(session)
        return session

    def close(self) -> None:
        """Closes every session of this client still open (best effort)."""
        with self._mutex:
            sessions = list(self._sessions)
        for session in sessions:
            try:
                session.close()
            except Exception as error:  # noqa: BLE001
                log.debug("closing session %d: %s", session.id, error)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()

    # --- admin calls (answers: proto3 JSON dicts of the response messages) ---

    def _admin(self, request: Tuple[str, str]) -> Dict[str, Any]:
        return _admin.answer(_block(self._core.admin(*request)))

    def inspect(self, namespace: str, key: str, *, allow_stale: bool = False) -> Dict[str, Any]:
        """`Admin.Inspect`: the key's holders, queue, class, floor and pending force-releases
        (a `KeyInfo` dict)."""
        return self._admin(_admin.inspect(namespace, key, allow_stale))

    def holds(self, namespace: str, *, limit: int = 0, allow_stale: bool = False) -> Dict[str, Any]:
        """`Admin.ListHolds`: `{'revision', 'holds': [HoldInfo, ...]}`, oldest first."""
        return self._admin(_admin.holds(namespace, limit, allow_stale))

    def longest_holds(self, *, allow_stale: bool = False) -> Dict[str, Any]:
        """`Admin.LongestHolds`: the oldest hold of every namespace."""
        return self._admin(_admin.longest_holds(allow_stale))

    def classes(self, namespace: str, *, allow_stale: bool = False) -> Dict[str, Any]:
        """`Admin.ListClasses`: `{'classes': [ClassSpec, ...]}`."""
        return self._admin(_admin.classes(namespace, allow_stale))

    def put_class(self, namespace: str, spec: Dict[str, Any]) -> Dict[str, Any]:
        """`Admin.PutClass` (role class-admin): `spec` holds `ClassSpec` fields (`name`,
        `prefix`, `fenced`, `session_ttl_ms_default`, ...)."""
        return self._admin(_admin.put_class(namespace, spec))

    def remove_class(self, namespace: str, prefix: str) -> Dict[str, Any]:
        """`Admin.RemoveClass` (role class-admin)."""
        return self._admin(_admin.remove_class(namespace, prefix))

    def set_semaphore(self, namespace: str, key: str, permits: int, reason: str) -> Dict[str, Any]:
        """`Admin.SetSemaphore` (role class-admin): declares `key` a semaphore of `permits`
        permits (0 removes it); `{'revision', 'previous_permits'}`."""
        return self._admin(_admin.set_semaphore(namespace, key, permits, reason))

    def request_force_release(self, namespace: str, key: str, expected_token: int, reason: str,
                              *, revoke_session: bool = False,
                              holder_session_id: int = 0) -> Dict[str, Any]:
        """`Admin.RequestForceRelease`, step one of the two-person rule:
        `{'force_release_id', 'fenced', 'safety', 'expires_at_ms'}`."""
        return self._admin(_admin.request_force_release(
            namespace, key, expected_token, reason, revoke_session, holder_session_id))

    def approve_force_release(self, force_release_id: int, *,
                              acknowledged_fenced: bool = False) -> Dict[str, Any]:
        """`Admin.ApproveForceRelease`, step two, by a different principal:
        `{'floor', 'released_token', 'next', 'session_revoked', 'fenced'}`."""
        return self._admin(_admin.approve_force_release(force_release_id, acknowledged_fenced))

    def deny_force_release(self, force_release_id: int, reason: str) -> Dict[str, Any]:
        """`Admin.DenyForceRelease`."""
        return self._admin(_admin.deny_force_release(force_release_id, reason))

    def force_releases(self, *, allow_stale: bool = False) -> Dict[str, Any]:
        """`Admin.ListForceReleases`: the requests still approvable."""
        return self._admin(_admin.force_releases(allow_stale))

    def audit(self, *, namespace: Optional[str] = None, key: Optional[str] = None,
              revision_min: int = 0, revision_max: Optional[int] = None, limit: int = 0,
              allow_stale: bool = False) -> Dict[str, Any]:
        """`Admin.QueryAudit`: `{'records': [AuditRecord, ...], 'compacted_through'}`."""
        return self._admin(_admin.audit(namespace, key, revision_min, revision_max, limit,
                                        allow_stale))

    def replica_status(self) -> Dict[str, Any]:
        """`Admin.GetReplicaStatus` of the replica the client talks to."""
        return self._admin(_admin.replica_status())

    def watch(self, namespace: Optional[str] = None, key_prefix: str = "", *,
              from_revision: Optional[int] = None) -> Watch:
        """Follows the lock log of `namespace` (None: all) under `key_prefix`: from
        `from_revision` (0: the oldest retained), or, by default, from now on (the stream opens
        before this returns, so everything after the call is seen)."""
        args = _admin.watch_args(namespace, key_prefix, from_revision)
        return Watch(self._core.watch(*args), from_now=args[3])

    def __repr__(self) -> str:
        return f"<picket.Client leader={self.leader}>"
