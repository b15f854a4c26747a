//! One injection for one request: the glue the request pipeline calls.

use super::{choose_arm, ops_for, Fetched, Mode, Placement, Source, TurnCache, TurnKey};

/// The mode of an `[[inject]]` table: fixed, or an A/B split decided by the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModeChoice {
    One(Mode),
    Ab(Vec<(Mode, u32)>),
}

impl ModeChoice {
    pub fn for_session(&self, session: &str) -> Option<Mode> {
        match self {
            ModeChoice::One(m) => Some(*m),
            ModeChoice::Ab(arms) => choose_arm(session, arms),
        }
    }
}

/// One `[[inject]]` table, ready to run.
pub struct Injection {
    /// Names the table for the per-turn cache and errors (e.g. `policy#0`).
    pub id: String,
    pub source: Source,
    pub choice: ModeChoice,
    /// System part name for `system-prompt`.
    pub part: String,
}

/// What one injection does to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnInjection {
    /// The arm, for the metric `variant` label (`None` → `none`).
    pub mode: Option<Mode>,
    pub placement: Placement,
    /// The source failed on this turn's first call (count it once; the turn goes without).
    pub new_error: Option<String>,
    /// This call fetched the content (the first call of the turn): a pinned placement is
    /// persisted now, once.
    pub first_call_of_turn: bool,
}

/// Place the injection's content for the latest user prompt of `session`. Content is
/// fetched on the turn's first call and reused from `cache` by the others.
pub async fn inject_for_turn(
    injection: &Injection,
    session: &str,
    prompt: &str,
    cache: &TurnCache,
    client: &reqwest::Client,
) -> TurnInjection {
    let Injection {
        id,
        source,
        choice,
        part,
    } = injection;
    let mode = choice.for_session(session);
    let Some(m) = mode else {
        return TurnInjection {
            mode,
            placement: ops_for(Mode::Tail, part, ""),
            new_error: None,
            first_call_of_turn: false,
        };
    };
    let key = TurnKey::new(session, id, prompt);
    let (fetched, fresh) = cache
        .get_or_fetch(key, async {
            match source.fetch(prompt, session, client).await {
                Ok(text) => Fetched { text, error: None },
                Err(e) => Fetched {
                    text: String::new(),
                    error: Some(e.to_string()),
                },
            }
        })
        .await;
    TurnInjection {
        mode,
        placement: ops_for(m, part, &fetched.text),
        new_error: if fresh { fetched.error.clone() } else { None },
        first_call_of_turn: fresh,
    }
}
