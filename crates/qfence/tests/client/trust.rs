//! How the CLI trusts the API and is trusted by it: pins, CA files, tokens, reachability and
//! usage errors, each with its exit code.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_trust_tokens_and_reachability_give_clear_errors_and_exit_codes() {
    let s = Server::start().await;

    phase("a CA file instead of a pin");
    let ca = s.ca_file.display().to_string();
    let out = Out::of(
        bare(&[
            "status",
            "--api",
            &s.url,
            "--ca-file",
            &ca,
            "--token",
            VIEWER,
        ])
        .output()
        .await
        .unwrap(),
    );
    out.ok();

    phase("a wrong pin: not trusted, exit 3, both fingerprints' owner named");
    let wrong = format!("sha256:{}", "ab".repeat(32));
    let out = Out::of(
        bare(&[
            "status", "--api", &s.url, "--pin", &wrong, "--token", VIEWER,
        ])
        .output()
        .await
        .unwrap(),
    );
    assert_eq!(out.code, Some(3), "{out:#?}");
    assert!(
        out.stderr.contains("cannot reach the API"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&s.pin),
        "the seen fingerprint is shown: {}",
        out.stderr
    );

    phase("no trust given: the system roots do not know a self-signed certificate");
    let out = Out::of(
        bare(&["status", "--api", &s.url, "--token", VIEWER])
            .output()
            .await
            .unwrap(),
    );
    assert_eq!(out.code, Some(3), "{out:#?}");
    assert!(out.stderr.contains("pass it with --pin"), "{}", out.stderr);

    phase("a wrong token: exit 1, a clear message, the token never printed");
    let out = Out::of(
        s.command_as("not-a-token-9", &["status"])
            .output()
            .await
            .unwrap(),
    );
    assert_eq!(out.code, Some(1), "{out:#?}");
    assert!(
        out.stderr.contains("(unauthorized, HTTP 401)"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("check --token or QFENCE_TOKEN"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("not-a-token-9") && !out.stdout.contains("not-a-token-9"));

    phase("nothing listening: exit 3");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let out = Out::of(
        bare(&[
            "status",
            "--api",
            &format!("https://127.0.0.1:{port}"),
            "--pin",
            &s.pin,
            "--token",
            VIEWER,
        ])
        .output()
        .await
        .unwrap(),
    );
    assert_eq!(out.code, Some(3), "{out:#?}");
    assert!(
        out.stderr.contains("cannot reach the API"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_exit_2_and_say_what_is_missing() {
    let s = Server::start().await;

    phase("usage: no API, no token, a format the command does not print: exit 2");
    let out = Out::of(bare(&["status", "--token", VIEWER]).output().await.unwrap());
    assert_eq!(out.code, Some(2), "{out:#?}");
    assert!(
        out.stderr.contains("--api URL or set QFENCE_API"),
        "{}",
        out.stderr
    );
    let out = Out::of(
        bare(&["plan", "list", "--api", &s.url])
            .output()
            .await
            .unwrap(),
    );
    assert_eq!(out.code, Some(2), "{out:#?}");
    assert!(out.stderr.contains("no token given"), "{}", out.stderr);
    let out = s.run(&["--format", "mermaid", "status"]).await;
    assert_eq!(out.code, Some(2), "{out:#?}");
    let out = s
        .run(&["plan", "switchover", "erp-db", "--to", "dc2"])
        .await;
    assert_eq!(out.code, Some(2), "--generation is required: {out:#?}");
    let out = s
        .run(&["plan", "dry-run", "erp-db", "--assume", "dc1[0]=unknown"])
        .await;
    assert_eq!(out.code, Some(2), "{out:#?}");
}
