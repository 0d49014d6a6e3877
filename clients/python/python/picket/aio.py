"""The asyncio API: `picket.aio.Client`, `Session`, `Lock`, `Watch`.

The same client library as `picket.Client` underneath (one runtime per process, shared with the
sync API). Every call is awaitable; cancelling it (`task.cancel()`, `asyncio.wait_for`'s
timeout) cancels the call, and a waiting `lock()` leaves the queue at the server. Any number of
tasks may share one client.

```
async with picket.aio.Client(["127.0.0.1:7401"]).session() as session:
    async with session.lock("orders", "invoice/42") as lock:
        await write(lock.token)
```
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Dict, Generator, Iterable, List, Optional, Tuple, Union

from . import _admin, _picket
from ._common import (
    Lost,
    PathOrPem,
    check_key,
    check_namespace,
    core_client,
    lock_args,
    session_event,
)

log = logging.getLogger("picket")

__all__ = ["Client", "Session", "Lock", "Watch"]


async def _await(pending: "_picket.Pending") -> Any:
    if pending.done():
        return pending.result()
    loop = asyncio.get_running_loop()
    future: "asyncio.Future[None]" = loop.create_future()

    def wake(_: Any) -> None:
        try:
            loop.call_soon_threadsafe(_wake, future)
        except RuntimeError:
            pass  # the loop is closed

    if pending.on_done(wake):
        return pending.result()
    try:
        await future
    except BaseException:
        pending.cancel()
        raise
    return pending.result()


def _wake(future: "asyncio.Future[None]") -> None:
    if not future.done():
        future.set_result(None)


class Lock:
    """A held lock (see `picket.Lock`); `await lock.release()` or `async with`."""

    def __init__(self, core: "_picket.CoreLock", mode: str):
        self._core = core
        self.namespace: str = core.namespace
        self.key: str = core.key
        self.token: int = core.token
        """The fencing token: pass it with every write to the protected resource."""
        self.slot: Optional[int] = core.slot
        self.session_id: int = core.session_id
        self.mode: str = mode
        self.lost = Lost(f"{self.namespace}/{self.key} (token {self.token})")
        """Fires when the lock is lost: `await lock.lost` answers the `LostReason`."""
        self._released = False
        core.subscribe(self.lost._fire)

    def is_held(self) -> bool:
        return self._core.is_held()

    async def release(self) -> None:
        """Releases the lock; raises `LockLostError` / `SessionLostError` if it was lost."""
        self._released = True
        await _await(self._core.release())

    async def __aenter__(self) -> "Lock":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._released:
            return
        if exc_type is None:
            await self.release()
            return
        try:
            await self.release()
        except Exception as error:  # noqa: BLE001
            log.debug("release after a failed block: %s", error)

    def __repr__(self) -> str:
        return f"<picket.aio.Lock {self.namespace}/{self.key} token={self.token} {self.mode}>"


class _Acquiring:
    """`session.lock(...)`: await it for the `Lock`, or use it as `async with`."""

    def __init__(self, pending: "_picket.Pending", mode: str):
        self._pending = pending
        self._mode = mode
        self._lock: Optional[Lock] = None

    async def _get(self) -> Lock:
        if self._lock is None:
            self._lock = Lock(await _await(self._pending), self._mode)
        return self._lock

    def __await__(self) -> Generator[Any, None, Lock]:
        return self._get().__await__()

    async def __aenter__(self) -> Lock:
        return await self._get()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._lock is not None
        await self._lock.__aexit__(exc_type, exc, tb)


class Session:
    """A session (see `picket.Session`); every call awaitable."""

    def __init__(self, core: "_picket.CoreSession"):
        self._core = core
        self.id: int = core.id
        self.ttl: float = core.ttl
        self.lost = Lost(f"session {self.id}")
        self._closed = False
        core.subscribe(session_event(self.lost, self.id))

    def is_alive(self) -> bool:
        return self._core.is_alive()

    @property
    def state(self) -> Dict[str, Any]:
        return self._core.state()

    def lock(self, namespace: str, key: str, *, timeout: Optional[float] = None,
             shared: bool = False) -> _Acquiring:
        """`await session.lock(...)` or `async with session.lock(...) as lock`: waits until
        granted (`timeout`: `WaitTimeoutError` after that many seconds)."""
        namespace, key, timeout_ms, mode = lock_args(namespace, key, timeout, shared)
        return _Acquiring(self._core.acquire(namespace, key, mode, True, timeout_ms), mode)

    def try_lock(self, namespace: str, key: str, *, shared: bool = False) -> _Acquiring:
        """The key if free; `HeldError` if not."""
        namespace, key, _, mode = lock_args(namespace, key, None, shared)
        return _Acquiring(self._core.acquire(namespace, key, mode, False, None), mode)

    def acquire_permit(self, namespace: str, key: str, *,
                       timeout: Optional[float] = None) -> _Acquiring:
        """A permit of the semaphore `namespace`/`key`, waiting while all are held."""
        namespace, key, timeout_ms, _ = lock_args(namespace, key, timeout, False)
        return _Acquiring(self._core.acquire(namespace, key, "permit", True, timeout_ms), "permit")

    def try_acquire_permit(self, namespace: str, key: str) -> _Acquiring:
        namespace, key, _, _ = lock_args(namespace, key, None, False)
        return _Acquiring(self._core.acquire(namespace, key, "permit", False, None), "permit")

    async def cancel_wait(self, namespace: str, key: str) -> Dict[str, Any]:
        return await _await(self._core.cancel_wait(check_namespace(namespace), check_key(key)))

    async def close(self) -> Tuple[int, int]:
        if self._closed:
            return (0, 0)
        self._closed = True
        return await _await(self._core.close())

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            await self.close()
            return
        try:
            await self.close()
        except Exception as error:  # noqa: BLE001
            log.debug("close after a failed block: %s", error)


class _Creating:
    """`client.session()`: await it for the `Session`, or use it as `async with`."""

    def __init__(self, client: "Client"):
        self._client = client
        self._session: Optional[Session] = None

    async def _get(self) -> Session:
        if self._session is None:
            self._session = Session(await _await(self._client._core.create_session()))
        return self._session

    def __await__(self) -> Generator[Any, None, Session]:
        return self._get().__await__()

    async def __aenter__(self) -> Session:
        return await self._get()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._session is not None
        await self._session.__aexit__(exc_type, exc, tb)


class Watch:
    """The lock log as an async iterator of events (see `picket.Watch`)."""

    def __init__(self, core: "_picket.CoreWatcher", from_now: bool):
        self._core = core
        self._page: List[Dict[str, Any]] = []
        # From now: the stream starts opening here; `await watch.started()` waits until it is
        # open (everything after that is seen).
        self._opening: Optional["_picket.Pending"] = core.next_page() if from_now else None

    async def started(self) -> "Watch":
        """Waits until the stream is open (for a watch from now): events after this are seen."""
        if self._opening is not None:
            opening, self._opening = self._opening, None
            self._page = _admin.answer(await _await(opening)) + self._page
        return self

    def __aiter__(self) -> "Watch":
        return self

    async def __anext__(self) -> Dict[str, Any]:
        await self.started()
        while not self._page:
            self._page = _admin.answer(await _await(self._core.next_page()))
        return self._page.pop(0)

    async def next_page(self) -> List[Dict[str, Any]]:
        await self.started()
        if self._page:
            page, self._page = self._page, []
            return page
        return _admin.answer(await _await(self._core.next_page()))


class Client:
    """A handle on a Picket cluster for asyncio code: the arguments of `picket.Client`."""

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

    @property
    def leader(self) -> str:
        return self._core.leader_guess()

    def session(self) -> _Creating:
        """`await client.session()` or `async with client.session() as session`."""
        return _Creating(self)

    async def _admin(self, request: Tuple[str, str]) -> Dict[str, Any]:
        return _admin.answer(await _await(self._core.admin(*request)))

    async def inspect(self, namespace: str, key: str, *, allow_stale: bool = False) -> Dict[str, Any]:
        return await self._admin(_admin.inspect(namespace, key, allow_stale))

    async def holds(self, namespace: str, *, limit: int = 0,
                    allow_stale: bool = False) -> Dict[str, Any]:
        return await self._admin(_admin.holds(namespace, limit, allow_stale))

    async def longest_holds(self, *, allow_stale: bool = False) -> Dict[str, Any]:
        return await self._admin(_admin.longest_holds(allow_stale))

    async def classes(self, namespace: str, *, allow_stale: bool = False) -> Dict[str, Any]:
        return await self._admin(_admin.classes(namespace, allow_stale))

    async def put_class(self, namespace: str, spec: Dict[str, Any]) -> Dict[str, Any]:
        return await self._admin(_admin.put_class(namespace, spec))

    async def remove_class(self, namespace: str, prefix: str) -> Dict[str, Any]:
        return await self._admin(_admin.remove_class(namespace, prefix))

    async def set_semaphore(self, namespace: str, key: str, permits: int,
                            reason: str) -> Dict[str, Any]:
        return await self._admin(_admin.set_semaphore(namespace, key, permits, reason))

    async def request_force_release(self, namespace: str, key: str, expected_token: int,
                                    reason: str, *, revoke_session: bool = False,
                                    holder_session_id: int = 0) -> Dict[str, Any]:
        return await self._admin(_admin.request_force_release(
            namespace, key, expected_token, reason, revoke_session, holder_session_id))

    async def approve_force_release(self, force_release_id: int, *,
                                    acknowledged_fenced: bool = False) -> Dict[str, Any]:
        return await self._admin(_admin.approve_force_release(force_release_id,
                                                              acknowledged_fenced))

    async def deny_force_release(self, force_release_id: int, reason: str) -> Dict[str, Any]:
        return await self._admin(_admin.deny_force_release(force_release_id, reason))

    async def force_releases(self, *, allow_stale: bool = False) -> Dict[str, Any]:
        return await self._admin(_admin.force_releases(allow_stale))

    async def audit(self, *, namespace: Optional[str] = None, key: Optional[str] = None,
                    revision_min: int = 0, revision_max: Optional[int] = None, limit: int = 0,
                    allow_stale: bool = False) -> Dict[str, Any]:
        return await self._admin(_admin.audit(namespace, key, revision_min, revision_max, limit,
                                              allow_stale))

    async def replica_status(self) -> Dict[str, Any]:
        return await self._admin(_admin.replica_status())

    def watch(self, namespace: Optional[str] = None, key_prefix: str = "", *,
              from_revision: Optional[int] = None) -> Watch:
        """`async for event in client.watch("orders")`: from now on, or from `from_revision`.
        A watch from now starts opening its stream here; `await watch.started()` waits until it
        is open."""
        args = _admin.watch_args(namespace, key_prefix, from_revision)
        return Watch(self._core.watch(*args), from_now=args[3])
