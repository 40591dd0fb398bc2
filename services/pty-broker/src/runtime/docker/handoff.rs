//! A Docker session as it goes to the next broker process (`handoff/`).
//!
//! The broker starts every exec over a connection of its own (`attach.rs`), so the exec's TTY
//! stream is a socket, a descriptor like a local PTY master: it goes over the hand-off socket
//! with `SCM_RIGHTS`, and the engine never notices that another process reads and writes it. With
//! it go the exec's id (for its exit code, which the engine keeps, and for resizes), the
//! container, the leader's identity and view (for signals), and the output that arrived behind
//! the engine's answer to the start and was not read yet. The session's crash record in
//! `<data_dir>/docker-sessions/` stays where it is: the old process keeps it, the new one
//! removes it when the session ends.

use std::os::fd::{OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::endpoint::Connection;
use super::group::{GroupView, Leader, SESSION_MARKER_VARIABLE, SessionGroup};
use super::process::DockerProcess;
use crate::runtime::{HandedProcess, ProcessHandOff, RuntimeError};

/// What the next broker process needs, beside the connection's descriptor, to go on with one
/// Docker session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DockerHandOff {
    /// The container as the session named it.
    pub(super) container: String,
    pub(super) container_id: String,
    pub(super) exec_id: String,
    pub(super) host_pid: Option<u32>,
    pub(super) view: GroupView,
    pub(super) leader: Option<Leader>,
    /// Whether the connection is TCP (else a Unix socket).
    pub(super) tcp: bool,
    /// Output that came with the engine's answer and was not read yet.
    pub(super) unread: Vec<u8>,
}

impl DockerHandOff {
    /// The session's processes as the previous process found them.
    pub(super) fn group(&self, session_id: Uuid) -> SessionGroup {
        SessionGroup {
            container_id: self.container_id.clone(),
            marker: format!("{SESSION_MARKER_VARIABLE}={session_id}"),
            view: self.view.clone(),
            leader: self.leader,
        }
    }
}

/// The exec stream's connection as a [`DockerProcess`] knows it.
#[derive(Debug)]
pub(super) struct ConnectionHandOff {
    /// Open as long as the session's output or input is.
    pub fd: RawFd,
    pub tcp: bool,
    /// Shared with the output reader ([`super::attach::Unread`]).
    pub unread: Arc<Mutex<Bytes>>,
}

impl DockerProcess {
    pub(super) fn connection_hand_off(&self) -> Result<ProcessHandOff, RuntimeError> {
        // An exec that has exited goes too: the engine keeps its exit code for the next process
        // to ask. The session task is frozen: nobody reads the stream meanwhile.
        let unread = self
            .connection
            .unread
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .to_vec();
        Ok(ProcessHandOff {
            process: HandedProcess::Docker(DockerHandOff {
                container: self.container.clone(),
                container_id: self.group.container_id.clone(),
                exec_id: self.exec_id.clone(),
                host_pid: self.host_pid,
                view: self.group.view.clone(),
                leader: self.group.leader,
                tcp: self.connection.tcp,
                unread,
            }),
            fds: vec![self.connection.fd],
        })
    }
}

/// The handed-over descriptor as a connection this process's runtime drives.
pub(super) fn adopt_connection(fd: OwnedFd, tcp: bool) -> std::io::Result<Box<dyn Connection>> {
    if tcp {
        let stream = std::net::TcpStream::from(fd);
        stream.set_nonblocking(true)?;
        Ok(Box::new(tokio::net::TcpStream::from_std(stream)?))
    } else {
        let stream = std::os::unix::net::UnixStream::from(fd);
        stream.set_nonblocking(true)?;
        Ok(Box::new(tokio::net::UnixStream::from_std(stream)?))
    }
}
