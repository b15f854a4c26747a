//! Which provider API a request speaks, as named everywhere (policies, metric labels, the
//! session log): the provider family, the endpoint, and the two together as a route. The
//! rules of each API live in `providers/`; this is only their names, below every layer
//! that needs to say which API it is looking at.

/// A section of the prompt, in the providers' cache-key vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Section {
    Tools,
    System,
    Messages,
}

impl Section {
    pub fn label(self) -> &'static str {
        match self {
            Section::Tools => "tools",
            Section::System => "system",
            Section::Messages => "messages",
        }
    }
}

/// The provider family: decides the upstream and the error format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    Anthropic,
    OpenAi,
    /// Google's Gemini API (`/v1beta/models/{model}:generateContent`).
    Gemini,
    /// Amazon Bedrock Runtime: Claude by `InvokeModel` (Anthropic bodies) and `Converse`.
    Bedrock,
    /// Google Vertex AI's Anthropic publisher models (`:rawPredict`, `:streamRawPredict`).
    Vertex,
}

impl Provider {
    /// Every provider family.
    pub const ALL: [Provider; 5] = [
        Provider::Anthropic,
        Provider::OpenAi,
        Provider::Gemini,
        Provider::Bedrock,
        Provider::Vertex,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
            Provider::Gemini => "gemini",
            Provider::Bedrock => "bedrock",
            Provider::Vertex => "vertex",
        }
    }
}

/// The API endpoint, as named in policies and metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// Anthropic `POST /v1/messages`.
    Messages,
    /// Anthropic `POST /v1/messages/count_tokens`.
    CountTokens,
    /// OpenAI `POST /v1/chat/completions`.
    Chat,
    /// OpenAI `POST /v1/responses`.
    Responses,
    /// OpenAI `POST /v1/responses/compact`: the model compacts a conversation. Billed like a
    /// generation (its answer carries a response's `usage`), so it is counted like one;
    /// never reshaped, and kept out of the session log (its answer is not a turn).
    Compact,
    /// Bedrock Runtime `POST /model/{modelId}/invoke` and `/invoke-with-response-stream`:
    /// an Anthropic Messages body, the model in the path.
    Invoke,
    /// Bedrock Runtime `POST /model/{modelId}/converse` and `/converse-stream`.
    Converse,
    /// Vertex AI `POST /v1/projects/{p}/locations/{l}/publishers/anthropic/models/{m}:rawPredict`
    /// and `:streamRawPredict`: an Anthropic Messages body, the model in the path.
    RawPredict,
    /// `GET /v1/models` (either family).
    Models,
    /// Gemini `POST /v1beta/models/{model}:generateContent` and
    /// `:streamGenerateContent` (the model is in the path; the path says whether the
    /// answer streams).
    GenerateContent,
    /// Gemini `POST /v1beta/models/{model}:countTokens`.
    GeminiCountTokens,
    /// Gemini `/v1beta/cachedContents` (explicit caches: create, list, get, update, delete).
    CachedContents,
    /// Any other `/v1/...` path: forwarded untouched.
    Other,
}

impl Endpoint {
    pub fn label(self) -> &'static str {
        match self {
            Endpoint::Messages => "messages",
            Endpoint::CountTokens => "count_tokens",
            Endpoint::Chat => "chat",
            Endpoint::Responses => "responses",
            Endpoint::Compact => "responses_compact",
            Endpoint::Invoke => "invoke",
            Endpoint::Converse => "converse",
            Endpoint::RawPredict => "raw_predict",
            Endpoint::Models => "models",
            Endpoint::GenerateContent => "generate_content",
            Endpoint::GeminiCountTokens => "gemini_count_tokens",
            Endpoint::CachedContents => "cached_contents",
            Endpoint::Other => "other",
        }
    }

    /// Endpoints whose body is a model request cachet parses and taps.
    pub fn is_generation(self) -> bool {
        matches!(
            self,
            Endpoint::Messages
                | Endpoint::Chat
                | Endpoint::Responses
                | Endpoint::Invoke
                | Endpoint::RawPredict
                | Endpoint::GenerateContent
        )
    }

    /// Endpoints whose answer is a bill: its `usage` is read and counted.
    pub fn is_billed(self) -> bool {
        self.is_generation() || matches!(self, Endpoint::Compact | Endpoint::Converse)
    }

    /// Whether an answer with this status is a bill, whose usage the figures need: one
    /// without it counts in `cachet_usage_missing_total`.
    pub fn bills(self, status: u16) -> bool {
        self.is_billed() && (200..300).contains(&status)
    }

    /// The endpoint whose rules read this one's request and usage: a compaction's are a
    /// response's (the same prompt fields, the same `usage` object); Bedrock's `InvokeModel`
    /// and Vertex's `rawPredict` carry Anthropic Messages bodies and answers.
    pub fn read_as(self) -> Endpoint {
        match self {
            Endpoint::Compact => Endpoint::Responses,
            Endpoint::Invoke | Endpoint::RawPredict => Endpoint::Messages,
            other => other,
        }
    }
}

impl Endpoint {
    /// Every endpoint.
    pub const ALL: [Endpoint; 13] = [
        Endpoint::Messages,
        Endpoint::CountTokens,
        Endpoint::Chat,
        Endpoint::Responses,
        Endpoint::Compact,
        Endpoint::Invoke,
        Endpoint::Converse,
        Endpoint::RawPredict,
        Endpoint::Models,
        Endpoint::GenerateContent,
        Endpoint::GeminiCountTokens,
        Endpoint::CachedContents,
        Endpoint::Other,
    ];

    /// The endpoint a label names ([`Endpoint::label`] read back; an unknown label is
    /// [`Endpoint::Other`]).
    pub fn from_label(label: &str) -> Endpoint {
        Endpoint::ALL
            .into_iter()
            .find(|e| e.label() == label)
            .unwrap_or(Endpoint::Other)
    }
}

/// A classified request target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub provider: Provider,
    pub endpoint: Endpoint,
}
