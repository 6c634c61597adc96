//! Control's modules import one way: the graph of `crate::<module>` references between its
//! top-level modules has no cycle (issue 19: api, ingest and rule packs once imported each
//! other in a circle). Comments are not imports; `#[cfg(test)]` modules are not exempt.
//!
//! The same holds for the store, control's lowest floor in a crate of its own since issue 44
//! (`store/src`, each file a top-level module naming its siblings through `crate::`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module → the modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`api` for `src/api/rules.rs`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then(|| name.to_string())
}

/// The edges between `src`'s top-level modules (`crate::<module>` references), and what is
/// left of them once every module nothing else needs is peeled off: a cycle, if anything.
fn modules_and_cycle(src: &Path) -> (Graph, Graph) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut edges = Graph::new();
    for file in &files {
        let Some(from) = module_of(src, file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("a source file");
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default();
            for (at, _) in code.match_indices("crate::") {
                let rest = &code[at + "crate::".len()..];
                // `crate::a::…` or `crate::{a, b::…}`.
                let names: Vec<&str> = match rest.strip_prefix('{') {
                    Some(group) => group
                        .split('}')
                        .next()
                        .unwrap_or_default()
                        .split(',')
                        .collect(),
                    None => vec![rest],
                };
                for name in names {
                    let to: String = name
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    let is_module = src.join(format!("{to}.rs")).exists() || src.join(&to).is_dir();
                    if !to.is_empty() && to != from && is_module {
                        edges.entry(from.clone()).or_default().insert(to);
                    }
                }
            }
        }
    }
    // Kahn's algorithm: whatever is left after peeling off modules nothing else needs is a
    // cycle.
    let mut remaining = edges.clone();
    loop {
        let needed: BTreeSet<String> = remaining.values().flatten().cloned().collect();
        let leaves: Vec<String> = remaining
            .keys()
            .filter(|m| !needed.contains(*m))
            .cloned()
            .collect();
        if leaves.is_empty() {
            break;
        }
        for leaf in leaves {
            remaining.remove(&leaf);
        }
    }
    (edges, remaining)
}

#[test]
fn control_modules_import_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (edges, remaining) = modules_and_cycle(&src);
    assert!(
        edges.contains_key("api"),
        "the scan found control's modules: {edges:?}"
    );
    assert!(
        remaining.is_empty(),
        "control's modules import in a circle among: {:?}",
        remaining
    );
}

#[test]
fn store_modules_import_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../store/src");
    let (edges, remaining) = modules_and_cycle(&src);
    assert!(
        edges.contains_key("events") && edges.contains_key("webhooks"),
        "the scan found the store's modules: {edges:?}"
    );
    assert!(
        remaining.is_empty(),
        "the store's modules import in a circle among: {:?}",
        remaining
    );
}
