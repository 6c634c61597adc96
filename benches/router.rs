//! The router-plane benchmark (issue 2; results and how to read them in docs/benchmarks.md).
//!
//! 1,000 envelopes built from the real forge payloads, one 32-rule configuration in the style
//! of the built-in packs, measured four ways:
//! (a) in-process: parse the stored bytes, build the envelope, evaluate the rules;
//! (b) through a `SandboxPool` of sandbox children (1 and 2 children), one 1,000-delivery batch;
//! (c) over gRPC to a `switchboard router` process with 2 children (one call, 8 parallel calls,
//!     one streamed call (`EvaluateStream`), one and two configurations per call);
//! (d) for reference, the `jq` command line evaluating the same rules over the same envelopes.
//!
//! No criterion (build time): `Instant`, repeated runs, medians. Run it with
//! `cargo bench --workspace --bench router`; `ROUTER_BENCH_RUNS` sets the repeats (default 15),
//! `ROUTER_BENCH_PATHS` which of b, c, d to run (default all; (a) always runs),
//! `SWITCHBOARD_WEBHOOK_DATA` the payload directory, `ROUTER_BENCH_JQ` the jq binary.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt as _;
use prost::Message as _;
use serde_json::{Value, json};
use switchboard_proto::router::v1::router_client::RouterClient;
use switchboard_proto::router::v1::{
    Configuration as WireConfiguration, Decision, EvaluateRequest, EvaluateResponse, Header,
    Outcome, RoutingContext, StoredDelivery, WorkClass,
};
use switchboard_router::engine::{
    CompiledConfiguration, Configuration, Projection, build_envelope, build_envelope_reading,
};
use switchboard_router::sandbox::{Class, SandboxConfig, SandboxPool, Work};
use switchboard_testkit::router_process::RouterProcess;

/// The same allocator as the `switchboard` binary, so (a) and the children compare like for like.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ENVELOPES: usize = 1_000;
const FORGES: [&str; 3] = ["github", "gitea", "forgejo"];
const BASE_RECEIVED_AT_MS: i64 = 1_795_996_750_123;

/// The 32 rules: (id, action, expression). Pack style: trusted-actors, drop-ci-noise,
/// no-self-review and handoff-lanes, every allowlist read so a malformed one admits no one.
const RULES: [(&str, &str, &str); 32] = [
    (
        "trusted-actors--unverified",
        "drop",
        r#"$params.require_verified == true and .verified != true"#,
    ),
    (
        "drop-ci-noise--deleted",
        "drop",
        r#"$params.drop_deleted == true and .action == "deleted""#,
    ),
    (
        "drop-ci-noise--bot-actors",
        "drop",
        r#"(.payload.sender.login // "") as $login | any($params.bot_actors[]?; . == $login)"#,
    ),
    (
        "drop-ci-noise--bot-type",
        "drop",
        r#".payload.sender.type == "Bot""#,
    ),
    (
        "drop-ci-noise--bot-comments",
        "drop",
        r#".event as $e | any("issue_comment", "pull_request_comment", "pull_request_approved", "pull_request_rejected"; . == $e) and ((.payload.comment.user.login // "") | test("\\[bot\\]$"))"#,
    ),
    (
        "drop-ci-noise--ci-kinds",
        "drop",
        r#".event as $e | any($params.ci_events[]?; . == $e) and $params.keep_ci_success != true and ((.action == "completed" and ([.payload.check_run.conclusion, .payload.check_suite.conclusion, .payload.workflow_run.conclusion, .payload.workflow_job.conclusion] | index("failure") != null)) | not)"#,
    ),
    (
        "ci-failures",
        "queue:ci",
        r#"(.event | startswith("check_") or startswith("workflow_")) and .action == "completed""#,
    ),
    (
        "trusted-actors--cairn-outsider",
        "drop",
        r#".source == "cairn" and ((.payload.actor.login // "") as $l | any($params.cairn_actors[]?; . == $l) | not)"#,
    ),
    (
        "trusted-actors--untrusted-issue",
        "drop",
        r#".event == "issues" and .action == "opened" and ((.payload.sender.login // "") as $login | any($params.trusted_humans[]?, $params.trusted_agents[]?; . == $login) | not)"#,
    ),
    (
        "trusted-actors--untrusted-label",
        "drop",
        r#".action as $a | any("labeled", "unlabeled", "label_updated", "label_cleared"; . == $a) and ((.payload.sender.login // "") as $login | any($params.trusted_humans[]?; . == $login) | not)"#,
    ),
    (
        "no-self-review--request-other",
        "drop",
        r#".event == "pull_request" and .action == "review_requested" and (.payload.requested_reviewer.login // "") != $params.identity"#,
    ),
    (
        "no-self-review--own-trigger",
        "drop",
        r#".event == "pull_request" and (.action as $a | any("opened", "reopened", "synchronized", "synchronize", "edited", "ready_for_review", "review_requested"; . == $a)) and (.payload.pull_request.user.login // "") == $params.identity"#,
    ),
    (
        "no-self-review--outcome-others",
        "drop",
        r#"(.event == "pull_request_review" or .event == "pull_request_approved" or .event == "pull_request_rejected") and (.payload.pull_request.user.login // "") != $params.identity"#,
    ),
    (
        "handoff-lanes--wip-label",
        "drop",
        r#".payload.pull_request.labels // [] | map(.name) | index("wip") != null"#,
    ),
    (
        "handoff-lanes--wip-title",
        "drop",
        r#"(.payload.pull_request.title // .payload.issue.title // "") | test("^\\[?(wip|draft)\\b"; "i")"#,
    ),
    (
        "handoff-lanes--draft",
        "drop",
        r#".payload.pull_request.draft == true"#,
    ),
    (
        "handoff-lanes--security",
        "queue:ops",
        r#"(.payload.issue.labels // .payload.pull_request.labels // []) | map(.name // "") | any(.[]; test("^(security|cve)"; "i"))"#,
    ),
    (
        "handoff-lanes--hold-repo",
        "drop",
        r#"(.payload.repository.full_name // "") as $r | any($params.hold_repos[]?; . == $r)"#,
    ),
    (
        "handoff-lanes--release-push",
        "queue:forge",
        r#".event == "push" and ((.payload.ref // "") | test("^refs/(heads/release/|tags/v)"))"#,
    ),
    (
        "handoff-lanes--docs-only-push",
        "drop",
        r#".event == "push" and ((.payload.commits // []) | length > 0 and all(.[]; ((.modified // []) + (.added // []) + (.removed // [])) | length > 0 and all(.[]; test("\\.(md|txt)$"))))"#,
    ),
    (
        "handoff-lanes--merged",
        "queue:forge",
        r#".event == "pull_request" and .action == "closed" and .payload.pull_request.merged == true"#,
    ),
    (
        "handoff-lanes--mention",
        "queue:review",
        r#"(.payload.comment.body // "") | test("@switchboard\\b")"#,
    ),
    (
        "handoff-lanes--gitea-review",
        "queue:review",
        r#"(.headers["x-gitea-event-type"] // "") | startswith("pull_request_review")"#,
    ),
    (
        "handoff-lanes--bug-label",
        "queue:review",
        r#".payload.pull_request.labels // [] | map(.name) | index("bug") != null"#,
    ),
    (
        "handoff-lanes--trusted-pr",
        "queue:review",
        r#".event == "pull_request" and ((.payload.sender.login // "") as $login | any($params.trusted_humans[]?; . == $login))"#,
    ),
    (
        "handoff-lanes--large-pr",
        "queue:review",
        r#"(.payload.pull_request.changed_files // 0) > 50 or (.payload.pull_request.additions // 0) > 1000"#,
    ),
    (
        "handoff-lanes--org-hook",
        "queue:ops",
        r#".source == "github" and (.headers["x-github-hook-installation-target-type"] // "") == "organization""#,
    ),
    (
        "handoff-lanes--lane-core",
        "queue:lane-core",
        r#"(.payload.repository.full_name // "") as $r | any($params.repo_prefixes.core[]?; . as $p | $r | startswith($p))"#,
    ),
    (
        "handoff-lanes--lane-web",
        "queue:lane-web",
        r#"(.payload.repository.full_name // "") as $r | any($params.repo_prefixes.web[]?; . as $p | $r | startswith($p))"#,
    ),
    (
        "handoff-lanes--lane-ci",
        "queue:lane-ci",
        r#"(.payload.repository.full_name // "") as $r | any($params.repo_prefixes.ci[]?; . as $p | $r | startswith($p))"#,
    ),
    (
        "handoff-lanes--issues-triage",
        "queue:triage",
        r#".event == "issues" or (.event == "issue_comment" and .payload.issue.pull_request == null and .payload.is_pull != true)"#,
    ),
    (
        "handoff-lanes--private-repo",
        "queue:triage",
        r#".payload.repository.private == true"#,
    ),
];

const GRANT: [&str; 8] = [
    "triage",
    "forge",
    "review",
    "ops",
    "ci",
    "lane-core",
    "lane-web",
    "lane-ci",
];

fn action_json(action: &str) -> Value {
    let label = switchboard_model::Label::parse(action).expect("a label");
    let action = switchboard_model::Action::from_label(&label).expect("an action");
    serde_json::to_value(action).expect("an action's JSON")
}

fn params(candidate: bool) -> Value {
    let mut humans = vec!["Codertocat", "octocat", "6543", "a_nice_user", "anbraten"];
    if candidate {
        humans.push("example");
    }
    json!({
        "require_verified": true,
        "drop_deleted": true,
        "keep_ci_success": candidate,
        "bot_actors": ["dependabot[bot]", "renovate[bot]", "github-actions[bot]", "octocoders-linter[bot]"],
        "ci_events": ["check_run", "check_suite", "workflow_run", "workflow_job", "status"],
        "trusted_humans": humans,
        "trusted_agents": ["agent-one", "agent-two"],
        "cairn_actors": ["planner"],
        "identity": "octocat",
        "hold_repos": ["Octocoders/Hello-World"],
        "repo_prefixes": {
            "core": ["Codertocat/", "octo-org/"],
            "web": ["example/", "gitea/", "forgejo/"],
            "ci": ["test_it/", "a_nice_user/", "anbraten/"]
        }
    })
}

/// The saved configuration (default_action drop) or a replay's candidate (no default_action,
/// so unmatched deliveries fall to the default queue; keeps CI successes, trusts one more human).
fn configuration_json(candidate: bool) -> String {
    let rules: Vec<Value> = RULES
        .iter()
        .map(|(id, action, when)| json!({ "id": id, "when": when, "action": action_json(action) }))
        .collect();
    let mut config = json!({ "rules": rules, "params": params(candidate) });
    if !candidate {
        config["default_action"] = json!({ "drop": true });
    }
    config.to_string()
}

fn context() -> RoutingContext {
    RoutingContext {
        grant: GRANT.iter().map(|g| g.to_string()).collect(),
        trusted_actors_capability: false,
        trusted_actors: None,
    }
}

/// One real payload file.
struct Sample {
    forge: &'static str,
    event: String,
    action: Option<String>,
    is_pull: bool,
    body: Bytes,
}

fn load_samples(dir: &Path) -> Vec<Sample> {
    let mut samples = Vec::new();
    for forge in FORGES {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(forge))
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.join(forge).display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        for path in files {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .expect("file names are UTF-8")
                .to_string();
            // `<event>.<action>[.<qualifier>].json`: the kind is `<event>` or `<event>.<action>`.
            let mut parts = stem.split('.');
            let event = parts.next().expect("a file name has an event").to_string();
            let action = parts.next().map(str::to_string);
            let body = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let parsed: Value =
                serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let is_pull = parsed.get("is_pull") == Some(&Value::Bool(true))
                || parsed.pointer("/review/type").and_then(Value::as_str)
                    == Some("pull_request_comment");
            samples.push(Sample {
                forge,
                event,
                action,
                is_pull,
                body: Bytes::from(body),
            });
        }
    }
    samples
}

/// splitmix64: deterministic ids and signatures that look real and never repeat.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn guid(i: u64) -> String {
    let (a, b) = (mix(i), mix(i ^ 0xdead_beef));
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

fn hex_digest(seed: u64, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes * 2);
    let mut n = 0u64;
    while out.len() < bytes * 2 {
        let _ = write!(out, "{:016x}", mix(seed.wrapping_mul(31).wrapping_add(n)));
        n += 1;
    }
    out.truncate(bytes * 2);
    out
}

/// Gitea's fine-grained hook event type (`X-Gitea-Event-Type`) for a delivery (headers.md).
fn gitea_event_type(sample: &Sample) -> String {
    let action = sample.action.as_deref().unwrap_or("");
    let t = match (sample.event.as_str(), action) {
        ("pull_request", "assigned" | "unassigned") => "pull_request_assign",
        ("pull_request", "label_updated" | "label_cleared") => "pull_request_label",
        ("pull_request", "milestoned" | "demilestoned") => "pull_request_milestone",
        ("pull_request", "synchronized") => "pull_request_sync",
        ("pull_request", "review_requested" | "review_request_removed") => {
            "pull_request_review_request"
        }
        ("issues", "assigned" | "unassigned") => "issue_assign",
        ("issues", "label_updated" | "label_cleared") => "issue_label",
        ("issues", "milestoned" | "demilestoned") => "issue_milestone",
        ("issue_comment", _) if sample.is_pull => "pull_request_comment",
        ("pull_request_approved", _) => "pull_request_review_approved",
        ("pull_request_rejected", _) => "pull_request_review_rejected",
        ("pull_request_comment", _) => "pull_request_review_comment",
        (event, _) => event,
    };
    t.to_string()
}

fn headers(sample: &Sample, delivery_id: &str, i: u64) -> Vec<Header> {
    let mut h: Vec<(String, String)> = vec![("Content-Type".into(), "application/json".into())];
    let sha256 = hex_digest(i, 32);
    let sha1 = hex_digest(i ^ 0x5555, 20);
    match sample.forge {
        "github" => {
            let target = if i % 10 == 3 {
                "organization"
            } else {
                "repository"
            };
            h.extend([
                (
                    "User-Agent".into(),
                    format!("GitHub-Hookshot/{}", &hex_digest(7, 4)[..7]),
                ),
                ("X-GitHub-Delivery".into(), delivery_id.to_string()),
                ("X-GitHub-Event".into(), sample.event.clone()),
                ("X-GitHub-Hook-ID".into(), "421942".into()),
                (
                    "X-GitHub-Hook-Installation-Target-ID".into(),
                    "186853002".into(),
                ),
                (
                    "X-GitHub-Hook-Installation-Target-Type".into(),
                    target.into(),
                ),
                ("X-Hub-Signature".into(), format!("sha1={sha1}")),
                ("X-Hub-Signature-256".into(), format!("sha256={sha256}")),
            ]);
        }
        forge => {
            let event_type = gitea_event_type(sample);
            let mut prefixes = vec!["Gitea", "Gogs", "GitHub"];
            if forge == "forgejo" {
                prefixes.insert(0, "Forgejo");
            }
            h.push(("User-Agent".into(), "Go-http-client/1.1".into()));
            for p in prefixes {
                h.push((format!("X-{p}-Delivery"), delivery_id.to_string()));
                h.push((format!("X-{p}-Event"), sample.event.clone()));
                h.push((format!("X-{p}-Event-Type"), event_type.clone()));
                if p != "GitHub" {
                    h.push((format!("X-{p}-Signature"), sha256.clone()));
                }
            }
            h.push(("X-Hub-Signature".into(), format!("sha1={sha1}")));
            h.push(("X-Hub-Signature-256".into(), format!("sha256={sha256}")));
        }
    }
    h.into_iter()
        .map(|(name, value)| Header { name, value })
        .collect()
}

/// 1,000 stored deliveries cycling through every file of every forge; 1 in 50 unverified.
fn deliveries(samples: &[Sample]) -> Vec<StoredDelivery> {
    (0..ENVELOPES)
        .map(|i| {
            let sample = &samples[i % samples.len()];
            let i = i as u64;
            let delivery_id = guid(i);
            let kind = match &sample.action {
                Some(a) => format!("{}.{a}", sample.event),
                None => sample.event.clone(),
            };
            StoredDelivery {
                event_id: format!("evt-{i:05}"),
                source: sample.forge.to_string(),
                kind,
                headers: headers(sample, &delivery_id, i),
                // Each stored delivery has its own copy of its body, as when read from storage:
                // no path parses the same 77 cache-hot buffers over and over.
                body: Bytes::copy_from_slice(&sample.body),
                verified: i % 50 != 49,
                delivery_id,
                received_at_ms: BASE_RECEIVED_AT_MS + i as i64 * 1_500,
            }
        })
        .collect()
}

/// What a decision says, comparable across paths: the label and the deciding rule.
fn summary(d: &Decision) -> String {
    if d.rule_id.is_empty() || d.by_default_action {
        d.label().to_string()
    } else {
        format!("{} by {}", d.label(), d.rule_id)
    }
}

/// The deciding rule id, or `default` (what the jq program prints).
fn rule_or_default(d: &Decision) -> &str {
    if d.rule_id.is_empty() || d.by_default_action {
        "default"
    } else {
        &d.rule_id
    }
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn runs() -> usize {
    std::env::var("ROUTER_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(15)
}

// ---------------------------------------------------------------------------------------------
// /proc accounting: CPU time and peak memory of the processes doing the work.

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// Fields of /proc/<pid>/stat after the command name: state is [0], ppid [1], utime [11],
/// stime [12], cutime [13], cstime [14].
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

fn stat_sum(pid: u32, fields: &[usize]) -> u64 {
    stat_fields(pid)
        .map(|f| {
            fields
                .iter()
                .filter_map(|i| f.get(*i)?.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0)
}

/// Live (not zombie) child processes of `parent`, by scanning /proc for their ppid.
fn children_of(parent: u32) -> Vec<u32> {
    let parent = parent.to_string();
    let mut out: Vec<u32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| {
                    stat_fields(*pid).is_some_and(|f| f.len() > 1 && f[1] == parent && f[0] != "Z")
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Ticks the hypervisor ran something else while this machine's CPUs wanted to run
/// (`steal` in /proc/stat, every CPU together).
fn steal_ticks() -> u64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let line = s.lines().next()?.to_string();
            line.split_whitespace().nth(8)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Peak resident set (VmHWM) in KiB.
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The 1-minute load average: other work on the machine skews every number here.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Whose CPU a path is charged with.
enum Accounting {
    /// A process and its sandbox children (every thread of each).
    Processes { parent: u32, children: Vec<u32> },
    /// This process's main thread alone.
    MainThread,
    /// Short-lived processes this one waits for (cutime + cstime of this process).
    Reaped,
}

/// (time on a CPU, time runnable but waiting for a CPU) in ns, summed over every thread of
/// `pid` (/proc/<pid>/task/*/schedstat): exact, where /proc/<pid>/stat counts 10 ms ticks.
fn sched_ns(pid: u32) -> (u64, u64) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return (0, 0);
    };
    let mut total = (0, 0);
    for task in tasks.filter_map(Result::ok) {
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        let mut f = text
            .split_whitespace()
            .map(|v| v.parse::<u64>().unwrap_or(0));
        total.0 += f.next().unwrap_or(0);
        total.1 += f.next().unwrap_or(0);
    }
    total
}

impl Accounting {
    /// So far: holder CPU ns, children CPU ns, holder minor faults, children minor faults,
    /// ns all of them spent runnable but waiting for a CPU, and — when the holder is another
    /// process (the router of (c)) — this bench process's CPU ns: the load generator's share
    /// of the same cores.
    fn sample(&self, ticks: f64) -> [u64; 6] {
        match self {
            Accounting::Processes { parent, children } => {
                let holder = sched_ns(*parent);
                let kids: Vec<(u64, u64)> = children.iter().map(|c| sched_ns(*c)).collect();
                [
                    holder.0,
                    kids.iter().map(|k| k.0).sum(),
                    stat_sum(*parent, &[7]),
                    children.iter().map(|c| stat_sum(*c, &[7])).sum(),
                    holder.1 + kids.iter().map(|k| k.1).sum::<u64>(),
                    if *parent == std::process::id() {
                        0
                    } else {
                        sched_ns(std::process::id()).0
                    },
                ]
            }
            Accounting::MainThread => {
                let me = std::process::id();
                let text = std::fs::read_to_string(format!("/proc/{me}/task/{me}/schedstat"))
                    .unwrap_or_default();
                let mut f = text
                    .split_whitespace()
                    .map(|v| v.parse::<u64>().unwrap_or(0));
                let (cpu, wait) = (f.next().unwrap_or(0), f.next().unwrap_or(0));
                [cpu, 0, stat_sum(me, &[7]), 0, wait, 0]
            }
            Accounting::Reaped => {
                let me = std::process::id();
                let cpu = stat_sum(me, &[13, 14]) as f64 / ticks * 1e9;
                [0, cpu as u64, 0, stat_sum(me, &[8]), 0, 0]
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Timed paths: each run is one whole pass over the 1,000 deliveries.

struct Timed<'a> {
    name: String,
    /// Cores the path can keep busy (its children, at most the machine's cores).
    cores: usize,
    /// The in-process path this one is compared with, and the target ratio (0: none).
    baseline: Option<(usize, f64)>,
    accounting: Accounting,
    run: Box<dyn FnMut() + 'a>,
    times: Vec<Duration>,
    /// Per timed run, what `Accounting::sample` counts.
    samples: Vec<[u64; 6]>,
    /// Steal ticks over every timed run.
    steal: u64,
}

impl<'a> Timed<'a> {
    fn new(
        name: String,
        cores: usize,
        baseline: Option<(usize, f64)>,
        accounting: Accounting,
        run: impl FnMut() + 'a,
    ) -> Self {
        Self {
            name,
            cores,
            baseline,
            accounting,
            run: Box::new(run),
            times: Vec::new(),
            samples: Vec::new(),
            steal: 0,
        }
    }

    fn run_once(&mut self, ticks: f64) {
        let before = self.accounting.sample(ticks);
        let steal = steal_ticks();
        let t = Instant::now();
        (self.run)();
        self.times.push(t.elapsed());
        self.steal += steal_ticks().saturating_sub(steal);
        let after = self.accounting.sample(ticks);
        self.samples
            .push(std::array::from_fn(|i| after[i].saturating_sub(before[i])));
    }

    /// The median over the timed runs of `f(sample)`, per envelope.
    fn median_per_envelope(&self, f: impl Fn(&[u64; 6]) -> u64) -> f64 {
        let mut xs: Vec<u64> = self.samples.iter().map(f).collect();
        xs.sort_unstable();
        xs.get(xs.len() / 2).copied().unwrap_or(0) as f64 / ENVELOPES as f64
    }

    fn wall_us(&self) -> f64 {
        median(self.times.clone()).as_secs_f64() * 1e6 / ENVELOPES as f64
    }

    /// Wall time times the cores the path occupies: what one envelope costs a core.
    fn core_us(&self) -> f64 {
        self.wall_us() * self.cores as f64
    }

    /// (holder, children) CPU µs per envelope, medians over the timed runs.
    fn cpu_split(&self) -> (f64, f64) {
        (
            self.median_per_envelope(|s| s[0]) / 1e3,
            self.median_per_envelope(|s| s[1]) / 1e3,
        )
    }

    /// CPU µs per envelope of every process doing the work, median over the timed runs.
    fn cpu_us(&self) -> f64 {
        self.median_per_envelope(|s| s[0] + s[1]) / 1e3
    }

    /// µs per envelope the hypervisor took the machine's CPUs away (mean, 10 ms ticks).
    fn steal_us(&self, ticks: f64) -> f64 {
        self.steal as f64 / ticks * 1e6 / (self.times.len() * ENVELOPES) as f64
    }

    /// CPU µs per envelope of the bench process itself while it drove a router process
    /// (the load generator of (c)); 0 for the other paths.
    fn load_generator_us(&self) -> f64 {
        self.median_per_envelope(|s| s[5]) / 1e3
    }

    /// µs per envelope the path's processes were runnable but had no CPU (median).
    fn waited_us(&self) -> f64 {
        self.median_per_envelope(|s| s[4]) / 1e3
    }

    /// (holder, children) minor page faults per envelope (medians).
    fn faults(&self) -> (f64, f64) {
        (
            self.median_per_envelope(|s| s[2]),
            self.median_per_envelope(|s| s[3]),
        )
    }
}

fn print_table(paths: &[Timed], ticks: f64) {
    println!();
    println!(
        "| path | µs/envelope (wall, median) | envelopes/s | cores | core-µs/envelope | envelopes/s per core | CPU µs/envelope | vs (a) core-µs | vs (a) CPU | target |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for p in paths {
        let (ratio, cpu_ratio, target) = match p.baseline {
            Some((b, target)) => {
                let base = &paths[b];
                let ratio = p.core_us() / base.core_us();
                let cpu_ratio = p.cpu_us() / base.cpu_us();
                let judge = |r: f64| {
                    if r <= target {
                        "met".to_string()
                    } else {
                        format!("missed by {:.0} %", (r / target - 1.0) * 100.0)
                    }
                };
                let verdict = if target <= 0.0 {
                    String::new()
                } else {
                    format!(
                        "≤ {target}×: core-µs {}, CPU {}",
                        judge(ratio),
                        judge(cpu_ratio)
                    )
                };
                (format!("{ratio:.2}×"), format!("{cpu_ratio:.2}×"), verdict)
            }
            None => ("1.00×".into(), "1.00×".into(), "baseline".into()),
        };
        println!(
            "| {} | {:.1} | {:.0} | {} | {:.1} | {:.0} | {:.1} | {} | {} | {} |",
            p.name,
            p.wall_us(),
            1e6 / p.wall_us(),
            p.cores,
            p.core_us(),
            1e6 / p.core_us(),
            p.cpu_us(),
            ratio,
            cpu_ratio,
            target
        );
    }
    println!();
    println!(
        "| path | CPU µs/envelope: bench process or router | CPU µs/envelope: sandbox children or jq | CPU µs/envelope: load generator (the bench, driving (c)) | waiting for a CPU µs/envelope | stolen by the hypervisor µs/envelope | minor faults/envelope: holder, children |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for p in paths {
        let (holder, children) = p.cpu_split();
        let (holder_faults, children_faults) = p.faults();
        println!(
            "| {} | {holder:.1} | {children:.1} | {:.1} | {:.1} | {:.1} | {holder_faults:.1}, {children_faults:.1} |",
            p.name,
            p.load_generator_us(),
            p.waited_us(),
            p.steal_us(ticks)
        );
    }
    println!();
}

fn check_decisions(
    path: &str,
    got: &EvaluateResponse,
    want: &[Vec<Decision>],
    deliveries: &[StoredDelivery],
) {
    assert_eq!(
        got.results.len(),
        deliveries.len(),
        "{path}: one result per delivery"
    );
    let mut mismatches = 0;
    for ((r, w), d) in got.results.iter().zip(want).zip(deliveries) {
        assert_eq!(
            r.event_id, d.event_id,
            "{path}: results come back in request order"
        );
        let got: Vec<String> = r.decisions.iter().map(summary).collect();
        let want: Vec<String> = w.iter().map(summary).collect();
        if got != want {
            if mismatches < 5 {
                eprintln!(
                    "{path}: {} decided {got:?}, in-process {want:?}",
                    r.event_id
                );
            }
            mismatches += 1;
        }
    }
    assert_eq!(
        mismatches, 0,
        "{path}: decisions differ from in-process on {mismatches} deliveries"
    );
}

// ---------------------------------------------------------------------------------------------
// (b) sandbox children in this process's pool; (c) a router process over gRPC.

fn switchboard_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_switchboard"))
}

/// Starts a pool of `children`, runs one batch so every child is spawned and has compiled the
/// configurations, and returns it with the pids of its children.
fn start_pool(
    rt: &tokio::runtime::Runtime,
    children: usize,
    ctx: &RoutingContext,
    configs: &[WireConfiguration],
    deliveries: &[StoredDelivery],
    want: &[Vec<Decision>],
) -> (Arc<SandboxPool>, Vec<u32>) {
    let me = std::process::id();
    let before = children_of(me);
    let mut config = SandboxConfig::new(switchboard_exe());
    config.children = children;
    // Exactly `children` working children: no idle spare beside them.
    config.spares = 0;
    let pool = rt
        .block_on(SandboxPool::start(config))
        .expect("the sandbox pool starts (confined)");
    let warm = rt
        .block_on(pool.evaluate_as(ctx, configs, deliveries, &live()))
        .expect("the warm-up batch evaluates");
    check_decisions(
        &format!("(b) {children} children, {} configs", configs.len()),
        &warm,
        want,
        deliveries,
    );
    let kids: Vec<u32> = children_of(me)
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert_eq!(kids.len(), children, "every child of the pool is running");
    (pool, kids)
}

type Client = RouterClient<tonic::transport::Channel>;

/// Ingest's work: what (b) and (c) measure, on children at the router's own priority.
fn live() -> Work {
    Work {
        class: Some(Class::Live),
        ..Work::default()
    }
}

/// The deliveries in `calls` Evaluate calls made at once; the results in request order.
async fn grpc_batch(
    client: &Client,
    ctx: &RoutingContext,
    configs: &[WireConfiguration],
    deliveries: &[StoredDelivery],
    calls: usize,
) -> EvaluateResponse {
    let per_call = deliveries.len().div_ceil(calls);
    let handles: Vec<_> = deliveries
        .chunks(per_call)
        .map(|chunk| {
            let req = EvaluateRequest {
                context: Some(ctx.clone()),
                configurations: configs.to_vec(),
                deliveries: chunk.to_vec(),
                budget_ms: 0,
                work_class: WorkClass::Live as i32,
                ..Default::default()
            };
            let mut client = client.clone();
            tokio::spawn(async move { client.evaluate(req).await })
        })
        .collect();
    let mut all = EvaluateResponse::default();
    for h in handles {
        let resp = h
            .await
            .expect("the call task completes")
            .expect("Evaluate succeeds")
            .into_inner();
        all.results.extend(resp.results);
    }
    all
}

/// Deliveries per message of the streamed call (`EvaluateStream`): the size of control's
/// replay calls.
const STREAM_PART: usize = 100;

/// The deliveries in one `EvaluateStream` call, `STREAM_PART` per message, each message
/// sent as soon as it is built: children start on the first part while the rest is encoded.
async fn grpc_streamed(
    client: &Client,
    ctx: &RoutingContext,
    configs: &[WireConfiguration],
    deliveries: &[StoredDelivery],
) -> EvaluateResponse {
    let (ctx, configs, deliveries) = (ctx.clone(), configs.to_vec(), deliveries.to_vec());
    let parts = futures::stream::iter(0..deliveries.len().div_ceil(STREAM_PART)).map(move |i| {
        let part =
            deliveries[i * STREAM_PART..((i + 1) * STREAM_PART).min(deliveries.len())].to_vec();
        if i == 0 {
            EvaluateRequest {
                context: Some(ctx.clone()),
                configurations: configs.clone(),
                deliveries: part,
                work_class: WorkClass::Live as i32,
                ..Default::default()
            }
        } else {
            EvaluateRequest {
                deliveries: part,
                ..Default::default()
            }
        }
    });
    client
        .clone()
        .evaluate_stream(parts)
        .await
        .expect("EvaluateStream succeeds")
        .into_inner()
}

/// The transport alone: 1,000 deliveries sent in one call that the router refuses right after
/// decoding it (no configuration), so no child sees them.
async fn grpc_transfer_only(client: &Client, ctx: &RoutingContext, deliveries: &[StoredDelivery]) {
    let req = EvaluateRequest {
        context: Some(ctx.clone()),
        configurations: Vec::new(),
        deliveries: deliveries.to_vec(),
        budget_ms: 0,
        ..Default::default()
    };
    let status = client
        .clone()
        .evaluate(req)
        .await
        .expect_err("a request without configurations is refused");
    assert_eq!(
        status.code(),
        tonic::Code::InvalidArgument,
        "refused as invalid: {status}"
    );
}

// ---------------------------------------------------------------------------------------------
// (d) the jq command line.

/// `first(( ["id", (when)], … ) | select(.[1] == true) | .[0]) // "default"`: the first rule
/// whose output is `true`, as the engine decides (every rule here has exactly one output).
fn jq_program() -> String {
    let mut p = String::from("first((\n");
    for (i, (id, _, when)) in RULES.iter().enumerate() {
        let sep = if i + 1 == RULES.len() { "" } else { "," };
        let _ = writeln!(p, "  [{}, ({when})]{sep}", json!(id));
    }
    p.push_str(") | select(.[1] == true) | .[0]) // \"default\"\n");
    p
}

/// The jq command over the envelopes, written as JSON lines, with the saved params.
fn jq_command(jq: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(jq);
    cmd.arg("-r")
        .arg("--argjson")
        .arg("params")
        .arg(params(false).to_string())
        .arg("-f")
        .arg(dir.join("rules.jq"))
        .arg(dir.join("envelopes.jsonl"))
        .stderr(Stdio::inherit());
    cmd
}

/// Writes the envelopes and the program, and checks jq decides as the engine does.
fn prepare_jq(
    jq: &Path,
    dir: &Path,
    ctx: &RoutingContext,
    deliveries: &[StoredDelivery],
    want: &[Vec<Decision>],
) {
    let mut lines = String::new();
    for d in deliveries {
        // The very envelope the engine sees, written as JSON.
        let _ = writeln!(lines, "{}", build_envelope(d, ctx));
    }
    std::fs::write(dir.join("envelopes.jsonl"), lines).expect("the envelopes are written");
    std::fs::write(dir.join("rules.jq"), jq_program()).expect("the jq program is written");
    let out = jq_command(jq, dir).output().expect("jq runs");
    assert!(out.status.success(), "jq failed: {}", out.status);
    let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(
        got.len(),
        deliveries.len(),
        "jq prints one decision per envelope"
    );
    let differ = got
        .iter()
        .zip(want)
        .filter(|(g, w)| g.as_str() != rule_or_default(&w[0]))
        .count();
    assert_eq!(
        differ, 0,
        "jq and the engine disagree on {differ} envelopes"
    );
}

// ---------------------------------------------------------------------------------------------

fn main() {
    // `cargo bench` passes `--bench`; libtest's filters and `--list` mean nothing here.
    if std::env::args().any(|a| a == "--list") {
        println!("router: bench");
        return;
    }
    let data = switchboard_testkit::payloads_dir::webhooks_dir();
    if !data.join("github").is_dir() {
        println!(
            "router bench skipped: no payloads at {} (set SWITCHBOARD_WEBHOOK_DATA)",
            data.display()
        );
        return;
    }
    let runs = runs();
    let ticks = clock_ticks();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let wanted = std::env::var("ROUTER_BENCH_PATHS").unwrap_or_else(|_| "abcd".into());
    let samples = load_samples(&data);
    let deliveries = deliveries(&samples);
    let body_bytes: usize = deliveries.iter().map(|d| d.body.len()).sum();
    println!(
        "router bench: {} envelopes from {} payload files ({:.1} MiB of bodies), {} rules, {runs} interleaved rounds, {cores} cores",
        deliveries.len(),
        samples.len(),
        body_bytes as f64 / (1024.0 * 1024.0),
        RULES.len()
    );
    println!("load average (1 min) at start: {}", load_average());
    let ctx = context();
    let saved_json = configuration_json(false);
    let candidate_json = configuration_json(true);

    // Compile in-process and check: it compiles, and no rule faults on any real payload.
    let t = Instant::now();
    let saved = CompiledConfiguration::compile(
        &Configuration::from_json(&saved_json).expect("the configuration parses"),
    )
    .expect("the configuration compiles");
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let candidate = CompiledConfiguration::compile(
        &Configuration::from_json(&candidate_json).expect("the candidate parses"),
    )
    .expect("the candidate compiles");
    println!(
        "compiling {} rules in-process: {compile_ms:.1} ms",
        saved.rules.len()
    );
    let want: Vec<Vec<Decision>> = deliveries
        .iter()
        .map(|d| {
            let envelope = build_envelope(d, &ctx);
            vec![
                saved.evaluate(&ctx, &envelope),
                candidate.evaluate(&ctx, &envelope),
            ]
        })
        .collect();
    let want_saved: Vec<Vec<Decision>> = want.iter().map(|w| vec![w[0].clone()]).collect();
    for (which, j) in [("saved", 0), ("candidate", 1)] {
        let mut by_label: BTreeMap<String, usize> = BTreeMap::new();
        let mut faults = Vec::new();
        for (d, w) in deliveries.iter().zip(&want) {
            *by_label.entry(summary(&w[j])).or_default() += 1;
            if w[j].outcome == Outcome::Fault as i32 {
                faults.push(format!(
                    "{} ({}): {} {}",
                    d.event_id, d.kind, w[j].rule_id, w[j].reason
                ));
            }
        }
        println!("decision distribution, {which} configuration:");
        for (l, n) in &by_label {
            println!("  {n:5}  {l}");
        }
        assert!(
            faults.is_empty(),
            "rules fault on real payloads:\n{}",
            faults.join("\n")
        );
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores.max(2))
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let saved_wire = vec![WireConfiguration::text(saved_json.clone())];
    let both_wire = vec![
        WireConfiguration::text(saved_json.clone()),
        WireConfiguration::text(candidate_json),
    ];
    let me = std::process::id();
    let mut notes = Vec::new();

    // What both configurations read (declared before the paths that borrow it).
    let both_reads = Projection::union([saved.reads(), candidate.reads()]);
    // Everything is started and checked first; then the paths are timed in interleaved rounds,
    // so load from elsewhere on the machine falls on every path alike.
    let mut paths: Vec<Timed> = Vec::new();
    let (ctx, deliveries) = (&ctx, &deliveries);
    let (saved, candidate) = (&saved, &candidate);

    // (a) in-process, building the envelope as far as the configurations read, as a sandbox
    // child does (the decisions checked above came from whole envelopes).
    let (saved_reads, both_reads) = (saved.reads(), &both_reads);
    let in_process = || Accounting::Processes {
        parent: me,
        children: Vec::new(),
    };
    paths.push(Timed::new(
        "(a) in-process, parse + build whole envelope only".into(),
        1,
        Some((1, 0.0)),
        in_process(),
        move || {
            for d in deliveries {
                black_box(build_envelope(d, ctx));
            }
        },
    ));
    paths.push(Timed::new(
        "(a) in-process, 1 config, whole envelope".into(),
        1,
        Some((3, 0.0)),
        in_process(),
        move || {
            for d in deliveries {
                let envelope = build_envelope(d, ctx);
                black_box(saved.evaluate(ctx, &envelope));
            }
        },
    ));
    paths.push(Timed::new(
        "(a) in-process, parse + build envelope only".into(),
        1,
        Some((3, 0.0)),
        in_process(),
        move || {
            for d in deliveries {
                black_box(build_envelope_reading(d, ctx, saved_reads));
            }
        },
    ));
    paths.push(Timed::new(
        "(a) in-process, 1 config".into(),
        1,
        None,
        in_process(),
        move || {
            for d in deliveries {
                let envelope = build_envelope_reading(d, ctx, saved_reads);
                black_box(saved.evaluate(ctx, &envelope));
            }
        },
    ));
    let a1 = paths.len() - 1;
    paths.push(Timed::new(
        "(a) in-process, 2 configs (replay)".into(),
        1,
        Some((a1, 0.0)),
        in_process(),
        move || {
            for d in deliveries {
                let envelope = build_envelope_reading(d, ctx, both_reads);
                black_box(saved.evaluate(ctx, &envelope));
                black_box(candidate.evaluate(ctx, &envelope));
            }
        },
    ));
    let a2 = paths.len() - 1;
    paths.push(Timed::new(
        "(a) in-process, 1 config, the other core busy with the same work".into(),
        1,
        Some((a1, 0.0)),
        Accounting::MainThread,
        move || {
            // What one core does while the other is busy too, as with two children: on this
            // machine a second busy core slows the first one down.
            let stop = AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        for d in deliveries.iter().rev() {
                            if stop.load(Ordering::Relaxed) {
                                break;
                            }
                            let envelope = build_envelope_reading(d, ctx, saved_reads);
                            black_box(saved.evaluate(ctx, &envelope));
                        }
                    }
                });
                for d in deliveries {
                    let envelope = build_envelope_reading(d, ctx, saved_reads);
                    black_box(saved.evaluate(ctx, &envelope));
                }
                stop.store(true, Ordering::Relaxed);
            });
        },
    ));

    // (b) sandbox children.
    let mut pools = Vec::new();
    let shared: Arc<Vec<StoredDelivery>> = Arc::new(deliveries.clone());
    if wanted.contains('b') {
        for (children, configs, want_b, base) in [
            (1usize, &saved_wire, &want_saved, a1),
            (2, &saved_wire, &want_saved, a1),
            (2, &both_wire, &want, a2),
        ] {
            let (pool, kids) = start_pool(&rt, children, ctx, configs, deliveries, want_b);
            pools.push((pool.clone(), kids.clone(), children, configs.len()));
            let (rt, shared) = (&rt, shared.clone());
            paths.push(Timed::new(
                format!(
                    "(b) sandbox pool, {children} {}, {} config{}",
                    if children == 1 { "child" } else { "children" },
                    configs.len(),
                    if configs.len() == 1 { "" } else { "s" }
                ),
                children.min(cores),
                Some((base, 1.3)),
                Accounting::Processes {
                    parent: me,
                    children: kids,
                },
                move || {
                    // On a runtime worker, as the router's Evaluate handler runs it.
                    let (pool, ctx, configs, deliveries) =
                        (pool.clone(), ctx.clone(), configs.clone(), shared.clone());
                    let batch = rt.spawn(async move {
                        pool.evaluate_as(&ctx, &configs, &deliveries, &live()).await
                    });
                    black_box(
                        rt.block_on(batch)
                            .expect("the batch task completes")
                            .expect("the batch evaluates"),
                    );
                },
            ));
        }
    }

    // (c) gRPC to a router process with 2 children.
    let router = wanted.contains('c').then(|| {
        RouterProcess::start(
            &switchboard_exe(),
            &["--children", "2", "--spare-children", "0"],
        )
    });
    if let Some(router) = &router {
        let client: Client = rt.block_on(async {
            let channel = tonic::transport::Channel::from_shared(format!("http://{}", router.addr))
                .expect("a valid endpoint")
                .initial_stream_window_size(Some(8 * 1024 * 1024))
                .initial_connection_window_size(Some(16 * 1024 * 1024))
                .connect()
                .await
                .expect("the router accepts connections");
            RouterClient::new(channel)
                .max_decoding_message_size(256 * 1024 * 1024)
                .max_encoding_message_size(256 * 1024 * 1024)
        });
        for (configs, want_c) in [(&saved_wire, &want_saved), (&both_wire, &want)] {
            for calls in [1usize, 8] {
                let warm = rt.block_on(grpc_batch(&client, ctx, configs, deliveries, calls));
                check_decisions(
                    &format!("(c) {calls} calls × {} configs", configs.len()),
                    &warm,
                    want_c,
                    deliveries,
                );
            }
        }
        for (configs, want_c) in [(&saved_wire, &want_saved), (&both_wire, &want)] {
            let warm = rt.block_on(grpc_streamed(&client, ctx, configs, deliveries));
            check_decisions(
                &format!("(c) 1 streamed call × {} configs", configs.len()),
                &warm,
                want_c,
                deliveries,
            );
        }
        // Both children exist once a batch has run on two chunks at once.
        let kids = children_of(router.pid());
        println!(
            "(c) router pid {} at {}, children {kids:?}",
            router.pid(),
            router.addr
        );
        for (configs, base) in [(&saved_wire, a1), (&both_wire, a2)] {
            // 1 call, 8 calls at once, or 1 streamed call (`None`).
            for calls in [Some(1usize), Some(8), None] {
                let shape = match calls {
                    Some(1) => "1 call × 1,000".to_string(),
                    Some(calls) => format!("{calls} calls × {}", ENVELOPES / calls),
                    None => format!("1 streamed call × 1,000 ({STREAM_PART} per message)"),
                };
                let (rt, client) = (&rt, client.clone());
                paths.push(Timed::new(
                    format!(
                        "(c) gRPC router, 2 children, {shape}, {} config{}",
                        configs.len(),
                        if configs.len() == 1 { "" } else { "s" }
                    ),
                    2.min(cores),
                    Some((base, 1.6)),
                    Accounting::Processes {
                        parent: router.pid(),
                        children: kids.clone(),
                    },
                    move || {
                        black_box(rt.block_on(async {
                            match calls {
                                Some(calls) => {
                                    grpc_batch(&client, ctx, configs, deliveries, calls).await
                                }
                                None => grpc_streamed(&client, ctx, configs, deliveries).await,
                            }
                        }));
                    },
                ));
            }
        }
        let (rt, client) = (&rt, client.clone());
        paths.push(Timed::new(
            "(c) transport alone: 1 call × 1,000 refused after decoding".into(),
            1,
            Some((a1, 0.0)),
            Accounting::Processes {
                parent: router.pid(),
                children: Vec::new(),
            },
            move || rt.block_on(grpc_transfer_only(&client, ctx, deliveries)),
        ));
        let encoded = EvaluateRequest {
            context: Some(ctx.clone()),
            configurations: saved_wire.clone(),
            deliveries: deliveries.clone(),
            budget_ms: 0,
            ..Default::default()
        }
        .encoded_len();
        notes.push(format!(
            "(c) one 1,000-delivery EvaluateRequest is {:.1} MiB encoded",
            encoded as f64 / (1024.0 * 1024.0)
        ));
    }

    // (d) the jq command line, for reference.
    let jq = std::env::var_os("ROUTER_BENCH_JQ")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/usr/bin/jq".into());
    let jq_dir = tempfile::tempdir().expect("a temporary directory");
    if !wanted.contains('d') {
        // Not asked for.
    } else if jq.exists() {
        let version = Command::new(&jq)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        prepare_jq(&jq, jq_dir.path(), ctx, deliveries, &want);
        let (jq, dir) = (jq.clone(), jq_dir.path().to_path_buf());
        paths.push(Timed::new(
            format!("(d) {version} CLI, one process over the stream"),
            1,
            Some((a1, 0.0)),
            Accounting::Reaped,
            move || {
                let out = jq_command(&jq, &dir).output().expect("jq runs");
                assert!(out.status.success(), "jq failed: {}", out.status);
            },
        ));
    } else {
        println!(
            "(d) skipped: no jq at {} (set ROUTER_BENCH_JQ)",
            jq.display()
        );
    }

    // The rounds: every path once per round, in a new shuffled order each round, so no path
    // always runs right after the same one (what ran just before shows in the numbers here).
    for round in 0..runs {
        let mut order: Vec<usize> = (0..paths.len()).collect();
        order.sort_by_key(|k| mix(((round as u64) << 32) | *k as u64));
        for k in order {
            paths[k].run_once(ticks);
        }
    }
    println!("load average (1 min) at end: {}", load_average());

    print_table(&paths, ticks);
    for (_, kids, children, configs) in &pools {
        let list: Vec<String> = kids
            .iter()
            .map(|p| {
                format!(
                    "pid {p}: {}",
                    vm_hwm_kib(*p).map(mib).unwrap_or_else(|| "?".into())
                )
            })
            .collect();
        notes.push(format!(
            "(b) pool of {children} ({configs} config): children VmHWM {}",
            list.join(", ")
        ));
    }
    if let Some(router) = &router {
        let kids: Vec<String> = children_of(router.pid())
            .iter()
            .map(|p| {
                format!(
                    "pid {p}: {}",
                    vm_hwm_kib(*p).map(mib).unwrap_or_else(|| "?".into())
                )
            })
            .collect();
        notes.push(format!(
            "(c) router process VmHWM: {}; its children: {}",
            vm_hwm_kib(router.pid())
                .map(mib)
                .unwrap_or_else(|| "?".into()),
            kids.join(", ")
        ));
    }
    for note in &notes {
        println!("{note}");
    }
    if let Some(d) = paths.iter().position(|p| p.name.starts_with("(d)")) {
        println!();
        for p in paths.iter().filter(|p| p.name.starts_with("(c) gRPC")) {
            println!(
                "(c) vs (d): {}: {:.2}× jq's wall time per envelope, {:.2}× per core",
                p.name,
                p.wall_us() / paths[d].wall_us(),
                p.core_us() / paths[d].core_us()
            );
        }
    }
    drop(pools);
    drop(router);
}
