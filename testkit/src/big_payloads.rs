//! Big deliveries for the big-body tests and the peak-memory bench: GitHub's real push
//! payload grown to an exact size, as a push of thousands of commits is.

use serde_json::{Value, json};

/// GitHub's real push payload (`github/push.json`) grown to exactly `len` bytes: commits in
/// GitHub's shape (the vendored push has none), by its pusher to its repository, the last one
/// as `head_commit`, then a `switchboard_pad` string field for the exact length. Panics only
/// when the vendored payload is missing or `len` is smaller than the payload itself.
pub fn github_push_of(len: usize) -> Vec<u8> {
    let path = crate::payloads_dir::webhooks_dir().join("github/push.json");
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut value: Value = serde_json::from_slice(&text).expect("push.json is JSON");
    let pusher = value["pusher"].clone();
    let url = value["repository"]["html_url"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let commit = |i: usize| {
        let id = format!("{i:040x}");
        json!({
            "id": id, "tree_id": id, "distinct": true,
            "message": format!("Commit {i} of a big push"),
            "timestamp": "2019-05-15T15:20:30-05:00",
            "url": format!("{url}/commit/{id}"),
            "author": pusher, "committer": pusher,
            "added": [], "removed": [], "modified": ["README.md"]
        })
    };
    let one = serde_json::to_vec(&commit(0)).expect("a commit").len() + 1;
    // The payload without commits, and a head commit, come first; commits fill most of the rest.
    let bare = serde_json::to_vec(&value).expect("serializes").len() + 2 * one;
    let commits: Vec<Value> = (0..(len.saturating_sub(bare) * 9 / 10) / one)
        .map(commit)
        .collect();
    value["head_commit"] = commits.last().cloned().unwrap_or(Value::Null);
    value["commits"] = Value::Array(commits);
    value["switchboard_pad"] = json!("");
    let base = serde_json::to_vec(&value).expect("serializes").len();
    assert!(base <= len, "a push of {base} bytes does not fit in {len}");
    value["switchboard_pad"] = json!("x".repeat(len - base));
    let body = serde_json::to_vec(&value).expect("serializes");
    assert_eq!(body.len(), len);
    body
}

/// How many commits [`github_push_of`] put in `body`.
pub fn commits_in(body: &[u8]) -> usize {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["commits"].as_array().map(Vec::len))
        .unwrap_or(0)
}
