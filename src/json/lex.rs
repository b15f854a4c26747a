//! The JSON lexical layer every reader of a body shares: white space, literals, numbers
//! and strings, the last skipped 16 or 32 bytes at a time (SIMD on x86_64, eight at a time
//! elsewhere). The body check validates with it; the scanner and the canonical reader of
//! message keys find their way with it.

/// Where a body stops being JSON: the byte offset of the first offending byte (or the length
/// when the body ends early).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid {
    pub offset: usize,
}

/// The index of the first non-whitespace byte at or after `pos`.
pub fn skip_ws(b: &[u8], mut pos: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\t' | b'\r') = b.get(pos) {
        pos += 1;
    }
    pos
}

pub(super) fn literal(b: &[u8], pos: usize, word: &[u8]) -> Result<usize, Invalid> {
    let end = pos + word.len();
    if b.get(pos..end) == Some(word) {
        return Ok(end);
    }
    // The first byte that differs (or the end of the body).
    let same = word
        .iter()
        .zip(&b[pos..])
        .take_while(|(w, c)| w == c)
        .count();
    Err(Invalid { offset: pos + same })
}

/// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`; the byte after it is checked by
/// the caller as whatever may follow a value.
pub(super) fn number(b: &[u8], mut pos: usize) -> Result<usize, Invalid> {
    let digits = |mut p: usize| {
        while b.get(p).is_some_and(u8::is_ascii_digit) {
            p += 1;
        }
        p
    };
    if b.get(pos) == Some(&b'-') {
        pos += 1;
    }
    match b.get(pos) {
        Some(b'0') => pos += 1,
        Some(b'1'..=b'9') => pos = digits(pos + 1),
        _ => return Err(Invalid { offset: pos }),
    }
    if b.get(pos) == Some(&b'.') {
        let end = digits(pos + 1);
        if end == pos + 1 {
            return Err(Invalid { offset: end });
        }
        pos = end;
    }
    if let Some(b'e' | b'E') = b.get(pos) {
        pos += 1;
        if let Some(b'+' | b'-') = b.get(pos) {
            pos += 1;
        }
        let end = digits(pos);
        if end == pos {
            return Err(Invalid { offset: end });
        }
        pos = end;
    }
    Ok(pos)
}

/// The rest of a string whose opening quote is just before `pos`; returns the position after
/// the closing quote.
pub(super) fn skip_string(b: &[u8], pos: usize) -> Result<usize, Invalid> {
    skip_string_with(b, pos, true)
}

/// The bytes that may follow a backslash without more to check (`u` takes four hex digits).
const SIMPLE_ESCAPES: [u8; 8] = [b'"', b'\\', b'/', b'b', b'f', b'n', b'r', b't'];

/// `skip_string`, with the bit-mask scan of escaped strings switched on or off (the tests
/// hold the two to the same answers).
#[inline]
fn skip_string_with(b: &[u8], mut pos: usize, escape_masks: bool) -> Result<usize, Invalid> {
    loop {
        pos = find_special(b, pos);
        match b.get(pos) {
            Some(b'"') => return Ok(pos + 1),
            Some(b'\\') => match b.get(pos + 1) {
                Some(c) if SIMPLE_ESCAPES.contains(c) => {
                    pos += 2;
                    // A string with one escape usually has many (code, tool output): the
                    // rest of it is scanned with escapes as bit masks, not one stop each.
                    #[cfg(target_arch = "x86_64")]
                    if escape_masks && is_x86_feature_detected!("avx2") {
                        // SAFETY: AVX2 is available, checked just above.
                        match unsafe { x86::skip_escaped_string_avx2(b, pos) } {
                            Ok(end) => return Ok(end),
                            Err(at) => pos = at,
                        }
                    }
                }
                Some(b'u') => {
                    for i in pos + 2..pos + 6 {
                        if !b.get(i).is_some_and(u8::is_ascii_hexdigit) {
                            return Err(Invalid {
                                offset: i.min(b.len()),
                            });
                        }
                    }
                    pos += 6;
                }
                _ => return Err(Invalid { offset: pos + 1 }),
            },
            // Multi-byte characters are made of bytes >= 0x80 only, so a run of them ending
            // at an ASCII byte must be valid UTF-8 on its own.
            Some(c) if *c >= 0x80 => {
                let run = b[pos..].iter().take_while(|&&c| c >= 0x80).count();
                if let Err(e) = std::str::from_utf8(&b[pos..pos + run]) {
                    return Err(Invalid {
                        offset: pos + e.valid_up_to(),
                    });
                }
                pos += run;
            }
            // A control character, or the end of the body, inside a string.
            _ => return Err(Invalid { offset: pos }),
        }
    }
}

/// The first position at or after `pos` holding `"`, `\`, a control character (below 0x20)
/// or a non-ASCII byte, or `b.len()`.
#[inline]
pub(crate) fn find_special(b: &[u8], pos: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    let pos = x86::skip_plain(b, pos);
    #[cfg(not(target_arch = "x86_64"))]
    let pos = swar::skip_plain(b, pos);
    b.get(pos..)
        .unwrap_or_default()
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || !(0x20..0x80).contains(&c))
        .map_or(b.len(), |i| pos + i)
}

/// Of a block's backslash bits, the bits of the bytes they escape (simdjson's branch-free
/// method): odd-length runs of backslashes escape the byte after them. `carry` says whether
/// the block's first byte is escaped, and is updated for the next block.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn escaped_bits(backslashes: u32, carry: &mut u32) -> u32 {
    const EVEN: u32 = 0x5555_5555;
    let backslashes = backslashes & !*carry;
    let follows_escape = (backslashes << 1) | *carry;
    let odd_starts = backslashes & !EVEN & !follows_escape;
    let (starting_on_even, overflow) = odd_starts.overflowing_add(backslashes);
    *carry = overflow as u32;
    (EVEN ^ (starting_on_even << 1)) & follows_escape
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Skips whole blocks of plain string bytes (no `"`, `\\`, control character or non-ASCII
    /// byte); stops at the first other byte or before the last partial block.
    #[inline]
    pub fn skip_plain(b: &[u8], pos: usize) -> usize {
        // Most strings (keys, roles, ids) end within a few blocks: those stay inline on SSE2,
        // and only long text pays for the call into the AVX2 loop.
        let (pos, done) = skip_plain_sse2(b, pos, 4);
        if done || pos + 32 > b.len() {
            return pos;
        }
        if is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is available, checked just above.
            unsafe { skip_plain_avx2(b, pos) }
        } else {
            skip_plain_sse2(b, pos, usize::MAX).0
        }
    }

    /// The rest of a string from `pos` (never inside an escape), 32 bytes at a time, with
    /// escapes resolved as bit masks: `Ok` is the position after the closing quote; `Err` is
    /// where the byte-by-byte loop must take over (a `\u` or invalid escape, a control or
    /// non-ASCII byte, or the last partial block), never inside an escape.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn skip_escaped_string_avx2(
        b: &[u8],
        mut pos: usize,
    ) -> Result<usize, usize> {
        let quote = _mm256_set1_epi8(b'"' as i8);
        let backslash = _mm256_set1_epi8(b'\\' as i8);
        let control_max = _mm256_set1_epi8(0x1f);
        let simple: [__m256i; 8] = super::SIMPLE_ESCAPES.map(|c| _mm256_set1_epi8(c as i8));
        // Whether the first byte of the next block is escaped.
        let mut carry = 0u32;
        while pos + 32 <= b.len() {
            // SAFETY: the loop condition keeps the 32 bytes read inside `b`.
            let v = unsafe { _mm256_loadu_si256(b.as_ptr().add(pos) as *const __m256i) };
            let quotes = _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, quote)) as u32;
            let backslashes = _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, backslash)) as u32;
            // Control and non-ASCII bytes: as signed bytes, those not greater than 0x1f.
            let other = !(_mm256_movemask_epi8(_mm256_cmpgt_epi8(v, control_max)) as u32);
            let escaped = super::escaped_bits(backslashes, &mut carry);
            let real_quotes = quotes & !escaped;
            // Bits before the closing quote (all of them when it is not in this block).
            let before_end = real_quotes.wrapping_sub(1) & !real_quotes;
            let mut trouble = other & before_end;
            if escaped & before_end != 0 {
                let mut allowed = _mm256_setzero_si256();
                for c in simple {
                    allowed = _mm256_or_si256(allowed, _mm256_cmpeq_epi8(v, c));
                }
                trouble |= escaped & before_end & !(_mm256_movemask_epi8(allowed) as u32);
            }
            if trouble != 0 {
                let i = trouble.trailing_zeros();
                // An escaped byte goes back to its backslash, which the caller re-reads.
                let back = (escaped >> i) & 1;
                return Err(pos + i as usize - back as usize);
            }
            if real_quotes != 0 {
                return Ok(pos + real_quotes.trailing_zeros() as usize + 1);
            }
            pos += 32;
        }
        // Leave on a byte that is not escaped: back to the backslash when it is.
        Err(pos - carry as usize)
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn skip_plain_avx2(b: &[u8], mut pos: usize) -> usize {
        let quote = _mm256_set1_epi8(b'"' as i8);
        let backslash = _mm256_set1_epi8(b'\\' as i8);
        // Plain bytes are 0x20..=0x7f: as signed bytes, exactly those greater than 0x1f.
        let control_max = _mm256_set1_epi8(0x1f);
        while pos + 32 <= b.len() {
            // SAFETY: the loop condition keeps the 32 bytes read inside `b`.
            let v = unsafe { _mm256_loadu_si256(b.as_ptr().add(pos) as *const __m256i) };
            let plain = _mm256_andnot_si256(
                _mm256_or_si256(_mm256_cmpeq_epi8(v, quote), _mm256_cmpeq_epi8(v, backslash)),
                _mm256_cmpgt_epi8(v, control_max),
            );
            let mask = !(_mm256_movemask_epi8(plain) as u32);
            if mask != 0 {
                return pos + mask.trailing_zeros() as usize;
            }
            pos += 32;
        }
        pos
    }

    /// At most `blocks` 16-byte blocks; also says whether it stopped at a non-plain byte.
    /// SSE2 is part of every x86_64 CPU.
    #[inline(always)]
    pub(super) fn skip_plain_sse2(b: &[u8], mut pos: usize, blocks: usize) -> (usize, bool) {
        // SAFETY: SSE2 is always available on x86_64.
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let backslash = _mm_set1_epi8(b'\\' as i8);
            let control_max = _mm_set1_epi8(0x1f);
            let mut left = blocks;
            while left > 0 && pos + 16 <= b.len() {
                // The loop condition keeps the 16 bytes read inside `b`.
                let v = _mm_loadu_si128(b.as_ptr().add(pos) as *const __m128i);
                let plain = _mm_andnot_si128(
                    _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                    _mm_cmpgt_epi8(v, control_max),
                );
                let mask = !(_mm_movemask_epi8(plain) as u32) & 0xffff;
                if mask != 0 {
                    return (pos + mask.trailing_zeros() as usize, true);
                }
                pos += 16;
                left -= 1;
            }
        }
        (pos, false)
    }
}

#[cfg(any(test, not(target_arch = "x86_64")))]
mod swar {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;

    /// Eight bytes at a time: a byte is flagged (its high bit set in `hits`) when it is zero
    /// after xor with the quote or the backslash, below 0x20, or non-ASCII. Borrows only ever
    /// flag bytes above a real hit, so the lowest flag is exact.
    #[inline]
    pub fn skip_plain(b: &[u8], mut pos: usize) -> usize {
        while let Some(chunk) = b.get(pos..pos + 8) {
            let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
            let quote = w ^ (ONES * b'"' as u64);
            let backslash = w ^ (ONES * b'\\' as u64);
            let hits = (quote.wrapping_sub(ONES) & !quote)
                | (backslash.wrapping_sub(ONES) & !backslash)
                | w.wrapping_sub(ONES * 0x20)
                | w;
            let hits = hits & HIGHS;
            if hits != 0 {
                return pos + (hits.trailing_zeros() / 8) as usize;
            }
            pos += 8;
        }
        pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every block scanner stops exactly where a byte-by-byte scan does.
    #[test]
    fn block_scanners_agree_with_a_byte_scan() {
        let reference = |b: &[u8], pos: usize| {
            (pos..b.len())
                .find(|&i| matches!(b[i], b'"' | b'\\') || !(0x20..0x80).contains(&b[i]))
                .unwrap_or(b.len())
        };
        // Finish a block scan byte by byte, as `find_special` does.
        let finish = |b: &[u8], pos: usize| reference(b, pos);
        let specials = [b'"', b'\\', 0x00, 0x1f, 0x80, 0xff, b'\n'];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for len in 0..100 {
            for _ in 0..20 {
                let mut b = vec![b'a'; len];
                // A few specials at pseudo-random places.
                for _ in 0..(seed % 3) {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    if len > 0 {
                        b[seed as usize % len] = specials[(seed >> 32) as usize % specials.len()];
                    }
                }
                for pos in 0..=len {
                    let want = reference(&b, pos);
                    assert_eq!(
                        finish(&b, swar::skip_plain(&b, pos)),
                        want,
                        "swar {b:?} {pos}"
                    );
                    assert_eq!(find_special(&b, pos), want, "{b:?} {pos}");
                    #[cfg(target_arch = "x86_64")]
                    {
                        let sse2 = x86::skip_plain_sse2(&b, pos, usize::MAX).0;
                        assert_eq!(finish(&b, sse2), want, "sse2 {b:?} {pos}");
                        if is_x86_feature_detected!("avx2") {
                            // SAFETY: AVX2 is available, checked just above.
                            let avx2 = unsafe { x86::skip_plain_avx2(&b, pos) };
                            assert_eq!(finish(&b, avx2), want, "avx2 {b:?} {pos}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn escaped_bits_match_a_byte_scan() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            // Three blocks of backslash bits, dense enough for long runs.
            let blocks = [
                seed as u32 | (seed >> 32) as u32,
                (seed >> 16) as u32,
                seed as u32,
            ];
            let mut carry = 0;
            let fast: Vec<u32> = blocks
                .iter()
                .map(|&b| escaped_bits(b, &mut carry))
                .collect();
            let mut want = [0u32; 3];
            let mut escaped_next = false;
            for i in 0..96 {
                let is_backslash = blocks[i / 32] >> (i % 32) & 1 == 1;
                if escaped_next {
                    want[i / 32] |= 1 << (i % 32);
                    escaped_next = false;
                } else if is_backslash {
                    escaped_next = true;
                }
            }
            assert_eq!(fast, want, "{blocks:x?}");
        }
    }

    /// Strings of every kind of byte a string scanner stops at: the bit-mask scan of escaped
    /// strings gives the answers of the stop-at-every-escape loop.
    #[test]
    fn escaped_strings_are_skipped_as_the_plain_loop_skips_them() {
        let alphabet: &[&[u8]] = &[
            b"a",
            b"a",
            b"a",
            b"a",
            b"\"",
            b"\\",
            b"\\\\",
            b"\\\"",
            b"\\n",
            b"\\u00e9",
            b"\\u12",
            b"\\x",
            b"\x01",
            "é".as_bytes(),
            b"\xff",
            b"n",
            b"  ",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            let mut body = Vec::new();
            let len = (seed % 200) as usize;
            while body.len() < len {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                body.extend_from_slice(alphabet[(seed >> 40) as usize % alphabet.len()]);
            }
            assert_eq!(
                skip_string_with(&body, 0, true),
                skip_string_with(&body, 0, false),
                "{:?}",
                String::from_utf8_lossy(&body)
            );
        }
    }
}
