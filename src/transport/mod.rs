//! The network edge: listeners and HTTP plumbing, the proxy's request handler, the upstream
//! side (URLs, headers, errors) and the admin listener.

pub mod admin;
pub mod arriving;
pub mod client_auth;
mod coarse_timer;
pub mod forward;
pub mod http;
pub mod path_guard;
pub mod server;
pub mod upstream_client;

pub use self::http::{error_response, full, ProxyBody};
