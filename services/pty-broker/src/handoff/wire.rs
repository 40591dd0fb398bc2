//! The hand-off socket's framing: JSON messages and raw byte blobs, each behind its length, and
//! descriptors passed with `SCM_RIGHTS` on a one-byte carrier of their own.
//!
//! Every read is of an exact length and never buffered ahead: a plain read that consumed a
//! carrier byte would drop the descriptors on it. This module is one of the broker's few
//! `unsafe` users: a descriptor received from the kernel is taken into an `OwnedFd`.

#![allow(unsafe_code)]

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

use bytes::{Bytes, BytesMut};
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, Interest};
use tokio::net::UnixStream;

use super::HandOffError;

/// The largest JSON message either side accepts.
const MAX_MESSAGE_BYTES: u32 = 16 << 20;
/// The largest blob (a ring's contents or a screen): the largest ring a broker may keep.
const MAX_BLOB_BYTES: u64 = 1 << 30;
/// The most descriptors one carrier byte brings.
pub(super) const MAX_FDS_PER_CARRIER: usize = 8;
/// The carrier byte's value, checked on arrival.
const CARRIER: u8 = b'F';

/// One end of a hand-off connection.
#[derive(Debug)]
pub(super) struct Channel {
    stream: UnixStream,
}

impl Channel {
    pub fn new(stream: UnixStream) -> Self {
        Self { stream }
    }

    /// The peer's process id, as the kernel saw it connect.
    pub fn peer_pid(&self) -> Option<i32> {
        self.stream.peer_cred().ok().and_then(|cred| cred.pid())
    }

    /// The uid and pid of the process at the other end, as the kernel saw it connect.
    pub fn peer_credentials(&self) -> Option<(u32, Option<i32>)> {
        self.stream
            .peer_cred()
            .ok()
            .map(|cred| (cred.uid(), cred.pid()))
    }

    pub async fn send<T: Serialize>(&mut self, message: &T) -> Result<(), HandOffError> {
        let json = serde_json::to_vec(message).map_err(HandOffError::Encode)?;
        let length = u32::try_from(json.len())
            .ok()
            .filter(|length| *length <= MAX_MESSAGE_BYTES)
            .ok_or(HandOffError::TooLarge("message"))?;
        self.stream.write_all(&length.to_be_bytes()).await?;
        self.stream.write_all(&json).await?;
        Ok(())
    }

    pub async fn receive<T: DeserializeOwned>(&mut self) -> Result<T, HandOffError> {
        let length = self.stream.read_u32().await.map_err(peer_gone)?;
        if length > MAX_MESSAGE_BYTES {
            return Err(HandOffError::TooLarge("message"));
        }
        let mut json = vec![0; length as usize];
        self.stream.read_exact(&mut json).await.map_err(peer_gone)?;
        serde_json::from_slice(&json).map_err(HandOffError::Decode)
    }

    /// Sends `parts` as one blob.
    pub async fn send_blob(&mut self, parts: &[Bytes]) -> Result<(), HandOffError> {
        let length: u64 = parts.iter().map(|part| part.len() as u64).sum();
        if length > MAX_BLOB_BYTES {
            return Err(HandOffError::TooLarge("blob"));
        }
        self.stream.write_all(&length.to_be_bytes()).await?;
        for part in parts {
            self.stream.write_all(part).await?;
        }
        Ok(())
    }

    pub async fn receive_blob(&mut self) -> Result<Bytes, HandOffError> {
        let length = self.stream.read_u64().await.map_err(peer_gone)?;
        if length > MAX_BLOB_BYTES {
            return Err(HandOffError::TooLarge("blob"));
        }
        let mut blob = BytesMut::zeroed(length as usize);
        self.stream.read_exact(&mut blob).await.map_err(peer_gone)?;
        Ok(blob.freeze())
    }

    /// Sends duplicates of `fds` (the sender keeps its own).
    pub async fn send_fds(&mut self, fds: &[RawFd]) -> Result<(), HandOffError> {
        if fds.is_empty() || fds.len() > MAX_FDS_PER_CARRIER {
            return Err(HandOffError::Protocol(format!(
                "{} descriptors on one carrier",
                fds.len()
            )));
        }
        self.stream.flush().await?;
        loop {
            self.stream.writable().await?;
            let sent = self.stream.try_io(Interest::WRITABLE, || {
                let carrier = [CARRIER];
                let iov = [IoSlice::new(&carrier)];
                let rights = [ControlMessage::ScmRights(fds)];
                sendmsg::<()>(
                    self.stream.as_raw_fd(),
                    &iov,
                    &rights,
                    MsgFlags::empty(),
                    None,
                )
                .map_err(io::Error::from)
            });
            match sent {
                Ok(1) => return Ok(()),
                Ok(_) => continue,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Receives exactly `count` descriptors, close-on-exec.
    pub async fn receive_fds(&mut self, count: usize) -> Result<Vec<OwnedFd>, HandOffError> {
        loop {
            self.stream.readable().await?;
            let received = self.stream.try_io(Interest::READABLE, || {
                let mut carrier = [0u8; 1];
                let mut iov = [IoSliceMut::new(&mut carrier)];
                let mut space = nix::cmsg_space!([RawFd; MAX_FDS_PER_CARRIER]);
                let message = recvmsg::<()>(
                    self.stream.as_raw_fd(),
                    &mut iov,
                    Some(&mut space),
                    MsgFlags::MSG_CMSG_CLOEXEC,
                )
                .map_err(io::Error::from)?;
                let mut fds = Vec::new();
                let truncated = message.cmsgs().is_err();
                if let Ok(cmsgs) = message.cmsgs() {
                    for cmsg in cmsgs {
                        if let ControlMessageOwned::ScmRights(rights) = cmsg {
                            // SAFETY: the kernel just installed these descriptors in this
                            // process for this message; nothing else knows or owns them.
                            fds.extend(
                                rights
                                    .into_iter()
                                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                            );
                        }
                    }
                }
                Ok((message.bytes, carrier[0], truncated, fds))
            });
            match received {
                Ok((0, ..)) => return Err(HandOffError::PeerGone),
                Ok((_, byte, truncated, fds)) => {
                    if byte != CARRIER || truncated || fds.len() != count {
                        return Err(HandOffError::Protocol(format!(
                            "expected {count} descriptors, got {}{}",
                            fds.len(),
                            if truncated { " (truncated)" } else { "" }
                        )));
                    }
                    return Ok(fds);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                Err(error) => return Err(error.into()),
            }
        }
    }
}

/// An early end of the stream means the other process went away.
fn peer_gone(error: io::Error) -> HandOffError {
    if error.kind() == io::ErrorKind::UnexpectedEof {
        HandOffError::PeerGone
    } else {
        HandOffError::Io(error)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Seek as _, Write as _};

    use super::*;

    #[tokio::test]
    async fn messages_blobs_and_descriptors_arrive_in_order() {
        let (left, right) = UnixStream::pair().unwrap();
        let (mut sender, mut receiver) = (Channel::new(left), Channel::new(right));
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"shared").unwrap();
        sender.send(&vec!["hello".to_owned()]).await.unwrap();
        sender.send_fds(&[file.as_raw_fd()]).await.unwrap();
        sender
            .send_blob(&[Bytes::from_static(b"ab"), Bytes::from_static(b"cd")])
            .await
            .unwrap();
        sender.send(&7u32).await.unwrap();

        let hello: Vec<String> = receiver.receive().await.unwrap();
        assert_eq!(hello, ["hello"]);
        let mut fds = receiver.receive_fds(1).await.unwrap();
        let mut received = std::fs::File::from(fds.pop().unwrap());
        received.rewind().unwrap();
        let mut text = String::new();
        received.read_to_string(&mut text).unwrap();
        assert_eq!(text, "shared");
        assert_eq!(&receiver.receive_blob().await.unwrap()[..], b"abcd");
        assert_eq!(receiver.receive::<u32>().await.unwrap(), 7);
        drop(sender);
        assert!(matches!(
            receiver.receive::<u32>().await,
            Err(HandOffError::PeerGone)
        ));
    }

    #[tokio::test]
    async fn a_wrong_count_of_descriptors_is_a_protocol_error() {
        let (left, right) = UnixStream::pair().unwrap();
        let (mut sender, mut receiver) = (Channel::new(left), Channel::new(right));
        let file = tempfile::tempfile().unwrap();
        sender.send_fds(&[file.as_raw_fd()]).await.unwrap();
        let error = receiver.receive_fds(2).await.unwrap_err();
        assert!(
            error.to_string().contains("expected 2 descriptors"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn an_oversized_length_is_refused_before_allocating() {
        let (mut left, right) = UnixStream::pair().unwrap();
        let mut receiver = Channel::new(right);
        left.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
        assert!(matches!(
            receiver.receive::<u32>().await,
            Err(HandOffError::TooLarge("message"))
        ));
    }
}
