//! picket-proto: the protobuf schema of everything that leaves a Picket process, and its codecs.
//! Over the network (the public `Lock` and `Admin` API, the peer protocol's frames) and onto disk
//! (log entries, hard state, snapshot records, backup files): one schema, because the peer
//! protocol carries the durable records themselves (a catch-up reply holds a `SnapshotRecord`,
//! an accept `LogEntry`s). The Rust client library is `picket-client` (`clients/rust`).
//!
//! - [`proto`]: generated types and services of package `picket.v1` (`proto/picket/v1/`).
//!   Built with a pure-Rust protobuf compiler (no system `protoc`), for real and, under
//!   `--cfg madsim`, for the simulator.
//! - [`convert`]: `TryFrom` proto -> core (malformed input is a [`ConvertError`] naming the
//!   field, which becomes `INVALID_ARGUMENT`) and `From` core -> proto; the durable records'
//!   codecs are [`convert::records`] and [`convert::decode_lock_snapshot`].
//! - [`backup`]: the backup file format (`picketctl snapshot save`, `picketd restore`).
//! - [`status`]: `LockError` -> gRPC status codes, the `ErrorDetail` in status details (inside a
//!   standard `google.rpc.Status`), the leader hint of a non-leader.
//! - [`session_stream`]: the `Session` stream's errors, the unary calls' `google.rpc.Status`.
//! - [`secret`]: [`secret::SessionSecret`], drawn by the client (or the server), hashed here so
//!   that only the hash reaches the log.
//!
//! The API, error mapping, leader-hint and idempotency rules are described in `docs/api.md`.
//!
//! ```
//! use picket_proto::proto;
//!
//! let request = proto::AcquireRequest {
//!     session_id: 7,
//!     request_id: 1,
//!     namespace: "Orders".into(),
//!     key: "invoice/42".into(),
//!     wait_ms: 0,
//!     session_secret: vec![0x5a; 32],
//!     wait_timeout_ms: 0,
//!     mode: proto::LockMode::Exclusive as i32,
//! };
//! let error = request.into_command("svc-billing").unwrap_err();
//! assert_eq!(error.field, "acquire.namespace");
//! let status = tonic::Status::from(error);
//! assert_eq!(status.code(), tonic::Code::InvalidArgument);
//! assert!(status.message().starts_with("acquire.namespace: "));
//! ```

pub mod backup;
pub mod convert;
pub mod error;
pub mod secret;
pub mod session_stream;
pub mod status;

pub use error::{ConvertError, DecodeError};

/// Largest encoded message a `Lock` or `Admin` server or client should accept (tonic's default,
/// stated so both ends set it explicitly).
pub const API_MESSAGE_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Largest encoded peer frame (`PeerFrame`, one Paxos message) a replica sends or accepts: a
/// catch-up reply can carry a whole `LockSnapshot`, far above the API limit. A longer frame's
/// length prefix is refused before its bytes are read (the connection is closed).
pub const PEER_MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// The highest peer protocol wire version this release speaks (`PeerHello.protocol_version`,
/// `peer.proto`).
pub const PEER_PROTOCOL_VERSION: u32 = 1;
/// The lowest peer protocol wire version this release speaks (`PeerHello.protocol_version_min`):
/// a connection uses the highest version both ends speak, and only ends with no version in
/// common refuse each other (rule `peer_protocol_version`).
pub const PEER_PROTOCOL_VERSION_MIN: u32 = 1;

/// The generated protobuf types and gRPC services of package `picket.v1`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod proto {
    tonic::include_proto!("picket.v1");
}
