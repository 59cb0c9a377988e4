//! The fleet simulator as a provisioning-mode server, against a real nats-server:
//! hand-made v1 and v2 requests and the exact replies, what it drops, and discovery.
#![cfg(feature = "sim")]
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

mod support;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use choria_provisioner::choria::protocol::Filter;
use choria_provisioner::crypto::ids;
use serde_json::{json, Value};
use support::sim_node::*;

#[test]
fn a_hand_made_v1_request_is_answered_as_the_worked_example_says() {
    let rig = rig(2, |_| {});
    let hand = Hand::inventory();
    let reply = exchange(
        &rig.nc,
        &format!("provisioning.node.{}", id(1)),
        &hand.v1(),
        &hand.reply_to(),
        WAIT,
    )
    .expect("a reply");

    let transport: Value = serde_json::from_slice(&reply).unwrap();
    assert_eq!(keys(&transport), ["protocol", "data", "headers"]);
    assert_eq!(transport["protocol"], "choria:transport:1");
    assert_eq!(keys(&transport["headers"]), ["mc_sender", "seen-by"]);
    assert_eq!(transport["headers"]["mc_sender"], id(1));
    let secure_bytes = B64.decode(transport["data"].as_str().unwrap()).unwrap();
    let secure: Value = serde_json::from_slice(&secure_bytes).unwrap();
    assert_eq!(keys(&secure), ["protocol", "message", "hash"]);
    assert_eq!(secure["protocol"], "choria:secure:reply:1");
    let message = secure["message"].as_str().unwrap();
    assert_eq!(secure["hash"], sha256_b64(message.as_bytes()));
    let reply: Value = serde_json::from_str(message).unwrap();
    assert_eq!(keys(&reply), ["protocol", "message", "envelope"]);
    assert_eq!(reply["protocol"], "choria:reply:1");
    assert_eq!(
        keys(&reply["envelope"]),
        ["requestid", "senderid", "agent", "time"]
    );
    assert_eq!(reply["envelope"]["requestid"], hand.id.as_str());
    assert_eq!(reply["envelope"]["senderid"], id(1));
    assert_eq!(reply["envelope"]["agent"], "rpcutil");
    assert!((reply["envelope"]["time"].as_i64().unwrap() - now()).abs() <= 2);
    let body: Value = serde_json::from_str(reply["message"].as_str().unwrap()).unwrap();
    assert_eq!(keys(&body), ["action", "statuscode", "statusmsg", "data"]);
    assert_eq!(body["statuscode"], 0);
    assert_eq!(body["statusmsg"], "OK");
    assert_eq!(
        keys(&body["data"]),
        [
            "agents",
            "classes",
            "collectives",
            "data_plugins",
            "facts",
            "machines",
            "main_collective",
            "version",
            "upgradable"
        ]
    );
    assert_eq!(
        body["data"]["agents"],
        json!(["choria_provision", "choria_util", "discovery", "rpcutil"])
    );
    assert_eq!(body["data"]["main_collective"], "provisioning");
    assert_eq!(body["data"]["facts"]["identity"], id(1));
    assert_eq!(rig.sim.summary().nodes[1].rpcs, ["rpcutil#inventory"]);
    assert!(rig.sim.summary().nodes[0].rpcs.is_empty());
}

#[test]
fn a_hand_made_v2_request_is_answered_by_a_v2_node_which_drops_v1() {
    let v1_rig = rig(1, |_| {});
    let rig = rig(1, |o| o.v2 = true);
    let subject = format!("provisioning.node.{}", id(0));
    let hand = Hand {
        id: ids::ksuid(),
        ..Hand::inventory()
    };
    let reply = exchange(&rig.nc, &subject, &hand.v2(), &hand.reply_to(), WAIT).expect("a reply");
    let transport: Value = serde_json::from_slice(&reply).unwrap();
    assert_eq!(transport["protocol"], "io.choria.protocol.v2.transport");
    assert_eq!(transport["headers"]["sender"], id(0));
    let secure: Value =
        serde_json::from_slice(&B64.decode(transport["data"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(keys(&secure), ["protocol", "reply", "hash"]);
    assert_eq!(secure["protocol"], "io.choria.protocol.v2.secure_reply");
    let reply_bytes = B64.decode(secure["reply"].as_str().unwrap()).unwrap();
    assert_eq!(secure["hash"], sha256_b64(&reply_bytes));
    let reply: Value = serde_json::from_slice(&reply_bytes).unwrap();
    assert_eq!(
        keys(&reply),
        ["protocol", "message", "request", "sender", "agent", "time"]
    );
    assert_eq!(reply["protocol"], "io.choria.protocol.v2.reply");
    assert_eq!(reply["request"], hand.id.as_str());
    assert_eq!(reply["sender"], id(0));
    let ns = reply["time"].as_i64().unwrap();
    assert!((ns / 1_000_000_000 - now()).abs() <= 2, "nanoseconds: {ns}");
    let body: Value =
        serde_json::from_slice(&B64.decode(reply["message"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(body["statuscode"], 0);

    // A v2 node's security provider cannot decode v1: no reply at all.
    let v1 = Hand::inventory();
    assert!(exchange(&rig.nc, &subject, &v1.v1(), &v1.reply_to(), SILENCE).is_none());
    // And a v1 node drops v2.
    let hand = Hand {
        id: ids::ksuid(),
        ..Hand::inventory()
    };
    assert!(exchange(&v1_rig.nc, &subject, &hand.v2(), &hand.reply_to(), SILENCE).is_none());
    assert_eq!(v1_rig.sim.progress().dropped, 1);
}

#[test]
fn requests_a_provisioning_mode_server_drops_get_no_reply() {
    let rig = rig(2, |_| {});
    let subject = format!("provisioning.node.{}", id(0));
    let filter = |agent: Value, identity: Value, fact: Value| json!({"fact": fact, "cf_class": [], "agent": agent, "identity": identity, "compound": []});
    let dropped = [
        (
            "collective",
            Hand {
                collective: "mcollective",
                ..Hand::inventory()
            },
        ),
        (
            "ttl below 30",
            Hand {
                ttl: 20,
                ..Hand::inventory()
            },
        ),
        (
            "too old",
            Hand {
                time: now() - 120,
                ..Hand::inventory()
            },
        ),
        (
            "from the future",
            Hand {
                time: now() + 120,
                ..Hand::inventory()
            },
        ),
        (
            "id of 36 characters",
            Hand {
                id: ids::uuid_v4(),
                ..Hand::inventory()
            },
        ),
        (
            "another identity",
            Hand {
                filter: filter(json!(["rpcutil"]), json!([id(1)]), json!([])),
                ..Hand::inventory()
            },
        ),
        (
            "an agent it lacks",
            Hand {
                filter: filter(json!(["puppet"]), json!([]), json!([])),
                ..Hand::inventory()
            },
        ),
        (
            "a fact it lacks",
            Hand {
                filter: filter(
                    json!([]),
                    json!([]),
                    json!([{"fact": "os.family", "operator": "==", "value": "Debian"}]),
                ),
                ..Hand::inventory()
            },
        ),
    ];
    for (why, hand) in &dropped {
        assert!(
            exchange(&rig.nc, &subject, &hand.v1(), &hand.reply_to(), SILENCE).is_none(),
            "{why}: answered"
        );
    }
    assert_eq!(rig.sim.progress().dropped, dropped.len() as u64);
    // Matching filters are answered: identity regex, fact, agent regex.
    let hand = Hand {
        filter: filter(
            json!(["/^choria_prov/"]),
            json!(["/^sim-0+\\./"]),
            json!([{"fact": "os.family", "operator": "==", "value": "RedHat"}]),
        ),
        ..Hand::inventory()
    };
    assert!(exchange(&rig.nc, &subject, &hand.v1(), &hand.reply_to(), WAIT).is_some());
    assert!(rig.sim.summary().nodes[1].rpcs.is_empty());
}

#[test]
fn discovery_is_answered_through_the_choria_provision_filter_only() {
    let rig = rig(8, |_| {});
    let all: Vec<String> = (0..8).map(id).collect();
    assert_eq!(
        discover(&rig.nc, Filter::agent("choria_provision"), SILENCE),
        all
    );
    assert!(discover(&rig.nc, Filter::agent("puppet"), SILENCE).is_empty());
    // Facts narrow it: role is derived from the node number (web for 0 and 4).
    let by_role = Filter {
        fact: vec![json!({"fact": "role", "operator": "==", "value": "web"})],
        ..Filter::agent("choria_provision")
    };
    assert_eq!(discover(&rig.nc, by_role, SILENCE), [id(0), id(4)]);
}
