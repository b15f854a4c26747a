//! Secrets that cannot be printed by accident.

use std::fmt;

/// A secret string: `Debug` and `Display` print `*****`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("*****")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("*****")
    }
}

/// Header names whose values are credentials and must never be logged or recorded.
pub const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "x-api-key",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "api-key",
    "x-goog-api-key",
    "x-amz-security-token",
];

pub fn is_secret_header(name: &str) -> bool {
    SECRET_HEADERS.iter().any(|h| name.eq_ignore_ascii_case(h))
}

#[cfg(test)]
mod tests {
    #[test]
    fn never_prints() {
        let s = super::Secret::new("sk-ant-123");
        assert_eq!(format!("{s:?} {s}"), "***** *****");
        assert!(super::is_secret_header("X-Api-Key"));
    }
}
