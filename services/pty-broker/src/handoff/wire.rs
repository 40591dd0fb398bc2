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
    use std::time::Duration;

    use proptest::prelude::*;
    use ptyhub_test_support::fuzz;

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

    /// What one side of a hand-off sends, in order.
    #[derive(Debug, Clone)]
    enum Frame {
        Message(serde_json::Value),
        Blob(Vec<Vec<u8>>),
        Descriptors(usize),
    }

    /// Any JSON a message can be, a few levels deep (numbers as integers: a float's text is
    /// serde_json's business, not the framing's).
    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            ".{0,40}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(".{0,12}", inner, 0..6)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    fn frame() -> impl Strategy<Value = Frame> {
        prop_oneof![
            json_value().prop_map(Frame::Message),
            prop::collection::vec(prop::collection::vec(any::<u8>(), 0..2000), 0..5)
                .prop_map(Frame::Blob),
            (1..=MAX_FDS_PER_CARRIER).prop_map(Frame::Descriptors),
        ]
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// Which file a descriptor is open on.
    fn file_identity(fd: &OwnedFd) -> (u64, u64) {
        use std::os::unix::fs::MetadataExt as _;
        let metadata = std::fs::File::from(fd.try_clone().unwrap())
            .metadata()
            .unwrap();
        (metadata.dev(), metadata.ino())
    }

    async fn send_frames(mut sender: Channel, frames: &[Frame], file: RawFd) {
        for frame in frames {
            match frame {
                Frame::Message(value) => sender.send(value).await.unwrap(),
                Frame::Blob(parts) => {
                    let parts: Vec<Bytes> = parts.iter().cloned().map(Bytes::from).collect();
                    sender.send_blob(&parts).await.unwrap();
                }
                Frame::Descriptors(count) => sender.send_fds(&vec![file; *count]).await.unwrap(),
            }
        }
    }

    /// Whatever a hand-off sends, the other side reads the same, in order, with nothing left
    /// over: a read never takes a byte of the next frame, nor a descriptor's carrier.
    #[test]
    fn fuzz_messages_blobs_and_descriptors_arrive_as_they_were_sent() {
        let runtime = runtime();
        let file = tempfile::tempfile().unwrap();
        let sent_file = file_identity(&OwnedFd::from(file.try_clone().unwrap()));
        fuzz::check(64, prop::collection::vec(frame(), 0..12), |frames| {
            runtime.block_on(async {
                let (left, right) = UnixStream::pair().unwrap();
                let mut receiver = Channel::new(right);
                let sending = send_frames(Channel::new(left), &frames, file.as_raw_fd());
                let receiving = async {
                    for frame in &frames {
                        match frame {
                            Frame::Message(value) => {
                                let received: serde_json::Value = receiver.receive().await.unwrap();
                                prop_assert_eq!(&received, value);
                            }
                            Frame::Blob(parts) => {
                                let blob = receiver.receive_blob().await.unwrap();
                                prop_assert_eq!(&blob[..], &parts.concat()[..]);
                            }
                            Frame::Descriptors(count) => {
                                let fds = receiver.receive_fds(*count).await.unwrap();
                                prop_assert_eq!(fds.len(), *count);
                                for fd in &fds {
                                    prop_assert_eq!(file_identity(fd), sent_file);
                                }
                            }
                        }
                    }
                    Ok::<(), TestCaseError>(())
                };
                let ((), received) = tokio::join!(sending, receiving);
                received?;
                // The sender is gone: nothing was left unread.
                prop_assert!(matches!(
                    receiver.receive::<serde_json::Value>().await,
                    Err(HandOffError::PeerGone)
                ));
                Ok(())
            })
        });
    }

    /// The bytes a real sender writes for `frames` (messages and blobs).
    async fn encoded(frames: &[Frame]) -> Vec<u8> {
        let (left, mut right) = UnixStream::pair().unwrap();
        let reading = async {
            let mut bytes = Vec::new();
            right.read_to_end(&mut bytes).await.unwrap();
            bytes
        };
        let (_, bytes) = tokio::join!(send_frames(Channel::new(left), frames, -1), reading);
        bytes
    }

    /// What a peer may send: random bytes, or what a real sender writes, cut short or with a
    /// byte changed, inserted or dropped.
    fn peer_bytes() -> impl Strategy<Value = Vec<u8>> {
        let without_descriptors = prop::collection::vec(frame(), 1..4).prop_map(|frames| {
            frames
                .into_iter()
                .filter(|frame| !matches!(frame, Frame::Descriptors(_)))
                .collect::<Vec<_>>()
        });
        let real = without_descriptors.prop_map(|frames| runtime().block_on(encoded(&frames)));
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..64),
            real.prop_flat_map(|bytes| {
                let length = bytes.len().max(1);
                (Just(bytes), 0..length, any::<u8>(), 0..4u8)
            })
            .prop_map(|(mut bytes, at, byte, edit)| {
                let at = at.min(bytes.len().saturating_sub(1));
                match edit {
                    0 if !bytes.is_empty() => bytes[at] ^= byte.max(1),
                    1 => bytes.truncate(at),
                    2 => bytes.insert(at, byte),
                    _ if !bytes.is_empty() => {
                        bytes.remove(at);
                    }
                    _ => bytes.push(byte),
                }
                bytes
            }),
        ]
    }

    /// Whatever bytes the peer sends before it goes, every read ends, with a frame or an error,
    /// and none panics.
    #[test]
    fn fuzz_any_bytes_from_the_peer_are_read_or_refused_never_a_panic_or_a_hang() {
        let runtime = runtime();
        let reads = prop::collection::vec(0..3u8, 1..8);
        fuzz::check(128, (peer_bytes(), reads), |(bytes, reads)| {
            runtime.block_on(async {
                let (mut left, right) = UnixStream::pair().unwrap();
                let mut receiver = Channel::new(right);
                left.write_all(&bytes).await.unwrap();
                drop(left);
                for read in reads {
                    let result = tokio::time::timeout(Duration::from_secs(5), async {
                        match read {
                            0 => receiver.receive::<serde_json::Value>().await.map(drop),
                            1 => receiver.receive_blob().await.map(drop),
                            _ => receiver.receive_fds(1).await.map(drop),
                        }
                    })
                    .await;
                    let Ok(result) = result else {
                        return Err(TestCaseError::fail(format!(
                            "read {read} never ended on {bytes:?}"
                        )));
                    };
                    if result.is_err() {
                        break;
                    }
                }
                Ok(())
            })
        });
    }
}
