//! The command line: `cachet serve | emulate | demo | check | replay`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "cachet",
    version,
    about = "A prompt-cache-aware proxy for LLM provider APIs"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the proxy (and the admin listener).
    Serve(ServeArgs),
    /// Run the provider emulator.
    Emulate(EmulateArgs),
    /// Run the proxy on the embedded emulator and drive a scripted agent session through it.
    Demo(DemoArgs),
    /// Validate the configuration and policies.
    Check(CheckArgs),
    /// Replay recorded sessions through policy sets against the emulator's cache model.
    Replay(ReplayArgs),
    /// What each candidate policy would have saved on recorded sessions, and where it
    /// would have cost more.
    Advise(AdviseArgs),
}

/// Options shared by `serve` and `check`: where configuration and policies come from.
#[derive(Debug, Clone, Args, Default)]
pub struct PolicyArgs {
    /// Configuration file (default: ./cachet.toml if present).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Activate one policy file (repeatable).
    #[arg(long = "policy", value_name = "FILE")]
    pub policy: Vec<PathBuf>,
    /// Activate every policy file in DIR.
    #[arg(long = "policies", value_name = "DIR")]
    pub policies: Option<PathBuf>,
}

/// `--models PATH`: model rows tried before the shipped `data/models.toml`.
#[derive(Debug, Clone, Args, Default)]
pub struct ModelsArg {
    /// A model table (same format as data/models.toml) whose rows are tried first:
    /// prices, cache minimums and context windows of models cachet does not ship.
    #[arg(long = "models", value_name = "PATH")]
    pub models: Option<PathBuf>,
}

#[derive(Debug, Clone, Args, Default)]
pub struct ServeArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub models: ModelsArg,
    /// Proxy listener address [default: 127.0.0.1:8787].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Admin listener address (metrics, health, sessions) [default: 127.0.0.1:9787].
    #[arg(long)]
    pub admin_listen: Option<SocketAddr>,
    /// Anthropic upstream base URL [default: https://api.anthropic.com].
    #[arg(long, value_name = "URL")]
    pub anthropic_upstream: Option<String>,
    /// OpenAI upstream base URL [default: https://api.openai.com].
    #[arg(long, value_name = "URL")]
    pub openai_upstream: Option<String>,
    /// Upstream for OpenAI requests signed in with ChatGPT (Codex's `chatgpt-account-id`)
    /// [default: https://chatgpt.com/backend-api/codex].
    #[arg(long, value_name = "URL")]
    pub chatgpt_upstream: Option<String>,
    /// Gemini API upstream base URL [default: https://generativelanguage.googleapis.com].
    #[arg(long, value_name = "URL")]
    pub gemini_upstream: Option<String>,
    /// Amazon Bedrock Runtime upstream base URL [default: the regional endpoint,
    /// https://bedrock-runtime.{region}.amazonaws.com].
    #[arg(long, value_name = "URL")]
    pub bedrock_upstream: Option<String>,
    /// Vertex AI upstream base URL [default: the endpoint of each request's location,
    /// https://{location}-aiplatform.googleapis.com].
    #[arg(long, value_name = "URL")]
    pub vertex_upstream: Option<String>,
    /// Session store: a folder for the embedded store, or redis://host:port/db.
    #[arg(long)]
    pub store: Option<String>,
    /// Record every request as JSONL traces into DIR.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// Fail a request whose patch is refused (500) instead of sending it unpatched.
    #[arg(long)]
    pub strict: bool,
}

#[derive(Debug, Clone, Args)]
pub struct EmulateArgs {
    /// Listener address.
    #[arg(long, default_value = "127.0.0.1:8790")]
    pub listen: SocketAddr,
    /// Reply text for every request (default: a short deterministic sentence).
    #[arg(long)]
    pub reply: Option<String>,
    #[command(flatten)]
    pub models: ModelsArg,
    /// Answer requests that offer tools with a tool call: `never`, `first` (the first
    /// offered tool on the allow-list of read, list, search and shell tools) or a tool name.
    #[arg(
        long,
        env = "CACHET_EMULATE_TOOL_CALLS",
        value_name = "never|first|NAME"
    )]
    pub tool_calls: Option<String>,
    /// Tool calls in a row after each user prompt before the reply is text.
    #[arg(long, env = "CACHET_EMULATE_TOOL_STEPS", default_value_t = crate::emulator::reply::DEFAULT_TOOL_STEPS)]
    pub tool_steps: u32,
    /// Accept only requests presenting this key or token where the provider reads it
    /// (Anthropic `x-api-key` or `authorization: Bearer`, OpenAI `authorization: Bearer`);
    /// others get the provider's 401 (repeatable; comma-separated in the variable). Without
    /// it, any credential is accepted.
    #[arg(
        long = "api-key",
        env = "CACHET_EMULATE_API_KEYS",
        value_name = "KEY",
        value_delimiter = ','
    )]
    pub api_keys: Vec<String>,
    /// Accept Bedrock requests signed (SigV4) with these test credentials only,
    /// `ACCESS_KEY_ID:SECRET` (repeatable); others get Bedrock's 403. Without it, any
    /// signature is accepted.
    #[arg(
        long = "aws-credentials",
        env = "CACHET_EMULATE_AWS_CREDENTIALS",
        value_name = "ID:SECRET",
        value_delimiter = ','
    )]
    pub aws_credentials: Vec<String>,
}

impl From<EmulateArgs> for crate::emulator::EmulateConfig {
    fn from(args: EmulateArgs) -> Self {
        crate::emulator::EmulateConfig {
            listen: args.listen,
            reply: args.reply,
            models: args.models.models,
            tool_calls: args.tool_calls,
            tool_steps: args.tool_steps,
            api_keys: args.api_keys,
            aws_credentials: args.aws_credentials,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Run the scripted session, print the table and exit instead of staying up.
    #[arg(long)]
    pub once: bool,
    /// Proxy listener address for the demo [default: a free port on 127.0.0.1].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    #[command(flatten)]
    pub models: ModelsArg,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
}

#[derive(Debug, Clone, Args)]
pub struct AdviseArgs {
    /// Trace files (JSONL) or folders recorded with `cachet serve --record`.
    #[arg(required_unless_present = "store", conflicts_with = "store")]
    pub traces: Vec<PathBuf>,
    /// Instead of traces, a session store's folder (the embedded store): the figures
    /// `cachet serve`'s live what-if (`sessions.whatif = true`) kept there.
    #[arg(long, conflicts_with_all = ["candidates", "model"])]
    pub store: Option<String>,
    /// A candidate: NAME=POLICY_FILE[,POLICY_FILE...] (repeatable; default: the shipped
    /// policies that only change caching, each on the sessions of the APIs it matches).
    #[arg(long = "candidate", value_name = "NAME=POLICY_FILE[,...]")]
    pub candidates: Vec<String>,
    /// Replay as if every request had used this model.
    #[arg(long)]
    pub model: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub models: ModelsArg,
}

#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// Trace files (JSONL) recorded with `cachet serve --record`.
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// An arm: NAME=POLICY_FILE[,POLICY_FILE...]; NAME alone means "as recorded" (repeatable).
    #[arg(long = "arm", value_name = "NAME=POLICY_FILE[,...]")]
    pub arms: Vec<String>,
    /// Replay as if every request had used this model.
    #[arg(long)]
    pub model: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Draw cumulative cost and hit ratio per arm into an SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub chart: Option<PathBuf>,
    /// Also report the ideal cache-read share of the traces and each arm's share of it.
    #[arg(long)]
    pub ideal: bool,
    #[command(flatten)]
    pub models: ModelsArg,
}
