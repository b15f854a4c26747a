//! Token counting with a real BPE tokenizer (`o200k_base`, the vocabulary of tiktoken-rs).
//!
//! Anthropic's tokenizer is not public; cachet's emulator and marker placement count every
//! provider's text with `o200k_base`. Counts are therefore close to, not equal to, what
//! Claude models report — good enough for cache thresholds and for comparing policies.
//!
//! tiktoken-rs's `CoreBPE` keeps its 200,000 tokens three times over (two hash maps and a
//! sorted list, each token a heap allocation of its own): 33 MB of heap for as long as the
//! process lives (BENCHMARKS.md, "What the policies add to 1,000 streams"). Counting needs
//! only the bytes-to-rank lookup, so the vocabulary is taken from tiktoken-rs once and kept
//! as one buffer of token bytes, their ends, and a table of ranks hashed by bytes (about
//! 4 MB); the pre-split and the byte-pair merge are tiktoken's, and the tests hold every
//! count and id equal to tiktoken-rs's.

use std::hash::BuildHasher;
use std::sync::OnceLock;

use fancy_regex::Regex;
use hashbrown::HashTable;

type Rank = u32;

/// The number of ordinary tokens of `o200k_base` (ranks 0 to 199,997; the special tokens
/// come after and are never produced by ordinary text).
const ORDINARY_TOKENS: Rank = 199_998;

/// o200k's pre-tokenizer, as tiktoken defines it.
const PATTERN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    "|",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    "|",
    r"\p{N}{1,3}",
    "|",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    "|",
    r"\s*[\r\n]+",
    "|",
    r"\s+(?!\S)",
    "|",
    r"\s+",
);

struct Vocab {
    /// Every token's bytes, in rank order.
    bytes: Vec<u8>,
    /// Where each rank's bytes end in `bytes` (they start where the previous rank's end).
    ends: Vec<u32>,
    /// Ranks, hashed by their bytes.
    ranks: HashTable<Rank>,
    hasher: hashbrown::DefaultHashBuilder,
    pieces: Regex,
}

impl Vocab {
    fn load() -> Vocab {
        let core = tiktoken_rs::o200k_base().expect("embedded o200k_base vocabulary loads");
        let mut bytes = Vec::with_capacity(1 << 21);
        let mut ends = Vec::with_capacity(ORDINARY_TOKENS as usize);
        for token in core._decode_native_and_split((0..ORDINARY_TOKENS).collect()) {
            bytes.extend_from_slice(&token);
            ends.push(bytes.len() as u32);
        }
        drop(core);
        bytes.shrink_to_fit();
        let hasher = hashbrown::DefaultHashBuilder::default();
        let mut ranks = HashTable::with_capacity(ends.len());
        let hash_of = |rank: Rank| hasher.hash_one(token(&bytes, &ends, rank));
        for rank in 0..ORDINARY_TOKENS {
            ranks.insert_unique(hash_of(rank), rank, |&r| hash_of(r));
        }
        Vocab {
            bytes,
            ends,
            ranks,
            hasher,
            pieces: Regex::new(PATTERN).expect("the o200k pattern compiles"),
        }
    }

    fn token(&self, rank: Rank) -> &[u8] {
        token(&self.bytes, &self.ends, rank)
    }

    fn rank(&self, piece: &[u8]) -> Option<Rank> {
        let hash = self.hasher.hash_one(piece);
        self.ranks.find(hash, |&r| self.token(r) == piece).copied()
    }

    /// The ranks of `text`, as tiktoken's `encode_ordinary` gives them: each piece of the
    /// pre-split is one token when it is one, else merged pair by pair, the lowest rank
    /// first.
    fn encode(&self, text: &str, out: &mut Vec<Rank>) {
        let mut done = 0;
        for found in self.pieces.find_iter(text) {
            // fancy-regex gives up past its backtracking limit, which text in pieces of at
            // most `CHUNK_BYTES` does not reach. Were it to, the rest is taken a byte a
            // token (every byte is one): a count too high rather than too low, where
            // tiktoken-rs would panic.
            let piece = match found {
                Ok(m) => {
                    done = m.end();
                    m.as_str().as_bytes()
                }
                Err(_) => {
                    out.extend(
                        text.as_bytes()[done..]
                            .iter()
                            .filter_map(|b| self.rank(&[*b])),
                    );
                    return;
                }
            };
            match self.rank(piece) {
                Some(rank) => out.push(rank),
                None => self.merge(piece, out),
            }
        }
    }

    /// tiktoken's byte-pair merge of one piece that is not a token itself (so at least two
    /// bytes long: every single byte is a token).
    fn merge(&self, piece: &[u8], out: &mut Vec<Rank>) {
        if piece.len() < 2 {
            out.extend(self.rank(piece));
            return;
        }
        let rank_of = |range: std::ops::Range<usize>| self.rank(&piece[range]).unwrap_or(Rank::MAX);
        // (start, rank of the pair starting there)
        let mut parts: Vec<(usize, Rank)> = Vec::with_capacity(piece.len() + 1);
        let mut min: (Rank, usize) = (Rank::MAX, usize::MAX);
        for i in 0..piece.len() - 1 {
            let rank = rank_of(i..i + 2);
            if rank < min.0 {
                min = (rank, i);
            }
            parts.push((i, rank));
        }
        parts.push((piece.len() - 1, Rank::MAX));
        parts.push((piece.len(), Rank::MAX));
        let pair_rank = |parts: &[(usize, Rank)], i: usize| match parts.get(i + 3) {
            Some(&(end, _)) => rank_of(parts[i].0..end),
            None => Rank::MAX,
        };
        while min.0 != Rank::MAX {
            let i = min.1;
            if i > 0 {
                parts[i - 1].1 = pair_rank(&parts, i - 1);
            }
            parts[i].1 = pair_rank(&parts, i);
            parts.remove(i + 1);
            min = (Rank::MAX, usize::MAX);
            for (i, &(_, rank)) in parts[..parts.len() - 1].iter().enumerate() {
                if rank < min.0 {
                    min = (rank, i);
                }
            }
        }
        out.extend(parts.windows(2).map(|w| rank_of(w[0].0..w[1].0)));
    }
}

/// The bytes of `rank`: they end at `ends[rank]` and start where the previous rank's end.
fn token<'a>(bytes: &'a [u8], ends: &[u32], rank: Rank) -> &'a [u8] {
    let end = ends[rank as usize] as usize;
    let start = match rank {
        0 => 0,
        _ => ends[rank as usize - 1] as usize,
    };
    &bytes[start..end]
}

static VOCAB: OnceLock<Vocab> = OnceLock::new();

fn vocab() -> &'static Vocab {
    VOCAB.get_or_init(Vocab::load)
}

/// Load the vocabulary now (about 200 ms of CPU, once per process), so that the first count
/// does not: call it where blocking is allowed (`spawn_blocking`).
pub fn warm() {
    vocab();
}

/// Whether the vocabulary is loaded, so that a count costs only its text.
pub fn is_warm() -> bool {
    VOCAB.get().is_some()
}

/// Longest piece handed to the tokenizer at once. Its pre-tokenizer and byte-pair merge
/// are quadratic in the length of a run without breaks (1 MB of one character takes
/// minutes, and can overflow the stack), so long text is counted piece by piece.
const CHUNK_BYTES: usize = 1024;

/// Number of tokens in `text`.
pub fn count(text: &str) -> u64 {
    count_up_to(text, u64::MAX)
}

/// [`count`], stopping at the first piece that reaches `enough`: the exact count below it,
/// at least `enough` otherwise. Whether a long prompt reaches a minimum of a few thousand
/// tokens is known without tokenising all of it.
pub fn count_up_to(text: &str, enough: u64) -> u64 {
    let mut ranks = Vec::new();
    let mut total = 0;
    for piece in chunks(text) {
        if total >= enough {
            break;
        }
        ranks.clear();
        vocab().encode(piece, &mut ranks);
        total += ranks.len() as u64;
    }
    total
}

/// The token ids of `text` (as many as [`count`] says), for token-level prefix matching.
pub fn encode(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for piece in chunks(text) {
        vocab().encode(piece, &mut out);
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
    use proptest::prelude::*;

    fn reference() -> &'static tiktoken_rs::CoreBPE {
        static CORE: std::sync::OnceLock<tiktoken_rs::CoreBPE> = std::sync::OnceLock::new();
        CORE.get_or_init(|| tiktoken_rs::o200k_base().unwrap())
    }

    /// The ids of `text`, piece by piece, from tiktoken-rs itself.
    fn reference_encode(text: &str) -> Vec<u32> {
        super::chunks(text)
            .flat_map(|piece| reference().encode_ordinary(piece))
            .collect()
    }

    /// Counting up to a bound is the exact count below it, and stops within one piece of
    /// it above: the book is not tokenised whole to learn it holds 4,096 tokens.
    #[test]
    fn a_count_up_to_a_bound_stops_within_a_piece_of_it() {
        let text = book_text();
        let text = text.as_str();
        let full = super::count(text);
        assert!(full > 20_000, "{full}");
        for enough in [0, 1, 100, 1024, 4096, full - 1, full, full + 1, u64::MAX] {
            let counted = super::count_up_to(text, enough);
            assert!(counted <= full, "{enough}: {counted}");
            match enough >= full {
                true => assert_eq!(counted, full, "{enough}"),
                false => assert!(
                    counted >= enough && counted < enough + super::CHUNK_BYTES as u64,
                    "{enough}: {counted}"
                ),
            }
        }
    }

    /// The book's pages, one after the other: long prose with tables and code.
    fn book_text() -> String {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src");
        let mut pages: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        pages.sort();
        pages
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect()
    }

    /// Real text of every kind this repository holds (prose, tables, Rust, TOML, JSON in
    /// tests): the same ids as tiktoken-rs, so the same counts.
    #[test]
    fn ids_are_tiktokens_on_this_repository() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
        for dir in ["src", "src/envelope", "policies", "tests/it", "docs/src"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                files.push(entry.unwrap().path());
            }
        }
        let mut tokens = 0;
        for file in files.iter().filter(|f| f.is_file()) {
            let text = std::fs::read_to_string(file).unwrap();
            let ours = super::encode(&text);
            assert_eq!(ours, reference_encode(&text), "{}", file.display());
            assert_eq!(super::count(&text), ours.len() as u64);
            tokens += ours.len();
        }
        assert!(tokens > 100_000, "{tokens}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Any text, mixing scripts, digits, contractions, punctuation and every kind of
        /// white space the pre-split treats apart.
        #[test]
        fn ids_are_tiktokens_on_any_text(
            text in proptest::collection::vec(prop_oneof![
                Just("'s".to_string()), Just("'LL".to_string()), Just(" ".to_string()),
                Just("\r\n".to_string()), Just("\n\n".to_string()), Just("\t".to_string()),
                Just("   ".to_string()), Just("12345".to_string()), Just("éà".to_string()),
                Just("日本語".to_string()), Just("🙂".to_string()), Just("->".to_string()),
                "[a-zA-Z]{1,12}", "[ -~]{1,8}", "\\PC{1,4}", "[0-9]{1,7}",
            ], 0..80).prop_map(|parts| parts.concat())
        ) {
            prop_assert_eq!(super::encode(&text), reference_encode(&text));
        }
    }

    /// Should the pre-split give up (fancy-regex's backtracking limit), the rest of the text
    /// counts a byte a token: never fewer tokens than tiktoken-rs counts, and no panic.
    #[test]
    fn a_pre_split_that_gives_up_counts_the_rest_by_bytes() {
        let mut vocab = super::Vocab::load();
        vocab.pieces = fancy_regex::RegexBuilder::new(super::PATTERN)
            .backtrack_limit(1)
            .build()
            .unwrap();
        let text = "fn main() {\n    let x = 1;   \n}\n";
        let mut ids = Vec::new();
        vocab.encode(text, &mut ids);
        let reference = reference_encode(text);
        assert_ne!(ids, reference, "the limit is reached");
        assert!(
            ids.len() > reference.len() && ids.len() <= text.len(),
            "{ids:?}"
        );
    }

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
        let whole = reference().encode_ordinary(&text).len() as u64;
        assert_eq!(super::count(&text), whole);
        assert_eq!(super::encode(&text).len() as u64, whole);
        let accents = "é".repeat(3000);
        assert_eq!(super::chunks(&accents).collect::<String>(), accents);
    }
}
