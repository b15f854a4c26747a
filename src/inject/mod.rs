//! Memory injection (DESIGN §6): where the content comes from ([`source`], with the
//! built-in notes retriever in [`notes`]), where it goes in the request ([`mode`]), and the
//! deterministic A/B split of sessions between modes ([`ab`]).
//!
//! Content is computed once per user prompt and reused for every call of that turn
//! ([`TurnCache`]), so a tool loop never sees the memory change under it.

pub mod ab;
pub mod mode;
pub mod notes;
pub mod source;
pub mod turn;
pub mod turn_cache;

pub use ab::{choose_arm, variant_label};
pub use mode::{memory_message, ops_for, wrap, Mode, Placement, MEMORY_CLOSE, MEMORY_OPEN};
pub use notes::NotesIndex;
pub use source::{Source, SourceError, SourceSpec, QUERY_MAX_BYTES};
pub use turn::{inject_for_turn, Injection, ModeChoice, TurnInjection};
pub use turn_cache::{Fetched, TurnCache, TurnKey};
