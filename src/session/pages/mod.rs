//! The admin listener's HTML pages: the sessions overview (`GET /sessions` asked for by a
//! browser) and one session's timeline (`GET /sessions/{id}/timeline`). Rendered on the
//! server with maud, which escapes every value (session ids, model names, transformer
//! names and details come from clients and hooks); inline CSS, no script, nothing loaded
//! from elsewhere, so they work offline.

mod chart;
mod describe;
mod format;
mod layout;
mod overview;
mod timeline;
mod view;

pub use overview::{overview_html, Sort, SortKey};
pub use timeline::{render as render_timeline, timeline_html};
pub use view::{Expiry, Gap, Money, RequestView, SessionView, Totals};

/// The value of `name` in a raw query string (`a=1&b=2`), undecoded: the pages' own
/// parameters are plain words and numbers (as are the emulator's listing parameters).
pub(crate) fn query_value<'q>(query: Option<&'q str>, name: &str) -> Option<&'q str> {
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_found_by_whole_name() {
        assert_eq!(
            query_value(Some("sort=cost&order=asc"), "order"),
            Some("asc")
        );
        assert_eq!(query_value(Some("xsort=a&sort=b"), "sort"), Some("b"));
        assert_eq!(query_value(Some("sort"), "sort"), None);
        assert_eq!(query_value(None, "sort"), None);
    }
}
