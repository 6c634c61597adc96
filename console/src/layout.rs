//! The frame every page shares: the title, who is signed in, sign-out.

use maud::{DOCTYPE, Markup, html};

/// What every signed-in page carries: the person and the session's CSRF token (every form
/// posts it back).
#[derive(Clone, Debug, Default)]
pub struct Chrome {
    pub person: String,
    pub csrf: String,
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
            p { a href="/console" { "Back to the inbox" } }
        },
    )
}

/// After a sign-in link: a same-site link onward, so the session cookie (SameSite=Strict)
/// is sent with the next request whatever site the link was opened from.
pub fn sign_in_done(person: &str) -> Markup {
    page(
        "Signed in",
        None,
        html! {
            h1 { "Signed in" }
            p { "You are signed in as " strong { (person) } "." }
            p { a #continue href="/console" { "Continue to the inbox" } }
        },
    )
}
