//! One real HTTPS test: the API served over rustls (ring) on loopback.

use tokio_util::sync::CancellationToken;

use super::{VIEWER, tokens};
use qfence_runtime::Metrics;
use qfence_server::ApiConfig;
use qfence_server::testing::LabRuntime;

#[tokio::test]
async fn the_api_is_served_over_tls_and_refuses_plain_http() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert_der = cert.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
    let server_config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![cert_der.clone()], key)
        .unwrap();

    let lab = LabRuntime::start().await.expect("the lab starts");
    let app = qfence_server::router(
        lab.backend(),
        tokens(),
        Metrics::new(),
        &ApiConfig::default(),
    );
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let stop = CancellationToken::new();
    let server = tokio::spawn(qfence_server::tls::serve_tls(
        tcp,
        server_config,
        app,
        stop.clone(),
    ));

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert_der).unwrap();
    let client_config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(client_config)
        .resolve("localhost", addr)
        .build()
        .unwrap();
    let base = format!("https://localhost:{}", addr.port());

    let r = client.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = client
        .get(format!("{base}/api/v1/status"))
        .bearer_auth(VIEWER)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["plans"][0]["plan"], "erp-db");
    let r = client
        .get(format!("{base}/api/v1/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = reqwest::Client::builder().build().unwrap();
    assert!(
        plain
            .get(format!("http://{addr}/health"))
            .send()
            .await
            .is_err()
    );

    // A client that does not trust the certificate is refused.
    let strict = reqwest::Client::builder()
        .tls_backend_preconfigured(
            rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
        )
        .resolve("localhost", addr)
        .build()
        .unwrap();
    assert!(strict.get(format!("{base}/health")).send().await.is_err());

    stop.cancel();
    server.await.unwrap().unwrap();
}
