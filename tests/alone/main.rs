//! End-to-end tests that measure CPU time or wall time, with real sandbox children. Cargo
//! runs test binaries one after another, so nothing of the other suites runs beside these,
//! and each test here holds [`one_at_a_time`] while it runs: what they measure is the
//! router's own neighbours, not the rest of the suite loading the machine.

mod neighbours;
#[allow(dead_code)]
#[path = "../all/support.rs"]
mod support;

/// Held by each test of this binary for as long as it runs (a test that fails drops it).
pub async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}
