//! HTTP plumbing below the pipeline: body types and reading a body within its limits, the
//! errors cachet answers itself, and the upstream side (URLs, headers, the client, a body
//! passed on as it arrives). The listeners and the request handler are `server`'s, on the
//! serving of [`crate::http_serve`].

pub mod arriving;
pub mod aws;
pub mod forward;
pub mod http;
pub mod upstream_client;
pub mod vertex_token;
pub mod websocket;

pub use self::http::{error_response, full, ProxyBody};
