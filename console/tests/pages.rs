//! The console's pages rendered from the golden plans (tests/all/golden), compared byte for
//! byte with `tests/golden/*.html`; `UPDATE_GOLDEN=1` writes them instead. Also: every value a
//! tenant or an agent wrote is escaped.

use std::path::PathBuf;

use switchboard_console::{
    Chrome, Decision, InboxItem, PlanView, RuleRow, WebhookView, inbox, plan_page, webhook_page,
};
use switchboard_model::plan::{Plan, PlanKind, PlanState, StaleReason};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn golden_plan(name: &str) -> Plan {
    let path = repo().join("tests/all/golden").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("a golden plan reads as a typed plan")
}

fn chrome() -> Chrome {
    Chrome {
        person: "alice".into(),
        csrf: "csrf-token".into(),
    }
}

fn view<'a>(chrome: &'a Chrome, plan: &'a Plan, state: PlanState) -> PlanView<'a> {
    PlanView {
        chrome,
        plan_id: "pl_0123".into(),
        owner_scope: "human:alice".into(),
        plan,
        state,
        stale_reason: (state == PlanState::Stale).then_some(StaleReason::ConfigurationChanged),
        proposed_by_endpoint: "ep_agent".into(),
        proposed_by_human: "alice".into(),
        approval_expires_at: "2026-12-05T10:00:00.000Z".into(),
        decision: None,
        may_decide: true,
        notice: None,
    }
}

#[track_caller]
fn matches_golden(name: &str, html: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.html"));
    // One element per line, so a diff of the golden file reads.
    let html = html.replace("><", ">\n<");
    if std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &html).expect("write golden");
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with UPDATE_GOLDEN=1 to write it",
            path.display()
        )
    });
    if want != html {
        let diff: Vec<String> = want
            .lines()
            .zip(html.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(5)
            .map(|(i, (a, b))| format!("line {}:\n  want {a}\n  got  {b}", i + 1))
            .collect();
        panic!(
            "{name}.html differs (UPDATE_GOLDEN=1 rewrites it):\n{}",
            diff.join("\n")
        );
    }
}

#[test]
fn the_plan_pages_match_their_golden_files() {
    let chrome = chrome();
    for (name, state) in [
        ("plan-install", PlanState::PendingApproval),
        ("plan-upgrade", PlanState::PendingApproval),
        ("plan-removal", PlanState::Stale),
        ("plan-adoption", PlanState::Applied),
    ] {
        let plan = golden_plan(name);
        let html = plan_page(&view(&chrome, &plan, state)).into_string();
        matches_golden(&format!("{name}-page"), &html);
    }
}

#[test]
fn a_pending_plan_offers_accept_and_reject_with_the_csrf_token_only_to_an_editor() {
    let chrome = chrome();
    let plan = golden_plan("plan-upgrade");
    let editor = plan_page(&view(&chrome, &plan, PlanState::PendingApproval)).into_string();
    assert!(
        editor.contains(r#"action="/console/plans/pl_0123/accept""#),
        "{editor}"
    );
    assert!(editor.contains(r#"action="/console/plans/pl_0123/reject""#));
    assert_eq!(
        editor.matches(r#"name="csrf" value="csrf-token""#).count(),
        3,
        "accept, reject, sign out"
    );
    let viewer = plan_page(&PlanView {
        may_decide: false,
        ..view(&chrome, &plan, PlanState::PendingApproval)
    })
    .into_string();
    assert!(!viewer.contains("/accept"), "{viewer}");
    assert!(viewer.contains("needs the editor role"));
    let stale = plan_page(&view(&chrome, &plan, PlanState::Stale)).into_string();
    assert!(!stale.contains("/accept") && stale.contains("configuration_changed"));
}

#[test]
fn what_tenants_and_agents_wrote_is_escaped() {
    let chrome = Chrome {
        person: "<b>eve</b>".into(),
        csrf: "\"><script>".into(),
    };
    let mut plan = golden_plan("plan-upgrade");
    plan.pack.name = "<script>alert(1)</script>".into();
    if let Some(rule) = plan.report.rules.first_mut() {
        rule.id = "<img src=x onerror=alert(1)>".into();
    }
    let html = plan_page(&PlanView {
        decision: Some(Decision {
            by: "mallory".into(),
            rejected: Some("</q><script>".into()),
        }),
        ..view(&chrome, &plan, PlanState::Rejected)
    })
    .into_string();
    assert!(!html.contains("<script>"), "{html}");
    assert!(!html.contains("<img src=x"), "{html}");
    assert!(!html.contains("<b>eve"), "{html}");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    let items = [InboxItem {
        plan_id: "pl_\"onmouseover=x".into(),
        pack_name: "<i>pack</i>".into(),
        kind: PlanKind::Install,
        ..InboxItem::default()
    }];
    let html = inbox(&chrome, &items).into_string();
    assert!(
        !html.contains("<i>pack") && !html.contains("\"onmouseover"),
        "{html}"
    );
}

#[test]
fn the_inbox_lists_each_plan_with_a_link_to_its_page() {
    let items = [
        InboxItem {
            plan_id: "pl_1".into(),
            webhook_id: "wh_1".into(),
            owner_scope: "team:ops".into(),
            kind: PlanKind::Upgrade,
            pack_name: "drop-ci-noise".into(),
            pack_version: "2.0.0".into(),
            proposed_by_endpoint: "ep_a".into(),
            proposed_by_human: "alice".into(),
            proposed_at: "2026-12-04T10:00:00.000Z".into(),
            approval_expires_at: "2026-12-05T10:00:00.000Z".into(),
            stale: false,
        },
        InboxItem {
            plan_id: "pl_2".into(),
            stale: true,
            ..InboxItem::default()
        },
    ];
    let html = inbox(&chrome(), &items).into_string();
    matches_golden("inbox", &html);
    assert_eq!(html.matches("class=\"plan-row\"").count(), 2);
    let empty = inbox(&chrome(), &[]).into_string();
    assert!(empty.contains("Nothing is waiting for you."));
}

/// Who confirms plans is a person's choice: the form is there for an editor only, posts the
/// session's CSRF token, and shows the current policy selected.
#[test]
fn the_webhook_page_offers_the_confirm_policy_to_editors_only() {
    let v = WebhookView {
        webhook_id: "wh_1".into(),
        confirm_policy: "person".into(),
        rules: vec![RuleRow {
            id: "r-1".into(),
            when: ".kind == \"<b>x</b>\"".into(),
            action: "drop".into(),
            ..RuleRow::default()
        }],
        may_edit: true,
        notice: Some("Saved: who confirms plans is now person.".into()),
        ..WebhookView::default()
    };
    let html = webhook_page(&chrome(), &v).into_string();
    assert!(
        html.contains("action=\"/console/webhooks/wh_1/confirm-policy\""),
        "{html}"
    );
    assert!(
        html.contains("name=\"csrf\" value=\"csrf-token\""),
        "{html}"
    );
    assert!(
        html.contains("<option value=\"person\" selected>"),
        "the current policy is selected: {html}"
    );
    assert!(html.contains("<option value=\"self\">"), "{html}");
    assert!(html.contains("id=\"notice\""));
    assert!(!html.contains("<b>x</b>"), "rules are escaped: {html}");

    let viewer = WebhookView {
        may_edit: false,
        ..v
    };
    let html = webhook_page(&chrome(), &viewer).into_string();
    assert!(!html.contains("confirm-policy-form"), "{html}");
    assert!(
        html.contains("<span id=\"confirm-policy\">person</span>"),
        "{html}"
    );
}
