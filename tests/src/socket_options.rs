//! The options a process set on its TCP connections, read from the sockets themselves: each of
//! its socket descriptors is duplicated into this process with `pidfd_getfd(2)` (which needs
//! the right to trace it: a child of the test, as root or under Yama's default scope), and asked
//! with `getsockopt(2)`. Nothing is taken on the process's word: a socket it forgot to configure
//! shows as it is.

use std::io;
use std::net::SocketAddr;

use rustix::fd::OwnedFd;
use rustix::net::{AddressFamily, SocketType, getpeername, getsockname, sockopt};
use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags, pidfd_getfd, pidfd_open};

/// One connected TCP socket of a process, and whether Nagle's algorithm is off on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpConnection {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// `TCP_NODELAY`.
    pub nodelay: bool,
}

/// Every connected TCP socket (IPv4 and IPv6) that process `pid` holds; listeners are left out.
pub fn tcp_connections(pid: u32) -> io::Result<Vec<TcpConnection>> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no pid {pid}")))?;
    let process = pidfd_open(pid, PidfdFlags::empty())?;
    let mut connections = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{}/fd", pid.as_raw_nonzero()))? {
        let entry = entry?;
        let Some(target) = descriptor_of_socket(&entry) else {
            continue;
        };
        let socket = match pidfd_getfd(&process, target, PidfdGetfdFlags::empty()) {
            Ok(socket) => socket,
            // Closed between the listing and the copy.
            Err(rustix::io::Errno::BADF) => continue,
            Err(error) => return Err(error.into()),
        };
        if let Some(connection) = tcp_connection(&socket)? {
            connections.push(connection);
        }
    }
    Ok(connections)
}

/// The descriptor number of a `/proc/<pid>/fd` entry that is a socket.
fn descriptor_of_socket(entry: &std::fs::DirEntry) -> Option<i32> {
    let link = std::fs::read_link(entry.path()).ok()?;
    if !link.to_string_lossy().starts_with("socket:") {
        return None;
    }
    entry.file_name().to_str()?.parse().ok()
}

/// The addresses and `TCP_NODELAY` of `socket` when it is a connected TCP socket.
fn tcp_connection(socket: &OwnedFd) -> io::Result<Option<TcpConnection>> {
    let family = sockopt::socket_domain(socket)?;
    if family != AddressFamily::INET && family != AddressFamily::INET6 {
        return Ok(None);
    }
    if sockopt::socket_type(socket)? != SocketType::STREAM {
        return Ok(None);
    }
    let Some(remote) = connected_peer(socket)? else {
        return Ok(None);
    };
    let local = SocketAddr::try_from(getsockname(socket)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "an IP socket without an IP"))?;
    Ok(Some(TcpConnection {
        local,
        remote,
        nodelay: sockopt::tcp_nodelay(socket)?,
    }))
}

/// The peer of a connected socket; `None` for a listener or a socket not connected (yet).
fn connected_peer(socket: &OwnedFd) -> io::Result<Option<SocketAddr>> {
    match getpeername(socket) {
        Ok(Some(peer)) => Ok(SocketAddr::try_from(peer).ok()),
        Ok(None) | Err(rustix::io::Errno::NOTCONN) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_of_this_process_shows_the_option_it_was_given() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        let with = std::net::TcpStream::connect(address).expect("connect");
        with.set_nodelay(true).expect("set TCP_NODELAY");
        let (accepted, _) = listener.accept().expect("accept");
        accepted.set_nodelay(false).expect("clear TCP_NODELAY");

        let connections = tcp_connections(std::process::id()).expect("own sockets");
        let of = |local: SocketAddr| {
            connections
                .iter()
                .find(|connection| connection.local == local)
                .copied()
        };
        let client = of(with.local_addr().expect("client address")).expect("the client side");
        assert_eq!(client.remote, address);
        assert!(client.nodelay);
        let server = of(accepted.local_addr().expect("server address")).expect("the server side");
        assert!(!server.nodelay);
        assert!(
            connections
                .iter()
                .all(|connection| connection.local != address || connection.remote == client.local),
            "the listener itself is no connection"
        );
    }
}
