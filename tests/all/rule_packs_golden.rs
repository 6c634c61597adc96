//! SPEC-0031 plans compared as golden files: an install, an upgrade and a removal of
//! drop-ci-noise, an adoption (`replaces`) with its confirm, and a removal refused while a
//! dependent pack is installed followed by the dependent's removal, planned through the
//! control gRPC API over a fixed stored history (real payloads, delivered at fixed times on
//! a manual clock), on SQLite and PostgreSQL alike.
//!
//! What varies from run to run — the plan token, its expiry, the webhook id and the event
//! ids — is replaced by placeholders (an event id by `<event N: file>`, N its place in the
//! history); everything else, ordering included, must match `tests/all/golden/<name>` byte
//! for byte. `UPDATE_GOLDEN=1` writes the files instead of comparing.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard_control::store::{Clock, Webhook};
use switchboard_packs::Catalog;
use switchboard_proto::control::v1::RemoveRulePackRequest;

use crate::control_harness::{TestDb, on_every_backend};
use crate::rule_packs::{
    ALL, Env, Options, confirm_req, details, install, plan_req, reason, remove,
};

on_every_backend!(
    an_install_plan_matches_its_golden_file,
    an_upgrade_plan_matches_its_golden_file,
    a_removal_plan_matches_its_golden_file,
    an_adoption_confirm_matches_its_golden_file,
    a_removal_with_dependents_matches_its_golden_file,
);

/// The manual clock's start: the history's first delivery is 90 s after it, one every 90 s.
const START_MS: i64 = 1_795_996_750_000;

/// The stored history, in delivery order.
const HISTORY: [&str; 12] = [
    "check_run.completed.json",
    "check_run.completed.failure.json",
    "workflow_job.queued.json",
    "workflow_job.completed.success.json",
    "status.json",
    "issue_comment.created.json",
    "issue_comment.deleted.json",
    "issues.opened.json",
    "pull_request.opened.json",
    "pull_request_review.submitted.json",
    "pull_request_review_comment.created.json",
    "push.json",
];

struct Golden {
    env: Env,
    clock: Clock,
    cred: String,
    endpoint_id: String,
    webhook: Webhook,
    /// (event id, placeholder) for every stored delivery.
    events: Vec<(String, String)>,
}

impl Golden {
    /// A webhook with two hand-written rules and the fixed history, on a manual clock that
    /// stands 10 minutes after the last delivery.
    async fn start(db: &TestDb) -> Golden {
        Self::start_with(db, Catalog::builtin()).await
    }

    async fn start_with(db: &TestDb, catalog: Catalog) -> Golden {
        let clock = Clock::manual(START_MS);
        let env = Env::start(
            db,
            Options {
                clock: Some(clock.clone()),
                catalog,
                ..Options::default()
            },
        )
        .await;
        let (scope, cred) = env.owner("alice", ALL).await;
        let config = json!({"rules": [
            {"id": "issues-to-triage", "when": ".event == \"issues\"", "action": {"queue": "triage"}},
            {"id": "reviews-to-review", "when": ".event | startswith(\"pull_request_review\")", "action": {"queue": "review"}},
        ]});
        let webhook = env.webhook(&scope, Some(config)).await;
        let mut events = Vec::new();
        for (n, file) in HISTORY.iter().enumerate() {
            clock.advance(Duration::from_secs(90));
            let id = env.deliver(&webhook, "github", file, n).await;
            events.push((id, format!("<event {n}: {file}>")));
        }
        clock.advance(Duration::from_secs(600));
        let endpoint_id = env
            .store
            .list_endpoints(Some(&scope))
            .await
            .expect("endpoints")
            .into_iter()
            .next()
            .expect("alice's endpoint")
            .id;
        Golden {
            env,
            clock,
            cred,
            endpoint_id,
            webhook,
            events,
        }
    }

    /// Plans and confirms `version` of drop-ci-noise with Codertocat as a bot.
    async fn installed(&self, version: &str) {
        let plan = install(&self.env, &self.cred, self.install_req(version))
            .await
            .expect("plan");
        install(
            &self.env,
            &self.cred,
            confirm_req(&self.webhook, "drop-ci-noise", &plan, false),
        )
        .await
        .expect("confirm");
        self.clock.advance(Duration::from_secs(60));
    }

    fn install_req(&self, version: &str) -> switchboard_proto::control::v1::InstallRulePackRequest {
        let mut req = plan_req(&self.webhook, "drop-ci-noise");
        req.version = version.into();
        req.params = crate::support::typed::params(&json!({"bot_actors": ["Codertocat"]}));
        req
    }

    /// `plan` with what varies between runs replaced by placeholders.
    fn normalized(&self, plan: &Value) -> Value {
        let mut subs: Vec<(String, String)> = Vec::new();
        for (key, placeholder) in [
            ("plan_token", "<plan_token>"),
            ("expires_at", "<expires_at>"),
        ] {
            let value = plan[key]
                .as_str()
                .unwrap_or_else(|| panic!("the plan has no {key}: {plan}"));
            subs.push((value.to_string(), placeholder.to_string()));
        }
        subs.push((self.webhook.id.clone(), "<webhook_id>".into()));
        subs.push((self.endpoint_id.clone(), "<endpoint_id>".into()));
        subs.extend(self.events.iter().cloned());
        replace_strings(plan, &subs)
    }
}

impl Golden {
    /// A confirm's answer with what varies between runs replaced (it has no token).
    fn normalized_result(&self, result: &Value) -> Value {
        let mut subs: Vec<(String, String)> =
            vec![(self.webhook.id.clone(), "<webhook_id>".into())];
        if let Some(guard) = result["guard_id"].as_str() {
            subs.push((guard.to_string(), "<guard_id>".into()));
        }
        subs.push((self.endpoint_id.clone(), "<endpoint_id>".into()));
        subs.extend(self.events.iter().cloned());
        replace_strings(result, &subs)
    }
}

fn replace_strings(v: &Value, subs: &[(String, String)]) -> Value {
    match v {
        Value::String(s) => {
            let mut s = s.clone();
            for (from, to) in subs {
                s = s.replace(from.as_str(), to);
            }
            Value::String(s)
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| replace_strings(x, subs)).collect()),
        Value::Object(m) => {
            // Keys sorted whatever map serde_json was built with.
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, x)| (k.clone(), replace_strings(x, subs)))
                    .collect(),
            )
        }
        other => other.clone(),
    }
}

/// Compares `actual` with `tests/all/golden/<name>`, or writes it there with
/// `UPDATE_GOLDEN=1`. A mismatch fails with a line diff.
fn assert_golden(name: &str, actual: &Value) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/all/golden")
        .join(name);
    let text = serde_json::to_string_pretty(actual).expect("json") + "\n";
    if std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().expect("dir")).expect("golden dir");
        // Both backends write the same text; a rename keeps a reader from seeing half a file.
        let tmp = path.with_file_name(format!(
            ".{name}.{}.tmp",
            switchboard_control::secrets::random_hex(8).expect("random")
        ));
        std::fs::write(&tmp, &text).expect("write golden");
        std::fs::rename(&tmp, &path).expect("rename golden");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with UPDATE_GOLDEN=1 to write it",
            path.display()
        )
    });
    if expected != text {
        panic!(
            "the plan differs from {} (- golden, + this run; UPDATE_GOLDEN=1 rewrites it if the change is intended):\n{}",
            path.display(),
            line_diff(&expected, &text)
        );
    }
}

/// A unified-style diff of two texts by lines (longest common subsequence), with three lines
/// of context around each change.
fn line_diff(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    // (marker, line number in the golden file, text)
    let mut ops: Vec<(char, usize, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push((' ', i + 1, a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', i + 1, a[i]));
            i += 1;
        } else {
            ops.push(('+', i + 1, b[j]));
            j += 1;
        }
    }
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k].0 != ' ').collect();
    let mut out = String::new();
    let mut last_shown: Option<usize> = None;
    for (k, &(marker, golden_line, line)) in ops.iter().enumerate() {
        let near = changed.iter().any(|&c| c.abs_diff(k) <= 3);
        if !near {
            continue;
        }
        if last_shown.is_none_or(|l| l + 1 != k) {
            out.push_str(&format!("@@ golden line {golden_line} @@\n"));
        }
        out.push_str(&format!("{marker} {line}\n"));
        last_shown = Some(k);
    }
    out
}

async fn an_install_plan_matches_its_golden_file(db: TestDb) {
    let g = Golden::start(&db).await;
    let plan = install(&g.env, &g.cred, g.install_req("1"))
        .await
        .expect("plan");
    assert_eq!(plan["kind"], "install");
    let normalized = g.normalized(&plan);
    // The same plan made again on the same history is the same, ordering included.
    let again = install(&g.env, &g.cred, g.install_req("1"))
        .await
        .expect("plan again");
    assert_eq!(g.normalized(&again), normalized);
    assert_golden("plan-install.json", &normalized);
}

async fn an_upgrade_plan_matches_its_golden_file(db: TestDb) {
    let g = Golden::start(&db).await;
    g.installed("1").await;
    let mut req = plan_req(&g.webhook, "drop-ci-noise");
    req.version = "2".into();
    let plan = install(&g.env, &g.cred, req).await.expect("plan");
    assert_eq!(plan["kind"], "upgrade");
    assert_golden("plan-upgrade.json", &g.normalized(&plan));
}

async fn a_removal_plan_matches_its_golden_file(db: TestDb) {
    let g = Golden::start(&db).await;
    g.installed("2").await;
    let plan = remove(
        &g.env,
        &g.cred,
        RemoveRulePackRequest {
            webhook_id: g.webhook.id.clone(),
            name: "drop-ci-noise".into(),
            ..Default::default()
        },
    )
    .await
    .expect("plan");
    assert_eq!(plan["kind"], "remove");
    assert_golden("plan-removal.json", &g.normalized(&plan));
}

/// An adoption: drop-ci-noise takes over a hand-written rule (`replaces`); the golden file
/// holds the plan and the confirm's answer (the provenance it saved).
async fn an_adoption_confirm_matches_its_golden_file(db: TestDb) {
    let g = Golden::start(&db).await;
    let mut req = g.install_req("2");
    req.replaces = vec!["issues-to-triage".into()];
    let plan = install(&g.env, &g.cred, req).await.expect("plan");
    assert_eq!(
        plan["rule_diff"]["replaced"],
        json!(["issues-to-triage"]),
        "{plan}"
    );
    g.clock.advance(Duration::from_secs(30));
    let mut confirm = confirm_req(&g.webhook, "drop-ci-noise", &plan, false);
    confirm.replaces = vec!["issues-to-triage".into()];
    let applied = install(&g.env, &g.cred, confirm).await.expect("confirm");
    assert_eq!(applied["saved"], true);
    assert_golden(
        "plan-adoption.json",
        &json!({
            "plan": g.normalized(&plan),
            "confirm": g.normalized_result(&applied),
        }),
    );
}

/// A removal refused while an installed pack requires the pack (`required_by_pack`), then
/// the dependent's removal plan. The two packs are an operator's (drop-ci-noise's rules
/// under other names, one requiring the other) so the history stays the one above.
async fn a_removal_with_dependents_matches_its_golden_file(db: TestDb) {
    let builtin = Catalog::builtin();
    let base = builtin
        .find("drop-ci-noise", "1.0.0")
        .expect("drop-ci-noise@1")
        .pack
        .clone();
    let mut catalog = Catalog::builtin();
    let mut required = base.clone();
    required.name = "team-base".into();
    let mut dependent = base;
    dependent.name = "team-lanes".into();
    dependent.requires.packs = vec!["team-base".into()];
    catalog
        .add_external(required, "file:///packs")
        .expect("team-base");
    catalog
        .add_external(dependent, "file:///packs")
        .expect("team-lanes");
    let g = Golden::start_with(&db, catalog).await;
    for name in ["team-base", "team-lanes"] {
        let mut req = plan_req(&g.webhook, name);
        req.params = crate::support::typed::params(&json!({"bot_actors": ["Codertocat"]}));
        let plan = install(&g.env, &g.cred, req).await.expect("plan");
        install(&g.env, &g.cred, confirm_req(&g.webhook, name, &plan, false))
            .await
            .expect("confirm");
        g.clock.advance(Duration::from_secs(60));
    }
    let removal = |name: &str| RemoveRulePackRequest {
        webhook_id: g.webhook.id.clone(),
        name: name.into(),
        ..Default::default()
    };
    let refused = remove(&g.env, &g.cred, removal("team-base"))
        .await
        .expect_err("team-lanes requires it");
    assert_eq!(reason(&refused), "required_by_pack");
    let plan = remove(&g.env, &g.cred, removal("team-lanes"))
        .await
        .expect("the dependent's removal plans");
    assert_golden(
        "plan-removal-with-dependents.json",
        &json!({
            "refused": {
                "grpc_code": format!("{:?}", refused.code()),
                "message": refused.message(),
                "details": details(&refused),
            },
            "dependent_removal": g.normalized(&plan),
        }),
    );
}
