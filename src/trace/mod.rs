//! Trace recording (`cachet serve --record DIR`): each request as the client sent it, with
//! what its answer said, one JSON line a record in a file per UTC day. The live path writes
//! records; `cachet replay` and the tests read them.

pub mod record;
pub mod recorder;
pub mod time;

pub use record::{read_traces, Record, TRACE_VERSION};
pub use recorder::{capture, recordable_headers, redact_body, Recorder, RecorderTask};
