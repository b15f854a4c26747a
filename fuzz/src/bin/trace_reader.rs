//! The trace reader: any text is records or an error naming the line, never a panic; a
//! record read back from its own line is the same record.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        if let Ok(records) = cachet::trace::record::parse_jsonl(text, "fuzz") {
            for record in records {
                let line = record.to_line();
                let again = cachet::trace::record::parse_jsonl(&line, "again")
                    .expect("a written record reads back");
                assert_eq!(again.len(), 1);
                assert_eq!(again[0].to_line(), line, "record changed on a round trip");
            }
        }
    });
}
