//! Issue 21 item 2: the CLI for people (`switchboard webhooks|events|rules|packs|todos …`)
//! through the real binary against a real `switchboard control` and router, on SQLite and
//! PostgreSQL, with real signed deliveries. Every command's table and `--output json` answers
//! are golden files (`golden/cli/`, ids, times and digests normalised; `UPDATE_GOLDEN=1`
//! rewrites them), the same on both backends; the exit codes are the documented ones; colour
//! only when asked of a terminal, never when piped or under NO_COLOR.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use switchboard_control::store::{
    Actor, ConfirmPolicy, NewEndpoint, SaveConfiguration, SourceType,
};

use crate::cli::Process;
use crate::control_harness::{TestDb, human, on_every_backend, post, signed, webhook};
use crate::support::{RouterProcess, binary, payload};

/// `switchboard <args>` against `grpc` with `token` in SWITCHBOARD_TOKEN (none: unset),
/// stdout piped: (exit code, stdout, stderr).
fn run(grpc: &str, token: Option<&str>, args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let mut command = Command::new(binary());
    command
        .args(args)
        .env("SWITCHBOARD_CONTROL", grpc)
        .env("SWITCHBOARD_LOG", "warn")
        .env_remove("SWITCHBOARD_TOKEN")
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .env_remove("CLICOLOR");
    if let Some(token) = token {
        command.env("SWITCHBOARD_TOKEN", token);
    }
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("switchboard runs");
    Outcome {
        code: out.status.code().expect("an exit code"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[derive(Debug)]
struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Replaces what differs from run to run: the known ids by name, plan and endpoint ids,
/// then RFC 3339 times, millisecond timestamps (13 digits) and sha256 digests (64 hex
/// digits) by kind.
fn normalise(text: &str, known: &[(String, String)]) -> String {
    let mut text = text.to_string();
    for (value, name) in known {
        text = text.replace(value.as_str(), name);
    }
    for (prefix, name) in [
        ("pl_", "<plan-id>"),
        ("ep_", "<endpoint>"),
        ("gd_", "<guard-id>"),
    ] {
        let mut rest = text.as_str();
        let mut out = String::new();
        while let Some(at) = rest.find(prefix) {
            let tail = &rest[at + prefix.len()..];
            let hex = tail.bytes().take_while(u8::is_ascii_hexdigit).count();
            out.push_str(&rest[..at]);
            if hex == 32 {
                out.push_str(name);
            } else {
                out.push_str(&rest[at..at + prefix.len() + hex]);
            }
            rest = &tail[hex..];
        }
        out.push_str(rest);
        text = out;
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let digit = |c: Option<&char>| c.is_some_and(|c| c.is_ascii_digit());
    let boundary = |i: usize| i == 0 || !chars[i - 1].is_ascii_alphanumeric();
    while i < chars.len() {
        // 2026-12-04T09:19:10(.123)Z
        let shape = "dddd-dd-ddTdd:dd:dd";
        let is_time = boundary(i)
            && chars.len() >= i + shape.len()
            && shape.chars().zip(&chars[i..]).all(|(s, c)| {
                if s == 'd' {
                    c.is_ascii_digit()
                } else {
                    s == *c
                }
            });
        if is_time {
            let mut j = i + shape.len();
            if chars.get(j) == Some(&'.') {
                j += 1;
                while digit(chars.get(j)) {
                    j += 1;
                }
            }
            if chars.get(j) == Some(&'Z') {
                j += 1;
            }
            out.push_str("<time>");
            i = j;
            continue;
        }
        if boundary(i) && chars[i].is_ascii_hexdigit() {
            let mut j = i;
            while j < chars.len() && chars[j].is_ascii_hexdigit() {
                j += 1;
            }
            let run = j - i;
            let ends = j == chars.len() || !chars[j].is_ascii_alphanumeric();
            let all_digits = chars[i..j].iter().all(char::is_ascii_digit);
            if ends && run == 64 {
                out.push_str("<sha256>");
                i = j;
                continue;
            }
            if ends && run == 13 && all_digits {
                out.push_str("<ms>");
                i = j;
                continue;
            }
            out.extend(&chars[i..j]);
            i = j;
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// The plan token a plan's table names.
fn token_of(table: &str) -> String {
    table
        .lines()
        .find_map(|l| l.strip_prefix("token    "))
        .unwrap_or_else(|| panic!("the table names the token: {table}"))
        .trim()
        .to_string()
}

/// Compares `text` with `golden/cli/<name>`; `UPDATE_GOLDEN=1` writes it instead.
fn assert_golden(name: &str, text: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/all/golden/cli")
        .join(name);
    if std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().expect("dir")).expect("golden dir");
        // Both backends write the same text; a rename keeps a reader from seeing half a file.
        let tmp = path.with_file_name(format!(
            ".{name}.{}.tmp",
            switchboard_control::secrets::random_hex(8).expect("random")
        ));
        std::fs::write(&tmp, text).expect("write golden");
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
        let diff: Vec<String> = expected
            .lines()
            .zip(text.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(10)
            .map(|(n, (a, b))| format!("line {}:\n- {a}\n+ {b}", n + 1))
            .collect();
        panic!(
            "{} differs (UPDATE_GOLDEN=1 rewrites it if the change is intended; {} vs {} lines):\n{}",
            path.display(),
            expected.lines().count(),
            text.lines().count(),
            diff.join("\n")
        );
    }
}

on_every_backend! {
    people_cli_answers_every_command_as_table_and_json,
}

/// The CLI against `switchboard control` (with a router) on each backend, every command in
/// both outputs; the same golden files for both.
pub async fn people_cli_answers_every_command_as_table_and_json(db: TestDb) {
    let dir = tempfile::tempdir().expect("temp dir");
    let router = RouterProcess::spawn(&["--children", "1"]);
    let dev = human(&db.store, "dev").await;
    let hook = webhook(&db.store, &dev, SourceType::Github, None).await;
    let endpoint = db
        .store
        .vend_endpoint(NewEndpoint {
            name: "dev's terminal".into(),
            human_login: "dev".into(),
            owner_scope: dev.clone(),
            verbs: switchboard_control::verbs::FAMILIES
                .iter()
                .map(|f| f.name().to_string())
                .collect(),
        })
        .await
        .expect("vend");
    let mut control = Process::spawn(
        &[
            "control",
            "--database-url",
            &db.url,
            "--http-listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
            "--routers",
            &router.addr,
            "--console-url",
            "https://switchboard.example.com",
        ],
        &[(
            crate::support::SECRET_KEY_ENV,
            crate::support::secret_key_hex(),
        )],
    );
    let http: SocketAddr = control
        .line("ingest listening on http://")
        .parse()
        .expect("http address");
    let grpc = control.line("control grpc listening on ");
    let authority = http.to_string();
    let path = format!("hooks/{}", hook.id);

    // Four real deliveries, all to the default queue (no rules yet): a pull request, a
    // push, and two CI events drop-ci-noise drops.
    let mut known: Vec<(String, String)> = vec![
        (hook.id.clone(), "<webhook>".into()),
        (authority.clone(), "<ingest>".into()),
    ];
    let mut events = Vec::new();
    let mut todos = Vec::new();
    for (n, (event, file)) in [
        ("pull_request", "pull_request.opened.json"),
        ("push", "push.json"),
        ("check_run", "check_run.completed.json"),
        ("workflow_job", "workflow_job.queued.json"),
    ]
    .into_iter()
    .enumerate()
    {
        let p = payload("github", file);
        let delivery = format!("people-{}", n + 1);
        let headers = signed("github", event, &delivery, &hook.secret, &p.body);
        let resp = post(http, &format!("/{path}"), &headers, &p.body).await;
        assert_eq!(resp.status, 202, "{resp:?}");
        let answer = resp.json();
        assert_eq!(answer["decision"], "default", "{answer}");
        let id = answer["event_id"].as_str().expect("event id").to_string();
        known.push((id.clone(), format!("<event-{}>", n + 1)));
        events.push(id);
        let todo = answer["todo_id"].as_str().expect("a todo").to_string();
        known.push((todo.clone(), format!("<todo-{}>", n + 1)));
        todos.push(todo);
    }
    let grpc = grpc.as_str();
    let token = Some(endpoint.credential.as_str());
    let wh = hook.id.as_str();

    // Each command twice, table and JSON: both golden, both exit 0, neither coloured.
    let both = |name: &str, args: &[&str], known: &[(String, String)]| {
        let table = run(grpc, token, args, &[]);
        assert_eq!(table.code, 0, "{args:?}: {}", table.stderr);
        assert!(!table.stdout.contains('\x1b'), "piped: no colour: {args:?}");
        assert_golden(&format!("{name}.txt"), &normalise(&table.stdout, known));
        let mut json_args = args.to_vec();
        json_args.extend(["--output", "json"]);
        let json = run(grpc, token, &json_args, &[]);
        assert_eq!(json.code, 0, "{args:?}: {}", json.stderr);
        let value: serde_json::Value =
            serde_json::from_str(&json.stdout).unwrap_or_else(|e| panic!("{e}: {}", json.stdout));
        assert_golden(&format!("{name}.json"), &normalise(&json.stdout, known));
        value
    };

    // Named first (issue 48), so the listings show the name beside the id.
    let renamed = both(
        "webhooks-rename",
        &["webhooks", "rename", wh, "acme/site (people)"],
        &known,
    );
    assert_eq!(renamed["webhook"]["name"], "acme/site (people)");
    let listed = both("webhooks-list", &["webhooks", "list"], &known);
    assert_eq!(listed["webhooks"][0]["id"], wh);
    assert_eq!(listed["webhooks"][0]["name"], "acme/site (people)");
    let shown = both("webhooks-show", &["webhooks", "show", wh], &known);
    assert_eq!(shown["webhook"]["config_version"], 1);

    let listed = both("events-list", &["events", "list", wh], &known);
    let ids: Vec<&str> = listed["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["id"].as_str().expect("id"))
        .collect();
    let newest_first: Vec<&str> = events.iter().rev().map(String::as_str).collect();
    assert_eq!(ids, newest_first);
    let limited = both(
        "events-list-decision",
        &[
            "events",
            "list",
            wh,
            "--decision",
            "default",
            "--limit",
            "2",
        ],
        &known,
    );
    assert_eq!(limited["events"].as_array().map(Vec::len), Some(2));
    let none = run(
        grpc,
        token,
        &[
            "events",
            "list",
            wh,
            "--decision",
            "drop",
            "--output",
            "json",
        ],
        &[],
    );
    assert_eq!(none.code, 0, "{}", none.stderr);
    assert!(none.stdout.contains("\"events\": []"), "{}", none.stdout);
    let shown = both("events-show", &["events", "show", &events[1]], &known);
    assert_eq!(shown["event"]["kind"], "push");
    assert_eq!(shown["payload"]["ref"], "refs/tags/simple-tag");

    // Rules: none yet; a candidate replayed over the four deliveries (nothing saved).
    both("rules-list-empty", &["rules", "list", wh], &known);
    let candidate = dir.path().join("candidate.json");
    std::fs::write(
        &candidate,
        r#"{"rules": [{"id": "no-pushes", "when": ".kind == \"push\"", "action": {"drop": true}}]}"#,
    )
    .expect("write candidate");
    let candidate = candidate.to_str().expect("utf-8 path");
    let tested = both(
        "rules-test",
        &["rules", "test", wh, "--file", candidate],
        &known,
    );
    assert_eq!(tested["replay_report"]["events_replayed"], 4);
    assert_eq!(tested["replay_report"]["changed"], 1);

    // Packs: the catalog, a plan (lost work first), where it stands, its confirm.
    both("packs-list", &["packs", "list"], &known);
    let plan = run(
        grpc,
        token,
        &["packs", "install", wh, "drop-ci-noise", "--output", "json"],
        &[],
    );
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let plan: serde_json::Value = serde_json::from_str(&plan.stdout).expect("json plan");
    let first_token = plan["plan_token"].as_str().expect("token").to_string();
    known.push((first_token.clone(), "<plan-token-1>".into()));
    assert_golden(
        "packs-install.json",
        &normalise(&serde_json::to_string_pretty(&plan).expect("json"), &known),
    );
    // The table plans again (a new token): the same plan, for people.
    let table = run(grpc, token, &["packs", "install", wh, "drop-ci-noise"], &[]);
    assert_eq!(table.code, 0, "{}", table.stderr);
    let token_line = token_of(&table.stdout);
    known.push((token_line.clone(), "<plan-token-2>".into()));
    let lost = table.stdout.find("LOST WORK").expect("lost work shown");
    let changes = table.stdout.find("changes:").expect("changes shown");
    assert!(lost < changes, "lost work first: {}", table.stdout);
    assert!(
        table.stdout.contains(&format!(
            "confirm  switchboard packs confirm {wh} {token_line}\n"
        )),
        "the exact confirm command: {}",
        table.stdout
    );
    assert!(!table.stdout.contains('\x1b'));
    assert_golden("packs-install.txt", &normalise(&table.stdout, &known));

    // On a terminal (forced here) the plan is coloured; NO_COLOR wins over it.
    let forced = run(
        grpc,
        token,
        &["packs", "install", wh, "drop-ci-noise"],
        &[("CLICOLOR_FORCE", "1")],
    );
    assert_eq!(forced.code, 0, "{}", forced.stderr);
    assert!(
        forced.stdout.contains("\x1b[1m\x1b[31mLOST WORK")
            || forced.stdout.contains("\x1b[31m\x1b[1mLOST WORK")
            || forced.stdout.contains("\x1b[1;31mLOST WORK"),
        "lost work in bold red: {:?}",
        forced.stdout
    );
    assert!(forced.stdout.contains("\x1b[32m+ rule drop-ci-noise--"));
    let plain = run(
        grpc,
        token,
        &["packs", "install", wh, "drop-ci-noise"],
        &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")],
    );
    assert!(!plain.stdout.contains('\x1b'), "{:?}", plain.stdout);

    let status = both("packs-plan", &["packs", "plan", &token_line], &known);
    assert_eq!(status["state"], "planned");
    let applied = run(
        grpc,
        token,
        &["packs", "confirm", wh, &token_line, "--output", "json"],
        &[],
    );
    assert_eq!(applied.code, 0, "{}", applied.stderr);
    assert_golden("packs-confirm.json", &normalise(&applied.stdout, &known));
    let value: serde_json::Value = serde_json::from_str(&applied.stdout).expect("json");
    assert_eq!(
        (value["saved"].as_bool(), value["version"].as_i64()),
        (Some(true), Some(2))
    );
    // The first plan was made against version 1; version 2 is saved now: stale, exit 4.
    let stale = run(grpc, token, &["packs", "confirm", wh, &first_token], &[]);
    assert_eq!(stale.code, 4, "{stale:?}");
    assert!(stale.stderr.contains("plan_stale"), "{}", stale.stderr);
    assert!(stale.stdout.is_empty(), "{}", stale.stdout);
    let status = run(
        grpc,
        token,
        &["packs", "plan", &token_line, "--output", "json"],
        &[],
    );
    assert!(
        status.stdout.contains("\"state\": \"applied\""),
        "{status:?}"
    );

    // The check run was decided by version 1's default; version 2 drops it.
    let explained = both("explain", &["explain", &events[2]], &known);
    assert_eq!(explained["current_decision"]["decision"], "drop");
    both(
        "packs-list-webhook",
        &["packs", "list", "--webhook", wh],
        &known,
    );
    both("rules-list", &["rules", "list", wh], &known);

    // A removal plan, both ways, then confirmed from the table's command.
    let removal = run(
        grpc,
        token,
        &["packs", "remove", wh, "drop-ci-noise", "--output", "json"],
        &[],
    );
    assert_eq!(removal.code, 0, "{}", removal.stderr);
    let removal: serde_json::Value = serde_json::from_str(&removal.stdout).expect("json plan");
    known.push((
        removal["plan_token"].as_str().expect("token").to_string(),
        "<plan-token-3>".into(),
    ));
    assert_golden(
        "packs-remove.json",
        &normalise(
            &serde_json::to_string_pretty(&removal).expect("json"),
            &known,
        ),
    );
    let removal = run(grpc, token, &["packs", "remove", wh, "drop-ci-noise"], &[]);
    assert_eq!(removal.code, 0, "{}", removal.stderr);
    let removal_token = token_of(&removal.stdout);
    known.push((removal_token.clone(), "<plan-token-4>".into()));
    assert_golden("packs-remove.txt", &normalise(&removal.stdout, &known));
    let confirm_line = removal
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("confirm  switchboard "))
        .expect("the confirm command");
    let confirm_args: Vec<&str> = confirm_line.split_whitespace().collect();
    let removed = run(grpc, token, &confirm_args, &[]);
    assert_eq!(removed.code, 0, "{}", removed.stderr);
    assert_golden("packs-confirm.txt", &normalise(&removed.stdout, &known));
    let history = both("rules-history", &["rules", "history", wh], &known);
    assert_eq!(history["records"][0]["version"], 3);

    // A webhook whose plans a person confirms: the confirm puts the plan before them and
    // exits 4 (nothing saved yet), in both outputs.
    db.store
        .set_confirm_policy(&dev, wh, ConfirmPolicy::Person)
        .await
        .expect("confirm policy person");
    for (n, output) in [(5, "table"), (6, "json")] {
        let plan = run(grpc, token, &["packs", "install", wh, "drop-ci-noise"], &[]);
        assert_eq!(plan.code, 0, "{}", plan.stderr);
        let plan_token = token_of(&plan.stdout);
        known.push((plan_token.clone(), format!("<plan-token-{n}>")));
        let pending = run(
            grpc,
            token,
            &["packs", "confirm", wh, &plan_token, "--output", output],
            &[],
        );
        assert_eq!(pending.code, 4, "{pending:?}");
        let ext = if output == "json" { "json" } else { "txt" };
        assert_golden(
            &format!("packs-confirm-pending.{ext}"),
            &normalise(&pending.stdout, &known),
        );
        let status = run(grpc, token, &["packs", "plan", &plan_token], &[]);
        assert!(
            status.stdout.contains("state        pending_approval"),
            "{status:?}"
        );
    }

    // Todos: the four, then one claimed, released, claimed and completed.
    let listed = both("todos-list", &["todos", "list"], &known);
    assert_eq!(listed["todos"].as_array().map(Vec::len), Some(4));
    both(
        "todos-list-queue",
        &["todos", "list", "--queue", "forge", "--unclaimed"],
        &known,
    );
    let claimed = both("todos-claim", &["todos", "claim", &todos[0]], &known);
    assert_eq!(claimed["todo"]["state"], "claimed");
    let unclaimed = run(
        grpc,
        token,
        &["todos", "list", "--unclaimed", "--output", "json"],
        &[],
    );
    assert!(!unclaimed.stdout.contains(&todos[0]), "{unclaimed:?}");
    let released = both("todos-release", &["todos", "release", &todos[0]], &known);
    assert_eq!(released["todo"]["state"], "open");
    let done = run(grpc, token, &["todos", "claim", &todos[0]], &[]);
    assert_eq!(done.code, 0, "{}", done.stderr);
    let completed = both("todos-complete", &["todos", "complete", &todos[0]], &known);
    assert_eq!(completed["todo"]["state"], "completed");

    // Redrive: a rule that faults quarantines two pull requests; after the fix, `events
    // redrive` plans their re-routing (nothing changes), the printed confirm command applies
    // it, each gets one todo, and the same command again is refused as stale (exit 4).
    let save = |configuration: serde_json::Value| {
        let store = db.store.clone();
        let (dev, wh) = (dev.clone(), wh.to_string());
        async move {
            store
                .save_configuration(
                    &dev,
                    &wh,
                    SaveConfiguration {
                        expected_version: None,
                        configuration: crate::support::typed(configuration),
                        actor: Actor::operator(),
                        change: switchboard_model::ConfigurationChange::op("set_webhook_rules"),
                        provenance: None,
                        installed_packs: None,
                        trusted_actors: None,
                        plan_token_hash: None,
                    },
                )
                .await
                .expect("save the rules")
        }
    };
    // `.payload.action` is a string, not a boolean: the rule faults.
    save(serde_json::json!({"rules": [
        {"id": "prs", "when": ".payload.action", "action": {"queue": "forge"}}
    ], "params": {}}))
    .await;
    let p = payload("github", "pull_request.opened.json");
    for n in 1..=2 {
        let headers = signed(
            "github",
            "pull_request",
            &format!("q-{n}"),
            &hook.secret,
            &p.body,
        );
        let resp = post(http, &format!("/{path}"), &headers, &p.body).await;
        assert_eq!(resp.json()["decision"], "fault", "{resp:?}");
    }
    save(serde_json::json!({"rules": [
        {"id": "prs", "when": ".payload.action == \"opened\"", "action": {"queue": "forge"}}
    ], "params": {}}))
    .await;
    let plan = run(
        grpc,
        token,
        &["events", "redrive", wh, "--output", "json"],
        &[],
    );
    assert_eq!(plan.code, 0, "{plan:?}");
    let plan: serde_json::Value = serde_json::from_str(&plan.stdout).expect("a plan");
    assert_eq!(plan["changes"], 2, "{plan}");
    for e in plan["events"].as_array().expect("events") {
        assert_eq!(e["before"], "fault", "{e}");
        assert_eq!(e["after"], "queue:forge", "{e}");
    }
    let table = run(grpc, token, &["events", "redrive", wh], &[]);
    assert_eq!(table.code, 0, "{table:?}");
    assert!(
        table
            .stdout
            .contains("changes: 2 of 2 selected deliveries would be recorded"),
        "{}",
        table.stdout
    );
    let confirm = table
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("confirm"))
        .expect("the confirm command")
        .trim()
        .to_string();
    let confirm: Vec<&str> = confirm.split_whitespace().collect();
    assert_eq!(confirm[..2], ["switchboard", "events"], "{confirm:?}");
    let applied = run(grpc, token, &confirm[1..], &[]);
    assert_eq!(applied.code, 0, "{applied:?}");
    assert!(
        applied.stdout.contains(": 2 re-routed"),
        "{}",
        applied.stdout
    );
    assert_eq!(
        applied.stdout.matches(" (new)").count(),
        2,
        "{}",
        applied.stdout
    );
    let again = run(grpc, token, &confirm[1..], &[]);
    assert_eq!(again.code, 4, "{again:?}");
    assert!(again.stderr.contains("plan_stale"), "{}", again.stderr);

    // Exit codes: not found 3 (named by the typed code), no credential 2, a bad flag 2, a
    // wrong credential 3, no control 1; errors name no address.
    let unknown_event = format!("ev_{}", "0".repeat(32));
    let unknown_webhook = format!("wh_{}", "0".repeat(32));
    for args in [
        vec!["events", "show", unknown_event.as_str()],
        vec!["webhooks", "show", unknown_webhook.as_str()],
        vec!["rules", "list", unknown_webhook.as_str()],
        vec!["events", "list", unknown_webhook.as_str()],
    ] {
        let out = run(grpc, token, &args, &[]);
        assert_eq!(out.code, 3, "{args:?}: {out:?}");
        assert!(out.stderr.contains("not_found"), "{args:?}: {}", out.stderr);
        assert!(!out.stderr.contains(grpc), "{}", out.stderr);
    }
    let out = run(grpc, None, &["webhooks", "list"], &[]);
    assert_eq!(
        (out.code, out.stderr.contains("SWITCHBOARD_TOKEN")),
        (2, true),
        "{out:?}"
    );
    let out = run(grpc, token, &["webhooks", "list", "--output", "yaml"], &[]);
    assert_eq!(out.code, 2, "{out:?}");
    let out = run(grpc, token, &["events", "list", wh, "--limit", "0"], &[]);
    assert_eq!(out.code, 2, "{out:?}");
    let out = run(
        grpc,
        token,
        &["events", "list", wh, "--decision", "dropped"],
        &[],
    );
    assert_eq!(out.code, 2, "{out:?}");
    // A candidate that is no configuration (read here) or whose jq does not compile (control
    // says so): invalid_configuration, exit 2.
    for (n, text) in [
        r#"{"rules": [{"when": 1, "action": {"drop": true}}]}"#,
        r#"{"rules": [{"id": "bad", "when": ".kind ==", "action": {"drop": true}}]}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let file = dir.path().join(format!("bad-{n}.json"));
        std::fs::write(&file, text).expect("write candidate");
        let file = file.to_str().expect("utf-8 path");
        let out = run(grpc, token, &["rules", "test", wh, "--file", file], &[]);
        assert_eq!(out.code, 2, "{text}: {out:?}");
        assert!(
            out.stderr.contains("invalid_configuration"),
            "{}",
            out.stderr
        );
    }
    let help = run(grpc, None, &["events", "list", "--help"], &[]);
    assert_eq!(help.code, 0, "{help:?}");
    assert!(
        help.stdout.contains("Exit codes: 0 ok, 1 other"),
        "{}",
        help.stdout
    );
    let out = run(grpc, Some("sbe_nope"), &["todos", "list"], &[]);
    assert_eq!(
        (out.code, out.stderr.contains("unauthenticated")),
        (5, true),
        "{out:?}"
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let nowhere = closed.local_addr().expect("address").to_string();
    drop(closed);
    let out = run(&nowhere, token, &["webhooks", "list"], &[]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("control_unavailable"), "{}", out.stderr);
    // The address the user gave is named (issue 49 item 3): which control did not answer.
    assert!(
        out.stderr
            .contains(&format!("control at {nowhere} did not answer")),
        "{}",
        out.stderr
    );

    // Tenancy and permission: another human's endpoint, allowed only the webhooks family,
    // sees the dev webhook and its deliveries as not found, exactly like unknown ids, and is
    // refused the todos verbs; both exit 3.
    let eve = human(&db.store, "eve").await;
    let vended = db
        .store
        .vend_endpoint(NewEndpoint {
            name: "eve's terminal".into(),
            human_login: "eve".into(),
            owner_scope: eve,
            verbs: vec!["webhooks".into()],
        })
        .await
        .expect("vend");
    let eve = Some(vended.credential.as_str());
    let listed = run(grpc, eve, &["webhooks", "list", "--output", "json"], &[]);
    assert_eq!(listed.code, 0, "{listed:?}");
    assert!(!listed.stdout.contains(wh), "{}", listed.stdout);
    for (args, unknown) in [
        (
            vec!["webhooks", "show", wh],
            vec!["webhooks", "show", unknown_webhook.as_str()],
        ),
        (
            vec!["events", "show", events[0].as_str()],
            vec!["events", "show", unknown_event.as_str()],
        ),
    ] {
        let theirs = run(grpc, eve, &args, &[]);
        let none = run(grpc, eve, &unknown, &[]);
        assert_eq!(theirs.code, 3, "{args:?}: {theirs:?}");
        assert_eq!(
            theirs
                .stderr
                .replace(wh, "<id>")
                .replace(&events[0], "<id>"),
            none.stderr
                .replace(&unknown_webhook, "<id>")
                .replace(&unknown_event, "<id>"),
            "another scope's answers as an unknown id"
        );
    }
    let refused = run(grpc, eve, &["todos", "list", "--queue", "forge"], &[]);
    assert_eq!(refused.code, 3, "{refused:?}");
    assert!(
        refused.stderr.contains("permission_denied"),
        "{}",
        refused.stderr
    );

    control.terminate();
    assert!(control.wait_exit(Duration::from_secs(30)).success());
}
