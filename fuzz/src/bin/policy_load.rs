//! Policy files: any text is loaded or refused with errors, never a panic.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = cachet::policy::parse_policy(std::path::Path::new("fuzz.toml"), text);
        }
    });
}
