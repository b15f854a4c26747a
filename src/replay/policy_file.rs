//! The `[[inject]]` tables of policy files, read tolerantly (every other table is ignored)
//! for replay arms. The policy engine validates the full file; replay needs only this.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use toml::Value;

use crate::inject::source::{DEFAULT_TOP_K, DEFAULT_URL_TIMEOUT_MS};
use crate::inject::{Injection, Mode, ModeChoice, Source, SourceSpec};

/// One `[[inject]]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectSpec {
    /// `policy-name#index`, for the per-turn content cache and errors.
    pub id: String,
    pub source: SourceSpec,
    pub mode: ModeChoice,
    /// System part name for `system-prompt` (default `memory`).
    pub part: String,
}

impl InjectSpec {
    /// The table ready to run in the request pipeline.
    pub fn into_injection(self) -> Injection {
        Injection {
            id: self.id,
            source: Source::new(self.source),
            choice: self.mode,
            part: self.part,
        }
    }
}

/// Read the `[[inject]]` tables of `path`. Relative `file` and `notes` paths are resolved
/// against the policy file's folder.
pub fn read_injects(path: &Path) -> anyhow::Result<Vec<InjectSpec>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading policy {}", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    parse_injects(&text, base).with_context(|| format!("policy {}", path.display()))
}

pub fn parse_injects(text: &str, base: &Path) -> anyhow::Result<Vec<InjectSpec>> {
    let doc: toml::Table = text.parse().context("not valid TOML")?;
    let name = doc
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("policy")
        .to_string();
    let tables = match doc.get("inject") {
        None => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => bail!("`inject` must be an array of tables ([[inject]])"),
    };
    tables
        .iter()
        .enumerate()
        .map(|(i, t)| {
            parse_one(t, base, &format!("{name}#{i}"))
                .with_context(|| format!("[[inject]] #{}", i + 1))
        })
        .collect()
}

fn parse_one(table: &Value, base: &Path, id: &str) -> anyhow::Result<InjectSpec> {
    let t = table.as_table().context("must be a table")?;
    let source = t.get("source").and_then(Value::as_table).context(
        "`source` is required: { file = ... } | { notes = ..., top_k = N } | { url = ... }",
    )?;
    let resolve = |p: &str| -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };
    let source = if let Some(file) = source.get("file").and_then(Value::as_str) {
        SourceSpec::File(resolve(file))
    } else if let Some(dir) = source.get("notes").and_then(Value::as_str) {
        let top_k = match source.get("top_k") {
            None => DEFAULT_TOP_K,
            Some(v) => v
                .as_integer()
                .filter(|n| *n > 0)
                .context("`top_k` must be a positive integer")? as usize,
        };
        SourceSpec::Notes {
            dir: resolve(dir),
            top_k,
        }
    } else if let Some(url) = source.get("url").and_then(Value::as_str) {
        let timeout_ms = match source.get("timeout_ms") {
            None => DEFAULT_URL_TIMEOUT_MS,
            Some(v) => v
                .as_integer()
                .filter(|n| *n > 0)
                .context("`timeout_ms` must be a positive integer")? as u64,
        };
        SourceSpec::Url {
            url: url.to_string(),
            timeout_ms,
        }
    } else {
        bail!("`source` needs one of `file`, `notes` or `url`");
    };
    let mode_name = t
        .get("mode")
        .and_then(Value::as_str)
        .context("`mode` is required")?;
    let mode = if mode_name == "ab" {
        let weights = t
            .get("ab")
            .and_then(Value::as_table)
            .context("mode `ab` needs an `ab` table of mode = weight")?;
        let mut arms = Vec::new();
        for (name, w) in weights {
            let mode =
                Mode::parse(name).with_context(|| format!("unknown mode `{name}` in `ab`"))?;
            let weight = w
                .as_integer()
                .and_then(|n| u32::try_from(n).ok())
                .with_context(|| format!("weight of `{name}` must be a non-negative integer"))?;
            arms.push((mode, weight));
        }
        if arms.iter().all(|&(_, w)| w == 0) {
            bail!("`ab` needs at least one positive weight");
        }
        // Table order depends on the TOML library's map; fix one order for the split.
        arms.sort();
        ModeChoice::Ab(arms)
    } else {
        ModeChoice::One(Mode::parse(mode_name).with_context(|| {
            format!(
                "unknown mode `{mode_name}` (system-prompt | context-hook | pinned | tail | ab)"
            )
        })?)
    };
    let part = t
        .get("part")
        .and_then(Value::as_str)
        .unwrap_or("memory")
        .to_string();
    Ok(InjectSpec {
        id: id.to_string(),
        source,
        mode,
        part,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_inject_tables_and_ignores_the_rest() {
        let text = r#"
name = "mem"
order = 10
[match]
provider = ["anthropic"]
[[inject]]
source = { notes = "notes/", top_k = 2 }
mode = "context-hook"
[[inject]]
source = { file = "/abs/memory.md" }
mode = "ab"
ab = { "system-prompt" = 30, "pinned" = 70 }
part = "facts"
"#;
        let specs = parse_injects(text, Path::new("/policies")).unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].id, "mem#0");
        assert_eq!(
            specs[0].source,
            SourceSpec::Notes {
                dir: PathBuf::from("/policies/notes/"),
                top_k: 2
            }
        );
        assert_eq!(specs[0].mode, ModeChoice::One(Mode::ContextHook));
        assert_eq!(
            specs[1].source,
            SourceSpec::File(PathBuf::from("/abs/memory.md"))
        );
        assert_eq!(
            specs[1].mode,
            ModeChoice::Ab(vec![(Mode::SystemPrompt, 30), (Mode::Pinned, 70)])
        );
        assert_eq!(specs[1].part, "facts");
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let err = parse_injects(
            "[[inject]]\nsource = { file = \"m\" }\nmode = \"sideways\"\n",
            Path::new("."),
        );
        assert!(format!("{:#}", err.unwrap_err()).contains("unknown mode `sideways`"));
        let err = parse_injects("[[inject]]\nmode = \"tail\"\n", Path::new("."));
        assert!(format!("{:#}", err.unwrap_err()).contains("`source` is required"));
    }
}
