//! The sandbox children themselves, seen from the parent: a [`ChildProcess`] (its pipes,
//! its progress board, the requests written to it), how one is started at its class's nice
//! value and confirmed ready, checked out and in of the idle list, and how spare live
//! children are kept started. Also the parent's half of the evaluate protocol: the requests
//! in flight on a child and how each frame it answers applies to the oldest of them
//! ([`on_frame`]), which both a lane and the watchdog's drain of a failed child read.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rustix::io::{FdFlags, fcntl_setfd};
use switchboard_proto::router::v1::{
    ChildReady, ChildRequest, ChildResponse, child_request, child_response,
};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::{Instant, timeout};

use super::call::Job;
use super::{Inner, SandboxError, lock};
use crate::sandbox::frame::{FrameReader, write_frame_async};
use crate::sandbox::progress::{PROGRESS_FD_ARG, ProgressBoard};
use crate::sandbox::schedule::Class;

/// Capacity asked for the pipe to a child's stdin (the default is 64 KiB; 1 MiB is what an
/// unprivileged process may ask for), so most of a chunk's request (1–2 MB) is in the pipe
/// before the child gets to it and it reads it in a few reads rather than ~27, each of which
/// had to wait for the parent to be scheduled and write more.
const STDIN_PIPE_BYTES: usize = 1 << 20;

pub(super) struct ChildProcess {
    pub(super) pid: u32,
    pub(super) child: Child,
    pub(super) stdin: ChildStdin,
    pub(super) stdout: FrameReader<ChildStdout>,
    pub(super) board: ProgressBoard,
    /// Evaluate requests written to this child. The child counts the ones it reads the same
    /// way and shows the ordinal of the one it runs on its board.
    pub(super) sent: u64,
    /// The class of work this child runs, and only that: it was started at that class's
    /// nice value, and a fault in one class's work never costs another class its child.
    pub(super) class: Class,
}

impl ChildProcess {
    pub(super) async fn send(&mut self, req: child_request::Request) -> std::io::Result<()> {
        write_frame_async(&mut self.stdin, &ChildRequest { request: Some(req) }).await
    }

    pub(super) async fn recv(
        &mut self,
        within: Duration,
    ) -> Result<child_response::Response, Failure> {
        match timeout(within, self.stdout.next::<ChildResponse>()).await {
            Err(_) => Err(Failure::Timeout),
            Ok(Err(_)) => Err(Failure::Died),
            Ok(Ok(ChildResponse { response: Some(r) })) => Ok(r),
            Ok(Ok(ChildResponse { response: None })) => Err(Failure::Died),
        }
    }

    pub(super) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Failure {
    Timeout,
    Died,
}

/// A request written to a child and not yet answered in full.
pub(super) struct InFlight {
    pub(super) job: Job,
    pub(super) ordinal: u64,
    /// The chunk's unit the request's first delivery starts at.
    pub(super) base: usize,
    pub(super) compiled: bool,
    /// When it became the oldest request in flight (its compile budget runs from there).
    pub(super) since: Instant,
}

/// Applies one frame to the oldest request in flight; returns that request's job once the
/// child says it is done.
pub(super) fn on_frame(
    inflight: &mut VecDeque<InFlight>,
    frame: ChildResponse,
) -> Result<Option<Job>, Failure> {
    let Some(front) = inflight.front_mut() else {
        return Err(Failure::Died);
    };
    match frame.response {
        Some(child_response::Response::Compiled(_)) if !front.compiled => {
            front.compiled = true;
            Ok(None)
        }
        Some(child_response::Response::Units(batch)) if front.compiled => {
            let n = front.job.configurations.max(1);
            for u in batch.units {
                let c = u.configuration_index as usize;
                let index = front.base + u.delivery_index as usize * n + c;
                if c >= n || index >= front.job.units.len() {
                    return Err(Failure::Died);
                }
                front.job.units[index] = u.decision;
                front.job.spent_ns[index] = u.unit_ns;
            }
            Ok(None)
        }
        Some(child_response::Response::Done(_)) if front.compiled => {
            let done = inflight.pop_front().map(|f| f.job);
            if let Some(next) = inflight.front_mut() {
                next.since = Instant::now();
            }
            Ok(done)
        }
        _ => Err(Failure::Died),
    }
}

impl Inner {
    pub(super) fn forget(&self, pid: u32) {
        lock(&self.live).retain(|(p, _)| *p != pid);
    }

    /// Starts a child for work of `class`, at that class's nice value.
    pub(super) async fn spawn(
        &self,
        class: Class,
    ) -> Result<(ChildProcess, ChildReady), SandboxError> {
        let board = ProgressBoard::create()
            .map_err(|e| SandboxError::Spawn(format!("progress board: {e}")))?;
        let board_fd = board.fd().as_raw_fd();
        let mut args = self.config.args.clone();
        args.extend(self.config.limits.to_args());
        args.push(format!("{PROGRESS_FD_ARG}{board_fd}"));
        let mut command = Command::new(&self.config.program);
        let own_session = class != Class::Live;
        // SAFETY: runs between fork and exec; it only clears FD_CLOEXEC on the board's
        // descriptor (fcntl is async-signal-safe), so this child alone inherits it, and for
        // interactive work and replays starts a session (setsid is async-signal-safe).
        unsafe {
            command.pre_exec(move || {
                let fd = BorrowedFd::borrow_raw(board_fd);
                fcntl_setfd(fd, FdFlags::empty()).map_err(std::io::Error::from)?;
                if own_session {
                    rustix::process::setsid().map_err(std::io::Error::from)?;
                }
                Ok(())
            });
        }
        let mut child = command
            .args(&args)
            // The router's environment (database URLs, secrets) never reaches a child.
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| SandboxError::Spawn(format!("{}: {e}", self.config.program.display())))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(SandboxError::Spawn("child pipes missing".into()));
        };
        // Best effort: a smaller pipe only costs more reads.
        let _ = rustix::pipe::fcntl_setpipe_size(&stdin, STDIN_PIPE_BYTES);
        let pid = child.id().unwrap_or_default();
        let mut proc = ChildProcess {
            pid,
            child,
            stdin,
            stdout: FrameReader::new(stdout, 1 << 16),
            board,
            sent: 0,
            class,
        };
        let nice = self.config.nice(class);
        if nice != 0
            && let Err(e) = rustix::process::setpriority_process(
                rustix::process::Pid::from_raw(pid as i32),
                nice,
            )
        {
            // Best effort: the work then only yields at chunk boundaries.
            tracing::debug!(pid, error = %e, class = class.label(), "could not lower a child's priority");
        }
        if own_session && nice != 0 {
            lower_autogroup(pid, nice);
        }
        self.stats.spawned.fetch_add(1, Ordering::Relaxed);
        lock(&self.live).push((pid, class));
        if class != Class::Live
            && let Some(paused) = lock(&self.paused).as_mut()
        {
            // Started while a unit is confirmed alone: it waits too.
            signal(&[pid], rustix::process::Signal::STOP);
            paused.push(pid);
        }
        match proc.recv(self.config.compile_budget).await {
            Ok(child_response::Response::Ready(ready)) => Ok((proc, ready)),
            _ => {
                self.forget(pid);
                Err(SandboxError::Spawn("the child did not report ready".into()))
            }
        }
    }

    /// An idle child for `class` that is still alive, or a new one; then spares are topped
    /// up in the background.
    pub(super) async fn checkout(
        self: &Arc<Self>,
        class: Class,
    ) -> Result<ChildProcess, SandboxError> {
        let found = loop {
            let next = {
                let mut idle = lock(&self.idle);
                idle.iter()
                    .rposition(|c| c.class == class)
                    .map(|i| idle.swap_remove(i))
            };
            match next {
                Some(mut c) => {
                    if c.alive() {
                        break Some(c);
                    }
                    self.forget(c.pid);
                }
                None => break None,
            }
        };
        let child = match found {
            Some(c) => c,
            None => {
                self.stats.spawned_on_demand.fetch_add(1, Ordering::Relaxed);
                self.spawn(class).await.map(|(c, _)| c)?
            }
        };
        self.refill();
        Ok(child)
    }

    /// Starts spare children in the background until `spares` live ones are idle or on
    /// their way, so live work never waits for a child to start (other classes start theirs
    /// when they need one: a fault in their work never takes live work's spare).
    pub(super) fn refill(self: &Arc<Self>) {
        let runtime = &self.runtime;
        let idle = lock(&self.idle)
            .iter()
            .filter(|c| c.class == Class::Live)
            .count();
        let wanted = self.config.spares.saturating_sub(idle);
        let spawning = self.spawning.load(Ordering::SeqCst);
        for _ in spawning..wanted {
            self.spawning.fetch_add(1, Ordering::SeqCst);
            let pool = self.clone();
            runtime.spawn(async move {
                let spawned = pool.spawn(Class::Live).await;
                pool.spawning.fetch_sub(1, Ordering::SeqCst);
                match spawned {
                    Ok((child, _)) => pool.checkin(child),
                    Err(e) => tracing::warn!(error = %e, "could not start a spare sandbox child"),
                }
            });
        }
    }

    /// Stops every child of interactive work and replays but `except` (SIGSTOP), and any
    /// such child started meanwhile, until the guard is dropped: a unit re-run to confirm a
    /// budget fault runs alone. Live children are never paused. Budgets are CPU time, so a
    /// paused child's unit is not blamed for the pause.
    pub(super) fn pause_others(self: &Arc<Self>, except: u32) -> Paused {
        let pids: Vec<u32> = lock(&self.live)
            .iter()
            .filter(|(pid, class)| *pid != except && *class != Class::Live)
            .map(|(pid, _)| *pid)
            .collect();
        signal(&pids, rustix::process::Signal::STOP);
        *lock(&self.paused) = Some(pids);
        Paused { pool: self.clone() }
    }

    pub(super) fn checkin(&self, mut child: ChildProcess) {
        // A child that exited on its own is not worth keeping.
        if child.alive() {
            lock(&self.idle).push(child);
        } else {
            self.forget(child.pid);
        }
    }
}

/// Children paused by [`Inner::pause_others`]; they go on when this is dropped.
pub(super) struct Paused {
    pool: Arc<Inner>,
}

impl Drop for Paused {
    fn drop(&mut self) {
        if let Some(pids) = lock(&self.pool.paused).take() {
            signal(&pids, rustix::process::Signal::CONT);
        }
    }
}

fn signal(pids: &[u32], signal: rustix::process::Signal) {
    for pid in pids {
        if let Some(pid) = rustix::process::Pid::from_raw(*pid as i32) {
            // Best effort: a child that has gone meanwhile needs nothing.
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// Where the kernel schedules by session first (`kernel.sched_autogroup_enabled`, on by
/// default in many distributions, for tasks outside a CPU cgroup), a task's nice value counts
/// only against its own session's other tasks: the session as a whole competes at full
/// weight with every other session. A replay child at nice 10 in the router's session then
/// still delays PostgreSQL, which runs in a session of its own — measured (issue 43): a pipe
/// round trip to another session beside three nice-10 busy loops took 6–8 ms at p99 with the
/// loops in the caller's session, 0.07–0.4 ms with each in its own session at autogroup nice
/// 10. So an interactive or replay child starts its own session (`spawn`), and its session's
/// group gets the class's nice here. Best effort: the file is absent without autogroup
/// support, and a process without CAP_SYS_ADMIN may set it at most ten times a second
/// (EAGAIN), so it is retried a few times off the caller's path.
fn lower_autogroup(pid: u32, nice: i32) {
    let path = format!("/proc/{pid}/autogroup");
    let set = move || std::fs::write(&path, nice.to_string());
    match set() {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::AGAIN.raw_os_error()) => {
            tokio::spawn(async move {
                for _ in 0..5 {
                    tokio::time::sleep(std::time::Duration::from_millis(110)).await;
                    match set() {
                        Err(e)
                            if e.raw_os_error()
                                == Some(rustix::io::Errno::AGAIN.raw_os_error()) => {}
                        _ => return,
                    }
                }
            });
        }
        Err(e) => tracing::debug!(pid, error = %e, "could not lower a child's scheduling group"),
    }
}
