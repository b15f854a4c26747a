//! The bounded vocabulary of `cachet_prefix_breaks_total{section, reason}` (DESIGN §8).

/// The first section of the prompt that stopped extending the session's previous request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakSection {
    Tools,
    System,
    Messages,
}

impl BreakSection {
    pub const ALL: [BreakSection; 3] = [
        BreakSection::Tools,
        BreakSection::System,
        BreakSection::Messages,
    ];

    pub fn label(self) -> &'static str {
        match self {
            BreakSection::Tools => "tools",
            BreakSection::System => "system",
            BreakSection::Messages => "messages",
        }
    }

    /// The section named by a diagnosis. A model change is filed under `tools`, the first
    /// thing the provider's cache keys on (DESIGN §8); anything unknown under `messages`.
    pub fn from_label(label: &str) -> BreakSection {
        match label {
            "tools" | "model" => BreakSection::Tools,
            "system" => BreakSection::System,
            _ => BreakSection::Messages,
        }
    }
}

/// Why the prefix broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakReason {
    ModelChanged,
    ToolsChanged,
    SystemChanged,
    MessageEdited,
    HistoryTruncated,
    TtlExpired,
    BelowMinimum,
    OutsideLookback,
    ThinkingDropped,
    /// The provider read less than the session's own history says it should.
    Unexplained,
}

impl BreakReason {
    pub const ALL: [BreakReason; 10] = [
        BreakReason::ModelChanged,
        BreakReason::ToolsChanged,
        BreakReason::SystemChanged,
        BreakReason::MessageEdited,
        BreakReason::HistoryTruncated,
        BreakReason::TtlExpired,
        BreakReason::BelowMinimum,
        BreakReason::OutsideLookback,
        BreakReason::ThinkingDropped,
        BreakReason::Unexplained,
    ];

    pub fn label(self) -> &'static str {
        match self {
            BreakReason::ModelChanged => "model_changed",
            BreakReason::ToolsChanged => "tools_changed",
            BreakReason::SystemChanged => "system_changed",
            BreakReason::MessageEdited => "message_edited",
            BreakReason::HistoryTruncated => "history_truncated",
            BreakReason::TtlExpired => "ttl_expired",
            BreakReason::BelowMinimum => "below_minimum",
            BreakReason::OutsideLookback => "outside_lookback",
            BreakReason::ThinkingDropped => "thinking_dropped",
            BreakReason::Unexplained => "unexplained",
        }
    }

    /// The reason a diagnosis names; a name outside the vocabulary is `unexplained`.
    pub fn from_label(label: &str) -> BreakReason {
        BreakReason::ALL
            .into_iter()
            .find(|r| r.label() == label)
            .unwrap_or(BreakReason::Unexplained)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_unknown_names_stay_in_the_vocabulary() {
        for r in BreakReason::ALL {
            assert_eq!(BreakReason::from_label(r.label()), r);
        }
        for s in BreakSection::ALL {
            assert_eq!(BreakSection::from_label(s.label()), s);
        }
        assert_eq!(
            BreakReason::from_label("anything a client wrote"),
            BreakReason::Unexplained
        );
        assert_eq!(BreakSection::from_label("model"), BreakSection::Tools);
    }
}
