//! Where cache markers go: the mode a policy asks for, and the plan of marker changes per
//! element that a provider's placement rules make of it (`providers::anthropic::markers`)
//! and the compile step writes.

use std::collections::BTreeMap;

use super::Ttl;

/// How cache markers are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BreakpointMode {
    /// Leave the client's markers as they are.
    #[default]
    Preserve,
    /// cachet places the markers, by the provider's rules.
    Auto { ttl: Ttl },
    /// Remove every marker.
    Strip,
}

/// Marker changes per element: the marker each changed tool, system part and message
/// content block should carry (`None`: none).
#[derive(Debug, Default)]
pub struct Plan {
    pub tools: BTreeMap<usize, Option<Ttl>>,
    pub system: BTreeMap<usize, Option<Ttl>>,
    pub messages: BTreeMap<usize, Vec<(usize, Option<Ttl>)>>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.system.is_empty() && self.messages.is_empty()
    }
}
