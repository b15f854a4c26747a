//! The network edge: the proxy's listener and request handler, reading request bodies, the
//! upstream side (URLs, headers, errors, the client) and the admin listener, on the serving
//! of [`crate::http_serve`].

pub mod admin;
pub mod arriving;
pub mod client_auth;
pub mod forward;
pub mod http;
pub mod server;
pub mod upstream_client;

pub use self::http::{error_response, full, ProxyBody};
