//! Every crate's files import one way (issue 44): inside each crate of the workspace, the
//! graph of imports between source files has no circle. An import is a path through
//! `crate::`, `super::` or `self::` that reaches another file's module; a module's use of its
//! own ancestors or descendants is the module tree itself, not an arrow between rooms, and is
//! left out. Comments are not imports, and neither are a file's `#[cfg(test)]` modules: a test
//! may use whatever it checks against.
//!
//! And the surfaces import one way between crates: the people's CLI (`src/client/`), the MCP
//! gateway and the console depend on `model`, `proto` and the shared control client, never on
//! `packs` or on each other; the shared client depends on no surface and not on control's
//! server. The store, control's lowest floor (issue 44), depends on nothing above it, and
//! testkit, which gives the store's tests their databases, not on the store.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's crates: every folder holding a Cargo.toml with a `src/` beside it.
fn crates(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    for entry in std::fs::read_dir(root).expect("the workspace root") {
        let path = entry.expect("an entry").path();
        if path.join("Cargo.toml").exists() && path.join("src").is_dir() {
            out.push(path);
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's module path: `["engine", "compile"]` for `src/engine/compile.rs`, `["engine"]`
/// for `src/engine/mod.rs`, `[]` for `lib.rs` and `main.rs`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !["mod", "lib", "main"].contains(&stem) {
        parts.push(stem.to_string());
    }
    parts
}

/// The deepest module along `path` that is a file of its own, if any.
fn resolve(files: &BTreeMap<Vec<String>, PathBuf>, path: &[String]) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|m| files.contains_key(m))
}

/// The paths a file's code reaches through `crate::`, `super::` and `self::`, from module
/// `at`, as module paths; `use` trees with nested `{…}` groups over several lines are read
/// whole.
fn paths_in(code: &str, at: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for prefix in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(prefix) {
            // Not the tail of another name (`x_crate::`) or path (`a::self::` is read whole).
            if code[..i]
                .chars()
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            {
                continue;
            }
            let mut base: Vec<String> = match prefix {
                "crate::" => Vec::new(),
                _ => at.to_vec(),
            };
            let mut rest = &code[i + prefix.len()..];
            if prefix == "super::" {
                base.pop();
                while let Some(r) = rest.strip_prefix("super::") {
                    base.pop();
                    rest = r;
                }
            }
            tree(rest, base, &mut out);
        }
    }
    out
}

/// Reads one use tree (`a::b`, `a::{b, c::{d, e}}`) from the start of `text`, each leaf's
/// path onto `out`.
fn tree(text: &str, mut path: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut rest = text.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            // Split the group's items at top-level commas.
            let (mut depth, mut start) = (0usize, 0usize);
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        tree_item(&group[start..k], &path, out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        tree_item(&group[start..k], &path, out);
                        start = k + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            break;
        }
        path.push(name.clone());
        rest = &rest[name.len()..];
        match rest.strip_prefix("::") {
            Some(r) => rest = r.trim_start(),
            None => break,
        }
    }
    out.push(path);
}

fn tree_item(item: &str, path: &[String], out: &mut Vec<Vec<String>>) {
    let item = item.trim();
    if !item.is_empty() && item != "self" && item != "*" {
        tree(item, path.to_vec(), out);
    }
}

/// `code` without its `#[cfg(test)] mod … { … }` blocks (braces counted; test modules hold
/// no unbalanced brace outside strings in this workspace, and a miscount only drops more).
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let is_mod = after["#[cfg(test)]".len()..]
            .trim_start()
            .starts_with("mod ");
        let Some(open) = after.find('{').filter(|_| is_mod) else {
            out.push_str("#[cfg(test)]");
            rest = &after["#[cfg(test)]".len()..];
            continue;
        };
        let mut depth = 0usize;
        let mut end = after.len();
        for (k, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The circles of one crate: each set of files that reach one another through imports
/// (strongly connected, more than one file), with the arrows among them.
fn circle(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut list = Vec::new();
    rust_files(src, &mut list);
    let files: BTreeMap<Vec<String>, PathBuf> = list
        .iter()
        .map(|f| (module_of(src, f), f.clone()))
        .collect();
    let name = |m: &[String]| {
        files[m]
            .strip_prefix(src)
            .expect("under src")
            .display()
            .to_string()
    };
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file).expect("a source file");
        let code = without_tests(
            &text
                .lines()
                .map(|l| l.split("//").next().unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n"),
        );
        let mut paths = paths_in(&code, module);
        // A module brought in by name (`use crate::roles;`) is then reached as `roles::up::…`.
        let aliases: Vec<Vec<String>> = paths
            .iter()
            .filter(|p| files.contains_key(*p) && !p.is_empty())
            .cloned()
            .collect();
        for alias in aliases {
            let short = format!("{}::", alias[alias.len() - 1]);
            for (i, _) in code.match_indices(&short) {
                if code[..i]
                    .chars()
                    .last()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                {
                    continue;
                }
                tree(&code[i + short.len()..], alias.clone(), &mut paths);
            }
        }
        for path in paths {
            let Some(to) = resolve(&files, &path) else {
                continue;
            };
            // Ancestors and descendants are the module tree, not an arrow.
            if to.starts_with(module) || module.starts_with(&to) {
                continue;
            }
            edges.entry(name(module)).or_default().insert(name(&to));
        }
    }
    // Files in a circle: those that reach themselves through another file.
    let reaches = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&String> = edges.get(from).into_iter().flatten().collect();
        while let Some(next) = todo.pop() {
            if seen.insert(next.clone()) {
                todo.extend(edges.get(next).into_iter().flatten());
            }
        }
        seen
    };
    let in_circle: BTreeSet<String> = edges
        .keys()
        .filter(|f| reaches(f).contains(*f))
        .cloned()
        .collect();
    edges
        .into_iter()
        .filter(|(from, _)| in_circle.contains(from))
        .map(|(from, to)| {
            let to = to.into_iter().filter(|t| in_circle.contains(t)).collect();
            (from, to)
        })
        .collect()
}

#[test]
fn every_crate_imports_one_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut circles = Vec::new();
    let mut crates_seen = 0;
    for krate in crates(root) {
        let src = krate.join("src");
        crates_seen += 1;
        let left = circle(&src);
        if !left.is_empty() {
            circles.push(format!("{}: {left:#?}", krate.display()));
        }
    }
    assert!(crates_seen >= 8, "the scan found the workspace's crates");
    assert!(
        crates(root).contains(&root.join("store")),
        "the scan covers the store's crate (issue 44)"
    );
    assert!(
        circles.is_empty(),
        "files import in a circle:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_scan_sees_a_circle_and_the_module_tree_is_none() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path();
    std::fs::create_dir_all(src.join("a")).expect("dir");
    std::fs::write(
        src.join("lib.rs"),
        "mod a; mod b;\nuse crate::a::x::Thing;\n",
    )
    .expect("lib");
    std::fs::write(src.join("a/mod.rs"), "pub mod x;\nuse self::x::Thing;\n").expect("a");
    std::fs::write(
        src.join("a/x.rs"),
        "use super::*;\nuse crate::b::Other; // crate::c\n#[cfg(test)]\nmod tests {\n    use crate::b::{c, d::{e}};\n}\n",
    )
    .expect("x");
    std::fs::write(
        src.join("b.rs"),
        "pub struct Other;\nuse crate::a::x::Thing;\n",
    )
    .expect("b");
    let left = circle(src);
    assert_eq!(left.len(), 2, "a/x.rs and b.rs import each other: {left:?}");
    std::fs::write(
        src.join("a/x.rs"),
        "use super::*;\n#[cfg(test)]\nmod tests {\n    use crate::b::Other;\n}\n",
    )
    .expect("x");
    assert!(
        circle(src).is_empty(),
        "a test module imports nothing: {:?}",
        circle(src)
    );
    // A nested `use` tree over several lines is read whole.
    std::fs::write(src.join("a/x.rs"), "use crate::b::Other;\n").expect("x");
    std::fs::write(
        src.join("b.rs"),
        "use crate::{\n    a::{x::{self, Thing}},\n};\n",
    )
    .expect("b");
    let left = circle(src);
    assert_eq!(
        left.keys().cloned().collect::<Vec<_>>(),
        ["a/x.rs", "b.rs"],
        "{left:?}"
    );
}

/// Whether `code` (comments left out) names the crate `name` (`switchboard_console`): the whole
/// identifier, so `switchboard_control` is not found in `switchboard_control_client`.
fn names_crate(code: &str, name: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    code.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .any(|line| {
            line.match_indices(name).any(|(i, _)| {
                !line[..i].chars().last().is_some_and(ident)
                    && !line[i + name.len()..].chars().next().is_some_and(ident)
            })
        })
}

/// The files under `dir` that name any of `crates`, with the crates each names.
fn files_naming(dir: &Path, crates: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    files.sort();
    files
        .iter()
        .filter_map(|f| {
            let code = std::fs::read_to_string(f).expect("a source file");
            let named: Vec<&str> = crates
                .iter()
                .copied()
                .filter(|c| names_crate(&code, c))
                .collect();
            (!named.is_empty()).then(|| format!("{}: {}", f.display(), named.join(", ")))
        })
        .collect()
}

/// The workspace packages a crate's manifest depends on (`[dependencies]` only: a test may
/// start whatever it checks against).
fn dependencies(krate: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(krate.join("Cargo.toml")).expect("a manifest");
    let manifest: toml::Table = toml::from_str(&text).expect("a manifest that parses");
    manifest
        .get("dependencies")
        .and_then(toml::Value::as_table)
        .map(|deps| {
            deps.keys()
                .filter(|k| k.starts_with("switchboard-"))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn surfaces_depend_on_the_shared_client_not_on_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The people's CLI is a surface: its client, errors and JSON views are the shared
    // client's, not the gateway's (or the console's, or packs' logic).
    let cli = files_naming(
        &root.join("src/client"),
        &[
            "switchboard_mcp_gateway",
            "switchboard_console",
            "switchboard_packs",
        ],
    );
    assert!(cli.is_empty(), "the CLI imports another surface: {cli:#?}");
    // In the binary, only the roles that start the gateway's server name the gateway.
    let gateway_users: Vec<String> = files_naming(&root.join("src"), &["switchboard_mcp_gateway"])
        .into_iter()
        .filter(|f| {
            !["src/roles/gateway.rs:", "src/roles/up.rs:"]
                .iter()
                .any(|starter| f.starts_with(&root.join(starter).display().to_string()))
        })
        .collect();
    assert!(
        gateway_users.is_empty(),
        "only src/roles/gateway.rs and src/roles/up.rs start the gateway: {gateway_users:#?}"
    );
    // The shared client serves every surface, so it depends on none, nor on control's server
    // or packs.
    let client = root.join("control-client");
    let forbidden = [
        "switchboard_mcp_gateway",
        "switchboard_console",
        "switchboard_packs",
        "switchboard_control",
    ];
    let named = files_naming(&client.join("src"), &forbidden);
    assert!(
        named.is_empty(),
        "the shared control client imports a surface, packs or control: {named:#?}"
    );
    let forbidden_packages: Vec<String> = forbidden.iter().map(|c| c.replace('_', "-")).collect();
    let mut edges = BTreeMap::new();
    for (krate, not) in [
        ("control-client", forbidden_packages),
        (
            "mcp-gateway",
            vec!["switchboard-console".into(), "switchboard-packs".into()],
        ),
        (
            "console",
            vec!["switchboard-mcp-gateway".into(), "switchboard-packs".into()],
        ),
    ] {
        let deps = dependencies(&root.join(krate));
        assert!(
            deps.contains("switchboard-model"),
            "the scan read {krate}'s dependencies: {deps:?}"
        );
        let wrong: Vec<String> = not.into_iter().filter(|d| deps.contains(d)).collect();
        if !wrong.is_empty() {
            edges.insert(krate, wrong);
        }
    }
    assert!(
        edges.is_empty(),
        "a surface or the shared client depends on what it must not: {edges:?}"
    );
}

#[test]
fn the_store_depends_on_nothing_above_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Control, packs, the router and the surfaces stand on the store, never under it.
    let above = [
        "switchboard_control",
        "switchboard_packs",
        "switchboard_router",
        "switchboard_console",
        "switchboard_mcp_gateway",
        "switchboard_control_client",
    ];
    let named = files_naming(&root.join("store/src"), &above);
    assert!(
        named.is_empty(),
        "the store imports what stands on it: {named:#?}"
    );
    let deps = dependencies(&root.join("store"));
    assert!(
        deps.contains("switchboard-model"),
        "the scan read the store's dependencies: {deps:?}"
    );
    let wrong: Vec<String> = above
        .iter()
        .map(|c| c.replace('_', "-"))
        .filter(|d| deps.contains(d))
        .collect();
    assert!(
        wrong.is_empty(),
        "the store depends on what stands on it: {wrong:?}"
    );
    // Testkit hands out database URLs; the caller opens the store, so no cycle.
    let testkit = dependencies(&root.join("testkit"));
    assert!(
        testkit.contains("switchboard-proto"),
        "the scan read testkit's dependencies: {testkit:?}"
    );
    for store_or_above in ["switchboard-store", "switchboard-control"] {
        assert!(
            !testkit.contains(store_or_above),
            "testkit depends on {store_or_above}: {testkit:?}"
        );
    }
}

#[test]
fn the_crate_scan_reads_whole_names_and_skips_comments() {
    assert!(names_crate(
        "use switchboard_mcp_gateway::tools::convert;",
        "switchboard_mcp_gateway"
    ));
    assert!(names_crate(
        "    let x = switchboard_control::verbs::FAMILIES;",
        "switchboard_control"
    ));
    assert!(!names_crate(
        "use switchboard_control_client::{Bearer, ControlClient};",
        "switchboard_control"
    ));
    assert!(!names_crate(
        "// once switchboard_mcp_gateway::errors::ToolError",
        "switchboard_mcp_gateway"
    ));
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("packs.rs"),
        "use switchboard_mcp_gateway::tools::output::PlanOut;\n",
    )
    .expect("a file");
    std::fs::write(
        dir.path().join("todos.rs"),
        "use switchboard_control_client::views::TodoOut;\n",
    )
    .expect("a file");
    let named = files_naming(
        dir.path(),
        &["switchboard_mcp_gateway", "switchboard_control"],
    );
    assert_eq!(named.len(), 1, "{named:?}");
    assert!(
        named[0].ends_with("packs.rs: switchboard_mcp_gateway"),
        "{named:?}"
    );
}
