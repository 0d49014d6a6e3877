//! picket-storage: the append-only log, hard state and snapshots (being written).
