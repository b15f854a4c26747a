//! JSON read on the bytes, without building a document: the body check (is a body JSON of
//! its API's shape, with what it gathered on the way) and the scanner every other reader
//! of spans uses (top-level entries, array elements, one field, a string decoded).

pub mod check;
pub mod lex;
pub mod scan;

pub use scan::Span;
