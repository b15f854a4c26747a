//! Patch operations from arbitrary JSON on real client requests: parse or refuse, apply or
//! refuse, and a request that went in valid comes out valid JSON.

use bytes::Bytes;
use cachet::envelope::CompileOptions;
use cachet::route::Endpoint;

const REQUESTS: [(Endpoint, &str); 3] = [
    (
        Endpoint::Messages,
        include_str!("../../../tests/data/clients/pi_anthropic_tool_loop.json"),
    ),
    (
        Endpoint::Chat,
        include_str!("../../../tests/data/clients/pi_chat_tool_loop.json"),
    ),
    (
        Endpoint::Responses,
        include_str!("../../../tests/data/clients/pi_responses_tool_loop.json"),
    ),
];

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let Some((&which, rest)) = data.split_first() else {
            return;
        };
        let Ok(patch) = serde_json::from_slice::<serde_json::Value>(rest) else {
            return;
        };
        let Ok(ops) = cachet::patch::parse_ops(&patch, "fuzz") else {
            return;
        };
        let (endpoint, body) = REQUESTS[usize::from(which) % REQUESTS.len()];
        let mut env = cachet::providers::parse_envelope(endpoint, Bytes::from_static(body.as_bytes()))
            .expect("fixture parses");
        let before = env.compile(&CompileOptions::default());
        match env.apply(&ops, "fuzz") {
            Ok(_) => {
                let out = env.compile(&CompileOptions::default());
                if let Err(e) = serde_json::from_slice::<serde_json::Value>(&out) {
                    panic!("a patch made the request invalid JSON: {e}");
                }
            }
            // A refused patch changes nothing.
            Err(_) => assert_eq!(env.compile(&CompileOptions::default()), before),
        }
    });
}
