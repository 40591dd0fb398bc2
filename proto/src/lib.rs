//! The ptyhub wire types: generated protobuf messages, tonic clients and servers, and the encoded
//! file descriptor set that every service hands to server reflection.
//!
//! Generated types stop at each service's `grpc.rs` adapter; nothing else should name them.

pub mod codec;

/// `ptyhub.broker.v1`: the pty-broker's spawn/kill/list, event stream and `Attach`.
pub mod broker {
    pub mod v1 {
        tonic::include_proto!("ptyhub.broker.v1");
    }
}

/// `ptyhub.session.v1`: session-api's instances, sessions, aliases and broker registry.
pub mod session {
    pub mod v1 {
        tonic::include_proto!("ptyhub.session.v1");
    }
}

/// The encoded `FileDescriptorSet` of every ptyhub proto, for `tonic-reflection`.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/ptyhub_descriptor.bin"));
