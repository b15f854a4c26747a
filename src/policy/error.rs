//! A policy error that names the file, the line, the field and what is wrong.

use std::fmt;
use std::path::PathBuf;

/// One problem found in a policy file. Rendered as `file:line:col: field: message`
/// (line and column are omitted when unknown, the field when the whole file is concerned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    pub file: PathBuf,
    /// 1-based line and column, when the problem has a place in the file.
    pub position: Option<(usize, usize)>,
    /// The field path, e.g. `context[1].patch[0]`; empty for file-level problems.
    pub field: String,
    pub message: String,
}

impl PolicyError {
    /// A problem with the file as a whole (unreadable, missing).
    pub fn file_level(file: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        PolicyError {
            file: file.into(),
            position: None,
            field: String::new(),
            message: message.into(),
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some((line, col)) = self.position {
            write!(f, ":{line}:{col}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for PolicyError {}

/// A problem found while validating, before it is placed in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub path: FieldPath,
    pub message: String,
}

/// A path into a policy document: keys and array indices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldPath(pub Vec<Segment>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Key(String),
    Index(usize),
}

impl FieldPath {
    pub fn root() -> Self {
        FieldPath(Vec::new())
    }

    pub fn key(&self, key: &str) -> Self {
        let mut p = self.clone();
        p.0.push(Segment::Key(key.to_string()));
        p
    }

    pub fn index(&self, index: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Segment::Index(index));
        p
    }

    /// An error at this path.
    pub fn error(&self, message: impl Into<String>) -> FieldError {
        FieldError {
            path: self.clone(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Segment::Key(k) if i == 0 => write!(f, "{k}")?,
                Segment::Key(k) => write!(f, ".{k}")?,
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// Names end up in metric labels and logs: keep them short and plain.
pub fn check_name(name: &str, what: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '#'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} `{name}` must be 1 to 64 letters, digits, `-`, `_`, `.` or `#`"
        ))
    }
}

/// One line per error, in the order found.
pub fn render_errors(errors: &[PolicyError]) -> String {
    errors
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_file_line_field_and_message() {
        let e = PolicyError {
            file: "policies/x.toml".into(),
            position: Some((12, 5)),
            field: FieldPath::root()
                .key("context")
                .index(1)
                .key("patch")
                .index(0)
                .to_string(),
            message: "unknown op `foo`".into(),
        };
        assert_eq!(
            e.to_string(),
            "policies/x.toml:12:5: context[1].patch[0]: unknown op `foo`"
        );
        let e = PolicyError::file_level("p.toml", "cannot read: gone");
        assert_eq!(e.to_string(), "p.toml: cannot read: gone");
    }
}
