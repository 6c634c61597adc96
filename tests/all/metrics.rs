//! Issue 21 item 5 through the real binary: Prometheus `/metrics` on a listener of its own,
//! scraped and read by a Prometheus text-format parser while deliveries flow; the backlog
//! gauges move with the work, and ingest's histogram gives quantiles a dashboard can read.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde_json::json;

use crate::cli::{Process, up_lines};
use crate::console::tool;
use crate::control_harness::{http_raw, post, signed};
use crate::support::payload;

/// One sample of the text format: its name, labels and value (a histogram's buckets one
/// sample each, `<name>_bucket` with its `le`, as the text has them).
#[derive(Clone, Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Histograms by name: each bucket's `(upper bound, cumulative count)`.
type Histograms = BTreeMap<String, Vec<(f64, f64)>>;

/// Reads the page with a Prometheus text-format parser (`openmetrics-parser`, which checks
/// the grammar: a malformed line fails the test) and flattens it to samples as the text has
/// them; the histograms also as their buckets, `(upper bound, cumulative count)` summed over
/// their series, by name.
fn parse(text: &str) -> (Vec<Sample>, Histograms) {
    use openmetrics_parser::PrometheusValue;
    let exposition = openmetrics_parser::prometheus::parse_prometheus(text)
        .unwrap_or_else(|e| panic!("not the Prometheus text format: {e:?}\n{text}"));
    let mut samples = Vec::new();
    let mut histograms = BTreeMap::new();
    for (name, family) in &exposition.families {
        for s in family.iter_samples() {
            let labels: BTreeMap<String, String> = s
                .get_labelset()
                .expect("labels")
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mut push = |name: String, labels: BTreeMap<String, String>, value| {
                samples.push(Sample {
                    name,
                    labels,
                    value,
                })
            };
            match &s.value {
                PrometheusValue::Unknown(v) | PrometheusValue::Gauge(v) => {
                    push(name.clone(), labels, v.as_f64());
                }
                PrometheusValue::Counter(c) => push(name.clone(), labels, c.value.as_f64()),
                PrometheusValue::Histogram(h) => {
                    let buckets: Vec<(f64, f64)> = h
                        .buckets
                        .iter()
                        .map(|b| (b.upper_bound, b.count.as_f64()))
                        .collect();
                    for (bound, count) in &buckets {
                        let mut labels = labels.clone();
                        let le = if bound.is_infinite() {
                            "+Inf".to_string()
                        } else {
                            bound.to_string()
                        };
                        labels.insert("le".into(), le);
                        push(format!("{name}_bucket"), labels, *count);
                    }
                    let sum = h.sum.as_ref().map_or(0.0, |n| n.as_f64());
                    push(format!("{name}_sum"), labels.clone(), sum);
                    let count = h.count.unwrap_or_default() as f64;
                    push(format!("{name}_count"), labels.clone(), count);
                    // Summed over the series by bound, as `sum by (le)` does.
                    let merged: &mut Vec<(f64, f64)> = histograms.entry(name.clone()).or_default();
                    for (bound, count) in buckets {
                        match merged.iter_mut().find(|(b, _)| *b == bound) {
                            Some((_, sum)) => *sum += count,
                            None => merged.push((bound, count)),
                        }
                    }
                }
                PrometheusValue::Summary(_) => panic!("{name}: no summary is exported"),
            }
        }
    }
    (samples, histograms)
}

/// The `q` quantile of a histogram's cumulative buckets, as Prometheus'
/// `histogram_quantile` reads it: linear within the bucket the rank falls in. `None` when the
/// histogram is empty or the rank falls in the `+Inf` bucket (no bound to read).
fn quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let mut buckets = buckets.to_vec();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(bound, count) in &buckets {
        if count >= rank {
            if bound.is_infinite() {
                return None;
            }
            let within = count - below;
            let share = if within > 0.0 {
                (rank - below) / within
            } else {
                1.0
            };
            return Some(lower + (bound - lower) * share);
        }
        lower = bound;
        below = count;
    }
    None
}

/// The sum of `name`'s samples whose labels include `with`.
fn total(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            with.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let r = http_raw(addr, head.into_bytes(), Vec::new()).await;
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

async fn scrape(addr: SocketAddr) -> Vec<Sample> {
    let (status, text) = get(addr, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    parse(&text).0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_scraped_and_the_backlog_gauges_move_with_the_work() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let env = [
        ("SWITCHBOARD_DATA_DIR", data.to_str().expect("utf-8 path")),
        ("SWITCHBOARD_HTTP_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_GRPC_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_MCP_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_ROUTER_CHILDREN", "1"),
    ];
    let mut up = Process::spawn(&["up"], &env);
    let lines = up_lines(&mut up);
    let metrics: SocketAddr = up
        .line("metrics url: ")
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .parse()
        .expect("the metrics address");
    let ingest: SocketAddr = lines
        .ingest_url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .expect("the ingest address");

    // The change log's head (issue 47), as `up` printed it: seq the value, hash the attribute.
    let head = up.line("change log head: ");
    let (seq, hash) = head.split_once(' ').expect("seq and hash");
    let before = scrape(metrics).await;
    assert_eq!(
        total(&before, "switchboard_change_log_head", &[("hash", hash)]),
        seq.parse::<f64>().expect("a seq"),
        "{before:?}"
    );
    // Issue 49: the series operators alert on are on the page from the start, at zero for
    // each of their label values, and no label repeats the one meter's name on every sample.
    let present =
        |name: &str, label: &str, values: &[&str]| {
            for value in values {
                assert!(
                    before.iter().any(|s| s.name == name
                        && s.labels.get(label).map(String::as_str) == Some(value)),
                    "{name}{{{label}=\"{value}\"}} is not on a fresh page"
                );
            }
        };
    use switchboard_telemetry::metrics as m;
    present(
        "switchboard_sandbox_child_restarts_total",
        "reason",
        &m::CHILD_RESTART_REASONS,
    );
    present(
        "switchboard_ingest_refusals_total",
        "reason",
        &m::INGEST_REFUSAL_REASONS,
    );
    present(
        "switchboard_retention_purged_total",
        "what",
        &m::RETENTION_PURGES,
    );
    present(
        "switchboard_ingest_stored_total",
        "how",
        &m::INGEST_STORED_HOW,
    );
    present(
        "switchboard_guard_breaches_total",
        "outcome",
        &m::GUARD_BREACH_OUTCOMES,
    );
    present("switchboard_plan_confirms_total", "outcome", &["applied"]);
    present(
        "switchboard_trial_evaluations_total",
        "where",
        &m::TRIAL_EVALUATION_PLACES,
    );
    present(
        "switchboard_ingest_deliveries_total",
        "decision",
        &switchboard_control::ingest::delivery_decisions(),
    );
    present(
        "switchboard_guard_recovered_total",
        "state",
        &switchboard_model::guard::RecoveryState::ALL.map(|s| s.as_str()),
    );
    // A label that could only ever say one thing is no label (the replay's old `kind`).
    assert!(
        before
            .iter()
            .any(|s| s.name == "switchboard_replay_truncations_total" && s.labels.is_empty()),
        "{before:?}"
    );
    assert!(
        before
            .iter()
            .any(|s| s.name == "switchboard_routing_ejections_total"),
        "{before:?}"
    );
    assert_eq!(
        total(&before, "switchboard_ingest_refusals_total", &[]),
        0.0
    );
    assert!(
        before
            .iter()
            .all(|s| !s.labels.keys().any(|k| k.starts_with("otel_scope"))),
        "a label that varies by nothing"
    );
    let open = |s: &[Sample]| total(s, "switchboard_backlog_open_todos", &[]);
    assert_eq!(open(&before), 0.0);
    assert_eq!(
        total(&before, "switchboard_backlog_unrouted_events", &[]),
        0.0
    );
    assert!(
        total(
            &before,
            "switchboard_sandbox_children",
            &[("state", "idle")]
        ) >= 1.0,
        "the router's first child waits: {before:?}"
    );

    // A trial of drop-ci-noise watches them (issue 45), routing nothing.
    let plan = tool(
        &lines.mcp_url,
        &lines.token,
        "install_rule_pack",
        json!({"webhook_id": lines.webhook, "name": "drop-ci-noise"}),
    )
    .await;
    let trial = tool(
        &lines.mcp_url,
        &lines.token,
        "start_rule_trial",
        json!({"webhook_id": lines.webhook, "plan_token": plan["plan_token"]}),
    )
    .await;
    assert_eq!(trial["state"], "running", "{trial}");

    // Three deliveries; the dev webhook has no rules, so each becomes a todo in its first
    // granted queue.
    for (i, (file, event)) in [
        ("pull_request.opened.json", "pull_request"),
        ("issue_comment.created.json", "issue_comment"),
        ("check_run.completed.json", "check_run"),
    ]
    .iter()
    .enumerate()
    {
        let p = payload("github", file);
        let headers = signed("github", event, &format!("m-{i}"), &lines.secret, &p.body);
        let path = format!("/hooks/{}", lines.webhook);
        assert_eq!(post(ingest, &path, &headers, &p.body).await.status, 202);
    }
    let todos = tool(
        &lines.mcp_url,
        &lines.token,
        "list_todos",
        json!({"queue": "forge"}),
    )
    .await;
    let listed = todos["todos"].as_array().expect("todos").len();
    assert_eq!(listed, 3, "{todos}");

    let during = scrape(metrics).await;
    assert_eq!(
        total(
            &during,
            "switchboard_backlog_open_todos",
            &[("queue", "forge")]
        ),
        3.0
    );
    assert_eq!(
        total(&during, "switchboard_ingest_deliveries_total", &[]),
        3.0,
        "every delivery counted once"
    );
    // Issue 49: ingest's histogram is in seconds with buckets from 1 ms to 30 s, so its
    // quantiles can be read; every delivery is in the +Inf bucket.
    let mut bounds: Vec<f64> = during
        .iter()
        .filter(|s| s.name == "switchboard_ingest_duration_seconds_bucket")
        .filter_map(|s| s.labels.get("le"))
        .filter(|le| le.as_str() != "+Inf")
        .map(|le| le.parse::<f64>().expect("a bound"))
        .collect();
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    assert_eq!(
        bounds,
        switchboard_telemetry::metrics::INGEST_SECONDS.to_vec()
    );
    assert_eq!(
        total(
            &during,
            "switchboard_ingest_duration_seconds_bucket",
            &[("le", "+Inf")]
        ),
        3.0
    );
    // Issue 49: every server call is timed by OpenTelemetry's semantic conventions: ingest's
    // requests by their route template (never the webhook id), the MCP tools' calls to
    // control by gRPC method and status.
    assert_eq!(
        total(
            &during,
            "http_server_request_duration_seconds_count",
            &[
                ("http_request_method", "POST"),
                ("http_route", "/hooks/{webhook_id}"),
                ("http_response_status_code", "202"),
            ]
        ),
        3.0,
        "{during:?}"
    );
    assert!(
        !during
            .iter()
            .filter_map(|s| s.labels.get("http_route"))
            .any(|r| r.contains(&lines.webhook)),
        "a route names no id"
    );
    let rpc = |method: &str| {
        total(
            &during,
            "rpc_server_call_duration_seconds_count",
            &[
                ("rpc_system_name", "grpc"),
                ("rpc_method", method),
                ("rpc_response_status_code", "OK"),
            ],
        )
    };
    assert!(
        rpc("switchboard.control.v1.Todos/ListTodos") >= 1.0,
        "{:?}",
        during
            .iter()
            .filter(|s| s.name.starts_with("rpc_"))
            .collect::<Vec<_>>()
    );
    // Read as a dashboard reads them: the median and the p99 fall in buckets with bounds.
    let (status, text) = get(metrics, "/metrics").await;
    assert_eq!(status, 200);
    let (_, histograms) = parse(&text);
    // Over every decision's series, as `sum by (le)` reads them.
    let histogram = histograms
        .get("switchboard_ingest_duration_seconds")
        .cloned()
        .expect("ingest's histogram, typed as one");
    let (p50, p99) = (
        quantile(0.5, &histogram).expect("a median"),
        quantile(0.99, &histogram).expect("a p99"),
    );
    assert!(
        0.0 < p50 && p50 <= p99 && p99 <= 30.0,
        "ingest's quantiles: p50 {p50} s, p99 {p99} s ({histogram:?})"
    );
    // One write per delivery decided within `--ingest-decide-before-store-ms`, two (event,
    // then decision) for one stored before its decision (a loaded machine routing late).
    let stored = |how| total(&during, "switchboard_ingest_stored_total", &[("how", how)]);
    let late = stored("before_decision");
    assert_eq!(
        stored("with_decision") + late,
        3.0,
        "each delivery stored once"
    );
    assert_eq!(
        total(&during, "switchboard_store_group_commit_writes_sum", &[]),
        3.0 + late,
        "each delivery's writes went through group commit"
    );
    assert!(
        total(
            &during,
            "switchboard_sandbox_cpu_seconds_total",
            &[("class", "live")]
        ) > 0.0,
        "the live work's sandbox CPU is counted"
    );
    // The trial saw all three: the CI delivery is the one its candidate decides otherwise.
    let trial_total = |s: &[Sample], outcome| {
        total(
            s,
            "switchboard_trial_deliveries_total",
            &[("webhook", lines.webhook.as_str()), ("outcome", outcome)],
        )
    };
    let mut seen = during.clone();
    for _ in 0..100 {
        if trial_total(&seen, "agreed") + trial_total(&seen, "disagreed") >= 3.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        seen = scrape(metrics).await;
    }
    assert_eq!(
        (
            trial_total(&seen, "agreed"),
            trial_total(&seen, "disagreed")
        ),
        (2.0, 1.0),
        "{seen:?}"
    );

    // The example dashboard charts only what the binary really exposes.
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("deploy/monitoring/grafana-dashboard.json"),
        )
        .expect("the dashboard"),
    )
    .expect("the dashboard is JSON");
    let names: std::collections::BTreeSet<&str> = during.iter().map(|s| s.name.as_str()).collect();
    let mut charted = 0;
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("an expr");
            let mut series = Vec::new();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if ["switchboard_", "http_server_", "rpc_server_"]
                    .iter()
                    .any(|p| word.starts_with(p))
                {
                    assert!(
                        names.contains(word),
                        "the dashboard charts {word}, which /metrics lacks"
                    );
                    series.push(word);
                    charted += 1;
                }
            }
            // Each label it groups by is one those series carry (`le` is every bucket's).
            for by in expr.split("by (").skip(1) {
                let labels = by.split(')').next().unwrap_or_default();
                for label in labels.split(',').map(str::trim).filter(|l| *l != "le") {
                    assert!(
                        during
                            .iter()
                            .any(|s| series.contains(&s.name.as_str())
                                && s.labels.contains_key(label)),
                        "the dashboard groups {series:?} by {label}, which they do not carry"
                    );
                }
            }
        }
    }
    assert!(charted >= 9, "{charted}");

    // Completing a todo takes it off the backlog.
    let first = todos["todos"][0]["id"].as_str().expect("a todo id");
    let claimed = tool(
        &lines.mcp_url,
        &lines.token,
        "claim_todo",
        json!({"todo_id": first}),
    )
    .await;
    assert_eq!(claimed["todo"]["state"], "claimed", "{claimed}");
    let done = tool(
        &lines.mcp_url,
        &lines.token,
        "complete_todo",
        json!({"todo_id": first}),
    )
    .await;
    assert_eq!(done["todo"]["state"], "completed", "{done}");
    let after = scrape(metrics).await;
    assert_eq!(open(&after), 2.0);

    // The page names tenants and queues: never on the public ingest listener.
    let (status, _) = get(ingest, "/metrics").await;
    assert_eq!(status, 404);

    up.terminate();
    assert!(up.wait_exit(std::time::Duration::from_secs(30)).success());
}

#[test]
fn a_quantile_is_read_within_its_bucket() {
    let buckets = |counts: &[(f64, f64)]| counts.to_vec();
    // 10 deliveries: 4 under 1 ms, 10 under 5 ms.
    let h = buckets(&[(0.001, 4.0), (0.005, 10.0), (f64::INFINITY, 10.0)]);
    assert_eq!(quantile(0.4, &h), Some(0.001));
    assert_eq!(quantile(0.7, &h), Some(0.003));
    // Every delivery past the last bound: no quantile can be read (issue 49's old buckets).
    let past = buckets(&[(0.001, 0.0), (f64::INFINITY, 3.0)]);
    assert_eq!(quantile(0.5, &past), None);
    assert_eq!(quantile(0.5, &buckets(&[(f64::INFINITY, 0.0)])), None);
}
