//! Patch operations on the context envelope (DESIGN §3).

pub mod ops;

pub use ops::{Display, HandlerResult, Op, Scope};
