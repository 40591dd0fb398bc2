//! Where the Docker engine listens: parsing `unix://` and `tcp://` endpoints, `DOCKER_HOST`, and
//! opening raw connections to it for the exec streams bollard cannot carry byte-exactly.

use std::fmt;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

use super::DockerError;

/// The socket the broker talks to the engine through when neither the config nor `DOCKER_HOST`
/// names one.
pub const DEFAULT_DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// A Docker engine endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A Unix socket on this host.
    Unix(PathBuf),
    /// Plain HTTP over TCP, `host:port`.
    Tcp(String),
}

impl Endpoint {
    /// The endpoint to use: `configured` if given, else `DOCKER_HOST`, else the local socket.
    pub fn resolve(configured: Option<&str>) -> Result<Self, DockerError> {
        if let Some(configured) = configured.filter(|value| !value.trim().is_empty()) {
            return Self::parse(configured);
        }
        match std::env::var("DOCKER_HOST") {
            Ok(host) if !host.trim().is_empty() => Self::parse(&host),
            _ => Ok(Endpoint::Unix(PathBuf::from(DEFAULT_DOCKER_SOCKET))),
        }
    }

    /// Parses `unix:///path`, an absolute socket path, `tcp://host:port` or `http://host:port`.
    pub fn parse(value: &str) -> Result<Self, DockerError> {
        let value = value.trim();
        let invalid = |reason: &str| DockerError::InvalidEndpoint {
            endpoint: value.to_owned(),
            reason: reason.to_owned(),
        };
        if let Some(path) = value.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(invalid("a unix socket path must be absolute"));
            }
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        if value.starts_with('/') {
            return Ok(Endpoint::Unix(PathBuf::from(value)));
        }
        let address = value
            .strip_prefix("tcp://")
            .or_else(|| value.strip_prefix("http://"));
        if let Some(address) = address {
            let address = address.trim_end_matches('/');
            let has_port = address
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !has_port {
                return Err(invalid("a tcp endpoint needs host:port"));
            }
            return Ok(Endpoint::Tcp(address.to_owned()));
        }
        Err(invalid(
            "only unix:// and plain tcp:// endpoints are supported (no tls or ssh)",
        ))
    }

    /// Opens a fresh connection for one hijacked exec stream.
    pub(crate) async fn connect(&self) -> std::io::Result<Box<dyn Connection>> {
        match self {
            Endpoint::Unix(path) => Ok(Box::new(UnixStream::connect(path).await?)),
            Endpoint::Tcp(address) => {
                let stream = TcpStream::connect(address.as_str()).await?;
                // Keystrokes are small writes; Nagle would delay each one.
                stream.set_nodelay(true)?;
                Ok(Box::new(stream))
            }
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Unix(path) => write!(f, "unix://{}", path.display()),
            Endpoint::Tcp(address) => write!(f, "tcp://{address}"),
        }
    }
}

/// A bidirectional byte stream to the engine, a socket of this process's own.
pub(crate) trait Connection: AsyncRead + AsyncWrite + AsRawFd + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + AsRawFd + Send + Unpin> Connection for T {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_endpoint_forms_docker_accepts() {
        assert_eq!(
            Endpoint::parse("unix:///run/docker.sock").unwrap(),
            Endpoint::Unix(PathBuf::from("/run/docker.sock"))
        );
        assert_eq!(
            Endpoint::parse("/var/run/docker.sock").unwrap(),
            Endpoint::Unix(PathBuf::from("/var/run/docker.sock"))
        );
        assert_eq!(
            Endpoint::parse("tcp://127.0.0.1:2375").unwrap(),
            Endpoint::Tcp("127.0.0.1:2375".to_owned())
        );
        assert_eq!(
            Endpoint::parse("http://docker.internal:2375/").unwrap(),
            Endpoint::Tcp("docker.internal:2375".to_owned())
        );
    }

    #[test]
    fn refuses_endpoints_it_cannot_speak() {
        for bad in [
            "unix://relative.sock",
            "tcp://no-port",
            "tcp://:2375",
            "https://host:2376",
            "ssh://user@host",
            "npipe:////./pipe/docker_engine",
            "docker.sock",
        ] {
            let error = Endpoint::parse(bad).unwrap_err();
            assert!(
                matches!(error, DockerError::InvalidEndpoint { .. }),
                "{bad}: {error}"
            );
        }
    }
}
