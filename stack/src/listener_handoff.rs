//! Handing the gateway's listening socket to the next process (`ptyhub up --upgrade`), so that its
//! address never refuses a connection: the socket is never closed, only passed on.
//!
//! The broker's hand-off moves the sessions and the broker's own listener; this moves the
//! gateway's, over a socket of its own next to the broker's (`gateway-listener.sock` in the
//! broker's data directory), without touching the broker's protocol:
//!
//! 1. The running stack offers its gateway listener there from the start ([`ListenerOffer`]),
//!    holding a copy of it and of the broker's listener.
//! 2. The next process takes the broker over first (sessions and the broker's listener, which
//!    the broker hands only to a process it accepts as its successor), then connects here and
//!    sends the broker's listener as proof ([`take_gateway_listener`]).
//! 3. The old process checks the proof (the same socket as its broker's listener, by inode), that
//!    its broker has handed over, and the peer's user; it answers with the gateway listener and
//!    stops its own gateway, so that what connects from then on waits in the socket's queue for
//!    the new gateway rather than reaching one without a broker.
//! 4. The new process serves the gateway on it once its services run.
//!
//! The socket stays open in one process or both throughout: a connection attempt is queued,
//! never refused. A predecessor that offers nothing (an older `ptyhub up`) or refuses leaves the
//! next process to bind the address once it is free, as before.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use tokio::net::{TcpListener, UnixListener};
use tokio_util::sync::CancellationToken;

/// The socket's name, in the broker's data directory beside its hand-off socket.
pub(crate) const GATEWAY_LISTENER_SOCKET: &str = "gateway-listener.sock";

/// What the next process says (each message is one line), with the broker's listener attached.
const ASK: &[u8] = b"ptyhub gateway listener 1";
/// The answer that carries the gateway's listener.
const GIVEN: &[u8] = b"given";
/// How the answer of a refusal starts; the reason follows.
const REFUSED: &[u8] = b"refused: ";

/// How long either side waits for the other's message.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a stopping stack whose broker handed over waits for its successor to ask: it asks
/// right after the broker's hand-off, so this is a bound for a successor that never will.
const SUCCESSOR_PATIENCE: Duration = Duration::from_secs(10);

/// Why the gateway's listener did not come over.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ListenerHandOffError {
    #[error("listener hand-off socket i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("the running ptyhub refused to hand its gateway listener over: {0}")]
    Refused(String),
    #[error("listener hand-off protocol: {0}")]
    Protocol(String),
}

impl From<rustix::io::Errno> for ListenerHandOffError {
    fn from(errno: rustix::io::Errno) -> Self {
        Self::Io(errno.into())
    }
}

/// The running stack's offer of its gateway listener to the next process.
#[derive(Debug)]
pub(crate) struct ListenerOffer {
    socket: UnixListener,
    path: PathBuf,
    gateway: OwnedFd,
    broker: OwnedFd,
}

impl ListenerOffer {
    /// Listens on `<directory>/gateway-listener.sock` (replacing a predecessor's, which let go
    /// of it), holding copies of both listeners.
    pub fn bind(
        directory: &Path,
        gateway: &TcpListener,
        broker: &TcpListener,
    ) -> std::io::Result<Self> {
        let path = directory.join(GATEWAY_LISTENER_SOCKET);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        let socket = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        Ok(Self {
            socket,
            path,
            gateway: gateway.as_fd().try_clone_to_owned()?,
            broker: broker.as_fd().try_clone_to_owned()?,
        })
    }

    /// Offers the gateway listener until it is given, or the gateway is stopped
    /// (`gateway_shutdown`): then at once, or, when `broker` has handed over (the successor asks
    /// next), once it is given or [`SUCCESSOR_PATIENCE`] has passed. Once given, it stops this
    /// gateway: its socket is the next process's to serve.
    pub async fn serve(self, broker: pty_broker::Broker, gateway_shutdown: CancellationToken) {
        let offering = self.offer_until_given(&broker, &gateway_shutdown);
        tokio::pin!(offering);
        tokio::select! {
            () = &mut offering => return,
            () = gateway_shutdown.cancelled() => {}
        }
        if broker.handed_over()
            && tokio::time::timeout(SUCCESSOR_PATIENCE, offering)
                .await
                .is_err()
        {
            tracing::warn!(
                "the next process did not ask for the gateway's listener in time: letting go of the address"
            );
        }
    }

    async fn offer_until_given(
        &self,
        broker: &pty_broker::Broker,
        gateway_stop: &CancellationToken,
    ) {
        loop {
            let stream = match self.socket.accept().await {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, path = %self.path.display(), "the gateway listener's hand-off socket failed: no upgrade can take the address without a gap");
                    return;
                }
            };
            let exchange = stream.into_std().and_then(|stream| {
                let proof = self.broker.try_clone()?;
                let gateway = self.gateway.try_clone()?;
                let handed_over = broker.handed_over();
                Ok(tokio::task::spawn_blocking(move || {
                    give(&stream, &proof, gateway.as_fd(), handed_over)
                }))
            });
            let given = match exchange {
                Ok(task) => task
                    .await
                    .unwrap_or_else(|error| Err(ListenerHandOffError::Protocol(error.to_string()))),
                Err(error) => Err(error.into()),
            };
            match given {
                Ok(()) => {
                    tracing::info!(
                        "the gateway's listener went to the next process: this gateway stops"
                    );
                    gateway_stop.cancel();
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, "the gateway's listener was not handed over");
                }
            }
        }
    }
}

/// Takes the gateway's listener from the running stack whose broker this process has just taken
/// over from (`handoff_socket` is that broker's hand-off socket), proving it with the broker's
/// listener it received. `None` when nothing offers one there.
pub(crate) async fn take_gateway_listener(
    handoff_socket: &Path,
    broker_listener: &TcpListener,
) -> Result<Option<TcpListener>, ListenerHandOffError> {
    let path = handoff_socket.with_file_name(GATEWAY_LISTENER_SOCKET);
    let stream = match tokio::net::UnixStream::connect(&path).await {
        Ok(stream) => stream.into_std()?,
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None);
        }
        Err(error) => return Err(error.into()),
    };
    let proof = broker_listener.as_fd().try_clone_to_owned()?;
    let listener = tokio::task::spawn_blocking(move || ask(&stream, &proof))
        .await
        .map_err(|error| ListenerHandOffError::Protocol(error.to_string()))??;
    listener.set_nonblocking(true)?;
    Ok(Some(TcpListener::from_std(listener)?))
}

/// The old process's side of one exchange.
fn give(
    stream: &UnixStream,
    proof: &OwnedFd,
    gateway: BorrowedFd<'_>,
    handed_over: bool,
) -> Result<(), ListenerHandOffError> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(EXCHANGE_TIMEOUT))?;
    stream.set_write_timeout(Some(EXCHANGE_TIMEOUT))?;
    let refusal = match check_asker(stream, proof, handed_over) {
        Ok(()) => None,
        Err(ListenerHandOffError::Refused(reason)) => Some(reason),
        Err(error) => return Err(error),
    };
    if let Some(reason) = refusal {
        let mut answer = REFUSED.to_vec();
        answer.extend(reason.bytes().filter(|byte| *byte != b'\n'));
        send(stream, &answer, None)?;
        return Err(ListenerHandOffError::Refused(reason));
    }
    send(stream, GIVEN, Some(gateway))
}

/// Why the process at the other end of `stream` may not have the gateway's listener, if it may
/// not: it must run as this process's user, ask in this protocol, and hold this broker's
/// listening socket, which the broker hands to its successor alone, once it has handed over.
fn check_asker(
    stream: &UnixStream,
    proof: &OwnedFd,
    handed_over: bool,
) -> Result<(), ListenerHandOffError> {
    let peer = rustix::net::sockopt::socket_peercred(stream)?;
    let own = rustix::process::geteuid();
    if peer.uid != own {
        return Err(ListenerHandOffError::Refused(format!(
            "uid {} is not this process's {}",
            peer.uid.as_raw(),
            own.as_raw()
        )));
    }
    let (message, fd) = receive(stream)?;
    if message != ASK {
        return Err(ListenerHandOffError::Refused(
            "not a request for the gateway's listener in this protocol".to_owned(),
        ));
    }
    let Some(fd) = fd else {
        return Err(ListenerHandOffError::Refused(
            "no broker listener came as proof".to_owned(),
        ));
    };
    let presented = rustix::fs::fstat(&fd)?;
    let own = rustix::fs::fstat(proof)?;
    if (presented.st_dev, presented.st_ino) != (own.st_dev, own.st_ino) {
        return Err(ListenerHandOffError::Refused(
            "the proof is not this broker's listening socket".to_owned(),
        ));
    }
    if !handed_over {
        return Err(ListenerHandOffError::Refused(
            "this broker has not handed its sessions over".to_owned(),
        ));
    }
    Ok(())
}

/// The new process's side of the exchange.
fn ask(
    stream: &UnixStream,
    proof: &OwnedFd,
) -> Result<std::net::TcpListener, ListenerHandOffError> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(EXCHANGE_TIMEOUT))?;
    stream.set_write_timeout(Some(EXCHANGE_TIMEOUT))?;
    send(stream, ASK, Some(proof.as_fd()))?;
    let (answer, fd) = receive(stream)?;
    if let Some(reason) = answer.strip_prefix(REFUSED) {
        let reason = String::from_utf8_lossy(reason).trim_end().to_owned();
        return Err(ListenerHandOffError::Refused(reason));
    }
    if answer != GIVEN {
        return Err(ListenerHandOffError::Protocol(format!(
            "an unknown answer {:?}",
            String::from_utf8_lossy(&answer)
        )));
    }
    let fd = fd.ok_or_else(|| {
        ListenerHandOffError::Protocol("the answer carried no listener".to_owned())
    })?;
    if !rustix::net::sockopt::socket_acceptconn(&fd)? {
        return Err(ListenerHandOffError::Protocol(
            "what came is not a listening socket".to_owned(),
        ));
    }
    let listener = std::net::TcpListener::from(fd);
    listener.local_addr()?;
    Ok(listener)
}

/// Sends `message` as one line, with `fd` attached.
fn send(
    stream: &UnixStream,
    message: &[u8],
    fd: Option<BorrowedFd<'_>>,
) -> Result<(), ListenerHandOffError> {
    let mut line = message.to_vec();
    line.push(b'\n');
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds;
    if let Some(fd) = fd {
        fds = [fd];
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(ListenerHandOffError::Protocol(
                "no room for a descriptor".to_owned(),
            ));
        }
    }
    let sent = rustix::net::sendmsg(
        stream,
        &[IoSlice::new(&line)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    // The descriptor went with the first byte; the rest of a short line follows plainly.
    if sent < line.len() {
        use std::io::Write as _;
        (&*stream).write_all(&line[sent..])?;
    }
    Ok(())
}

/// Receives one line (at most 512 bytes, without its newline) and the descriptor that came
/// with it, if one did.
fn receive(stream: &UnixStream) -> Result<(Vec<u8>, Option<OwnedFd>), ListenerHandOffError> {
    let mut line = Vec::new();
    let mut received_fd = None;
    while !line.ends_with(b"\n") {
        let mut buffer = [0u8; 512];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let received = rustix::net::recvmsg(
            stream,
            &mut [IoSliceMut::new(&mut buffer)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = message {
                for fd in fds {
                    // One descriptor is expected; any other is closed as it drops.
                    if received_fd.is_none() {
                        received_fd = Some(fd);
                    }
                }
            }
        }
        if received.bytes == 0 {
            return Err(ListenerHandOffError::Protocol(
                "the other process closed the connection mid-message".to_owned(),
            ));
        }
        line.extend_from_slice(&buffer[..received.bytes]);
        if line.len() > buffer.len() {
            return Err(ListenerHandOffError::Protocol(
                "a line over 512 bytes".to_owned(),
            ));
        }
    }
    line.pop();
    Ok((line, received_fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn listener() -> TcpListener {
        TcpListener::bind("127.0.0.1:0").await.unwrap()
    }

    /// What a broker's hand-off leaves: a stack whose broker handed over, as far as the offer
    /// can tell. The offer reads the flag at each exchange, so a broker that has not handed
    /// over is enough to show a refusal.
    #[tokio::test]
    async fn the_listener_goes_only_to_a_process_holding_the_brokers_listener() {
        let directory = tempfile::tempdir().unwrap();
        let gateway = listener().await;
        let broker = listener().await;
        let offer = ListenerOffer::bind(directory.path(), &gateway, &broker).unwrap();
        let socket = offer.path.clone();
        let (stream_one, stream_two) = UnixStream::pair().unwrap();
        // Asked with another socket as proof: refused, with the reason.
        let stranger = listener().await;
        let stranger_proof = stranger.as_fd().try_clone_to_owned().unwrap();
        let asking = std::thread::spawn(move || ask(&stream_one, &stranger_proof));
        let proof = offer.broker.try_clone().unwrap();
        let given = give(&stream_two, &proof, offer.gateway.as_fd(), true);
        assert!(
            matches!(given, Err(ListenerHandOffError::Refused(_))),
            "{given:?}"
        );
        let asked = asking.join().unwrap();
        assert!(
            matches!(&asked, Err(ListenerHandOffError::Refused(reason)) if reason.contains("not this broker's")),
            "{asked:?}"
        );

        // Asked with the broker's listener before the broker handed over: refused.
        let (stream_one, stream_two) = UnixStream::pair().unwrap();
        let broker_proof = broker.as_fd().try_clone_to_owned().unwrap();
        let asking = std::thread::spawn(move || ask(&stream_one, &broker_proof));
        assert!(give(&stream_two, &proof, offer.gateway.as_fd(), false).is_err());
        let asked = asking.join().unwrap();
        assert!(
            matches!(&asked, Err(ListenerHandOffError::Refused(reason)) if reason.contains("not handed")),
            "{asked:?}"
        );

        // With the broker's listener, once it handed over: the gateway's very socket.
        let (stream_one, stream_two) = UnixStream::pair().unwrap();
        let broker_proof = broker.as_fd().try_clone_to_owned().unwrap();
        let asking = std::thread::spawn(move || ask(&stream_one, &broker_proof));
        give(&stream_two, &proof, offer.gateway.as_fd(), true).unwrap();
        let taken = asking.join().unwrap().unwrap();
        assert_eq!(taken.local_addr().unwrap(), gateway.local_addr().unwrap());
        let same = |one: BorrowedFd<'_>, two: BorrowedFd<'_>| {
            let (one, two) = (
                rustix::fs::fstat(one).unwrap(),
                rustix::fs::fstat(two).unwrap(),
            );
            (one.st_dev, one.st_ino) == (two.st_dev, two.st_ino)
        };
        assert!(
            same(taken.as_fd(), gateway.as_fd()),
            "the same socket, not a new one"
        );
        assert!(socket.exists());
    }

    #[tokio::test]
    async fn nothing_offered_is_no_listener() {
        let directory = tempfile::tempdir().unwrap();
        let broker = listener().await;
        let taken = take_gateway_listener(&directory.path().join("handoff.sock"), &broker)
            .await
            .unwrap();
        assert!(taken.is_none());
    }
}
