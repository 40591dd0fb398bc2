//! The deployment files in `deploy/` against the binaries they run: every manifest and the
//! compose file parse, and every `--flag`, `PTYHUB_*` variable and container port they use
//! exists in (or matches) the binary's own command line, read from the clap definition its
//! `main` parses (`<service>::cli::Cli`), so the files cannot drift from the code. And the
//! settings the security of a deployment rests on are there: secrets from Secrets or files,
//! never inline or on a command line; a cookie secret and an `https://` public URL for every
//! gateway; `X-Forwarded-For` trusted exactly where an Ingress fronts the gateway; TLS on the
//! public side and `https://` between the services.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use serde::Deserialize;
use serde_yaml::Value;
use tests::binaries::SERVICES;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// What a binary's command line accepts.
#[derive(Debug)]
struct Flags {
    /// `--name` of every argument, aliases included.
    flags: BTreeSet<String>,
    /// Every argument's variable.
    env: BTreeSet<String>,
    /// The variables and flags that carry a secret's value (never inline, never argv).
    secret_values: BTreeSet<String>,
    /// The port of `--listen`'s default.
    default_port: u16,
    /// The variable that sets `--listen`.
    listen_env: String,
}

impl Flags {
    /// Reads a binary's clap definition.
    fn of(mut command: clap::Command) -> Self {
        command.build();
        let mut flags = BTreeSet::new();
        let mut env = BTreeSet::new();
        let mut secret_values = BTreeSet::new();
        for argument in command.get_arguments() {
            let longs: Vec<String> = argument
                .get_long()
                .into_iter()
                .chain(argument.get_all_aliases().unwrap_or_default())
                .map(|long| format!("--{long}"))
                .collect();
            let variable = argument
                .get_env()
                .map(|variable| variable.to_string_lossy().into_owned());
            if argument.is_hide_env_values_set() {
                secret_values.extend(longs.iter().cloned());
                secret_values.extend(variable.iter().cloned());
            }
            flags.extend(longs);
            env.extend(variable);
        }
        let listen = command
            .get_arguments()
            .find(|argument| argument.get_id() == "listen")
            .expect("every service has --listen");
        let default = listen
            .get_default_values()
            .first()
            .expect("--listen has a default")
            .to_string_lossy();
        Self {
            flags,
            env,
            secret_values,
            default_port: port_of(&default).expect("the default listen address has a port"),
            listen_env: listen
                .get_env()
                .expect("--listen has a variable")
                .to_string_lossy()
                .into_owned(),
        }
    }
}

/// Each service's command line, as its binary parses it.
fn command_lines() -> BTreeMap<&'static str, Flags> {
    let commands = [
        ("pty-broker", pty_broker::cli::Cli::command()),
        ("session-api", session_api::cli::Cli::command()),
        ("gateway", gateway::cli::Cli::command()),
    ];
    assert_eq!(
        commands.each_ref().map(|(name, _)| *name),
        SERVICES,
        "a command line per service"
    );
    commands
        .into_iter()
        .map(|(name, command)| (name, Flags::of(command)))
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
    binaries: &BTreeMap<&'static str, Flags>,
    what: &str,
    service: &str,
    flags: &[String],
    env: &BTreeMap<String, String>,
    ports: &[u16],
) -> Vec<String> {
    let accepts = &binaries[service];
    let mut problems = Vec::new();
    for flag in flags {
        if !accepts.flags.contains(flag) {
            problems.push(format!("{what}: {service} has no flag {flag}"));
        }
        if accepts.secret_values.contains(flag) {
            problems.push(format!(
                "{what}: {flag} puts a secret on the command line, which every user of the host reads"
            ));
        }
    }
    for name in env.keys().filter(|name| name.starts_with("PTYHUB_")) {
        if !accepts.env.contains(name) {
            problems.push(format!("{what}: {service} reads no variable {name}"));
        }
    }
    let listen_port = match env.get(&accepts.listen_env) {
        Some(listen) => match port_of(listen) {
            Some(port) => port,
            None => {
                problems.push(format!(
                    "{what}: {} has no port: {listen}",
                    accepts.listen_env
                ));
                return problems;
            }
        },
        None => accepts.default_port,
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
fn check_kubernetes(binaries: &BTreeMap<&'static str, Flags>, documents: &[Value]) -> Vec<String> {
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
                let accepts = &binaries[service];
                ports.push(
                    env.get(&accepts.listen_env)
                        .and_then(|listen| port_of(listen))
                        .unwrap_or(accepts.default_port),
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
            problems.extend(check_process(
                binaries, &what, service, &flags, &env, &ports,
            ));
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
    let binaries = command_lines();
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
    let problems = check_kubernetes(&binaries, &documents);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_kubernetes_check_finds_drift() {
    let binaries = command_lines();
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
    let problems = check_kubernetes(&binaries, &documents).join("\n");
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
    let binaries = command_lines();
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
    let problems = check_kubernetes(&binaries, &documents).join("\n");
    assert!(
        problems.contains("surge pod"),
        "a host port on the surging DaemonSet is not reported:\n{problems}"
    );
}

/// Every problem in the compose file.
fn check_compose(binaries: &BTreeMap<&'static str, Flags>, compose: &Value) -> Vec<String> {
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
        problems.extend(check_process(
            binaries, &what, service, &flags, &env, &ports,
        ));
        let listen = env
            .get(&binaries[service].listen_env)
            .and_then(|listen| port_of(listen))
            .unwrap_or(binaries[service].default_port);
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
    let binaries = command_lines();
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
    let problems = check_compose(&binaries, &compose);
    assert!(problems.is_empty(), "{problems:#?}");

    let mut drifted = compose.clone();
    drifted["services"]["pty-broker"]["environment"]["PTYHUB_BROKER_SESSION_API"] =
        Value::from("http://session-api:50099");
    drifted["services"]["gateway"]["environment"]["PTYHUB_GATEWAY_NO_SUCH"] = Value::from("1");
    let problems = check_compose(&binaries, &drifted).join("\n");
    assert!(problems.contains("50099"), "{problems}");
    assert!(problems.contains("PTYHUB_GATEWAY_NO_SUCH"), "{problems}");
}

#[test]
fn the_dockerfiles_match_the_binaries() {
    let binaries = command_lines();
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
        let problems = check_process(&binaries, &what, service, &[], &env, &exposed);
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
fn the_command_lines_name_flags_variables_secrets_and_the_listen_default() {
    let session_api = Flags::of(session_api::cli::Cli::command());
    assert!(session_api.flags.contains("--database-url"));
    assert!(session_api.flags.contains("--broker"));
    assert!(!session_api.flags.contains("--no-such-flag"));
    assert!(session_api.env.contains("PTYHUB_SESSION_API_DATABASE_URL"));
    assert_eq!(session_api.listen_env, "PTYHUB_SESSION_API_LISTEN");
    assert_eq!(session_api.default_port, 50051);
    let gateway = Flags::of(gateway::cli::Cli::command());
    assert!(
        gateway
            .secret_values
            .contains("PTYHUB_GATEWAY_COOKIE_SECRET")
    );
    assert!(gateway.secret_values.contains("--cookie-secret"));
    assert!(
        !gateway
            .secret_values
            .contains("PTYHUB_GATEWAY_COOKIE_SECRET_FILE")
    );
    assert!(gateway.env.contains("PTYHUB_GATEWAY_COOKIE_SECRET_FILE"));
}

/// Whether a variable names a file that holds a secret: a secret's `…_FILE`, or a TLS private
/// key.
fn names_a_secret_file(variable: &str) -> bool {
    variable.ends_with("_FILE") || (variable.contains("_TLS_") && variable.ends_with("_KEY"))
}

/// Whether a compose value takes its secret from the deployer's environment (`deploy/.env`)
/// rather than the file: interpolated, and with no default written in the file.
fn interpolated_without_default(value: &str) -> bool {
    value.contains("${") && !value.contains(":-") && !value.contains("-}")
}

/// Where a container's files come from: each mount path with its volume's kind.
#[derive(Debug)]
enum Mounted {
    /// A Secret's keys (by name), or none known.
    Secret(String),
    /// One file of the node (a `hostPath` of type `File`): a broker's own credential.
    NodeFile,
    Other,
}

fn mounts(pod: &Value, container: &Value) -> Vec<(String, Mounted)> {
    let volumes: BTreeMap<&str, &Value> = seq(pod.get("volumes"))
        .iter()
        .filter_map(|volume| Some((str_at(volume, &["name"])?, volume)))
        .collect();
    seq(container.get("volumeMounts"))
        .iter()
        .filter_map(|mount| {
            let path = str_at(mount, &["mountPath"])?
                .trim_end_matches('/')
                .to_owned();
            let volume = volumes.get(str_at(mount, &["name"])?)?;
            let mounted = if let Some(name) = str_at(volume, &["secret", "secretName"]) {
                Mounted::Secret(name.to_owned())
            } else if str_at(volume, &["hostPath", "type"]) == Some("File") {
                Mounted::NodeFile
            } else {
                Mounted::Other
            };
            Some((path, mounted))
        })
        .collect()
}

/// The gateway workloads an Ingress routes to: the names of the Deployments whose pods a
/// Service an Ingress names selects.
fn fronted_by_an_ingress(documents: &[Value]) -> BTreeSet<String> {
    let of_kind = |wanted: &'static str| {
        documents
            .iter()
            .filter(move |document| str_at(document, &["kind"]) == Some(wanted))
    };
    let backends: BTreeSet<&str> = of_kind("Ingress")
        .flat_map(|ingress| seq(ingress["spec"].get("rules")))
        .flat_map(|rule| seq(rule["http"].get("paths")))
        .filter_map(|path| str_at(path, &["backend", "service", "name"]))
        .collect();
    let selectors: Vec<&serde_yaml::Mapping> = of_kind("Service")
        .filter(|service| {
            str_at(service, &["metadata", "name"]).is_some_and(|name| backends.contains(name))
        })
        .filter_map(|service| service["spec"]["selector"].as_mapping())
        .collect();
    of_kind("Deployment")
        .filter(|deployment| {
            let labels = &deployment["spec"]["template"]["metadata"]["labels"];
            selectors.iter().any(|selector| {
                selector
                    .iter()
                    .all(|(key, value)| labels.get(key.as_str().unwrap_or_default()) == Some(value))
            })
        })
        .filter_map(|deployment| str_at(deployment, &["metadata", "name"]).map(str::to_owned))
        .collect()
}

/// The hosts an Ingress serves over TLS.
fn ingress_tls_hosts(documents: &[Value]) -> BTreeSet<String> {
    documents
        .iter()
        .filter(|document| str_at(document, &["kind"]) == Some("Ingress"))
        .flat_map(|ingress| seq(ingress["spec"].get("tls")))
        .flat_map(|tls| seq(tls.get("hosts")))
        .filter_map(|host| host.as_str().map(str::to_owned))
        .collect()
}

/// The host of an `https://host[:port][/...]` URL.
fn host_of(url: &str) -> Option<&str> {
    let authority = url.strip_prefix("https://")?.split('/').next()?;
    Some(
        authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host),
    )
}

/// What a gateway must set wherever it runs: a cookie secret from a file or a Secret (replicas
/// share it; a restart keeps browsers signed in) and an `https://` public URL.
fn check_gateway_settings(what: &str, env: &BTreeMap<String, String>) -> Vec<String> {
    let mut problems = Vec::new();
    if !env.contains_key("PTYHUB_GATEWAY_COOKIE_SECRET_FILE")
        && !env.contains_key("PTYHUB_GATEWAY_COOKIE_SECRET")
    {
        problems.push(format!(
            "{what}: no cookie secret: each replica (and each restart) would sign the others' browsers out"
        ));
    }
    match env.get("PTYHUB_GATEWAY_PUBLIC_URL") {
        Some(url) if url.contains("https://") && !url.contains("http://") => {}
        other => problems.push(format!(
            "{what}: PTYHUB_GATEWAY_PUBLIC_URL must be the https:// address clients use, not {other:?}"
        )),
    }
    problems
}

/// Plain-text endpoints, and the switch that allows them.
fn check_endpoints(what: &str, env: &BTreeMap<String, String>) -> Vec<String> {
    let mut problems = Vec::new();
    for (variable, value) in env {
        if value.contains("http://") {
            problems.push(format!(
                "{what}: {variable} is a plain-text endpoint ({value}): every hop is https://"
            ));
        }
    }
    if env
        .get("PTYHUB_SESSION_API_ALLOW_PLAINTEXT_BROKERS")
        .is_some_and(|value| value == "true")
    {
        problems.push(format!("{what}: plain-text brokers are allowed"));
    }
    problems
}

/// The settings a Kubernetes deployment's security rests on (see the module's doc).
fn check_kubernetes_security(
    binaries: &BTreeMap<&'static str, Flags>,
    documents: &[Value],
) -> Vec<String> {
    let mut problems = Vec::new();
    let fronted = fronted_by_an_ingress(documents);
    let tls_hosts = ingress_tls_hosts(documents);
    let secret_keys = |secret: &str| -> Option<BTreeSet<String>> {
        let document = documents.iter().find(|document| {
            str_at(document, &["kind"]) == Some("Secret")
                && str_at(document, &["metadata", "name"]) == Some(secret)
        })?;
        let mut keys = BTreeSet::new();
        for field in ["data", "stringData"] {
            if let Some(map) = document.get(field).and_then(Value::as_mapping) {
                keys.extend(map.keys().filter_map(Value::as_str).map(str::to_owned));
            }
        }
        Some(keys)
    };
    for document in documents {
        let Some(pod) = document["spec"]["template"].get("spec") else {
            continue;
        };
        let name = str_at(document, &["metadata", "name"]).unwrap_or_default();
        let what = format!("{} {name}", str_at(document, &["kind"]).unwrap_or_default());
        for container in seq(pod.get("containers")) {
            let Some(service) = service_of(str_at(container, &["image"]).unwrap_or_default())
            else {
                continue;
            };
            let mounted = mounts(pod, container);
            let mut env = BTreeMap::new();
            for variable in seq(container.get("env")) {
                let variable_name = str_at(variable, &["name"]).unwrap_or_default().to_owned();
                let inline = str_at(variable, &["value"]);
                if inline.is_some() && binaries[service].secret_values.contains(&variable_name) {
                    problems.push(format!(
                        "{what}: {variable_name} is a secret written inline: use {variable_name}_FILE with a Secret's file"
                    ));
                }
                if let Some(path) = inline.filter(|_| names_a_secret_file(&variable_name)) {
                    problems.extend(check_secret_file(
                        &what,
                        &variable_name,
                        path,
                        &mounted,
                        &secret_keys,
                    ));
                }
                env.insert(variable_name, inline.unwrap_or_default().to_owned());
            }
            problems.extend(check_endpoints(&what, &env));
            if service != "gateway" {
                continue;
            }
            problems.extend(check_gateway_settings(&what, &env));
            let trusts = env
                .get("PTYHUB_GATEWAY_TRUST_FORWARDED_FOR")
                .is_some_and(|value| value == "true");
            let has_tls = env.contains_key("PTYHUB_GATEWAY_TLS_CERT");
            if fronted.contains(name) {
                if !trusts {
                    problems.push(format!(
                        "{what}: an Ingress fronts it, but it does not trust X-Forwarded-For: every client would share the Ingress's address"
                    ));
                }
                let public_host = env
                    .get("PTYHUB_GATEWAY_PUBLIC_URL")
                    .and_then(|url| host_of(url));
                if !public_host.is_some_and(|host| tls_hosts.contains(host)) && !has_tls {
                    problems.push(format!(
                        "{what}: its public URL's host {public_host:?} is none the Ingress serves over TLS ({tls_hosts:?})"
                    ));
                }
            } else {
                if trusts {
                    problems.push(format!(
                        "{what}: no Ingress fronts it, yet it trusts X-Forwarded-For: any client could choose its address"
                    ));
                }
                if !has_tls {
                    problems.push(format!(
                        "{what}: clients reach it directly, without TLS (no PTYHUB_GATEWAY_TLS_CERT)"
                    ));
                }
            }
        }
    }
    problems
}

/// A file a secret is read from must be one a Secret mounts (a key it defines) or the node's
/// own credential file.
fn check_secret_file(
    what: &str,
    variable: &str,
    path: &str,
    mounted: &[(String, Mounted)],
    secret_keys: &dyn Fn(&str) -> Option<BTreeSet<String>>,
) -> Option<String> {
    let found = mounted.iter().find_map(|(mount, kind)| {
        let inside = path.strip_prefix(mount.as_str())?;
        Some((inside.trim_start_matches('/'), kind))
    });
    match found {
        Some(("", Mounted::NodeFile)) => None,
        Some((key, Mounted::Secret(secret))) if !key.is_empty() => match secret_keys(secret) {
            Some(keys) if !keys.contains(key) => Some(format!(
                "{what}: {variable} reads {path}, but Secret {secret} has no key {key}"
            )),
            _ => None,
        },
        _ => Some(format!(
            "{what}: {variable} reads {path}, which is not a file of a mounted Secret"
        )),
    }
}

/// The settings a compose deployment's security rests on: secrets as compose secrets (files
/// under `/run/secrets/`), never inline; the gateway serving TLS itself, with a cookie secret
/// and an `https://` public URL, and trusting no `X-Forwarded-For` (nothing fronts it).
fn check_compose_security(
    binaries: &BTreeMap<&'static str, Flags>,
    compose: &Value,
) -> Vec<String> {
    let mut problems = Vec::new();
    let declared: BTreeSet<&str> = compose
        .get("secrets")
        .and_then(Value::as_mapping)
        .map(|secrets| secrets.keys().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(services) = compose.get("services").and_then(Value::as_mapping) else {
        return problems;
    };
    for (name, definition) in services {
        let Some(service) = str_at(definition, &["build", "dockerfile"]).and_then(service_of)
        else {
            continue;
        };
        let what = format!("compose service {}", name.as_str().unwrap_or_default());
        let given: BTreeSet<&str> = seq(definition.get("secrets"))
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let env: BTreeMap<String, String> = definition
            .get("environment")
            .and_then(Value::as_mapping)
            .map(|env| {
                env.iter()
                    .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        for (variable, value) in &env {
            if binaries[service].secret_values.contains(variable)
                && !interpolated_without_default(value)
            {
                problems.push(format!(
                    "{what}: {variable} is a secret written inline: use {variable}_FILE with a compose secret"
                ));
            }
            if names_a_secret_file(variable) {
                let secret = value.strip_prefix("/run/secrets/");
                if !secret.is_some_and(|secret| given.contains(secret) && declared.contains(secret))
                {
                    problems.push(format!(
                        "{what}: {variable} reads {value}, which is not a compose secret this service is given"
                    ));
                }
            }
        }
        problems.extend(check_endpoints(&what, &env));
        if service == "gateway" {
            problems.extend(check_gateway_settings(&what, &env));
            if !(env.contains_key("PTYHUB_GATEWAY_TLS_CERT")
                && env.contains_key("PTYHUB_GATEWAY_TLS_KEY"))
            {
                problems.push(format!(
                    "{what}: its published port serves plain HTTP (no PTYHUB_GATEWAY_TLS_CERT and _KEY)"
                ));
            }
            if env
                .get("PTYHUB_GATEWAY_TRUST_FORWARDED_FOR")
                .is_some_and(|value| value == "true")
            {
                problems.push(format!(
                    "{what}: nothing fronts it, yet it trusts X-Forwarded-For: any client could choose its address"
                ));
            }
        }
    }
    problems
}

#[test]
fn the_kubernetes_manifests_ship_the_security_settings() {
    let binaries = command_lines();
    let documents = kubernetes_documents();
    let problems = check_kubernetes_security(&binaries, &documents);
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(
        fronted_by_an_ingress(&documents).contains("gateway"),
        "the Ingress fronts the gateway"
    );
}

#[test]
fn the_kubernetes_security_check_finds_what_is_missing() {
    let binaries = command_lines();
    let mut documents = kubernetes_documents();
    let deployment = documents
        .iter_mut()
        .find(|document| {
            str_at(document, &["metadata", "name"]) == Some("gateway")
                && str_at(document, &["kind"]) == Some("Deployment")
        })
        .expect("a gateway Deployment");
    let container = &mut deployment["spec"]["template"]["spec"]["containers"][0];
    let env = container["env"].as_sequence_mut().unwrap();
    env.retain(|variable| {
        !matches!(
            str_at(variable, &["name"]),
            Some("PTYHUB_GATEWAY_TRUST_FORWARDED_FOR" | "PTYHUB_GATEWAY_COOKIE_SECRET_FILE")
        )
    });
    for planted in [
        "{name: PTYHUB_GATEWAY_COOKIE_SECRET, value: an-inline-cookie-secret-of-32-characters}",
        "{name: PTYHUB_GATEWAY_API_TOKEN_FILE, value: /tmp/api-tokens}",
        "{name: PTYHUB_GATEWAY_SESSION_API, value: 'http://session-api.ptyhub.svc.cluster.local:50051'}",
    ] {
        env.push(serde_yaml::from_str(planted).unwrap());
    }
    let problems = check_kubernetes_security(&binaries, &documents).join("\n");
    for expected in [
        "does not trust X-Forwarded-For",
        "PTYHUB_GATEWAY_COOKIE_SECRET is a secret written inline",
        "/tmp/api-tokens, which is not a file of a mounted Secret",
        "plain-text endpoint",
    ] {
        assert!(
            problems.contains(expected),
            "{expected} not reported in:\n{problems}"
        );
    }
    // A file of a mounted Secret that the Secret does not define.
    let mut documents = kubernetes_documents();
    let secret = documents
        .iter_mut()
        .find(|document| str_at(document, &["metadata", "name"]) == Some("ptyhub-gateway"))
        .expect("the gateway's Secret");
    secret["stringData"]
        .as_mapping_mut()
        .unwrap()
        .remove("cookie-secret");
    let problems = check_kubernetes_security(&binaries, &documents).join("\n");
    assert!(
        problems.contains("Secret ptyhub-gateway has no key cookie-secret"),
        "{problems}"
    );
}

#[test]
fn the_compose_file_ships_the_security_settings() {
    let binaries = command_lines();
    let compose = compose_file();
    let problems = check_compose_security(&binaries, &compose);
    assert!(problems.is_empty(), "{problems:#?}");

    let mut drifted = compose.clone();
    let gateway = drifted["services"]["gateway"]["environment"]
        .as_mapping_mut()
        .unwrap();
    gateway.remove("PTYHUB_GATEWAY_TLS_CERT");
    gateway.remove("PTYHUB_GATEWAY_COOKIE_SECRET_FILE");
    gateway.insert(
        "PTYHUB_GATEWAY_PUBLIC_URL".into(),
        "http://localhost:8080".into(),
    );
    gateway.insert("PTYHUB_GATEWAY_TRUST_FORWARDED_FOR".into(), "true".into());
    gateway.insert(
        "PTYHUB_GATEWAY_JWT_HS256_SECRET".into(),
        "an-inline-jwt-secret-of-32-characters".into(),
    );
    gateway.insert(
        "PTYHUB_GATEWAY_API_TOKEN_FILE".into(),
        "/etc/api-tokens".into(),
    );
    let problems = check_compose_security(&binaries, &drifted).join("\n");
    for expected in [
        "serves plain HTTP",
        "no cookie secret",
        "PTYHUB_GATEWAY_PUBLIC_URL must be the https:// address",
        "trusts X-Forwarded-For",
        "PTYHUB_GATEWAY_JWT_HS256_SECRET is a secret written inline",
        "/etc/api-tokens, which is not a compose secret",
        "plain-text endpoint",
    ] {
        assert!(
            problems.contains(expected),
            "{expected} not reported in:\n{problems}"
        );
    }
}

#[test]
fn a_secret_on_a_command_line_is_reported() {
    let binaries = command_lines();
    let mut documents = kubernetes_documents();
    let daemon_set = documents
        .iter_mut()
        .find(|document| str_at(document, &["kind"]) == Some("DaemonSet"))
        .expect("the broker DaemonSet");
    let args = daemon_set["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence_mut()
        .unwrap();
    args.push(Value::from("--service-token=planted-on-the-command-line"));
    let problems = check_kubernetes(&binaries, &documents).join("\n");
    assert!(
        problems.contains("--service-token puts a secret on the command line"),
        "{problems}"
    );
}
