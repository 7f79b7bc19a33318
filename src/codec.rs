//! The gRPC codec of the generated servers: prost's encoder, and a decoder that answers a
//! request that is not valid protobuf with INVALID_ARGUMENT and prost's description of the fault.
//!
//! tonic's `ProstCodec` answers INTERNAL, following grpc/doc/statuscodes.md ("Error parsing
//! request proto: INTERNAL"). The emulator gives one code for one fault on every protocol, and
//! Connect, whose specification names `invalid_argument` for a request that cannot be decoded,
//! already answers that; so gRPC and gRPC-Web do too. The generated servers use this codec through
//! tonic-prost-build's `codec_path` (see `build.rs`); clients keep `tonic_prost::ProstCodec`.

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

/// prost encoding, INVALID_ARGUMENT for undecodable requests.
#[derive(Debug)]
pub struct ServerCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for ServerCodec<T, U> {
    fn default() -> Self {
        ServerCodec(PhantomData)
    }
}

impl<T, U> Codec for ServerCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = InvalidArgumentDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        InvalidArgumentDecoder(PhantomData)
    }
}

/// Decodes `U`; a decode error is INVALID_ARGUMENT carrying prost's message (which names the
/// message and field where decoding stopped, e.g. `GetSandboxRequest.sandbox_id: invalid wire
/// type`).
#[derive(Debug)]
pub struct InvalidArgumentDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for InvalidArgumentDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf)
            .map(Some)
            .map_err(|error| Status::invalid_argument(format!("failed to decode protobuf message: {error}")))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}
