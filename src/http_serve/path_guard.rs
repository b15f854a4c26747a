//! Request paths that could climb out of where they point are refused at the edge, before
//! routing: a `.` or `..` segment, plain or percent-encoded (`%2e`, `%2E%2e`, `.%2e`, and
//! again under a second layer of encoding such as `%252e`), an encoded slash or backslash
//! (`%2f`, `%5c`) that would make a new segment once decoded, and a raw backslash (which
//! URL parsers turn into `/` for http URLs). cachet holds provider keys: a path that an
//! upstream or an URL parser normalises elsewhere could carry them to another endpoint.

use crate::error::ApiError;

/// Percent-decoding rounds checked (a path encoded twice is decoded twice).
const DECODE_ROUNDS: usize = 3;
/// Longest part of a refused path repeated in the error message.
const SHOWN: usize = 80;

/// `Ok` when no form of `path` has a dot segment or a hidden separator.
pub fn check(path: &str) -> Result<(), ApiError> {
    let mut current = path.as_bytes().to_vec();
    for round in 0..=DECODE_ROUNDS {
        if current.contains(&b'\\') {
            return Err(refusal(path, "a backslash"));
        }
        if current.split(|&b| b == b'/').any(is_dot_segment) {
            return Err(refusal(path, "a `.` or `..` segment"));
        }
        if round == DECODE_ROUNDS || !current.contains(&b'%') {
            break;
        }
        let decoded = percent_decode(&current);
        let slashes = |b: &[u8]| b.iter().filter(|&&c| c == b'/').count();
        if slashes(&decoded) != slashes(&current) {
            return Err(refusal(path, "an encoded slash"));
        }
        current = decoded;
    }
    Ok(())
}

fn is_dot_segment(segment: &[u8]) -> bool {
    segment == b"." || segment == b".."
}

/// One round of percent-decoding; a `%` not followed by two hex digits stays as it is.
fn percent_decode(input: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        if input[i] == b'%' && i + 2 < input.len() {
            if let (Some(h), Some(l)) = (hex(input[i + 1]), hex(input[i + 2])) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(input[i]);
        i += 1;
    }
    out
}

fn refusal(path: &str, what: &str) -> ApiError {
    let shown: String = path.chars().take(SHOWN).collect();
    ApiError::invalid(format!(
        "request path `{shown}` has {what}; paths must not leave the API's base path"
    ))
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn plain_and_encoded_dot_segments_are_refused() {
        for path in [
            "/v1/../../internal/admin",
            "/v1/./messages",
            "/v1/..",
            "/v1/%2e%2e/%2e%2e/openai/v1/chat/completions",
            "/v1/%2E%2e/x",
            "/v1/.%2e/x",
            "/v1/%2e./x",
            "/v1/%2e/messages",
            "/v1/%252e%252e/x",
            "/v1/%25252e%25252e/x",
            "/v1/..%2fadmin",
            "/v1/a%2f..%2f..%2fadmin",
            "/v1/a%2Fb",
            "/v1/%5c..%5cadmin",
            "/v1\\..\\admin",
        ] {
            assert!(check(path).is_err(), "{path} passed");
        }
    }

    #[test]
    fn ordinary_paths_pass() {
        for path in [
            "/v1/messages",
            "/v1/chat/completions",
            "/v1/files/file-abc.txt",
            "/v1/models/claude-sonnet-4.5",
            "/v1/files/a%20b",
            "/v1/...",
            "/v1/.well-known",
            "/v1/%",
            "/v1/%2",
            "/",
        ] {
            assert!(check(path).is_ok(), "{path} refused");
        }
    }
}
