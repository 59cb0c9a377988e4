//! Unit tests of `gojson`.

use super::map_checks::{as_float64, sorted_everywhere};
use super::*;

/// `write_str` gives what serde and the Go formatter give for `text`.
fn written_as_serde_writes(text: &str) {
    let mut out = Vec::new();
    write_str(&mut out, text);
    assert_eq!(String::from_utf8(out).unwrap(), to_string(text), "{text:?}");
}

#[test]
fn write_str_gives_the_bytes_serde_and_the_formatter_give() {
    let mut every_byte: String = (0u8..0x80).map(char::from).collect();
    every_byte.push_str("é\u{2028}x\u{2029}\u{2027}\u{202a}€<&>\u{7f}");
    for text in [
        "",
        "plain",
        every_byte.as_str(),
        "\u{2028}",
        "end\u{2029}",
        "\u{e2}",
        r#"{"a":"<b>"}"#,
    ] {
        written_as_serde_writes(text);
    }
}

#[test]
fn write_str_is_exact_wherever_an_escape_falls_in_a_long_run() {
    // Every escape at every offset of runs longer than a 16-byte block, alone and
    // in pairs (kept from an SSE2 scan that was tried and dropped).
    for special in [
        "<", ">", "&", "\"", "\\", "\n", "\u{1}", "\u{2028}", "\u{2029}", "\u{2027}", "é",
    ] {
        for at in 0..40 {
            for second in [None, Some(at + 1), Some(at + 16), Some(39)] {
                let mut text: Vec<&str> = vec!["a"; 40];
                text[at] = special;
                if let Some(j) = second.filter(|j| *j < 40) {
                    text[j] = special;
                }
                written_as_serde_writes(&text.concat());
            }
        }
    }
}

#[test]
fn write_str_gives_what_serde_gives_on_random_text_of_runs_and_escapes() {
    // Runs of every length around the eight bytes walked one by one, between
    // escapes alone and in clusters, and characters of two, three and four bytes.
    let mut next = super::super::scan::xorshift(0x2545_F491_4F6C_DD1D);
    let pieces = [
        "\"",
        "\\",
        "\n",
        "<",
        ">",
        "&",
        "\u{0}",
        "\u{1f}",
        "\u{2028}",
        "\u{2029}",
        "\u{2027}",
        "\u{20ac}",
        "é",
        "\u{1f600}",
        "\u{7f}",
    ];
    for _ in 0..5_000 {
        let mut text = String::new();
        for _ in 0..(next() % 12) {
            let run = (next() % 20) as usize;
            text.extend(std::iter::repeat_n('a', run));
            text.push_str(pieces[(next() % pieces.len() as u64) as usize]);
        }
        written_as_serde_writes(&text);
    }
}

#[test]
fn integers_are_written_as_format_writes_them() {
    for value in [0, 1, -1, 9, 10, 60, -60, 1_764_892_800, i64::MAX, i64::MIN] {
        let mut out = Vec::new();
        write_int(&mut out, value);
        assert_eq!(String::from_utf8(out).unwrap(), value.to_string());
    }
}

#[test]
fn an_object_written_by_hand_is_the_struct_serialised() {
    #[derive(Serialize)]
    struct S<'a> {
        protocol: &'a str,
        data: String,
        nested: serde_json::Value,
    }
    let bytes = b"\x00\xff<&> any bytes";
    let nested = serde_json::json!({"b": "<x>", "a": [1, null]});
    let mut out = Vec::new();
    Object::start(&mut out)
        .str("protocol", "p\u{2028}1")
        .base64("data", bytes)
        .value("nested", &nested)
        .end();
    use base64::Engine as _;
    assert_eq!(
        out,
        to_vec(&S {
            protocol: "p\u{2028}1",
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
            nested,
        })
    );
}

#[test]
fn write_value_gives_the_bytes_serde_gives() {
    let v = serde_json::json!({
        "z": [1, -2, 3.5, 1e300, null, true, "<\u{2028}>", {"y": {}, "b": []}],
        "a": {"d": "x\n", "c": 0.1},
        "m": "é&",
    });
    let mut out = Vec::new();
    write_value(&mut out, &v, Style::AsIs);
    assert_eq!(out, to_vec(&v));
    let sorted: std::collections::BTreeMap<&String, &serde_json::Value> =
        v.as_object().unwrap().iter().collect();
    let mut out = Vec::new();
    write_entries(&mut out, sorted.clone(), Style::AsIs);
    assert_eq!(out, to_vec(&sorted), "top level sorted, nested as they are");
    let mut out = Vec::new();
    write_value(&mut out, &v, Style::SortedKeys);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"a":{"c":0.1,"d":"x\n"},"m":"é\u0026","z":[1,-2,3.5,1e+300,null,true,"\u003c\u2028\u003e",{"b":[],"y":{}}]}"#
    );
}

fn map(text: &str, missing: &[(&str, &str)]) -> Result<String, serde_json::Error> {
    let mut out = b"kept:".to_vec();
    let result = write_map(&mut out, text, missing);
    let out = String::from_utf8(out).unwrap();
    match result {
        Ok(()) => Ok(out
            .strip_prefix("kept:")
            .expect("the prefix is kept")
            .into()),
        Err(e) => {
            assert_eq!(out, "kept:", "nothing is left behind on an error");
            Err(e)
        }
    }
}

#[test]
fn floats_are_written_as_go_writes_a_float64() {
    // Outputs of Go's json.Marshal(float64(...)).
    for (f, go) in [
        (0.0, "0"),
        (-0.0, "-0"),
        (1.0, "1"),
        (-2.0, "-2"),
        (3.5, "3.5"),
        (0.1, "0.1"),
        (0.000001, "0.000001"),
        (0.0000001, "1e-7"),
        (1.5e-10, "1.5e-10"),
        (5e-324, "5e-324"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (-1.5e300, "-1.5e+300"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (12345678901234567890.0, "12345678901234567000"),
        (4294967296.0, "4294967296"),
        (123456789.123, "123456789.123"),
    ] {
        let mut out = Vec::new();
        write_go_float(&mut out, f);
        assert_eq!(String::from_utf8(out).unwrap(), go, "{f:e}");
    }
}

#[test]
fn a_map_is_written_as_go_rewrites_a_decoded_map() {
    // What Go's json.Marshal writes for the map json.Unmarshal made of the input.
    assert_eq!(
            map(
                r#" {"version":"0.30.2","facts":{"z":1.0,"a":{"y":[{"b":2,"a":1e21}],"x":null}},"agents":["b","a"],"classes":[]} "#,
                &[("upgradable", "false")]
            )
            .unwrap(),
            r#"{"agents":["b","a"],"classes":[],"facts":{"a":{"x":null,"y":[{"a":1e+21,"b":2}]},"z":1},"upgradable":false,"version":"0.30.2"}"#
        );
    assert_eq!(
        map(
            r#"{"upgradable":true,"n":12345678901234567890}"#,
            &[("upgradable", "false")]
        )
        .unwrap(),
        r#"{"n":12345678901234567000,"upgradable":true}"#,
        "a key present is not added again; integers become float64"
    );
    assert_eq!(
        map(r#"{"b":1,"a":2,"b":3,"a":{"k":4},"c":[]}"#, &[]).unwrap(),
        r#"{"a":{"k":4},"b":3,"c":[]}"#,
        "a repeated key keeps its last value"
    );
    assert_eq!(
        map(
            r#"{"\u003c":"<\u2028&>","a\"b":"\ud83d\ude00","é":"\n"}"#,
            &[]
        )
        .unwrap(),
        "{\"\\u003c\":\"\\u003c\\u2028\\u0026\\u003e\",\"a\\\"b\":\"\u{1f600}\",\"é\":\"\\n\"}",
        "keys sorted by their text, not as written; strings with Go's escapes"
    );
    assert_eq!(
        map("{}", &[("upgradable", "false")]).unwrap(),
        r#"{"upgradable":false}"#
    );
    assert_eq!(
        map(r#"{"a":[[],[{}],[1,[2]]]}"#, &[]).unwrap(),
        r#"{"a":[[],[{}],[1,[2]]]}"#
    );
}

#[test]
fn a_map_that_is_not_one_is_refused_and_nothing_is_written() {
    let deep = format!("{{\"a\":{}1{}}}", "[".repeat(200), "]".repeat(200));
    for bad in [
        "",
        "[]",
        "\"{}\"",
        "{",
        "{\"a\":1}x",
        "{\"a\":1,}",
        "{\"a\":1e400}",
        "{\"a\":tru}",
        deep.as_str(),
    ] {
        assert!(map(bad, &[("upgradable", "false")]).is_err(), "{bad:?}");
    }
}

#[test]
fn a_map_holds_what_serde_reads_from_the_same_text() {
    let texts = [
        r#"{"agents":["rpcutil"],"facts":{"memory":{"system":{"total_bytes":34359738368}},"os":{"release":{"major":"9","full":"9.4"},"family":"RedHat"}},"version":"0.29.4","upgradable":true}"#,
        r#"{"z":{"y":{"x":{"w":[null,false,-1,-1.25,1e-9,"<>"]}}},"a":[{"c":1,"b":2,"a":3}]}"#,
        r#"{"k":1,"k":2,"j":{"k":1,"k":{"k":3}}}"#,
        r#"{"\u0000":"\u001f","\t":"\\","ß":"\u2029"}"#,
    ];
    for text in texts {
        let out = map(text, &[]).unwrap();
        let written: serde_json::Value = serde_json::from_str(&out).unwrap();
        let read: serde_json::Value = serde_json::from_str(text).unwrap();
        assert!(sorted_everywhere(&written), "{out}");
        assert_eq!(as_float64(written), as_float64(read), "{text}");
    }
}

#[test]
fn escapes_like_go() {
    let v = serde_json::json!({"a": "<b>&\u{2028}\"\\\n\u{1}é\u{8}\u{c}\t"});
    assert_eq!(
        to_string(&v),
        r#"{"a":"\u003cb\u003e\u0026\u2028\"\\\n\u0001é\u0008\u000c\t"}"#
    );
}
