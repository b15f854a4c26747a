//! Envelope parse → compile with nothing changed gives back the bytes that came in, for
//! every API.

use bytes::Bytes;
use cachet::envelope::CompileOptions;

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let Some((endpoint, rest)) = cachet_fuzz::endpoint_and_rest(data) else {
            return;
        };
        let body = Bytes::copy_from_slice(rest);
        if let Ok(env) = cachet::providers::parse_envelope(endpoint, body.clone()) {
            let _ = env.history_len();
            assert_eq!(
                env.compile(&CompileOptions::default()),
                body,
                "identity broken"
            );
        }
    });
}
