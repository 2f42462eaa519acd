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

/// At most this many YAML nodes (mappings, lists, scalars, counting what aliases expand to)
/// in one document. The parser's default, 250,000, refused the 5,000-plan benchmark
/// configuration (about 50 nodes a plan): 1,000,000 holds about 20,000 such plans. It is
/// still a bound because every node becomes a tree [`Node`] (about 50 to 100 bytes with its
/// text): a hostile document, an alias bomb above all, can make the loader hold at most
/// around 100 MB before it is refused.
pub(crate) const MAX_NODES: usize = 1_000_000;

/// The parser's limits: [`MAX_NODES`], and room for the events those nodes take (a start
/// and an end per mapping or list, one per scalar or alias). The other limits (depth,
/// aliases, anchors, scalar bytes, the alias/anchor ratio) keep the parser's defaults.
fn budget() -> serde_saphyr::Budget {
    let mut b = serde_saphyr::Budget::default();
    b.max_nodes = MAX_NODES;
    b.max_events = 3 * MAX_NODES;
    b
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
        budget: Some(budget()),
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
            let message = if message.contains("budget breached") {
                format!(
                    "{message}: the document is refused (more than {MAX_NODES} YAML nodes, \
                     or another of the loader's limits; see docs/configuration.md)"
                )
            } else {
                message
            };
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

    /// A document of the benchmark's shape: `n` entries of about 50 nodes each.
    fn entries(n: usize) -> String {
        let mut t = String::from("plans:\n");
        for i in 0..n {
            t.push_str(&format!("  p{i}:\n"));
            for j in 0..8 {
                t.push_str(&format!("    k{j}: {{a: v{i}, b: [x, y, z], c: 1}}\n"));
            }
        }
        t
    }

    #[test]
    fn a_document_of_many_nodes_within_the_budget_loads() {
        // 90 nodes an entry: 5,000 entries are 450,002 nodes, over the parser's default
        // of 250,000 and under MAX_NODES.
        let root = parse(&entries(5_000)).unwrap();
        let (_, plans) = &map(&root)[0];
        assert_eq!(map(plans).len(), 5_000);
    }

    #[test]
    fn a_document_over_the_node_budget_is_refused() {
        let e = parse(&entries(MAX_NODES / 90 + 1)).unwrap_err();
        assert!(e.message.contains("1000000 YAML nodes"), "{e:?}");
    }

    #[test]
    fn an_alias_bomb_is_refused_quickly() {
        // "Billion laughs": ten levels of ten aliases each would expand to 10^10 nodes.
        let mut t = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..10 {
            let p = i - 1;
            t.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        // The parser's own CPU time: the wall clock of a shared 2-core machine measured the
        // other tests' load (it once read 58 s for 5 s of work) and failed for no defect.
        let cpu = || {
            let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
            std::time::Duration::new(t.tv_sec.unsigned_abs(), t.tv_nsec.unsigned_abs() as u32)
        };
        let started = cpu();
        let e = parse(&t).unwrap_err();
        assert!(e.message.contains("budget breached"), "{e:?}");
        let took = cpu() - started;
        assert!(
            took < std::time::Duration::from_secs(20),
            "took {took:?} of CPU"
        );
    }

    #[test]
    fn syntax_errors_carry_a_line() {
        let e = parse("a: 1\nb: [1, 2\n").unwrap_err();
        assert!(e.line >= 2, "{e:?}");
        assert!(!e.message.is_empty());
    }
}
