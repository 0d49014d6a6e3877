//! What clients and operators reach: the gRPC services ([`service`] for `Lock`, [`admin`] for `Admin`, with [`stream`] for their
//! streams and [`session_stream`] for the `Session` stream (its pushes in [`session_push`]; when clients were told of a loss in [`told`]), [`error_detail`] for the standard error details and [`observe`] for their metrics),
//! and the HTTP port ([`http`]: `/metrics`, `/healthz`, JSON inspection read through
//! [`inspect`]).

pub mod admin;
pub mod backup;
#[cfg(not(madsim))]
pub mod error_detail;
#[cfg(not(madsim))]
pub mod http;
#[cfg(not(madsim))]
pub mod inspect;
pub mod membership;
#[cfg(not(madsim))]
pub mod observe;
pub mod refusal;
pub mod service;
pub mod session_push;
pub mod session_stream;
pub mod stream;
pub mod told;
