//! The codec of every ptyhub RPC, generated clients and servers alike: prost, with first
//! buffers sized for terminal traffic.
//!
//! tonic's own prost codec starts every call with an 8 KiB encode buffer and an 8 KiB decode
//! buffer. An `Attach` stream mostly carries keystrokes and echoes of a few bytes, and a gateway
//! or a broker holds thousands of them open: 16 KiB a stream would be most of what a WebSocket
//! costs the gateway. Here both start at [`FIRST_BUFFER_BYTES`], the size of a keystroke's or an
//! echo's frame with room to spare, and grow for larger messages exactly as tonic's do (a message
//! is never split or refused for its buffer; a flood's first frames grow them once); how much is
//! encoded before it is handed to the transport stays tonic's default.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstDecoder, ProstEncoder};

/// The capacity each call's encode and decode buffers start with. 1 KiB (the round before)
/// was two of an idle WebSocket's 13 KiB on the gateway.
pub const FIRST_BUFFER_BYTES: usize = 128;

/// Encoded messages are handed to the transport once this much is buffered (tonic's default).
pub const YIELD_THRESHOLD_BYTES: usize = 32 * 1024;

/// `application/grpc+proto` through prost, with [`FIRST_BUFFER_BYTES`] buffers.
#[derive(Debug, Clone, Copy)]
pub struct ProstCodec<T, U> {
    messages: PhantomData<(T, U)>,
}

impl<T, U> Default for ProstCodec<T, U> {
    fn default() -> Self {
        Self {
            messages: PhantomData,
        }
    }
}

fn buffer_settings() -> BufferSettings {
    BufferSettings::new(FIRST_BUFFER_BYTES, YIELD_THRESHOLD_BYTES)
}

impl<T, U> Codec for ProstCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(buffer_settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(buffer_settings())
    }
}

#[cfg(test)]
mod tests {
    use tonic::codec::{Decoder as _, Encoder as _};

    use super::*;
    use crate::broker::v1::{ClientFrame, ServerFrame};

    // Messages larger than the first buffer (1 MiB pastes, snapshots, floods) go through the
    // generated clients and servers in the services' own tests.

    #[test]
    fn both_directions_start_small() {
        let mut codec = ProstCodec::<ClientFrame, ServerFrame>::default();
        let encoder_settings = codec.encoder().buffer_settings();
        let decoder_settings = codec.decoder().buffer_settings();
        for settings in [encoder_settings, decoder_settings] {
            let expected = BufferSettings::new(FIRST_BUFFER_BYTES, YIELD_THRESHOLD_BYTES);
            assert_eq!(format!("{settings:?}"), format!("{expected:?}"));
        }
    }
}
