"""What the sync and asyncio APIs share: argument checks (in Python, before anything is sent),
the lost signal, and the client configuration."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import sys
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from . import _picket
from ._errors import LostReason

log = logging.getLogger("picket")

_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}\Z")
KEY_LEN_MAX = 512
TIMEOUT_MAX = 86_400.0
U64_MAX = 2**64 - 1
U32_MAX = 2**32 - 1

PathOrPem = Union[str, bytes, "os.PathLike[str]"]


def _type_name(value: Any) -> str:
    return type(value).__name__


def check_str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {_type_name(value)}")
    return value


def check_namespace(value: Any, name: str = "namespace") -> str:
    check_str(name, value)
    if not _NAMESPACE.match(value):
        raise ValueError(
            f"{name} {value!r} must match [a-z0-9][a-z0-9-]{{0,62}} (lowercase letters, digits "
            "and '-', not first; 1 to 63 characters)"
        )
    return value


def check_key(value: Any, name: str = "key", allow_empty: bool = False) -> str:
    check_str(name, value)
    try:
        length = len(value.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise ValueError(f"{name} must be valid UTF-8 text: {error}") from None
    if length == 0 and not allow_empty:
        raise ValueError(f"{name} must not be empty (1 to {KEY_LEN_MAX} bytes of UTF-8)")
    if length > KEY_LEN_MAX:
        raise ValueError(f"{name} is {length} bytes of UTF-8: at most {KEY_LEN_MAX}")
    return value


def check_int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {_type_name(value)}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, not {value}")
    return value


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {_type_name(value)}")
    return value


def check_seconds(name: str, value: Any, high: float = TIMEOUT_MAX) -> int:
    """A duration in seconds (int or float, above zero, at most `high`) -> whole milliseconds
    (at least 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {_type_name(value)}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be above 0 seconds, not {value}")
    if value > high:
        raise ValueError(f"{name} must be at most {high:g} seconds, not {value}")
    return max(1, math.ceil(value * 1000))


def check_text(name: str, value: Any, max_bytes: int = 1024) -> str:
    check_str(name, value)
    if not value:
        raise ValueError(f"{name} must not be empty")
    if len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        raise ValueError(f"{name} must be at most {max_bytes} bytes of UTF-8")
    return value


def check_callable(name: str, value: Any) -> Callable[..., Any]:
    if not callable(value):
        raise TypeError(f"{name} must be callable, not {_type_name(value)}")
    return value


def _pem(name: str, value: Any) -> Optional[bytes]:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, (str, os.PathLike)):
        try:
            with open(value, "rb") as f:
                return f.read()
        except OSError as error:
            from ._errors import ConfigError

            raise ConfigError(f"bad TLS {name}: cannot read {value}: {error}", rule="bad_tls",
                              what=name, reason=str(error)) from None
    raise TypeError(f"{name} must be a path or the PEM bytes, not {_type_name(value)}")


def core_client(
    endpoints: Union[str, Iterable[str]],
    *,
    name: Optional[str],
    host: Optional[str],
    session_ttl: Optional[float],
    rpc_timeout: Optional[float],
    connect_timeout: Optional[float],
    retry_budget: Optional[float],
    wait_slice: Optional[float],
    clock_drift_ppm: Optional[int],
    principal: Optional[str],
    roles: Optional[Union[str, Iterable[str]]],
    bearer_token: Optional[str],
    tls: bool,
    ca: Optional[PathOrPem],
    cert: Optional[PathOrPem],
    key: Optional[PathOrPem],
    tls_domain: Optional[str],
    transport: str,
) -> "_picket.CoreClient":
    if isinstance(endpoints, str):
        endpoint_list = [endpoints]
    else:
        try:
            endpoint_list = list(endpoints)
        except TypeError:
            raise TypeError(
                f"endpoints must be a str or a list of str, not {_type_name(endpoints)}"
            ) from None
    if not endpoint_list:
        raise ValueError("endpoints must name at least one replica (e.g. '127.0.0.1:7401')")
    for i, endpoint in enumerate(endpoint_list):
        check_str(f"endpoints[{i}]", endpoint)
    if name is None:
        name = os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "") or "python"
    check_text("name", name, 256)
    if host is None:
        host = _hostname()
    else:
        check_str("host", host)
    ms = {}
    for arg, value, high in (
        ("session_ttl", session_ttl, TIMEOUT_MAX),
        ("rpc_timeout", rpc_timeout, TIMEOUT_MAX),
        ("connect_timeout", connect_timeout, TIMEOUT_MAX),
        ("retry_budget", retry_budget, TIMEOUT_MAX),
        ("wait_slice", wait_slice, 600.0),
    ):
        ms[arg] = None if value is None else check_seconds(arg, value, high)
    if clock_drift_ppm is not None:
        check_int("clock_drift_ppm", clock_drift_ppm, 0, 100_000)
    for arg, value in (("principal", principal), ("bearer_token", bearer_token),
                       ("tls_domain", tls_domain)):
        if value is not None:
            check_str(arg, value)
    if roles is not None and not isinstance(roles, str):
        roles = ",".join(check_str("roles[]", r) for r in roles)
    check_bool("tls", tls)
    if transport not in ("stream", "unary"):
        check_str("transport", transport)
        raise ValueError(f"transport must be 'stream' or 'unary', not {transport!r}")
    return _picket.CoreClient(
        endpoint_list,
        name,
        host=host,
        ttl_ms=ms["session_ttl"],
        rpc_timeout_ms=ms["rpc_timeout"],
        connect_timeout_ms=ms["connect_timeout"],
        retry_budget_ms=ms["retry_budget"],
        wait_slice_ms=ms["wait_slice"],
        clock_drift_ppm=clock_drift_ppm,
        principal=principal,
        roles=roles,
        bearer=bearer_token,
        tls=tls,
        ca_pem=_pem("ca", ca),
        cert_pem=_pem("cert", cert),
        key_pem=_pem("key", key),
        tls_domain=tls_domain,
        transport=transport,
    )


def _hostname() -> str:
    try:
        import socket

        return socket.gethostname()
    except OSError:
        return ""


def lock_args(namespace: Any, key: Any, timeout: Any, shared: Any) -> Tuple[str, str, Optional[int], str]:
    check_namespace(namespace)
    check_key(key)
    timeout_ms = None if timeout is None else check_seconds("timeout", timeout)
    check_bool("shared", shared)
    return namespace, key, timeout_ms, "shared" if shared else "exclusive"


class Lost:
    """The signal that a lock (or a session) is lost: like a `threading.Event` that only the
    client sets, an awaitable, and a list of callbacks.

    - `lost.is_set()` / `bool(lost)`: lost already; `lost.reason`: a `LostReason` or None.
    - `lost.wait(timeout=None)`: blocks until lost (True) or the timeout passes (False).
    - `await lost` (asyncio): waits until lost; answers the `LostReason`.
    - `lost.add_callback(fn)`: calls `fn(reason)` once when lost (at once if it is already),
      on a background thread of the client: keep it short and never block in it.

    It fires when the client knows the lock is no longer held: the session was lost (its
    keepalive deadline passed, the server said so, it was closed) or the lock was force-released
    by two operators. It does not fire for a lock released by its holder.
    """

    def __init__(self, what: str):
        self._what = what
        self._event = threading.Event()
        self._mutex = threading.Lock()
        self._reason: Optional[LostReason] = None
        self._callbacks: List[Callable[[LostReason], Any]] = []
        self._futures: List[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[LostReason]"]] = []

    def is_set(self) -> bool:
        return self._event.is_set()

    def __bool__(self) -> bool:
        return self._event.is_set()

    @property
    def reason(self) -> Optional[LostReason]:
        return self._reason

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until the signal fires (True) or `timeout` seconds pass (False)."""
        if timeout is not None:
            check_seconds("timeout", timeout, float("inf"))
        return self._event.wait(timeout)

    def add_callback(self, callback: Callable[[LostReason], Any]) -> None:
        """Calls `callback(reason)` once the signal fires (now, if it has)."""
        check_callable("callback", callback)
        with self._mutex:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        _run_callback(callback, self._reason)

    def remove_callback(self, callback: Callable[[LostReason], Any]) -> None:
        with self._mutex:
            try:
                self._callbacks.remove(callback)
            except ValueError:
                pass

    def __await__(self):
        return self._wait_async().__await__()

    async def _wait_async(self) -> LostReason:
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[LostReason]" = loop.create_future()
        with self._mutex:
            if self._event.is_set():
                assert self._reason is not None
                return self._reason
            self._futures.append((loop, future))
        try:
            return await future
        finally:
            with self._mutex:
                self._futures = [(l, f) for l, f in self._futures if f is not future]

    def _fire(self, reason: Dict[str, Any]) -> None:
        """Called by the extension module (on a background thread), once."""
        with self._mutex:
            if self._event.is_set():
                return
            self._reason = LostReason(reason)
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
            futures, self._futures = self._futures, []
        level = logging.DEBUG if self._reason.kind == "closed" else logging.WARNING
        log.log(level, "%s is lost: %s", self._what, self._reason)
        for loop, future in futures:
            try:
                loop.call_soon_threadsafe(_set_future, future, self._reason)
            except RuntimeError:
                pass  # the loop is closed
        for callback in callbacks:
            _run_callback(callback, self._reason)

    def __repr__(self) -> str:
        state = f"lost: {self._reason}" if self._event.is_set() else "held"
        return f"<picket.Lost {self._what} ({state})>"


def _set_future(future: "asyncio.Future[Any]", value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _run_callback(callback: Callable[[LostReason], Any], reason: Optional[LostReason]) -> None:
    try:
        callback(reason)
    except Exception:  # a callback's failure must not stop the others
        log.exception("a lost callback raised")


def session_event(lost: Lost, session_id: int) -> Callable[[Dict[str, Any]], None]:
    """The callback a session's core reports its events to: logs them, fires `lost`."""

    def on_event(event: Dict[str, Any]) -> None:
        kind = event.get("kind")
        if kind == "lost":
            lost._fire(event["reason"])
        elif kind == "hold_lost":
            log.warning(
                "session %d lost %s/%s (token %d): %s", session_id, event["namespace"],
                event["key"], event["token"], event["reason"]["message"],
            )
        elif kind == "state":
            state = event.get("state")
            if state == "jeopardy":
                log.warning(
                    "session %d is in jeopardy: no keepalive acknowledged for %.3f s, lost in "
                    "%.3f s unless one is", session_id, event["unacknowledged_for"],
                    event["deadline_in"],
                )
            elif state == "safe":
                log.info("session %d is safe again: a keepalive was acknowledged", session_id)

    return on_event

