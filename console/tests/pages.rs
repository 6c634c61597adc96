//! The console's pages rendered from the golden plans (tests/all/golden), compared byte for
//! byte with `tests/golden/*.html`; `UPDATE_GOLDEN=1` writes them instead. Also: every value a
//! tenant or an agent wrote is escaped.

use std::collections::BTreeMap;
use std::path::PathBuf;

use switchboard_console::{
    Chrome, Decision, HistoryRow, InboxItem, Notice, PlanView, RuleRow, TrialView, WebhookView,
    inbox, plan_page, trial_page, trial_rows, webhook_page,
};
use switchboard_model::Label;
use switchboard_model::plan::{Plan, PlanKind, PlanState, Routed, StaleReason};
use switchboard_model::trial::{
    DEFAULT_MIN_DELIVERIES, Forecast, Observed, TrialEnd, TrialFacts, TrialLimits, TrialReport,
};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn golden_plan(name: &str) -> Plan {
    let path = repo().join("tests/all/golden").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("a golden plan reads as a typed plan")
}

/// The pages' clock: 2026-12-05T08:00:00Z, two hours before the plans' deadline.
const NOW_MS: i64 = 1_796_457_600_000;

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
        webhook_name: "acme/site".into(),
        plan,
        candidate: None,
        now_ms: NOW_MS,
        state,
        stale_reason: (state == PlanState::Stale).then_some(StaleReason::ConfigurationChanged),
        proposed_by_endpoint: "ep_agent".into(),
        proposed_by_endpoint_name: "claude-desktop".into(),
        proposed_by_human: "alice".into(),
        approval_expires_at: "2026-12-05T10:00:00.000Z".into(),
        decision: None,
        may_decide: true,
        notice: None,
        guard: None,
        approvals: None,
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
        4,
        "accept, reject, the footer's accept, sign out"
    );
    let viewer = plan_page(&PlanView {
        may_decide: false,
        ..view(&chrome, &plan, PlanState::PendingApproval)
    })
    .into_string();
    assert!(!viewer.contains("/accept"), "{viewer}");
    assert!(viewer.contains("needs the editor role"));
    let stale = plan_page(&view(&chrome, &plan, PlanState::Stale)).into_string();
    assert!(
        !stale.contains("/accept")
            && stale.contains("the webhook's rules changed since it was made")
    );
}

/// The page reads top to bottom: the summary, the lost work, the evidence (rules with their
/// conditions, fixtures with why one routes differently, params with their values), and the
/// decision last, repeated in a footer that stays in view.
#[test]
fn a_plan_page_reads_from_its_summary_through_the_evidence_to_the_decision() {
    use switchboard_model::plan::{FixtureOutcome, RuleReport};
    let chrome = chrome();
    let mut plan = golden_plan("plan-upgrade");
    plan.report.rules.push(RuleReport {
        id: "ci-to-triage".into(),
        from_pack: None,
        ..RuleReport::default()
    });
    plan.fixtures = vec![
        FixtureOutcome {
            name: "ci success is dropped".into(),
            want: Label::Drop,
            got: q("triage"),
            rule: Some("ci-to-triage".into()),
            passed: false,
        },
        FixtureOutcome {
            name: "nothing matches".into(),
            want: Label::Drop,
            got: Label::Default,
            rule: None,
            passed: false,
        },
    ];
    let candidate: switchboard_model::Configuration = serde_json::from_value(serde_json::json!({
        "rules": [{"id": "ci-to-triage", "when": ".event == \"check_run\"", "action": {"queue": "triage"}}],
        "params": {"keep_ci_failures": true},
    }))
    .expect("a configuration");
    let html = plan_page(&PlanView {
        candidate: Some(&candidate),
        ..view(&chrome, &plan, PlanState::PendingApproval)
    })
    .into_string();
    let order = [
        "id=\"summary\"",
        "id=\"evidence\"",
        "id=\"totals\"",
        "id=\"rules\"",
        "id=\"fixtures\"",
        "id=\"params\"",
        "id=\"decide-bar\"",
        "id=\"decision\"",
    ];
    let at: Vec<usize> = order
        .iter()
        .map(|id| html.find(id).unwrap_or_else(|| panic!("no {id}: {html}")))
        .collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "{order:?} in order: {at:?}"
    );
    assert!(html.contains("This plan upgrades"), "{html}");
    assert!(
        html.contains("your rule <code>ci-to-triage</code> comes first"),
        "{html}"
    );
    assert!(
        html.contains("no rule matched, so the default action decided"),
        "{html}"
    );
    assert!(
        html.contains("id=\"accept-fixtures\""),
        "Accept warns of them: {html}"
    );
    assert!(
        html.contains("<code class=\"expr\">.event == &quot;check_run&quot;</code>"),
        "{html}"
    );
    assert!(
        html.contains("<code>keep_ci_failures</code></td><td><code>true</code>"),
        "{html}"
    );
    assert!(
        html.contains("data-state=\"pending_approval\">waiting for approval<"),
        "states in words: {html}"
    );
    assert!(
        !html.contains("<th scope=\"col\"></th>") && !html.contains("<th></th>"),
        "no empty header: {html}"
    );
    if plan.report.transitions.iter().any(|t| t.loses_work()) {
        assert!(html.contains("id=\"lost-work\""), "{html}");
        assert!(
            html.contains("lost work</span>"),
            "lost work in words: {html}"
        );
    }
    // Only a person who may decide gets the footer.
    let viewer = plan_page(&PlanView {
        may_decide: false,
        ..view(&chrome, &plan, PlanState::PendingApproval)
    })
    .into_string();
    assert!(!viewer.contains("decide-bar"), "{viewer}");
}

/// Signed out, a page says how to get a sign-in link and that it comes back here.
#[test]
fn the_sign_in_page_says_how_to_get_a_link_and_where_it_leads() {
    let html = switchboard_console::sign_in_page("/console/plans/pl_1").into_string();
    assert!(
        html.contains("switchboard admin human sign-in-link &lt;your login&gt;"),
        "{html}"
    );
    assert!(
        html.contains("<code id=\"next\">/console/plans/pl_1</code>"),
        "{html}"
    );
    assert!(
        !html.contains("href=\"/console\">Back"),
        "no link back to itself: {html}"
    );
    let done = switchboard_console::sign_in_done("dev", "/console/plans/pl_1").into_string();
    assert!(done.contains("href=\"/console/plans/pl_1\""), "{done}");
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
    let html = inbox(&chrome, &items, NOW_MS, None).into_string();
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
            webhook_name: "ops <site>".into(),
            owner_scope: "team:ops".into(),
            kind: PlanKind::Upgrade,
            pack_name: "drop-ci-noise".into(),
            pack_version: "2.0.0".into(),
            proposed_by_endpoint: "ep_a".into(),
            proposed_by_human: "alice".into(),
            proposed_at: "2026-12-04T10:00:00.000Z".into(),
            approval_expires_at: "2026-12-05T10:00:00.000Z".into(),
            approvals: (1, 2),
            replayed: 300,
            changed: 12,
            lost_work: 3,
            ..InboxItem::default()
        },
        InboxItem {
            plan_id: "pl_2".into(),
            stale: Some(StaleReason::ConfigurationChanged),
            ..InboxItem::default()
        },
        InboxItem {
            plan_id: "pl_3".into(),
            stale: Some(StaleReason::ApprovalExpired),
            ..InboxItem::default()
        },
    ];
    let html = inbox(&chrome(), &items, NOW_MS, None).into_string();
    matches_golden("inbox", &html);
    assert_eq!(html.matches("data-plan=").count(), 3);
    // A lapsed plan is apart too, marked expired, with why.
    assert!(
        html.contains("<span class=\"badge stale\">expired</span>")
            && html.contains("No longer current: nobody decided before its deadline."),
        "{html}"
    );
    // Issue 48: the webhook by its name (escaped), the id beside it.
    assert!(
        html.contains("<strong>ops &lt;site&gt;</strong></a> <small>(<code>wh_1</code>)</small>"),
        "{html}"
    );
    assert!(
        html.contains("This plan upgrades drop-ci-noise to 2.0.0"),
        "{html}"
    );
    assert!(html.contains("12 of 300"), "{html}");
    assert!(
        html.contains("lost work</span>: 3"),
        "lost work in words: {html}"
    );
    assert!(
        html.contains(r#"<time datetime="2026-12-05T10:00:00.000Z" title="2026-12-05T10:00:00.000Z">in 2 hours</time>"#),
        "relative times, exact on hover: {html}"
    );
    // The stale plan is listed apart, under its own heading.
    let (current, stale) = html
        .split_once("No longer current")
        .expect("a stale section");
    assert!(
        current.contains("pl_1") && !current.contains("pl_2"),
        "{html}"
    );
    assert!(stale.contains("pl_2"), "{html}");
    assert!(
        stale.contains(r#"action="/console/plans/pl_2/dismiss""#) && !current.contains("/dismiss"),
        "only a stale plan is dismissible: {html}"
    );
    let empty = inbox(&chrome(), &[], NOW_MS, None).into_string();
    assert!(empty.contains("Nothing is waiting for you."));
}

/// Issue 47: the plan page says how many must accept, whose approvals count, how many more
/// are needed and from whom they cannot come; the inbox says how far each plan is.
#[test]
fn a_pending_plan_shows_the_approvals_needed_and_who_cannot_give_them() {
    use switchboard_model::approval::{Given, NotCounted, Risk, Tally};
    let chrome = chrome();
    let plan = golden_plan("plan-upgrade");
    let tally = Tally {
        required: 2,
        risks: vec![Risk::LostWork],
        given: vec![
            Given {
                person: "alice".into(),
                at_ms: 1,
                counts: false,
                not_counted: Some(NotCounted::Proposer),
            },
            Given {
                person: "bob".into(),
                at_ms: 2,
                counts: true,
                not_counted: None,
            },
        ],
        counted: 1,
        still_needed: 1,
        cannot_come_from: vec!["alice".into(), "bob".into()],
    };
    let html = plan_page(&PlanView {
        approvals: Some(tally),
        ..view(&chrome, &plan, PlanState::PendingApproval)
    })
    .into_string();
    assert!(html.contains("id=\"approvals\""), "{html}");
    assert!(
        html.contains("data-required=\"2\" data-counted=\"1\" data-still-needed=\"1\""),
        "{html}"
    );
    assert!(html.contains("this plan loses work"), "{html}");
    assert!(
        html.contains("data-person=\"alice\" data-counts=\"false\""),
        "{html}"
    );
    assert!(html.contains("Cannot come from: alice, bob."), "{html}");
    let items = [InboxItem {
        plan_id: "pl_1".into(),
        approvals: (1, 2),
        ..InboxItem::default()
    }];
    let inbox_html = inbox(&chrome, &items, NOW_MS, None).into_string();
    assert!(
        inbox_html.contains("<td class=\"approvals\">1 of 2</td>"),
        "{inbox_html}"
    );
}

/// The webhook page shows its approval rule and its change log, newest first.
#[test]
fn the_webhook_page_shows_the_approval_rule_and_the_change_log() {
    let v = WebhookView {
        webhook_id: "wh_1".into(),
        changes: vec![switchboard_console::ChangeRow {
            seq: 7,
            at: "2026-12-05T10:00:00.000Z".into(),
            kind: "configuration".into(),
            actor: "carol".into(),
            proposed_by: Some("alice via ep_a".into()),
            approvers: vec!["bob".into(), "carol".into()],
            what: "version 4: install_rule_pack".into(),
            hash: "0123456789ab".into(),
        }],
        ..WebhookView::default()
    };
    let html = webhook_page(&chrome(), &v).into_string();
    assert!(
        html.contains("id=\"approval-rule\" data-required=\"1\""),
        "{html}"
    );
    assert!(html.contains("2 when it loses work"), "{html}");
    assert!(html.contains("does not count"), "{html}");
    assert!(html.contains("data-seq=\"7\""), "{html}");
    assert!(
        html.contains("<td class=\"approvers\">bob, carol</td>"),
        "{html}"
    );
    let empty = webhook_page(&chrome(), &WebhookView::default()).into_string();
    assert!(empty.contains("No changes recorded."), "{empty}");
}

/// Who confirms plans is a person's choice: the form is there for an editor only, posts the
/// session's CSRF token, and shows the current policy selected.
#[test]
fn the_webhook_page_offers_the_confirm_policy_to_editors_only() {
    let v = WebhookView {
        webhook_id: "wh_1".into(),
        name: "ops <b>site</b>".into(),
        confirm_policy: "person".into(),
        rules: vec![RuleRow {
            id: "r-1".into(),
            when: ".kind == \"<b>x</b>\"".into(),
            action: "drop".into(),
            ..RuleRow::default()
        }],
        may_edit: true,
        notice: Some(Notice::done("Saved: who confirms plans is now person.")),
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
    assert!(
        html.contains("role=\"status\""),
        "a success is a status: {html}"
    );
    assert!(
        html.contains("<label for=\"policy\">"),
        "the select is named: {html}"
    );
    assert!(!html.contains("<b>x</b>"), "rules are escaped: {html}");
    // Issue 48: the name heads the page, the id beside it, and an editor may rename it.
    assert!(!html.contains("<b>site</b>"), "names are escaped: {html}");
    assert!(
        html.contains(
            "<h1>ops &lt;b&gt;site&lt;/b&gt; <small class=\"id\"><code>wh_1</code></small></h1>"
        ),
        "{html}"
    );
    assert!(
        html.contains("action=\"/console/webhooks/wh_1/name\""),
        "{html}"
    );
    assert!(
        html.contains("<label for=\"name\">"),
        "the name field is named: {html}"
    );

    let viewer = WebhookView {
        may_edit: false,
        ..v
    };
    let html = webhook_page(&chrome(), &viewer).into_string();
    assert!(!html.contains("confirm-policy-form"), "{html}");
    assert!(!html.contains("rename-form"), "{html}");
    assert!(
        html.contains("<span id=\"confirm-policy\">person</span>"),
        "{html}"
    );
}

fn q(name: &str) -> Label<'static> {
    Label::queue(name).into_owned()
}

/// A trial of a drop-ci-noise candidate, built by the model from counts as control builds
/// it: its replay saw 800 deliveries; live, 300 were seen and 290 evaluated. The candidate
/// drops forge noise as forecast, drops CI deliveries the replay never held (unforeseen lost
/// work), routes the default to forge, and never quarantined what the replay said it would
/// (predicted, not observed: insufficient).
fn trial_report(ended: Option<TrialEnd>) -> TrialReport {
    let forecast = Forecast {
        deliveries: 800,
        transitions: BTreeMap::from([
            ((q("forge"), Label::Drop), 80),
            ((Label::Default, q("forge")), 40),
            ((q("forge"), Label::Quarantine), 8),
        ]),
    };
    let routed = |label: Label<'static>, rule: Option<&str>| Routed {
        label,
        rule_id: rule.map(str::to_string),
    };
    let mut observed = Observed::default();
    let mut examples: BTreeMap<(Label<'static>, Label<'static>), Vec<String>> = BTreeMap::new();
    for i in 0..300u32 {
        let (before, after) = match i % 30 {
            _ if i >= 290 => {
                observed.record(&q("forge"), None);
                continue;
            }
            0..=2 => (q("forge"), routed(Label::Drop, Some("drop-ci-noise--bots"))),
            3 | 4 => (
                q("ci"),
                routed(Label::Drop, Some("drop-ci-noise--ci-noise")),
            ),
            5 => (Label::Default, routed(q("forge"), Some("mine"))),
            _ => (q("forge"), routed(q("forge"), Some("mine"))),
        };
        if before != after.label {
            let ids = examples
                .entry((before.clone(), after.label.clone()))
                .or_default();
            if ids.len() < 3 {
                ids.push(format!("ev_{i:04}"));
            }
        }
        observed.record(&before, Some(&after));
    }
    let rules = [
        "drop-ci-noise--bots".to_string(),
        "drop-ci-noise--ci-noise".to_string(),
        "drop-ci-noise--never".to_string(),
        "mine".to_string(),
    ];
    let from_pack = |id: &str| {
        id.starts_with("drop-ci-noise--")
            .then(|| "drop-ci-noise".into())
    };
    let day = 86_400_000;
    TrialReport::build(
        &TrialFacts {
            trial_id: "tr_0123",
            webhook_id: "wh_0123",
            plan_id: "pl_0123",
            started_at_ms: 1_796_000_000_000,
            started_by: "ep_agent",
            ended_at_ms: ended.map(|_| 1_796_000_000_000 + 2 * day),
            end: ended,
            limits: TrialLimits {
                max_deliveries: Some(1000),
                ..TrialLimits::default()
            },
            candidate_digest: "c0ffee",
            base_config_digest: "ba5e",
            forecast: &forecast,
            observed: &observed,
            examples: &examples,
            candidate_rule_ids: &rules,
            from_pack: &from_pack,
            fail_closed: false,
        },
        1_796_000_000_000 + day,
        DEFAULT_MIN_DELIVERIES,
    )
}

/// The trial page: state, deliveries, why it is insufficient, the chart (an SVG image with a
/// title, unforeseen lost work flagged in a class of its own and in words), then the plan's
/// report over its live deliveries.
#[test]
fn the_trial_page_matches_its_golden_file() {
    let chrome = chrome();
    let report = trial_report(None);
    assert_eq!(
        (
            report.deliveries.seen,
            report.deliveries.evaluated,
            report.deliveries.not_evaluated
        ),
        (300, 290, 10)
    );
    let view = TrialView {
        chrome: &chrome,
        owner_scope: "human:alice".into(),
        webhook_name: String::new(),
        report: &report,
    };
    let html = trial_page(&view).into_string();
    matches_golden("trial-page", &html);
    assert!(html.contains(r#"data-state="running""#), "{html}");
    assert!(html.contains(r#"<svg class="evidence-chart" id="evidence-chart" role="img""#));
    assert!(html.contains("<title>Forecast versus observed"));
    assert_eq!(
        html.matches(r#"<g class="row lost flagged unforeseen outside">"#)
            .count(),
        1,
        "queue:ci → drop, unforeseen: {html}"
    );
    assert!(html.contains("lost work, unforeseen, outside the interval"));
    assert!(html.contains(
        "the replay predicted queue:forge → quarantine, and the trial never observed it"
    ));
    assert!(html.contains(r#"href="/console/plans/pl_0123""#));
    assert!(html.contains(r#"href="/console/webhooks/wh_0123""#));
    assert!(
        html.contains("<code>ev_0003</code>"),
        "example ids, as text: {html}"
    );
    assert!(
        !html.contains("href=\"/console/events"),
        "examples link to nothing"
    );
    assert!(
        !html.contains(" style="),
        "the CSP forbids style attributes"
    );

    let ended = trial_report(Some(TrialEnd::Promoted));
    let html = trial_page(&TrialView {
        report: &ended,
        ..view
    })
    .into_string();
    assert!(html.contains(r#"data-end="promoted""#), "{html}");
}

/// A promotion's plan carries the trial: its section shows the chart and the deliveries,
/// and an insufficient trial is a warning beside Accept and in the section, saying that
/// accepting applies it anyway.
#[test]
fn a_promotions_plan_page_shows_its_trial_and_warns_when_it_is_insufficient() {
    let chrome = chrome();
    let mut plan = golden_plan("plan-install");
    let report = trial_report(Some(TrialEnd::Promoted));
    assert!(!report.sufficient);
    plan.trial = Some(report.clone());
    plan.trial_sufficient = Some(false);
    let html = plan_page(&view(&chrome, &plan, PlanState::PendingApproval)).into_string();
    matches_golden("plan-promotion-page", &html);
    assert!(html.contains(r#"id="trial-heading""#), "{html}");
    assert!(html.contains(r#"<svg class="evidence-chart" id="evidence-chart""#));
    assert!(html.contains(r#"id="accept-insufficient""#));
    assert!(html.contains("Accepting applies this plan anyway"));
    assert!(html.contains(r#"href="/console/trials/tr_0123""#));
    assert!(html.contains("<strong>300</strong> live deliveries seen"));

    // Sufficient: no warning, no opt-in; without a trial, no section at all.
    let mut sufficient = report;
    sufficient.sufficient = true;
    sufficient.insufficient.clear();
    plan.trial = Some(sufficient);
    plan.trial_sufficient = Some(true);
    let html = plan_page(&view(&chrome, &plan, PlanState::PendingApproval)).into_string();
    assert!(html.contains(r#"id="trial-heading""#));
    assert!(!html.contains("accept-insufficient") && !html.contains("class=\"warning\""));
    let plain = golden_plan("plan-install");
    let html = plan_page(&view(&chrome, &plain, PlanState::PendingApproval)).into_string();
    assert!(!html.contains("trial-heading") && !html.contains("id=\"evidence-chart\""));
}

/// The webhook page lists its trials, each linking to its page, with lost work counted.
#[test]
fn the_webhook_page_lists_its_trials() {
    let running = trial_report(None);
    let mut ended = trial_report(Some(TrialEnd::Stopped));
    ended.trial_id = "tr_0999".into();
    ended.started_at = "2020-01-01T00:00:00.000Z".into();
    let v = WebhookView {
        webhook_id: "wh_0123".into(),
        trials: trial_rows(&[ended, running]),
        history: vec![HistoryRow {
            version: 2,
            change: "install_rule_pack drop-ci-noise@2.0.0".into(),
            trial: Some("tr_0999".into()),
            ..HistoryRow::default()
        }],
        ..WebhookView::default()
    };
    assert_eq!(v.trials[0].trial_id, "tr_0123", "running first");
    assert_eq!(v.trials[0].lost_work, 50, "forge → drop 30, ci → drop 20");
    let html = webhook_page(&chrome(), &v).into_string();
    assert_eq!(
        html.matches(r#"class="trial-row lost""#).count(),
        2,
        "{html}"
    );
    assert!(html.contains(r#"<a href="/console/trials/tr_0123">"#));
    assert!(html.contains(r#"<a href="/console/trials/tr_0999">"#));
    assert!(html.contains("ended: stopped"));
    assert!(
        html.contains(r#"drop-ci-noise@2.0.0 from trial <a href="/console/trials/tr_0999">"#),
        "the history names the trial whose candidate went live: {html}"
    );
    let none = webhook_page(&chrome(), &WebhookView::default()).into_string();
    assert!(none.contains("No trials."));
}

/// Issue 46: a reverted plan's guard on the plan page — the breach as an alert, the revert,
/// and the recovery waiting for a person, with the form for an editor only; the webhook page's
/// banner links to the plan's guard. A plan not yet applied shows the guard it carries.
#[test]
fn a_breached_guard_shows_as_an_alert_and_its_waiting_recovery_is_offered_to_editors_only() {
    use switchboard_model::guard::{
        Breach, GuardForecast, GuardReport, OnBreach, Recovery, RecoveryState,
    };
    let plan = golden_plan("plan-install");
    let chrome = chrome();
    let planned = plan_page(&view(&chrome, &plan, PlanState::PendingApproval)).into_string();
    assert!(
        planned.contains("1000 live deliveries or 7 days") && planned.contains("reverted"),
        "the plan's guard: {planned}"
    );
    let breach = Breach::UnforeseenLostWork {
        from: q("triage"),
        to: Label::Drop,
        count: 3,
    };
    let mut report = GuardReport {
        on_breach: OnBreach::Revert,
        confirmed_version: 4,
        replaced_version: 3,
        forecast: GuardForecast::default(),
        breach_text: Some(breach.to_string()),
        breach: Some(breach),
        reverted_version: Some(5),
        recovery: Some(Recovery {
            redrive_id: "rd_1".into(),
            state: RecoveryState::AwaitingPerson,
            changes: 6,
            ..Recovery::default()
        }),
        ..GuardReport::default()
    };
    report.report.plan_id = "pl_0123".into();
    let editor = PlanView {
        guard: Some(report.clone()),
        ..view(&chrome, &plan, PlanState::Reverted)
    };
    let html = plan_page(&editor).into_string();
    assert!(
        html.contains("id=\"guard-breach\" role=\"alert\""),
        "{html}"
    );
    assert!(html.contains("saved again as version 5"), "{html}");
    assert!(
        html.contains("action=\"/console/plans/pl_0123/recover\""),
        "{html}"
    );
    assert!(html.contains("Recover 6 deliveries"), "{html}");
    let viewer = PlanView {
        may_decide: false,
        ..editor.clone()
    };
    let html = plan_page(&viewer).into_string();
    assert!(!html.contains("/recover\""), "no form for a viewer: {html}");
    assert!(html.contains("needs the editor role"), "{html}");

    let webhook = WebhookView {
        webhook_id: "wh_0123".into(),
        guard: Some(report),
        ..WebhookView::default()
    };
    let html = webhook_page(&chrome, &webhook).into_string();
    assert!(
        html.contains("id=\"breach-banner\" role=\"alert\""),
        "{html}"
    );
    assert!(
        html.contains("href=\"/console/plans/pl_0123#guard-heading\""),
        "{html}"
    );
    assert!(html.contains("id=\"webhook-guard\""), "{html}");
    assert!(html.contains("(it breached)"), "{html}");
}

/// The pages not rendered from a plan, each as a golden file: the webhook page (with its
/// decisions over time), the events page, the sign-in page, a message page.
#[test]
fn the_other_pages_match_their_golden_files() {
    use switchboard_console::{Activity, EventRow, EventsFilter, EventsView, events_page};
    let hour = NOW_MS / 3_600_000;
    let counts = [
        (hour, Some(Label::Drop), 3),
        (hour - 1, Some(q("forge")), 5),
        (hour - 30, Some(Label::Quarantine), 1),
        (hour - 30, Some(Label::Fault), 2),
        (hour, None, 1),
    ];
    let events = vec![
        EventRow {
            id: "ev_1".into(),
            received_at: "2026-12-05T07:59:00.000Z".into(),
            kind: "push".into(),
            verified: true,
            decision: "drop".into(),
            rule_id: Some("ci-noise".into()),
            version: Some(4),
        },
        EventRow {
            id: "ev_2".into(),
            received_at: "2026-12-05T07:00:00.000Z".into(),
            kind: "pull_request.opened".into(),
            verified: false,
            decision: "pending".into(),
            ..EventRow::default()
        },
    ];
    let webhook = WebhookView {
        webhook_id: "wh_1".into(),
        name: "acme/site (prod)".into(),
        owner_scope: "team:ops".into(),
        source_type: "github".into(),
        config_version: 4,
        confirm_policy: "person".into(),
        grant: vec!["forge".into()],
        rules: vec![RuleRow {
            id: "ci-noise".into(),
            when: ".event == \"check_run\"".into(),
            action: "drop".into(),
            ..RuleRow::default()
        }],
        may_edit: true,
        events: events.clone(),
        activity: Activity::from_counts(NOW_MS, 7, &counts, vec![(NOW_MS - 3_600_000, 4)]),
        ..WebhookView::default()
    };
    matches_golden(
        "webhook-page",
        &webhook_page(&chrome(), &webhook).into_string(),
    );
    let listed = EventsView {
        webhook_id: "wh_1".into(),
        webhook_name: "acme/site (prod)".into(),
        owner_scope: "team:ops".into(),
        filter: EventsFilter {
            decision: "drop".into(),
            ..EventsFilter::default()
        },
        rows: events,
        next: Some("/console/webhooks/wh_1/events?decision=drop&cursor=c1".into()),
        now_ms: NOW_MS,
        ..EventsView::default()
    };
    let html = events_page(&chrome(), &listed).into_string();
    assert!(
        html.contains("rule <code>ci-noise</code> of version 4"),
        "{html}"
    );
    assert!(html.contains("<option value=\"drop\" selected>"), "{html}");
    matches_golden("events-page", &html);
    matches_golden(
        "sign-in-page",
        &switchboard_console::sign_in_page("/console/plans/pl_1").into_string(),
    );
    matches_golden(
        "not-found-page",
        &switchboard_console::message_page(
            "Not found",
            Some(&chrome()),
            "There is no such page for you.",
        )
        .into_string(),
    );
}
