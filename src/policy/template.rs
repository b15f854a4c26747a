//! Template variables in policy text fields: `{{session}}`, `{{request_index}}`,
//! `{{turn_index}}`, `{{model}}`, `{{provider}}`, `{{date}}` (UTC, YYYY-MM-DD). Nothing else.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// The names accepted between `{{` and `}}`.
pub const TEMPLATE_VARIABLES: [&str; 6] = [
    "session",
    "request_index",
    "turn_index",
    "model",
    "provider",
    "date",
];

/// The values of the template variables for one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateVars {
    pub session: String,
    pub request_index: u64,
    pub turn_index: u64,
    pub model: String,
    pub provider: String,
    /// UTC date, YYYY-MM-DD; see [`utc_date`].
    pub date: String,
}

impl TemplateVars {
    fn value(&self, name: &str) -> Option<String> {
        Some(match name {
            "session" => self.session.clone(),
            "request_index" => self.request_index.to_string(),
            "turn_index" => self.turn_index.to_string(),
            "model" => self.model.clone(),
            "provider" => self.provider.clone(),
            "date" => self.date.clone(),
            _ => return None,
        })
    }
}

/// Each `{{ name }}` in `text`: (byte range of the whole placeholder, trimmed name).
fn placeholders(text: &str) -> Vec<(std::ops::Range<usize>, &str)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(open) = text[from..].find("{{").map(|i| from + i) {
        let Some(close) = text[open + 2..].find("}}").map(|i| open + 2 + i) else {
            break;
        };
        found.push((open..close + 2, text[open + 2..close].trim()));
        from = close + 2;
    }
    found
}

/// Replace every known placeholder; unknown ones (refused at load time) stay as written.
pub fn render(text: &str, vars: &TemplateVars) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (range, name) in placeholders(text) {
        if let Some(value) = vars.value(name) {
            out.push_str(&text[last..range.start]);
            out.push_str(&value);
            last = range.end;
        }
    }
    out.push_str(&text[last..]);
    out
}

/// Render every string inside a JSON value (keys stay as written).
pub fn render_value(value: &Value, vars: &TemplateVars) -> Value {
    match value {
        Value::String(s) => Value::String(render(s, vars)),
        Value::Array(items) => Value::Array(items.iter().map(|v| render_value(v, vars)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), render_value(v, vars)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The first unknown variable in `text`, as an error message.
pub fn check_template(text: &str) -> Result<(), String> {
    for (_, name) in placeholders(text) {
        if !TEMPLATE_VARIABLES.contains(&name) {
            return Err(format!(
                "unknown template variable `{{{{{name}}}}}`; known: {}",
                TEMPLATE_VARIABLES
                    .iter()
                    .map(|v| format!("{{{{{v}}}}}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    Ok(())
}

/// Check every string inside a JSON value.
pub fn check_value(value: &Value) -> Result<(), String> {
    match value {
        Value::String(s) => check_template(s),
        Value::Array(items) => items.iter().try_for_each(check_value),
        Value::Object(map) => map.values().try_for_each(check_value),
        _ => Ok(()),
    }
}

/// `YYYY-MM-DD` in UTC for a point in time.
pub fn utc_date(at: SystemTime) -> String {
    let secs = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn vars() -> TemplateVars {
        TemplateVars {
            session: "s-1".into(),
            request_index: 7,
            turn_index: 2,
            model: "claude-sonnet-4-5".into(),
            provider: "anthropic".into(),
            date: "2026-11-22".into(),
        }
    }

    #[test]
    fn renders_known_variables_only() {
        assert_eq!(
            render(
                "{{session}}/{{ request_index }}/{{turn_index}} {{model}}@{{provider}} {{date}}",
                &vars()
            ),
            "s-1/7/2 claude-sonnet-4-5@anthropic 2026-11-22"
        );
        assert_eq!(
            render("{{nope}} {{ and {{session}}", &vars()),
            "{{nope}} {{ and {{session}}"
        );
        assert_eq!(render("no braces", &vars()), "no braces");
        let v = render_value(
            &json!({"k": ["{{session}}", 1, {"{{model}}": "{{model}}"}]}),
            &vars(),
        );
        assert_eq!(
            v,
            json!({"k": ["s-1", 1, {"{{model}}": "claude-sonnet-4-5"}]})
        );
    }

    #[test]
    fn unknown_variable_is_named() {
        assert!(check_template("user {{session}} on {{date}}").is_ok());
        let e = check_template("x {{sesion}}").unwrap_err();
        assert!(
            e.starts_with("unknown template variable `{{sesion}}`; known: {{session}}"),
            "{e}"
        );
        assert!(check_value(&json!({"a": ["{{time}}"]})).is_err());
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc_date(UNIX_EPOCH), "1970-01-01");
        // 2024-02-29T12:00:00Z
        assert_eq!(
            utc_date(UNIX_EPOCH + Duration::from_secs(1_709_208_000)),
            "2024-02-29"
        );
        // 2026-11-22T00:17:20Z
        assert_eq!(
            utc_date(UNIX_EPOCH + Duration::from_secs(1_795_307_840)),
            "2026-11-22"
        );
    }
}
