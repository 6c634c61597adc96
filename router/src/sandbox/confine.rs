//! What a sandbox child does to itself before it reads any tenant input: resource limits,
//! no new privileges, death with its parent, a seccomp filter that denies network,
//! process creation and file writes, and a Landlock ruleset that denies the filesystem and
//! TCP. Each is reported back so the parent can refuse to run unconfined.

use std::collections::BTreeMap;

use rustix::process::{Resource, Rlimit, setrlimit};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};
use switchboard_proto::router::v1::ChildReady;

/// Resource limits of one child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildLimits {
    /// Address space in MiB (RLIMIT_AS): a runaway allocation aborts the child, not the host.
    pub address_space_mb: u64,
    /// CPU seconds over the child's life (RLIMIT_CPU): a backstop if the parent's clock fails.
    pub cpu_seconds: u64,
    /// Open files (RLIMIT_NOFILE): the pipes are all a child needs.
    pub open_files: u64,
    /// Memory one unit may hold while it evaluates, MiB (`sandbox::memory`); 0: no budget.
    pub unit_memory_mb: u64,
}

impl Default for ChildLimits {
    fn default() -> Self {
        Self {
            address_space_mb: 1024,
            cpu_seconds: 3600,
            open_files: 16,
            unit_memory_mb: 128,
        }
    }
}

impl ChildLimits {
    pub fn to_args(&self) -> Vec<String> {
        vec![
            format!("--address-space-mb={}", self.address_space_mb),
            format!("--cpu-seconds={}", self.cpu_seconds),
            format!("--open-files={}", self.open_files),
            format!("--unit-memory-mb={}", self.unit_memory_mb),
        ]
    }
}

fn limit(resource: Resource, value: u64) -> Result<(), String> {
    setrlimit(
        resource,
        Rlimit {
            current: Some(value),
            maximum: Some(value),
        },
    )
    .map_err(|e| format!("setrlimit {resource:?}: {e}"))
}

/// Applies everything; returns what took effect. Never panics.
pub fn apply(limits: &ChildLimits) -> ChildReady {
    let mut detail = Vec::new();
    if let Err(e) =
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
    {
        detail.push(format!("pdeathsig: {e}"));
    }
    for (resource, value) in [
        (
            Resource::As,
            limits.address_space_mb.saturating_mul(1024 * 1024),
        ),
        (Resource::Cpu, limits.cpu_seconds),
        (Resource::Nofile, limits.open_files),
        // No file may grow: a child writes only to its pipes.
        (Resource::Fsize, 0),
        // No core dump of a crashed child, wherever the host sends cores: it would hold the
        // tenants' payloads, and writing hundreds of MiB costs the other tenants' time.
        (Resource::Core, 0),
    ] {
        if let Err(e) = limit(resource, value) {
            detail.push(e);
        }
    }
    if let Err(e) = rustix::thread::set_no_new_privs(true) {
        detail.push(format!("no_new_privs: {e}"));
    }
    let landlock = match landlock_deny_all() {
        Ok(status) => status,
        Err(e) => {
            detail.push(format!("landlock: {e}"));
            "none"
        }
    };
    let seccomp = match seccomp_filter()
        .and_then(|p| seccompiler::apply_filter(&p).map_err(|e| e.to_string()))
    {
        Ok(()) => true,
        Err(e) => {
            detail.push(format!("seccomp: {e}"));
            false
        }
    };
    ChildReady {
        seccomp,
        landlock: landlock.to_string(),
        detail: detail.join("; "),
    }
}

/// Denies every filesystem access and TCP bind/connect the running kernel knows of.
fn landlock_deny_all() -> Result<&'static str, String> {
    use landlock::{ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetStatus};
    let abi = ABI::V5;
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.handle_access(AccessNet::from_all(abi)))
        .and_then(|r| r.create())
        .and_then(|r| r.restrict_self())
        .map_err(|e| e.to_string())?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => "full",
        RulesetStatus::PartiallyEnforced => "partial",
        RulesetStatus::NotEnforced => "none",
    })
}

/// Syscalls a child never needs, answered with EPERM: network, new processes and threads,
/// privilege and namespace changes, and opening or changing files for writing.
fn seccomp_filter() -> Result<BpfProgram, String> {
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("{e:?}"))?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let denied: &[i64] = &[
        libc_nr::SOCKET,
        libc_nr::SOCKETPAIR,
        libc_nr::CONNECT,
        libc_nr::BIND,
        libc_nr::LISTEN,
        libc_nr::ACCEPT,
        libc_nr::ACCEPT4,
        libc_nr::EXECVE,
        libc_nr::EXECVEAT,
        libc_nr::CLONE,
        libc_nr::CLONE3,
        libc_nr::PTRACE,
        libc_nr::MOUNT,
        libc_nr::UNSHARE,
        libc_nr::SETNS,
        libc_nr::UNLINKAT,
        libc_nr::RENAMEAT2,
        libc_nr::MKDIRAT,
        libc_nr::TRUNCATE,
        libc_nr::LINKAT,
        libc_nr::SYMLINKAT,
        libc_nr::FCHMODAT,
        libc_nr::FCHOWNAT,
        // openat2 takes its flags in a struct a filter cannot read: deny it whole.
        437,
    ];
    for nr in denied.iter().chain(libc_nr::LEGACY.iter()) {
        rules.insert(*nr, vec![]);
    }
    // openat(dirfd, path, flags, …): deny write access and creation.
    let write_open = |flags_arg: u8| -> Result<Vec<SeccompRule>, String> {
        let cond = |mask: u64, value: u64| {
            SeccompCondition::new(
                flags_arg,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(mask),
                value,
            )
            .map_err(|e| e.to_string())
        };
        Ok(vec![
            SeccompRule::new(vec![cond(0o3, 0o1)?]).map_err(|e| e.to_string())?,
            SeccompRule::new(vec![cond(0o3, 0o2)?]).map_err(|e| e.to_string())?,
            SeccompRule::new(vec![cond(0o100, 0o100)?]).map_err(|e| e.to_string())?,
        ])
    };
    rules.insert(libc_nr::OPENAT, write_open(2)?);
    if let Some(open) = libc_nr::OPEN {
        rules.insert(open, write_open(1)?);
    }
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(1), arch)
        .map_err(|e| e.to_string())?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
}

/// Syscall numbers for the architectures routers run on.
#[cfg(target_arch = "x86_64")]
mod libc_nr {
    pub const SOCKET: i64 = 41;
    pub const SOCKETPAIR: i64 = 53;
    pub const CONNECT: i64 = 42;
    pub const BIND: i64 = 49;
    pub const LISTEN: i64 = 50;
    pub const ACCEPT: i64 = 43;
    pub const ACCEPT4: i64 = 288;
    pub const EXECVE: i64 = 59;
    pub const EXECVEAT: i64 = 322;
    pub const CLONE: i64 = 56;
    pub const CLONE3: i64 = 435;
    pub const PTRACE: i64 = 101;
    pub const MOUNT: i64 = 165;
    pub const UNSHARE: i64 = 272;
    pub const SETNS: i64 = 308;
    pub const UNLINKAT: i64 = 263;
    pub const RENAMEAT2: i64 = 316;
    pub const MKDIRAT: i64 = 258;
    pub const TRUNCATE: i64 = 76;
    pub const LINKAT: i64 = 265;
    pub const SYMLINKAT: i64 = 266;
    pub const FCHMODAT: i64 = 268;
    pub const FCHOWNAT: i64 = 260;
    pub const OPENAT: i64 = 257;
    pub const OPEN: Option<i64> = Some(2);
    /// fork, vfork, creat, unlink, rename, renameat, mkdir, rmdir, link, symlink, chmod, chown.
    pub const LEGACY: &[i64] = &[57, 58, 85, 87, 82, 264, 83, 84, 86, 88, 90, 92];
}

#[cfg(target_arch = "aarch64")]
mod libc_nr {
    pub const SOCKET: i64 = 198;
    pub const SOCKETPAIR: i64 = 199;
    pub const CONNECT: i64 = 203;
    pub const BIND: i64 = 200;
    pub const LISTEN: i64 = 201;
    pub const ACCEPT: i64 = 202;
    pub const ACCEPT4: i64 = 242;
    pub const EXECVE: i64 = 221;
    pub const EXECVEAT: i64 = 281;
    pub const CLONE: i64 = 220;
    pub const CLONE3: i64 = 435;
    pub const PTRACE: i64 = 117;
    pub const MOUNT: i64 = 40;
    pub const UNSHARE: i64 = 97;
    pub const SETNS: i64 = 268;
    pub const UNLINKAT: i64 = 35;
    pub const RENAMEAT2: i64 = 276;
    pub const MKDIRAT: i64 = 34;
    pub const TRUNCATE: i64 = 45;
    pub const LINKAT: i64 = 37;
    pub const SYMLINKAT: i64 = 36;
    pub const FCHMODAT: i64 = 53;
    pub const FCHOWNAT: i64 = 54;
    pub const OPENAT: i64 = 56;
    pub const OPEN: Option<i64> = None;
    /// renameat.
    pub const LEGACY: &[i64] = &[38];
}
