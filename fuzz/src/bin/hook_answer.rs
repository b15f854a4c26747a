//! Hook answers: any body is an outcome or an error, never a panic.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let _ = cachet::hooks::parse_context_answer(data);
        let _ = cachet::hooks::parse_payload_answer(data);
    });
}
