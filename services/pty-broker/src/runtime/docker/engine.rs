//! The connection to one Docker engine: the bollard client, the endpoint it was reached at, the
//! API version negotiated with it, and what the runtime asks it about containers.

use std::collections::HashMap;
use std::fmt;
use std::io::Read as _;

use bollard::Docker;
use bollard::query_parameters::DownloadFromContainerOptions;
use futures::StreamExt as _;

use super::endpoint::Endpoint;
use super::{DockerError, DockerRuntimeConfig};
use crate::policy::Passwd;

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
    /// Without the engine's leading `/`.
    pub name: String,
    pub labels: HashMap<String, String>,
    /// The user its processes run as unless an exec names one (`USER` of the image, or
    /// `--user` of `docker run`); empty means root.
    pub user: Option<String>,
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
        let config = inspected.config.unwrap_or_default();
        Ok(ContainerInfo {
            id: inspected.id.unwrap_or_else(|| container.to_owned()),
            name: inspected
                .name
                .map(|name| name.trim_start_matches('/').to_owned())
                .unwrap_or_default(),
            labels: config.labels.unwrap_or_default(),
            user: config.user,
            running: state.running == Some(true) && state.paused != Some(true),
            init_pid: state
                .pid
                .and_then(|pid| u32::try_from(pid).ok())
                .filter(|pid| *pid > 0),
            started_at: state.started_at,
        })
    }

    /// The container's `/etc/passwd`, read through the engine's archive call (nothing runs in
    /// the container); `None` when it has none that is a regular file.
    pub async fn read_passwd(&self, container_id: &str) -> Result<Option<Passwd>, DockerError> {
        let options = DownloadFromContainerOptions {
            path: "/etc/passwd".to_owned(),
        };
        let mut archive = Vec::new();
        let mut chunks = self
            .docker
            .download_from_container(container_id, Some(options));
        while let Some(chunk) = chunks.next().await {
            let chunk = match chunk.map_err(DockerError::from) {
                Ok(chunk) => chunk,
                Err(DockerError::Engine { status: 404, .. }) => return Ok(None),
                Err(error) => return Err(error),
            };
            if archive.len() + chunk.len() > MAX_PASSWD_ARCHIVE_BYTES {
                return Err(DockerError::Protocol(
                    "the container's /etc/passwd is too large to read".to_owned(),
                ));
            }
            archive.extend_from_slice(&chunk);
        }
        let mut entries = tar::Archive::new(archive.as_slice());
        let entries = entries
            .entries()
            .map_err(|error| DockerError::Protocol(format!("/etc/passwd archive: {error}")))?;
        for entry in entries {
            let mut entry = entry
                .map_err(|error| DockerError::Protocol(format!("/etc/passwd archive: {error}")))?;
            if entry.header().entry_type() != tar::EntryType::Regular {
                continue;
            }
            let mut text = String::new();
            entry
                .read_to_string(&mut text)
                .map_err(|error| DockerError::Protocol(format!("/etc/passwd: {error}")))?;
            return Ok(Some(Passwd::parse(&text)));
        }
        Ok(None)
    }
}

/// A passwd file is a few KiB; anything near this is not one to trust.
const MAX_PASSWD_ARCHIVE_BYTES: usize = 4 << 20;

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
