//! The auth example's `Accounts` host, driven from curl (HTTP/1.1 and HTTP/2) and from keel's
//! client (keel-wire and HTTP): a bearer token in metadata, checked by an interceptor; answers
//! with status codes mapped to HTTP statuses. The curl test is skipped, with a printed reason,
//! when curl is not installed (CI installs it, and sets `KEEL_REQUIRE_CURL=1`, which makes
//! the test fail instead).

use std::process::Command;

use keel::StatusCode;
use keel_examples::accounts::{self, Account, AccountsClient, SendToken, DEFAULT_TOKEN};

fn have_curl() -> bool {
    let found = Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        if std::env::var_os("KEEL_REQUIRE_CURL").is_some_and(|v| v == "1") {
            panic!("KEEL_REQUIRE_CURL=1 but no curl on PATH (apt-get install curl)");
        }
        eprintln!("SKIPPED: `curl` is not installed, so this test cannot run");
    }
    found
}

/// What curl saw of one call: HTTP status, the `keel-status` header, the body.
#[derive(Debug)]
struct Seen {
    status: u16,
    keel_status: String,
    body: String,
}

fn curl(url: &str, version_flag: &str, path: &str, body: &str, token: Option<&str>) -> Seen {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-i", "--max-time", "10", version_flag])
        .args(["-H", "content-type: application/json", "-d", body]);
    if let Some(token) = token {
        cmd.args(["-H", &format!("authorization: Bearer {token}")]);
    }
    let out = cmd.arg(format!("{url}{path}")).output().unwrap();
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    let (head, body) = text.split_once("\n\n").expect("a head and a body");
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let keel_status = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("keel-status")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_default();
    Seen {
        status,
        keel_status,
        body: body.to_string(),
    }
}

#[test]
fn curl_gets_401_without_a_valid_token_404_for_unknown_accounts_and_answers_with_it() {
    if !have_curl() {
        return;
    }
    let host = accounts::host("http://127.0.0.1:0", DEFAULT_TOKEN).unwrap();
    let url = host.url().to_string();
    for flag in ["--http1.1", "--http2-prior-knowledge"] {
        for token in [None, Some("wrong")] {
            let seen = curl(&url, flag, "/Accounts/whoami", "{}", token);
            assert_eq!(
                (seen.status, &*seen.keel_status),
                (401, "unauthenticated"),
                "{flag} {token:?}: {seen:?}"
            );
            assert!(seen.body.contains("Bearer"), "{seen:?}");
        }
        let seen = curl(&url, flag, "/Accounts/whoami", "{}", Some(DEFAULT_TOKEN));
        assert_eq!(
            (seen.status, &*seen.keel_status, &*seen.body),
            (200, "ok", "\"demo\""),
            "{flag}"
        );
        for id in [0, 7] {
            let seen = curl(
                &url,
                flag,
                "/Accounts/get",
                &format!("{{\"id\": {id}}}"),
                Some(DEFAULT_TOKEN),
            );
            assert_eq!(
                (seen.status, &*seen.keel_status),
                (404, "not_found"),
                "{flag} {id}: {seen:?}"
            );
            assert!(seen.body.contains(&format!("no account {id}")), "{seen:?}");
        }
        let seen = curl(
            &url,
            flag,
            "/Accounts/get",
            r#"{"id": 1}"#,
            Some(DEFAULT_TOKEN),
        );
        assert_eq!(seen.status, 200, "{seen:?}");
        let account: Account = serde_json::from_str(&seen.body).unwrap();
        assert_eq!(account.owner, "demo");
    }
    // Refused calls never reached a handler: only the 2 × 4 authenticated ones count.
    assert_eq!(host.stats().calls_total, 8);
    host.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keels_client_sends_the_token_as_metadata_on_every_binding() {
    for url in ["tcp://127.0.0.1:0", "http://127.0.0.1:0"] {
        let host = accounts::host(url, "t0k3n").unwrap();
        let anonymous = AccountsClient::connect(host.url()).await.unwrap();
        let err = anonymous.whoami().await.unwrap_err();
        assert_eq!(
            err.status_code(),
            Some(StatusCode::Unauthenticated),
            "{url}: {err}"
        );
        let mut wrong = keel::Metadata::new();
        wrong.insert("authorization", "Bearer s3cret").unwrap();
        let err = anonymous.with_metadata(wrong).get(1).await.unwrap_err();
        assert_eq!(
            err.status_code(),
            Some(StatusCode::Unauthenticated),
            "{url}: {err}"
        );
        let channel = keel::Channel::builder(host.url())
            .interceptor(SendToken("t0k3n".into()))
            .build()
            .unwrap();
        let client = AccountsClient::new(channel);
        assert_eq!(client.whoami().await.unwrap(), "demo");
        assert_eq!(client.get(2).await.unwrap().owner, "someone-else");
        let err = client.get(0).await.unwrap_err();
        assert_eq!(
            err.status_code(),
            Some(StatusCode::NotFound),
            "{url}: {err}"
        );
        assert_eq!(err.message(), "no account 0");
        host.shutdown_async().await;
    }
}
