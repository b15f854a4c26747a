//! Token counting with a real BPE tokenizer (`o200k_base` via tiktoken-rs).
//!
//! Anthropic's tokenizer is not public; cachet's emulator and marker placement count every
//! provider's text with `o200k_base`. Counts are therefore close to, not equal to, what
//! Claude models report — good enough for cache thresholds and for comparing policies.

use std::sync::OnceLock;

use tiktoken_rs::CoreBPE;

fn bpe() -> &'static CoreBPE {
    static BPE: OnceLock<CoreBPE> = OnceLock::new();
    BPE.get_or_init(|| tiktoken_rs::o200k_base().expect("embedded o200k_base vocabulary loads"))
}

/// Number of tokens in `text`.
pub fn count(text: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    bpe().encode_ordinary(text).len() as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_are_bpe_not_bytes() {
        assert_eq!(super::count(""), 0);
        assert_eq!(super::count("hello"), 1);
        let long = "the quick brown fox ".repeat(50);
        let n = super::count(&long);
        assert!((150..=260).contains(&n), "{n}");
    }
}
