//! Shared test support: the real forge payloads as stored deliveries, sandbox pools of the
//! real binary, and router processes.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use switchboard_proto::router::v1::{Decision, Header, RoutingContext, StoredDelivery};
use switchboard_router::engine::{CompiledConfiguration, Configuration as Config, build_envelope};
use switchboard_router::sandbox::{SandboxConfig, SandboxPool};

pub use switchboard_testkit::payloads_dir::webhooks_dir;

/// The environment variable a control or admin process reads its sealing key from.
pub const SECRET_KEY_ENV: &str = "SWITCHBOARD_SECRET_KEY";

/// A router's answer without the units' CPU times (`unit_ns`, which no two runs share): what
/// two answers to the same call must agree on.
pub fn decisions_only(
    mut answer: switchboard_proto::router::v1::EvaluateResponse,
) -> switchboard_proto::router::v1::EvaluateResponse {
    for r in &mut answer.results {
        r.unit_ns.clear();
    }
    answer
}

/// The key this test process seals webhook secrets with, as text: every in-process store
/// uses it, and every `switchboard control` or `admin` a test starts gets it in
/// [`SECRET_KEY_ENV`], so both sides open the same secrets.
/// A configuration written as JSON in a test, typed as the store takes it.
pub fn typed(configuration: serde_json::Value) -> switchboard_model::Configuration {
    serde_json::from_value(configuration).expect("a configuration")
}

/// A time the API sent (a Timestamp) as milliseconds since the epoch; absent is `None`.
pub fn ms(t: &Option<switchboard_proto::convert::time::Timestamp>) -> Option<i64> {
    t.as_ref()
        .map(|t| switchboard_proto::convert::time::to_millis(t).expect("a time in range"))
}

/// A time the API sent as the RFC 3339 text control writes; absent is empty.
pub fn text(t: &Option<switchboard_proto::convert::time::Timestamp>) -> String {
    switchboard_proto::convert::time::to_rfc3339_or_empty(t.as_ref())
}

/// Where scripts/mcp-venv puts the virtualenv (or SWITCHBOARD_MCP_VENV).
pub fn venv() -> PathBuf {
    std::env::var_os("SWITCHBOARD_MCP_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/mcp-venv"))
}

/// The test virtualenv's Python (scripts/mcp-venv: the `mcp` client, grpcio, grpcio-tools,
/// grpcio-status), or `None`, saying the test skips, when it was not made.
pub fn python() -> Option<PathBuf> {
    let python = venv().join("bin/python");
    if python.exists() {
        return Some(python);
    }
    switchboard_testkit::missing::skip(
        "a Python client's test",
        &format!("the test virtualenv at {}", python.display()),
        "create it with scripts/mcp-venv",
    );
    None
}

/// Runs one of `tests/grpc/`'s scripts (protos compiled from this repository's files) with
/// `args` and `env`, and reads the one JSON value it prints.
pub async fn grpc_script(
    python: &std::path::Path,
    script: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> serde_json::Value {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = tokio::process::Command::new(python)
        .arg(root.join("tests/grpc").join(script))
        .arg("--proto-root")
        .arg(root.join("proto"))
        .args(args)
        .envs(env.iter().copied())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), output)
        .await
        .expect("the python client finishes")
        .expect("python runs");
    assert!(
        output.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("one JSON value")
}

pub fn secret_key_hex() -> &'static str {
    static KEY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    KEY.get_or_init(|| switchboard_control::SealingKey::generate_hex().expect("a fresh key"))
}

/// [`secret_key_hex`] as a key.
pub fn secret_key() -> switchboard_control::SealingKey {
    switchboard_control::SealingKey::from_hex(secret_key_hex()).expect("the test key")
}

/// One real payload file.
#[derive(Clone, Debug)]
pub struct Payload {
    pub forge: &'static str,
    pub file: String,
    /// The forge's event header value (the file name's first part).
    pub event: String,
    pub body: Vec<u8>,
}

/// Every payload of every forge, in a stable order.
pub fn payloads() -> Vec<Payload> {
    let mut out = Vec::new();
    for forge in ["github", "gitea", "forgejo"] {
        let dir = webhooks_dir().join(forge);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        for path in files {
            let file = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let event = file.split('.').next().unwrap_or_default().to_string();
            let body =
                std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            out.push(Payload {
                forge,
                file,
                event,
                body,
            });
        }
    }
    assert!(
        out.len() > 50,
        "expected the real payloads, found {}",
        out.len()
    );
    out
}

/// One payload by forge and file name.
pub fn payload(forge: &str, file: &str) -> Payload {
    payloads()
        .into_iter()
        .find(|p| p.forge == forge && p.file == file)
        .unwrap_or_else(|| panic!("no payload {forge}/{file}"))
}

/// `<event>.<action>` from the event header and the body's `action`: ingest's own definition.
pub fn kind_of(event: &str, body: &[u8]) -> String {
    switchboard_model::kind::kind(event, body)
}

/// The payload as a stored delivery with the headers its forge sends.
pub fn stored(p: &Payload, n: usize) -> StoredDelivery {
    let delivery_id = format!("00000000-0000-4000-8000-{n:012}");
    let h = |name: &str, value: &str| Header {
        name: name.into(),
        value: value.into(),
    };
    let mut headers = vec![
        h("Content-Type", "application/json"),
        h("User-Agent", "test"),
    ];
    match p.forge {
        "github" => {
            headers.push(h("X-GitHub-Event", &p.event));
            headers.push(h("X-GitHub-Delivery", &delivery_id));
            headers.push(h("X-Hub-Signature-256", "sha256=00"));
        }
        forge => {
            let name = if forge == "gitea" { "Gitea" } else { "Forgejo" };
            headers.push(h(&format!("X-{name}-Event"), &p.event));
            headers.push(h(&format!("X-{name}-Event-Type"), &p.event));
            headers.push(h(&format!("X-{name}-Delivery"), &delivery_id));
            headers.push(h(&format!("X-{name}-Signature"), "00"));
            headers.push(h("X-GitHub-Event", &p.event));
        }
    }
    StoredDelivery {
        event_id: format!("ev-{n}"),
        source: p.forge.to_string(),
        kind: kind_of(&p.event, &p.body),
        headers,
        body: Bytes::from(p.body.clone()),
        verified: !n.is_multiple_of(5),
        delivery_id,
        received_at_ms: 1_795_996_750_000 + n as i64 * 1000,
    }
}

/// Every real payload as a stored delivery, `count` of them cycling through the files.
pub fn deliveries(count: usize) -> Vec<StoredDelivery> {
    let all = payloads();
    (0..count).map(|i| stored(&all[i % all.len()], i)).collect()
}

/// Decisions made in this process, for comparison with the sandbox's.
pub fn in_process(json: &str, ctx: &RoutingContext, ds: &[StoredDelivery]) -> Vec<Decision> {
    let config = Config::from_json(json).expect("configuration parses");
    let compiled = CompiledConfiguration::compile(&config).expect("configuration compiles");
    ds.iter()
        .map(|d| compiled.evaluate(ctx, &build_envelope(d, ctx)))
        .collect()
}

pub fn context() -> RoutingContext {
    RoutingContext {
        grant: vec!["forge".into(), "review".into(), "triage".into()],
        trusted_actors_capability: true,
        trusted_actors: Some(switchboard_proto::router::v1::TrustedActors {
            humans: vec!["Codertocat".into(), "octocat".into()],
            agents: vec!["cairn-agent".into()],
            bots: vec!["dependabot[bot]".into()],
        }),
    }
}

/// The switchboard binary under test.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_switchboard"))
}

/// A sandbox pool whose children are the real binary.
/// No spare children: the tests count the children their work starts.
pub async fn pool(children: usize, budget: Duration) -> Arc<SandboxPool> {
    let mut config = SandboxConfig::new(binary());
    config.children = children;
    config.budget = budget;
    config.spares = 0;
    SandboxPool::start(config)
        .await
        .expect("sandbox pool starts")
}

/// A `switchboard router` process; killed when dropped.
pub struct RouterProcess {
    pub child: Child,
    pub addr: String,
}

impl RouterProcess {
    pub fn spawn(extra: &[&str]) -> Self {
        let mut child = Command::new(binary())
            .args(["router", "--listen", "127.0.0.1:0"])
            .args(extra)
            .env("SWITCHBOARD_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("router starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("router prints its address");
        let addr = line
            .trim()
            .strip_prefix("router listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_string();
        Self { child, addr }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sends SIGTERM, as Kubernetes does.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        assert!(status.is_ok_and(|s| s.success()), "kill -TERM");
    }

    /// Waits for exit, at most `within`.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for RouterProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Child process ids of this (test) process.
pub fn own_children() -> Vec<u32> {
    children_in("/proc/self/task")
}

/// Child process ids of process `pid` (a router's sandbox children).
pub fn children_of(pid: u32) -> Vec<u32> {
    children_in(&format!("/proc/{pid}/task"))
}

/// CPU time (clock ticks, user and system) process `pid` has used so far; zero once it is gone.
pub fn cpu_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // After the command name, in parentheses: state is field 3, utime 14, stime 15.
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    get(11) + get(12)
}

/// CPU ticks used so far by process `pid` and its live children: a router and its sandbox
/// children.
pub fn tree_cpu_ticks(pid: u32) -> u64 {
    cpu_ticks(pid) + children_of(pid).into_iter().map(cpu_ticks).sum::<u64>()
}

fn children_in(tasks: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(tasks) else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// The services a server's reflection lists, through v1 and through v1alpha, and whether a
/// type of each listed service resolves (its file is found by symbol) through both.
pub async fn reflected_services(
    channel: tonic::transport::Channel,
) -> (
    std::collections::BTreeSet<String>,
    std::collections::BTreeSet<String>,
) {
    use tonic_reflection::pb::{v1, v1alpha};
    let mut client = v1::server_reflection_client::ServerReflectionClient::new(channel.clone());
    let mut alpha = v1alpha::server_reflection_client::ServerReflectionClient::new(channel);
    let list = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let answer = client
        .server_reflection_info(tokio_stream::iter([list]))
        .await
        .expect("v1 reflection answers")
        .into_inner()
        .message()
        .await
        .expect("a v1 message")
        .expect("some v1 message");
    let Some(v1::server_reflection_response::MessageResponse::ListServicesResponse(l)) =
        answer.message_response
    else {
        panic!("unexpected v1 answer: {answer:?}")
    };
    let v1_names: std::collections::BTreeSet<String> =
        l.service.into_iter().map(|s| s.name).collect();
    let list = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1alpha::server_reflection_request::MessageRequest::ListServices(String::new()),
        ),
    };
    let answer = alpha
        .server_reflection_info(tokio_stream::iter([list]))
        .await
        .expect("v1alpha reflection answers")
        .into_inner()
        .message()
        .await
        .expect("a v1alpha message")
        .expect("some v1alpha message");
    let Some(v1alpha::server_reflection_response::MessageResponse::ListServicesResponse(l)) =
        answer.message_response
    else {
        panic!("unexpected v1alpha answer: {answer:?}")
    };
    let alpha_names: std::collections::BTreeSet<String> =
        l.service.into_iter().map(|s| s.name).collect();
    // Every listed service resolves through v1alpha, as a grpcio client would ask.
    for name in &alpha_names {
        let ask = v1alpha::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(
                v1alpha::server_reflection_request::MessageRequest::FileContainingSymbol(
                    name.clone(),
                ),
            ),
        };
        let answer = alpha
            .server_reflection_info(tokio_stream::iter([ask]))
            .await
            .expect("v1alpha reflection answers")
            .into_inner()
            .message()
            .await
            .expect("a v1alpha message")
            .expect("some v1alpha message");
        assert!(
            matches!(
                answer.message_response,
                Some(
                    v1alpha::server_reflection_response::MessageResponse::FileDescriptorResponse(_)
                )
            ),
            "{name} does not resolve: {answer:?}"
        );
    }
    (v1_names, alpha_names)
}

/// What every role's reflection lists besides its own services.
pub const REFLECTED_BY_EVERY_ROLE: [&str; 3] = [
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

/// Checks that the section `name` of the repository file `path` (between
/// `<!-- name: begin (generated by tests) -->` and `<!-- name: end -->`) is `content`;
/// `UPDATE_GOLDEN=1` rewrites it. For tables a reviewer reads in the docs.
pub fn assert_golden_section(path: &str, name: &str, content: &str) {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    let begin = format!("<!-- {name}: begin (generated by tests) -->\n");
    let end = format!("<!-- {name}: end -->");
    let doc = std::fs::read_to_string(&file).unwrap_or_default();
    let (Some(start), Some(stop)) = (doc.find(&begin), doc.find(&end)) else {
        panic!("{} lacks the markers of section {name}", file.display())
    };
    if &doc[start + begin.len()..stop] == content {
        return;
    }
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        let updated = format!("{}{begin}{content}{}", &doc[..start], &doc[stop..]);
        std::fs::write(&file, updated).expect("the golden file is written");
    } else {
        panic!(
            "{path}'s section {name} is out of date (rerun with UPDATE_GOLDEN=1 and review the diff):\n{content}"
        );
    }
}

/// The rule-pack gRPC results as the JSON an agent reads: the typed messages through the
/// same types the gateway serializes. Each also checks that the deprecated JSON text control
/// still sends for older clients says exactly the same.
pub mod typed {
    use serde_json::Value;
    use switchboard_model::listing::Listing;
    use switchboard_packs::plan::{Applied, CandidateReplay, Plan, Report};
    use switchboard_proto::control::v1 as pb;
    use switchboard_proto::control::v1::rule_pack_event::Event;
    use tonic::{Status, Streaming};

    /// A typed plan or applied result event as JSON; `None` for any other event.
    pub fn pack_event(event: &Event) -> Option<Value> {
        let json = match event {
            Event::Plan(p) => serde_json::to_value(Plan::from(p.clone())),
            Event::Applied(a) => serde_json::to_value(Applied::from(a.clone())),
            Event::Pending(p) => {
                serde_json::to_value(switchboard_packs::plan::Pending::from(p.clone()))
            }
            _ => return None,
        };
        Some(json.expect("a typed result serializes"))
    }

    /// Reads a rule-pack stream to its typed result, which must be the stream's last event.
    pub async fn pack_result(mut stream: Streaming<pb::RulePackEvent>) -> Result<Value, Status> {
        while let Some(ev) = stream.message().await? {
            let Some(typed) = ev.event.as_ref().and_then(pack_event) else {
                continue;
            };
            let after = stream.message().await?;
            assert!(after.is_none(), "an event followed the result: {after:?}");
            return Ok(typed);
        }
        Err(Status::internal("stream ended without a result"))
    }

    /// A listing as JSON, from its typed message.
    pub fn listing(r: &pb::RulePacksResult) -> Value {
        serde_json::to_value(Listing::from(r.listing.clone().unwrap_or_default()))
            .expect("a listing serializes")
    }

    /// The configuration an agent would write, as the message a service sends (the gateway's
    /// own reading of an agent's JSON, `switchboard_proto::convert::json::parse_configuration`).
    pub fn config(v: &Value) -> Option<pb::Configuration> {
        Some(
            switchboard_proto::convert::json::parse_configuration(v)
                .unwrap_or_else(|e| panic!("{v} is not a configuration: {e}")),
        )
    }

    /// The rule patch an agent would write, as the message a service sends.
    pub fn patch(v: &Value) -> Option<pb::RulePatch> {
        Some(
            switchboard_proto::convert::json::parse_rule_patch(v)
                .unwrap_or_else(|e| panic!("{v} is not a rule patch: {e}")),
        )
    }

    /// Params as the `Struct` a pack call takes.
    pub fn params(v: &Value) -> Option<prost_types::Struct> {
        Some(switchboard_proto::convert::json::to_struct(
            v.as_object()
                .unwrap_or_else(|| panic!("{v} is not an object of params")),
        ))
    }

    /// A configuration message as the JSON text an agent reads ("" when absent).
    pub fn config_text(c: &Option<pb::Configuration>) -> String {
        c.clone()
            .map(|c| switchboard_proto::convert::json::configuration_json(c).to_string())
            .unwrap_or_default()
    }

    /// A decision message as the JSON text events carry ("" when absent).
    pub fn decision_text(d: &Option<pb::Decision>) -> String {
        d.as_ref()
            .map(|d| switchboard_proto::convert::json::decision_json(d).to_string())
            .unwrap_or_default()
    }

    /// A history change message as JSON text.
    pub fn change_text(c: &Option<pb::ConfigurationChange>) -> String {
        c.as_ref()
            .map(|c| switchboard_proto::convert::json::change_json(c).to_string())
            .unwrap_or_default()
    }

    /// Installed packs as the JSON array of their provenance.
    pub fn packs_text(p: &[pb::InstalledPack]) -> String {
        let packs: Vec<switchboard_packs::provenance::InstalledPack> =
            p.iter().cloned().map(Into::into).collect();
        serde_json::to_string(&packs).expect("provenance serializes")
    }

    /// `test_webhook_rules`' replay report as JSON, from its typed fields.
    pub fn replay_report(r: &pb::TestWebhookRulesResponse) -> Value {
        serde_json::to_value(CandidateReplay {
            report: Report::from(r.replay_report.clone().expect("a replay report")),
            minted_rule_ids: r.minted_rule_ids.clone(),
            rule_diff: r.replay_rule_diff.clone().unwrap_or_default().into(),
            nothing_saved: true,
        })
        .expect("a report serializes")
    }
}
