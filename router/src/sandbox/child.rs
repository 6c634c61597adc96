//! The sandbox child: a separate process of the router's own binary that parses, validates,
//! compiles and evaluates tenant expressions. It confines itself before reading any input,
//! answers requests one at a time, in order, on its pipes (the parent may write the next
//! one before this one is answered), marks each unit on its progress board as it
//! runs (so the parent can hold every envelope to its budget) and sends answers in batches.

use std::collections::HashMap;
use std::io::{self, BufReader, BufWriter, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message;
use sha2::{Digest, Sha256};
use switchboard_proto::router::v1::{
    ChildCompiled, ChildDone, ChildEvaluate, ChildRequest, ChildResponse, ChildUnit, ChildUnits,
    Configuration, child_request, child_response,
};

use super::confine::{self, ChildLimits};
use super::frame::{read_frame, write_frame};
use super::memory;
use super::progress::{PROGRESS_FD_ARG, ProgressBoard};
use crate::engine::compile::CompiledConfiguration;
use crate::engine::decision::{self, fault};
use crate::engine::envelope::build_envelope_reading;
use crate::engine::projection::Projection;
use crate::engine::validate::{read_configuration, validate_configuration};

/// The child's argument that turns confinement off, for kernels that lack it; the parent
/// refuses such a child unless the operator allowed unconfined sandboxes.
pub const NO_CONFINEMENT_ARG: &str = "--no-confinement";

/// Compiled configurations kept per child, by digest of their JSON text.
const CACHE_ENTRIES: usize = 32;

/// Answers are sent at least this often while a batch runs. The parent does not need them
/// sooner (the progress board tells it what runs); they bound the work redone after a kill.
const FLUSH_EVERY: Duration = Duration::from_millis(10);

/// The child's own arguments.
#[derive(Debug, Default)]
pub struct ChildArgs {
    pub limits: ChildLimits,
    pub confine: bool,
    /// The inherited descriptor of the progress board, when the parent gave one.
    pub progress_fd: Option<i32>,
}

/// Parses the child's own arguments (`--key=value`); unknown ones are ignored.
pub fn parse_args(args: &[String]) -> ChildArgs {
    let mut limits = ChildLimits::default();
    let mut confine = true;
    let mut progress_fd = None;
    for a in args {
        let num = |prefix: &str| a.strip_prefix(prefix).and_then(|v| v.parse::<u64>().ok());
        if let Some(v) = num("--address-space-mb=") {
            limits.address_space_mb = v;
        } else if let Some(v) = num("--cpu-seconds=") {
            limits.cpu_seconds = v;
        } else if let Some(v) = num("--open-files=") {
            limits.open_files = v;
        } else if let Some(v) = num("--unit-memory-mb=") {
            limits.unit_memory_mb = v;
        } else if let Some(v) = a.strip_prefix(PROGRESS_FD_ARG) {
            progress_fd = v.parse::<i32>().ok().filter(|fd| *fd > 2);
        } else if a == NO_CONFINEMENT_ARG {
            confine = false;
        }
    }
    ChildArgs {
        limits,
        confine,
        progress_fd,
    }
}

/// Stack of the thread that parses and evaluates. Reserved whole when the thread starts,
/// so deep (but legal) expressions never need the stack to grow under RLIMIT_AS.
const WORKER_STACK_BYTES: usize = 64 * 1024 * 1024;

/// Runs the child until its stdin closes. Returns the process exit code.
pub fn main(args: &[String]) -> i32 {
    let args = args.to_vec();
    // The worker is created before any confinement (which forbids new threads) and applies
    // it to itself and the idle main thread.
    let worker = std::thread::Builder::new()
        .name("sandbox".into())
        .stack_size(WORKER_STACK_BYTES)
        .spawn(move || run(&args));
    match worker.map(|w| w.join()) {
        Ok(Ok(code)) => code,
        _ => 3,
    }
}

fn run(args: &[String]) -> i32 {
    let ChildArgs {
        limits,
        confine,
        progress_fd,
    } = parse_args(args);
    // Mapped before confinement; without a board (a child started by hand) every answer
    // is sent as soon as it is known instead.
    let board = progress_fd.and_then(|fd| {
        // SAFETY: the parent passes this descriptor open (and only to this child), and
        // nothing else in this process owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        ProgressBoard::open(fd).ok()
    });
    let ready = if confine {
        confine::apply(&limits)
    } else {
        switchboard_proto::router::v1::ChildReady {
            seccomp: false,
            landlock: "none".into(),
            detail: "confinement turned off".into(),
        }
    };
    let unit_memory =
        usize::try_from(limits.unit_memory_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
    match serve(ready, board.as_ref(), unit_memory) {
        Ok(()) => 0,
        Err(_) => 2,
    }
}

fn respond(w: &mut impl Write, r: child_response::Response) -> io::Result<()> {
    write_frame(w, &ChildResponse { response: Some(r) })?;
    w.flush()
}

fn serve(
    ready: switchboard_proto::router::v1::ChildReady,
    board: Option<&ProgressBoard>,
    unit_memory: usize,
) -> io::Result<()> {
    let mut reader = BufReader::with_capacity(1 << 16, io::stdin().lock());
    let mut writer = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    respond(&mut writer, child_response::Response::Ready(ready))?;
    let mut cache: HashMap<String, Arc<Result<CompiledConfiguration, String>>> = HashMap::new();
    // Evaluate requests read so far: the parent counts the ones it sends the same way, and
    // may have written the next one before this one ends, so the board names the request
    // its unit belongs to.
    let mut requests: u64 = 0;
    while let Some(req) = read_frame::<ChildRequest>(&mut reader)? {
        match req.request {
            Some(child_request::Request::Validate(v)) => {
                let ctx = v.context.unwrap_or_default();
                let configuration = v.configuration.unwrap_or_default();
                respond(
                    &mut writer,
                    child_response::Response::Validated(validate_configuration(
                        &configuration,
                        &ctx,
                    )),
                )?;
            }
            Some(child_request::Request::Evaluate(e)) => {
                requests += 1;
                if let Some(b) = board {
                    b.request(requests);
                }
                evaluate(e, &mut cache, board, unit_memory, &mut writer)?
            }
            None => respond(&mut writer, child_response::Response::Done(ChildDone {}))?,
        }
    }
    Ok(())
}

/// Compiles (or finds) a configuration. Compiling runs the pre-scan and the dialect check
/// on every expression, so nothing unvalidated reaches jaq's compiler.
fn compiled(
    configuration: &Configuration,
    cache: &mut HashMap<String, Arc<Result<CompiledConfiguration, String>>>,
) -> Arc<Result<CompiledConfiguration, String>> {
    let key = hex::encode(Sha256::digest(configuration.encode_to_vec()));
    if let Some(c) = cache.get(&key) {
        return c.clone();
    }
    let result = read_configuration(configuration)
        .map_err(|p| p.message)
        .and_then(|config| CompiledConfiguration::compile(&config));
    if cache.len() >= CACHE_ENTRIES {
        cache.clear();
    }
    let entry = Arc::new(result);
    cache.insert(key, entry.clone());
    entry
}

fn evaluate(
    e: ChildEvaluate,
    cache: &mut HashMap<String, Arc<Result<CompiledConfiguration, String>>>,
    board: Option<&ProgressBoard>,
    unit_memory: usize,
    w: &mut impl Write,
) -> io::Result<()> {
    let ctx = e.context.unwrap_or_default();
    let configs: Vec<_> = e
        .configurations
        .iter()
        .map(|c| compiled(c, cache))
        .collect();
    let errors = configs
        .iter()
        .map(|c| c.as_ref().as_ref().err().cloned().unwrap_or_default())
        .collect();
    respond(
        w,
        child_response::Response::Compiled(ChildCompiled { errors }),
    )?;
    let n = configs.len();
    // What any of the configurations reads: each delivery's envelope is built that far.
    let reads = Projection::union(
        configs
            .iter()
            .filter_map(|c| c.as_ref().as_ref().ok())
            .map(|c| c.reads()),
    );
    let skip = e.skip_units as usize;
    let omit: std::collections::HashSet<usize> = e.omit_units.iter().map(|u| *u as usize).collect();
    let mut pending = Vec::new();
    let mut flushed = Instant::now();
    for (i, delivery) in e.deliveries.iter().enumerate() {
        if (i + 1) * n <= skip {
            continue;
        }
        // Parsed once, seen by every configuration, before any unit's budget starts: the
        // budget holds the tenant's rules, and the parse costs what the body's size (bounded
        // by the body limit) makes it, linear and depth-checked, whatever the rules are.
        let mut envelope = None;
        for (j, config) in configs.iter().enumerate() {
            let unit = i * n + j;
            if unit < skip || omit.contains(&unit) {
                continue;
            }
            let envelope =
                envelope.get_or_insert_with(|| build_envelope_reading(delivery, &ctx, &reads));
            if let Some(b) = board {
                b.begin(unit as u64);
            }
            memory::start_unit(unit_memory);
            let started = crate::sandbox::progress::thread_cpu_ns();
            let decision = match config.as_ref() {
                Ok(c) => c.evaluate_marked(&ctx, envelope, |rule| {
                    if let Some(b) = board {
                        b.rule(rule);
                    }
                }),
                Err(_) => decision::fault(
                    "",
                    fault::INVALID_CONFIGURATION,
                    "the configuration does not validate",
                ),
            };
            let unit_ns = crate::sandbox::progress::thread_cpu_ns().saturating_sub(started);
            memory::end_unit();
            if let Some(b) = board {
                b.end();
            }
            pending.push(ChildUnit {
                delivery_index: i as u32,
                configuration_index: j as u32,
                decision: Some(decision),
                unit_ns,
            });
            if board.is_none() || flushed.elapsed() >= FLUSH_EVERY {
                let units = std::mem::take(&mut pending);
                respond(w, child_response::Response::Units(ChildUnits { units }))?;
                flushed = Instant::now();
            }
        }
    }
    if !pending.is_empty() {
        // Written with Done in one flush: one wakeup for the parent.
        write_frame(
            w,
            &ChildResponse {
                response: Some(child_response::Response::Units(ChildUnits {
                    units: pending,
                })),
            },
        )?;
    }
    respond(w, child_response::Response::Done(ChildDone {}))
}
