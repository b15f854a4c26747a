//! The command-line glue: each subcommand reads its configuration, sets up logging and
//! signals, and starts the parts it runs.

pub mod check;
pub mod demo;
pub mod serve;
