//! `switchboard packs test <dir>`: validates pack directories and routes their fixtures with
//! the same runner the repository's catalog test uses, in-process and through a sandbox child.

use std::path::PathBuf;

use switchboard_packs::catalog::read_packs_tree;
use switchboard_packs::manifest::{check_pack, check_shared_param_types};
use switchboard_router::sandbox::{SandboxConfig, SandboxPool};

/// `switchboard packs test <dir>` (its flags live with the other `packs` commands in
/// `client::packs`): runs locally, no control, no credential.
pub async fn test(dir: PathBuf) -> anyhow::Result<()> {
    let packs = read_packs_tree(&dir);
    if packs.is_empty() {
        anyhow::bail!(
            "{}: no pack.json found (expected <dir>/pack.json or <dir>/<name>/<version>/pack.json)",
            dir.display()
        );
    }
    let mut config = SandboxConfig::new(std::env::current_exe()?);
    config.children = 1;
    let pool = SandboxPool::start(config).await?;
    let mut failures = Vec::new();
    let mut loaded = Vec::new();
    for (origin, result) in packs {
        match result {
            Err(e) => failures.push(format!("{origin}: {e}")),
            Ok(pack) => {
                let mut problems = check_pack(&pack, None);
                if problems.is_empty() {
                    problems = switchboard_packs::runner::check_pack(&pack, &pool).await;
                }
                if problems.is_empty() {
                    println!(
                        "ok   {} ({} rules, {} fixtures)",
                        pack.label(),
                        pack.rules.len(),
                        pack.fixtures.len()
                    );
                } else {
                    println!("FAIL {}", pack.label());
                }
                failures.extend(problems);
                loaded.push(pack);
            }
        }
    }
    // External packs must agree with the built-ins on shared param types too.
    let mut all: Vec<_> = switchboard_packs::Catalog::builtin()
        .packs()
        .iter()
        .map(|p| p.pack.clone())
        .collect();
    all.extend(loaded);
    failures.extend(check_shared_param_types(&all));
    if failures.is_empty() {
        return Ok(());
    }
    for f in &failures {
        eprintln!("  {f}");
    }
    anyhow::bail!("{} problems", failures.len())
}
