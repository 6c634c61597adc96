//! The console a person reviews and accepts an agent's plans in (issue 20, ADR-0028: an
//! agent drafts and previews, a person accepts). Every page is a pure function from a typed
//! view to HTML, rendered by maud, which escapes every value it interpolates: nothing a tenant
//! wrote (a rule id, a reason, a label) can become markup. No JavaScript; the one stylesheet is
//! [`STYLESHEET`], served from the console's own origin so the Content-Security-Policy can
//! forbid everything else.
//!
//! The HTTP side (sign-in, sessions, CSRF, loading and authorizing) lives in control's
//! `console` module; it only fills these views.

mod activity;
mod approval;
mod chart;
mod events;
mod guard;
mod inbox;
mod layout;
mod plan;
mod report;
mod trial;
mod webhook;

pub use activity::{Activity, HourCounts};
pub use approval::ChangeRow;
pub use events::{EventRow, EventsFilter, EventsView, events_page};
pub use inbox::{InboxItem, inbox};
pub use layout::{Chrome, Notice, message_page, sign_in_done, sign_in_page, webhook_title};
pub use plan::{Decision, PlanView, plan_page};
pub use trial::{TrialRow, TrialView, trial_page, trial_rows};
pub use webhook::{HistoryRow, RuleRow, WebhookView, webhook_page};

/// The console's stylesheet, served at `/console/style.css`.
pub const STYLESHEET: &str = include_str!("style.css");
