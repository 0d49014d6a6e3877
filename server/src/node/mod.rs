//! The node: one replica's core `Node` driven by one task ([`driver`]), its durable state
//! ([`durable`], written inline or by a [`persist`] thread), its peers ([`peer`]), the clock
//! it reads ([`clock`]). Its planted bugs and fault points read their switches from the one
//! `picket_core::faults::Faults` of the server's configuration (`Config::faults`; none in
//! picketd).

pub mod clock;
pub mod driver;
pub mod durable;
pub mod members;
pub mod peer;
pub mod persist;
pub mod refusal;
