//! The repository stands alone: a clone needs nothing beside it. Every tracked file is
//! read, and none may refer to the shared folder beside the checkout or hard-code an absolute path
//! of one machine's checkout or data folder.

use std::path::Path;
use std::process::Command;

/// Files where such text is quoted, not used: the changelog (history), the vendored payloads
/// and the copied specification (kept verbatim), and this file (it names what it looks for).
const VERBATIM: [&str; 4] = [
    "CHANGELOG.md",
    "testkit/data/",
    "docs/spec/",
    "tests/all/repository.rs",
];

/// Home and work folders of one machine, never part of a checkout anyone else has.
const MACHINE_ROOTS: [&str; 5] = ["/work/", "/home/", "/Users/", "/root/", "/mnt/"];

fn tracked_files(root: &Path) -> Vec<String> {
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .expect("git lists the tracked files");
    assert!(out.status.success(), "git ls-files failed");
    String::from_utf8(out.stdout)
        .expect("utf-8 paths")
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// Where `text` names an absolute path under one of [`MACHINE_ROOTS`]: the root must start
/// a path (after a quote, a space, `=`, `(` or a line start), not end a longer one
/// (`/usr/local/work/` is fine, `$HOME/work/` too).
fn machine_paths(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for root in MACHINE_ROOTS {
        for (at, _) in text.match_indices(root) {
            let before = text[..at].chars().next_back();
            let starts_a_path = match before {
                None => true,
                Some(c) => !(c.is_alphanumeric() || "._-~/$}".contains(c)),
            };
            if starts_a_path {
                let end = text[at..]
                    .find(|c: char| c.is_whitespace() || "\"'`)".contains(c))
                    .map_or(text.len(), |n| at + n);
                found.push(text[at..end].to_string());
            }
        }
    }
    found
}

#[test]
fn no_tracked_file_refers_outside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sibling = ["..", "/shared"].concat();
    let files = tracked_files(root);
    assert!(
        files.iter().any(|f| f == "README.md"),
        "the listing is the repository's"
    );
    let mut problems = Vec::new();
    for file in &files {
        if VERBATIM.iter().any(|v| file.starts_with(v)) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            continue; // binary files name no paths we use
        };
        for (n, line) in text.lines().enumerate() {
            if line.contains(&sibling) {
                problems.push(format!("{file}:{}: refers to {sibling}: {line}", n + 1));
            }
            for path in machine_paths(line) {
                problems.push(format!("{file}:{}: an absolute path: {path}", n + 1));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn machine_paths_are_found_where_they_start_a_path() {
    assert_eq!(
        machine_paths("const D: &str = \"/work/x/data\";"),
        ["/work/x/data"]
    );
    assert_eq!(machine_paths("cd /home/me/repo"), ["/home/me/repo"]);
    assert!(machine_paths("/usr/local/work/ and $HOME/work/ and ./root/").is_empty());
}

#[test]
fn the_vendored_payloads_keep_their_licenses() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("testkit/data/webhooks");
    let readme = std::fs::read_to_string(data.join("README.md")).expect("the provenance README");
    let licenses: Vec<String> = std::fs::read_dir(data.join("LICENSES"))
        .expect("LICENSES")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    assert!(!licenses.is_empty());
    for license in &licenses {
        assert!(
            readme.contains(&format!("LICENSES/{license}")) || readme.contains(license.as_str()),
            "the README attributes {license}"
        );
    }
    for forge in ["github", "gitea", "forgejo"] {
        for entry in std::fs::read_dir(data.join(forge)).expect("a forge folder") {
            let name = entry.expect("entry").file_name();
            let name = name.to_string_lossy();
            assert!(
                readme.contains(&format!("`{forge}/{name}`")),
                "the README says where {forge}/{name} came from"
            );
        }
    }
}
