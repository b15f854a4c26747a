//! The admin listener's HTML pages: the sessions overview (`GET /sessions` asked for by a
//! browser) and one session's timeline (`GET /sessions/{id}/timeline`). Rendered on the
//! server with maud, which escapes every value (session ids, model names, transformer
//! names and details come from clients and hooks); inline CSS, no script, nothing loaded
//! from elsewhere, so they work offline.

mod chart;
mod describe;
mod format;
pub mod json;
mod layout;
mod overview;
mod timeline;
mod view;

pub use overview::{overview_html, Sort, SortKey};
pub use timeline::{render as render_timeline, timeline_html};
pub use view::{Expiry, Gap, Money, RequestView, SessionView, Totals};
