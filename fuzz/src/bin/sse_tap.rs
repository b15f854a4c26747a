//! The usage tap over arbitrary response bytes, cut into chunks where the input says:
//! never panics, and the usage it reads does not depend on where the chunks were cut.

use cachet::tap::{Outcome, Tap};

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let Some((endpoint, rest)) = cachet_fuzz::endpoint_and_rest(data) else {
            return;
        };
        let Some((&cut, body)) = rest.split_first() else {
            return;
        };
        for sse in [true, false] {
            let mut whole = Tap::new(endpoint, sse, true);
            whole.feed(body);
            let whole = whole.finish(Outcome::Complete);
            let mut chunked = Tap::new(endpoint, sse, true);
            for chunk in body.chunks(usize::from(cut).max(1)) {
                chunked.feed(chunk);
            }
            let chunked = chunked.finish(Outcome::Complete);
            assert_eq!(whole.usage, chunked.usage, "usage depends on chunking");
        }
    });
}
