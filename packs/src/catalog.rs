//! The catalog: the built-in packs embedded in this binary, plus external packs an operator
//! adds with `SWITCHBOARD_RULE_PACK_SOURCES` (unset by default), loaded once at start.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::manifest::{Fixture, Pack, check_pack, check_shared_param_types};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/catalog.rs"));
}

/// Where a pack came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Builtin,
    /// An operator's source (`file:///…` directory or `https://…` document), named for logs.
    External {
        origin: String,
    },
}

impl Source {
    pub fn label(&self) -> &'static str {
        match self {
            Source::Builtin => "builtin",
            Source::External { .. } => "external",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct CatalogPack {
    pub pack: Pack,
    pub source: Source,
}

/// Whether a version can be planned on this instance, and why not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Availability {
    pub available: bool,
    /// Capabilities the version requires that this instance lacks.
    pub missing_capabilities: Vec<String>,
    /// Superseded by an available newer major version: it left the catalog for new installs.
    pub retired: bool,
    pub superseded_by: Option<String>,
    pub upgrade_note: Option<String>,
}

/// Why a pack version cannot be planned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("no pack named {0} in the catalog")]
    UnknownPack(String),
    #[error("{name} has no version {version}")]
    UnknownVersion { name: String, version: String },
    #[error("{name}@{version} is not available: {reason}")]
    UnavailableVersion {
        name: String,
        version: String,
        reason: String,
        upgrade_note: Option<String>,
    },
}

/// Packs by name, then by ascending version.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    packs: Vec<CatalogPack>,
}

/// A pack an operator's source offered that could not be added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedPack {
    pub origin: String,
    pub reason: String,
}

impl Catalog {
    /// The built-in catalog. The build already refused invalid packs, so this cannot fail.
    pub fn builtin() -> Self {
        let mut packs = Vec::new();
        for (manifest, fixtures) in embedded::BUILTIN {
            match parse_pack(
                manifest,
                fixtures.iter().map(|(n, t)| (n.to_string(), t.to_string())),
            ) {
                Ok(pack) => packs.push(CatalogPack {
                    pack,
                    source: Source::Builtin,
                }),
                Err(e) => tracing::error!(error = %e, "built-in pack does not parse"),
            }
        }
        let mut catalog = Self { packs };
        catalog.sort();
        catalog
    }

    /// A catalog of exactly these packs (tests, and `switchboard packs test`).
    pub fn from_packs(packs: Vec<CatalogPack>) -> Self {
        let mut catalog = Self { packs };
        catalog.sort();
        catalog
    }

    fn sort(&mut self) {
        self.packs.sort_by(|a, b| {
            a.pack
                .name
                .cmp(&b.pack.name)
                .then(a.pack.semver().cmp(&b.pack.semver()))
        });
    }

    pub fn packs(&self) -> &[CatalogPack] {
        &self.packs
    }

    /// Adds an operator's pack: structurally valid, never shadowing a built-in name or
    /// another version already present, and agreeing on shared param types.
    pub fn add_external(&mut self, pack: Pack, origin: &str) -> Result<(), String> {
        let problems = check_pack(&pack, None);
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        if self
            .packs
            .iter()
            .any(|p| p.pack.name == pack.name && p.source == Source::Builtin)
        {
            return Err(format!(
                "{} is a built-in pack name; external packs never replace built-ins",
                pack.name
            ));
        }
        if self.find(&pack.name, &pack.version).is_some() {
            return Err(format!("{} is already in the catalog", pack.label()));
        }
        let mut all: Vec<Pack> = self.packs.iter().map(|p| p.pack.clone()).collect();
        all.push(pack.clone());
        let conflicts = check_shared_param_types(&all);
        if !conflicts.is_empty() {
            return Err(conflicts.join("; "));
        }
        self.packs.push(CatalogPack {
            pack,
            source: Source::External {
                origin: origin.to_string(),
            },
        });
        self.sort();
        Ok(())
    }

    /// Every version of `name`, ascending.
    pub fn versions(&self, name: &str) -> Vec<&CatalogPack> {
        self.packs.iter().filter(|p| p.pack.name == name).collect()
    }

    /// Exactly `name@version`, available or not (installed packs keep their manifest).
    pub fn find(&self, name: &str, version: &str) -> Option<&CatalogPack> {
        self.packs
            .iter()
            .find(|p| p.pack.name == name && p.pack.version == version)
    }

    /// Can this version be planned on an instance with `capabilities`?
    pub fn availability(&self, cp: &CatalogPack, capabilities: &[String]) -> Availability {
        let missing: Vec<String> = cp
            .pack
            .requires
            .capabilities
            .iter()
            .filter(|c| !capabilities.contains(c))
            .cloned()
            .collect();
        let superseding = self
            .versions(&cp.pack.name)
            .into_iter()
            .rev()
            .find(|other| {
                other.pack.supersedes.contains(&cp.pack.major())
                    && other
                        .pack
                        .requires
                        .capabilities
                        .iter()
                        .all(|c| capabilities.contains(c))
            });
        Availability {
            available: missing.is_empty() && superseding.is_none(),
            missing_capabilities: missing,
            retired: superseding.is_some(),
            superseded_by: superseding.map(|s| s.pack.version.clone()),
            upgrade_note: superseding.and_then(|s| s.pack.upgrade_note.clone()),
        }
    }

    /// The version to plan: `version` is `2`, `2.1` or `2.1.0` (the highest match), or
    /// absent for the highest available version.
    pub fn resolve(
        &self,
        name: &str,
        version: Option<&str>,
        capabilities: &[String],
    ) -> Result<&CatalogPack, ResolveError> {
        let versions = self.versions(name);
        if versions.is_empty() {
            return Err(ResolveError::UnknownPack(name.to_string()));
        }
        let Some(wanted) = version else {
            return versions
                .iter()
                .rev()
                .find(|v| self.availability(v, capabilities).available)
                .copied()
                .ok_or_else(|| {
                    let newest = versions[versions.len() - 1];
                    self.unavailable(newest, capabilities)
                });
        };
        let matching = versions
            .into_iter()
            .rev()
            .find(|v| version_matches(&v.pack.version, wanted))
            .ok_or_else(|| ResolveError::UnknownVersion {
                name: name.to_string(),
                version: wanted.to_string(),
            })?;
        if self.availability(matching, capabilities).available {
            Ok(matching)
        } else {
            Err(self.unavailable(matching, capabilities))
        }
    }

    fn unavailable(&self, cp: &CatalogPack, capabilities: &[String]) -> ResolveError {
        let a = self.availability(cp, capabilities);
        let reason = if a.retired {
            format!(
                "superseded by {}@{}",
                cp.pack.name,
                a.superseded_by.clone().unwrap_or_default()
            )
        } else {
            format!(
                "this instance lacks the capability {}",
                a.missing_capabilities.join(", ")
            )
        };
        ResolveError::UnavailableVersion {
            name: cp.pack.name.clone(),
            version: cp.pack.version.clone(),
            reason,
            upgrade_note: a.upgrade_note,
        }
    }
}

/// Does `version` (semver) match what a caller asked for: `2`, `2.1` or `2.1.0`?
pub fn version_matches(version: &str, wanted: &str) -> bool {
    let wanted = wanted.trim().trim_start_matches('v');
    let parts: Vec<&str> = version.split(['.', '-', '+']).collect();
    let want: Vec<&str> = wanted.split('.').collect();
    if want.len() >= 3 {
        return version == wanted;
    }
    want.iter().zip(parts.iter()).all(|(w, p)| w == p) && want.len() <= parts.len()
}

/// Parses a manifest and its fixture files.
pub fn parse_pack(
    manifest: &str,
    fixtures: impl IntoIterator<Item = (String, String)>,
) -> Result<Pack, String> {
    let mut pack: Pack = serde_json::from_str(manifest).map_err(|e| format!("pack.json: {e}"))?;
    for (file, text) in fixtures {
        let fx: Fixture =
            serde_json::from_str(&text).map_err(|e| format!("fixtures/{file}: {e}"))?;
        pack.fixtures.push(fx);
    }
    Ok(pack)
}

/// Reads one pack directory (`pack.json` and `fixtures/*.json`).
pub fn read_pack_dir(dir: &Path) -> Result<Pack, String> {
    let manifest = std::fs::read_to_string(dir.join("pack.json"))
        .map_err(|e| format!("{}: {e}", dir.join("pack.json").display()))?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("fixtures"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut fixtures = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        fixtures.push((
            f.file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            text,
        ));
    }
    parse_pack(&manifest, fixtures).map_err(|e| format!("{}: {e}", dir.display()))
}

/// Every pack under `root` laid out as `<name>/<version>/pack.json` (or `root` itself being
/// one pack directory). Each entry is the pack or why it could not be read, with its path.
pub fn read_packs_tree(root: &Path) -> Vec<(String, Result<Pack, String>)> {
    if root.join("pack.json").is_file() {
        return vec![(root.display().to_string(), read_pack_dir(root))];
    }
    let mut out = Vec::new();
    let dirs = |d: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    for name in dirs(root) {
        // `root` may be one pack's folder of versions, or a folder of packs.
        if name.join("pack.json").is_file() {
            out.push((name.display().to_string(), read_pack_dir(&name)));
            continue;
        }
        for version in dirs(&name) {
            if version.join("pack.json").is_file() {
                out.push((version.display().to_string(), read_pack_dir(&version)));
            }
        }
    }
    out
}

/// What one source offers: each pack, or why it could not be read, named by its origin.
pub type SourceEntries = Vec<(String, Result<Pack, String>)>;

/// One entry of `SWITCHBOARD_RULE_PACK_SOURCES`, sorted by what may be done with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PackSource {
    /// `file:///<dir>`: a directory laid out as `<name>/<version>/` (or one pack directory),
    /// read by [`read_file_source`].
    File { origin: String, path: PathBuf },
    /// `https://…`: one pack document (see [`parse_pack_document`]), fetched once at start by
    /// control. `origin` is the URL as logs may show it (see [`redact_url`]).
    Https { url: String, origin: String },
    /// Anything else: plain `http://`, other schemes, bare paths. Never read.
    Refused { origin: String, reason: String },
}

impl PackSource {
    /// The name logs use for this source.
    pub fn origin(&self) -> &str {
        match self {
            PackSource::File { origin, .. }
            | PackSource::Https { origin, .. }
            | PackSource::Refused { origin, .. } => origin,
        }
    }
}

/// Splits `SWITCHBOARD_RULE_PACK_SOURCES` (comma-separated) into its sources, in order.
/// Only `file://` and `https://` are accepted; plain `http://` is refused, since packs are
/// code-like configuration and must not be open to tampering on the way.
pub fn parse_sources(spec: &str) -> Vec<PackSource> {
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|source| {
            let (scheme, rest) = source
                .split_once("://")
                .map(|(scheme, rest)| (scheme.to_ascii_lowercase(), rest))
                .unwrap_or_default();
            match scheme.as_str() {
                "file" => PackSource::File {
                    origin: source.to_string(),
                    path: PathBuf::from(rest),
                },
                "https" => PackSource::Https {
                    url: source.to_string(),
                    origin: redact_url(source),
                },
                "http" => PackSource::Refused {
                    origin: redact_url(source),
                    reason: "plain http:// is refused: rule packs are code-like configuration; \
                             serve them over https://"
                        .into(),
                },
                _ => PackSource::Refused {
                    origin: redact_url(source),
                    reason: "unsupported source: use file:///<directory> or https://<url>".into(),
                },
            }
        })
        .collect()
}

/// `url` as logs may show it: without user info (`user:password@`) or fragment, and with
/// the query's values replaced by `…`, since either may hold a credential.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let rest = rest.split('#').next().unwrap_or_default();
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.find('/') {
        Some(i) => before_query.split_at(i),
        None => (before_query, ""),
    };
    let host = authority.rsplit('@').next().unwrap_or_default();
    let mut out = match scheme {
        Some(scheme) => format!("{scheme}://{host}{path}"),
        None => format!("{host}{path}"),
    };
    if let Some(query) = query {
        let keys: Vec<String> = query
            .split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) => format!("{k}=…"),
                None => kv.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&keys.join("&"));
    }
    out
}

/// Every pack of one `file://` source: `path` laid out as `<name>/<version>/pack.json` (or
/// one pack directory). Each entry is the pack or why it could not be read, with its path;
/// an `Err` says why the whole source could not be read.
pub fn read_file_source(path: &Path) -> Result<SourceEntries, String> {
    if !path.is_dir() {
        return Err(format!("{} is not a directory", path.display()));
    }
    Ok(read_packs_tree(path))
}

/// Parses one `https://` source's document: the directory layout as one JSON object,
///
/// ```json
/// {"packs": [{<pack.json's fields>, "fixtures": [<fixture>, …]}, …]}
/// ```
///
/// Each entry is what a `<name>/<version>/pack.json` holds, with its `fixtures/*.json`
/// files as the array `fixtures`, and is parsed by the same code as a directory's (so the
/// same pack comes out of either). Each entry is named `<origin>#<name>/<version>` (or
/// `<origin>#packs[<i>]` when it names neither). An `Err` says why the whole document was
/// refused.
pub fn parse_pack_document(origin: &str, body: &[u8]) -> Result<SourceEntries, String> {
    const SHAPE: &str = r#"want {"packs": [<pack.json with its "fixtures" array>, …]}"#;
    let doc: Value =
        serde_json::from_slice(body).map_err(|e| format!("not a pack document: {e}"))?;
    let Value::Object(mut top) = doc else {
        return Err(format!("not a pack document: {SHAPE}"));
    };
    if let Some(unknown) = top.keys().find(|k| *k != "packs") {
        return Err(format!(
            "not a pack document: unknown field {unknown:?}; {SHAPE}"
        ));
    }
    let Some(Value::Array(entries)) = top.remove("packs") else {
        return Err(format!("not a pack document: {SHAPE}"));
    };
    Ok(entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            let here = format!("{origin}#{}", entry_name(&entry, i));
            (here, parse_document_entry(entry))
        })
        .collect())
}

/// `<name>/<version>` as the entry declares them, or `packs[<i>]`.
fn entry_name(entry: &Value, i: usize) -> String {
    let field = |k: &str| {
        entry
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty() && s.len() <= 64 && !s.contains(['/', '#']))
    };
    match (field("name"), field("version")) {
        (Some(name), Some(version)) => format!("{name}/{version}"),
        _ => format!("packs[{i}]"),
    }
}

/// One document entry, through [`parse_pack`] exactly as a directory's `pack.json` and
/// `fixtures/<name>.json` files are.
fn parse_document_entry(entry: Value) -> Result<Pack, String> {
    let Value::Object(mut manifest) = entry else {
        return Err("want a pack.json object".into());
    };
    let fixtures = match manifest.remove("fixtures") {
        None => Vec::new(),
        Some(Value::Array(fixtures)) => fixtures,
        Some(_) => return Err("fixtures: want an array of fixtures".into()),
    };
    let files = fixtures.iter().enumerate().map(|(i, f)| {
        let file = match f.get("name").and_then(Value::as_str) {
            Some(name) => format!("{name}.json"),
            None => format!("[{i}]"),
        };
        (file, f.to_string())
    });
    parse_pack(&Value::Object(manifest).to_string(), files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_match_by_prefix_of_components() {
        assert!(version_matches("2.0.0", "2"));
        assert!(version_matches("2.1.0", "2.1"));
        assert!(version_matches("2.1.0", "2.1.0"));
        assert!(version_matches("2.1.0", "v2"));
        assert!(!version_matches("2.1.0", "2.0"));
        assert!(!version_matches("12.0.0", "1"));
        assert!(!version_matches("2.1.0", "2.1.0.1"));
    }

    #[test]
    fn sources_are_sorted_by_scheme() {
        let sources = parse_sources(
            " file:///etc/packs ,HTTPS://packs.example/all.json,http://packs.example/x,,s3://b/k",
        );
        assert_eq!(sources.len(), 4);
        assert_eq!(
            sources[0],
            PackSource::File {
                origin: "file:///etc/packs".into(),
                path: PathBuf::from("/etc/packs"),
            }
        );
        assert!(
            matches!(&sources[1], PackSource::Https { url, .. } if url == "HTTPS://packs.example/all.json")
        );
        assert!(
            matches!(&sources[2], PackSource::Refused { reason, .. } if reason.contains("http://"))
        );
        assert!(
            matches!(&sources[3], PackSource::Refused { reason, .. } if reason.contains("unsupported"))
        );
        assert!(parse_sources(" , ").is_empty());
    }

    #[test]
    fn urls_in_logs_hold_no_credentials() {
        assert_eq!(
            redact_url("https://ops:s3cret@packs.example:8443/p/all.json?token=abc&v#frag"),
            "https://packs.example:8443/p/all.json?token=…&v"
        );
        assert_eq!(redact_url("https://packs.example"), "https://packs.example");
        assert_eq!(redact_url("/etc/packs"), "/etc/packs");
    }

    /// A document holding `packs`, each as `pack.json` with its fixtures inline.
    fn document(packs: &[&Pack]) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({ "packs": packs })).unwrap_or_default()
    }

    #[test]
    fn a_document_gives_the_packs_a_directory_gives() {
        let builtin = Catalog::builtin();
        let packs: Vec<&Pack> = builtin.packs().iter().map(|p| &p.pack).collect();
        assert!(packs.iter().all(|p| !p.fixtures.is_empty()));
        let parsed = parse_pack_document("https://h/p.json", &document(&packs))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.len(), packs.len());
        for ((origin, result), want) in parsed.iter().zip(&packs) {
            assert_eq!(
                origin,
                &format!("https://h/p.json#{}/{}", want.name, want.version)
            );
            assert_eq!(result.as_ref().ok(), Some(*want), "{origin}");
        }
        // And a directory tree written from the same packs reads back the same.
        let dir = std::env::temp_dir().join(format!("sb-doc-{}", std::process::id()));
        for p in &packs {
            let d = dir.join(&p.name).join(&p.version);
            std::fs::create_dir_all(d.join("fixtures")).unwrap_or_default();
            let mut manifest = (*p).clone();
            manifest.fixtures.clear();
            std::fs::write(
                d.join("pack.json"),
                serde_json::to_vec(&manifest).unwrap_or_default(),
            )
            .unwrap_or_default();
            for (i, f) in p.fixtures.iter().enumerate() {
                std::fs::write(
                    d.join("fixtures").join(format!("{i:04}.json")),
                    serde_json::to_vec(f).unwrap_or_default(),
                )
                .unwrap_or_default();
            }
        }
        let from_dir = read_file_source(&dir).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        let mut from_dir: Vec<Pack> = from_dir.into_iter().filter_map(|(_, r)| r.ok()).collect();
        let mut from_doc: Vec<Pack> = parsed.into_iter().filter_map(|(_, r)| r.ok()).collect();
        from_dir.sort_by_key(Pack::label);
        from_doc.sort_by_key(Pack::label);
        assert_eq!(from_dir.len(), packs.len());
        assert_eq!(from_dir, from_doc);
    }

    #[test]
    fn a_bad_entry_is_named_and_the_others_still_parse() {
        let builtin = Catalog::builtin();
        let good = &builtin.packs()[0].pack;
        let mut doc: Value = serde_json::from_slice(&document(&[good])).unwrap_or_default();
        let mut broken = serde_json::to_value(good).unwrap_or_default();
        broken["name"] = "ext-broken".into();
        broken["fixtures"][0]["wanted"] = "drop".into();
        if let Some(a) = doc["packs"].as_array_mut() {
            a.push(broken);
            a.push(serde_json::json!(["not", "a", "pack"]));
        }
        let parsed = parse_pack_document(
            "https://h/p.json",
            &serde_json::to_vec(&doc).unwrap_or_default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.len(), 3);
        assert!(parsed[0].1.is_ok());
        assert_eq!(
            parsed[1].0,
            format!("https://h/p.json#ext-broken/{}", good.version)
        );
        let reason = parsed[1].1.as_ref().err().cloned().unwrap_or_default();
        assert!(
            reason.contains("fixtures/") && reason.contains("wanted"),
            "{reason}"
        );
        assert_eq!(parsed[2].0, "https://h/p.json#packs[2]");
        assert!(parsed[2].1.is_err());
    }

    #[test]
    fn a_document_of_another_shape_is_refused() {
        for body in [
            &b"<html>not json</html>"[..],
            b"[]",
            b"{}",
            br#"{"packs": {}}"#,
            br#"{"packs": [], "extra": 1}"#,
        ] {
            let err = parse_pack_document("https://h/p.json", body)
                .err()
                .unwrap_or_default();
            assert!(
                err.starts_with("not a pack document"),
                "{}: {err}",
                String::from_utf8_lossy(body)
            );
        }
        assert_eq!(
            parse_pack_document("https://h/p.json", br#"{"packs": []}"#).map(|v| v.len()),
            Ok(0)
        );
    }
}
