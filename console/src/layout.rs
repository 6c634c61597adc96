//! The frame every page shares: the title, who is signed in, sign-out.

use maud::{DOCTYPE, Markup, html};

/// What every signed-in page carries: the person and the session's CSRF token (every form
/// posts it back).
#[derive(Clone, Debug, Default)]
pub struct Chrome {
    pub person: String,
    pub csrf: String,
}

/// What the last action on a page did, said in words and with an icon as well as colour: a
/// success is a status (read when it appears), a refusal an alert.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub done: bool,
    pub text: String,
}

impl Notice {
    /// It did what was asked.
    pub fn done(text: impl Into<String>) -> Self {
        Self {
            done: true,
            text: text.into(),
        }
    }
    /// Nothing was done, and why.
    pub fn refused(text: impl Into<String>) -> Self {
        Self {
            done: false,
            text: text.into(),
        }
    }
}

/// A notice at the top of a page; `#notice` holds its words.
pub(crate) fn notice(n: Option<&Notice>) -> Markup {
    html! {
        @if let Some(n) = n {
            @if n.done {
                div.notice.done role="status" { span.icon aria-hidden="true" { "✓" } " " span #notice { (n.text) } }
            } @else {
                div.notice.refused role="alert" { span.icon aria-hidden="true" { "✕" } " " span #notice { (n.text) } }
            }
        }
    }
}

/// An endpoint as a person knows it: its name, with its id beside it (`claude-desktop
/// (ep_…)`); the id alone when it has no name or is gone.
pub(crate) fn endpoint(id: &str, name: &str) -> Markup {
    html! {
        @if name.is_empty() { code { (id) } } @else { strong.endpoint { (name) } " " small { "(" code { (id) } ")" } }
    }
}

/// A webhook as a person knows it (issue 48): its name linked to its page, the id beside it;
/// the id alone when it has no name.
pub(crate) fn webhook_link(id: &str, name: &str) -> Markup {
    html! {
        @if name.is_empty() {
            a.webhook href={ "/console/webhooks/" (id) } { code { (id) } }
        } @else {
            a.webhook href={ "/console/webhooks/" (id) } { strong { (name) } } " " small { "(" code { (id) } ")" }
        }
    }
}

/// A webhook page's heading: its name with the id beside it, or `Webhook wh_…` unnamed.
pub(crate) fn heading_name(id: &str, name: &str) -> Markup {
    html! {
        @if name.is_empty() { "webhook " code { (id) } } @else { (name) " " small.id { code { (id) } } }
    }
}

/// A webhook in plain text (a page title, a button's accessible name): `name (wh_…)`.
pub fn webhook_title(id: &str, name: &str) -> String {
    if name.is_empty() {
        id.to_string()
    } else {
        format!("{name} ({id})")
    }
}

/// The mark lost work carries wherever it shows: a word and an icon as well as the colour.
pub(crate) fn lost_mark() -> Markup {
    html! { span.lost-mark { span.icon aria-hidden="true" { "⚠" } " lost work" } }
}

/// A table that scrolls sideways on a narrow screen rather than widening the page; keyboard
/// users can scroll it too (it takes focus), and it is named for screen readers.
pub(crate) fn scroll(label: &str, table: Markup) -> Markup {
    html! { div.scroll role="region" aria-label=(label) tabindex="0" { (table) } }
}

/// A time as a person reads it at a glance (`3 hours ago`), the exact RFC 3339 time on hover
/// and for machines. `now_ms` is the page's clock, so a golden page is the same every run.
pub(crate) fn when(rfc3339: &str, now_ms: i64) -> Markup {
    match relative(rfc3339, now_ms) {
        Some(words) => html! { time datetime=(rfc3339) title=(rfc3339) { (words) } },
        None => html! { (rfc3339) },
    }
}

/// `in 2 days`, `5 minutes ago`, `just now`; `None` for a time that does not parse.
pub(crate) fn relative(rfc3339: &str, now_ms: i64) -> Option<String> {
    let at: jiff::Timestamp = rfc3339.parse().ok()?;
    let delta = (at.as_millisecond() - now_ms) / 1000;
    let (future, secs) = (delta > 0, delta.unsigned_abs());
    let (n, unit) = match secs {
        0..45 => return Some("just now".into()),
        45..5_400 => (secs.div_ceil(60).max(1), "minute"),
        5_400..129_600 => ((secs + 1_800) / 3_600, "hour"),
        _ => ((secs + 43_200) / 86_400, "day"),
    };
    let plural = if n == 1 { "" } else { "s" };
    Some(if future {
        format!("in {n} {unit}{plural}")
    } else {
        format!("{n} {unit}{plural} ago")
    })
}

/// A whole page: `chrome` when someone is signed in.
pub(crate) fn page(title: &str, chrome: Option<&Chrome>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Switchboard" }
                link rel="stylesheet" href="/console/style.css";
            }
            body {
                header {
                    a.brand href="/console" { "Switchboard" }
                    @if let Some(c) = chrome {
                        span.person { "Signed in as " strong { (c.person) } }
                        form.inline method="post" action="/console/sign-out" {
                            input type="hidden" name="csrf" value=(c.csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// A page that only says something: not found, signed out, a link that no longer works.
pub fn message_page(title: &str, chrome: Option<&Chrome>, message: &str) -> Markup {
    page(
        title,
        chrome,
        html! {
            h1 { (title) }
            p.message { (message) }
            @if chrome.is_some() { p { a href="/console" { "Back to the inbox" } } }
        },
    )
}

/// After a sign-in link: a same-site link onward, so the session cookie (SameSite=Strict)
/// is sent with the next request whatever site the link was opened from.
/// `next` is the console page the person asked for before signing in (`/console` when none).
pub fn sign_in_done(person: &str, next: &str) -> Markup {
    page(
        "Signed in",
        None,
        html! {
            h1 { "Signed in" }
            p { "You are signed in as " strong { (person) } "." }
            p { a #continue href=(next) { @if next == "/console" { "Continue to the inbox" } @else { "Continue to the page you asked for" } } }
        },
    )
}

/// Someone not signed in asked for `next`: how to get a sign-in link, and that it brings them
/// back there.
pub fn sign_in_page(next: &str) -> Markup {
    page(
        "Sign in",
        None,
        html! {
            h1 { "Sign in" }
            p.message { "The console has no passwords: a person signs in with a link that works once, for 15 minutes." }
            h2 { "How to get a link" }
            p { "Ask an operator to run:" }
            pre { code { "switchboard admin human sign-in-link <your login>" } }
            p { "and open the link it prints in this browser."
                @if next != "/console" { " After signing in you come back to " code #next { (next) } "." }
            }
            p { "Behind a single sign-on proxy, open the console through the proxy instead." }
        },
    )
}
