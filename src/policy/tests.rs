//! Loading and validation, end to end on policy text.

use std::path::{Path, PathBuf};

use http::HeaderMap;
use serde_json::json;

use super::*;
use crate::route::{Endpoint, Provider};

fn errors(text: &str) -> Vec<String> {
    match parse_policy(Path::new("p.toml"), text) {
        Ok(_) => vec![],
        Err(e) => e.iter().map(|e| e.to_string()).collect(),
    }
}

const FULL: &str = r#"
name = "example"
description = "every field"
order = 10

[match]
provider = ["anthropic"]
endpoint = ["messages"]
model = ["claude-*"]
client = ["pi", "claude-code"]
headers = { "X-Team" = "infra" }

[breakpoints]
mode = "auto"
ttl = "1h"

[prompt_cache_key]
from = "session"

[[context]]
reason = "before_request"
transformer = "policy-section"
[[context.patch]]
op = "system_part_set"
partName = "policy"
text = "Session {{session}}."
invalidateCacheReason = "add policy section"

[[context]]
reason = "ephemeral"
transform.invalidateCacheReason = "move volatile line out of the cached prefix"
transform.move_lines = { from = "system", pattern = '(?m)^Current date and time:.*$', to = "uncached_tail" }

[[payload]]
json_patch = [ { op = "add", path = "/metadata", value = { user_id = "{{session}}" } } ]

[[payload]]
merge_patch = { temperature = 0 }

[[inject]]
source = { url = "http://127.0.0.1:7000/recall" }
mode = "ab"
ab = { "system-prompt" = 50, "context-hook" = 50 }

[[hook]]
url = "http://127.0.0.1:7000/hook"
events = ["context:before_request", "before_provider_request"]
timeout_ms = 100
on_error = "fail"
"#;

#[test]
fn full_policy_validates_into_typed_fields() {
    let p = parse_policy(Path::new("policies/example.toml"), FULL).unwrap();
    assert_eq!(p.name, "example");
    assert_eq!(p.order, 10);
    assert_eq!(
        p.breakpoints,
        Some(Breakpoints {
            mode: BreakpointMode::Auto,
            ttl: CacheTtl::OneHour,
            keep_warm: false,
            keep_warm_after_secs: 270,
        })
    );
    assert_eq!(p.prompt_cache_key, Some(PromptCacheKey::Session));
    assert_eq!(p.context.len(), 2);
    assert_eq!(p.context[0].transformer, "policy-section");
    assert_eq!(p.context[1].transformer, "example");
    assert_eq!(p.payload.len(), 2);
    assert_eq!(
        p.inject[0].ab,
        vec![
            (InjectMode::ContextHook, 50),
            (InjectMode::SystemPrompt, 50)
        ]
    );
    let hook = &p.hooks[0];
    assert_eq!(hook.name, "example#0");
    assert_eq!(hook.on_error, OnError::Fail);
    assert_eq!(hook.timeout.as_millis(), 100);
    assert_eq!(p.hooks_for(HookEvent::BeforeProviderRequest).count(), 1);
    assert_eq!(
        p.hooks_for(HookEvent::Context(ContextReason::TurnEnd))
            .count(),
        0
    );

    let vars = TemplateVars {
        session: "s-1".into(),
        ..TemplateVars::default()
    };
    let parts = vec![(
        "base".to_string(),
        "Hi\nCurrent date and time: now\n".to_string(),
    )];
    let declared = p.context[0].result(&parts, &vars);
    assert_eq!(declared.transformer_name.as_deref(), Some("policy-section"));
    assert_eq!(
        serde_json::to_value(&declared.patch[0]).unwrap()["text"],
        json!("Session s-1.")
    );
    let moved = p
        .context_for(ContextReason::Ephemeral)
        .next()
        .unwrap()
        .result(&parts, &vars);
    assert_eq!(moved.patch.len(), 2);

    let mut headers = HeaderMap::new();
    headers.insert("x-team", "infra".parse().unwrap());
    let facts = RequestFacts {
        provider: Provider::Anthropic,
        endpoint: Endpoint::Messages,
        model: "claude-opus-4-1",
        client: ClientKind::Pi,
        headers: &headers,
    };
    assert!(p.matcher.matches(&facts));
}

#[test]
fn serde_errors_name_line_and_field() {
    assert_eq!(
        errors("name = \"a\"\n[match]\nprovidr = [\"anthropic\"]\n"),
        vec!["p.toml:3:1: match.providr: unknown field `providr`, expected one of `provider`, `endpoint`, `model`, `client`, `headers`, `auth`"]
    );
    assert_eq!(
        errors("name = \"a\"\n[match]\nprovider = \"anthropic\"\n"),
        vec![
            "p.toml:3:12: match.provider: invalid type: string \"anthropic\", expected a sequence"
        ]
    );
    assert_eq!(
        errors("name = \"a\"\n[[hook]]\nurl = \"http://x\"\n"),
        vec!["p.toml:2:1: hook[0]: missing field `events`"]
    );
    assert_eq!(
        errors("order = 1\n"),
        vec!["p.toml:1:1: missing field `name`"]
    );
    assert_eq!(
        errors("name = \"a\"\n[[context]]\nreason = \"ephemeral\"\n[[context.patch]]\nop = \"system_part_set\"\ntext = \"x\"\n"),
        vec!["p.toml:4:1: context[0].patch[0]: op `system_part_set`: missing field `partName`"]
    );
    assert_eq!(
        // TOML 1.1: inline tables may span lines, as in the design's example policy.
        errors("name = \"a\"\npatch = [{ a = 1,\n b = 2 }]\n"),
        vec!["p.toml:2:1: patch: unknown field `patch`, expected one of `name`, `description`, `order`, `match`, `breakpoints`, `prompt_cache_key`, `diagnostics`, `context`, `payload`, `inject`, `hook`"]
    );
}

#[test]
fn semantic_errors_are_all_collected() {
    let text = "name = \"a b\"\n[match]\nprovider = [\"anthropic\", \"azure\"]\nclient = [\"cursor\"]\n[breakpoints]\nmode = \"always\"\n";
    assert_eq!(
        errors(text),
        vec![
            "p.toml:1:8: name: name `a b` must be 1 to 64 letters, digits, `-`, `_`, `.` or `#`",
            "p.toml:3:26: match.provider[1]: unknown provider `azure`; expected anthropic | openai | gemini | bedrock | vertex",
            "p.toml:4:11: match.client[0]: unknown client `cursor`; expected pi | claude-code | codex | sdk | unknown",
            "p.toml:6:8: breakpoints.mode: unknown mode `always`; expected preserve | auto | strip",
        ]
    );
}

#[test]
fn context_handler_shape_errors() {
    assert_eq!(
        errors("name = \"a\"\n[[context]]\nreason = \"later\"\npatch = []\n"),
        vec!["p.toml:3:10: context[0].reason: unknown reason `later`; expected before_request | ephemeral | turn_end"]
    );
    assert_eq!(
        errors("name = \"a\"\n[[context]]\nreason = \"ephemeral\"\npatch = []\ndisplay = { title = \"at {{now}}\" }\n"),
        vec!["p.toml:5:11: context[0].display: unknown template variable `{{now}}`; known: {{session}}, {{request_index}}, {{turn_index}}, {{model}}, {{provider}}, {{date}}"]
    );
    assert_eq!(
        errors("name = \"a\"\n[[context]]\nreason = \"ephemeral\"\n"),
        vec!["p.toml:2:1: context[0]: give exactly one of `patch` or `transform`"]
    );
    assert_eq!(
        errors("name = \"a\"\n[[context]]\nreason = \"ephemeral\"\npatch = [{ op = \"tools_remove\", names = [\"x\"], invalidateCacheReason = \"r\", extra = 1 }]\n"),
        vec!["p.toml:4:10: context[0].patch[0]: op `tools_remove`: unknown field `extra`, expected `names` or `invalidateCacheReason`"]
    );
    assert_eq!(
        errors("name = \"a\"\n[[context]]\nreason = \"ephemeral\"\ntransform = { move_lines = { pattern = '.*' } }\n"),
        vec![
            "p.toml:4:40: context[0].transform.move_lines.pattern: pattern matches the empty string; it must match the volatile text itself",
            "p.toml:4:13: context[0].transform: move_lines changes the cached system prompt but has no invalidateCacheReason",
        ]
    );
}

/// `when = "changed"` holds what the session's cached prefix holds, which is persisted:
/// only a `before_request` handler may, one transformer name each.
#[test]
fn holding_move_lines_errors() {
    let handler = |reason: &str, when: &str, name: &str| {
        format!("[[context]]\nreason = \"{reason}\"\ntransformer = \"{name}\"\ntransform = {{ move_lines = {{ pattern = 'Date: .*', when = \"{when}\" }}, invalidateCacheReason = \"r\" }}\n")
    };
    let policy = |handlers: &[String]| format!("name = \"a\"\n{}", handlers.concat());
    assert_eq!(
        errors(&policy(&[handler("before_request", "changed", "x")])),
        Vec::<String>::new()
    );
    assert_eq!(
        errors(&policy(&[handler("ephemeral", "always", "x")])),
        Vec::<String>::new()
    );
    let wrong_reason = errors(&policy(&[handler("ephemeral", "changed", "x")]));
    assert_eq!(wrong_reason.len(), 1);
    assert!(wrong_reason[0].contains("context[0].transform.move_lines.when: `changed` keeps what the session's cached prefix holds"), "{wrong_reason:?}");
    let unknown = errors(&policy(&[handler("before_request", "sometimes", "x")]));
    assert!(
        unknown[0].contains("unknown value `sometimes`; expected always | changed"),
        "{unknown:?}"
    );
    let twice = errors(&policy(&[
        handler("before_request", "changed", "x"),
        handler("before_request", "changed", "x"),
    ]));
    assert!(
        twice[0].contains("share the transformer name `x`"),
        "{twice:?}"
    );
}

#[test]
fn payload_inject_and_hook_errors() {
    assert_eq!(
        errors("name = \"a\"\n[[payload]]\njson_patch = [{ op = \"add\", path = \"/a~2\", value = 1 }]\n"),
        vec!["p.toml:3:15: payload[0].json_patch[0]: path `/a~2` is not a JSON Pointer: `~` must be written `~0` and `/` inside a key `~1`"]
    );
    assert_eq!(
        errors("name = \"a\"\n[[payload]]\njson_patch = [{ op = \"move\", path = \"/a\" }]\n"),
        vec![
            "p.toml:3:15: payload[0].json_patch[0]: bad JSON Patch operation: missing field `from`"
        ]
    );
    assert_eq!(
        errors("name = \"a\"\n[[payload]]\nmerge_patch = { user = \"{{user}}\" }\n"),
        vec!["p.toml:3:15: payload[0].merge_patch: unknown template variable `{{user}}`; known: {{session}}, {{request_index}}, {{turn_index}}, {{model}}, {{provider}}, {{date}}"]
    );
    assert_eq!(
        errors("name = \"a\"\n[[inject]]\nsource = { file = \"m.md\", url = \"http://x\" }\nmode = \"ab\"\n"),
        vec![
            "p.toml:3:10: inject[0].source: give exactly one of `file`, `notes` or `url`",
            "p.toml:2:1: inject[0]: mode `ab` needs `ab` weights, e.g. ab = { \"system-prompt\" = 50, \"context-hook\" = 50 }",
        ]
    );
    assert_eq!(
        errors("name = \"a\"\n[[hook]]\nurl = \"ftp://x/\"\nevents = [\"turn_end\"]\ntimeout_ms = 0\n"),
        vec![
            "p.toml:3:7: hook[0].url: `ftp://x/` is not an http(s) URL",
            "p.toml:4:11: hook[0].events[0]: unknown event `turn_end`; expected context:before_request | context:ephemeral | context:turn_end | before_provider_request",
            "p.toml:5:14: hook[0].timeout_ms: 0 is out of range; expected 1 to 60000 milliseconds",
        ]
    );
}

#[test]
fn bad_toml_is_reported_as_such() {
    let e = errors("name = \"a\"\nname2 = = 3\n");
    assert_eq!(e, vec!["p.toml:2:9: bad TOML: extra `=`, expected nothing"]);
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn folder_loading_orders_by_order_then_file_name_and_refuses_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "b.toml", "name = \"b\"\n");
    write(dir.path(), "a.toml", "name = \"a\"\n");
    write(dir.path(), "z.toml", "name = \"z\"\norder = 5\n");
    write(dir.path(), "README.md", "not a policy");
    let set = load_policies(&[dir.path().join("a.toml")], &[dir.path().to_path_buf()]).unwrap();
    let names: Vec<_> = set.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, vec!["z", "a", "b"]);

    write(dir.path(), "c.toml", "order = 1\nname = \"a\"\n");
    let errs = load_policies(&[], &[dir.path().to_path_buf()]).unwrap_err();
    assert_eq!(errs.len(), 1);
    let msg = errs[0].to_string();
    assert!(
        msg.contains("c.toml:2:8: name: duplicate policy name `a`; also used in "),
        "{msg}"
    );

    let hook =
        "[[hook]]\nname = \"h\"\nurl = \"http://127.0.0.1:1/\"\nevents = [\"context:ephemeral\"]\n";
    let h1 = write(dir.path(), "h1.toml", &format!("name = \"h1\"\n{hook}"));
    let h2 = write(
        dir.path(),
        "h2.toml",
        &format!("name = \"h2\"\n{hook}{hook}"),
    );
    let errs = load_policies(&[h1, h2], &[]).unwrap_err();
    let msgs: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(
        msgs[0].contains("h2.toml:3:8: hook[0].name: duplicate hook name `h`; also used in "),
        "{msgs:?}"
    );
    assert!(
        msgs[1].contains("h2.toml:7:8: hook[1].name: duplicate hook name `h`"),
        "{msgs:?}"
    );

    let errs = load_policies(&[dir.path().join("missing.toml")], &[]).unwrap_err();
    assert!(
        errs[0].to_string().contains("missing.toml: cannot read: "),
        "{}",
        errs[0]
    );
}

#[test]
fn matching_filters_in_run_order() {
    let anthropic = parse_policy(
        Path::new("a.toml"),
        "name = \"a\"\n[match]\nprovider = [\"anthropic\"]\n",
    )
    .unwrap();
    let any = parse_policy(Path::new("b.toml"), "name = \"b\"\norder = 1\n").unwrap();
    let set = PolicySet::new(vec![anthropic, any]);
    let headers = HeaderMap::new();
    let facts = RequestFacts {
        provider: Provider::OpenAi,
        endpoint: Endpoint::Chat,
        model: "gpt-5",
        client: ClientKind::Codex,
        headers: &headers,
    };
    let names: Vec<_> = set
        .matching(&facts)
        .iter()
        .map(|p| p.name.clone())
        .collect();
    assert_eq!(names, vec!["b"]);
}

#[test]
fn design_example_multi_line_inline_tables_parse() {
    // The context handlers of DESIGN §5.1, written as there (TOML 1.1 inline tables).
    let text = r#"name = "example"
description = "what it does and why"
order = 100

[[context]]
reason = "before_request"
transformer = "policy-section"
patch = [
  { op = "system_part_set", partName = "policy", text = "Never output secrets.",
    invalidateCacheReason = "add policy section" },
]

[[context]]
reason = "ephemeral"
transform = { move_lines = { from = "system", pattern = '(?m)^Current date and time:.*$', to = "uncached_tail" },
              invalidateCacheReason = "move volatile line out of the cached prefix" }

[[payload]]
json_patch = [ { op = "add", path = "/metadata", value = { user_id = "{{session}}" } } ]
"#;
    assert_eq!(errors(text), Vec::<String>::new());
}

#[test]
fn ttl_auto_and_keep_warm_are_accepted_only_together_with_auto_mode() {
    let text = "name = \"a\"\n[breakpoints]\nmode = \"auto\"\nttl = \"auto\"\nkeep_warm = true\n";
    let p = parse_policy(Path::new("p.toml"), text).unwrap();
    assert_eq!(
        p.breakpoints,
        Some(Breakpoints {
            mode: BreakpointMode::Auto,
            ttl: CacheTtl::Auto,
            keep_warm: true,
            keep_warm_after_secs: 270,
        })
    );
    assert_eq!(
        errors("name = \"a\"\n[breakpoints]\nmode = \"auto\"\nttl = \"2h\"\n"),
        vec!["p.toml:4:7: breakpoints.ttl: unknown ttl `2h`; expected 5m | 1h | auto"]
    );
    assert_eq!(
        errors("name = \"a\"\n[breakpoints]\nmode = \"auto\"\nttl = \"1h\"\nkeep_warm = true\n"),
        vec!["p.toml:5:13: breakpoints.keep_warm: keep_warm needs mode = \"auto\" and ttl = \"auto\" (it acts on the learned gaps between turns)"]
    );
    assert_eq!(
        errors("name = \"a\"\n[breakpoints]\nmode = \"auto\"\nttl = \"auto\"\nkeep_warm = true\nkeep_warm_after_secs = 300\n"),
        vec!["p.toml:6:24: breakpoints.keep_warm_after_secs: 300 is not between 1 and 299: the keep-warm must read the prefix before its 5-minute entry expires"]
    );
}

/// The policies that have cachet place markers load the tokenizer at start, since placing
/// them counts tokens on the request path; the others leave it unloaded.
#[test]
fn the_policies_that_place_markers_are_known_at_load() {
    let shipped = |name: &str| {
        let path = PathBuf::from(format!(
            "{}/policies/{name}.toml",
            env!("CARGO_MANIFEST_DIR")
        ));
        load_policies(&[path], &[]).unwrap()
    };
    for (name, places) in [
        ("anthropic-auto-breakpoints", true),
        ("memory-context-hook", true),
        ("memory-pinned", false),
        ("memory-system-prompt", false),
        ("openai-cache-key", false),
        ("stabilize-volatile", false),
    ] {
        assert_eq!(shipped(name).places_markers(), places, "{name}");
    }
    let ab = r#"
name = "a"
[[inject]]
source = { url = "http://127.0.0.1:7000/recall" }
mode = "ab"
ab = { "system-prompt" = 50, "context-hook" = 50 }
"#;
    let p = parse_policy(Path::new("p.toml"), ab).unwrap();
    assert!(PolicySet::new(vec![p]).places_markers());
}
