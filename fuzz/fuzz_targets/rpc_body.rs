//! Fuzzes the MCollective-RPC request and reply body decoders; what decodes must
//! re-encode and decode again.
#![no_main]

use choria_provisioner::choria::protocol::mcorpc::{RpcReply, RpcRequestBody};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(reply) = RpcReply::decode(data) {
        let again = RpcReply::decode(&reply.encode()).expect("our own reply body decodes");
        assert_eq!(again.statuscode, reply.statuscode);
    }
    if let Ok(body) = RpcRequestBody::decode(data) {
        RpcRequestBody::decode(&body.encode()).expect("our own request body decodes");
    }
});
