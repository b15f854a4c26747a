//! All integration tests, linked into one binary: each test file would otherwise link the
//! whole crate again, and the build would take many gigabytes of disk and minutes of link time.

mod session_support;
mod support;

mod demo;
mod emulator_cli;
mod emulator_http;
mod emulator_sdk;
mod envelope_breakpoints;
mod envelope_clients;
mod envelope_patch;
mod envelope_props;
mod grafana_dashboard;
mod hooks_client;
mod hooks_python_example;
mod inject_ab;
mod inject_sources;
mod json_check_props;
mod pipeline_auto_markers;
mod pipeline_durability;
mod pipeline_inject_record;
mod pipeline_policies;
mod pipeline_sessions;
mod pipeline_stabilize;
mod policy_check;
mod policy_shipped;
mod proxy_faults;
mod proxy_fidelity;
mod proxy_secrets;
mod replay_cli;
mod replay_consistency;
mod replay_recorder;
mod replay_tradeoffs;
mod session_cache_budget;
mod session_crash;
mod session_pinned_once;
mod session_redis;
mod session_retention;
mod session_sqlite;
mod session_store_health;
