//! The catalog: the built-in packs embedded in this binary, plus external packs an operator
//! adds with `SWITCHBOARD_RULE_PACK_SOURCES` (unset by default), loaded once at start.

use std::path::{Path, PathBuf};

use crate::manifest::{Fixture, Pack, check_pack, check_shared_param_types};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/catalog.rs"));
}

/// Where a pack came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Builtin,
    /// An operator's source (`file:///…`), named for logs and listings.
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

/// Reads `SWITCHBOARD_RULE_PACK_SOURCES` (comma-separated): `file://` directories are read
/// now; anything else is reported as skipped. Structural checks only — the caller routes
/// each pack's fixtures through a router before adding it.
pub fn read_sources(spec: &str) -> (Vec<(String, Pack)>, Vec<SkippedPack>) {
    let mut packs = Vec::new();
    let mut skipped = Vec::new();
    for source in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some(path) = source.strip_prefix("file://") else {
            skipped.push(SkippedPack {
                origin: source.to_string(),
                reason: "only file:// sources are supported by this build".into(),
            });
            continue;
        };
        let root = Path::new(path);
        if !root.is_dir() {
            skipped.push(SkippedPack {
                origin: source.to_string(),
                reason: format!("{path} is not a directory"),
            });
            continue;
        }
        for (origin, result) in read_packs_tree(root) {
            match result {
                Ok(pack) => packs.push((origin, pack)),
                Err(reason) => skipped.push(SkippedPack { origin, reason }),
            }
        }
    }
    (packs, skipped)
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
}
