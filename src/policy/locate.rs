//! Places validation errors in the policy file: field path ⇄ byte span, using a
//! span-keeping parse of the same text.

use std::ops::Range;

use toml_edit::{ArrayOfTables, Document, Item, Table, Value};

use super::error::{FieldPath, Segment};

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    (line, col)
}

/// The parsed document, kept only to answer "where is this field".
pub struct Locator {
    doc: Option<Document<String>>,
}

impl Locator {
    pub fn new(text: &str) -> Self {
        Locator {
            doc: Document::parse(text.to_string()).ok(),
        }
    }

    /// Whether the text is valid TOML.
    pub fn is_parsed(&self) -> bool {
        self.doc.is_some()
    }

    /// The span of the value at `path`, or of the nearest enclosing element that has one.
    pub fn span_of(&self, path: &FieldPath) -> Option<Range<usize>> {
        let doc = self.doc.as_ref()?;
        let mut node = Node::Table(doc.as_table());
        let mut best = None;
        for seg in &path.0 {
            let next = match (node, seg) {
                (Node::Table(t), Segment::Key(k)) => {
                    let (key, item) = t.get_key_value(k)?;
                    best = key.span().or(best);
                    Node::of_item(item)
                }
                (Node::Value(v), Segment::Key(k)) => {
                    let (key, item) = v.as_inline_table()?.get_key_value(k)?;
                    best = key.span().or(best);
                    Node::of_item(item)
                }
                (Node::Tables(a), Segment::Index(i)) => a.get(*i).map(Node::Table),
                (Node::Value(v), Segment::Index(i)) => v.as_array()?.get(*i).map(Node::Value),
                _ => None,
            };
            let Some(next) = next else { break };
            best = next.span().or(best);
            node = next;
        }
        best
    }

    /// The path of the innermost key or value where `span` starts; with `tables_only`,
    /// of the innermost table holding all of `span` (for "missing field" errors, whose
    /// span is the table that lacks the field).
    pub fn path_at(&self, span: Range<usize>, tables_only: bool) -> FieldPath {
        let mut search = Search {
            span,
            tables_only,
            best: FieldPath::root(),
        };
        if let Some(doc) = &self.doc {
            search.table(doc.as_table(), &FieldPath::root());
        }
        search.best
    }
}

#[derive(Clone, Copy)]
enum Node<'a> {
    Table(&'a Table),
    Tables(&'a ArrayOfTables),
    Value(&'a Value),
}

impl<'a> Node<'a> {
    fn of_item(item: &'a Item) -> Option<Node<'a>> {
        match item {
            Item::Table(t) => Some(Node::Table(t)),
            Item::ArrayOfTables(a) => Some(Node::Tables(a)),
            Item::Value(v) => Some(Node::Value(v)),
            Item::None => None,
        }
    }

    fn span(&self) -> Option<Range<usize>> {
        match self {
            Node::Table(t) => t.span(),
            Node::Tables(a) => a.span(),
            Node::Value(v) => v.span(),
        }
    }
}

fn contains(span: Option<Range<usize>>, offset: usize) -> bool {
    span.is_some_and(|s| s.start <= offset && offset < s.end.max(s.start + 1))
}

struct Search {
    span: Range<usize>,
    tables_only: bool,
    best: FieldPath,
}

impl Search {
    /// A key or value holding the error's start; with `tables_only`, a table holding the
    /// whole error span.
    fn consider(&mut self, span: Option<Range<usize>>, path: &FieldPath, is_table: bool) {
        let holds = if self.tables_only {
            is_table
                && span
                    .as_ref()
                    .is_some_and(|s| s.start <= self.span.start && self.span.end <= s.end)
        } else {
            contains(span, self.span.start)
        };
        if holds && path.0.len() > self.best.0.len() {
            self.best = path.clone();
        }
    }

    fn table(&mut self, t: &Table, path: &FieldPath) {
        for (name, _) in t.iter() {
            let Some((key, item)) = t.get_key_value(name) else {
                continue;
            };
            let here = path.key(name);
            self.consider(key.span(), &here, false);
            self.item(item, &here);
        }
    }

    fn item(&mut self, item: &Item, path: &FieldPath) {
        match item {
            Item::Table(t) => {
                self.consider(t.span(), path, true);
                self.table(t, path);
            }
            Item::ArrayOfTables(a) => {
                for (i, t) in a.iter().enumerate() {
                    let here = path.index(i);
                    self.consider(t.span(), &here, true);
                    self.table(t, &here);
                }
            }
            Item::Value(v) => self.value(v, path),
            Item::None => {}
        }
    }

    fn value(&mut self, v: &Value, path: &FieldPath) {
        self.consider(v.span(), path, v.is_inline_table());
        match v {
            Value::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    self.value(v, &path.index(i));
                }
            }
            Value::InlineTable(t) => {
                for (name, _) in t.iter() {
                    let Some((key, item)) = t.get_key_value(name) else {
                        continue;
                    };
                    let here = path.key(name);
                    self.consider(key.span(), &here, false);
                    self.item(item, &here);
                }
            }
            _ => {}
        }
    }
}
