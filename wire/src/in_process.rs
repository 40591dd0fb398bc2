//! The in-process road to a broker: what a broker running in the gateway's own process
//! (`ptyhub up`) hands the gateway, so that the gateway calls it without a socket.
//!
//! Every call goes to the broker's gRPC service as a value ([`InProcessBroker::service`]): the
//! same handlers, checks and limits as on its port, with the messages encoded into HTTP bodies
//! and decoded again on the other side. `Attach`, the one call on a keystroke's path, goes
//! further: its frames cross as the messages themselves ([`AttachInProcess`]), with no encoding
//! and no body in between, into the same handler that serves `Attach` on the port. The frames
//! come from the gateway's own code, which builds them within the contract's limits; the
//! broker still checks what it checks on the port (the hello's ticket, an input's size).

use std::fmt;
use std::sync::Arc;

use ptyhub_proto::broker::v1 as broker_pb;
use tonic::Status;
use tonic::codegen::{BoxFuture, BoxStream};
use tonic::service::Routes;

/// A client's frames on an `Attach` stream, the hello first; an error ends the stream as a
/// failed client stream would.
pub type ClientFrames = BoxStream<broker_pb::ClientFrame>;

/// A broker's frames on an `Attach` stream; an error is the last item, as the status that ends
/// the call on the port. Polled again after its end, it answers the end again (`None`), as
/// tonic's `Streaming` does.
pub type ServerFrames = BoxStream<broker_pb::ServerFrame>;

/// A broker's `Attach` called in process: `frames` in, the response stream out, as the port's
/// `Attach` would answer (an error instead of a stream is the call's status).
pub trait AttachInProcess: Send + Sync + 'static {
    fn attach(&self, frames: ClientFrames) -> BoxFuture<ServerFrames, Status>;
}

/// A broker in this process, as the gateway calls it.
#[derive(Clone)]
pub struct InProcessBroker {
    service: Routes,
    attach: Arc<dyn AttachInProcess>,
}

impl InProcessBroker {
    pub fn new(service: Routes, attach: Arc<dyn AttachInProcess>) -> Self {
        Self { service, attach }
    }

    /// The broker's gRPC service, for every call.
    pub fn service(&self) -> &Routes {
        &self.service
    }

    /// The broker's `Attach`, with the frames as values.
    pub fn attach(&self) -> &Arc<dyn AttachInProcess> {
        &self.attach
    }
}

impl fmt::Debug for InProcessBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InProcessBroker").finish_non_exhaustive()
    }
}
