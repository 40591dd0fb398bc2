//! The connection to one Docker engine: the bollard client, the endpoint it was reached at, the
//! API version negotiated with it, and what the runtime asks it about containers.

use std::fmt;

use bollard::Docker;

use super::endpoint::Endpoint;
use super::{DockerError, DockerRuntimeConfig};

/// The API version spoken with the engine after negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ApiVersion {
    pub major: usize,
    pub minor: usize,
}

impl ApiVersion {
    /// Engines from 1.42 on create an exec's TTY at the `ConsoleSize` given to start.
    pub fn applies_console_size_at_start(self) -> bool {
        self >= ApiVersion {
            major: 1,
            minor: 42,
        }
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A connected engine: the bollard client, where it is, and the negotiated API version.
#[derive(Debug, Clone)]
pub(crate) struct Engine {
    pub docker: Docker,
    pub endpoint: Endpoint,
    pub api: ApiVersion,
}

/// What the runtime needs to know about a container.
#[derive(Debug, Clone)]
pub(crate) struct ContainerInfo {
    pub id: String,
    pub running: bool,
    /// The container's init process as the engine sees it.
    pub init_pid: Option<u32>,
    pub started_at: Option<String>,
}

impl Engine {
    pub async fn connect(config: &DockerRuntimeConfig) -> Result<Self, DockerError> {
        let endpoint = Endpoint::resolve(config.endpoint.as_deref())?;
        let timeout = config.request_timeout.as_secs().max(1);
        let docker = match &endpoint {
            Endpoint::Unix(path) => {
                if !path.exists() {
                    return Err(DockerError::EngineUnreachable {
                        endpoint: endpoint.to_string(),
                        source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such socket"),
                    });
                }
                Docker::connect_with_unix(
                    &path.to_string_lossy(),
                    timeout,
                    bollard::API_DEFAULT_VERSION,
                )
            }
            Endpoint::Tcp(address) => {
                Docker::connect_with_http(address, timeout, bollard::API_DEFAULT_VERSION)
            }
        }
        .map_err(|error| DockerError::Connection(format!("{endpoint}: {error}")))?;
        let docker =
            docker
                .negotiate_version()
                .await
                .map_err(|error| match DockerError::from(error) {
                    DockerError::Connection(message) => {
                        DockerError::Connection(format!("{endpoint}: {message}"))
                    }
                    other => other,
                })?;
        let version = docker.client_version();
        let api = ApiVersion {
            major: version.major_version,
            minor: version.minor_version,
        };
        tracing::debug!(%endpoint, %api, "connected to the docker engine");
        Ok(Self {
            docker,
            endpoint,
            api,
        })
    }

    pub async fn inspect_container(&self, container: &str) -> Result<ContainerInfo, DockerError> {
        let inspected = self.docker.inspect_container(container, None).await?;
        let state = inspected.state.unwrap_or_default();
        Ok(ContainerInfo {
            id: inspected.id.unwrap_or_else(|| container.to_owned()),
            running: state.running == Some(true) && state.paused != Some(true),
            init_pid: state
                .pid
                .and_then(|pid| u32::try_from(pid).ok())
                .filter(|pid| *pid > 0),
            started_at: state.started_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_compare_numerically() {
        let version = |major, minor| ApiVersion { major, minor };
        assert!(!version(1, 41).applies_console_size_at_start());
        assert!(version(1, 42).applies_console_size_at_start());
        assert!(version(1, 100).applies_console_size_at_start());
        assert_eq!(version(1, 41).to_string(), "1.41");
    }
}
