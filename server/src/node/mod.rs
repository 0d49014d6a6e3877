//! The node: one replica's core `Node` driven by one task ([`driver`]), its durable state
//! ([`durable`], written inline or by a [`persist`] thread), its peers ([`peer`]), the clock
//! it reads ([`clock`]) and, in the simulation, its fault points ([`buggify`]).

#[cfg(madsim)]
pub mod buggify;
pub mod clock;
pub mod driver;
pub mod durable;
pub mod members;
pub mod peer;
pub mod persist;
pub mod refusal;
