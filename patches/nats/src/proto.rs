// Copyright 2020-2022 The NATS Authors
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
// http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

use std::convert::TryFrom;
use std::io::prelude::*;
use std::io::{self, Error, ErrorKind};
use std::str::{self, FromStr};

use crate::connect::ConnectInfo;
use crate::{header::HeaderMap, inject_io_failure, ServerInfo};

/// A protocol operation sent by the server.
#[derive(Debug)]
pub(crate) enum ServerOp {
    /// `INFO {["option_name":option_value],...}`
    Info(ServerInfo),

    /// `MSG <subject> <sid> [reply-to] <#bytes>\r\n[payload]\r\n`
    Msg {
        subject: String,
        sid: u64,
        reply_to: Option<String>,
        payload: Vec<u8>,
    },

    /// `HMSG <subject> <sid> [reply-to] <# header bytes> <# total
    /// bytes>\r\n<version line>\r\n[headers]\r\n\r\n[payload]\r\n`
    Hmsg {
        subject: String,
        headers: HeaderMap,
        sid: u64,
        reply_to: Option<String>,
        payload: Vec<u8>,
    },

    /// `PING`
    Ping,

    /// `PONG`
    Pong,

    /// `-ERR <error message>`
    Err(String),

    /// Unknown protocol message.
    Unknown(String),
}

// choria patch: the longest protocol line read. nats-server sends a MSG line as long
// as the PUB line it was made of (up to its `max_control_line`, 4 KiB by default and
// configurable) plus the subscription id, so any publisher could make it longer than
// the fixed 4 KiB buffer upstream read lines into: that dropped the connection, or
// panicked the reader thread when more than 4 KiB of a line arrived without its end.
// Lines are now read into a vector the reader keeps, never zeroed, up to this bound.
const MAX_COMMAND_LINE: usize = 1024 * 1024;

/// choria patch: the largest HMSG header block parsed; a larger one is read past
/// (`header::OVERSIZED`). A status such as "no responders" takes a few bytes.
pub const MAX_HEADER_BLOCK: usize = 8 * 1024;

// adapted from `std::io::BufRead::read_until`: a line of at most `MAX_COMMAND_LINE`
// bytes into `buf` (cleared first); its length, 0 at the end of the stream.
fn read_line<R: BufRead + ?Sized>(r: &mut R, buf: &mut Vec<u8>) -> io::Result<usize> {
    buf.clear();
    loop {
        let available = match r.fill_buf() {
            Ok(n) => n,
            Err(ref e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let (done, len) = match memchr::memchr(b'\n', available) {
            Some(i) => (true, i + 1),
            None => (false, available.len()),
        };
        if buf.len() + len > MAX_COMMAND_LINE {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "received command exceeded the command line limit",
            ));
        }
        buf.extend_from_slice(&available[..len]);
        r.consume(len);
        if done || len == 0 {
            return Ok(buf.len());
        }
    }
}

/// Decodes a single operation from the server.
///
/// If the connection is closed, `None` will be returned.
pub(crate) fn decode(stream: impl BufRead) -> io::Result<Option<ServerOp>> {
    decode_with(stream, &mut Vec::new())
}

/// [`decode`] reading the command line into `command_buf`, which a reader keeps from
/// one operation to the next (choria patch: no 4 KiB buffer zeroed per message).
pub(crate) fn decode_with(
    mut stream: impl BufRead,
    command_buf: &mut Vec<u8>,
) -> io::Result<Option<ServerOp>> {
    // Inject random I/O failures when testing.
    inject_io_failure()?;

    // Read a line, which should be human readable.
    let command_len = read_line(&mut stream, command_buf)?;
    if command_len == 0 {
        // If zero bytes were read, the connection is closed.
        return Ok(None);
    }

    // choria patch: the line is read as bytes and split on ASCII whitespace, as
    // nats-server splits it. A MSG line carries the publisher's subject and reply-to,
    // which nats-server passes on byte for byte: invalid UTF-8 in them made upstream's
    // `str::from_utf8` fail the line, and a Unicode space (U+00A0, U+2028) made
    // `split_whitespace` count one argument too many; either way the client
    // reconnected, once per message. Subject and reply-to are now taken lossily
    // (U+FFFD for what is not UTF-8); the operation and the numbers are ASCII.
    let line = &command_buf[..command_len];
    let mut words = line
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty());
    let op = words.next().unwrap_or(b"");

    if op.eq_ignore_ascii_case(b"PING") {
        return Ok(Some(ServerOp::Ping));
    }

    if op.eq_ignore_ascii_case(b"PONG") {
        return Ok(Some(ServerOp::Pong));
    }

    if op.eq_ignore_ascii_case(b"INFO") {
        // The server's own line: UTF-8 JSON.
        let line = str::from_utf8(line).map_err(|err| Error::new(ErrorKind::InvalidInput, err))?;
        // Parse the JSON-formatted server information.
        let server_info = ServerInfo::parse(&line["INFO".len()..])
            .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "cannot parse server info"))?;

        return Ok(Some(ServerOp::Info(server_info)));
    }

    if op.eq_ignore_ascii_case(b"MSG") {
        // Parse the operation syntax: MSG <subject> <sid> [reply-to] <#bytes>
        let mut args: [&[u8]; 4] = [&[]; 4];
        let (subject, sid, reply_to, num_bytes) = match collect_args(words, &mut args) {
            3 => (args[0], args[1], None, args[2]),
            4 => (args[0], args[1], Some(args[2]), args[3]),
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    "invalid number of arguments after MSG",
                ));
            }
        };

        // Convert the slice into an owned string.
        let subject = lossy(subject);

        // Parse the subject ID.
        let sid: u64 = number(sid).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidInput,
                "cannot parse sid argument after MSG",
            )
        })?;

        // Convert the slice into an owned string.
        let reply_to = reply_to.map(lossy);

        // Parse the number of payload bytes.
        let num_bytes: u32 = number(num_bytes).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidInput,
                "cannot parse the number of bytes argument after MSG",
            )
        })?;

        // Read the payload.
        // choria patch: read into the vector's spare capacity instead of zeroing it
        // first (one memset of every message's size saved).
        let mut payload = Vec::with_capacity(num_bytes as usize);
        (&mut stream)
            .take(u64::from(num_bytes))
            .read_to_end(&mut payload)?;
        if payload.len() != num_bytes as usize {
            return Err(Error::new(
                ErrorKind::UnexpectedEof,
                "the connection ended inside a MSG payload",
            ));
        }
        // Read "\r\n".
        stream.read_exact(&mut [0_u8; 2])?;

        return Ok(Some(ServerOp::Msg {
            subject,
            sid,
            reply_to,
            payload,
        }));
    }

    if op.eq_ignore_ascii_case(b"HMSG") {
        // Parse the operation syntax:
        // `HMSG <subject> <sid> [reply-to] <# header bytes>
        // <# total bytes>\r\n<version line>\r\n[headers]\r\n\r\n[payload]\r\n`
        let mut args: [&[u8]; 5] = [&[]; 5];
        let (subject, sid, reply_to, num_header_bytes, num_bytes) =
            match collect_args(words, &mut args) {
                4 => (args[0], args[1], None, args[2], args[3]),
                5 => (args[0], args[1], Some(args[2]), args[3], args[4]),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidInput,
                        "invalid number of arguments after HMSG",
                    ));
                }
            };

        // Convert the slice into an owned string.
        let subject = lossy(subject);

        // Parse the subject ID.
        let sid: u64 = number(sid).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidInput,
                "cannot parse sid argument after HMSG",
            )
        })?;

        // Convert the slice into an owned string.
        let reply_to = reply_to.map(lossy);

        // Parse the number of payload bytes.
        let num_header_bytes: u32 = number(num_header_bytes).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidInput,
                "cannot parse the number of header bytes argument after \
                     HMSG",
            )
        })?;

        // Parse the number of payload bytes.
        let num_bytes: u32 = number(num_bytes).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidInput,
                "cannot parse the number of bytes argument after HMSG",
            )
        })?;

        if num_bytes < num_header_bytes {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "number of header bytes was greater than or equal to the \
                 total number of bytes after HMSG",
            ));
        }

        let num_payload_bytes = num_bytes - num_header_bytes;

        // `HMSG <subject> <sid> [reply-to]
        // <# header bytes> <# total bytes>\r\n
        // <version line>\r\n[headers]\r\n\r\n[payload]\r\n`

        // choria patch: a header block over MAX_HEADER_BLOCK bytes is read past, not
        // parsed (nats-server passes an HPUB's block through unread, up to the
        // payload limit, and parsing hundreds of KB of tiny lines into a map on the
        // reader thread made the server drop us as a slow consumer): the message is
        // delivered with the one header `header::OVERSIZED` naming the block's size.
        let headers = if num_header_bytes as usize > MAX_HEADER_BLOCK {
            let skipped = io::copy(
                &mut stream.by_ref().take(u64::from(num_header_bytes)),
                &mut io::sink(),
            )?;
            if skipped < u64::from(num_header_bytes) {
                return Err(Error::new(
                    ErrorKind::UnexpectedEof,
                    "the connection ended inside an HMSG header block",
                ));
            }
            let mut oversized = HeaderMap::new();
            oversized.insert(crate::header::OVERSIZED, num_header_bytes.to_string());
            oversized
        } else {
            // Read the header payload.
            let mut header_payload = Vec::new();
            header_payload.resize(num_header_bytes as usize, 0_u8);
            stream.read_exact(&mut header_payload[..])?;

            // choria patch: headers that do not parse are the publisher's doing (the
            // server passes HPUB's header bytes through unread), not a broken
            // connection: the message is delivered without them, as the Go client
            // delivers it. Upstream returned the error, and the client reconnected
            // once per such message.
            HeaderMap::try_from(&*header_payload).unwrap_or_default()
        };

        // Read the payload.
        let mut payload = Vec::new();
        payload.resize(num_payload_bytes as usize, 0_u8);
        stream.read_exact(&mut payload[..])?;
        // Read "\r\n".
        stream.read_exact(&mut [0_u8; 2])?;

        return Ok(Some(ServerOp::Hmsg {
            subject,
            headers,
            sid,
            reply_to,
            payload,
        }));
    }

    if op.eq_ignore_ascii_case(b"-ERR") {
        // Extract the message argument.
        let msg = String::from_utf8_lossy(&line["-ERR".len()..])
            .trim()
            .trim_matches('\'')
            .to_string();

        return Ok(Some(ServerOp::Err(msg)));
    }

    Ok(Some(ServerOp::Unknown(lossy(line))))
}

/// choria patch: up to `args.len()` words into `args`, and how many there were
/// (one more than fit when there were more).
fn collect_args<'a>(words: impl Iterator<Item = &'a [u8]>, args: &mut [&'a [u8]]) -> usize {
    let mut count = 0;
    for word in words {
        if count == args.len() {
            return count + 1;
        }
        args[count] = word;
        count += 1;
    }
    count
}

/// choria patch: a subject or reply-to as the publisher sent it, U+FFFD for bytes
/// that are not UTF-8.
fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// choria patch: a decimal number of the protocol line.
fn number<T: FromStr>(bytes: &[u8]) -> Option<T> {
    str::from_utf8(bytes).ok()?.parse().ok()
}

/// A protocol operation sent by the client.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ClientOp<'a> {
    /// `CONNECT {["option_name":option_value],...}`
    Connect(&'a ConnectInfo),

    /// `PUB <subject> [reply-to] <#bytes>\r\n[payload]\r\n`
    Pub {
        subject: &'a str,
        reply_to: Option<&'a str>,
        payload: &'a [u8],
    },

    /// `HPUB <subject> [reply-to] <#bytes>\r\n[payload]\r\n`
    Hpub {
        subject: &'a str,
        reply_to: Option<&'a str>,
        headers: &'a HeaderMap,
        payload: &'a [u8],
    },

    /// `SUB <subject> [queue group] <sid>\r\n`
    Sub {
        subject: &'a str,
        queue_group: Option<&'a str>,
        sid: u64,
    },

    /// `UNSUB <sid> [max_msgs]`
    Unsub { sid: u64, max_msgs: Option<u64> },

    /// `PING`
    Ping,

    /// `PONG`
    Pong,
}

/// Encodes a single operation from the client.
pub(crate) fn encode(mut stream: impl Write, op: ClientOp<'_>) -> io::Result<()> {
    match &op {
        ClientOp::Connect(connect_info) => {
            let op = format!(
                "CONNECT {}\r\n",
                connect_info.dump().ok_or_else(|| Error::new(
                    ErrorKind::InvalidData,
                    "cannot serialize connect info"
                ))?
            );
            stream.write_all(op.as_bytes())?;
        }

        ClientOp::Pub {
            subject,
            reply_to,
            payload,
        } => {
            stream.write_all(b"PUB ")?;
            stream.write_all(subject.as_bytes())?;
            stream.write_all(b" ")?;

            if let Some(reply_to) = reply_to {
                stream.write_all(reply_to.as_bytes())?;
                stream.write_all(b" ")?;
            }

            let mut buf = itoa::Buffer::new();
            stream.write_all(buf.format(payload.len()).as_bytes())?;
            stream.write_all(b"\r\n")?;

            stream.write_all(payload)?;
            stream.write_all(b"\r\n")?;
        }

        ClientOp::Hpub {
            subject,
            reply_to,
            headers,
            payload,
        } => {
            stream.write_all(b"HPUB ")?;
            stream.write_all(subject.as_bytes())?;
            stream.write_all(b" ")?;

            if let Some(reply_to) = reply_to {
                stream.write_all(reply_to.as_bytes())?;
                stream.write_all(b" ")?;
            }

            let header_bytes = headers.to_bytes();

            let header_len = header_bytes.len();
            let total_len = header_len + payload.len();

            let mut hlen_buf = itoa::Buffer::new();
            stream.write_all(hlen_buf.format(header_len).as_bytes())?;

            stream.write_all(b" ")?;

            let mut tlen_buf = itoa::Buffer::new();
            stream.write_all(tlen_buf.format(total_len).as_bytes())?;

            stream.write_all(b"\r\n")?;

            stream.write_all(&header_bytes)?;
            stream.write_all(payload)?;
            stream.write_all(b"\r\n")?;
        }

        ClientOp::Sub {
            subject,
            queue_group,
            sid,
        } => {
            let op = if let Some(queue_group) = queue_group {
                format!("SUB {subject} {queue_group} {sid}\r\n")
            } else {
                format!("SUB {subject} {sid}\r\n")
            };
            stream.write_all(op.as_bytes())?;
        }

        ClientOp::Unsub { sid, max_msgs } => {
            let op = if let Some(max_msgs) = max_msgs {
                format!("UNSUB {sid} {max_msgs}\r\n")
            } else {
                format!("UNSUB {sid}\r\n")
            };
            stream.write_all(op.as_bytes())?;
        }

        ClientOp::Ping => {
            stream.write_all(b"PING\r\n")?;
        }

        ClientOp::Pong => {
            stream.write_all(b"PONG\r\n")?;
        }
    }

    Ok(())
}
