//! The deterministic A/B split of sessions between injection modes.

use sha2::{Digest, Sha256};

use super::Mode;

/// The arm of `session`: SHA-256 of the session id, its first 8 bytes as a number, mapped
/// onto the weighted buckets in the order of the modes' names (so the order an `ab` table
/// is written in does not matter). The same session always lands in the same arm, on every
/// instance and after restarts. `None` when no arm has a positive weight.
pub fn choose_arm(session: &str, arms: &[(Mode, u32)]) -> Option<Mode> {
    let mut arms = arms.to_vec();
    arms.sort_by_key(|(mode, _)| mode.label());
    let total: u64 = arms.iter().map(|&(_, w)| u64::from(w)).sum();
    if total == 0 {
        return None;
    }
    let digest = Sha256::digest(session.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    // Multiply-shift maps the hash onto [0, total) without modulo bias worth noticing.
    let point = ((u128::from(u64::from_be_bytes(first)) * u128::from(total)) >> 64) as u64;
    let mut upper = 0u64;
    for (mode, weight) in arms {
        upper += u64::from(weight);
        if point < upper {
            return Some(mode);
        }
    }
    None
}

/// The metric `variant` label: the mode's name, or `none` without an injection.
pub fn variant_label(mode: Option<Mode>) -> &'static str {
    mode.map_or("none", Mode::label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_weights_choose_nothing() {
        assert_eq!(choose_arm("s", &[]), None);
        assert_eq!(choose_arm("s", &[(Mode::Tail, 0)]), None);
        assert_eq!(
            choose_arm("s", &[(Mode::Tail, 0), (Mode::Pinned, 1)]),
            Some(Mode::Pinned)
        );
        assert_eq!(variant_label(None), "none");
    }
}
