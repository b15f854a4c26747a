//! The admin listener's bearer token (`server.admin_token_env`): every route but the
//! probes asks for it.

use crate::support::*;

#[tokio::test]
async fn admin_routes_need_the_token_and_probes_do_not() {
    std::env::set_var("CACHET_IT_ADMIN_TOKEN", "adm-0123456789");
    let upstream = FakeUpstream::start(Script::json(200, "{}")).await;
    let mut config = test_config(&upstream.url());
    config.server.admin_token_env = Some("CACHET_IT_ADMIN_TOKEN".into());
    let proxy = start_proxy(config).await;
    let c = client();
    let admin = proxy.admin_addr;
    for path in [
        "/metrics",
        "/sessions",
        "/sessions/s1",
        "/sessions/s1/timeline",
    ] {
        for auth in [None, Some("Bearer wrong"), Some("adm-0123456789")] {
            let mut req = c.get(format!("http://{admin}{path}"));
            if let Some(a) = auth {
                req = req.header("authorization", a);
            }
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 401, "{path} with {auth:?}");
        }
        let r = c
            .get(format!("http://{admin}{path}"))
            .header("authorization", "Bearer adm-0123456789")
            .send()
            .await
            .unwrap();
        assert_ne!(r.status(), 401, "{path}");
    }
    let r = c
        .get(format!("http://{admin}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "liveness probes need no token");
    let r = c
        .get(format!("http://{admin}/readyz"))
        .send()
        .await
        .unwrap();
    assert_ne!(r.status(), 401, "readiness probes need no token");
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_timeline_route_without_an_id_is_a_404_not_a_panic() {
    let upstream = FakeUpstream::start(Script::json(200, "{}")).await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let r = client()
        .get(format!("http://{}/sessions/timeline", proxy.admin_addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_missing_token_variable_stops_the_start() {
    let mut config = test_config("http://127.0.0.1:1");
    config.server.admin_token_env = Some("CACHET_IT_ADMIN_TOKEN_NEVER_SET".into());
    let err = cachet::server::spawn(config).await.err().unwrap();
    assert!(
        err.to_string().contains("CACHET_IT_ADMIN_TOKEN_NEVER_SET"),
        "{err}"
    );
}

#[test]
fn an_admin_listener_beyond_loopback_without_a_token_is_warned_about() {
    use std::io::{BufRead, Read};
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "0.0.0.0:0",
        ])
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("listening"), "{line}");
    child.kill().unwrap();
    child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        stderr.contains("admin listener") && stderr.contains("admin_token_env"),
        "{stderr}"
    );
}
