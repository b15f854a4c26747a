//! The admin listener: `/metrics`, `/healthz` (and sessions once they exist).

use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::server::{full, ProxyBody, State};

pub async fn handle(state: &State, req: Request<Incoming>) -> Response<ProxyBody> {
    match (req.method().as_str(), req.uri().path()) {
        ("GET", "/metrics") => {
            let mut resp = Response::new(full(state.metrics.render()));
            resp.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            resp
        }
        ("GET", "/healthz") => Response::new(full("ok\n")),
        _ => {
            let mut resp = Response::new(full("not found\n"));
            *resp.status_mut() = StatusCode::NOT_FOUND;
            resp
        }
    }
}
