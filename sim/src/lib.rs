//! Whole-cluster simulation of the real node code under madsim.
//!
//! Nothing is here yet: this crate is filled by the simulation issue.
