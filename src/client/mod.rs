//! The CLI for people (issue 21 item 2): `switchboard webhooks|events|rules|packs|todos|explain`
//! over control's gRPC API, with an endpoint's bearer credential from `SWITCHBOARD_TOKEN`. It
//! holds no privilege of its own, so it can show and do nothing that endpoint could not do
//! itself. One module per noun; this one holds what they share: the connection, the output
//! format (`--output table|json`, where JSON is the same typed object the MCP tool answers:
//! both are the shared control client's views), the exit codes, and the table and colour
//! helpers (docs/cli.md).

pub mod approvals;
pub mod changes;
pub mod events;
pub mod explain;
pub mod guards;
pub mod packs;
pub mod reports;
pub mod rules;
pub mod todos;
pub mod trials;
pub mod webhooks;

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use anstyle::{AnsiColor, Style};
use clap::{Args, ValueEnum};
use switchboard_control_client::{Bearer, CallError, ControlClient};
use tonic::Status;

/// Exit codes, the same for every command (docs/cli.md, `--help`).
pub use switchboard_proto::reason::exit;

/// What every command's exit code and `--help` say.
pub const EXIT_CODES_HELP: &str = "Exit codes: 0 ok, 1 other (control unreachable, internal), 2 bad usage (a bad flag, no SWITCHBOARD_TOKEN, invalid input), 3 not found or not permitted, 4 refused until you act (plan_stale, unproven, pending_approval, conflict, version_mismatch, local_edits, requires_pack, required_by_pack, default_conflict, pack_rule_faults, unavailable_version, approval_required), 5 the credential was refused (unknown, revoked or expired).";

/// The flags every people's command takes; `global` so they may follow the subcommand.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Control's gRPC address (`host:port` or `http://host:port`).
    #[arg(
        long,
        global = true,
        env = "SWITCHBOARD_CONTROL",
        default_value = "127.0.0.1:7700"
    )]
    pub control: String,
    /// `table` (for people) or `json` (the same object the MCP tool returns).
    #[arg(long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

/// The endpoint credential comes from the environment only: a flag would put it in the
/// process list and shell history.
pub const TOKEN_ENV: &str = "SWITCHBOARD_TOKEN";

/// Why a command stopped: its exit code and what to print on stderr.
#[derive(Debug)]
pub struct Failure {
    pub exit: u8,
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            exit: exit::USAGE,
            message: message.into(),
        }
    }

    /// A call's typed error (control's, read from its status, or the shared conversion's own
    /// for an answer it cannot read): its code decides the exit code, and code and message
    /// are what is printed.
    pub fn call(e: CallError) -> Failure {
        Failure {
            exit: exit_for(&e.code),
            message: e.to_string(),
        }
    }
}

/// The exit code of a typed error code: control's reason, read from the one reason table
/// ([`Reason::exit_code`]); a code that is no reason is `OTHER`.
pub fn exit_for(code: &str) -> u8 {
    switchboard_proto::reason::Reason::parse(code).map_or(exit::OTHER, |r| r.exit_code())
}

/// One command's connection to control: the client, the caller's bearer, and how to print.
pub struct Session {
    pub client: ControlClient,
    pub bearer: Bearer,
    pub output: Output,
    /// The address the user gave, named when control does not answer.
    pub control: String,
}

impl Session {
    /// The credential from the environment and a lazily connected client; `verb` (as its tool
    /// is named) is the call the credential must be allowed.
    pub fn open(verb: &'static str, common: &Common) -> Result<Session, Failure> {
        let token = match std::env::var(TOKEN_ENV) {
            Ok(t) if !t.trim().is_empty() => t.trim().to_string(),
            _ => {
                return Err(Failure::usage(format!(
                    "set {TOKEN_ENV} to an endpoint credential (sbe_…) that may call {verb}"
                )));
            }
        };
        let client = ControlClient::connect_lazy(&common.control).map_err(Failure::usage)?;
        Ok(Session {
            client,
            bearer: Bearer::new(token),
            output: common.output,
            control: common.control.clone(),
        })
    }

    /// A control status as the typed error's code and message (an address only where control
    /// did not answer: the one the user gave).
    pub fn status(&self, s: Status) -> Failure {
        Failure::call(CallError::from_status(&s).at_control(&self.control))
    }
}

/// Runs a command's body and turns its outcome into the process's exit code, printing a
/// failure on stderr as `switchboard <noun>: <code>: <message>`.
pub fn finish(command: &str, outcome: Result<u8, Failure>) -> ExitCode {
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("{command}: {}", f.message);
            ExitCode::from(f.exit)
        }
    }
}

/// Prints a command's answer: its typed object as JSON, or the table `render` makes of it.
/// Colour codes in the table are stripped unless stdout is a terminal (or CLICOLOR_FORCE is
/// set) and NO_COLOR is unset.
pub fn emit<T: serde::Serialize>(
    output: Output,
    value: &T,
    render: impl FnOnce(&T) -> String,
) -> Result<(), Failure> {
    let text = match output {
        Output::Json => {
            serde_json::to_string_pretty(value).map_err(|e| Failure {
                exit: exit::OTHER,
                message: format!("internal: {e}"),
            })? + "\n"
        }
        Output::Table => render(value),
    };
    let mut out = anstream::stdout();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Failure {
            exit: exit::OTHER,
            message: format!("cannot write the answer: {e}"),
        })
}

/// The styles tables use. Only ever added around text that reads the same without them.
pub mod paint {
    use super::*;

    pub const ADDED: Style = AnsiColor::Green.on_default();
    pub const REMOVED: Style = AnsiColor::Red.on_default();
    pub const CHANGED: Style = AnsiColor::Yellow.on_default();
    pub const LOST: Style = AnsiColor::Red.on_default().bold();
    pub const HEADING: Style = Style::new().bold();
    pub const DIM: Style = Style::new().dimmed();

    pub fn styled(style: Style, text: &str) -> String {
        format!("{style}{text}{style:#}")
    }
}

/// A left-aligned text table: a header row, then rows; each cell may carry a style, applied
/// after padding so columns line up with or without colour. No trailing spaces.
#[derive(Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<(String, Option<Style>)>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows
            .push(cells.into_iter().map(|c| (c.into(), None)).collect());
    }

    /// A row whose every cell has `style`.
    pub fn styled_row<S: Into<String>>(
        &mut self,
        style: Option<Style>,
        cells: impl IntoIterator<Item = S>,
    ) {
        self.rows
            .push(cells.into_iter().map(|c| (c.into(), style)).collect());
    }

    /// The table, each line indented by `indent` spaces.
    pub fn render(&self, indent: usize) -> String {
        let columns = self.header.len();
        let mut widths = vec![0; columns];
        let header = self
            .header
            .iter()
            .map(|h| (h.clone(), Some(paint::HEADING)));
        let header: Vec<_> = header.collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            for (i, (text, _)) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(text.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = " ".repeat(indent);
            let last = row.len().min(columns).saturating_sub(1);
            for (i, (text, style)) in row.iter().enumerate().take(columns) {
                let pad = if i == last {
                    String::new()
                } else {
                    " ".repeat(widths[i] - text.chars().count() + 2)
                };
                match style {
                    Some(style) => {
                        let _ = write!(line, "{}{pad}", paint::styled(*style, text));
                    }
                    None => {
                        let _ = write!(line, "{text}{pad}");
                    }
                }
            }
            out.push_str(line.trim_end_matches(' '));
            out.push('\n');
        }
        out
    }
}

/// Key-value lines (`key   value`), keys padded to the longest.
pub fn facts(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in pairs {
        let _ = writeln!(out, "{k:<width$}  {v}");
    }
    out
}

/// Milliseconds since the epoch as people read them (RFC 3339 UTC); `-` for none.
pub fn time(ms: Option<i64>) -> String {
    match ms {
        Some(ms) if ms > 0 => switchboard_model::rfc3339_millis(ms),
        _ => "-".into(),
    }
}

/// Text a sender chose (a body that is not JSON, a header value), safe to print on a
/// terminal: control characters other than newline and tab are shown escaped (`\u{1b}`), so
/// a delivery cannot move the cursor, retitle the window or forge colour.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A list as one cell: comma-separated, `-` when empty.
pub fn list(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(", ")
    }
}

/// A decision (`{decision, queue?, rule_id?, fault_code?, by_default_action?}`) as one cell:
/// its label and the rule that made it.
pub fn decision_cell(d: Option<&switchboard_model::RecordedDecision>) -> String {
    let Some(d) = d else {
        return "(none: not routed yet)".into();
    };
    let mut out = d.decision.to_string();
    if let Some(rule) = &d.rule_id {
        out.push_str(&format!(" by rule {rule}"));
    } else if d.by_default_action {
        out.push_str(" by the default action");
    } else if d.decision == switchboard_model::Label::Default {
        out.push_str(" (no rule matched)");
    }
    if let Some(code) = &d.fault_code {
        out.push_str(&format!(" ({code})"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn styles_do_not_move_columns() {
        let mut plain = Table::new(&["from", "to", "n"]);
        plain.row(["default", "drop", "2"]);
        let mut coloured = Table::new(&["from", "to", "n"]);
        coloured.styled_row(Some(paint::LOST), ["default", "drop", "2"]);
        let strip = |t: &Table, indent| anstream::adapter::strip_str(&t.render(indent)).to_string();
        assert_ne!(coloured.render(2), plain.render(2));
        assert_eq!(strip(&coloured, 2), strip(&plain, 2));
        assert_eq!(strip(&plain, 0), "from     to    n\ndefault  drop  2\n");
    }

    #[test]
    fn senders_text_cannot_drive_the_terminal() {
        assert_eq!(
            printable("a\x1b]0;owned\x07b\nc\td\r"),
            "a\\u{1b}]0;owned\\u{7}b\nc\td\\u{d}"
        );
    }

    #[test]
    fn every_refusal_to_act_on_exits_4_and_the_rest_as_documented() {
        for code in [
            "plan_stale",
            "unproven",
            "conflict",
            "pack_rule_faults",
            "approval_required",
        ] {
            assert_eq!(exit_for(code), exit::REFUSED, "{code}");
        }
        for code in ["not_found", "permission_denied"] {
            assert_eq!(exit_for(code), exit::NOT_FOUND, "{code}");
        }
        assert_eq!(exit_for("unauthenticated"), exit::UNAUTHENTICATED);
        assert_eq!(exit_for("invalid_configuration"), exit::USAGE);
        assert_eq!(exit_for("control_unavailable"), exit::OTHER);
        assert_eq!(exit_for("internal"), exit::OTHER);
        assert_eq!(exit_for("no_such_reason"), exit::OTHER);
    }
}
