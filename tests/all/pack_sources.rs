//! External rule packs over `https://` (SPEC-0031 REQ-1): an HTTPS server in the test, with
//! a CA made here and trusted through `SWITCHBOARD_RULE_PACK_CA_FILE`, serves pack documents
//! (`{"packs": [<pack.json with its fixtures>, …]}`). The fetching is tested in-process
//! (`switchboard_control::pack_sources::read_sources`); the catalog through the real
//! `switchboard control` binary, which must list the valid pack as `source: external`, skip
//! every other pack and source with a logged error naming it, and start all the same.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use switchboard_control::OwnerScope;
use switchboard_control::pack_sources::{FetchOptions, MAX_SOURCE_BYTES, read_sources};
use switchboard_control::store::{NewEndpoint, SourceType};
use switchboard_packs::{Catalog, Pack};
use switchboard_proto::control::v1::rule_packs_client::RulePacksClient;
use switchboard_proto::control::v1::{InstallRulePackRequest, ListRulePacksRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::control_harness::{Backend, TestDb, run, webhook};
use crate::pack_api::Bearer;
use crate::support::{RouterProcess, binary};

/// A CA made for one test, and a server certificate it signed for 127.0.0.1 and localhost.
struct TestCa {
    _dir: tempfile::TempDir,
    /// The CA's certificate as a PEM file, for `SWITCHBOARD_RULE_PACK_CA_FILE`.
    pem_file: PathBuf,
    server: Arc<ServerConfig>,
}

impl TestCa {
    fn new() -> TestCa {
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA");
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "switchboard test CA");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA cert");
        let key = rcgen::KeyPair::generate().expect("server key");
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
            .expect("server params")
            .signed_by(&key, &ca)
            .expect("server cert");

        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .expect("server config");

        let dir = tempfile::tempdir().expect("temp dir");
        let pem_file = dir.path().join("ca.pem");
        std::fs::write(&pem_file, ca.pem()).expect("write CA");
        TestCa {
            _dir: dir,
            pem_file,
            server: Arc::new(server),
        }
    }

    fn options(&self) -> FetchOptions {
        FetchOptions {
            ca_file: Some(self.pem_file.clone()),
            ..FetchOptions::default()
        }
    }
}

/// What the server answers on one path.
#[derive(Clone)]
enum Reply {
    /// `200 OK` with this JSON body and its `Content-Length`.
    Json(Vec<u8>),
    /// This status, with a short text body.
    Status(u16, &'static str),
    /// `200 OK` with no `Content-Length`, streaming this many bytes until the close.
    Stream(usize),
    /// `200 OK` declaring this `Content-Length`, then a few bytes.
    Declares(usize),
    /// Headers never come.
    Hang,
}

/// An HTTPS/1.1 server on 127.0.0.1:0 answering each path from a table; one request per
/// connection. Stops when dropped.
struct PackServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl PackServer {
    async fn start(ca: &TestCa, routes: Vec<(&str, Reply)>) -> PackServer {
        let routes: Arc<HashMap<String, Reply>> = Arc::new(
            routes
                .into_iter()
                .map(|(p, r)| (p.to_string(), r))
                .collect(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let acceptor = TlsAcceptor::from(ca.server.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, routes) = (acceptor.clone(), routes.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head);
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                    let reply = routes
                        .get(&path)
                        .cloned()
                        .unwrap_or(Reply::Status(404, "Not Found"));
                    let _ = answer(&mut tls, reply).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        PackServer { addr, task }
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }
}

impl Drop for PackServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer<S: tokio::io::AsyncWrite + Unpin>(
    out: &mut S,
    reply: Reply,
) -> std::io::Result<()> {
    let head = |status: &str, extra: &str| {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nConnection: close\r\n{extra}\r\n"
        )
    };
    match reply {
        Reply::Json(body) => {
            let len = format!("Content-Length: {}\r\n", body.len());
            out.write_all(head("200 OK", &len).as_bytes()).await?;
            out.write_all(&body).await
        }
        Reply::Status(code, text) => {
            let len = format!("Content-Length: {}\r\n", text.len());
            out.write_all(head(&format!("{code} {text}"), &len).as_bytes())
                .await?;
            out.write_all(text.as_bytes()).await
        }
        Reply::Stream(total) => {
            out.write_all(head("200 OK", "").as_bytes()).await?;
            let chunk = vec![b' '; 64 * 1024];
            let mut sent = 0;
            while sent < total {
                out.write_all(&chunk).await?;
                sent += chunk.len();
            }
            Ok(())
        }
        Reply::Declares(len) => {
            let len = format!("Content-Length: {len}\r\n");
            out.write_all(head("200 OK", &len).as_bytes()).await?;
            out.write_all(b"{\"packs\": [").await
        }
        Reply::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(())
        }
    }
}

/// drop-ci-noise 1.0.0, the base of every pack served here.
fn base() -> Pack {
    let base = Catalog::builtin()
        .find("drop-ci-noise", "1.0.0")
        .expect("drop-ci-noise@1")
        .pack
        .clone();
    assert!(!base.fixtures.is_empty());
    base
}

/// A valid pack (drop-ci-noise under another name), one whose CI rule never matches so its
/// fixtures fail, and drop-ci-noise at a new version (a would-be shadow of a built-in).
fn served_packs() -> (Pack, Pack, Pack) {
    let mut good = base();
    good.name = "ext-https-noise".into();
    let mut broken = base();
    broken.name = "ext-https-broken".into();
    for r in &mut broken.rules {
        if r.id.as_deref() == Some("ci-noise") {
            r.when = "false".into();
        }
    }
    let mut shadow = base();
    shadow.version = "9.0.0".into();
    (good, broken, shadow)
}

/// The wire format: `{"packs": [<pack.json with its fixtures inline>, …]}`.
fn document(packs: &[&Pack]) -> Vec<u8> {
    serde_json::to_vec(&json!({ "packs": packs })).expect("document")
}

/// An `https://` URL on a port nothing listens on.
async fn unreachable_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    format!("https://127.0.0.1:{port}/packs.json")
}

#[tokio::test]
async fn an_https_source_gives_the_packs_it_serves() {
    let ca = TestCa::new();
    let (good, broken, shadow) = served_packs();
    let server = PackServer::start(
        &ca,
        vec![(
            "/packs.json",
            Reply::Json(document(&[&good, &broken, &shadow])),
        )],
    )
    .await;
    let url = server.url("/packs.json");
    let (packs, skipped) = read_sources(&url, &ca.options()).await;
    assert!(skipped.is_empty(), "{skipped:?}");
    // Parsed into exactly what a directory holding them gives (validation and fixture
    // routing come after, in control).
    assert_eq!(
        packs,
        vec![
            (format!("{url}#ext-https-noise/1.0.0"), good),
            (format!("{url}#ext-https-broken/1.0.0"), broken),
            (format!("{url}#drop-ci-noise/9.0.0"), shadow),
        ]
    );
}

#[tokio::test]
async fn every_failing_source_is_skipped_with_its_reason() {
    let ca = TestCa::new();
    let (good, _, _) = served_packs();
    let mut bad_entry = serde_json::to_value(&good).expect("pack json");
    bad_entry["name"] = "ext-bad-entry".into();
    bad_entry["placement"] = "sideways".into();
    let server = PackServer::start(
        &ca,
        vec![
            ("/packs.json", Reply::Json(document(&[&good]))),
            ("/huge.json", Reply::Stream(MAX_SOURCE_BYTES + 1024 * 1024)),
            ("/declares-huge.json", Reply::Declares(MAX_SOURCE_BYTES + 1)),
            ("/broken.json", Reply::Status(500, "Internal Server Error")),
            ("/moved.json", Reply::Status(302, "Found")),
            ("/page.html", Reply::Json(b"<html>packs</html>".to_vec())),
            (
                "/bad-entry.json",
                Reply::Json(serde_json::to_vec(&json!({"packs": [bad_entry]})).expect("json")),
            ),
        ],
    )
    .await;
    let unreachable = unreachable_url().await;
    let sources = [
        server.url("/packs.json"),
        unreachable.clone(),
        server.url("/missing.json"),
        server.url("/huge.json"),
        server.url("/declares-huge.json"),
        server.url("/broken.json"),
        server.url("/moved.json"),
        server.url("/page.html"),
        server.url("/bad-entry.json"),
        format!("http://127.0.0.1:{}/packs.json", server.addr.port()),
    ];
    let (packs, skipped) = read_sources(&sources.join(","), &ca.options()).await;
    assert_eq!(
        packs.len(),
        1,
        "only the valid source gives a pack: {packs:?}"
    );
    assert_eq!(packs[0].1, good);
    let reason = |origin: &str| -> String {
        skipped
            .iter()
            .find(|s| s.origin == origin)
            .map(|s| s.reason.clone())
            .unwrap_or_else(|| panic!("{origin} not skipped: {skipped:?}"))
    };
    let expect = [
        (unreachable.clone(), "cannot connect"),
        (server.url("/missing.json"), "404 Not Found"),
        (server.url("/huge.json"), "too large"),
        (server.url("/declares-huge.json"), "too large"),
        (server.url("/broken.json"), "500 Internal Server Error"),
        (server.url("/moved.json"), "redirects are not followed"),
        (server.url("/page.html"), "not a pack document"),
        (
            format!("{}#ext-bad-entry/1.0.0", server.url("/bad-entry.json")),
            "unknown variant `sideways`",
        ),
        (
            format!("http://127.0.0.1:{}/packs.json", server.addr.port()),
            "plain http:// is refused",
        ),
    ];
    for (origin, says) in &expect {
        let r = reason(origin);
        assert!(r.contains(says), "{origin}: {r:?} should say {says:?}");
    }
    assert_eq!(skipped.len(), expect.len(), "{skipped:?}");
    assert!(
        reason(&server.url("/huge.json")).contains("8 MiB"),
        "{skipped:?}"
    );
}

#[tokio::test]
async fn a_server_the_roots_do_not_trust_is_skipped() {
    let ca = TestCa::new();
    let (good, _, _) = served_packs();
    let server =
        PackServer::start(&ca, vec![("/packs.json", Reply::Json(document(&[&good])))]).await;
    // Without the CA file only Mozilla's and the system's roots are trusted.
    let (packs, skipped) = read_sources(&server.url("/packs.json"), &FetchOptions::default()).await;
    assert!(packs.is_empty(), "{packs:?}");
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(
        skipped[0].reason.contains("certificate") && skipped[0].reason.contains("UnknownIssuer"),
        "the reason names the certificate: {skipped:?}"
    );
    // A CA file that holds no certificate is an error, not an empty trust list.
    let dir = tempfile::tempdir().expect("temp dir");
    let not_pem = dir.path().join("ca.pem");
    std::fs::write(&not_pem, "not a certificate").expect("write");
    let options = FetchOptions {
        ca_file: Some(not_pem),
        ..FetchOptions::default()
    };
    let (packs, skipped) = read_sources(&server.url("/packs.json"), &options).await;
    assert!(packs.is_empty());
    assert!(
        skipped[0].reason.contains("SWITCHBOARD_RULE_PACK_CA_FILE"),
        "{skipped:?}"
    );
}

#[tokio::test]
async fn a_source_that_never_answers_times_out() {
    let ca = TestCa::new();
    let server = PackServer::start(&ca, vec![("/slow.json", Reply::Hang)]).await;
    let options = FetchOptions {
        timeout: Duration::from_millis(500),
        ..ca.options()
    };
    let started = std::time::Instant::now();
    let (packs, skipped) = read_sources(&server.url("/slow.json"), &options).await;
    assert!(packs.is_empty());
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(
        skipped[0].reason.contains("timed out"),
        "{:?}",
        skipped[0].reason
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// A `switchboard control` process with its JSON log lines (stderr) kept; killed when
/// dropped.
struct Control {
    child: std::process::Child,
    grpc: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Control {
    fn spawn(database_url: &str, router: &str, env: &[(&str, &str)]) -> Control {
        let mut command = std::process::Command::new(binary());
        command
            .args(["control", "--database-url", database_url])
            .args(["--http-listen", "127.0.0.1:0", "--routers", router])
            .env(
                crate::support::SECRET_KEY_ENV,
                crate::support::secret_key_hex(),
            )
            .env("SWITCHBOARD_GRPC_LISTEN", "127.0.0.1:0")
            .env("SWITCHBOARD_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("control starts");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let err = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { return };
                sink.lock().expect("log lines").push(line);
            }
        });
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let grpc = loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => {
                    if let Some(addr) = line.strip_prefix("control grpc listening on ") {
                        break addr.trim().to_string();
                    }
                }
                Err(e) => panic!(
                    "control did not start ({e}); stderr {:?}",
                    stderr.lock().expect("log lines")
                ),
            }
        };
        Control {
            child,
            grpc,
            stderr,
        }
    }

    /// The JSON log lines at `level` so far.
    fn logged(&self, level: &str) -> Vec<Value> {
        self.stderr
            .lock()
            .expect("log lines")
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["level"] == level)
            .collect()
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The error line that says `field` = `value` was skipped.
fn skipped<'a>(errors: &'a [Value], field: &str, value: &str) -> Option<&'a Value> {
    errors.iter().find(|l| {
        l["fields"][field] == value
            && l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("skipped"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_lists_https_packs_and_skips_what_fails() {
    run(
        Backend::Sqlite,
        control_lists_https_packs_and_skips_what_fails_on,
    )
    .await;
}

async fn control_lists_https_packs_and_skips_what_fails_on(db: TestDb) {
    let ca = TestCa::new();
    let (good, broken, shadow) = served_packs();
    let server = PackServer::start(
        &ca,
        vec![
            (
                "/packs.json",
                Reply::Json(document(&[&good, &broken, &shadow])),
            ),
            ("/huge.json", Reply::Stream(MAX_SOURCE_BYTES + 1024 * 1024)),
        ],
    )
    .await;
    let packs_url = server.url("/packs.json");
    let unreachable = unreachable_url().await;
    let missing = server.url("/missing.json");
    let huge = server.url("/huge.json");
    let plain = format!("http://127.0.0.1:{}/packs.json", server.addr.port());
    let sources = [packs_url.as_str(), &unreachable, &missing, &huge, &plain].join(",");

    let router = tokio::task::spawn_blocking(|| RouterProcess::spawn(&["--children", "1"]))
        .await
        .expect("router");
    let (url, router_addr) = (db.url.clone(), router.addr.clone());
    let ca_file = ca.pem_file.display().to_string();
    let control = tokio::task::spawn_blocking(move || {
        Control::spawn(
            &url,
            &router_addr,
            &[
                ("SWITCHBOARD_RULE_PACK_SOURCES", &sources),
                ("SWITCHBOARD_RULE_PACK_CA_FILE", &ca_file),
            ],
        )
    })
    .await
    .expect("control");

    // Control started all the same; the valid pack is listed with source: external.
    db.store.create_human("alice", None).await.expect("human");
    let scope = OwnerScope::human("alice");
    let credential = db
        .store
        .vend_endpoint(NewEndpoint {
            name: "alice-agent".into(),
            human_login: "alice".into(),
            owner_scope: scope.clone(),
            verbs: vec![
                "webhooks".into(),
                "webhook-rules".into(),
                "rule-pack-confirm".into(),
            ],
        })
        .await
        .expect("vend")
        .credential;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", control.grpc))
        .expect("url")
        .connect()
        .await
        .expect("connects");
    let mut client = RulePacksClient::with_interceptor(channel, Bearer(credential));
    let listing = crate::support::typed::listing(
        &client
            .list_rule_packs(ListRulePacksRequest::default())
            .await
            .expect("list packs")
            .into_inner(),
    );
    let listed = listing["packs"].as_array().expect("packs");
    let ext = listed
        .iter()
        .find(|p| p["name"] == "ext-https-noise")
        .unwrap_or_else(|| panic!("ext-https-noise is not listed: {listing}"));
    assert_eq!(ext["source"], "external", "{ext}");
    assert_eq!(ext["versions"][0]["version"], "1.0.0");
    assert_eq!(ext["versions"][0]["available"], true);
    assert!(
        listed.iter().all(|p| p["name"] != "ext-https-broken"),
        "the pack failing its fixtures is skipped: {listing}"
    );
    for p in listed.iter().filter(|p| p["name"] != "ext-https-noise") {
        assert_eq!(p["source"], "builtin", "{p}");
    }
    // Never shadowing a built-in: drop-ci-noise keeps exactly the built-in versions.
    let drop_ci: Vec<&str> = listed
        .iter()
        .find(|p| p["name"] == "drop-ci-noise")
        .and_then(|p| p["versions"].as_array())
        .expect("drop-ci-noise versions")
        .iter()
        .filter_map(|v| v["version"].as_str())
        .collect();
    let builtin = Catalog::builtin();
    let builtin_versions: Vec<&str> = builtin
        .versions("drop-ci-noise")
        .iter()
        .map(|v| v.pack.version.as_str())
        .collect();
    assert_eq!(drop_ci, builtin_versions);

    // Every pack and source that failed is skipped with a logged error naming it.
    let errors = control.logged("ERROR");
    let failing = skipped(&errors, "pack", "ext-https-broken@1.0.0")
        .unwrap_or_else(|| panic!("no error names ext-https-broken: {errors:?}"));
    assert_eq!(
        failing["fields"]["origin"],
        format!("{packs_url}#ext-https-broken/1.0.0")
    );
    assert!(
        failing["fields"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("fixture")),
        "the reason names the failing fixture: {failing}"
    );
    let shadowing = skipped(&errors, "pack", "drop-ci-noise@9.0.0")
        .unwrap_or_else(|| panic!("no error names the shadowing pack: {errors:?}"));
    assert!(
        shadowing["fields"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("built-in")),
        "{shadowing}"
    );
    for (origin, says) in [
        (&unreachable, "cannot connect"),
        (&missing, "404"),
        (&huge, "too large"),
        (&plain, "http://"),
    ] {
        let line = skipped(&errors, "origin", origin)
            .unwrap_or_else(|| panic!("no error names {origin}: {errors:?}"));
        assert!(
            line["fields"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains(says)),
            "{origin} should say {says}: {line}"
        );
    }
    assert!(
        skipped(&errors, "pack", "ext-https-noise@1.0.0").is_none(),
        "{errors:?}"
    );
    let loaded = control.logged("INFO");
    assert!(
        loaded
            .iter()
            .any(|l| l["fields"]["pack"] == "ext-https-noise@1.0.0"
                && l["fields"]["origin"] == format!("{packs_url}#ext-https-noise/1.0.0")),
        "{loaded:?}"
    );

    // Loaded once at start: the server may go away, the pack stays, and it installs through
    // plan and confirm like a built-in.
    drop(server);
    let w = webhook(&db.store, &scope, SourceType::Github, None).await;
    let plan = install(
        &mut client,
        InstallRulePackRequest {
            webhook_id: w.id.clone(),
            name: "ext-https-noise".into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(plan["pack"]["name"], "ext-https-noise", "{plan}");
    assert_eq!(plan["nothing_saved"], true, "{plan}");
    let token = plan["plan_token"].as_str().expect("plan token").to_string();
    let done = install(
        &mut client,
        InstallRulePackRequest {
            webhook_id: w.id.clone(),
            name: "ext-https-noise".into(),
            confirm: token,
            allow_unproven: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(done["saved"], true, "{done}");
    let saved = db.store.get_webhook(&scope, &w.id).await.expect("webhook");
    assert!(
        saved
            .configuration
            .canonical_json()
            .contains("ext-https-noise--ci-noise"),
        "{:?}",
        saved.configuration
    );
    drop(router);
}

/// An install (or its confirm) to its result.
async fn install(
    client: &mut RulePacksClient<InterceptedService<Channel, Bearer>>,
    req: InstallRulePackRequest,
) -> Value {
    let stream = client
        .install_rule_pack(req)
        .await
        .expect("install")
        .into_inner();
    crate::support::typed::pack_result(stream)
        .await
        .expect("the install's result")
}
