//! Embeds the built-in catalog (`packs/catalog/<name>/<version>/pack.json` and its fixtures) and
//! fails the build on an invalid pack or a param name declared with two types (REQ-1).

#[path = "src/manifest.rs"]
#[allow(dead_code)]
mod manifest;
#[path = "src/types.rs"]
#[allow(dead_code)]
mod types;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn sorted_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"))
        .join("catalog");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut problems = Vec::new();
    let mut packs = Vec::new();
    let mut generated = String::from(
        "/// Every built-in pack version: (manifest, [(fixture file, fixture)]).\npub static BUILTIN: &[(&str, &[(&str, &str)])] = &[\n",
    );
    for name_dir in sorted_dirs(&root) {
        for version_dir in sorted_dirs(&name_dir) {
            let manifest_path = version_dir.join("pack.json");
            if !manifest_path.is_file() {
                continue;
            }
            println!("cargo:rerun-if-changed={}", version_dir.display());
            let dir_name = name_dir
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let dir_version = version_dir
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let text = std::fs::read_to_string(&manifest_path).expect("read pack.json");
            let mut pack: manifest::Pack = match serde_json::from_str(&text) {
                Ok(p) => p,
                Err(e) => {
                    problems.push(format!("{}: {e}", manifest_path.display()));
                    continue;
                }
            };
            let mut fixtures = Vec::new();
            let fixtures_dir = version_dir.join("fixtures");
            println!("cargo:rerun-if-changed={}", fixtures_dir.display());
            let mut files: Vec<PathBuf> = std::fs::read_dir(&fixtures_dir)
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|x| x == "json"))
                        .collect()
                })
                .unwrap_or_default();
            files.sort();
            for f in files {
                let text = std::fs::read_to_string(&f).expect("read fixture");
                match serde_json::from_str::<manifest::Fixture>(&text) {
                    Ok(fx) => pack.fixtures.push(fx),
                    Err(e) => problems.push(format!("{}: {e}", f.display())),
                }
                fixtures.push(f);
            }
            if pack.fixtures.is_empty() {
                problems.push(format!(
                    "{}: a pack ships at least one fixture",
                    pack.label()
                ));
            }
            problems.extend(manifest::check_pack(&pack, Some((&dir_name, &dir_version))));
            let _ = write!(
                generated,
                "    (include_str!({:?}), &[",
                manifest_path.display().to_string()
            );
            for f in &fixtures {
                let file = f
                    .file_name()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let _ = write!(
                    generated,
                    "({file:?}, include_str!({:?})), ",
                    f.display().to_string()
                );
            }
            generated.push_str("]),\n");
            packs.push(pack);
        }
    }
    generated.push_str("];\n");
    problems.extend(manifest::check_shared_param_types(&packs));
    if !problems.is_empty() {
        panic!(
            "the built-in rule-pack catalog is invalid:\n  {}",
            problems.join("\n  ")
        );
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("catalog.rs");
    std::fs::write(out, generated).expect("write catalog.rs");
}
