//! `cachet check` as users run it: the built binary, policy files on disk, exact messages.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn cachet_check(dir: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .arg("check")
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `cachet serve` with `args` in `dir`, which must refuse to start: what it said.
fn serve_refuses(dir: &Path, args: &[&str]) -> String {
    let serve = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(!serve.status.success(), "serve started with {args:?}");
    String::from_utf8_lossy(&serve.stderr).into_owned()
}

/// Check one policy file holding `text`; it must fail with exactly `expected` (one line
/// per error) followed by the summary line.
fn assert_refused(text: &str, expected: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.toml"), text).unwrap();
    let run = cachet_check(dir.path(), &["--policy", "p.toml"]);
    assert!(!run.ok, "check accepted:\n{text}");
    let n = expected.len();
    let summary = format!(
        "cachet: check failed: {n} error{} in policies",
        if n == 1 { "" } else { "s" }
    );
    let mut lines: Vec<&str> = expected.to_vec();
    lines.push(&summary);
    assert_eq!(
        run.stderr.trim_end().lines().collect::<Vec<_>>(),
        lines,
        "for:\n{text}"
    );
}

#[test]
fn bad_toml() {
    assert_refused(
        "name = \"a\"\norder = \n",
        &["p.toml:2:9: bad TOML: string values must be quoted, expected literal string"],
    );
}

#[test]
fn unknown_field() {
    assert_refused(
        "name = \"a\"\n[breakpoints]\nmode = \"auto\"\nttl_secs = 300\n",
        &["p.toml:4:1: breakpoints.ttl_secs: unknown field `ttl_secs`, expected one of `mode`, `ttl`, `keep_warm`, `keep_warm_after_secs`"],
    );
}

#[test]
fn unknown_op() {
    assert_refused(
        "name = \"a\"\n[[context]]\nreason = \"before_request\"\npatch = [\n  { op = \"system_part_append\", partName = \"x\", text = \"y\" },\n]\n",
        &["p.toml:5:3: context[0].patch[0]: unknown op `system_part_append`; expected one of system_part_set, system_part_remove, system_parts_replace, tools_replace, tools_remove, messages_cached_replace, messages_insert, messages_uncached_append, options_set"],
    );
}

#[test]
fn missing_invalidate_reason() {
    assert_refused(
        "name = \"a\"\n[[context]]\nreason = \"before_request\"\npatch = [{ op = \"tools_remove\", names = [\"bash\"] }]\n",
        &["p.toml:4:10: context[0].patch[0]: op `tools_remove` changes cached content but has no invalidateCacheReason"],
    );
}

#[test]
fn bad_glob() {
    assert_refused(
        "name = \"a\"\n[match]\nmodel = [\"gpt-5\", \"claude-{sonnet\"]\n",
        &["p.toml:3:19: match.model[1]: bad glob `claude-{sonnet`: unclosed alternate group; missing '}' (maybe escape '{' with '[{]'?)"],
    );
}

#[test]
fn bad_json_pointer() {
    assert_refused(
        "name = \"a\"\n[[payload]]\njson_patch = [{ op = \"add\", path = \"metadata/user_id\", value = \"x\" }]\n",
        &["p.toml:3:15: payload[0].json_patch[0]: path `metadata/user_id` is not a JSON Pointer: it must be empty or start with `/`"],
    );
}

#[test]
fn unknown_template_variable() {
    assert_refused(
        "name = \"a\"\n[[context]]\nreason = \"ephemeral\"\npatch = [{ op = \"messages_uncached_append\", messages = [{ role = \"user\", content = \"now: {{time}}\" }] }]\n",
        &["p.toml:4:10: context[0].patch[0]: unknown template variable `{{time}}`; known: {{session}}, {{request_index}}, {{turn_index}}, {{model}}, {{provider}}, {{date}}"],
    );
}

#[test]
fn hook_without_url() {
    assert_refused(
        "name = \"a\"\n\n[[hook]]\nevents = [\"context:ephemeral\"]\n",
        &["p.toml:3:1: hook[0]: missing `url`: a hook needs the http(s) URL of its server"],
    );
}

#[test]
fn bad_regex() {
    assert_refused(
        "name = \"a\"\n[[context]]\nreason = \"ephemeral\"\ntransform.invalidateCacheReason = \"move dates\"\ntransform.move_lines.pattern = '^Date: (\\d+'\n",
        &["p.toml:5:32: context[0].transform.move_lines.pattern: bad regex: unclosed group"],
    );
}

#[test]
fn bad_on_error_and_event() {
    assert_refused(
        "name = \"a\"\n[[hook]]\nurl = \"http://127.0.0.1:7000/hook\"\nevents = [\"context:after_request\"]\non_error = \"ignore\"\n",
        &[
            "p.toml:4:11: hook[0].events[0]: unknown event `context:after_request`; expected context:before_request | context:ephemeral | context:turn_end | before_provider_request",
            "p.toml:5:12: hook[0].on_error: unknown value `ignore`; expected continue | fail",
        ],
    );
}

#[test]
fn unknown_match_values() {
    assert_refused(
        "name = \"a\"\n[match]\nprovider = [\"deepseek\"]\nendpoint = [\"completions\"]\n",
        &[
            "p.toml:3:13: match.provider[0]: unknown provider `deepseek`; expected anthropic | openai | gemini | bedrock | vertex",
            "p.toml:4:13: match.endpoint[0]: unknown endpoint `completions`; expected messages | chat | responses | invoke | raw_predict | generate_content",
        ],
    );
}

#[test]
fn inject_ab_weights_without_ab_mode() {
    assert_refused(
        "name = \"a\"\n[[inject]]\nsource = { url = \"http://127.0.0.1:7000/recall\" }\nmode = \"tail\"\nab = { \"tail\" = 1 }\n",
        &["p.toml:5:6: inject[0].ab: `ab` weights only apply with mode = \"ab\""],
    );
}

#[test]
fn duplicate_names_across_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("pol")).unwrap();
    std::fs::write(dir.path().join("pol/a.toml"), "name = \"same\"\n").unwrap();
    std::fs::write(dir.path().join("pol/b.toml"), "# b\nname = \"same\"\n").unwrap();
    let run = cachet_check(dir.path(), &["--policies", "pol"]);
    assert!(!run.ok);
    assert_eq!(
        run.stderr.trim_end().lines().collect::<Vec<_>>(),
        vec![
            "pol/b.toml:2:8: name: duplicate policy name `same`; also used in pol/a.toml",
            "cachet: check failed: 1 error in policies",
        ]
    );
}

#[test]
fn errors_in_several_files_are_all_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.toml"),
        "name = \"a\"\norder = \"first\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("b.toml"),
        "name = \"b\"\n[breakpoints]\nmode = \"auto\"\nttl = \"10m\"\n",
    )
    .unwrap();
    let run = cachet_check(dir.path(), &["--policy", "a.toml", "--policy", "b.toml"]);
    assert!(!run.ok);
    assert_eq!(
        run.stderr.trim_end().lines().collect::<Vec<_>>(),
        vec![
            "a.toml:2:9: order: invalid type: string \"first\", expected i64",
            "b.toml:4:7: breakpoints.ttl: unknown ttl `10m`; expected 5m | 1h | auto",
            "cachet: check failed: 2 errors in policies",
        ]
    );
}

#[test]
fn config_lists_policies_and_its_errors_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("p.toml"),
        "name = \"from-config\"\norder = 5\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("cachet.toml"),
        "[policies]\nfiles = [\"p.toml\"]\n",
    )
    .unwrap();
    let run = cachet_check(dir.path(), &[]);
    assert!(run.ok, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        "configuration ok; 1 policy active, in run order:\n  1. from-config (order 5, p.toml)\n"
    );

    std::fs::write(
        dir.path().join("bad.toml"),
        "[policies]\nfile = [\"p.toml\"]\n",
    )
    .unwrap();
    let run = cachet_check(dir.path(), &["--config", "bad.toml"]);
    assert!(!run.ok);
    assert_eq!(
        run.stderr.trim_end().lines().collect::<Vec<_>>(),
        vec![
            "bad.toml:2:1: unknown field `file`, expected one of `files`, `dirs`, `strict`",
            "cachet: check failed: the configuration is invalid",
        ]
    );
}

#[test]
fn shipped_policies_pass_check() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // An empty configuration of our own, so a cachet.toml in the checkout cannot interfere.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cachet.toml");
    std::fs::write(&config, "").unwrap();
    let config = config.to_string_lossy().into_owned();
    let run = cachet_check(&root, &["--config", &config, "--policies", "policies"]);
    assert!(run.ok, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        "configuration ok; 6 policies active, in run order:\n  \
         1. anthropic-auto-breakpoints (order 10, policies/anthropic-auto-breakpoints.toml)\n  \
         2. openai-cache-key (order 20, policies/openai-cache-key.toml)\n  \
         3. stabilize-volatile (order 30, policies/stabilize-volatile.toml)\n  \
         4. memory-context-hook (order 500, policies/memory-context-hook.toml)\n  \
         5. memory-pinned (order 500, policies/memory-pinned.toml)\n  \
         6. memory-system-prompt (order 500, policies/memory-system-prompt.toml)\n"
    );
}

/// `ttl = "auto"` and keep-warm are accepted; keep-warm without it is refused with the
/// reason, and so is a keep-warm delay past the 5-minute lifetime.
#[test]
fn adaptive_ttl_and_keep_warm_pass_check() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cachet.toml");
    std::fs::write(&config, "").unwrap();
    let config = config.to_string_lossy().into_owned();
    let run = cachet_check(
        &root,
        &[
            "--config",
            &config,
            "--policy",
            "tests/data/traces/arms/ttl-auto-keep-warm.toml",
        ],
    );
    assert!(run.ok, "{}", run.stderr);
    assert_refused(
        "name = \"a\"\n[breakpoints]\nmode = \"preserve\"\nttl = \"auto\"\nkeep_warm = true\n",
        &["p.toml:5:13: breakpoints.keep_warm: keep_warm needs mode = \"auto\" and ttl = \"auto\" (it acts on the learned gaps between turns)"],
    );
    assert_refused(
        "name = \"a\"\n[breakpoints]\nmode = \"auto\"\nttl = \"auto\"\nkeep_warm = true\nkeep_warm_after_secs = 0\n",
        &["p.toml:6:24: breakpoints.keep_warm_after_secs: 0 is not between 1 and 299: the keep-warm must read the prefix before its 5-minute entry expires"],
    );
}

/// Every `store` value is checked: a URL scheme other than redis/rediss is a configuration
/// error in `check`, and `serve` refuses it instead of creating a folder named `redsi:`.
#[test]
fn store_values_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("c.toml"),
        "[sessions]\nstore = \"redsi://x\"\n",
    )
    .unwrap();
    let run = cachet_check(dir.path(), &["--config", "c.toml"]);
    assert!(!run.ok);
    assert_eq!(
        run.stderr.trim_end().lines().collect::<Vec<_>>(),
        vec![
            "c.toml: sessions.store: invalid session store 'redsi://x': unknown scheme `redsi://`: use redis://, rediss:// or a folder path",
            "cachet: check failed: the configuration is invalid",
        ]
    );
    for ok in [
        "rediss://cache.internal:6380/0",
        "redis://127.0.0.1:6379/0",
        "./data/",
    ] {
        std::fs::write(
            dir.path().join("c.toml"),
            format!("[sessions]\nstore = \"{ok}\"\n"),
        )
        .unwrap();
        let run = cachet_check(dir.path(), &["--config", "c.toml"]);
        assert!(run.ok, "{ok}: {}", run.stderr);
    }

    let stderr = serve_refuses(dir.path(), &["--store", "redsi://x"]);
    assert!(stderr.contains("unknown scheme `redsi://`"), "{stderr}");
    assert!(
        !dir.path().join("redsi:").exists(),
        "no folder made of a typo"
    );
}

/// `upstream.client = "reqwest"` was removed: `check` refuses a configuration that names it,
/// at its line, saying what to do, rather than forwarding with another client than the one
/// the file names; `"hyper"` is accepted, and `serve` refuses what `check` refuses.
#[test]
fn the_removed_reqwest_client_is_refused_saying_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let config = |client: &str| {
        std::fs::write(
            dir.path().join("c.toml"),
            format!("[upstream]\nconnect_timeout_ms = 5000\nclient = \"{client}\"\n"),
        )
        .unwrap();
    };
    config("reqwest");
    let run = cachet_check(dir.path(), &["--config", "c.toml"]);
    assert!(!run.ok);
    let lines: Vec<&str> = run.stderr.trim_end().lines().collect();
    assert_eq!(
        lines.last(),
        Some(&"cachet: check failed: the configuration is invalid"),
        "{}",
        run.stderr
    );
    let first = lines[0];
    assert!(first.starts_with("c.toml:3:10: "), "{first}");
    for says in [
        "\"reqwest\" was removed",
        "remove the line",
        "\"hyper\"",
        "HTTPS_PROXY",
    ] {
        assert!(first.contains(says), "{first}");
    }
    let stderr = serve_refuses(dir.path(), &["--config", "c.toml"]);
    assert!(stderr.contains("\"reqwest\" was removed"), "{stderr}");

    config("hyper");
    let run = cachet_check(dir.path(), &["--config", "c.toml"]);
    assert!(run.ok, "{}", run.stderr);
    config("curl");
    let run = cachet_check(dir.path(), &["--config", "c.toml"]);
    assert!(!run.ok);
    assert!(
        run.stderr
            .contains("unknown variant `curl`, expected `hyper`"),
        "{}",
        run.stderr
    );
}
