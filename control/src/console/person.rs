//! Who is asking: a person signed in with a session cookie, or named by a trusted auth proxy;
//! and the CSRF token their forms must post back.

use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;

use super::{Console, answer};
use crate::secrets::{hashes_match, random_hex, sha256_hex};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "sb_console";
/// Behind an auth proxy there is no session: forms double-submit this cookie's value.
const CSRF_COOKIE: &str = "sb_console_csrf";
/// The console page someone asked for before signing in: the sign-in link leads back there.
/// `SameSite=Lax`, since the link is usually opened from another site (a chat, a mail).
pub const NEXT_COOKIE: &str = "sb_console_next";

/// `asked` if it is a console page a sign-in may lead back to (a path of ours, nothing that
/// could leave the site), else the inbox.
pub fn safe_next(asked: &str) -> &str {
    let ours = asked.starts_with("/console/")
        && !asked.contains("//")
        && asked.len() <= 200
        && asked
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_'));
    if ours && !asked.starts_with("/console/sign-") {
        asked
    } else {
        "/console"
    }
}

/// Trust `header` to name the person, only on connections from `trusted` peers (the proxy).
/// From anyone else the header is ignored, as if absent.
#[derive(Clone, Debug)]
pub struct AuthProxy {
    pub header: HeaderName,
    pub trusted: Vec<ipnet::IpNet>,
}

/// The connection's peer, when the listener recorded it (control's HTTP server does).
pub(crate) struct Peer(pub Option<SocketAddr>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Peer(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(addr)| *addr),
        ))
    }
}

/// A person the console knows, and the CSRF token their forms carry.
pub(crate) struct Person {
    pub login: String,
    pub csrf: String,
    session: Option<String>,
    /// A CSRF cookie to set with the answer (auth-proxy mode, first visit).
    new_csrf_cookie: Option<String>,
}

pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

impl Person {
    /// The person making this request, or the page that says how to sign in and brings them
    /// back to `asked` (the page's path) after.
    pub async fn of(
        c: &Console,
        headers: &HeaderMap,
        peer: &Peer,
        asked: &str,
    ) -> Result<Person, Response> {
        if let Some(proxy) = &c.settings.auth_proxy
            && let Some(peer) = peer.0
            && proxy.trusted.iter().any(|net| net.contains(&peer.ip()))
            && let Some(login) = headers.get(&proxy.header).and_then(|v| v.to_str().ok())
        {
            let login = login.trim().to_string();
            match c.state.store.get_human(&login).await {
                Ok(_) => {}
                Err(crate::Error::NotFound { .. }) => {
                    return Err(answer::message(
                        StatusCode::FORBIDDEN,
                        None,
                        "Not a person this console knows",
                        "Your sign-in is not a human Switchboard knows; ask an operator to add you.",
                    ));
                }
                Err(e) => return Err(answer::internal(&e)),
            }
            let (secret, new_csrf_cookie) = match cookie(headers, CSRF_COOKIE) {
                Some(v) => (v.to_string(), None),
                None => {
                    let fresh = random_hex(32).map_err(|e| answer::internal(&e))?;
                    (fresh.clone(), Some(fresh))
                }
            };
            return Ok(Person {
                csrf: sha256_hex(&format!("csrf:proxy:{login}:{secret}")),
                login,
                session: None,
                new_csrf_cookie,
            });
        }
        if let Some(token) = cookie(headers, SESSION_COOKIE) {
            match c.state.store.console_session(token).await {
                Ok(Some(login)) => {
                    return Ok(Person {
                        login,
                        csrf: sha256_hex(&format!("csrf:session:{token}")),
                        session: Some(token.to_string()),
                        new_csrf_cookie: None,
                    });
                }
                Ok(None) => {}
                Err(e) => return Err(answer::internal(&e)),
            }
        }
        let next = safe_next(asked);
        let mut response = answer::html(
            StatusCode::UNAUTHORIZED,
            switchboard_console::sign_in_page(next),
        );
        let value = format!(
            "{NEXT_COOKIE}={next}; Path=/console; HttpOnly; SameSite=Lax; Max-Age=900{}",
            if c.settings.secure_cookies {
                "; Secure"
            } else {
                ""
            }
        );
        if let Ok(v) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(header::SET_COOKIE, v);
        }
        Err(response)
    }

    /// [`Person::of`], for a form: its CSRF token must be this person's.
    pub async fn checked(
        c: &Console,
        headers: &HeaderMap,
        peer: &Peer,
        form_csrf: &str,
    ) -> Result<Person, Response> {
        let person = Person::of(c, headers, peer, "/console").await?;
        if person.new_csrf_cookie.is_some() || !hashes_match(&person.csrf, form_csrf.trim()) {
            return Err(answer::message(
                StatusCode::FORBIDDEN,
                Some(&person.chrome()),
                "This form has expired",
                "Its security token is missing or wrong, so nothing was done. Reload the page and try again.",
            ));
        }
        Ok(person)
    }

    pub fn session_token(&self) -> Option<&str> {
        self.session.as_deref()
    }

    pub fn chrome(&self) -> switchboard_console::Chrome {
        switchboard_console::Chrome {
            person: self.login.clone(),
            csrf: self.csrf.clone(),
        }
    }

    /// The answer, with the CSRF cookie a first visit behind the proxy needs.
    pub fn finish(&self, mut response: Response, secure: bool) -> Response {
        if let Some(secret) = &self.new_csrf_cookie {
            let value = format!(
                "{CSRF_COOKIE}={secret}; Path=/console; HttpOnly; SameSite=Strict{}",
                if secure { "; Secure" } else { "" }
            );
            if let Ok(v) = HeaderValue::from_str(&value) {
                response.headers_mut().append(header::SET_COOKIE, v);
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_read_by_exact_name() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; sb_console_x=2; sb_console=tok; b="),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("tok"));
        assert_eq!(cookie(&h, "b"), None);
        assert_eq!(cookie(&h, "missing"), None);
    }

    #[test]
    fn a_sign_in_leads_back_only_to_a_console_page() {
        for ours in ["/console/plans/pl_0123abcd", "/console/webhooks/wh_1"] {
            assert_eq!(safe_next(ours), ours);
        }
        for other in [
            "/console",
            "//evil.example/console/",
            "/console//evil.example",
            "https://evil.example/console/x",
            "/console/plans/x?y=1",
            "/console/sign-in",
            "/consolex/plans",
            "/console/plans/%2F%2Fevil",
            "",
        ] {
            assert_eq!(safe_next(other), "/console", "{other}");
        }
    }
}
