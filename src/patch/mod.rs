//! Patch operations on the context envelope (DESIGN §3): the wire form (`ops`), applying a
//! patch all-or-nothing (`apply`), and the outcomes recorded for metrics (`refusal`).

mod apply;
pub mod ops;
pub mod refusal;

pub use ops::{Display, HandlerResult, Op, Scope, Selector};
pub use refusal::{
    parse_handler_result, parse_ops, ApplyReport, OpOutcome, PatchRefusal, RefusalReason,
};
