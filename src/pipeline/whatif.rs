//! What the live what-if (`sessions.whatif`) is handed: once an answer has ended and the
//! after-response queue knows its session, the request as the client sent it, with what
//! the answer said. Nothing of it runs before the request is forwarded, and nothing of it
//! changes a byte: the body is shared, not copied, and its trace record is made on the
//! what-if's own thread.

use super::exchange::{Answer, Exchange};
use super::Pipeline;
use crate::session::whatif::Answered;

impl Pipeline {
    /// Hand an answered request of `session` to the what-if, when it follows sessions.
    pub(super) fn feed_whatif(&self, ex: &Exchange, answer: &Answer, session: &str) {
        let Some(feed) = &self.whatif else { return };
        if !ex.route.endpoint.is_generation() {
            return;
        }
        let keeps_output = self.keeps_output(ex) && (200..300).contains(&answer.status);
        feed.feed(Answered {
            time_ms: ex.sent_ms.unwrap_or_else(|| self.clock.now_ms()),
            session: session.to_owned(),
            route: ex.route,
            path: ex.parts.uri.path().to_owned(),
            headers: ex.parts.headers.clone(),
            body: (ex.body.len() <= feed.max_request_bytes).then(|| ex.body.clone()),
            status: answer.status,
            usage: answer.tap.usage,
            response_id: answer.tap.response_id.clone(),
            output: answer.assistant.clone().filter(|_| keeps_output),
        });
    }

    /// Whether the answer's output is kept for a trace record (the recorder's or the
    /// what-if's): a Responses answer a later request may continue from what the provider
    /// holds.
    pub(super) fn keeps_output(&self, ex: &Exchange) -> bool {
        match &ex.trace {
            Some(record) => record.may_be_continued(),
            None => {
                self.whatif.is_some()
                    && crate::trace::record::may_be_continued(ex.route.endpoint, &ex.body)
            }
        }
    }
}
