//! The lock state machine (being written).
