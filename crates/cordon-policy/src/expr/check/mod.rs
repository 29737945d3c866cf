//! Checking: the `cel` crate's AST walked against the vocabulary of one
//! surface, typed and compiled into a [`Node`] tree, every error collected.

use cel::common::ast::{Expr, IdedExpr, LiteralValue};

use super::cost::cost;
use super::node::{Comprehension, Const, Kind, Node};
use super::{CompileError, Compiled, MAX_COST, MAX_SOURCE_BYTES};
use crate::vocab::{self, Fact, Surface, Ty};

mod call;
#[cfg(test)]
mod pratt_tests;

/// How deep `(`, `[` and `{` may nest in one rule body.
const MAX_NESTING: usize = 16;

/// The deepest bracket nesting of `source`, outside string literals.
fn nesting(source: &str) -> usize {
    let (mut depth, mut max, mut quote, mut escaped) = (0usize, 0usize, None, false);
    for c in source.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '"' | '\'' => quote = Some(c),
                '(' | '[' | '{' => {
                    depth += 1;
                    max = max.max(depth);
                }
                ')' | ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    max
}

/// Parses, checks and compiles one rule body for `surface`. Every error found
/// is returned, not only the first.
pub fn compile(surface: Surface, source: &str) -> Result<Compiled, Vec<CompileError>> {
    if source.len() > MAX_SOURCE_BYTES {
        return Err(vec![CompileError {
            start: 0,
            end: 0,
            message: format!(
                "rule is {} bytes long; the limit is {MAX_SOURCE_BYTES}",
                source.len()
            ),
            help: Some("split it into several rules".into()),
        }]);
    }
    // The parser recurses once per level, deeper than its own depth limit
    // counts: a bound here keeps a hostile or generated rule from taking
    // the loader's stack (a debug build's 2 MiB test thread overflowed at
    // 138 levels, found by the load_policy fuzz target).
    let depth = nesting(source);
    if depth > MAX_NESTING {
        return Err(vec![CompileError {
            start: 0,
            end: 0,
            message: format!("rule nests brackets {depth} deep; the limit is {MAX_NESTING}"),
            help: Some("split it into several rules, or name the parts with `in` lists".into()),
        }]);
    }
    // Fast path: the `cel` crate's Pratt parser (tens of microseconds,
    // where its ANTLR parser spends about 1.5 ms warming up in every fresh
    // process, a large part of `cordon run`'s start), for the sources where
    // the two are known to agree. Anything it refuses, and any rule that
    // fails checking, goes through the ANTLR parser below: it is the
    // reference, and it carries the positions diagnostics need.
    if pratt_agrees(source) {
        if let Ok(ast) = cel::parser::PrattParser::new()
            .max_recursion_depth(64)
            .parse(source)
        {
            if let Ok(done) = check(surface, source, &ast, None) {
                return Ok(done);
            }
        }
    }
    let parsed = cel::parser::Parser::new()
        .max_recursion_depth(64)
        .parse_with_source_info(source);
    let (ast, info) = match parsed {
        Ok(x) => x,
        Err(errs) => {
            return Err(errs
                .errors
                .iter()
                .map(|e| {
                    let off = line_col_to_offset(source, e.pos.0, e.pos.1);
                    CompileError {
                        start: off,
                        end: off + 1,
                        message: format!("syntax error: {}", e.msg),
                        help: Some("write a CEL expression, e.g. `host == \"example.com\"`".into()),
                    }
                })
                .collect())
        }
    };
    check(surface, source, &ast, Some(&info))
}

/// Whether `source` lies where the Pratt parser and the ANTLR parser of
/// `cel` 0.15 agree: no `-` outside a string literal (they disagree on
/// mixed unary operators such as `-!x` and on negative literals followed by
/// a selection or an index), and no escape, triple-quoted literal or
/// comment that would make the quote tracking here uncertain. A differential test
/// (`pratt_and_antlr_agree_where_the_fast_path_is_taken`) holds the claim.
fn pratt_agrees(source: &str) -> bool {
    // A comment can hold a lone quote, and two of them would hide the code
    // between them from the quote tracking below.
    if source.contains('\\')
        || source.contains("\"\"\"")
        || source.contains("'''")
        || source.contains("//")
    {
        return false;
    }
    let mut quote = None;
    for c in source.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '-' => return false,
            None => {}
        }
    }
    quote.is_none()
}

/// Checks and compiles a parsed rule body. `info` (the node positions) is
/// there on the ANTLR path only; without it an error's span is empty, and
/// the caller takes the ANTLR path to report it.
fn check(
    surface: Surface,
    source: &str,
    ast: &IdedExpr,
    info: Option<&cel::common::ast::SourceInfo>,
) -> Result<Compiled, Vec<CompileError>> {
    let mut c = Checker {
        surface,
        errors: Vec::new(),
        locals: Vec::new(),
        next_slot: 0,
        next_id: 0,
        info,
        reads: 0,
    };
    let root = c.check(ast);
    if let Some((_, ty)) = &root {
        if *ty != Ty::Bool {
            let (start, end) = c.span(ast);
            c.errors.push(CompileError {
                start,
                end,
                message: format!("a rule must be a bool, this is {}", a_ty(ty)),
                help: Some("compare it with something, e.g. `... == \"value\"`".into()),
            });
        }
    }
    if !c.errors.is_empty() {
        return Err(c.errors);
    }
    let Some((root, _)) = root else {
        return Err(vec![CompileError {
            start: 0,
            end: 0,
            message: "rule could not be compiled".into(),
            help: None,
        }]);
    };
    let cost = cost(&root);
    if cost > MAX_COST {
        return Err(vec![CompileError {
            start: 0,
            end: source.len() as u32,
            message: format!("rule may cost up to {cost} steps; the limit is {MAX_COST}"),
            help: Some("avoid nested comprehensions over lists".into()),
        }]);
    }
    Ok(Compiled {
        nodes: c.next_id,
        reads: c.reads,
        root,
        cost,
    })
}

pub(super) fn line_col_to_offset(source: &str, line: isize, col: isize) -> u32 {
    let mut off = 0usize;
    for (i, l) in source.split_inclusive('\n').enumerate() {
        if (i as isize) + 1 == line {
            return (off + (col.max(0) as usize).min(l.len())) as u32;
        }
        off += l.len();
    }
    0
}

pub(super) struct Checker<'s> {
    surface: Surface,
    errors: Vec<CompileError>,
    locals: Vec<(String, u16, Ty)>,
    next_slot: u16,
    next_id: u32,
    info: Option<&'s cel::common::ast::SourceInfo>,
    reads: u32,
}

pub(super) type Checked = Option<(Node, Ty)>;

/// Methods and functions a rule may call, for "did you mean".
pub(super) const FUNCTIONS: &[&str] = &[
    "startsWith",
    "endsWith",
    "contains",
    "matches",
    "inCidr",
    "lowerAscii",
    "size",
    "int",
    "string",
    "timestamp",
    "duration",
    "has",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
];

impl Checker<'_> {
    /// The byte range of `e` and everything under it (the parser records
    /// only the operator's own position for a call).
    fn span(&self, e: &IdedExpr) -> (u32, u32) {
        let Some(info) = self.info else {
            return (0, 0);
        };
        let mut range = info.offset_for(e.id).unwrap_or((u32::MAX, 0));
        let mut widen = |x: &IdedExpr| {
            let (s, t) = self.span(x);
            if s != u32::MAX {
                range.0 = range.0.min(s);
                range.1 = range.1.max(t);
            }
        };
        match &e.expr {
            Expr::Call(c) => {
                if let Some(t) = &c.target {
                    widen(t);
                }
                c.args.iter().for_each(&mut widen);
            }
            Expr::Select(s) => widen(&s.operand),
            Expr::List(l) => l.elements.iter().for_each(&mut widen),
            Expr::Comprehension(c) => widen(&c.iter_range),
            _ => {}
        }
        if range.0 == u32::MAX {
            (0, 0)
        } else {
            range
        }
    }

    fn err(&mut self, e: &IdedExpr, message: String, help: Option<String>) -> Checked {
        let (start, end) = self.span(e);
        self.errors.push(CompileError {
            start,
            end: end.max(start + 1),
            message,
            help,
        });
        None
    }

    fn node(&mut self, kind: Kind, ty: Ty) -> Checked {
        let id = self.next_id;
        self.next_id += 1;
        Some((Node { id, kind }, ty))
    }

    fn fact(&mut self, f: Fact) -> Checked {
        self.reads |= f.bit();
        self.node(Kind::Fact(f), f.ty())
    }

    /// Resolves `a.b.c` spelled from declared names to a fact.
    fn qualified(&mut self, e: &IdedExpr) -> Option<Checked> {
        let Expr::Select(sel) = &e.expr else {
            return None;
        };
        if sel.test {
            return None;
        }
        let Expr::Ident(root) = &sel.operand.expr else {
            return None;
        };
        if self.locals.iter().any(|(n, _, _)| n == root) {
            return None;
        }
        let fields: &[(&str, Fact)] = match root.as_str() {
            "identity" => vocab::IDENTITY_FIELDS,
            "env" => vocab::ENV_FIELDS,
            "secret" if self.surface == Surface::Secret => vocab::SECRET_FIELDS,
            "destination" if self.surface == Surface::Secret => vocab::DESTINATION_FIELDS,
            "caller" if self.surface == Surface::Ingress => vocab::CALLER_FIELDS,
            _ => return None,
        };
        match fields.iter().find(|(n, _)| *n == sel.field) {
            Some((_, f)) => Some(self.fact(*f)),
            None => {
                let help = vocab::did_you_mean(&sel.field, fields.iter().map(|(n, _)| *n))
                    .map(|s| format!("did you mean `{root}.{s}`?"))
                    .unwrap_or_else(|| {
                        let all: Vec<_> = fields.iter().map(|(n, _)| format!("`{n}`")).collect();
                        format!("`{root}` has the fields {}", all.join(", "))
                    });
                Some(self.err(
                    e,
                    format!("`{root}` has no field `{}`", sel.field),
                    Some(help),
                ))
            }
        }
    }

    fn check(&mut self, e: &IdedExpr) -> Checked {
        if let Some(r) = self.qualified(e) {
            return r;
        }
        match &e.expr {
            Expr::Literal(lit) => {
                let (c, ty) = match lit {
                    LiteralValue::Boolean(b) => (Const::Bool(**b), Ty::Bool),
                    LiteralValue::Int(i) => (Const::Int(**i), Ty::Int),
                    LiteralValue::UInt(u) => (Const::Uint(**u), Ty::Uint),
                    LiteralValue::Double(d) => (Const::Double(**d), Ty::Double),
                    LiteralValue::String(s) => (Const::Str(s.to_string()), Ty::String),
                    LiteralValue::Null => (Const::Null, Ty::Null),
                    LiteralValue::Bytes(_) => {
                        return self.err(
                            e,
                            "bytes literals are not part of the vocabulary".into(),
                            None,
                        )
                    }
                };
                self.node(Kind::Const(c), ty)
            }
            Expr::Ident(name) => self.ident(e, name),
            Expr::Select(sel) => {
                let (obj, ty) = self.check(&sel.operand)?;
                match ty {
                    Ty::Map(k, v) if *k == Ty::String => {
                        if sel.test {
                            return self
                                .node(Kind::Has(Box::new(obj), sel.field.clone()), Ty::Bool);
                        }
                        let key = Node {
                            id: self.next_id,
                            kind: Kind::Const(Const::Str(sel.field.clone())),
                        };
                        self.next_id += 1;
                        self.node(Kind::Index(Box::new(obj), Box::new(key)), *v)
                    }
                    other => self.err(e, format!("a {other} has no field `{}`", sel.field), None),
                }
            }
            Expr::List(list) => self.list(list),
            Expr::Map(_) | Expr::Struct(_) => self.err(
                e,
                "map and message literals are not part of the vocabulary".into(),
                None,
            ),
            Expr::Comprehension(comp) => self.comprehension(comp),
            Expr::Call(call) => self.call(e, call),
            Expr::Unspecified => self.err(e, "empty expression".into(), None),
        }
    }

    /// A name: a comprehension's variable, `now`, or one of the surface's facts.
    fn ident(&mut self, e: &IdedExpr, name: &str) -> Checked {
        if let Some((_, slot, ty)) = self
            .locals
            .iter()
            .rev()
            .find(|(n, _, _)| n == name)
            .cloned()
        {
            return self.node(Kind::Local(slot), ty);
        }
        if name == "now" {
            return self.fact(Fact::Now);
        }
        if let Some((_, f)) = vocab::surface_vars(self.surface)
            .iter()
            .find(|(n, _)| *n == name)
        {
            return self.fact(*f);
        }
        match name {
            "identity" | "env" | "secret" | "destination" | "caller"
                if !matches!(name, "secret" | "destination" | "caller")
                    || (self.surface == Surface::Secret && name != "caller")
                    || (self.surface == Surface::Ingress && name == "caller") =>
            {
                return self.err(
                    e,
                    format!("`{name}` is a record; read one of its fields"),
                    Some(if name == "destination" {
                        "write e.g. `destination.host`".to_string()
                    } else {
                        format!("write e.g. `{name}.name`")
                    }),
                )
            }
            _ => {}
        }
        let mut names = vocab::names_in(self.surface);
        let locals: Vec<String> = self.locals.iter().map(|(n, _, _)| n.clone()).collect();
        names.extend(locals.iter().map(|s| s.as_str()));
        let help = match vocab::did_you_mean(name, names.iter().copied()) {
            Some(s) => format!("did you mean `{s}`?"),
            None => format!(
                "the {} surface knows {}",
                self.surface,
                names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        self.err(
            e,
            format!("undeclared name `{name}` in the {} surface", self.surface),
            Some(help),
        )
    }

    /// A list literal: its elements of one type.
    fn list(&mut self, list: &cel::common::ast::ListExpr) -> Checked {
        let mut elem = Ty::Dyn;
        let mut nodes = Vec::new();
        let mut ok = true;
        for x in &list.elements {
            match self.check(x) {
                Some((n, t)) => {
                    if !elem.compatible(&t) {
                        self.err(x, format!("list mixes {elem} and {t}"), None);
                        ok = false;
                    }
                    elem = elem.unify(&t);
                    nodes.push(n);
                }
                None => ok = false,
            }
        }
        if !ok {
            return None;
        }
        self.node(Kind::List(nodes), Ty::List(Box::new(elem)))
    }

    /// A comprehension (a macro such as `all` or `exists`, expanded): its range,
    /// initial accumulator, condition, step and result, the accumulator's type
    /// refined once by what the step builds.
    fn comprehension(&mut self, comp: &cel::common::ast::ComprehensionExpr) -> Checked {
        let range = self.check(&comp.iter_range);
        let init = self.check(&comp.accu_init);
        let (range, rty) = range?;
        let (init, ity) = init?;
        let elem = match &rty {
            Ty::List(t) => (**t).clone(),
            Ty::Map(k, _) => (**k).clone(),
            other => {
                return self.err(
                    &comp.iter_range,
                    format!("cannot iterate over a {other}"),
                    None,
                )
            }
        };
        let iter = self.next_slot;
        let accu = self.next_slot + 1;
        self.next_slot += 2;
        // First pass with the initial accumulator type; an empty list
        // initialiser is refined by what the step builds.
        let mut accu_ty = ity.clone();
        for _pass in 0..2 {
            let errs_before = self.errors.len();
            let ids_before = (self.next_id, self.reads);
            self.locals
                .push((comp.iter_var.clone(), iter, elem.clone()));
            self.locals
                .push((comp.accu_var.clone(), accu, accu_ty.clone()));
            let cond = self.check(&comp.loop_cond);
            let step = self.check(&comp.loop_step);
            self.locals.pop();
            self.locals.pop();
            let (Some((cond, _)), Some((step, sty))) = (cond, step) else {
                return None;
            };
            if sty == accu_ty || _pass == 1 {
                self.locals.push((comp.accu_var.clone(), accu, sty.clone()));
                let result = self.check(&comp.result);
                self.locals.pop();
                let (result, resty) = result?;
                return self.node(
                    Kind::Comprehension(Box::new(Comprehension {
                        range,
                        iter,
                        accu,
                        init,
                        cond,
                        step,
                        result,
                    })),
                    resty,
                );
            }
            // Roll back and retry with the refined type.
            self.errors.truncate(errs_before);
            self.next_id = ids_before.0;
            self.reads = ids_before.1;
            accu_ty = sty;
        }
        None
    }

    fn expect_ty(&mut self, e: &IdedExpr, want: &Ty, op: &str) -> Option<Node> {
        let (n, t) = self.check(e)?;
        if !t.compatible(want) {
            let op = op.trim_matches('_');
            self.err(e, format!("`{op}` needs a {want}, this is a {t}"), None);
            return None;
        }
        Some(n)
    }
}

pub(super) fn equality_help(l: &Ty, r: &Ty) -> String {
    match (l, r) {
        (Ty::Int, Ty::String) | (Ty::String, Ty::Int) => {
            "write the number without quotes, e.g. `port == 443`".into()
        }
        _ => "both sides must have one type; convert with `int(...)` or `string(...)`".into(),
    }
}

/// `a string`, `an int`.
pub(super) fn a_ty(t: &Ty) -> String {
    let s = t.to_string();
    if s.starts_with(['a', 'e', 'i', 'o', 'u']) {
        format!("an {s}")
    } else {
        format!("a {s}")
    }
}

pub(super) fn const_str(n: &Node) -> Option<String> {
    match &n.kind {
        Kind::Const(Const::Str(s)) => Some(s.clone()),
        _ => None,
    }
}
