//! Measurement: what the provider's cache keys on ([`shape`]) and why a request read less
//! from it than it could have ([`breaks`]). One implementation serves the live path and
//! offline replay.

pub mod breaks;
pub mod overflow;
pub mod shape;

pub use breaks::{diagnose, BreakReason, Diagnosis, Previous};
pub use shape::{Mark, MarkTtl, Named, PromptShape, SentRequest};
