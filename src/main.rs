//! The one `switchboard` binary. Each subcommand runs a role; `sandbox-child` is how the
//! router runs its own children and is never started by hand.

use mimalloc::MiMalloc;
use switchboard_router::sandbox::memory::Budgeted;

mod cli;
mod client;
mod config;
mod roles;

/// mimalloc: the allocator alone is worth 1.4–1.6× on envelope parsing (STACK.md); wrapped
/// to hold a sandbox child's units to their memory budget (`sandbox::memory`; off elsewhere).
#[global_allocator]
static GLOBAL: Budgeted<MiMalloc> = Budgeted(MiMalloc);

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    // A sandbox child is single-threaded and confines itself before reading input: it must
    // start before any runtime (or its threads) exists.
    if args.get(1).map(String::as_str) == Some("sandbox-child") {
        let code = switchboard_router::sandbox::child::main(&args[2..]);
        return std::process::ExitCode::from(code.clamp(0, 255) as u8);
    }
    cli::main()
}
