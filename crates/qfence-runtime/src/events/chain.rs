//! The chain's canonical encoding and hash (normative: `docs/specs/event-log.md`).

use super::*;

/// The canonical encoding a record's hash is computed over: [`DOMAIN`], then a JSON object of
/// every field but `hash`, keys in byte order, no whitespace, absent values as `null`, objects
/// inside `data` with their keys in byte order too. See `docs/specs/event-log.md`.
pub fn canonical_bytes(e: &Event) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(DOMAIN);
    out.push(b'{');
    let opt_str = |v: &Option<String>| match v {
        Some(s) => serde_json::Value::String(s.clone()),
        None => serde_json::Value::Null,
    };
    let opt_num = |v: Option<u64>| match v {
        Some(n) => serde_json::Value::from(n),
        None => serde_json::Value::Null,
    };
    // Keys in byte order, by hand: the order is part of the format.
    let fields: [(&str, serde_json::Value); 11] = [
        ("actor", serde_json::Value::String(e.actor.clone())),
        ("data", e.data.clone()),
        ("generation", opt_num(e.generation)),
        (
            "kind",
            serde_json::Value::String(e.kind.as_str().to_owned()),
        ),
        ("message", serde_json::Value::String(e.message.clone())),
        ("plan", opt_str(&e.plan)),
        ("prev", serde_json::Value::String(e.prev.clone())),
        ("seq", serde_json::Value::from(e.seq)),
        ("site", opt_str(&e.site)),
        ("term", opt_num(e.term)),
        ("time_ms", serde_json::Value::from(e.time_ms)),
    ];
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(k, &mut out);
        out.push(b':');
        write_canonical(v, &mut out);
    }
    out.push(b'}');
    out
}

/// SHA-256 of [`canonical_bytes`], lower-case hex.
pub fn hash_of(e: &Event) -> String {
    hex::encode(ring::digest::digest(&ring::digest::SHA256, &canonical_bytes(e)).as_ref())
}

fn write_canonical(v: &serde_json::Value, out: &mut Vec<u8>) {
    use serde_json::Value as J;
    match v {
        J::Null => out.extend_from_slice(b"null"),
        J::Bool(true) => out.extend_from_slice(b"true"),
        J::Bool(false) => out.extend_from_slice(b"false"),
        // serde_json writes integers in decimal and other numbers in their shortest form that
        // reads back to the same f64: deterministic for a given value.
        J::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
        J::String(s) => write_string(s, out),
        J::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        J::Object(map) => {
            // Sorted here, whatever order the map keeps (serde_json's preserve_order feature
            // may be on somewhere in the build).
            let mut entries: Vec<(&String, &J)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(k, out);
                out.push(b':');
                write_canonical(v, out);
            }
            out.push(b'}');
        }
    }
}

/// A JSON string: `"` and `\` escaped with a backslash, \b \f \n \r \t by name, other
/// characters below U+0020 as `\u00xx` (lower-case hex), everything else as UTF-8.
fn write_string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}
