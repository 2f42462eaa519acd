//! The web console in a real browser: Debian's headless chromium driven over WebDriver
//! (see `harness.rs`). Each test tells a story and leaves screenshots in
//! `target/console-screenshots/`.

mod harness;

use std::sync::Arc;

use anyhow::Result;
use qfence_server::testing::MemoryBackend;
use qfence_server::{Access, ApiConfig, Metrics, TokenStore};

use harness::{Browser, serve};

pub const VIEWER: &str = "viewer-token-1";
pub const OPERATOR: &str = "operator-token-2";
pub const ADMIN: &str = "admin-token-3";

pub fn tokens() -> TokenStore {
    TokenStore::default()
        .with_token(Access::Viewer, "grafana", VIEWER)
        .with_token(Access::Operator, "oncall", OPERATOR)
        .with_token(Access::Admin, "alice", ADMIN)
}

pub fn phase(what: &str) {
    eprintln!("--- {what}");
}

/// The console over the in-memory lab backend.
pub async fn memory_console() -> Result<(harness::Served, Arc<MemoryBackend>)> {
    let backend = Arc::new(MemoryBackend::lab());
    let app = qfence_server::router(
        backend.clone(),
        tokens(),
        Metrics::new(),
        &ApiConfig::default(),
    );
    Ok((serve(app).await?, backend))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_in_shows_the_overview() -> Result<()> {
    let (served, _backend) = memory_console().await?;
    let b = Browser::start(&served.base, "sign-in").await?;

    phase("a browser without a session is sent to the sign-in page");
    b.open("/").await?;
    b.wait_for("#token").await?;
    anyhow::ensure!(b.path().await?.starts_with("/login"), "on the sign-in page");
    b.screenshot("1-login").await?;

    phase("a wrong token is refused on the page");
    b.fill("#token", "not-a-token").await?;
    b.click("form[action='/login'] button[type=submit]").await?;
    b.wait_for_text(".field-error", "not known").await?;

    phase("the viewer's token opens the overview with erp-db");
    b.sign_in(VIEWER).await?;
    b.wait_for_text("#overview", "erp-db").await?;
    b.screenshot("2-overview").await?;
    b.quit().await
}
