//! External hook servers (DESIGN §5.2): cachet POSTs an event as JSON to a hook's URL
//! and applies the answer. `protocol` is the wire form (pure), `client` the HTTP call,
//! `outcome` what the pipeline gets back.

mod client;
mod outcome;
mod protocol;

pub use client::HookClient;
pub use outcome::{HookCall, HookOutcome};
pub use protocol::{context_event, parse_context_answer, parse_payload_answer, provider_event};
