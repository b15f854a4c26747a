use super::*;

fn builtin(model: &str) -> Option<&'static ModelInfo> {
    ModelTable::builtin().lookup(model)
}

#[test]
fn table_parses_and_orders_specific_first() {
    let min = |m: &str| builtin(m).unwrap().min_cacheable_tokens;
    assert_eq!(min("claude-opus-4-5-20251101"), 4096);
    assert_eq!(min("claude-sonnet-4-6"), 2048);
    assert_eq!(min("claude-sonnet-4-5-20250929"), 1024);
    assert_eq!(builtin("gpt-4o-mini").unwrap().input, 0.15);
    assert_eq!(builtin("gpt-4o-2024-08-06").unwrap().input, 2.5);
}

/// Claude Code's default model was priced and sized as Sonnet through a `claude-*`
/// catch-all. Opus 5.5: $4 / $20, writes $5 / $8, reads $0.20 (0.05x), 1M context
/// (platform.claude.com/docs/en/models/opus-5-5/overview); minimum 512 tokens
/// (openrouter.ai model-migrations/claude-5-5). Opus 5: 512 (whats-new-opus-5).
#[test]
fn claude_5_rows_follow_anthropics_pages_and_are_not_sonnet() {
    for id in [
        "claude-opus-5-5",
        "claude-opus-5-5[1m]",
        "claude-opus-5-5-20260922",
    ] {
        let m = builtin(id).unwrap_or_else(|| panic!("{id} unknown"));
        assert_eq!((m.input, m.output), (4.0, 20.0), "{id}");
        assert_eq!((m.cache_write_5m, m.cache_write_1h), (5.0, 8.0));
        assert!((m.cache_read / m.input - 0.05).abs() < 1e-12);
        assert_eq!((m.min_cacheable_tokens, m.context_window), (512, 1_000_000));
        assert!(m.keeps_earlier_thinking);
    }
    let opus5 = builtin("claude-opus-5").unwrap();
    assert_eq!((opus5.input, opus5.min_cacheable_tokens), (5.0, 512));
    assert_eq!(builtin("claude-sonnet-5-5").unwrap().input, 2.0);
    assert_eq!(
        builtin("claude-opus-4-8").unwrap().min_cacheable_tokens,
        1024
    );
}

/// Sonnet 5.5's cache reads were cut from 0.10x to 0.05x of input ($0.20 to $0.10) on
/// 2026-10-07, the day Haiku 5.5 was released (kurofune/claudit v1.9.2, "pricing refresh
/// against the live pricing page on 2026-10-24"; TheKrush/PromptFuel v1.0.23, "effective
/// 2026-10-07"). Anthropic's model pages that still show $0.20 compare it with Haiku 4.5, so
/// they predate that day. Sonnet 5 keeps $0.20 (its $2 / $10 launch price is the standard one).
#[test]
fn sonnet_5_5_reads_the_cache_at_its_cut_price() {
    for id in [
        "claude-sonnet-5-5",
        "claude-sonnet-5-5[1m]",
        "claude-sonnet-5-5-20260928",
    ] {
        let m = builtin(id).unwrap_or_else(|| panic!("{id} unknown"));
        assert_eq!((m.input, m.output), (2.0, 10.0), "{id}");
        assert_eq!((m.cache_write_5m, m.cache_write_1h), (2.5, 4.0), "{id}");
        assert!((m.cache_read / m.input - 0.05).abs() < 1e-12, "{id}");
    }
    let sonnet5 = builtin("claude-sonnet-5").unwrap();
    assert!((sonnet5.cache_read / sonnet5.input - 0.1).abs() < 1e-12);
}

/// A model no row names is unknown, never priced as a neighbour (the old `claude-*`, `gpt-5*`
/// and `*` rows priced every new model as Sonnet or GPT-5).
#[test]
fn unknown_models_are_not_priced_as_another_model() {
    for id in [
        "claude-opus-7",
        "claude-opus-5-7",
        "claude-sonnet-4-7",
        "gpt-5.7",
        "gpt-5.4-max",
        "gpt-5.6-nova",
        "llama-4",
        "",
    ] {
        assert!(builtin(id).is_none(), "{id} matched a row");
    }
}

/// The models Codex offers now (developers.openai.com/codex/models: gpt-5.5, gpt-5.4,
/// gpt-5.4-mini, gpt-5.3-codex) and the Codex models before them were unknown, so a Codex
/// session through cachet had no cost. They cache as the GPT-5 family does before GPT-5.6:
/// reads at a tenth of input, no write fee, no explicit breakpoints. gpt-5.4-nano: $0.20 /
/// $0.02 / $1.25, 400,000 context (its developers.openai.com model page).
#[test]
fn codex_models_are_priced_as_the_gpt5_family_caches() {
    for id in [
        "gpt-5.5",
        "gpt-5.5-2026-04-23",
        "gpt-5.4",
        "gpt-5.4-mini",
        "gpt-5.4-nano",
        "gpt-5.3-codex",
        "gpt-5.2",
        "gpt-5.2-codex",
        "gpt-5.1-codex-max",
        "gpt-5.1-codex-mini",
        "gpt-5-codex",
    ] {
        let m = builtin(id).unwrap_or_else(|| panic!("{id} unknown"));
        assert_eq!(m.provider, "openai");
        assert!((m.cache_read / m.input - 0.1).abs() < 1e-9, "{id}");
        assert_eq!((m.cache_write_5m, m.cache_write_1h), (m.input, m.input));
        assert_eq!(m.explicit_breakpoints(), None, "{id}");
        assert_eq!(m.min_cacheable_tokens, 1024);
    }
    let nano = builtin("gpt-5.4-nano").unwrap();
    assert_eq!((nano.input, nano.output), (0.2, 1.25));
    assert_eq!(nano.context_window, 400_000);
    assert!(builtin("gpt-5.5").unwrap().input > builtin("gpt-5.4").unwrap().input);
}

/// Claude models the table lacked: Haiku 5.5 ($0.10 / $0.50, writes $0.125 / $0.20, 1M
/// context: platform.claude.com/docs/en/models/haiku-5-5/overview), Fable 5 and Mythos 5,
/// Mythos 5.1 (the pricing page), Fable 5.2 and Mythos 5.2. Each Mythos model is priced as
/// the Fable model of its version (the pricing page gives them one row each for 5 and 5.1).
#[test]
fn newer_claude_models_are_known() {
    let haiku = builtin("claude-haiku-5-5").unwrap();
    assert_eq!((haiku.input, haiku.output), (0.1, 0.5));
    assert_eq!((haiku.cache_write_5m, haiku.cache_write_1h), (0.125, 0.2));
    for id in [
        "claude-fable-5",
        "claude-mythos-5",
        "claude-mythos-5-1",
        "claude-fable-5-2",
        "claude-fable-5-2[1m]",
        "claude-mythos-5-2",
    ] {
        let m = builtin(id).unwrap_or_else(|| panic!("{id} unknown"));
        assert_eq!(m.provider, "anthropic");
        assert!(m.keeps_earlier_thinking, "{id}");
        assert_eq!(m.context_window, 1_000_000);
    }
    for version in ["5", "5-1", "5-2"] {
        let mythos = builtin(&format!("claude-mythos-{version}")).unwrap();
        let fable = builtin(&format!("claude-fable-{version}")).unwrap();
        let prices = |m: &ModelInfo| {
            (
                m.input,
                m.output,
                m.cache_read,
                m.cache_write_5m,
                m.cache_write_1h,
            )
        };
        assert_eq!(prices(mythos), prices(fable), "{version}");
    }
}

#[test]
fn every_row_is_valid_and_reads_cost_less_than_input() {
    for (_, m) in &ModelTable::builtin().entries {
        assert!(m.cache_read < m.input, "{}", m.pattern);
        assert!(m.cache_write_5m >= m.input && m.cache_write_1h >= m.cache_write_5m);
        assert!(m.min_cacheable_tokens > 0 && m.context_window > m.min_cacheable_tokens);
        if m.provider == "openai" {
            assert!(!m.keeps_earlier_thinking, "{}", m.pattern);
        }
    }
}

/// openai-python `PromptCacheOptions`: "Supported for `gpt-5.6` and later models ... Each
/// request can write up to four breakpoints"; cache writes cost 1.25x uncached input
/// (developers.openai.com gpt-5.6-sol page). Anthropic: at most 4 `cache_control` blocks.
#[test]
fn explicit_breakpoints_by_model() {
    let bp = |m: &str| builtin(m).and_then(ModelInfo::explicit_breakpoints);
    assert_eq!(bp("gpt-5.6"), Some(4));
    assert_eq!(bp("gpt-5.6-sol-2026-07-09"), Some(4));
    assert_eq!(bp("gpt-6-sol"), Some(4));
    // GPT-6.2 Sol, the model Codex 0.171 runs signed in with ChatGPT
    // (developers.openai.com/api/docs/models/gpt-6.2-sol: $2 input, $0.10 cached, $2.50 cache
    // writes for 30 minutes of retention, $10 output).
    assert_eq!(bp("gpt-6.2-sol"), Some(4));
    let sol62 = builtin("gpt-6.2-sol").expect("priced");
    assert_eq!(
        (
            sol62.input,
            sol62.cache_read,
            sol62.cache_write_5m,
            sol62.output
        ),
        (2.0, 0.1, 2.5, 10.0)
    );
    assert!(
        crate::cache_model::surely_kept_ms("gpt-6.2-sol", Default::default()) >= 30 * 60 * 1000,
        "breakpoints live at least 30 minutes"
    );
    assert_eq!(bp("gpt-5"), None);
    assert_eq!(bp("gpt-4o"), None);
    assert_eq!(bp("claude-sonnet-4-5"), Some(4));
    let sol = builtin("gpt-5.6").unwrap();
    assert!((sol.cache_write_5m / sol.input - 1.25).abs() < 1e-12);
    // An OpenAI write arrives unsplit (no 5m/1h) and is billed at the write price.
    let write = Usage {
        cache_write: 100_000,
        ..Usage::default()
    };
    assert!((sol.cost_usd(&write) - 0.5).abs() < 1e-9);
    let gpt5 = builtin("gpt-5").unwrap();
    assert_eq!(
        gpt5.cache_write_5m, gpt5.input,
        "no write fee before GPT-5.6"
    );
}

#[test]
fn a_user_table_is_tried_first_and_extends_the_shipped_one() {
    let user = ModelTable::parse(
        r#"
[[model]]
match = "claude-opus-7"
provider = "anthropic"
min_cacheable_tokens = 256
context_window = 2000000
input = 3.0
output = 15.0
cache_read = 0.15
cache_write_5m = 3.75
cache_write_1h = 6.0
keeps_earlier_thinking = true

[[model]]
match = "gpt-4o"
provider = "openai"
min_cacheable_tokens = 1024
context_window = 128000
input = 9.0
output = 9.0
cache_read = 1.0
cache_write_5m = 9.0
cache_write_1h = 9.0
"#,
    )
    .unwrap();
    let merged = ModelTable::builtin().merged_under(user);
    assert_eq!(
        merged.lookup("claude-opus-7").unwrap().min_cacheable_tokens,
        256
    );
    assert_eq!(merged.lookup("gpt-4o").unwrap().input, 9.0, "user row wins");
    assert_eq!(
        merged.lookup("gpt-4o-mini").unwrap().input,
        0.15,
        "shipped rows stay"
    );
    assert!(merged.lookup("claude-opus-8").is_none());
}

#[test]
fn bad_user_tables_are_refused_with_the_reason() {
    let bad_provider = "[[model]]\nmatch = \"x\"\nprovider = \"acme\"\nmin_cacheable_tokens = 1\ncontext_window = 2\ninput = 1.0\noutput = 1.0\ncache_read = 0.1\ncache_write_5m = 1.0\ncache_write_1h = 1.0\n";
    assert!(ModelTable::parse(bad_provider)
        .unwrap_err()
        .contains("provider"));
    let unknown_field =
        bad_provider.replace("provider = \"acme\"", "provider = \"openai\"\ncolour = 1");
    assert!(ModelTable::parse(&unknown_field)
        .unwrap_err()
        .contains("colour"));
    let missing = std::path::Path::new("/nonexistent/models.toml");
    assert!(read_user_table(missing)
        .unwrap_err()
        .contains("/nonexistent/models.toml"));
}

#[test]
fn an_unknown_model_is_logged_once_and_the_names_kept_are_bounded() {
    let mut names = UnknownNames::default();
    assert_eq!(names.first_sighting("a", 3), Some(false));
    assert_eq!(names.first_sighting("a", 3), None, "once per name");
    assert_eq!(names.first_sighting("b", 3), Some(false));
    assert_eq!(
        names.first_sighting("c", 3),
        Some(true),
        "the last one says so"
    );
    assert_eq!(names.first_sighting("d", 3), None);
    assert_eq!(names.seen.len(), 3);
}

#[test]
fn mixed_ttl_cost() {
    // Sonnet 4.6: Sonnet 4.5's prices, without its long-context rates.
    let m = builtin("claude-sonnet-4-6").unwrap();
    let u = Usage {
        cache_read: 1_000_000,
        cache_write: 2_000_000,
        cache_write_5m: 1_000_000,
        cache_write_1h: 1_000_000,
        uncached: 1_000_000,
        output: 0,
        ..Usage::default()
    };
    // 0.30 read + 3.75 5m + 6.00 1h + 3.00 uncached
    assert!((m.cost_usd(&u) - 13.05).abs() < 1e-9);
    assert!((m.savings_usd(&u) - (12.0 - 13.05)).abs() < 1e-9);
}

/// OpenAI bills a GPT-5.4 or GPT-5.5 prompt of more than 272K input tokens at 2x input
/// (cached input too) and 1.5x output, for the whole request, not only the tokens past the
/// line: "prompts with more than 272K input tokens are priced at 2x input and 1.5x output for
/// the full session" (OpenAI's pricing docs, as quoted by tokencost.app and benchr.org; GPT-5.5
/// $10 / $1 / $45, GPT-5.4 $5 / $0.50 / $22.50 above it). The GPT-6 models the same: "For
/// requests with more than 272K input tokens, input and cache rates double and output costs
/// 1.5 times the short-context rate for the full request"
/// (developers.openai.com/api/docs/models/gpt-6.2-sol; the GPT-6.1 Sol and GPT-6 Astra pages
/// say the same).
#[test]
fn long_prompts_bill_at_the_long_context_rates_for_the_whole_request() {
    let usage = |cache_read: u64, uncached: u64| Usage {
        cache_read,
        uncached,
        output: 10_000,
        ..Usage::default()
    };
    for (model, input, cached, output) in [
        ("gpt-5.5", 5.0, 0.5, 30.0),
        ("gpt-5.4", 2.5, 0.25, 15.0),
        ("gpt-6.2-sol", 2.0, 0.1, 10.0),
        ("gpt-6.1-sol", 2.0, 0.1, 10.0),
        ("gpt-6.1-terra", 1.0, 0.05, 5.0),
        ("gpt-6.2-astra", 8.0, 0.4, 40.0),
        ("gpt-6-astra", 10.0, 1.0, 50.0),
        // developers.openai.com/api/docs/models/gpt-5.6-sol and gpt-5.6-luna: "Prompts with
        // >272K input tokens are priced at 2x input and 1.5x output for the full request".
        ("gpt-5.6-sol", 4.0, 0.4, 20.0),
        ("gpt-5.6", 4.0, 0.4, 20.0),
        ("gpt-5.6-terra", 2.0, 0.2, 12.0),
        ("gpt-5.6-luna", 0.2, 0.02, 1.2),
        // BerriAI/litellm discussion 42523: GPT-6 Sol and Luna "rates double on input and
        // cache above 272K input tokens, and output goes to 1.5x".
        ("gpt-6-sol", 2.0, 0.2, 10.0),
        ("gpt-6-luna", 0.1, 0.01, 0.5),
    ] {
        let m = builtin(model).unwrap();
        // 272,000 input tokens: the standard rates.
        let at = usage(200_000, 72_000);
        let standard = (72_000.0 * input + 200_000.0 * cached + 10_000.0 * output) / 1e6;
        assert!((m.cost_usd(&at) - standard).abs() < 1e-9, "{model}");
        // One token more: every token at the long-context rates.
        let past = usage(200_000, 72_001);
        let long =
            (72_001.0 * input * 2.0 + 200_000.0 * cached * 2.0 + 10_000.0 * output * 1.5) / 1e6;
        assert!(
            (m.cost_usd(&past) - long).abs() < 1e-9,
            "{model}: {}",
            m.cost_usd(&past)
        );
        // What caching saved is against the same long rates.
        let uncached_all = (272_001.0 * input * 2.0 + 10_000.0 * output * 1.5) / 1e6;
        assert!(
            (m.savings_usd(&past) - (uncached_all - long)).abs() < 1e-9,
            "{model}"
        );
    }
    // Claude Haiku 5.5 over 100,000 tokens: $0.50 / $2.50 / $0.625 against $0.10 / $0.50 /
    // $0.125 (platform.claude.com/docs/en/models/haiku-5-5/overview), 5x each.
    let haiku = builtin("claude-haiku-5-5").unwrap();
    let over = Usage {
        cache_write: 100_001,
        cache_write_5m: 100_001,
        output: 1_000_000,
        ..Usage::default()
    };
    assert!((haiku.cost_usd(&over) - (100_001.0 * 0.625 + 1_000_000.0 * 2.5) / 1e6).abs() < 1e-9);
    // Sonnet 4.5 past 200K input tokens (its 1M beta), cache reads and writes included in the
    // count: $6 / $22.50, the cache prices their multiples (platform.claude.com pricing, "Long
    // context pricing").
    let sonnet = builtin("claude-sonnet-4-5[1m]").unwrap();
    let past = usage(150_000, 50_001);
    let long = (50_001.0 * 6.0 + 150_000.0 * 0.6 + 10_000.0 * 22.5) / 1e6;
    assert!((sonnet.cost_usd(&past) - long).abs() < 1e-9);
    // Claude 4.6 and later bill the full 1M context at standard rates.
    let opus = builtin("claude-opus-5").unwrap();
    let big = usage(0, 900_000);
    let standard = (900_000.0 * opus.input + 10_000.0 * opus.output) / 1e6;
    assert!((opus.cost_usd(&big) - standard).abs() < 1e-9);
}

/// GPT-6.2 Sol: "The cache write price is for 30 minutes of retention. A 12-hour cache write
/// costs $5 per million tokens for short-context requests at Standard pricing"
/// (developers.openai.com/api/docs/models/gpt-6.2-sol). A row without a 12-hour price
/// prices those writes at its write price; above 272K input tokens the input factor applies
/// to them as to every input price.
#[test]
fn twelve_hour_writes_are_priced_at_their_own_rate() {
    let sol = builtin("gpt-6.2-sol").unwrap();
    let writes = |twelve_hours: u64, total: u64| Usage {
        cache_write: total,
        cache_write_12h: twelve_hours,
        ..Usage::default()
    };
    // 100K tokens written, under the 272K line: $0.25 for 30 minutes, $0.50 for 12 hours.
    assert!((sol.cost_usd(&writes(0, 100_000)) - 0.25).abs() < 1e-9);
    assert!((sol.cost_usd(&writes(100_000, 100_000)) - 0.5).abs() < 1e-9);
    assert!((sol.cost_usd(&writes(60_000, 100_000)) - (0.3 + 0.1)).abs() < 1e-9);
    // 100K written for 12 hours in a 300K prompt: every input price doubled.
    let long = Usage {
        uncached: 200_000,
        ..writes(100_000, 100_000)
    };
    assert!((sol.cost_usd(&long) - 2.0 * (0.4 + 0.5)).abs() < 1e-9);
    let astra = builtin("gpt-6.2-astra").unwrap();
    let twelve = astra.cost_usd(&writes(100_000, 100_000));
    assert!((twelve - astra.cost_usd(&writes(0, 100_000))).abs() < 1e-12);
}

/// The models pi 1.6.0 (its bundled `anthropic`, `openai` and `openai-codex` catalogs) and
/// Codex 0.171 offer on the two providers' own APIs are known, so a session on any of them
/// is priced. Left out, and so unknown: the models that do not cache (the `-pro` models,
/// gpt-4, gpt-4-turbo, gpt-4o-2024-05-13, "gpt-4o (excludes gpt-4o-2024-05-13)" in
/// OpenAI's prompt-caching guide as Portkey's docs copy it), the aliases that name whichever
/// model is current (`chat-latest`, `gpt-5-chat-latest`, `gpt-daybreak-*-latest`) and the
/// models of restricted access (`gpt-5.6-cyber`, `gpt-6-cyber`, `gpt-5.3-codex-spark`).
#[test]
fn the_models_the_agents_offer_are_known() {
    for id in [
        "claude-fable-5",
        "claude-fable-5-1",
        "claude-fable-5-2",
        "claude-mythos-5",
        "claude-mythos-5-1",
        "claude-mythos-5-2",
        "claude-haiku-4-5-20251001",
        "claude-haiku-5-5",
        "claude-opus-4-5-20251101",
        "claude-opus-4-6",
        "claude-opus-4-7",
        "claude-opus-4-8",
        "claude-opus-5",
        "claude-opus-5-5",
        "claude-sonnet-4-5-20250929",
        "claude-sonnet-4-6",
        "claude-sonnet-5",
        "claude-sonnet-5-5",
        "gpt-4.1",
        "gpt-4o-2024-08-06",
        "gpt-4o-2024-11-20",
        "gpt-4o-mini",
        "gpt-5",
        "gpt-5-mini",
        "gpt-5-nano",
        "gpt-5.1",
        "gpt-5.2",
        "gpt-5.3-codex",
        "gpt-5.4",
        "gpt-5.4-mini",
        "gpt-5.4-nano",
        "gpt-5.5",
        "gpt-5.6-luna",
        "gpt-5.6-sol",
        "gpt-5.6-terra",
        "gpt-6-astra",
        "gpt-6-luna",
        "gpt-6-sol",
        "gpt-6.1-sol",
        "gpt-6.1-terra",
        "gpt-6.2-astra",
        "gpt-6.2-sol",
        "o1",
        "o3",
        "o3-mini",
        "o4-mini",
    ] {
        assert!(builtin(id).is_some(), "{id} unknown");
    }
    for id in ["gpt-4o-2024-05-13", "o3-pro", "gpt-5.5-pro", "gpt-4-turbo"] {
        assert!(builtin(id).is_none(), "{id} priced as a model that caches");
    }
}

/// GPT-6.1 Terra (released 2026-10-26, offered by Codex 0.171): $1 input, $0.05 cached input,
/// $1.25 cache writes for 30 minutes and $2.50 for 12 hours, $5 output; over 272K input
/// tokens "the entire request's input and cache are billed at 2x, output at 1.5x"
/// (developers.openai.com/api/docs/models/gpt-6.1-terra, its zh-Hans copy; LiteLLM's day-0
/// post gives $2 / $0.10 / $7.50 above the line; pi 1.6.0's catalog the same rates).
#[test]
fn gpt_6_1_terra_is_priced_from_its_model_page() {
    let terra = builtin("gpt-6.1-terra").expect("known");
    assert_eq!(
        (
            terra.input,
            terra.cache_read,
            terra.cache_write_5m,
            terra.output
        ),
        (1.0, 0.05, 1.25, 5.0)
    );
    assert_eq!(terra.context_window, 1_050_000);
    assert_eq!(terra.explicit_breakpoints(), Some(4));
    let twelve = Usage {
        cache_write: 100_000,
        cache_write_12h: 100_000,
        ..Usage::default()
    };
    assert!((terra.cost_usd(&twelve) - 0.25).abs() < 1e-9);
    let long = Usage {
        uncached: 272_001,
        output: 10_000,
        ..Usage::default()
    };
    assert!((terra.cost_usd(&long) - (272_001.0 * 2.0 + 10_000.0 * 7.5) / 1e6).abs() < 1e-9);
}

/// The o-series, which caches as GPT-4o does, automatically from 1,024 tokens: o3 $2 / $0.50 /
/// $8 (calcis.dev, "Verified 2026-04-06"), o4-mini $1.10 / $0.275 / $4.40, o3-mini $1.10 /
/// $0.55 / $4.40 (llmcalc.app, "official pricing"), o1 $15 / $7.50 / $60; 200,000 context
/// (the same pages and pi 1.6.0's catalog, which gives all four). No write fee, no explicit
/// breakpoints.
#[test]
fn the_o_series_is_priced_with_its_cached_input() {
    for (id, input, cached, output) in [
        ("o3", 2.0, 0.5, 8.0),
        ("o3-2025-04-16", 2.0, 0.5, 8.0),
        ("o4-mini", 1.1, 0.275, 4.4),
        ("o3-mini", 1.1, 0.55, 4.4),
        ("o1", 15.0, 7.5, 60.0),
    ] {
        let m = builtin(id).unwrap_or_else(|| panic!("{id} unknown"));
        assert_eq!(m.provider, "openai");
        assert_eq!(
            (m.input, m.cache_read, m.output),
            (input, cached, output),
            "{id}"
        );
        assert_eq!((m.cache_write_5m, m.cache_write_1h), (input, input), "{id}");
        assert_eq!(m.explicit_breakpoints(), None, "{id}");
        assert_eq!((m.min_cacheable_tokens, m.context_window), (1024, 200_000));
    }
    for id in ["o3-pro", "o1-pro", "o1-mini", "o3-deep-research"] {
        assert!(builtin(id).is_none(), "{id} matched a row");
    }
}

/// Fast mode "is priced at a multiplier on standard rates across the full context window"
/// (platform.claude.com, Fast mode), and "prompt-caching costs continue to apply on top of
/// the fast-mode base rates": every price times the row's factor. Opus 5.5 $8 / $40 (2x,
/// kurofune/claudit pricing notes; TheKrush/PromptFuel v1.0.21), Opus 5 2x (openrouter.ai
/// claude-opus-5-fast, $10 / $50), Opus 4.8 $10 / $50, Opus 4.7 and 4.6 $30 / $150
/// (code.claude.com, Fast mode). A model without a fast price is priced at its standard one.
#[test]
fn fast_answers_are_priced_at_the_fast_multiplier() {
    let usage = |fast: bool| Usage {
        cache_read: 50_000,
        cache_write: 10_000,
        cache_write_5m: 10_000,
        uncached: 2_000,
        output: 3_000,
        fast,
        ..Usage::default()
    };
    for (model, factor) in [
        ("claude-opus-5-5", 2.0),
        ("claude-opus-5", 2.0),
        ("claude-opus-4-8", 2.0),
        ("claude-opus-4-7", 6.0),
        ("claude-opus-4-6[1m]", 6.0),
    ] {
        let m = builtin(model).unwrap();
        let (standard, fast) = (m.cost_usd(&usage(false)), m.cost_usd(&usage(true)));
        assert!(standard > 0.0);
        assert!((fast - factor * standard).abs() < 1e-12, "{model}");
        // Savings are against the same speed sent uncached.
        assert!(
            m.savings_usd(&usage(true)) > m.savings_usd(&usage(false)),
            "{model}"
        );
    }
    let opus55 = builtin("claude-opus-5-5").unwrap();
    let million_out = Usage {
        output: 1_000_000,
        fast: true,
        ..Usage::default()
    };
    assert!((opus55.cost_usd(&million_out) - 40.0).abs() < 1e-9);
    let sonnet = builtin("claude-sonnet-5-5").unwrap();
    assert_eq!(
        sonnet.cost_usd(&usage(true)),
        sonnet.cost_usd(&usage(false))
    );
}

/// OpenAI's flex processing is billed at half of every rate, the model's own or its
/// long-context ones: "Tokens are priced at Batch API rates" (developers.openai.com, Flex
/// processing), and the Batch API's are 50% of the standard ones; at launch o4-mini was
/// $0.55 / $2.20 on flex against $1.10 / $4.40. The answer saying `flex` is what counts, so
/// every row is priced so, fast factor or not.
#[test]
fn openai_flex_is_priced_at_half() {
    let usage = |flex: bool, uncached: u64| Usage {
        cache_read: 50_000,
        cache_write: 10_000,
        uncached,
        output: 3_000,
        flex,
        ..Usage::default()
    };
    for model in [
        "o3",
        "o4-mini",
        "gpt-5",
        "gpt-5.5",
        "gpt-6.2-sol",
        "gpt-4.1",
    ] {
        let m = builtin(model).unwrap();
        for uncached in [2_000, 400_000] {
            let (standard, flex) = (
                m.cost_usd(&usage(false, uncached)),
                m.cost_usd(&usage(true, uncached)),
            );
            assert!(standard > 0.0);
            assert!((flex - 0.5 * standard).abs() < 1e-12, "{model} {uncached}");
            let saved = m.savings_usd(&usage(true, uncached));
            assert!((saved - 0.5 * m.savings_usd(&usage(false, uncached))).abs() < 1e-12);
        }
    }
    let o4 = builtin("o4-mini").unwrap();
    let million = Usage {
        uncached: 1_000_000,
        output: 1_000_000,
        flex: true,
        ..Usage::default()
    };
    assert!((o4.cost_usd(&million) - (0.55 + 2.2)).abs() < 1e-9);
}

/// Anthropic's US-only inference (`usage.inference_geo: "us"`) is billed at 1.1x every
/// price ("US: Inference stays within US data centers. A 1.1x pricing multiplier applies.
/// Global: ... Standard pricing applies", Claude Platform on AWS, Data residency), on top
/// of fast mode's factor and the long-context ones.
#[test]
fn us_only_inference_is_priced_at_its_multiplier() {
    let usage = |us_only: bool, fast: bool| Usage {
        cache_read: 50_000,
        cache_write: 10_000,
        cache_write_5m: 10_000,
        uncached: 2_000,
        output: 3_000,
        us_only,
        fast,
        ..Usage::default()
    };
    for model in ["claude-opus-5-5", "claude-sonnet-5-5", "claude-opus-4-6"] {
        let m = builtin(model).unwrap();
        let standard = m.cost_usd(&usage(false, false));
        assert!(standard > 0.0);
        let us = m.cost_usd(&usage(true, false));
        assert!((us - 1.1 * standard).abs() < 1e-12, "{model}");
        let fast = m.cost_usd(&usage(false, true));
        assert!(
            (m.cost_usd(&usage(true, true)) - 1.1 * fast).abs() < 1e-12,
            "{model}"
        );
    }
    let opus = builtin("claude-opus-5-5").unwrap();
    let million = Usage {
        uncached: 1_000_000,
        output: 1_000_000,
        us_only: true,
        ..Usage::default()
    };
    let plain = Usage {
        us_only: false,
        ..million
    };
    assert!((opus.cost_usd(&million) - 1.1 * opus.cost_usd(&plain)).abs() < 1e-9);
}

/// OpenAI fast mode (`service_tier: "fast"` or `"priority"`) is billed at a multiplier on
/// every rate: openai.com/API-fast-mode lists GPT-5.6 Sol at $8 / $0.80 / $40 (2x its $4 /
/// $0.40 / $20), GPT-5.5 at $12.50 / $1.25 / $75 (2.5x) and GPT-5.4 mini at $1.50 / $0.15 / $9
/// (2x), GPT-4.1 at $3.50 / $0.875 / $14 (1.75x), GPT-5 mini at $0.45 / $0.045 / $3.60
/// (1.8x); the GPT-6 Sol, GPT-6 Luna, GPT-6.1 Terra and GPT-6.2 Sol pages say fast mode
/// costs 2x. Above 272K input tokens both factors apply (AILSA SubSwitch's GPT-6.1 Sol
/// table: fast over 272K $8 / $0.40 / $30). A model with no published fast price (GPT-6.2
/// Astra) is priced at its standard rates.
#[test]
fn openai_fast_mode_is_priced_at_its_multiplier() {
    let usage = |fast: bool| Usage {
        cache_read: 50_000,
        cache_write: 10_000,
        uncached: 2_000,
        output: 3_000,
        fast,
        ..Usage::default()
    };
    for (model, factor) in [
        ("gpt-5.6-sol", 2.0),
        ("gpt-5.6-terra", 2.0),
        ("gpt-5.6-luna", 2.0),
        ("gpt-5.5", 2.5),
        ("gpt-5.4-mini", 2.0),
        ("gpt-6-astra", 2.0),
        ("gpt-6.1-sol", 2.0),
        ("gpt-6.1-terra", 2.0),
        ("gpt-6.2-sol", 2.0),
        // Codex 0.171's catalog names fast mode the default tier of these two.
        ("gpt-6-sol", 2.0),
        ("gpt-6-luna", 2.0),
        ("gpt-5.4", 2.0),
        ("gpt-5.2", 2.0),
        ("gpt-5.1-codex", 2.0),
        ("gpt-5", 2.0),
        ("gpt-5-mini", 1.8),
        ("gpt-4.1", 1.75),
        ("gpt-4.1-mini", 1.75),
        ("gpt-4.1-nano", 2.0),
    ] {
        let m = builtin(model).unwrap();
        let (standard, fast) = (m.cost_usd(&usage(false)), m.cost_usd(&usage(true)));
        assert!(standard > 0.0);
        assert!((fast - factor * standard).abs() < 1e-12, "{model}");
    }
    // The page's own figures: GPT-4.1 $3.50 / $0.875 / $14, GPT-5 mini $0.45 / $3.60.
    let gpt41 = builtin("gpt-4.1").unwrap();
    let fast = |input: u64, read: u64, output: u64| Usage {
        uncached: input,
        cache_read: read,
        output,
        fast: true,
        ..Usage::default()
    };
    assert!(
        (gpt41.cost_usd(&fast(1_000_000, 1_000_000, 1_000_000)) - (3.5 + 0.875 + 14.0)).abs()
            < 1e-9
    );
    let mini = builtin("gpt-5-mini").unwrap();
    assert!((mini.cost_usd(&fast(1_000_000, 0, 1_000_000)) - (0.45 + 3.6)).abs() < 1e-9);
    let sol = builtin("gpt-5.6-sol").unwrap();
    let million_out = Usage {
        output: 1_000_000,
        fast: true,
        ..Usage::default()
    };
    assert!((sol.cost_usd(&million_out) - 40.0).abs() < 1e-9);
    let long = Usage {
        uncached: 200_000,
        cache_read: 100_000,
        output: 1_000_000,
        fast: true,
        ..Usage::default()
    };
    let sol61 = builtin("gpt-6.1-sol").unwrap();
    let expected = (200_000.0 * 8.0 + 100_000.0 * 0.4 + 1_000_000.0 * 30.0) / 1e6;
    assert!((sol61.cost_usd(&long) - expected).abs() < 1e-9);
    let astra = builtin("gpt-6.2-astra").unwrap();
    assert_eq!(astra.cost_usd(&usage(true)), astra.cost_usd(&usage(false)));
}

/// Gemini's explicit caches bill storage per token-hour beside the reads
/// (ai.google.dev/gemini-api/docs/pricing: Gemini 2.5 Flash $1.00, 2.5 Pro $4.50 per
/// million tokens per hour), at no long-context factor; a row without a storage price
/// bills none.
#[test]
fn explicit_cache_storage_is_priced_per_token_hour() {
    let hour_of_a_million = Usage {
        cache_storage_token_secs: 1_000_000 * 3600,
        ..Usage::default()
    };
    for (model, per_hour) in [("gemini-2.5-flash", 1.0), ("gemini-2.5-pro", 4.5)] {
        let m = builtin(model).unwrap();
        assert!(
            (m.cost_usd(&hour_of_a_million) - per_hour).abs() < 1e-9,
            "{model}"
        );
        assert!(m.savings_usd(&hour_of_a_million) < 0.0, "storage is a cost");
    }
    let long = Usage {
        uncached: 300_000,
        ..hour_of_a_million
    };
    let pro = builtin("gemini-2.5-pro").unwrap();
    let without = Usage {
        cache_storage_token_secs: 0,
        ..long
    };
    assert!((pro.cost_usd(&long) - pro.cost_usd(&without) - 4.5).abs() < 1e-9);
    let claude = builtin("claude-opus-5-5").unwrap();
    assert_eq!(claude.cost_usd(&hour_of_a_million), 0.0);
}
