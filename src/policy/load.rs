//! Reading policy files and folders into an ordered `PolicySet`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::error::{FieldError, FieldPath, PolicyError};
use super::locate::line_col;
use super::locate::Locator;
use super::matcher::RequestFacts;
use super::model::Policy;
use super::raw::RawPolicy;
use super::validate::validate;

/// The active policies, in run order: `order`, then file name.
#[derive(Debug, Clone, Default)]
pub struct PolicySet {
    policies: Vec<Policy>,
}

impl PolicySet {
    pub fn new(mut policies: Vec<Policy>) -> Self {
        policies.sort_by(|a, b| {
            a.order
                .cmp(&b.order)
                .then_with(|| a.source_file.file_name().cmp(&b.source_file.file_name()))
                .then_with(|| a.source_file.cmp(&b.source_file))
        });
        PolicySet { policies }
    }

    /// The policies whose `[match]` holds for the request, in run order.
    pub fn matching(&self, facts: &RequestFacts<'_>) -> Vec<&Policy> {
        self.policies
            .iter()
            .filter(|p| p.matcher.matches(facts))
            .collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Policy> {
        self.policies.iter()
    }

    pub fn len(&self) -> usize {
        self.policies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// Whether a policy may have cachet place Anthropic cache markers: `auto` breakpoints,
    /// or a context-hook injection (alone or as an A/B arm), which marks the history before
    /// it. Marker placement counts tokens on the request path.
    pub fn places_markers(&self) -> bool {
        use super::model::{BreakpointMode, InjectMode};
        self.policies.iter().any(|p| {
            let context_hook = p.inject.iter().any(|i| {
                i.mode == InjectMode::ContextHook
                    || i.ab.iter().any(|(arm, _)| *arm == InjectMode::ContextHook)
            });
            context_hook
                || p.breakpoints
                    .is_some_and(|b| b.mode == BreakpointMode::Auto)
        })
    }
}

/// Load every file in `files` and every `*.toml` in `dirs` (a file reached twice counts
/// once). All errors are collected, so one run of `cachet check` shows them all.
pub fn load_policies(files: &[PathBuf], dirs: &[PathBuf]) -> Result<PolicySet, Vec<PolicyError>> {
    let mut errors = Vec::new();
    let mut paths: Vec<PathBuf> = files.to_vec();
    for dir in dirs {
        match policy_files_in(dir) {
            Ok(mut found) => paths.append(&mut found),
            Err(e) => errors.push(e),
        }
    }
    let mut seen = Vec::new();
    paths.retain(|p| {
        let key = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        let fresh = !seen.contains(&key);
        seen.push(key);
        fresh
    });

    let mut policies: Vec<Policy> = Vec::new();
    let mut first_file_of: HashMap<String, PathBuf> = HashMap::new();
    // Hook names are metric labels: two hooks with one name would share a time series.
    let mut hook_file_of: HashMap<String, PathBuf> = HashMap::new();
    for path in &paths {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                errors.push(PolicyError::file_level(path, format!("cannot read: {e}")));
                continue;
            }
        };
        match parse_policy(path, &text) {
            Ok(policy) => {
                if let Some(first) = first_file_of.get(&policy.name) {
                    let at = FieldPath::root().key("name");
                    let message = format!(
                        "duplicate policy name `{}`; also used in {}",
                        policy.name,
                        first.display()
                    );
                    errors.push(place(path, &text, &Locator::new(&text), at.error(message)));
                    continue;
                }
                first_file_of.insert(policy.name.clone(), path.clone());
                let mut clash = false;
                for (i, hook) in policy.hooks.iter().enumerate() {
                    if let Some(first) = hook_file_of.get(&hook.name) {
                        let at = FieldPath::root().key("hook").index(i).key("name");
                        let message = format!(
                            "duplicate hook name `{}`; also used in {}",
                            hook.name,
                            first.display()
                        );
                        errors.push(place(path, &text, &Locator::new(&text), at.error(message)));
                        clash = true;
                    } else {
                        hook_file_of.insert(hook.name.clone(), path.clone());
                    }
                }
                if !clash {
                    policies.push(policy);
                }
            }
            Err(mut e) => errors.append(&mut e),
        }
    }
    if errors.is_empty() {
        Ok(PolicySet::new(policies))
    } else {
        Err(errors)
    }
}

/// The `*.toml` files directly in `dir`, sorted by name.
fn policy_files_in(dir: &Path) -> Result<Vec<PathBuf>, PolicyError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| PolicyError::file_level(dir, format!("cannot read folder: {e}")))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    Ok(files)
}

/// Parse and validate one policy file's text; `path` names it in errors.
pub fn parse_policy(path: &Path, text: &str) -> Result<Policy, Vec<PolicyError>> {
    let locator = Locator::new(text);
    let raw: RawPolicy = toml::from_str(text).map_err(|e| {
        let message = e.message().trim().replace('\n', "; ");
        // Syntax errors leave no document to locate fields in; say so plainly.
        let message = if locator.is_parsed() {
            message
        } else {
            format!("bad TOML: {message}")
        };
        let (position, field) = match e.span() {
            Some(span) => (
                Some(line_col(text, span.start)),
                locator
                    .path_at(span.clone(), message.starts_with("missing field"))
                    .to_string(),
            ),
            None => (None, String::new()),
        };
        vec![PolicyError {
            file: path.to_path_buf(),
            position,
            field,
            message,
        }]
    })?;
    validate(raw, path).map_err(|errors| {
        errors
            .into_iter()
            .map(|e| place(path, text, &locator, e))
            .collect()
    })
}

fn place(path: &Path, text: &str, locator: &Locator, error: FieldError) -> PolicyError {
    PolicyError {
        file: path.to_path_buf(),
        position: locator
            .span_of(&error.path)
            .map(|span| line_col(text, span.start)),
        field: error.path.to_string(),
        message: error.message,
    }
}
