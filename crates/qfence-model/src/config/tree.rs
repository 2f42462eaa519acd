//! Phase one, *parse*: YAML text into a generic tree that keeps what typed deserialization
//! would lose. Every node carries its line, and a mapping keeps all its entries in the file's
//! order, duplicates included, so the decoder can report a duplicate name instead of silently
//! keeping one of the two.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;
use serde_saphyr::options::DuplicateKeyPolicy;

/// One YAML node and the line it starts on (1-based; 0 when unknown).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub value: Value,
    pub line: u32,
}

/// A YAML value, as far as configuration cares.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Entries in file order; a key may appear more than once.
    Map(Vec<(Node, Node)>),
}

impl Value {
    /// What the value is, for "expected X, found Y" messages.
    pub fn kind(&self) -> String {
        match self {
            Value::Null => "nothing (null)".to_owned(),
            Value::Bool(b) => format!("a boolean ({b})"),
            Value::Int(i) => format!("a number ({i})"),
            Value::Float(f) => format!("a number ({f})"),
            Value::Str(s) => format!("a string ({s:?})"),
            Value::Seq(_) => "a list".to_owned(),
            Value::Map(_) => "a mapping".to_owned(),
        }
    }

    /// The value as text if it is a scalar that reads naturally as one (a string or a number).
    pub fn as_text(&self) -> Option<String> {
        match self {
            Value::Str(s) => Some(s.clone()),
            Value::Int(i) => Some(i.to_string()),
            Value::Float(f) => Some(f.to_string()),
            _ => None,
        }
    }
}

/// Why the text is not YAML at all, with the line when the parser knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub message: String,
    pub line: u32,
}

/// Parses one YAML document into a tree. An empty document is `Null`.
pub(crate) fn parse(text: &str) -> Result<Node, SyntaxError> {
    if text.trim().is_empty() {
        return Ok(Node {
            value: Value::Null,
            line: 1,
        });
    }
    let options = serde_saphyr::options! {
        duplicate_keys: DuplicateKeyPolicy::PassThrough,
    };
    match serde_saphyr::from_str_with_options::<Spanned<Node>>(text, options) {
        Ok(root) => Ok(spanned(root)),
        Err(e) => {
            let line = e
                .location()
                .map(|l| u32::try_from(l.line()).unwrap_or(u32::MAX))
                .unwrap_or(0);
            // The crate's Display renders a source snippet; the first line is the message.
            let full = e.to_string();
            let message = full
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("not valid YAML")
                .trim_start_matches("error: ")
                .to_owned();
            Err(SyntaxError { message, line })
        }
    }
}

fn spanned(s: Spanned<Node>) -> Node {
    let mut node = s.value;
    node.line = u32::try_from(s.referenced.line()).unwrap_or(u32::MAX);
    node
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

fn node(value: Value) -> Node {
    // The line is filled in by the `Spanned` wrapper around this node.
    Node { value, line: 0 }
}

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(node(Value::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(node(Value::Int(v.into())))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Node, E> {
        Ok(node(Value::Int(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(node(Value::Int(v.into())))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Node, E> {
        match i128::try_from(v) {
            Ok(i) => Ok(node(Value::Int(i))),
            Err(_) => Ok(node(Value::Str(v.to_string()))),
        }
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        Ok(node(Value::Float(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(node(Value::Str(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Node, E> {
        Ok(node(Value::Str(v)))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Node, E> {
        Ok(node(Value::Str(String::from_utf8_lossy(v).into_owned())))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(node(Value::Null))
    }
    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(node(Value::Null))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(spanned(item));
        }
        Ok(node(Value::Seq(items)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<Node>>()? {
            let value = map.next_value::<Spanned<Node>>()?;
            entries.push((spanned(key), spanned(value)));
        }
        Ok(node(Value::Map(entries)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(n: &Node) -> &[(Node, Node)] {
        match &n.value {
            Value::Map(m) => m,
            other => panic!("not a map: {other:?}"),
        }
    }

    #[test]
    fn duplicate_keys_are_kept_with_their_lines() {
        let root = parse("a: 1\nb: x\na: 2.5\n").unwrap();
        let m = map(&root);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].0.value, Value::Str("a".into()));
        assert_eq!(m[2].0.value, Value::Str("a".into()));
        assert_eq!(m[2].0.line, 3);
        assert_eq!(m[0].1.value, Value::Int(1));
        assert_eq!(m[2].1.value, Value::Float(2.5));
    }

    #[test]
    fn nested_nodes_know_their_lines() {
        let root = parse("top:\n  list:\n    - {k: v}\n    - ~\n").unwrap();
        let (_, top) = &map(&root)[0];
        let (_, list) = &map(top)[0];
        let Value::Seq(items) = &list.value else {
            panic!("not a list")
        };
        assert_eq!(items[0].line, 3);
        assert_eq!(items[1].value, Value::Null);
        assert_eq!(items[1].line, 4);
    }

    #[test]
    fn syntax_errors_carry_a_line() {
        let e = parse("a: 1\nb: [1, 2\n").unwrap_err();
        assert!(e.line >= 2, "{e:?}");
        assert!(!e.message.is_empty());
    }
}
