//! `deploy/` against the real binary. Every kustomization (`deploy/base` and each
//! `deploy/overlays/<name>`) is rendered with the deploy virtualenv's kubectl
//! (`scripts/deploy-tools`; `scripts/check-deploy` validates the same renders against the
//! Kubernetes schemas), and then:
//! - every container's command line and environment (secrets replaced by plausible dummies)
//!   must be accepted by `switchboard … --print-config`;
//! - every probe, container port and Service targetPort must be a port the role really
//!   listens on, as `--print-config` reports it, on an address other than loopback;
//! - the pieces must be wired together: termination grace above the 30 s replay budget, the
//!   HPA on the router Deployment, PDBs on their pods, a headless router Service named by
//!   control's `--routers`, the control Service named by the gateway's `--control`.
//!
//! The example config file is checked too: every role accepts it, and every key it sets is
//! reported as coming from the file.
//!
//! The rendering test skips, saying why, only when the deploy virtualenv is absent.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::binary;

/// The replay budget the termination grace must exceed, in seconds.
const REPLAY_BUDGET_SECONDS: u64 = 30;

/// What a secret's value is replaced with when a container's environment is checked.
const DUMMY_DATABASE_URL: &str = "postgres://u:p@db/x";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where scripts/deploy-tools puts the virtualenv (or SWITCHBOARD_DEPLOY_VENV).
fn venv() -> PathBuf {
    std::env::var_os("SWITCHBOARD_DEPLOY_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/deploy-venv"))
}

/// Renders a kustomization with the virtualenv's kubectl and returns its resources as JSON.
fn render(dir: &Path) -> Vec<Value> {
    const TO_JSON: &str = r#"
import json, subprocess, sys, yaml
out = subprocess.run([sys.argv[1], "kustomize", sys.argv[2]], check=True, stdout=subprocess.PIPE).stdout
json.dump([doc for doc in yaml.safe_load_all(out) if doc is not None], sys.stdout)
"#;
    let output = Command::new(venv().join("bin/python"))
        .arg("-c")
        .arg(TO_JSON)
        .arg(venv().join("bin/kubectl"))
        .arg(dir)
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "rendering {}: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("rendered resources as JSON")
}

/// `deploy/base` and every `deploy/overlays/<name>` with a kustomization, by name.
fn kustomizations() -> Vec<(String, PathBuf)> {
    let mut out = vec![("base".to_string(), root().join("deploy/base"))];
    let overlays = root().join("deploy/overlays");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&overlays)
        .unwrap_or_else(|e| panic!("reading {}: {e}", overlays.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("kustomization.yaml").is_file())
        .collect();
    dirs.sort();
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        out.push((name, dir));
    }
    assert!(out.len() >= 2, "expected at least the base and one overlay");
    out
}

/// `switchboard <args> --print-config` with exactly `env`: its exit status, stdout and stderr.
fn print_config(args: &[String], env: &[(String, String)]) -> (bool, String, String) {
    let output = Command::new(binary())
        .args(args)
        .arg("--print-config")
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("switchboard runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A role's table of a `--print-config` output.
fn role_table(role: &str, printed: &str) -> toml::Table {
    let doc: toml::Table = toml::from_str(printed)
        .unwrap_or_else(|e| panic!("--print-config is not TOML ({e}):\n{printed}"));
    doc.get(role)
        .and_then(|t| t.as_table())
        .cloned()
        .unwrap_or_else(|| panic!("--print-config has no [{role}] table:\n{printed}"))
}

/// What kind of listener a probe or Service reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Http,
    Grpc,
}

/// The listeners each role has, as `--print-config` keys.
fn listeners(role: &str) -> &'static [(Proto, &'static str)] {
    match role {
        "control" => &[
            (Proto::Http, "http_listen"),
            (Proto::Grpc, "grpc_listen"),
            (Proto::Http, "metrics_listen"),
        ],
        "router" => &[(Proto::Grpc, "listen"), (Proto::Http, "metrics_listen")],
        "gateway" => &[(Proto::Http, "listen"), (Proto::Http, "metrics_listen")],
        other => panic!("role `{other}` is not expected in a deployment"),
    }
}

/// One container of one Deployment, as the binary sees it.
#[derive(Debug)]
struct Container {
    deployment: String,
    name: String,
    role: String,
    config: toml::Table,
    /// Where the role listens, by kind.
    listens: Vec<(Proto, SocketAddr)>,
    /// containerPort by port name.
    named_ports: BTreeMap<String, u16>,
    /// Every declared containerPort.
    ports: Vec<u16>,
    /// Secrets referenced from the environment: (Secret name, key).
    secret_refs: Pairs,
}

impl Container {
    fn config_str(&self, key: &str) -> &str {
        self.config
            .get(key)
            .and_then(|v| v.as_str())
            .unwrap_or_else(|| panic!("{}: no `{key}` in --print-config", self.name))
    }

    /// A port (number or name) as a number; `None` for a name the container does not declare.
    fn try_resolve(&self, port: &Value) -> Option<u16> {
        match port {
            Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
            Value::String(name) => self.named_ports.get(name).copied(),
            _ => None,
        }
    }

    /// A probe's or Service's port (number or name) as a number.
    fn resolve(&self, port: &Value, what: &str) -> u16 {
        self.try_resolve(port).unwrap_or_else(|| {
            panic!(
                "{}/{}: {what} port {port} is not a number or a port the container declares",
                self.deployment, self.name
            )
        })
    }

    fn listen_port(&self, proto: Proto) -> Option<u16> {
        self.listens
            .iter()
            .find(|(p, _)| *p == proto)
            .map(|(_, a)| a.port())
    }

    fn listens_on(&self, port: u16) -> bool {
        self.listens.iter().any(|(_, a)| a.port() == port)
    }
}

/// A Deployment: its name, pod labels, pod spec and containers.
#[derive(Debug)]
struct Workload {
    name: String,
    labels: BTreeMap<String, String>,
    spec: Value,
    pod: Value,
    containers: Vec<Container>,
}

fn labels(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(|v| v.as_str())
}

fn namespace(v: &Value) -> Option<String> {
    str_at(v, "/metadata/namespace").map(str::to_string)
}

/// The container's argv after the binary: the image's ENTRYPOINT is `switchboard`.
fn argv(container: &Value, what: &str) -> Vec<String> {
    let list = |key: &str| -> Vec<String> {
        container
            .get(key)
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .map(|s| s.as_str().expect("string argument").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let command = list("command");
    let mut out = Vec::new();
    if let Some((program, rest)) = command.split_first() {
        assert!(
            Path::new(program)
                .file_name()
                .is_some_and(|f| f == "switchboard"),
            "{what}: command runs {program}, not switchboard"
        );
        out.extend(rest.iter().cloned());
    }
    out.extend(list("args"));
    out
}

/// Name/value pairs: environment variables, or a Secret's name and key.
type Pairs = Vec<(String, String)>;

/// The container's environment with every secret replaced by a dummy, and the secrets named.
fn environment(container: &Value, what: &str) -> (Pairs, Pairs) {
    assert!(
        container.get("envFrom").is_none(),
        "{what}: envFrom is not checked by this test; list the variables under env"
    );
    let mut env = Vec::new();
    let mut secrets = Vec::new();
    for var in container
        .get("env")
        .and_then(|e| e.as_array())
        .into_iter()
        .flatten()
    {
        let name = str_at(var, "/name").expect("env name").to_string();
        if let Some(value) = var.get("value") {
            env.push((name, value.as_str().unwrap_or_default().to_string()));
        } else if let Some(secret) = var.pointer("/valueFrom/secretKeyRef") {
            secrets.push((
                str_at(secret, "/name").expect("secret name").to_string(),
                str_at(secret, "/key").expect("secret key").to_string(),
            ));
            let dummy = if name.contains("DATABASE_URL") {
                DUMMY_DATABASE_URL
            } else {
                "dummy-secret-value"
            };
            env.push((name, dummy.to_string()));
        } else {
            panic!("{what}: env {name}: only literal values and secretKeyRef are checked");
        }
    }
    (env, secrets)
}

/// Runs one container's command line through the binary and reads where it listens.
fn container(deployment: &str, c: &Value) -> Container {
    let name = str_at(c, "/name").expect("container name").to_string();
    let what = format!("{deployment}/{name}");
    let args = argv(c, &what);
    let role = args
        .iter()
        .find(|a| !a.starts_with('-'))
        .unwrap_or_else(|| panic!("{what}: no role in {args:?}"))
        .clone();
    let (env, secret_refs) = environment(c, &what);
    let (ok, stdout, stderr) = print_config(&args, &env);
    assert!(
        ok,
        "{what}: `switchboard {} --print-config` with env {env:?} failed:\n{stderr}{stdout}",
        args.join(" ")
    );
    let config = role_table(&role, &stdout);
    let listens: Vec<(Proto, SocketAddr)> = listeners(&role)
        .iter()
        .map(|(proto, key)| {
            let text = config
                .get(*key)
                .and_then(|v| v.as_str())
                .unwrap_or_else(|| panic!("{what}: no `{key}` in --print-config:\n{stdout}"));
            let addr: SocketAddr = text
                .parse()
                .unwrap_or_else(|e| panic!("{what}: {key} = {text}: {e}"));
            // Probes and Services come from outside the pod's loopback.
            assert!(
                !addr.ip().is_loopback(),
                "{what}: {key} = {addr} is loopback: neither probes nor Services reach it"
            );
            (*proto, addr)
        })
        .collect();
    let mut named_ports = BTreeMap::new();
    let mut ports = Vec::new();
    for port in c
        .get("ports")
        .and_then(|p| p.as_array())
        .into_iter()
        .flatten()
    {
        let number = port
            .get("containerPort")
            .and_then(|n| n.as_u64())
            .and_then(|n| u16::try_from(n).ok())
            .expect("containerPort");
        ports.push(number);
        if let Some(port_name) = str_at(port, "/name") {
            named_ports.insert(port_name.to_string(), number);
        }
    }
    Container {
        deployment: deployment.to_string(),
        name,
        role,
        config,
        listens,
        named_ports,
        ports,
        secret_refs,
    }
}

/// A security setting, the container's own or else the pod's.
fn security<'a>(pod: &'a Value, c: &'a Value, key: &str) -> Option<&'a Value> {
    c.pointer(&format!("/securityContext/{key}"))
        .or_else(|| pod.pointer(&format!("/securityContext/{key}")))
}

/// Checks the pod spec's probes, ports, security and resources against its containers.
fn check_pod(w: &Workload) {
    assert_eq!(
        w.pod.get("enableServiceLinks"),
        Some(&Value::Bool(false)),
        "{}: Services named switchboard-* would inject SWITCHBOARD_* variables: set enableServiceLinks: false",
        w.name
    );
    let specs = w.pod["containers"].as_array().expect("containers");
    for (spec, c) in specs.iter().zip(&w.containers) {
        let what = format!("{}/{}", w.name, c.name);
        for port in &c.ports {
            assert!(
                c.listens_on(*port),
                "{what}: containerPort {port} is not a port {} listens on ({:?})",
                c.role,
                c.listens
            );
        }
        for kind in ["startupProbe", "readinessProbe", "livenessProbe"] {
            let Some(probe) = spec.get(kind) else {
                continue;
            };
            let (proto, port) = if let Some(grpc) = probe.get("grpc") {
                (Some(Proto::Grpc), c.resolve(&grpc["port"], kind))
            } else if let Some(http) = probe.get("httpGet") {
                (Some(Proto::Http), c.resolve(&http["port"], kind))
            } else if let Some(tcp) = probe.get("tcpSocket") {
                (None, c.resolve(&tcp["port"], kind))
            } else {
                panic!("{what}: {kind} is neither gRPC, HTTP nor TCP; this test cannot check it");
            };
            match proto {
                Some(proto) => assert_eq!(
                    Some(port),
                    c.listen_port(proto),
                    "{what}: {kind} ({proto:?}) probes port {port}, but {} serves {proto:?} on {:?}",
                    c.role,
                    c.listens
                ),
                None => assert!(c.listens_on(port), "{what}: {kind} probes port {port}"),
            }
        }
        assert!(
            spec.get("readinessProbe").is_some() && spec.get("livenessProbe").is_some(),
            "{what}: readiness and liveness probes expected"
        );
        let expect = |key: &str, want: Value| {
            assert_eq!(
                security(&w.pod, spec, key),
                Some(&want),
                "{what}: securityContext {key}"
            );
        };
        expect("runAsNonRoot", Value::Bool(true));
        expect("readOnlyRootFilesystem", Value::Bool(true));
        expect("allowPrivilegeEscalation", Value::Bool(false));
        expect(
            "seccompProfile",
            serde_json::json!({"type": "RuntimeDefault"}),
        );
        expect("capabilities", serde_json::json!({"drop": ["ALL"]}));
        for bound in ["requests", "limits"] {
            for resource in ["cpu", "memory"] {
                assert!(
                    spec.pointer(&format!("/resources/{bound}/{resource}"))
                        .is_some(),
                    "{what}: resources.{bound}.{resource} expected"
                );
            }
        }
    }
}

fn grace_seconds(w: &Workload) -> u64 {
    w.pod
        .get("terminationGracePeriodSeconds")
        .and_then(|g| g.as_u64())
        .unwrap_or(30)
}

/// The one Deployment running `role`.
fn workload<'a>(workloads: &'a [Workload], role: &str, target: &str) -> &'a Workload {
    let found: Vec<&Workload> = workloads
        .iter()
        .filter(|w| w.containers.iter().any(|c| c.role == role))
        .collect();
    assert_eq!(found.len(), 1, "{target}: one Deployment runs `{role}`");
    found[0]
}

fn container_of<'a>(w: &'a Workload, role: &str) -> &'a Container {
    w.containers.iter().find(|c| c.role == role).unwrap()
}

/// `host:port` → (host, port); a scheme is dropped.
fn host_port(text: &str) -> (String, u16) {
    let rest = text
        .split_once("://")
        .map(|(_, r)| r.trim_start_matches('/'))
        .unwrap_or(text);
    let (host, port) = rest
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("{text}: expected host:port"));
    (host.to_string(), port.parse().expect("port"))
}

/// Whether `host` is the Service's name as seen from its namespace: `name`, `name.ns`,
/// `name.ns.svc` or `name.ns.svc.cluster.local`.
fn names_service(host: &str, service: &Value) -> bool {
    let name = str_at(service, "/metadata/name").unwrap_or_default();
    let mut labels = host.split('.');
    if labels.next() != Some(name) {
        return false;
    }
    match labels.next() {
        None => true,
        Some(ns) => namespace(service).is_none_or(|n| n == ns),
    }
}

/// Checks one rendered kustomization.
fn check(target: &str, resources: &[Value]) {
    let of_kind = |kind: &str| -> Vec<&Value> {
        resources
            .iter()
            .filter(|r| str_at(r, "/kind") == Some(kind))
            .collect()
    };

    let workloads: Vec<Workload> = of_kind("Deployment")
        .into_iter()
        .map(|d| {
            let name = str_at(d, "/metadata/name").unwrap().to_string();
            let pod = d.pointer("/spec/template/spec").expect("pod spec").clone();
            let containers = pod["containers"]
                .as_array()
                .expect("containers")
                .iter()
                .map(|c| container(&name, c))
                .collect();
            Workload {
                labels: labels(&d["spec"]["template"]["metadata"]["labels"]),
                spec: d["spec"].clone(),
                pod,
                containers,
                name,
            }
        })
        .collect();
    assert!(!workloads.is_empty(), "{target}: no Deployment rendered");
    for w in &workloads {
        check_pod(w);
        assert!(
            selects(&labels(&w.spec["selector"]["matchLabels"]), &w.labels),
            "{target}: {} selects its own pods",
            w.name
        );
    }

    // Short Service names in flags resolve only within one namespace.
    let namespaces: std::collections::BTreeSet<Option<String>> = resources
        .iter()
        .filter(|r| str_at(r, "/kind") != Some("Namespace"))
        .map(namespace)
        .collect();
    assert_eq!(namespaces.len(), 1, "{target}: one namespace for all");

    // Images: the base leaves the tag to overlays; an overlay pins one.
    for w in &workloads {
        for c in w.pod["containers"].as_array().unwrap() {
            let image = str_at(c, "/image").unwrap();
            if target == "base" {
                assert_eq!(image, "switchboard", "{target}: {}", w.name);
            } else {
                let tag = image.rsplit('/').next().unwrap().split_once(':');
                assert!(
                    tag.is_some_and(|(_, t)| !t.is_empty() && t != "latest"),
                    "{target}: {}: image {image} needs a tag",
                    w.name
                );
            }
        }
    }

    // Every Service reaches listening ports of the pods it selects.
    let services = of_kind("Service");
    for s in &services {
        let name = str_at(s, "/metadata/name").unwrap();
        let selector = labels(&s["spec"]["selector"]);
        let selected: Vec<&Workload> = workloads
            .iter()
            .filter(|w| selects(&selector, &w.labels))
            .collect();
        assert!(
            !selected.is_empty(),
            "{target}: Service {name} selects no pods"
        );
        for port in s["spec"]["ports"].as_array().expect("ports") {
            let target_port = port.get("targetPort").unwrap_or(&port["port"]);
            for w in &selected {
                assert!(
                    w.containers
                        .iter()
                        .any(|c| c.try_resolve(target_port).is_some_and(|p| c.listens_on(p))),
                    "{target}: Service {name} targetPort {target_port} is not a port {} listens on",
                    w.name
                );
            }
        }
    }
    let service_for = |w: &Workload| -> &Value {
        let found: Vec<&&Value> = services
            .iter()
            .filter(|s| selects(&labels(&s["spec"]["selector"]), &w.labels))
            .collect();
        assert_eq!(found.len(), 1, "{target}: one Service selects {}", w.name);
        found[0]
    };

    // PodDisruptionBudgets each cover exactly one Deployment's pods.
    let pdbs = of_kind("PodDisruptionBudget");
    let pdb_of = |w: &Workload| -> Option<&Value> {
        pdbs.iter()
            .copied()
            .find(|p| selects(&labels(&p["spec"]["selector"]["matchLabels"]), &w.labels))
    };
    for p in &pdbs {
        let selector = labels(&p["spec"]["selector"]["matchLabels"]);
        let covered = workloads
            .iter()
            .filter(|w| selects(&selector, &w.labels))
            .count();
        assert_eq!(
            covered,
            1,
            "{target}: PDB {} covers one Deployment",
            str_at(p, "/metadata/name").unwrap()
        );
    }

    // Control: grace above readiness grace plus the replay budget.
    let control = workload(&workloads, "control", target);
    let control_c = container_of(control, "control");
    let readiness_grace_ms = control_c
        .config
        .get("readiness_grace_ms")
        .and_then(|v| v.as_integer())
        .expect("readiness_grace_ms") as u64;
    assert!(
        readiness_grace_ms > 0,
        "{target}: control needs a readiness grace so endpoints drop it before it stops"
    );
    assert!(
        grace_seconds(control) * 1000 > REPLAY_BUDGET_SECONDS * 1000 + readiness_grace_ms,
        "{target}: control's terminationGracePeriodSeconds {} must exceed readiness grace {readiness_grace_ms} ms + the {REPLAY_BUDGET_SECONDS} s replay budget",
        grace_seconds(control)
    );

    // Router: grace, HPA, PDB, headless Service named by control's --routers.
    let router = workload(&workloads, "router", target);
    let router_c = container_of(router, "router");
    // The router stays up, not ready, until control's refresh has dropped it; then drains.
    let router_readiness_ms = router_c
        .config
        .get("readiness_grace_ms")
        .and_then(|v| v.as_integer())
        .expect("readiness_grace_ms") as u64;
    let refresh_ms = control_c
        .config
        .get("routers_refresh_ms")
        .and_then(|v| v.as_integer())
        .expect("routers_refresh_ms") as u64;
    assert!(
        router_readiness_ms > refresh_ms,
        "{target}: the router's readiness grace {router_readiness_ms} ms must outlast control's router refresh {refresh_ms} ms"
    );
    assert!(
        grace_seconds(router) * 1000 > REPLAY_BUDGET_SECONDS * 1000 + router_readiness_ms,
        "{target}: router's terminationGracePeriodSeconds must exceed its readiness grace + {REPLAY_BUDGET_SECONDS} s"
    );
    let hpas = of_kind("HorizontalPodAutoscaler");
    let hpa = hpas
        .iter()
        .find(|h| {
            str_at(h, "/spec/scaleTargetRef/kind") == Some("Deployment")
                && str_at(h, "/spec/scaleTargetRef/name") == Some(router.name.as_str())
        })
        .unwrap_or_else(|| panic!("{target}: no HPA targets Deployment {}", router.name));
    assert_eq!(
        str_at(hpa, "/apiVersion"),
        Some("autoscaling/v2"),
        "{target}: HPA version"
    );
    assert_eq!(
        str_at(hpa, "/spec/scaleTargetRef/apiVersion"),
        Some("apps/v1")
    );
    assert!(
        hpa["spec"]["metrics"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| str_at(m, "/resource/name") == Some("cpu")
                && str_at(m, "/resource/target/type") == Some("Utilization")),
        "{target}: the router HPA scales on CPU utilization"
    );
    assert!(
        router.spec.get("replicas").is_none(),
        "{target}: the router Deployment leaves its replica count to the HPA"
    );
    assert!(
        pdb_of(router).is_some(),
        "{target}: a PodDisruptionBudget covers the router pods {:?}",
        router.labels
    );
    let router_service = service_for(router);
    assert_eq!(
        str_at(router_service, "/spec/clusterIP"),
        Some("None"),
        "{target}: the router Service is headless (control balances over its pod addresses)"
    );
    let routers = control_c.config_str("routers");
    let dns = routers.strip_prefix("dns:///").unwrap_or_else(|| {
        panic!("{target}: control's routers = {routers}: expected dns:///<router Service>:<port>")
    });
    let (host, port) = host_port(dns);
    assert!(
        names_service(&host, router_service),
        "{target}: control's routers = {routers} does not name the router Service {}",
        str_at(router_service, "/metadata/name").unwrap()
    );
    // Headless: control dials pod addresses, so the port is the router's own.
    assert_eq!(
        Some(port),
        router_c.listen_port(Proto::Grpc),
        "{target}: control's routers = {routers}: the port must be the router's listen port"
    );
    assert!(
        router_service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["port"].as_u64() == Some(u64::from(port))),
        "{target}: the router Service declares port {port}"
    );

    // Gateway: --control names the control Service on the port that reaches control's gRPC.
    let gateway = workload(&workloads, "gateway", target);
    let gateway_c = container_of(gateway, "gateway");
    let control_service = service_for(control);
    let (host, port) = host_port(gateway_c.config_str("control"));
    assert!(
        names_service(&host, control_service),
        "{target}: the gateway's control = {host}:{port} does not name the control Service"
    );
    let service_port = control_service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"].as_u64() == Some(u64::from(port)))
        .unwrap_or_else(|| panic!("{target}: the control Service has no port {port}"));
    assert_eq!(
        Some(
            control_c.resolve(
                service_port
                    .get("targetPort")
                    .unwrap_or(&service_port["port"]),
                "targetPort"
            )
        ),
        control_c.listen_port(Proto::Grpc),
        "{target}: the gateway's control port {port} does not reach control's gRPC listener"
    );
    let allowed: Vec<&str> = gateway_c
        .config
        .get("allowed_host")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let gateway_service = service_for(gateway);
    assert!(
        allowed
            .iter()
            .any(|h| names_service(h.split(':').next().unwrap_or_default(), gateway_service)),
        "{target}: the gateway must allow its Service name as Host (allowed_host = {allowed:?})"
    );

    // Every Deployment's pods are covered by a PodDisruptionBudget (node drains take them one
    // at a time).
    for w in &workloads {
        assert!(
            pdb_of(w).is_some(),
            "{target}: a PodDisruptionBudget covers the pods of {}",
            w.name
        );
    }

    // Ingresses route to real Services and ports: `/hooks/` to control's ingest listener,
    // `/mcp` to the gateway, whose --allowed-host must accept the Ingress host.
    for ingress in of_kind("Ingress") {
        for rule in ingress["spec"]["rules"].as_array().into_iter().flatten() {
            let host = str_at(rule, "/host").unwrap_or_default();
            for path in rule["http"]["paths"].as_array().into_iter().flatten() {
                let name = str_at(path, "/backend/service/name").unwrap_or_default();
                let w = workloads
                    .iter()
                    .find(|w| names_service(name, service_for(w)))
                    .unwrap_or_else(|| {
                        panic!("{target}: Ingress backend {name} is no Service of a role")
                    });
                let service = service_for(w);
                let port = &path["backend"]["service"]["port"];
                let service_port = service["spec"]["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|p| p["name"] == port["name"] || p["port"] == port["number"])
                    .unwrap_or_else(|| panic!("{target}: Service {name} has no port {port}"));
                let c = &w.containers[0];
                let reached = c.resolve(
                    service_port
                        .get("targetPort")
                        .unwrap_or(&service_port["port"]),
                    "Ingress targetPort",
                );
                let route = str_at(path, "/path").unwrap_or_default();
                match route {
                    "/hooks/" => assert_eq!(
                        (c.role.as_str(), Some(reached)),
                        ("control", c.listen_port(Proto::Http)),
                        "{target}: /hooks/ must reach control's ingest listener"
                    ),
                    "/mcp" => {
                        assert_eq!(c.role, "gateway", "{target}: /mcp must reach the gateway");
                        assert!(
                            c.listens_on(reached),
                            "{target}: /mcp reaches port {reached}"
                        );
                        assert!(
                            allowed.iter().any(|h| h.split(':').next() == Some(host)),
                            "{target}: the gateway must allow the Ingress host {host} (allowed_host = {allowed:?})"
                        );
                    }
                    other => panic!(
                        "{target}: Ingress path {other} routes to nothing Switchboard serves"
                    ),
                }
            }
        }
    }

    // NetworkPolicies: each selects one role, names only ports it listens on, and lets the
    // roles reach one another as they are wired: control → routers, gateway → control.
    let policies = of_kind("NetworkPolicy");
    let policy_of = |w: &Workload| -> Option<&Value> {
        policies
            .iter()
            .copied()
            .find(|p| selects(&labels(&p["spec"]["podSelector"]["matchLabels"]), &w.labels))
    };
    for p in &policies {
        let selector = labels(&p["spec"]["podSelector"]["matchLabels"]);
        let selected: Vec<&Workload> = workloads
            .iter()
            .filter(|w| selects(&selector, &w.labels))
            .collect();
        let name = str_at(p, "/metadata/name").unwrap_or_default();
        assert_eq!(
            selected.len(),
            1,
            "{target}: NetworkPolicy {name} selects one role"
        );
        for rule in p["spec"]["ingress"].as_array().into_iter().flatten() {
            for port in rule["ports"].as_array().into_iter().flatten() {
                let n = selected[0].containers[0].resolve(&port["port"], "NetworkPolicy");
                assert!(
                    selected[0].containers[0].listens_on(n),
                    "{target}: NetworkPolicy {name} opens port {n}, where nothing listens"
                );
            }
        }
    }
    // Whether `to`'s policy (if any) admits pods of `from` (`None`: any pod) on `port`.
    let admits = |to: &Workload, from: Option<&Workload>, port: u16| -> bool {
        let Some(policy) = policy_of(to) else {
            return true;
        };
        policy["spec"]["ingress"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|rule| {
                let port_ok = rule["ports"].as_array().is_none_or(|ports| {
                    ports
                        .iter()
                        .any(|p| to.containers[0].try_resolve(&p["port"]) == Some(port))
                });
                let from_ok = match rule["from"].as_array() {
                    None => true,
                    Some(peers) => from.is_some_and(|f| {
                        peers.iter().any(|peer| {
                            peer.get("namespaceSelector").is_none()
                                && selects(&labels(&peer["podSelector"]["matchLabels"]), &f.labels)
                        })
                    }),
                };
                port_ok && from_ok
            })
    };
    let router_port = router_c
        .listen_port(Proto::Grpc)
        .expect("the router's port");
    assert!(
        admits(router, Some(control), router_port),
        "{target}: control must be let in to the routers' gRPC port"
    );
    let control_grpc = control_c
        .listen_port(Proto::Grpc)
        .expect("control's gRPC port");
    assert!(
        admits(control, Some(gateway), control_grpc),
        "{target}: the gateway must be let in to control's gRPC port"
    );
    let ingest = control_c
        .listen_port(Proto::Http)
        .expect("control's ingest port");
    assert!(
        admits(control, None, ingest),
        "{target}: forges (any pod, any address) must be let in to ingest"
    );
    if policy_of(router).is_some() {
        assert!(
            !admits(router, Some(gateway), router_port),
            "{target}: the gateway has no business with the routers"
        );
    }

    // Overlays carry (or generate) the Secrets the containers reference.
    if target != "base" {
        let secrets = of_kind("Secret");
        for w in &workloads {
            for c in &w.containers {
                for (name, key) in &c.secret_refs {
                    assert!(
                        secrets
                            .iter()
                            .any(|s| str_at(s, "/metadata/name") == Some(name.as_str())
                                && (s.pointer(&format!("/data/{key}")).is_some()
                                    || s.pointer(&format!("/stringData/{key}")).is_some())),
                        "{target}: {}/{} reads Secret {name} key {key}, which is not rendered",
                        w.name,
                        c.name
                    );
                }
            }
        }
    }
}

#[test]
fn rendered_manifests_run_the_binary_with_flags_and_ports_it_accepts() {
    let kubectl = venv().join("bin/kubectl");
    if !kubectl.exists() || !venv().join("bin/python").exists() {
        switchboard_testkit::missing::skip(
            "deploy",
            &format!(
                "a deploy virtualenv (kubectl, PyYAML) at {}",
                venv().display()
            ),
            "create it with scripts/deploy-tools",
        );
        return;
    }
    // The check has teeth: a flag the binary lacks fails `--print-config`.
    let (ok, _, _) = print_config(&["router".into(), "--no-such-flag".into()], &[]);
    assert!(!ok, "an unknown flag must fail --print-config");

    for (name, dir) in kustomizations() {
        let resources = render(&dir);
        check(&name, &resources);
        eprintln!(
            "deploy: {name}: {} resources checked against the binary",
            resources.len()
        );
    }
}

#[test]
fn the_example_config_file_is_accepted_by_every_role_and_read_as_the_file_layer() {
    let path = root().join("deploy/switchboard.example.toml");
    let text = std::fs::read_to_string(&path).expect("deploy/switchboard.example.toml");
    let file: toml::Table = toml::from_str(&text).expect("the example is TOML");
    for role in ["control", "router", "gateway", "up"] {
        let section = file
            .get(role)
            .and_then(|s| s.as_table())
            .unwrap_or_else(|| panic!("the example has a [{role}] table"));
        let args = vec![
            "--config".to_string(),
            path.display().to_string(),
            role.to_string(),
        ];
        let (ok, stdout, stderr) = print_config(&args, &[]);
        assert!(
            ok,
            "switchboard --config {} {role} --print-config failed:\n{stderr}",
            path.display()
        );
        let printed = role_table(role, &stdout);
        for (key, value) in section {
            assert_eq!(
                printed.get(key),
                Some(value),
                "[{role}] {key}: the file's value is not the effective one:\n{stdout}"
            );
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&format!("{key} = ")))
                .unwrap_or_else(|| panic!("[{role}] {key} is not printed:\n{stdout}"));
            assert!(
                line.trim_end().ends_with("# file"),
                "[{role}] {key} should come from the file: {line}"
            );
        }
    }
}
