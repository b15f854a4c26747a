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

/// Longest piece handed to the tokenizer at once. Its pre-tokenizer and byte-pair merge
/// are quadratic in the length of a run without breaks (1 MB of one character takes
/// minutes, and can overflow the stack), so long text is counted piece by piece.
const CHUNK_BYTES: usize = 1024;

/// Number of tokens in `text`.
pub fn count(text: &str) -> u64 {
    chunks(text)
        .map(|piece| bpe().encode_ordinary(piece).len() as u64)
        .sum()
}

/// The token ids of `text` (as many as [`count`] says), for token-level prefix matching.
pub fn encode(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for piece in chunks(text) {
        out.extend(bpe().encode_ordinary(piece));
    }
    out
}

/// `text` cut into pieces of at most [`CHUNK_BYTES`], each cut placed before a whitespace
/// character where the second half of the window has one (a word keeps its leading space,
/// as the tokenizer's own pre-split does), else at a character boundary. Text up to
/// `CHUNK_BYTES` is one piece, so its count is exact.
fn chunks(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        if rest.len() <= CHUNK_BYTES {
            return Some(std::mem::take(&mut rest));
        }
        let mut end = CHUNK_BYTES;
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let cut = rest[..end]
            .rfind(char::is_whitespace)
            .filter(|&i| i >= CHUNK_BYTES / 2)
            .unwrap_or(end);
        let (piece, tail) = rest.split_at(cut);
        rest = tail;
        Some(piece)
    })
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

    /// 1 MB of one character used to overflow the tokenizer's stack (a run without breaks
    /// is pre-tokenized as one piece and merged in quadratic time).
    #[test]
    fn a_megabyte_of_one_character_is_counted() {
        for c in ["a", " ", "!", "\n", "é"] {
            let text = c.repeat(1 << 20);
            let n = super::count(&text);
            assert!(n > 0 && n <= text.len() as u64, "{c:?}: {n}");
        }
    }

    #[test]
    fn pieces_cover_the_text_and_ordinary_text_counts_as_before() {
        let text = "the quick brown fox jumps over the lazy dog. ".repeat(400);
        let pieces: Vec<&str> = super::chunks(&text).collect();
        assert!(pieces.len() > 1 && pieces.iter().all(|p| p.len() <= super::CHUNK_BYTES));
        assert_eq!(pieces.concat(), text);
        // Cutting before a space changes nothing for ordinary prose.
        let whole = super::bpe().encode_ordinary(&text).len() as u64;
        assert_eq!(super::count(&text), whole);
        assert_eq!(super::encode(&text).len() as u64, whole);
        let accents = "é".repeat(3000);
        assert_eq!(super::chunks(&accents).collect::<String>(), accents);
    }
}
