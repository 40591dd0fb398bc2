//! One terminal as the bench drives it, over each path under test: a bare local PTY, the same
//! behind two plain TCP relays, a `docker exec` with a TTY through bollard, the broker's gRPC
//! `Attach`, and the gateway's WebSocket. Each gives `send` (keystrokes) and `recv` (output
//! bytes, in order).

use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bytes::Bytes;
use futures::{SinkExt as _, Stream, StreamExt as _};
use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use nix::pty::{Winsize, openpty};
use ptyhub_proto::broker::v1 as broker_pb;
use ptyhub_proto::session::v1 as session_pb;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::stack::{ADMIN_TOKEN, Backend, BrokerClient, Screens, Stack};

/// How long one read may wait before the bench calls the path stuck.
pub const READ_PATIENCE: Duration = Duration::from_secs(60);

/// A path from the bench to a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// A PTY pair of this process, the child on the slave: the machine's limit.
    BarePty,
    /// The same PTY behind two relay tasks that copy bytes over loopback TCP and do nothing
    /// else: the limit of any design with ptyhub's two network hops (client → gateway →
    /// broker → PTY) on this machine and runtime.
    Relayed,
    /// `docker exec` with a TTY, read straight through bollard: the container limit.
    DockerExec,
    /// The broker's gRPC Attach (ticket from session-api), on the broker with or without
    /// screens.
    Broker(Backend, Screens),
    /// The gateway's WebSocket, end to end, to a session on the broker with or without screens.
    Gateway(Backend, Screens),
    /// As `Gateway(backend, Screens::On)`, to a session whose instance records output and
    /// input (asciicast, in the stack's recordings directory).
    GatewayRecorded(Backend),
    /// The gateway's gRPC `Attach` relay (an outside client's path), to a session on the broker
    /// with or without screens.
    GatewayGrpc(Backend, Screens),
    /// The gateway's WebSocket with the gateway reaching the broker over its TCP port (gRPC on
    /// HTTP/2), as a gateway in a process of its own does, instead of in process as `ptyhub up`
    /// does (every other gateway path).
    GatewayOverTcp(Backend),
    /// The gateway's WebSocket read by a client that is not the bench's: Python's `websockets`
    /// in a process of its own (`bench/python/ws_flood.py`), reading whole or in small reads.
    /// Throughput only: the client measures the flood itself.
    GatewayPython(Backend, Reads),
}

/// How the Python client reads its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// As `asyncio` does by default (up to 256 KiB a read).
    Whole,
    /// [`SMALL_READ_BYTES`] a read, one frame queued at most.
    Small,
}

/// The read size of [`Reads::Small`].
pub const SMALL_READ_BYTES: usize = 4096;

impl Path {
    pub fn label(self) -> &'static str {
        match self {
            Path::BarePty => "(a) bare local PTY",
            Path::Relayed => "(a2) bare PTY behind two TCP relays",
            Path::DockerExec => "(b) docker exec (bollard)",
            Path::Broker(Backend::Local, Screens::On) => "(c) broker Attach, local",
            Path::Broker(Backend::Docker, Screens::On) => "(c) broker Attach, Docker",
            Path::Gateway(Backend::Local, Screens::On) => "(d) gateway WebSocket, local",
            Path::Gateway(Backend::Docker, Screens::On) => "(d) gateway WebSocket, Docker",
            Path::Broker(Backend::Local, Screens::Off) => "(c) broker Attach, local, screens off",
            Path::Broker(Backend::Docker, Screens::Off) => "(c) broker Attach, Docker, screens off",
            Path::Gateway(Backend::Local, Screens::Off) => {
                "(d) gateway WebSocket, local, screens off"
            }
            Path::Gateway(Backend::Docker, Screens::Off) => {
                "(d) gateway WebSocket, Docker, screens off"
            }
            Path::GatewayRecorded(Backend::Local) => {
                "(d) gateway WebSocket, local, recording output+input"
            }
            Path::GatewayRecorded(Backend::Docker) => {
                "(d) gateway WebSocket, Docker, recording output+input"
            }
            Path::GatewayGrpc(Backend::Local, Screens::On) => "(e) gateway gRPC Attach, local",
            Path::GatewayGrpc(Backend::Docker, Screens::On) => "(e) gateway gRPC Attach, Docker",
            Path::GatewayGrpc(Backend::Local, Screens::Off) => {
                "(e) gateway gRPC Attach, local, screens off"
            }
            Path::GatewayGrpc(Backend::Docker, Screens::Off) => {
                "(e) gateway gRPC Attach, Docker, screens off"
            }
            Path::GatewayOverTcp(Backend::Local) => "(d) gateway WebSocket, local, broker over TCP",
            Path::GatewayOverTcp(Backend::Docker) => {
                "(d) gateway WebSocket, Docker, broker over TCP"
            }
            Path::GatewayPython(Backend::Local, Reads::Whole) => {
                "(f) gateway WebSocket, local, Python client in its own process"
            }
            Path::GatewayPython(Backend::Local, Reads::Small) => {
                "(f) gateway WebSocket, local, Python client reading 4 KiB at a time"
            }
            Path::GatewayPython(Backend::Docker, Reads::Whole) => {
                "(f) gateway WebSocket, Docker, Python client in its own process"
            }
            Path::GatewayPython(Backend::Docker, Reads::Small) => {
                "(f) gateway WebSocket, Docker, Python client reading 4 KiB at a time"
            }
        }
    }

    pub fn needs_docker(self) -> bool {
        matches!(
            self,
            Path::DockerExec
                | Path::Broker(Backend::Docker, _)
                | Path::Gateway(Backend::Docker, _)
                | Path::GatewayRecorded(Backend::Docker)
                | Path::GatewayGrpc(Backend::Docker, _)
                | Path::GatewayOverTcp(Backend::Docker)
                | Path::GatewayPython(Backend::Docker, _)
        )
    }

    /// Whether `--paths` keeps this path: no filter, a floor, or a label that contains one of
    /// the filter's words (any case).
    pub fn is_wanted(self, filter: &[String]) -> bool {
        let label = self.label().to_lowercase();
        filter.is_empty()
            || matches!(self, Path::BarePty | Path::Relayed | Path::DockerExec)
            || filter
                .iter()
                .any(|word| label.contains(&word.to_lowercase()))
    }

    /// Whether the path needs the broker without screens.
    pub fn needs_unscreened(self) -> bool {
        matches!(
            self,
            Path::Broker(_, Screens::Off)
                | Path::Gateway(_, Screens::Off)
                | Path::GatewayGrpc(_, Screens::Off)
        )
    }

    /// Whether the process has the terminal as its controlling terminal (so ^C reaches it).
    pub fn has_controlling_terminal(self) -> bool {
        !matches!(self, Path::BarePty | Path::Relayed)
    }

    /// Every path of the latency scenarios, in table order (ptyhub as it runs by default).
    pub const ALL: [Path; 15] = [
        Path::BarePty,
        Path::Relayed,
        Path::DockerExec,
        Path::Broker(Backend::Local, Screens::On),
        Path::Broker(Backend::Local, Screens::Off),
        Path::Broker(Backend::Docker, Screens::On),
        Path::Gateway(Backend::Local, Screens::On),
        Path::Gateway(Backend::Local, Screens::Off),
        Path::GatewayRecorded(Backend::Local),
        Path::GatewayOverTcp(Backend::Local),
        Path::Gateway(Backend::Docker, Screens::On),
        Path::GatewayRecorded(Backend::Docker),
        Path::GatewayOverTcp(Backend::Docker),
        Path::GatewayGrpc(Backend::Local, Screens::On),
        Path::GatewayGrpc(Backend::Docker, Screens::On),
    ];

    /// Every path of the throughput scenario, in table order: each of ptyhub's beside the same
    /// with screens off (and the gateway's beside the same recorded).
    pub const THROUGHPUT: [Path; 23] = [
        Path::BarePty,
        Path::Relayed,
        Path::DockerExec,
        Path::Broker(Backend::Local, Screens::On),
        Path::Broker(Backend::Local, Screens::Off),
        Path::Broker(Backend::Docker, Screens::On),
        Path::Broker(Backend::Docker, Screens::Off),
        Path::Gateway(Backend::Local, Screens::On),
        Path::Gateway(Backend::Local, Screens::Off),
        Path::GatewayRecorded(Backend::Local),
        Path::GatewayOverTcp(Backend::Local),
        Path::GatewayPython(Backend::Local, Reads::Whole),
        Path::GatewayPython(Backend::Local, Reads::Small),
        Path::Gateway(Backend::Docker, Screens::On),
        Path::Gateway(Backend::Docker, Screens::Off),
        Path::GatewayRecorded(Backend::Docker),
        Path::GatewayOverTcp(Backend::Docker),
        Path::GatewayPython(Backend::Docker, Reads::Whole),
        Path::GatewayPython(Backend::Docker, Reads::Small),
        Path::GatewayGrpc(Backend::Local, Screens::On),
        Path::GatewayGrpc(Backend::Local, Screens::Off),
        Path::GatewayGrpc(Backend::Docker, Screens::On),
        Path::GatewayGrpc(Backend::Docker, Screens::Off),
    ];
}

type ExecOutput = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// An open terminal.
pub enum Term {
    Pty {
        master: AsyncFd<OwnedFd>,
        child: Child,
        buffer: Vec<u8>,
    },
    Relayed {
        stream: TcpStream,
        child: Child,
        relays: [tokio::task::JoinHandle<()>; 2],
        buffer: Vec<u8>,
    },
    Exec {
        output: ExecOutput,
        input: Pin<Box<dyn AsyncWrite + Send>>,
    },
    Broker {
        input: mpsc::Sender<broker_pb::ClientFrame>,
        output: tonic::Streaming<broker_pb::ServerFrame>,
        instance: String,
        session_id: String,
    },
    Gateway {
        socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
        instance: String,
        session_id: String,
        /// The role the gateway's `connected` status gave.
        controller: bool,
    },
    /// A terminal of ttyd, the peer: its command runs for as long as the socket is open.
    Ttyd {
        socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    },
}

impl std::fmt::Debug for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Term::Pty { .. } => "Term::Pty",
            Term::Relayed { .. } => "Term::Relayed",
            Term::Exec { .. } => "Term::Exec",
            Term::Broker { .. } => "Term::Broker",
            Term::Gateway { .. } => "Term::Gateway",
            Term::Ttyd { .. } => "Term::Ttyd",
        })
    }
}

impl Term {
    /// Runs `sh -c script` on `path` in an 80x24 terminal and attaches to it as controller.
    pub async fn open(stack: &Stack, path: Path, script: &str) -> Result<Self> {
        let command = vec!["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned()];
        match path {
            Path::BarePty => open_pty(&command),
            Path::Relayed => open_relayed(&command).await,
            Path::DockerExec => open_exec(stack, command).await,
            Path::Broker(backend, screens) => {
                let (instance, attach) = create_session(stack, backend, screens, command).await?;
                let (client, endpoint) = stack
                    .broker_with(screens)
                    .context("the broker without screens is not running")?;
                attach_broker_at(client, endpoint, instance, attach).await
            }
            Path::Gateway(backend, screens) => {
                let (instance, attach) = create_session(stack, backend, screens, command).await?;
                connect_gateway(stack, &instance, &attach.session_id, "").await
            }
            Path::GatewayRecorded(backend) => {
                let instance = stack
                    .recorded_instance(backend)
                    .context("that backend is not available")?
                    .to_owned();
                let attach = create_session_on(stack, &instance, command).await?;
                connect_gateway(stack, &instance, &attach.session_id, "").await
            }
            Path::GatewayGrpc(backend, screens) => {
                let (instance, attach) = create_session(stack, backend, screens, command).await?;
                crate::grpc_attach::attach_through_gateway(stack, instance, attach.session_id).await
            }
            Path::GatewayOverTcp(backend) => {
                let (instance, attach) =
                    create_session(stack, backend, Screens::On, command).await?;
                // Only the attach is made over TCP; the stream keeps its transport after.
                let _over_tcp = stack.broker_over_tcp();
                connect_gateway(stack, &instance, &attach.session_id, "").await
            }
            Path::GatewayPython(..) => bail!("the Python client opens its own socket"),
        }
    }

    /// Whether this is a gateway WebSocket attached as the controller.
    pub fn is_controller(&self) -> bool {
        matches!(
            self,
            Term::Gateway {
                controller: true,
                ..
            }
        )
    }

    /// Writes input bytes.
    pub async fn send(&mut self, data: &[u8]) -> Result<()> {
        match self {
            Term::Pty { master, .. } => {
                let mut written = 0;
                while written < data.len() {
                    let mut guard = master.writable().await?;
                    match guard.try_io(|fd| {
                        nix::unistd::write(fd.get_ref(), &data[written..])
                            .map_err(std::io::Error::from)
                    }) {
                        Ok(result) => written += result?,
                        Err(_would_block) => continue,
                    }
                }
                Ok(())
            }
            Term::Relayed { stream, .. } => {
                stream.write_all(data).await?;
                Ok(())
            }
            Term::Exec { input, .. } => {
                input.write_all(data).await?;
                input.flush().await?;
                Ok(())
            }
            Term::Broker { input, .. } => input
                .send(broker_pb::ClientFrame {
                    frame: Some(broker_pb::client_frame::Frame::Input(broker_pb::Input {
                        data: Bytes::copy_from_slice(data),
                        input_id: None,
                    })),
                })
                .await
                .map_err(|_| anyhow!("the attach stream closed")),
            Term::Gateway { socket, .. } => {
                socket
                    .send(Message::Binary(Bytes::copy_from_slice(data)))
                    .await?;
                Ok(())
            }
            Term::Ttyd { socket } => {
                let mut message = Vec::with_capacity(1 + data.len());
                message.push(TTYD_INPUT);
                message.extend_from_slice(data);
                socket.send(Message::Binary(message.into())).await?;
                Ok(())
            }
        }
    }

    /// The next output bytes; `None` when the terminal ended.
    pub async fn recv(&mut self) -> Result<Option<Bytes>> {
        tokio::time::timeout(READ_PATIENCE, self.recv_unbounded())
            .await
            .map_err(|_| anyhow!("no output for {READ_PATIENCE:?}"))?
    }

    async fn recv_unbounded(&mut self) -> Result<Option<Bytes>> {
        match self {
            Term::Pty { master, buffer, .. } => loop {
                let mut guard = master.readable().await?;
                match guard.try_io(|fd| {
                    nix::unistd::read(fd.get_ref(), buffer).map_err(std::io::Error::from)
                }) {
                    Ok(Ok(0)) => return Ok(None),
                    Ok(Ok(count)) => return Ok(Some(Bytes::copy_from_slice(&buffer[..count]))),
                    // EIO: the slave side is closed.
                    Ok(Err(error)) if error.raw_os_error() == Some(nix::libc::EIO) => {
                        return Ok(None);
                    }
                    Ok(Err(error)) => return Err(error.into()),
                    Err(_would_block) => continue,
                }
            },
            Term::Relayed { stream, buffer, .. } => match stream.read(buffer).await? {
                0 => Ok(None),
                count => Ok(Some(Bytes::copy_from_slice(&buffer[..count]))),
            },
            Term::Exec { output, .. } => match output.next().await {
                None => Ok(None),
                Some(Ok(chunk)) => Ok(Some(chunk.into_bytes())),
                Some(Err(error)) => Err(error.into()),
            },
            Term::Broker { output, .. } => loop {
                let Some(frame) = output.message().await? else {
                    return Ok(None);
                };
                match frame.frame {
                    Some(broker_pb::server_frame::Frame::Output(chunk)) => {
                        return Ok(Some(chunk.data));
                    }
                    Some(broker_pb::server_frame::Frame::Exit(exit)) => {
                        bail!("the process exited: {exit:?}")
                    }
                    Some(broker_pb::server_frame::Frame::Closed(closed)) => {
                        bail!("the broker closed the stream: {closed:?}")
                    }
                    Some(broker_pb::server_frame::Frame::Gap(gap)) => {
                        bail!("the broker reported a gap of {} bytes", gap.lost)
                    }
                    Some(broker_pb::server_frame::Frame::Error(error)) => {
                        bail!("the broker reported an error: {}", error.message)
                    }
                    // The bench asks for none: one would stand in for output it checks.
                    Some(broker_pb::server_frame::Frame::Snapshot(snapshot)) => {
                        bail!("an unasked-for snapshot at offset {}", snapshot.offset)
                    }
                    _ => {}
                }
            },
            Term::Gateway { socket, .. } => loop {
                let Some(message) = socket.next().await else {
                    return Ok(None);
                };
                match message? {
                    Message::Binary(data) => return Ok(Some(data)),
                    Message::Text(text) => {
                        if text.contains("\"gap\"") || text.contains("\"error\"") {
                            bail!("the gateway said {text}");
                        }
                        if text.contains("\"exit\"") {
                            return Ok(None);
                        }
                    }
                    Message::Close(Some(frame)) if u16::from(frame.code) != 1000 => {
                        bail!(
                            "the gateway closed the socket: {} {}",
                            u16::from(frame.code),
                            frame.reason
                        )
                    }
                    Message::Close(_) => return Ok(None),
                    _ => {}
                }
            },
            Term::Ttyd { socket } => loop {
                let Some(message) = socket.next().await else {
                    return Ok(None);
                };
                match message? {
                    // Other commands (the window title, the page's preferences) are not output.
                    Message::Binary(data) if data.first() == Some(&TTYD_OUTPUT) => {
                        return Ok(Some(data.slice(1..)));
                    }
                    Message::Close(_) => return Ok(None),
                    _ => {}
                }
            },
        }
    }

    /// Reads until `needle` has arrived (searching across chunk borders); returns every byte
    /// read. Bounded by `limit` bytes and [`READ_PATIENCE`] per read.
    pub async fn read_until(&mut self, needle: &[u8], limit: usize) -> Result<Vec<u8>> {
        let mut seen = Vec::new();
        loop {
            let Some(chunk) = self.recv().await? else {
                bail!(
                    "the terminal ended before {:?} arrived",
                    String::from_utf8_lossy(needle)
                );
            };
            let from = seen.len().saturating_sub(needle.len());
            seen.extend_from_slice(&chunk);
            if seen[from..]
                .windows(needle.len())
                .any(|window| window == needle)
            {
                return Ok(seen);
            }
            if seen.len() > limit {
                bail!(
                    "{:?} did not arrive within {limit} bytes",
                    String::from_utf8_lossy(needle)
                );
            }
        }
    }

    /// Ends the terminal: closes the session, or kills the local child.
    pub async fn close(self, stack: &Stack) {
        match self {
            Term::Pty { mut child, .. } => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Term::Relayed {
                mut child, relays, ..
            } => {
                for relay in relays {
                    relay.abort();
                }
                let _ = child.kill();
                let _ = child.wait();
            }
            Term::Exec { .. } | Term::Ttyd { .. } => {}
            Term::Broker {
                instance,
                session_id,
                ..
            }
            | Term::Gateway {
                instance,
                session_id,
                ..
            } => close_session(stack, &instance, &session_id).await,
        }
    }
}

/// Closes a session through session-api, ignoring one that is already gone.
pub async fn close_session(stack: &Stack, instance: &str, session_id: &str) {
    let request = session_pb::CloseSessionRequest {
        instance: instance.to_owned(),
        session_id: session_id.to_owned(),
    };
    if let Err(status) = stack.session_api.clone().close_session(request).await
        && status.code() != tonic::Code::NotFound
    {
        eprintln!("close session {session_id}: {status}");
    }
}

pub(crate) fn open_pty(command: &[String]) -> Result<Term> {
    let size = Winsize {
        ws_row: 24,
        ws_col: 80,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = openpty(&size, None).context("openpty")?;
    // Neither end may leak into the processes the bench spawns after this one (the next
    // terminals' programs, the typists' client): a master held open there keeps the terminal
    // from hanging up when the bench closes its end, so its program (`cat`, which reads until
    // then) outlives the bench and keeps one of the kernel's PTYs (4,096 by default).
    for end in [&pty.master, &pty.slave] {
        fcntl(end, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).context("set close-on-exec")?;
    }
    let child = Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::from(pty.slave.try_clone()?))
        .stdout(Stdio::from(pty.slave.try_clone()?))
        .stderr(Stdio::from(pty.slave))
        .env("TERM", "xterm-256color")
        .env("PS1", "$ ")
        .spawn()
        .context("spawn on the bare PTY")?;
    let flags = fcntl(&pty.master, FcntlArg::F_GETFL)?;
    fcntl(
        &pty.master,
        FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )?;
    // `AsyncFd::new` is deprecated for wrappers that do not own their descriptor; an `OwnedFd`
    // does, and the safe alternative (`register`) is `unsafe`, which this workspace denies.
    #[allow(deprecated)]
    let master = AsyncFd::new(pty.master)?;
    Ok(Term::Pty {
        master,
        child,
        buffer: vec![0; 64 * 1024],
    })
}

/// A bare PTY with two relays in front: the bench's stream → relay 1 → relay 2 → the PTY
/// master, each hop a loopback TCP connection, each relay a task on the runtime that serves
/// ptyhub (as the gateway and the broker are).
pub(crate) async fn open_relayed(command: &[String]) -> Result<Term> {
    let Term::Pty { master, child, .. } = open_pty(command)? else {
        unreachable!("open_pty opens a PTY")
    };
    let pty_side = TcpListener::bind("127.0.0.1:0").await?;
    let pty_address = pty_side.local_addr()?;
    let middle = TcpListener::bind("127.0.0.1:0").await?;
    let middle_address = middle.local_addr()?;
    let near = tokio::spawn(async move {
        let Ok((mut client, _)) = middle.accept().await else {
            return;
        };
        let Ok(mut upstream) = TcpStream::connect(pty_address).await else {
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    });
    let far = tokio::spawn(async move {
        let Ok((stream, _)) = pty_side.accept().await else {
            return;
        };
        let _ = stream.set_nodelay(true);
        let _ = relay_to_pty(stream, master).await;
    });
    let stream = TcpStream::connect(middle_address).await?;
    stream.set_nodelay(true)?;
    Ok(Term::Relayed {
        stream,
        child,
        relays: [near, far],
        buffer: vec![0; 64 * 1024],
    })
}

/// Copies both ways between a TCP connection and a PTY master until either side ends.
async fn relay_to_pty(stream: TcpStream, master: AsyncFd<OwnedFd>) -> Result<()> {
    let (mut from_client, mut to_client) = stream.into_split();
    let mut input = vec![0; 64 * 1024];
    let mut output = vec![0; 64 * 1024];
    loop {
        tokio::select! {
            guard = master.readable() => {
                let mut guard = guard?;
                let read = guard.try_io(|fd| {
                    nix::unistd::read(fd.get_ref(), &mut output).map_err(std::io::Error::from)
                });
                match read {
                    Ok(Ok(0)) | Ok(Err(_)) => return Ok(()),
                    Ok(Ok(count)) => to_client.write_all(&output[..count]).await?,
                    Err(_would_block) => {}
                }
            }
            read = from_client.read(&mut input) => {
                let count = read?;
                if count == 0 {
                    return Ok(());
                }
                let mut written = 0;
                while written < count {
                    let mut guard = master.writable().await?;
                    if let Ok(result) = guard.try_io(|fd| {
                        nix::unistd::write(fd.get_ref(), &input[written..count])
                            .map_err(std::io::Error::from)
                    }) {
                        written += result?;
                    }
                }
            }
        }
    }
}

async fn open_exec(stack: &Stack, command: Vec<String>) -> Result<Term> {
    let docker = stack.docker.as_ref().context("Docker is not available")?;
    let exec = docker
        .engine
        .create_exec(
            &docker.container_id,
            CreateExecOptions {
                cmd: Some(command),
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(true),
                env: Some(vec!["TERM=xterm-256color".to_owned(), "PS1=$ ".to_owned()]),
                ..Default::default()
            },
        )
        .await
        .context("create exec")?;
    let started = docker
        .engine
        .start_exec(
            &exec.id,
            Some(StartExecOptions {
                detach: false,
                tty: true,
                output_capacity: Some(64 * 1024),
            }),
        )
        .await
        .context("start exec")?;
    match started {
        StartExecResults::Attached { output, input } => Ok(Term::Exec { output, input }),
        StartExecResults::Detached => bail!("the exec started detached"),
    }
}

/// Creates a session running `command` through session-api on the broker with or without
/// screens; its instance and attach target.
pub async fn create_session(
    stack: &Stack,
    backend: Backend,
    screens: Screens,
    command: Vec<String>,
) -> Result<(String, session_pb::AttachTarget)> {
    let instance = stack
        .instance_with(backend, screens)
        .context("that backend is not available")?
        .to_owned();
    let attach = create_session_on(stack, &instance, command).await?;
    Ok((instance, attach))
}

/// Creates a session running `command` on `instance` through session-api; its attach target.
pub async fn create_session_on(
    stack: &Stack,
    instance: &str,
    command: Vec<String>,
) -> Result<session_pb::AttachTarget> {
    let created = stack
        .session_api
        .clone()
        .create_session(session_pb::CreateSessionRequest {
            instance: instance.to_owned(),
            name: String::new(),
            aliases: Vec::new(),
            size: Some(broker_pb::TerminalSize { cols: 80, rows: 24 }),
            command,
            ..Default::default()
        })
        .await
        .context("create session")?
        .into_inner();
    created.attach.context("no attach target")
}

/// Attaches to a session on the broker with the ticket session-api gave, as controller.
pub async fn attach_broker(
    stack: &Stack,
    instance: String,
    attach: session_pb::AttachTarget,
) -> Result<Term> {
    attach_broker_at(&stack.broker, &stack.broker_endpoint, instance, attach).await
}

/// [`attach_broker`] on the broker `client` at `endpoint`.
pub async fn attach_broker_at(
    client: &BrokerClient,
    endpoint: &str,
    instance: String,
    attach: session_pb::AttachTarget,
) -> Result<Term> {
    if attach.broker_endpoint != endpoint {
        bail!(
            "session-api sent the bench to {}, not its broker",
            attach.broker_endpoint
        );
    }
    let (input, receiver) = mpsc::channel(256);
    input
        .send(broker_pb::ClientFrame {
            frame: Some(broker_pb::client_frame::Frame::Hello(broker_pb::Hello {
                ticket: attach.ticket,
                session_id: attach.session_id.clone(),
                role: broker_pb::Role::Controller as i32,
                size: None,
                since: None,
                snapshot: false,
                present_only: false,
            })),
        })
        .await
        .map_err(|_| anyhow!("attach channel closed"))?;
    let mut output = tokio::time::timeout(
        READ_PATIENCE,
        client.clone().attach(ReceiverStream::new(receiver)),
    )
    .await
    .map_err(|_| anyhow!("attach took over {READ_PATIENCE:?}"))?
    .context("attach")?
    .into_inner();
    let first = tokio::time::timeout(READ_PATIENCE, output.message())
        .await
        .map_err(|_| anyhow!("no connected frame within {READ_PATIENCE:?}"))??;
    match first.and_then(|frame| frame.frame) {
        Some(broker_pb::server_frame::Frame::Connected(_)) => {}
        other => bail!("the first attach frame was not connected: {other:?}"),
    }
    Ok(Term::Broker {
        input,
        output,
        instance,
        session_id: attach.session_id,
    })
}

/// Opens the gateway WebSocket of a session and waits for its `connected` status.
pub async fn connect_gateway(
    stack: &Stack,
    instance: &str,
    session_id: &str,
    extra_query: &str,
) -> Result<Term> {
    connect_gateway_at(&stack.websocket_url(), instance, session_id, extra_query).await
}

/// [`connect_gateway`] to the gateway at `ws_base` (`ws://127.0.0.1:<port>`).
pub async fn connect_gateway_at(
    ws_base: &str,
    instance: &str,
    session_id: &str,
    extra_query: &str,
) -> Result<Term> {
    connect_gateway_configured(ws_base, instance, session_id, extra_query, None).await
}

/// The client of a typist: tungstenite zero-fills its whole read buffer (128 KiB by default)
/// before every read, a cost a thousand clients in the services' process would add to each
/// echo; a typist reads a few bytes at a time, as the gateway's own sockets do (8 KiB).
pub fn typist_client() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(8 * 1024)
}

/// [`connect_gateway_at`] with the client's WebSocket settings (`None`: tokio-tungstenite's).
pub async fn connect_gateway_configured(
    ws_base: &str,
    instance: &str,
    session_id: &str,
    extra_query: &str,
    config: Option<WebSocketConfig>,
) -> Result<Term> {
    let url = format!(
        "{ws_base}/ws/tool-instances/{instance}/terminal/{session_id}?token={ADMIN_TOKEN}{extra_query}"
    );
    let (mut socket, _) = tokio::time::timeout(
        READ_PATIENCE,
        // As `connect_async` does: Nagle on.
        tokio_tungstenite::connect_async_with_config(url.as_str(), config, false),
    )
    .await
    .map_err(|_| anyhow!("the WebSocket upgrade took over {READ_PATIENCE:?}"))?
    .context("open the gateway WebSocket")?;
    let controller = loop {
        let message = tokio::time::timeout(READ_PATIENCE, socket.next())
            .await
            .map_err(|_| anyhow!("no connected status"))?
            .context("the WebSocket closed before connected")??;
        if let Message::Close(frame) = &message {
            bail!("the WebSocket closed before connected: {frame:?}");
        }
        if let Message::Text(text) = &message {
            let status: serde_json::Value = serde_json::from_str(text)
                .with_context(|| format!("the first text frame is not JSON: {text}"))?;
            if status["status"] == "connected" {
                break status["role"] == "controller";
            }
            bail!("the first text frame was not connected: {text}");
        }
    };
    Ok(Term::Gateway {
        socket,
        instance: instance.to_owned(),
        session_id: session_id.to_owned(),
        controller,
    })
}

/// ttyd's command byte before input (client to server) and before output (server to client).
const TTYD_INPUT: u8 = b'0';
const TTYD_OUTPUT: u8 = b'0';

/// A terminal of the ttyd at `url` (`ws://127.0.0.1:<port>/ws`), with the client's WebSocket
/// settings. ttyd's protocol (1.7): the `tty` subprotocol; the client's first message is a JSON
/// object with the terminal's size, which starts ttyd's command for this socket; then input is
/// `0` and the bytes, and output arrives as `0` and the bytes.
pub async fn connect_ttyd(url: &str, config: Option<WebSocketConfig>) -> Result<Term> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let mut request = url
        .into_client_request()
        .with_context(|| format!("a WebSocket URL: {url}"))?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        tokio_tungstenite::tungstenite::http::HeaderValue::from_static("tty"),
    );
    let (mut socket, _) = tokio::time::timeout(
        READ_PATIENCE,
        tokio_tungstenite::connect_async_with_config(request, config, false),
    )
    .await
    .map_err(|_| anyhow!("the WebSocket upgrade took over {READ_PATIENCE:?}"))?
    .context("open ttyd's WebSocket")?;
    let hello = serde_json::json!({"AuthToken": "", "columns": 80, "rows": 24});
    socket
        .send(Message::Binary(hello.to_string().into_bytes().into()))
        .await
        .context("send ttyd its hello")?;
    Ok(Term::Ttyd { socket })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_filter_matches_labels_in_any_case_and_keeps_the_floors() {
        let filter = ["Docker".to_owned()];
        assert!(Path::Gateway(Backend::Docker, Screens::On).is_wanted(&filter));
        assert!(!Path::Gateway(Backend::Local, Screens::On).is_wanted(&filter));
        assert!(Path::BarePty.is_wanted(&filter));
        assert!(Path::Relayed.is_wanted(&filter));
        let over_tcp = ["over tcp".to_owned(), "python".to_owned()];
        assert!(Path::GatewayOverTcp(Backend::Local).is_wanted(&over_tcp));
        assert!(Path::GatewayPython(Backend::Docker, Reads::Small).is_wanted(&over_tcp));
        assert!(!Path::Broker(Backend::Local, Screens::Off).is_wanted(&over_tcp));
        assert!(Path::Broker(Backend::Local, Screens::Off).is_wanted(&[]));
    }
}
