//! Where each field is in the file: an index from field paths (`ports[0].ipv4`) to byte
//! ranges, built from the spanned parse tree, and byte offset to line/column conversion.

use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// One node of the document: a table entry or an array element.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    /// The field path, e.g. `ports[0].ipv4`, `lcores[1].ports[0]`.
    pub path: String,
    /// The key's span, for table entries.
    pub key: Option<Range<usize>>,
    /// The value's span.
    pub value: Range<usize>,
}

impl Node {
    /// Where to point at for this node: its key when it has one (the start of the line
    /// `key = value`), else its value.
    pub fn start(&self) -> usize {
        match &self.key {
            Some(k) => k.start.min(self.value.start),
            None => self.value.start,
        }
    }
}

/// Every node of a document, in document order of the walk.
#[derive(Clone, Debug, Default)]
pub(crate) struct SpanIndex {
    nodes: Vec<Node>,
}

impl SpanIndex {
    pub fn build(root: &DeTable<'_>) -> SpanIndex {
        let mut index = SpanIndex { nodes: Vec::new() };
        index.walk_table(root, "");
        index
    }

    fn walk_table(&mut self, table: &DeTable<'_>, prefix: &str) {
        for (key, value) in table.iter() {
            let path = if prefix.is_empty() {
                key.get_ref().to_string()
            } else {
                format!("{prefix}.{}", key.get_ref())
            };
            self.push(path, Some(key.span()), value);
        }
    }

    fn push(&mut self, path: String, key: Option<Range<usize>>, value: &Spanned<DeValue<'_>>) {
        self.nodes.push(Node {
            path: path.clone(),
            key,
            value: value.span(),
        });
        match value.get_ref() {
            DeValue::Table(t) => self.walk_table(t, &path),
            DeValue::Array(a) => {
                for (i, elem) in a.iter().enumerate() {
                    self.push(format!("{path}[{i}]"), None, elem);
                }
            }
            _ => {}
        }
    }

    /// The node at `path`, or else at its nearest ancestor present in the file.
    pub fn lookup(&self, path: &str) -> Option<&Node> {
        let mut p = path;
        loop {
            if let Some(n) = self.nodes.iter().find(|n| n.path == p) {
                return Some(n);
            }
            p = parent(p)?;
        }
    }

    /// The deepest node whose value span is exactly `span` (the table a serde error about
    /// a missing field points at).
    pub fn with_value_span(&self, span: &Range<usize>) -> Option<&Node> {
        self.nodes.iter().rev().find(|n| n.value == *span)
    }

    /// The innermost node whose key or value span holds offset `at`.
    pub fn innermost(&self, at: usize) -> Option<&Node> {
        let holds = |r: &Range<usize>| r.start <= at && at < r.end.max(r.start + 1);
        // Reversed so that of equal spans the deepest (walked last) wins.
        self.nodes
            .iter()
            .rev()
            .filter(|n| holds(&n.value) || n.key.as_ref().is_some_and(holds))
            .min_by_key(|n| {
                let v = n.value.end - n.value.start;
                match &n.key {
                    Some(k) if holds(k) => k.end - k.start,
                    _ => v,
                }
            })
    }
}

/// The parent of a field path: `ports[0].ipv4` → `ports[0]` → `ports` → none.
pub(crate) fn parent(path: &str) -> Option<&str> {
    if path.ends_with(']') {
        return path.rfind('[').map(|i| &path[..i]);
    }
    path.rfind('.').map(|i| &path[..i])
}

/// 1-based line and column (in characters) of byte offset `at` in `text`.
pub(crate) fn line_col(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents() {
        assert_eq!(parent("ports[0].ipv4"), Some("ports[0]"));
        assert_eq!(parent("ports[0]"), Some("ports"));
        assert_eq!(parent("ports"), None);
        assert_eq!(parent("lcores[1].ports[0]"), Some("lcores[1].ports"));
    }

    #[test]
    fn lines() {
        let t = "a\nbé = 1\n";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, 2), (2, 1));
        assert_eq!(line_col(t, 6), (2, 4));
        assert_eq!(line_col(t, 100), (3, 1));
    }

    #[test]
    fn index_paths() {
        let text = "[eal]\nargs = [\"-v\"]\n[[ports]]\nname = \"p0\"\n[[ports]]\nname = \"p1\"\n";
        let root = DeTable::parse(text).unwrap();
        let idx = SpanIndex::build(root.get_ref());
        let n = idx.lookup("ports[1].name").unwrap();
        assert_eq!(line_col(text, n.start()), (6, 1));
        let n = idx.lookup("eal.args[0]").unwrap();
        assert_eq!(line_col(text, n.start()), (2, 9));
        let n = idx.lookup("ports[1].mtu").unwrap();
        assert_eq!(n.path, "ports[1]");
        let at = text.find("p1").unwrap();
        assert_eq!(idx.innermost(at).unwrap().path, "ports[1].name");
    }
}
