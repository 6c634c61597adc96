//! `switchboard todos list|claim|release|complete`: the work queue decisions produced.

use clap::{Args, Subcommand};
use switchboard_control_client::convert;
use switchboard_control_client::views::{ListTodosOut, TodoOut, TodoResultOut};
use switchboard_proto::control::v1 as pb;

use super::{Common, Failure, Session, Table, emit, exit, facts, time};

#[derive(Args, Debug)]
pub struct TodosArgs {
    #[command(subcommand)]
    command: TodosCommand,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug)]
enum TodosCommand {
    /// Open todos, oldest first (list_todos): of one queue, or of every queue your
    /// webhooks grant.
    #[command(after_help = super::EXIT_CODES_HELP)]
    List {
        /// Only this queue (default: every queue granted to your scope's webhooks).
        #[arg(long)]
        queue: Option<String>,
        /// Only todos nobody holds a claim on.
        #[arg(long, conflicts_with = "all")]
        unclaimed: bool,
        /// Completed todos too.
        #[arg(long)]
        all: bool,
        /// At most this many per queue (1–200).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=200))]
        limit: u32,
    },
    /// Claim a todo (or renew your claim) for the webhook's claim TTL (claim_todo).
    #[command(after_help = super::EXIT_CODES_HELP)]
    Claim { todo_id: String },
    /// Give a claimed todo back to its queue (release_todo).
    #[command(after_help = super::EXIT_CODES_HELP)]
    Release { todo_id: String },
    /// Mark a todo done (complete_todo).
    #[command(after_help = super::EXIT_CODES_HELP)]
    Complete { todo_id: String },
}

pub async fn run(args: TodosArgs) -> Result<u8, Failure> {
    let common = &args.common;
    match args.command {
        TodosCommand::List {
            queue,
            unclaimed,
            all,
            limit,
        } => {
            let s = Session::open("list_todos", common)?;
            let queues = match queue {
                Some(q) => vec![q],
                None => {
                    // Every queue a webhook of the scope grants, in the order first granted.
                    let webhooks = s
                        .client
                        .all_webhooks(&s.bearer)
                        .await
                        .map_err(|e| s.status(e))?;
                    let mut queues: Vec<String> = Vec::new();
                    for q in webhooks.into_iter().flat_map(|w| w.grant) {
                        if !queues.contains(&q) {
                            queues.push(q);
                        }
                    }
                    queues
                }
            };
            let filter = if all {
                pb::TodoFilter::All
            } else if unclaimed {
                pb::TodoFilter::Unclaimed
            } else {
                pb::TodoFilter::Open
            };
            let single = queues.len() == 1;
            let mut out = ListTodosOut {
                todos: Vec::new(),
                next_cursor: None,
            };
            for queue in queues {
                let r = s
                    .client
                    .list_todos(
                        &s.bearer,
                        pb::ListTodosRequest {
                            queue,
                            filter: filter as i32,
                            cursor: String::new(),
                            limit,
                        },
                    )
                    .await
                    .map_err(|e| s.status(e))?;
                out.todos.extend(r.todos.into_iter().map(convert::todo));
                // One queue: its cursor goes on; across queues there is none to give.
                if single {
                    out.next_cursor = (!r.next_cursor.is_empty()).then_some(r.next_cursor);
                }
            }
            emit(s.output, &out, |o| list_table(&o.todos))?;
        }
        TodosCommand::Claim { todo_id } => {
            let s = Session::open("claim_todo", common)?;
            let r = s
                .client
                .claim_todo(&s.bearer, pb::ClaimTodoRequest { todo_id })
                .await
                .map_err(|e| s.status(e))?;
            one(&s, r.todo)?;
        }
        TodosCommand::Release { todo_id } => {
            let s = Session::open("release_todo", common)?;
            let r = s
                .client
                .release_todo(&s.bearer, pb::ReleaseTodoRequest { todo_id })
                .await
                .map_err(|e| s.status(e))?;
            one(&s, r.todo)?;
        }
        TodosCommand::Complete { todo_id } => {
            let s = Session::open("complete_todo", common)?;
            let r = s
                .client
                .complete_todo(&s.bearer, pb::CompleteTodoRequest { todo_id })
                .await
                .map_err(|e| s.status(e))?;
            one(&s, r.todo)?;
        }
    }
    Ok(exit::OK)
}

fn one(s: &Session, todo: Option<pb::Todo>) -> Result<(), Failure> {
    let todo = convert::todo(convert::required("todo", todo).map_err(Failure::call)?);
    emit(s.output, &TodoResultOut { todo }, |o| show(&o.todo))
}

fn list_table(todos: &[TodoOut]) -> String {
    if todos.is_empty() {
        return "no todos\n".into();
    }
    let mut t = Table::new(&["id", "queue", "state", "created", "rule", "event", "claim"]);
    for td in todos {
        t.row([
            td.id.clone(),
            td.queue.clone(),
            td.state.clone(),
            time(Some(td.created_at_ms)),
            td.rule_id.clone().unwrap_or_else(|| "(default)".into()),
            td.event_id.clone(),
            claim(td),
        ]);
    }
    t.render(0)
}

/// Who holds it and until when.
fn claim(td: &TodoOut) -> String {
    match (&td.claimed_by, &td.claim_expires_at) {
        (Some(by), Some(until)) if td.state == "claimed" => format!("{by} until {until}"),
        (Some(by), _) if td.state == "open" => format!("expired ({by})"),
        _ => "-".into(),
    }
}

fn show(td: &TodoOut) -> String {
    let mut pairs = vec![
        ("todo", td.id.clone()),
        ("state", td.state.clone()),
        ("queue", td.queue.clone()),
        ("webhook", td.webhook_id.clone()),
        ("event", td.event_id.clone()),
        (
            "rule",
            td.rule_id.clone().unwrap_or_else(|| "(default)".into()),
        ),
        ("created", time(Some(td.created_at_ms))),
    ];
    if td.state == "claimed" {
        pairs.push(("claimed by", td.claimed_by.clone().unwrap_or_default()));
        pairs.push((
            "claim until",
            td.claim_expires_at.clone().unwrap_or_default(),
        ));
    }
    if let Some(by) = &td.completed_by {
        pairs.push(("completed by", by.clone()));
        pairs.push(("completed", time(td.completed_at_ms)));
    }
    facts(&pairs)
}
