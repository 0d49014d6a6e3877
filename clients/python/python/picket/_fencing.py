"""`FencingGate`: the check a protected resource written in Python makes on every write."""

from __future__ import annotations

from typing import Optional

from . import _picket
from ._common import U32_MAX, U64_MAX, check_int, check_str


class FencingGate:
    """Remembers the highest token accepted per key and refuses lower ones: the Rust
    `picket_client::FencingGate` itself (the same checks, the same bound), so a paused,
    partitioned or force-released holder can never write after a later holder did.

    - `check(key, token)`: admits a write with `token` (equal to the highest is admitted: one
      holder writes many times) and records it, or raises `StaleTokenError`.
    - `check_slot(key, slot, token)`: the same per semaphore slot (`lock.slot`).
    - `check_read(key, token)`: admits a read by a shared holder unless a later writer's token
      was accepted; records nothing.
    - Bounded to `capacity` keys: when full it forgets the key with the lowest highest token and
      raises its eviction floor to it; a forgotten key accepts only tokens at or above the floor
      (`BelowEvictionFloorError` below: re-acquire and retry). Keys are `namespace/key`, at most
      576 bytes (`FencingKeyTooLongError`).

    Thread-safe. It lives in this process's memory: a resource served by several processes
    needs the check where the data is (e.g. the token in a SQL `WHERE`, docs/python.md).
    """

    def __init__(self, capacity: int = 100_000):
        check_int("capacity", capacity, 1, 2**63 - 1)
        self._core = _picket.CoreFencingGate(capacity)

    @property
    def capacity(self) -> int:
        return self._core.capacity

    def check(self, key: str, token: int) -> None:
        self._core.check(check_str("key", key), check_int("token", token, 0, U64_MAX))

    def check_slot(self, key: str, slot: int, token: int) -> None:
        self._core.check_slot(check_str("key", key), check_int("slot", slot, 0, U32_MAX),
                              check_int("token", token, 0, U64_MAX))

    def check_read(self, key: str, token: int) -> None:
        self._core.check_read(check_str("key", key), check_int("token", token, 0, U64_MAX))

    def highest(self, key: str) -> Optional[int]:
        return self._core.highest(check_str("key", key))

    def highest_in_slot(self, key: str, slot: int) -> Optional[int]:
        return self._core.highest_in_slot(check_str("key", key), check_int("slot", slot, 0, U32_MAX))

    @property
    def eviction_floor(self) -> int:
        return self._core.eviction_floor()
