//! Faults a simulated node can have, each given to a fraction of the fleet, chosen
//! deterministically from the node's number so runs repeat.

use std::time::Duration;

use serde::Serialize;

use crate::choria::protocol::DecodedRequest;

/// One kind of misbehaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// No answer to the first K requests.
    Silent,
    /// Every answer delayed.
    Slow,
    /// The first request answered with status 5.
    Error,
    /// The first answer is garbage: wrong hash, truncated JSON or wrong sender.
    Garbage,
    /// Reboots at its third request (forgets keys and lock, announces itself again).
    Reboot,
}

/// Fractions of nodes with each fault (they do not overlap) and their parameters.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Fraction of silent nodes.
    pub silent: f64,
    /// Requests a silent node ignores.
    pub silent_first: u32,
    /// Fraction of slow nodes.
    pub slow: f64,
    /// Delay of a slow node's answers.
    pub slow_by: Duration,
    /// Fraction of nodes whose first answer is an error status.
    pub error: f64,
    /// Fraction of nodes whose first answer is garbage.
    pub garbage: f64,
    /// Fraction of nodes that reboot mid-sequence.
    pub reboot: f64,
}

/// A number in [0, 1) derived from `n` and `salt` (splitmix64).
fn unit(n: usize, salt: u64) -> f64 {
    let mut z = (n as u64)
        .wrapping_add(salt)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// A number in [0, 1) for node `n` and `salt`, the same on every run.
pub(crate) fn unit_of(n: usize, salt: u64) -> f64 {
    unit(n, salt)
}

/// True for about `fraction` of node numbers.
pub fn fraction_pick(n: usize, salt: u64, fraction: f64) -> bool {
    fraction > 0.0 && unit(n, salt) < fraction
}

impl Faults {
    /// The fault node `n` has, if any.
    pub fn pick(&self, n: usize) -> Option<Fault> {
        let x = unit(n, 0xFA17);
        let mut edge = 0.0;
        for (fraction, fault) in [
            (self.silent, Fault::Silent),
            (self.slow, Fault::Slow),
            (self.error, Fault::Error),
            (self.garbage, Fault::Garbage),
            (self.reboot, Fault::Reboot),
        ] {
            edge += fraction;
            if x < edge {
                return Some(fault);
            }
        }
        None
    }

    /// True when no fault is configured.
    pub fn none(&self) -> bool {
        self.silent + self.slow + self.error + self.garbage + self.reboot <= 0.0
    }
}

/// Spoils a reply payload the way node `n`'s garbage fault does.
pub fn garble(payload: &[u8], n: usize, request: &DecodedRequest) -> Vec<u8> {
    match n % 3 {
        // Truncated JSON.
        0 => payload[..payload.len() / 2].to_vec(),
        // Wrong hash: a valid transport whose secure reply was altered.
        1 => {
            use base64::engine::general_purpose::STANDARD;
            use base64::Engine as _;
            let Ok(mut t) = serde_json::from_slice::<serde_json::Value>(payload) else {
                return payload.to_vec();
            };
            let secure = t["data"]
                .as_str()
                .and_then(|d| STANDARD.decode(d).ok())
                .map(|s| String::from_utf8_lossy(&s).replace("OK", "KO"))
                .unwrap_or_default();
            t["data"] = STANDARD.encode(secure).into();
            t.to_string().into_bytes()
        }
        // Wrong sender: an otherwise valid reply from someone else.
        _ => crate::choria::protocol::encode_reply(
            request,
            "impostor.example.net",
            br#"{"action":"","statuscode":0,"statusmsg":"OK","data":{}}"#,
            crate::clock::unix_nanos(),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_are_roughly_honoured_and_repeatable() {
        let faults = Faults {
            silent: 0.1,
            error: 0.1,
            ..Faults::default()
        };
        let picks: Vec<_> = (0..10_000).map(|n| faults.pick(n)).collect();
        let silent = picks.iter().filter(|f| **f == Some(Fault::Silent)).count();
        let error = picks.iter().filter(|f| **f == Some(Fault::Error)).count();
        assert!((800..1200).contains(&silent), "{silent}");
        assert!((800..1200).contains(&error), "{error}");
        assert_eq!(picks[42], faults.pick(42));
        assert!(Faults::default().none());
    }
}
