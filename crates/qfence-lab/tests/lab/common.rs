//! Helpers shared by the stories: clients, JSON calls, polling.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{Result, bail};
use reqwest::{Client, Method, StatusCode};
use serde_json::Value;

/// Installs the ring provider once (reqwest is built with `rustls-no-provider`).
pub fn init() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Prints a phase of a story.
pub fn phase(text: &str) {
    eprintln!("-- {text}");
}

/// Any free port on 127.0.0.1.
pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A client that trusts exactly this certificate (PEM), with a short timeout and no
/// connection reuse across tests.
pub fn client(cert_pem: &str) -> Client {
    init();
    let cert = reqwest::Certificate::from_pem(cert_pem.as_bytes()).expect("certificate PEM");
    Client::builder()
        .tls_certs_only([cert])
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client")
}

/// A client that accepts any certificate and records the peer's, bound to `source`.
pub fn inspecting_client(source: Option<IpAddr>, timeout: Duration) -> Client {
    init();
    let mut builder = Client::builder()
        .danger_accept_invalid_certs(true)
        .tls_info(true)
        .timeout(timeout);
    if let Some(ip) = source {
        builder = builder.local_address(ip);
    }
    builder.build().expect("client")
}

/// A response: status, headers and JSON body (Null when empty).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }
}

/// Sends a request and reads the JSON body.
pub async fn call(request: reqwest::RequestBuilder) -> Result<Reply> {
    let response = request.send().await?;
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.bytes().await?;
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        // Not every server answers every error in JSON (fakepve's 404 is text): keep it.
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// A request builder for `base + path`.
pub fn req(client: &Client, method: Method, base: &str, path: &str) -> reqwest::RequestBuilder {
    client.request(method, format!("{base}{path}"))
}

/// Polls `probe` every 50 ms until it returns `Some`, or fails after `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = probe().await? {
            return Ok(value);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The peer certificate's SHA-256 (lower-case hex) of a response from an inspecting client.
pub fn peer_fingerprint(response: &reqwest::Response) -> Option<String> {
    let info = response.extensions().get::<reqwest::tls::TlsInfo>()?;
    Some(qfence_lab::tls::sha256_fingerprint(
        info.peer_certificate()?,
    ))
}

/// The error chain as one string, for asserting on the kind of failure.
pub fn chain(error: &reqwest::Error) -> String {
    let mut out = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
