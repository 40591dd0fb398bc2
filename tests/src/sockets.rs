//! The TCP sockets a process holds, as the kernel reports them in `/proc`: where a service
//! started on port 0 listens, and whether a peer has hung up on one of its connections.
//!
//! A socket's owner is found through `/proc/<pid>/fd` (links named `socket:[<inode>]`) and its
//! addresses and state through `/proc/<pid>/net/tcp` and `tcp6` (one row per socket, keyed by
//! the same inode). Reading them needs no cooperation from the process, so it works as well on
//! a process stopped with SIGSTOP.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The state of a TCP socket, named as in the kernel's `tcp_states.h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpState {
    Established,
    SynSent,
    SynReceived,
    FinWait1,
    FinWait2,
    TimeWait,
    Close,
    /// The peer has closed its side (sent FIN); this side has not closed yet.
    CloseWait,
    LastAck,
    Listen,
    Closing,
    Other(u8),
}

impl TcpState {
    fn from_code(code: u8) -> Self {
        match code {
            0x01 => TcpState::Established,
            0x02 => TcpState::SynSent,
            0x03 => TcpState::SynReceived,
            0x04 => TcpState::FinWait1,
            0x05 => TcpState::FinWait2,
            0x06 => TcpState::TimeWait,
            0x07 => TcpState::Close,
            0x08 => TcpState::CloseWait,
            0x09 => TcpState::LastAck,
            0x0a => TcpState::Listen,
            0x0b => TcpState::Closing,
            other => TcpState::Other(other),
        }
    }
}

/// One TCP socket of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSocket {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub state: TcpState,
}

/// Every TCP socket (IPv4 and IPv6) that process `pid` has open.
pub fn tcp_sockets(pid: u32) -> io::Result<Vec<TcpSocket>> {
    let inodes = socket_inodes(pid)?;
    let mut sockets = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = match std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) {
            Ok(text) => text,
            // A kernel without IPv6 has no tcp6 table.
            Err(error) if error.kind() == io::ErrorKind::NotFound && table == "tcp6" => continue,
            Err(error) => return Err(error),
        };
        for line in text.lines().skip(1) {
            let row = parse_row(line).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unexpected row in /proc/{pid}/net/{table}: {line:?}"),
                )
            })?;
            if inodes.contains(&row.inode) {
                sockets.push(row.socket);
            }
        }
    }
    Ok(sockets)
}

/// The addresses process `pid` listens on.
pub fn listening_addresses(pid: u32) -> io::Result<Vec<SocketAddr>> {
    Ok(tcp_sockets(pid)?
        .into_iter()
        .filter(|socket| socket.state == TcpState::Listen)
        .map(|socket| socket.local)
        .collect())
}

/// The inodes of the sockets among `pid`'s open files.
fn socket_inodes(pid: u32) -> io::Result<HashSet<u64>> {
    let mut inodes = HashSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        // A descriptor may be closed between the listing and the read: skip it.
        let Ok(target) = std::fs::read_link(entry?.path()) else {
            continue;
        };
        if let Some(inode) = target
            .to_str()
            .and_then(|target| target.strip_prefix("socket:["))
            .and_then(|rest| rest.strip_suffix(']'))
            .and_then(|inode| inode.parse().ok())
        {
            inodes.insert(inode);
        }
    }
    Ok(inodes)
}

struct Row {
    socket: TcpSocket,
    inode: u64,
}

/// `sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...`
fn parse_row(line: &str) -> Option<Row> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let local = parse_address(fields.get(1)?)?;
    let remote = parse_address(fields.get(2)?)?;
    let state = TcpState::from_code(u8::from_str_radix(fields.get(3)?, 16).ok()?);
    let inode = fields.get(9)?.parse().ok()?;
    Some(Row {
        socket: TcpSocket {
            local,
            remote,
            state,
        },
        inode,
    })
}

/// `ADDRESS:PORT` in hex. The address is the kernel's in-memory (network order) bytes printed
/// as 32-bit words in host order: one word for IPv4, four for IPv6. The port is plain hex.
fn parse_address(text: &str) -> Option<SocketAddr> {
    let (address, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words = (0..address.len() / 8)
        .map(|index| u32::from_str_radix(address.get(index * 8..index * 8 + 8)?, 16).ok())
        .collect::<Option<Vec<u32>>>()?;
    let bytes: Vec<u8> = words.iter().flat_map(|word| word.to_ne_bytes()).collect();
    let ip = match (address.len(), bytes.len()) {
        (8, 4) => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        (32, 16) => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{Shutdown, TcpListener, TcpStream};

    use super::*;

    fn own_sockets() -> Vec<TcpSocket> {
        tcp_sockets(std::process::id()).expect("read our own sockets")
    }

    #[test]
    fn a_listener_its_connection_and_a_peer_hanging_up_are_seen() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().unwrap();
        assert!(
            listening_addresses(std::process::id())
                .unwrap()
                .contains(&address),
            "{:?}",
            own_sockets()
        );

        let mut client = TcpStream::connect(address).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        let client_address = client.local_addr().unwrap();
        let client_side = |sockets: &[TcpSocket]| {
            sockets
                .iter()
                .find(|socket| socket.local == client_address && socket.remote == address)
                .copied()
        };
        assert_eq!(
            client_side(&own_sockets()).map(|socket| socket.state),
            Some(TcpState::Established)
        );

        // The server hangs up: the client's side waits for its own close.
        server.shutdown(Shutdown::Both).unwrap();
        drop(server);
        let state = ptyhub_test_support::poll_until_blocking(
            std::time::Duration::from_secs(10),
            std::time::Duration::from_millis(10),
            || {
                client_side(&own_sockets())
                    .filter(|socket| socket.state == TcpState::CloseWait)
                    .map(|socket| socket.state)
            },
        );
        assert_eq!(state, Some(TcpState::CloseWait), "{:?}", own_sockets());
        // Writing to a peer that hung up fails sooner or later; the socket stays ours until
        // dropped.
        let _ = client.write_all(b"x");
        drop(client);
        assert!(client_side(&own_sockets()).is_none());
    }

    #[test]
    fn addresses_parse_in_the_kernels_notation() {
        assert_eq!(
            parse_address(&format!("{:08X}:1F90", u32::from_ne_bytes([127, 0, 0, 1]))),
            Some("127.0.0.1:8080".parse().unwrap())
        );
        let loopback6: String = Ipv6Addr::LOCALHOST
            .octets()
            .chunks(4)
            .map(|word| format!("{:08X}", u32::from_ne_bytes(word.try_into().unwrap())))
            .collect();
        assert_eq!(
            parse_address(&format!("{loopback6}:0050")),
            Some("[::1]:80".parse().unwrap())
        );
        for bad in ["", "0100007F", "0100007F:", "0100007G:0050", "01007F:0050"] {
            assert_eq!(parse_address(bad), None, "{bad:?}");
        }
    }
}
