//! Issue 50, on SQLite: every statement the hot paths run reaches events, todos, plans and
//! trials by an index, never by a scan of the table or of a whole index. SQLite keeps no
//! per-table read counts (the PostgreSQL test, `store/hot_paths.rs`, reads those), so this test
//! records the statements themselves — sqlx reports each one it runs to `tracing` (target
//! `sqlx::query`) — while the same hot paths run beside the same bulk, then asks SQLite for
//! each statement's plan (`EXPLAIN QUERY PLAN`) on that database. No `ANALYZE` first:
//! `switchboard up` runs without statistics, so the plans checked are the ones its users get.
//!
//! A binary of its own: the recorder is the process's one global subscriber, and no other
//! test's statements may land in it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use switchboard_store::Backend;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

#[allow(dead_code)]
#[path = "store/harness.rs"]
mod harness;
#[allow(dead_code)]
#[path = "store/hot_paths.rs"]
mod hot_paths;

use hot_paths::HOT_TABLES;

/// Keeps the text of every statement sqlx reports while `on`.
#[derive(Clone, Default)]
struct Recorder {
    statements: Arc<Mutex<Vec<String>>>,
    on: Arc<std::sync::atomic::AtomicBool>,
}

/// The statement of one `sqlx::query` event: the whole text when it is longer than its
/// summary (`db.statement`), else the summary, which is then the whole text.
#[derive(Default)]
struct Statement {
    summary: String,
    statement: String,
}

impl Visit for Statement {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "summary" => self.summary = value.to_string(),
            "db.statement" => self.statement = value.to_string(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if matches!(field.name(), "summary" | "db.statement") {
            self.record_str(field, format!("{value:?}").trim_matches('"'));
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "sqlx::query"
            || !self.on.load(std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        let mut seen = Statement::default();
        event.record(&mut seen);
        let text = if seen.statement.trim().is_empty() {
            seen.summary
        } else {
            seen.statement
        };
        if let Ok(mut statements) = self.statements.lock() {
            statements.push(text.trim().to_string());
        }
    }
}

/// The highest `$N` in `sql`: how many values its plan needs bound.
fn placeholders(sql: &str) -> usize {
    let mut highest = 0;
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        rest = &rest[at + 1..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if let Ok(n) = digits.parse::<usize>() {
            highest = highest.max(n);
        }
    }
    highest
}

/// Whether `sql` names `table` as a whole word.
fn mentions(sql: &str, table: &str) -> bool {
    let words = |c: char| !(c.is_ascii_alphanumeric() || c == '_');
    sql.split(words).any(|w| w.eq_ignore_ascii_case(table))
}

/// The names a plan may call the hot tables by in `sql`: the tables, and the aliases the
/// statement gives them (`FROM events e`: SQLite's plan says `SCAN e`).
fn hot_names(sql: &str) -> Vec<String> {
    const NOT_ALIASES: [&str; 24] = [
        "WHERE",
        "JOIN",
        "ON",
        "SET",
        "ORDER",
        "GROUP",
        "LIMIT",
        "INNER",
        "LEFT",
        "USING",
        "VALUES",
        "WITH",
        "SELECT",
        "UNION",
        "AND",
        "OR",
        "RETURNING",
        "INDEXED",
        "NOT",
        "CROSS",
        "NATURAL",
        "OUTER",
        "HAVING",
        "DEFAULT",
    ];
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut names: Vec<String> = HOT_TABLES.iter().map(|t| t.to_string()).collect();
    let tokens: Vec<&str> = sql
        .split(|c: char| c.is_whitespace())
        .filter(|t| !t.is_empty())
        .collect();
    for (i, pair) in tokens.windows(2).enumerate() {
        let follows = ["FROM", "JOIN", "UPDATE", "INTO"]
            .iter()
            .any(|k| pair[0].eq_ignore_ascii_case(k));
        if !follows || !HOT_TABLES.iter().any(|t| pair[1].eq_ignore_ascii_case(t)) {
            continue;
        }
        let mut next = tokens.get(i + 2).copied().unwrap_or("");
        if next.eq_ignore_ascii_case("AS") {
            next = tokens.get(i + 3).copied().unwrap_or("");
        }
        let alias: String = next.chars().take_while(|c| word(*c)).collect();
        if !alias.is_empty()
            && alias.len() == next.trim_end_matches([',', ')', ';']).len()
            && !NOT_ALIASES.iter().any(|k| alias.eq_ignore_ascii_case(k))
        {
            names.push(alias);
        }
    }
    names
}

/// A plan step that reads all of one of `names` (a hot table or its alias), or all of one of
/// its indexes: the index, if one (`SCAN events USING INDEX x` → `Some(Some("x"))`;
/// `SEARCH …` → `None`).
fn scan_of<'a>(detail: &'a str, names: &[String]) -> Option<Option<&'a str>> {
    let mut words = detail.split_whitespace();
    if words.next() != Some("SCAN") || !words.next().is_some_and(|t| names.iter().any(|n| n == t)) {
        return None;
    }
    let rest: Vec<&str> = words.collect();
    Some(
        rest.iter()
            .position(|w| *w == "INDEX")
            .and_then(|at| rest.get(at + 1).copied()),
    )
}

/// The partial indexes whose rows are few whatever the table holds: deliveries not routed
/// yet, trials still running. Reading all of one reads none of the bulk; reading all of any
/// other (the ended trials, say) is a scan.
const SMALL_BY_PREDICATE: [&str; 2] = ["WHERE routed = 0", "WHERE ended_at IS NULL"];

#[test]
fn sqlite_hot_paths_reach_events_todos_plans_and_trials_by_index_only() {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone()).with(
        tracing_subscriber::filter::Targets::new()
            .with_target("sqlx::query", tracing::Level::TRACE),
    );
    tracing::subscriber::set_global_default(subscriber).expect("the one subscriber");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(harness::run_sqlite(|db| async move {
        assert_eq!(db.backend(), Backend::Sqlite);
        let seeded = hot_paths::seed(&db.store).await;
        recorder.on.store(true, std::sync::atomic::Ordering::SeqCst);
        hot_paths::walk(&db.store, &seeded).await;
        recorder
            .on
            .store(false, std::sync::atomic::Ordering::SeqCst);

        let statements: BTreeSet<String> = recorder
            .statements
            .lock()
            .expect("the statements")
            .iter()
            .filter(|sql| HOT_TABLES.iter().any(|t| mentions(sql, t)))
            .filter(|sql| {
                let verb = sql
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_ascii_uppercase();
                matches!(
                    verb.as_str(),
                    "SELECT" | "INSERT" | "UPDATE" | "DELETE" | "WITH"
                )
            })
            .cloned()
            .collect();
        assert!(
            statements.len() >= 20,
            "the recorder saw {} statements on the hot tables: {statements:#?}",
            statements.len()
        );
        let mut scans = Vec::new();
        let mut explain_read = None;
        for sql in &statements {
            let mut explain = sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")));
            for _ in 0..placeholders(sql) {
                explain = explain.bind(None::<String>);
            }
            let steps = explain
                .fetch_all(db.pool())
                .await
                .unwrap_or_else(|e| panic!("the plan of {sql}: {e}"));
            let details: Vec<String> = steps
                .iter()
                .map(|step| sqlx::Row::get(step, "detail"))
                .collect();
            if sql.contains("UNION ALL") && mentions(sql, "trials") {
                explain_read = Some(details.join(" | "));
            }
            for detail in details {
                let Some(index) = scan_of(&detail, &hot_names(sql)) else {
                    continue;
                };
                if let Some(index) = index {
                    let definition: Option<String> = sqlx::query_scalar(
                        "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = $1",
                    )
                    .bind(index)
                    .fetch_optional(db.pool())
                    .await
                    .expect("the index");
                    if definition.is_some_and(|d| SMALL_BY_PREDICATE.iter().any(|p| d.contains(p)))
                    {
                        continue;
                    }
                }
                scans.push(format!("{detail}\n    in: {sql}"));
            }
        }
        assert!(
            scans.is_empty(),
            "hot paths that scan:\n{}",
            scans.join("\n")
        );
        // Explain's read of the trials running at a delivery: each half by the partial index
        // that holds only its own, not by the webhook's whole history in start order (a
        // SEARCH, so the check above would not see it).
        let explain_read = explain_read.expect("explain's read of the trials");
        assert!(
            explain_read.contains("USING INDEX trials_running")
                && explain_read.contains("USING INDEX trials_ended"),
            "{explain_read}"
        );
    }));
}

#[test]
fn plan_steps_and_statements_are_read_as_meant() {
    let names = hot_names(
        "DELETE FROM events WHERE id IN (SELECT e.id FROM events e JOIN todos AS t ON t.event_id = e.id)",
    );
    assert_eq!(names[HOT_TABLES.len()..], ["e", "t"]);
    assert_eq!(scan_of("SCAN events", &names), Some(None));
    assert_eq!(scan_of("SCAN e", &names), Some(None));
    assert_eq!(
        scan_of("SCAN t USING INDEX todos_by_queue", &names),
        Some(Some("todos_by_queue"))
    );
    assert_eq!(
        scan_of("SCAN plans USING COVERING INDEX plans_by_hash", &names),
        Some(Some("plans_by_hash"))
    );
    assert_eq!(
        scan_of(
            "SEARCH e USING INDEX events_by_webhook (webhook_id=?)",
            &names
        ),
        None
    );
    assert_eq!(scan_of("SCAN v", &names), None);
    assert_eq!(scan_of("SCAN events_fts", &names), None);
    assert_eq!(
        hot_names("INSERT INTO todos (id) SELECT id FROM trials WHERE x")[HOT_TABLES.len()..],
        [] as [&str; 0]
    );
    assert_eq!(placeholders("SELECT $1, $12 FROM t WHERE a = $3"), 12);
    assert_eq!(placeholders("SELECT 1"), 0);
    assert!(mentions("DELETE FROM todos WHERE id = $1", "todos"));
    assert!(!mentions("SELECT * FROM todos_archive", "todos"));
}
