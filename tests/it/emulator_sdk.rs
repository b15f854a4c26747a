//! The official Python SDKs (`anthropic`, `openai`) against the emulator. Needs `python3`
//! with both packages installed (`pip install anthropic openai`); fails without them.

use std::process::Command;

use cachet::emulator::{spawn, EmulatorOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdks_parse_every_response_and_see_the_accounted_usage() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let emu = spawn(listener, EmulatorOptions::default()).await.unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/emulator_sdk.py");
    let url = emu.url();
    let output =
        tokio::task::spawn_blocking(move || Command::new("python3").arg(script).arg(url).output())
            .await
            .unwrap()
            .expect("python3 must be installed to run the SDK tests");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "SDK script failed.\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("all SDK checks passed"), "{stdout}");
    // Every generation the script made was accounted.
    assert!(emu.accounted().len() >= 15, "{}", emu.accounted().len());
    emu.shutdown().await;
}

/// The same SDK calls through cachet, passing through and with the shipped cache policies
/// active: the SDKs parse every answer, streamed or not, and see the provider's usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdks_work_through_the_proxy() {
    let root = env!("CARGO_MANIFEST_DIR");
    let shipped: Vec<std::path::PathBuf> = [
        "anthropic-auto-breakpoints",
        "openai-cache-key",
        "stabilize-volatile",
    ]
    .iter()
    .map(|p| format!("{root}/policies/{p}.toml").into())
    .collect();
    for policies in [vec![], shipped] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let emu = spawn(listener, EmulatorOptions::default()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut config = cachet::config::Config::default();
        config.server.listen = "127.0.0.1:0".parse().unwrap();
        config.server.admin_listen = "127.0.0.1:0".parse().unwrap();
        config.upstream.anthropic = emu.url();
        config.upstream.openai = emu.url();
        config.policies.files = policies.clone();
        config.sessions.store = dir.path().to_string_lossy().into_owned();
        let proxy = cachet::server::spawn(config).await.unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/emulator_sdk.py");
        let url = format!("http://{}", proxy.addr);
        let output = tokio::task::spawn_blocking(move || {
            Command::new("python3").arg(script).arg(url).output()
        })
        .await
        .unwrap()
        .expect("python3 must be installed to run the SDK tests");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stdout.contains("all SDK checks passed"),
            "SDK script through the proxy failed (policies: {policies:?}).\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        proxy.shutdown().await;
        emu.shutdown().await;
    }
}
