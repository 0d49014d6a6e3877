//! Protobuf schema, gRPC services and the Rust client library.
//!
//! Nothing is here yet: this crate is filled by the gRPC issue. It exists so that the workspace
//! layout (`core` <- `net` <- `server` <- `sim`) is fixed from the start.
