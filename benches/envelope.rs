//! Envelope benchmarks (filled in with the envelope engine).
fn main() {}
