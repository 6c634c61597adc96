//! A confined sandbox child can compute but cannot reach the network, write or read
//! files, start processes or threads, or leave a core dump. The test re-runs this test binary as a probe
//! process that confines itself exactly as a child does, then tries each forbidden thing.

use std::process::Command;

const PROBE_ENV: &str = "SWITCHBOARD_CONFINEMENT_PROBE_PORT";

/// Runs only inside the probe process (the env var is set by the test below).
#[test]
fn confinement_probe() {
    let Ok(port) = std::env::var(PROBE_ENV) else {
        return;
    };
    let core = || rustix::process::getrlimit(rustix::process::Resource::Core);
    println!("core_before={:?}", core().current);
    let ready = switchboard_router::sandbox::confine::apply(&Default::default());
    println!(
        "ready seccomp={} landlock={} detail={}",
        ready.seccomp, ready.landlock, ready.detail
    );
    let outcome =
        |name: &str, ok: bool| println!("{name}={}", if ok { "allowed" } else { "denied" });
    outcome(
        "connect",
        std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap_or(1))).is_ok(),
    );
    let target = std::env::temp_dir().join(format!("switchboard-probe-{}", std::process::id()));
    outcome("write", std::fs::File::create(&target).is_ok());
    outcome("read", std::fs::read("/etc/passwd").is_ok());
    outcome("exec", Command::new("/bin/true").status().is_ok());
    outcome("thread", std::thread::Builder::new().spawn(|| ()).is_ok());
    let after = core();
    outcome(
        "core_dump",
        after.current != Some(0) || after.maximum != Some(0),
    );
    let computed: u64 = (1..=1000u64).sum();
    outcome("compute", computed == 500_500);
}

#[test]
fn a_confined_child_cannot_reach_network_files_processes_or_threads() {
    if std::env::var(PROBE_ENV).is_ok() {
        return;
    }
    // Something to connect to, so a refusal is the sandbox's doing.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let port = listener.local_addr().expect("addr").port();
    let exe = std::env::current_exe().expect("test binary");
    let mut probe = Command::new(exe);
    // Core dumps allowed before confinement (the host's limit may already be 0), so only the
    // child's own confinement can have turned them off.
    // SAFETY: between fork and exec, one setrlimit system call and nothing else.
    unsafe {
        use std::os::unix::process::CommandExt;
        probe.pre_exec(|| {
            let _ = rustix::process::setrlimit(
                rustix::process::Resource::Core,
                rustix::process::Rlimit {
                    current: Some(1 << 20),
                    maximum: Some(1 << 20),
                },
            );
            Ok(())
        });
    }
    let out = probe
        .args([
            "--exact",
            "confinement_probe",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PROBE_ENV, port.to_string())
        .output()
        .expect("probe runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("ready seccomp=true landlock=full"),
        "{stdout}"
    );
    for denied in ["connect", "write", "read", "exec", "thread", "core_dump"] {
        assert!(
            stdout.contains(&format!("{denied}=denied")),
            "{denied} not denied:\n{stdout}"
        );
    }
    assert!(stdout.contains("compute=allowed"), "{stdout}");
    assert!(
        stdout.contains("core_before=Some(1048576)"),
        "core dumps were allowed before confinement: {stdout}"
    );
}
