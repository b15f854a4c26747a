//! Measurement: what the provider's cache keys on ([`prompt`]) and why a request read less
//! from it than it could have ([`breaks`], refined by [`refine`]), and who can fix that
//! ([`blame`]). One implementation serves the live path and
//! offline replay.

pub mod blame;
pub mod breaks;
pub mod overflow;
pub mod prompt;
pub mod refine;

pub use blame::{Blame, Who};
pub use breaks::{diagnose, BreakReason, Diagnosis, Previous};
pub use prompt::{Mark, MarkTtl, Named, PromptShape, SentRequest};
