//! Reading the operator's `SWITCHBOARD_RULE_PACK_SOURCES` (unset by default) once, at start:
//! `file://` directories through the packs crate's reader, and `https://` pack documents
//! fetched here and parsed by the same code, so both give the same packs for the caller to
//! validate and fixture-route ([`crate::rule_packs::load_catalog`]).
//!
//! A fetch is one `GET` over rustls with Mozilla's and the system's roots (plus the PEM
//! bundle in `SWITCHBOARD_RULE_PACK_CA_FILE`), no redirects, a 10 s budget for the whole
//! answer and an 8 MiB cap on its body. Anything else (unreachable, not `200 OK`, too big,
//! too slow, not a pack document) skips that source with the reason; plain `http://` is
//! never fetched.

use std::path::PathBuf;
use std::time::Duration;

use switchboard_packs::Pack;
use switchboard_packs::catalog::{
    PackSource, SkippedPack, parse_pack_document, parse_sources, read_file_source,
};

/// The cap on one `https://` source's body.
pub const MAX_SOURCE_BYTES: usize = 8 * 1024 * 1024;
/// The budget for one `https://` source: connect, TLS, headers and the whole body.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// A PEM bundle of extra roots trusted for `https://` sources, beside the default ones.
pub const CA_FILE_ENV: &str = "SWITCHBOARD_RULE_PACK_CA_FILE";

/// How `https://` sources are fetched.
#[derive(Clone, Debug)]
pub struct FetchOptions {
    pub timeout: Duration,
    pub max_bytes: usize,
    /// Extra trusted roots (PEM), beside Mozilla's and the system's.
    pub ca_file: Option<PathBuf>,
}

impl Default for FetchOptions {
    fn default() -> Self {
        Self {
            timeout: FETCH_TIMEOUT,
            max_bytes: MAX_SOURCE_BYTES,
            ca_file: None,
        }
    }
}

impl FetchOptions {
    /// The defaults, trusting `ca_file` too when one is given (empty means none).
    pub fn with_ca_file(ca_file: Option<PathBuf>) -> Self {
        Self {
            ca_file: ca_file.filter(|p| !p.as_os_str().is_empty()),
            ..Self::default()
        }
    }
}

/// Every pack the sources in `spec` offer, named by origin (a directory path, or
/// `<url>#<name>/<version>`), and every source or pack that could not be read, with why.
/// Structural parsing only: the caller validates and routes each pack's fixtures. Sources
/// keep their order; `https://` ones are fetched concurrently.
pub async fn read_sources(
    spec: &str,
    options: &FetchOptions,
) -> (Vec<(String, Pack)>, Vec<SkippedPack>) {
    let sources = parse_sources(spec);
    let client = if sources
        .iter()
        .any(|s| matches!(s, PackSource::Https { .. }))
    {
        Some(client(options))
    } else {
        None
    };
    let client = &client;
    let fetched = futures::future::join_all(sources.iter().map(|source| async move {
        match (source, client) {
            (PackSource::Https { url, .. }, Some(Ok(client))) => {
                Some(fetch(client, url, options).await)
            }
            (PackSource::Https { .. }, Some(Err(e))) => Some(Err(e.clone())),
            _ => None,
        }
    }))
    .await;

    let mut packs = Vec::new();
    let mut skipped = Vec::new();
    for (source, body) in sources.into_iter().zip(fetched) {
        let entries = match (&source, body) {
            (PackSource::File { path, .. }, _) => read_file_source(path),
            (PackSource::Https { origin, .. }, Some(Ok(body))) => {
                parse_pack_document(origin, &body)
            }
            (PackSource::Https { .. }, Some(Err(reason))) => Err(reason),
            (PackSource::Https { .. }, None) => Err("not fetched".into()),
            (PackSource::Refused { reason, .. }, _) => Err(reason.clone()),
        };
        match entries {
            Ok(entries) => {
                for (origin, result) in entries {
                    match result {
                        Ok(pack) => packs.push((origin, pack)),
                        Err(reason) => skipped.push(SkippedPack { origin, reason }),
                    }
                }
            }
            Err(reason) => skipped.push(SkippedPack {
                origin: source.origin().to_string(),
                reason,
            }),
        }
    }
    (packs, skipped)
}

/// The one client for every `https://` source: rustls, https only, no redirects.
fn client(options: &FetchOptions) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .https_only(true)
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(options.timeout)
        .timeout(options.timeout)
        .user_agent(concat!(
            "switchboard/",
            env!("CARGO_PKG_VERSION"),
            " (rule-pack sources)"
        ));
    if let Some(path) = &options.ca_file {
        let pem =
            std::fs::read(path).map_err(|e| format!("{CA_FILE_ENV}={}: {e}", path.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| format!("{CA_FILE_ENV}={}: {}", path.display(), describe(e)))?;
        if certs.is_empty() {
            return Err(format!(
                "{CA_FILE_ENV}={}: holds no PEM certificate",
                path.display()
            ));
        }
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder
        .build()
        .map_err(|e| format!("cannot set up the https client: {}", describe(e)))
}

/// The body of `url`, or why there is none: one `GET`, `200 OK` only, at most
/// `options.max_bytes`, all within `options.timeout`.
async fn fetch(
    client: &reqwest::Client,
    url: &str,
    options: &FetchOptions,
) -> Result<Vec<u8>, String> {
    let url = reqwest::Url::parse(url).map_err(|e| format!("not a valid URL: {e}"))?;
    match tokio::time::timeout(options.timeout, get(client, url, options.max_bytes)).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "timed out: no complete answer within {} ms",
            options.timeout.as_millis()
        )),
    }
}

async fn get(client: &reqwest::Client, url: reqwest::Url, max: usize) -> Result<Vec<u8>, String> {
    let mut response = client
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| {
            let what = if e.is_connect() {
                "cannot connect"
            } else {
                "request failed"
            };
            format!("{what}: {}", describe(e))
        })?;
    let status = response.status();
    if status != reqwest::StatusCode::OK {
        let hint = if status.is_redirection() {
            " (redirects are not followed: name the final URL)"
        } else {
            ""
        };
        return Err(format!("answered {status}, not 200 OK{hint}"));
    }
    if let Some(declared) = response.content_length()
        && declared > max as u64
    {
        return Err(format!(
            "too large: declares {declared} bytes, over the {} limit",
            size(max)
        ));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading the body: {}", describe(e)))?
    {
        if body.len() + chunk.len() > max {
            return Err(format!("too large: over the {} limit", size(max)));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An error and its causes, without the URL (it may hold a credential; the log names the
/// source already).
fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

fn size(bytes: usize) -> String {
    if bytes >= 1024 * 1024 && bytes.is_multiple_of(1024 * 1024) {
        format!("{} MiB", bytes / (1024 * 1024))
    } else {
        format!("{bytes}-byte")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(size(MAX_SOURCE_BYTES), "8 MiB");
        assert_eq!(size(1000), "1000-byte");
    }

    #[tokio::test]
    async fn nothing_is_fetched_or_read_without_sources() {
        let (packs, skipped) = read_sources("", &FetchOptions::default()).await;
        assert!(packs.is_empty() && skipped.is_empty());
    }

    #[tokio::test]
    async fn plain_http_and_other_schemes_are_refused_unfetched() {
        let (packs, skipped) = read_sources(
            "http://127.0.0.1:9/packs.json, ftp://example.invalid/p, /etc/packs",
            &FetchOptions::default(),
        )
        .await;
        assert!(packs.is_empty());
        assert_eq!(skipped.len(), 3, "{skipped:?}");
        assert!(skipped[0].reason.contains("http://"), "{skipped:?}");
        assert!(skipped[1].reason.contains("unsupported"), "{skipped:?}");
        assert!(skipped[2].reason.contains("unsupported"), "{skipped:?}");
    }

    #[tokio::test]
    async fn an_unreadable_ca_file_skips_every_https_source() {
        let options = FetchOptions {
            ca_file: Some(PathBuf::from("/nonexistent/ca.pem")),
            ..FetchOptions::default()
        };
        let (packs, skipped) = read_sources(
            "https://127.0.0.1:9/a.json,https://127.0.0.1:9/b.json",
            &options,
        )
        .await;
        assert!(packs.is_empty());
        assert_eq!(skipped.len(), 2);
        assert!(
            skipped
                .iter()
                .all(|s| s.reason.contains(CA_FILE_ENV) && s.reason.contains("/nonexistent")),
            "{skipped:?}"
        );
    }
}
