"""Picket locks for Python: sessions kept alive in the background, locks that carry a fencing
token, and a signal when a lock is lost.

A thin binding of Picket's Rust client library (`picket_client`): the sessions, keepalives,
leader following, retries, self-fencing and lost-hold pushes are that library's, unchanged.

```
import picket

client = picket.Client(["127.0.0.1:7401", "127.0.0.1:7402", "127.0.0.1:7403"])
with client.session() as session:
    with session.lock("orders", "invoice/42") as lock:
        print(lock.token)
```

`picket.aio` has the same API for asyncio. See docs/python.md.
"""

from __future__ import annotations

import atexit

from . import _picket
from ._common import Lost
from ._errors import (
    BadAnswerError,
    BelowEvictionFloorError,
    CancelledCallError,
    CompactedError,
    ConfigError,
    FencingError,
    FencingKeyTooLongError,
    HeldError,
    LockLostError,
    LostError,
    LostReason,
    PicketError,
    RefusedError,
    ReleasedError,
    SessionLostError,
    StaleTokenError,
    UnavailableError,
    UsedAfterForkError,
    WaitTimeoutError,
)
from ._fencing import FencingGate
from ._sync import Client, Lock, Session, Watch
from . import aio

__version__ = _picket.CLIENT_VERSION

__all__ = [
    "Client", "Session", "Lock", "Watch", "Lost", "LostReason", "FencingGate", "aio",
    "PicketError", "ConfigError", "UnavailableError", "RefusedError", "LostError",
    "SessionLostError", "LockLostError", "HeldError", "WaitTimeoutError", "BadAnswerError",
    "CompactedError", "CancelledCallError", "ReleasedError", "UsedAfterForkError",
    "FencingError", "StaleTokenError", "BelowEvictionFloorError", "FencingKeyTooLongError",
]

# At exit, the client's background threads stop calling into the interpreter.
atexit.register(_picket._shutdown)
