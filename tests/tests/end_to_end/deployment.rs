//! The deployment files in `deploy/` against the binaries they run: every manifest and the
//! compose file parse, and every `--flag`, `PTYHUB_*` variable and container port they use
//! exists in (or matches) the `--help` of the binary, so the files cannot drift from the code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_yaml::Value;
use tests::binaries::{SERVICES, help};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// What a binary's `--help` offers.
#[derive(Debug)]
struct Help {
    flags: BTreeSet<String>,
    env: BTreeSet<String>,
    /// The port of `--listen`'s default.
    default_port: u16,
    /// The variable that sets `--listen`.
    listen_env: String,
}

impl Help {
    fn parse(text: &str) -> Self {
        let words: Vec<&str> = text
            .split(|c: char| c.is_whitespace() || matches!(c, '[' | ']' | ',' | '='))
            .filter(|word| !word.is_empty())
            .collect();
        let flags = words
            .iter()
            .filter(|word| word.starts_with("--") && word.len() > 2)
            .map(|word| (*word).to_owned())
            .collect();
        let env = words
            .iter()
            .filter(|word| word.starts_with("PTYHUB_"))
            .map(|word| (*word).to_owned())
            .collect();
        let listen = text.find("--listen").expect("every service has --listen");
        let after = &text[listen..];
        let default = after
            .find("default: ")
            .map(|at| &after[at + "default: ".len()..])
            .and_then(|rest| rest.split(']').next())
            .expect("--listen has a default");
        let default_port = port_of(default).expect("the default listen address has a port");
        let listen_env = after
            .find("env: ")
            .map(|at| &after[at + "env: ".len()..])
            .and_then(|rest| rest.split(['=', ']']).next())
            .expect("--listen has a variable")
            .to_owned();
        Self {
            flags,
            env,
            default_port,
            listen_env,
        }
    }
}

fn helps() -> BTreeMap<&'static str, Help> {
    SERVICES
        .iter()
        .map(|name| (*name, Help::parse(&help(name).expect("--help runs"))))
        .collect()
}

/// The port of `host:port` or `scheme://host:port[/...]`.
fn port_of(address: &str) -> Option<u16> {
    let without_scheme = address.split("://").last()?;
    let authority = without_scheme.split('/').next()?;
    authority.rsplit(':').next()?.parse().ok()
}

/// The service a container image or Dockerfile is for.
fn service_of(reference: &str) -> Option<&'static str> {
    SERVICES
        .iter()
        .copied()
        .find(|service| reference.contains(service))
}

fn read_documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| {
            Value::deserialize(document)
                .unwrap_or_else(|error| panic!("{} does not parse: {error}", path.display()))
        })
        .filter(|document| !document.is_null())
        .collect()
}

fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut current = value;
    for key in path {
        current = current.get(*key)?;
    }
    current.as_str()
}

fn seq(value: Option<&Value>) -> &[Value] {
    value
        .and_then(Value::as_sequence)
        .map_or(&[], Vec::as_slice)
}

/// Flags in an argument list (`--name` or `--name=value`).
fn flags_in(args: &[Value]) -> Vec<String> {
    args.iter()
        .filter_map(Value::as_str)
        .filter(|arg| arg.starts_with("--"))
        .map(|arg| arg.split('=').next().unwrap_or(arg).to_owned())
        .collect()
}

/// Checks one container (Kubernetes) or compose service: its flags, variables and ports.
/// Returns the problems found.
fn check_process(
    helps: &BTreeMap<&'static str, Help>,
    what: &str,
    service: &str,
    flags: &[String],
    env: &BTreeMap<String, String>,
    ports: &[u16],
) -> Vec<String> {
    let help = &helps[service];
    let mut problems = Vec::new();
    for flag in flags {
        if !help.flags.contains(flag) {
            problems.push(format!("{what}: {service} has no flag {flag}"));
        }
    }
    for name in env.keys().filter(|name| name.starts_with("PTYHUB_")) {
        if !help.env.contains(name) {
            problems.push(format!("{what}: {service} reads no variable {name}"));
        }
    }
    let listen_port = match env.get(&help.listen_env) {
        Some(listen) => match port_of(listen) {
            Some(port) => port,
            None => {
                problems.push(format!("{what}: {} has no port: {listen}", help.listen_env));
                return problems;
            }
        },
        None => help.default_port,
    };
    if ports.is_empty() {
        problems.push(format!("{what}: no port declared"));
    }
    for port in ports {
        if *port != listen_port {
            problems.push(format!(
                "{what}: port {port} is not the port {service} listens on ({listen_port})"
            ));
        }
    }
    problems
}

/// Every problem in the Kubernetes manifests `documents`.
fn check_kubernetes(helps: &BTreeMap<&'static str, Help>, documents: &[Value]) -> Vec<String> {
    let mut problems = Vec::new();
    let kind = |document: &Value| str_at(document, &["kind"]).unwrap_or_default().to_owned();
    let name = |document: &Value| {
        str_at(document, &["metadata", "name"])
            .unwrap_or_default()
            .to_owned()
    };
    let keys_of = |wanted_kind: &str, wanted_name: &str| -> Option<BTreeSet<String>> {
        let document = documents
            .iter()
            .find(|document| kind(document) == wanted_kind && name(document) == wanted_name)?;
        let mut keys = BTreeSet::new();
        for field in ["data", "stringData"] {
            if let Some(map) = document.get(field).and_then(Value::as_mapping) {
                keys.extend(map.keys().filter_map(Value::as_str).map(str::to_owned));
            }
        }
        Some(keys)
    };
    // Workload pod labels -> (port names, port numbers).
    let mut pods: Vec<(BTreeMap<String, String>, BTreeMap<String, u16>)> = Vec::new();
    let mut services: BTreeMap<String, Vec<(String, u16)>> = BTreeMap::new();
    for document in documents {
        if kind(document) == "Service" {
            let ports = seq(document.get("spec").and_then(|spec| spec.get("ports")))
                .iter()
                .map(|port| {
                    (
                        str_at(port, &["name"]).unwrap_or_default().to_owned(),
                        port.get("port").and_then(Value::as_u64).unwrap_or(0) as u16,
                    )
                })
                .collect();
            services.insert(name(document), ports);
        }
    }
    for document in documents {
        let what = format!("{} {}", kind(document), name(document));
        let Some(pod) = document
            .get("spec")
            .and_then(|spec| spec.get("template"))
            .and_then(|template| template.get("spec"))
        else {
            continue;
        };
        let labels: BTreeMap<String, String> = document["spec"]["template"]["metadata"]["labels"]
            .as_mapping()
            .map(|labels| {
                labels
                    .iter()
                    .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        // A pod on the host's network that rolls with a surge must declare no port: each would
        // be a host port, and the new pod would never be scheduled beside the old one. Its
        // probes reach the port the process listens on.
        let surges_on_host_network = pod.get("hostNetwork").and_then(Value::as_bool) == Some(true)
            && document["spec"]["updateStrategy"]["rollingUpdate"]
                .get("maxSurge")
                .is_some_and(|surge| surge.as_u64() != Some(0) && surge.as_str() != Some("0%"));
        let mut named_ports = BTreeMap::new();
        for container in seq(pod.get("containers")) {
            let image = str_at(container, &["image"]).unwrap_or_default();
            let Some(service) = service_of(image) else {
                problems.push(format!("{what}: image {image} is none of {SERVICES:?}"));
                continue;
            };
            let mut flags = flags_in(seq(container.get("args")));
            flags.extend(flags_in(seq(container.get("command"))));
            let mut env = BTreeMap::new();
            for variable in seq(container.get("env")) {
                let variable_name = str_at(variable, &["name"]).unwrap_or_default().to_owned();
                let value = str_at(variable, &["value"]).unwrap_or_default().to_owned();
                for (reference, reference_kind) in
                    [("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")]
                {
                    if let Some(reference) =
                        variable.get("valueFrom").and_then(|v| v.get(reference))
                    {
                        let object = str_at(reference, &["name"]).unwrap_or_default();
                        let key = str_at(reference, &["key"]).unwrap_or_default();
                        if !keys_of(reference_kind, object).is_some_and(|keys| keys.contains(key)) {
                            problems.push(format!(
                                "{what}: {variable_name} refers to {reference_kind} {object} key {key}, which the manifests do not define"
                            ));
                        }
                    }
                }
                // An address of an in-cluster Service must use that Service's port.
                if let Some(host) = value
                    .split("://")
                    .nth(1)
                    .and_then(|rest| rest.split([':', '/']).next())
                    && let Some(ports) = services.get(host.split('.').next().unwrap_or_default())
                    && let Some(port) = port_of(&value)
                    && !ports.iter().any(|(_, service_port)| *service_port == port)
                {
                    problems.push(format!(
                        "{what}: {variable_name} uses port {port} of a Service that has {ports:?}"
                    ));
                }
                env.insert(variable_name, value);
            }
            let mut ports = Vec::new();
            if surges_on_host_network {
                if !seq(container.get("ports")).is_empty() {
                    problems.push(format!(
                        "{what}: declares a port (a host port with hostNetwork), so the surge pod of a rolling update cannot be scheduled beside the old one"
                    ));
                }
                let help = &helps[service];
                ports.push(
                    env.get(&help.listen_env)
                        .and_then(|listen| port_of(listen))
                        .unwrap_or(help.default_port),
                );
            }
            for port in seq(container.get("ports")) {
                let number = port
                    .get("containerPort")
                    .and_then(Value::as_u64)
                    .unwrap_or(0) as u16;
                ports.push(number);
                if let Some(port_name) = str_at(port, &["name"]) {
                    named_ports.insert(port_name.to_owned(), number);
                }
            }
            for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
                let Some(probe_spec) = container.get(probe) else {
                    if probe != "startupProbe" {
                        problems.push(format!("{what}: no {probe}"));
                    }
                    continue;
                };
                let port = ["grpc", "httpGet", "tcpSocket"]
                    .iter()
                    .find_map(|handler| probe_spec.get(*handler)?.get("port"));
                let known = match port {
                    Some(Value::Number(number)) => {
                        ports.contains(&(number.as_u64().unwrap_or(0) as u16))
                    }
                    Some(Value::String(port_name)) => named_ports.contains_key(port_name),
                    _ => false,
                };
                if !known {
                    problems.push(format!(
                        "{what}: {probe} uses a port the container does not declare"
                    ));
                }
            }
            problems.extend(check_process(helps, &what, service, &flags, &env, &ports));
        }
        pods.push((labels, named_ports));
    }
    let selects = |selector: &Value| -> Vec<&BTreeMap<String, u16>> {
        let Some(selector) = selector.as_mapping() else {
            return Vec::new();
        };
        pods.iter()
            .filter(|(labels, _)| {
                selector.iter().all(|(k, v)| {
                    k.as_str()
                        .and_then(|k| labels.get(k))
                        .is_some_and(|label| Some(label.as_str()) == v.as_str())
                })
            })
            .map(|(_, ports)| ports)
            .collect()
    };
    for document in documents {
        let what = format!("{} {}", kind(document), name(document));
        match kind(document).as_str() {
            "Service" => {
                let selected = selects(&document["spec"]["selector"]);
                if selected.is_empty() {
                    problems.push(format!("{what}: selects no workload"));
                }
                for port in seq(document["spec"].get("ports")) {
                    let target = &port["targetPort"];
                    let ok = selected.iter().all(|ports| match target {
                        Value::String(target) => ports.contains_key(target),
                        Value::Number(target) => ports
                            .values()
                            .any(|p| u64::from(*p) == target.as_u64().unwrap_or(0)),
                        _ => false,
                    });
                    if !ok {
                        problems.push(format!(
                            "{what}: targetPort {target:?} is not a port of the pods it selects"
                        ));
                    }
                }
            }
            "PodDisruptionBudget"
                if selects(&document["spec"]["selector"]["matchLabels"]).is_empty() =>
            {
                problems.push(format!("{what}: selects no workload"));
            }
            "Ingress" => {
                for rule in seq(document["spec"].get("rules")) {
                    for path in seq(rule["http"].get("paths")) {
                        let backend = &path["backend"]["service"];
                        let service = str_at(backend, &["name"]).unwrap_or_default();
                        let port = str_at(backend, &["port", "name"]).unwrap_or_default();
                        if !services
                            .get(service)
                            .is_some_and(|ports| ports.iter().any(|(name, _)| name == port))
                        {
                            problems.push(format!(
                                "{what}: backend {service}:{port} is not a Service port"
                            ));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    problems
}

fn kubernetes_documents() -> Vec<Value> {
    let dir = deploy_dir().join("kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("deploy/kubernetes exists")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in {}", dir.display());
    files.iter().flat_map(|file| read_documents(file)).collect()
}

#[test]
fn kubernetes_manifests_match_the_binaries() {
    let helps = helps();
    let documents = kubernetes_documents();
    let kinds: BTreeSet<&str> = documents
        .iter()
        .filter_map(|document| str_at(document, &["kind"]))
        .collect();
    for wanted in [
        "Deployment",
        "DaemonSet",
        "Secret",
        "Service",
        "Ingress",
        "PodDisruptionBudget",
    ] {
        assert!(kinds.contains(wanted), "no {wanted} in the manifests");
    }
    let problems = check_kubernetes(&helps, &documents);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_kubernetes_check_finds_drift() {
    let helps = helps();
    let mut documents = kubernetes_documents();
    let deployment = documents
        .iter_mut()
        .find(|document| {
            str_at(document, &["metadata", "name"]) == Some("gateway")
                && str_at(document, &["kind"]) == Some("Deployment")
        })
        .expect("a gateway Deployment");
    let container = &mut deployment["spec"]["template"]["spec"]["containers"][0];
    container["args"] = serde_yaml::from_str("[--no-such-flag=1]").unwrap();
    container["ports"][0]["containerPort"] = Value::from(9999);
    let env = container["env"].as_sequence_mut().unwrap();
    env.push(serde_yaml::from_str("{name: PTYHUB_GATEWAY_NO_SUCH_VARIABLE, value: x}").unwrap());
    let problems = check_kubernetes(&helps, &documents).join("\n");
    for expected in [
        "no flag --no-such-flag",
        "PTYHUB_GATEWAY_NO_SUCH_VARIABLE",
        "port 9999",
    ] {
        assert!(
            problems.contains(expected),
            "{expected} not reported in:\n{problems}"
        );
    }
}

#[test]
fn the_broker_daemonset_rolls_with_a_surge_and_no_host_port() {
    let helps = helps();
    let mut documents = kubernetes_documents();
    let daemon_set = documents
        .iter_mut()
        .find(|document| str_at(document, &["kind"]) == Some("DaemonSet"))
        .expect("the broker DaemonSet");
    let rolling = &daemon_set["spec"]["updateStrategy"]["rollingUpdate"];
    assert_eq!(rolling["maxSurge"].as_u64(), Some(1), "{rolling:?}");
    assert_eq!(rolling["maxUnavailable"].as_u64(), Some(0), "{rolling:?}");
    let container = &mut daemon_set["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = seq(container.get("args"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        args.contains(&"--take-over=/var/lib/ptyhub-broker/handoff.sock")
            && args.contains(&"--data-dir=/var/lib/ptyhub-broker")
            && args.contains(&"--wait-after-hand-off"),
        "the new pod takes over from the old one through the hostPath data dir: {args:?}"
    );
    container["ports"] = serde_yaml::from_str("[{name: grpc, containerPort: 50061}]").unwrap();
    let problems = check_kubernetes(&helps, &documents).join("\n");
    assert!(
        problems.contains("surge pod"),
        "a host port on the surging DaemonSet is not reported:\n{problems}"
    );
}

/// Every problem in the compose file.
fn check_compose(helps: &BTreeMap<&'static str, Help>, compose: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(services) = compose.get("services").and_then(Value::as_mapping) else {
        return vec!["compose.yaml has no services".to_owned()];
    };
    let mut listen_ports = BTreeMap::new();
    let mut processes = Vec::new();
    for (name, definition) in services {
        let name = name.as_str().unwrap_or_default().to_owned();
        let Some(dockerfile) = str_at(definition, &["build", "dockerfile"]) else {
            continue;
        };
        let what = format!("compose service {name}");
        if !deploy_dir().join("..").join(dockerfile).is_file() {
            problems.push(format!("{what}: no Dockerfile {dockerfile}"));
        }
        let Some(service) = service_of(dockerfile) else {
            problems.push(format!("{what}: {dockerfile} builds none of {SERVICES:?}"));
            continue;
        };
        let env: BTreeMap<String, String> = definition
            .get("environment")
            .and_then(Value::as_mapping)
            .map(|env| {
                env.iter()
                    .filter_map(|(k, v)| {
                        let value = match v {
                            Value::String(text) => text.clone(),
                            other => serde_yaml::to_string(other).ok()?.trim().to_owned(),
                        };
                        Some((k.as_str()?.to_owned(), value))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut ports: Vec<u16> = seq(definition.get("expose"))
            .iter()
            .filter_map(|port| port.as_str()?.parse().ok())
            .collect();
        ports.extend(
            seq(definition.get("ports"))
                .iter()
                .filter_map(|port| port.as_str()?.rsplit(':').next()?.parse::<u16>().ok()),
        );
        let flags = flags_in(seq(definition.get("command")));
        problems.extend(check_process(helps, &what, service, &flags, &env, &ports));
        let listen = env
            .get(&helps[service].listen_env)
            .and_then(|listen| port_of(listen))
            .unwrap_or(helps[service].default_port);
        listen_ports.insert(name.clone(), listen);
        processes.push((what, env));
    }
    // `http://<service>:<port>` (or `https://`) in a variable must be where that service
    // listens.
    for (what, env) in processes {
        for (variable, value) in env {
            for address in value
                .split([',', '='])
                .filter(|part| part.starts_with("http://") || part.starts_with("https://"))
            {
                let host = address
                    .trim_start_matches("https://")
                    .trim_start_matches("http://")
                    .split(':')
                    .next()
                    .unwrap_or_default();
                if let Some(listen) = listen_ports.get(host)
                    && port_of(address) != Some(*listen)
                {
                    problems.push(format!(
                        "{what}: {variable} points at {address}, but {host} listens on {listen}"
                    ));
                }
            }
        }
    }
    problems
}

fn compose_file() -> Value {
    let documents = read_documents(&deploy_dir().join("compose.yaml"));
    assert_eq!(documents.len(), 1, "compose.yaml is one document");
    documents.into_iter().next().unwrap()
}

#[test]
fn the_compose_file_matches_the_binaries() {
    let helps = helps();
    let compose = compose_file();
    for service in ["postgres", "pty-broker", "session-api", "gateway"] {
        assert!(
            compose["services"].get(service).is_some(),
            "no {service} in compose.yaml"
        );
    }
    let broker_volumes: Vec<&str> = seq(compose["services"]["pty-broker"].get("volumes"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        broker_volumes
            .iter()
            .any(|volume| volume.starts_with("/var/run/docker.sock:")),
        "the broker gets the Docker socket"
    );
    let problems = check_compose(&helps, &compose);
    assert!(problems.is_empty(), "{problems:#?}");

    let mut drifted = compose.clone();
    drifted["services"]["pty-broker"]["environment"]["PTYHUB_BROKER_SESSION_API"] =
        Value::from("http://session-api:50099");
    drifted["services"]["gateway"]["environment"]["PTYHUB_GATEWAY_NO_SUCH"] = Value::from("1");
    let problems = check_compose(&helps, &drifted).join("\n");
    assert!(problems.contains("50099"), "{problems}");
    assert!(problems.contains("PTYHUB_GATEWAY_NO_SUCH"), "{problems}");
}

#[test]
fn the_dockerfiles_match_the_binaries() {
    let helps = helps();
    let dir = deploy_dir().join("docker");
    for service in SERVICES {
        let path = dir.join(format!("{service}.Dockerfile"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
        let joined = text.replace("\\\n", " ");
        let mut env = BTreeMap::new();
        let mut exposed = Vec::new();
        let mut entrypoint = None;
        for line in joined.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("ENV ") {
                for pair in rest.split_whitespace() {
                    let (name, value) = pair.split_once('=').expect("ENV name=value");
                    env.insert(name.to_owned(), value.to_owned());
                }
            } else if let Some(rest) = line.strip_prefix("EXPOSE ") {
                exposed.extend(
                    rest.split_whitespace()
                        .map(|port| port.parse::<u16>().expect("a port")),
                );
            } else if let Some(rest) = line.strip_prefix("ENTRYPOINT ") {
                entrypoint = Some(rest.to_owned());
            }
        }
        let what = format!("{}", path.display());
        let problems = check_process(&helps, &what, service, &[], &env, &exposed);
        assert!(problems.is_empty(), "{problems:#?}");
        assert!(
            entrypoint.is_some_and(
                |entrypoint| entrypoint.contains(&format!("/usr/local/bin/{service}\""))
            ),
            "{what}: the entrypoint runs {service}"
        );
    }
}

#[test]
fn help_parsing_reads_flags_variables_and_the_listen_default() {
    let help = Help::parse(&help("session-api").expect("--help runs"));
    assert!(help.flags.contains("--database-url"));
    assert!(help.flags.contains("--broker"));
    assert!(!help.flags.contains("--no-such-flag"));
    assert!(help.env.contains("PTYHUB_SESSION_API_DATABASE_URL"));
    assert_eq!(help.listen_env, "PTYHUB_SESSION_API_LISTEN");
    assert_eq!(help.default_port, 50051);
}
