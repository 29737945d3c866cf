//! Rules: CEL parsed by the `cel` crate, then type-checked and compiled by
//! cordon into a small typed tree that a three-valued evaluator runs.
//!
//! The `cel` crate parses (grammar, macros, node offsets) but has no type
//! checker and no notion of an unknown fact, so checking and evaluation are
//! cordon's own. One evaluator serves deciding, explaining and (later) partial
//! evaluation: it can record the value of every node as it goes.

use std::borrow::Cow;
use std::collections::BTreeMap;

use cel::common::ast::{operators, Expr, IdedExpr, LiteralValue};

use crate::vocab::{self, Fact, Surface, Ty};

/// A node of a compiled rule. `id` indexes the trace and the source offsets.
#[derive(Debug, Clone)]
pub struct Node {
    pub id: u32,
    pub kind: Kind,
}

#[derive(Debug, Clone)]
pub enum Kind {
    Const(Const),
    Fact(Fact),
    Local(u16),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Not(Box<Node>),
    Cond(Box<Node>, Box<Node>, Box<Node>),
    Eq(Box<Node>, Box<Node>),
    Ne(Box<Node>, Box<Node>),
    Cmp(CmpOp, Box<Node>, Box<Node>),
    Arith(ArithOp, Box<Node>, Box<Node>),
    Neg(Box<Node>),
    Index(Box<Node>, Box<Node>),
    Has(Box<Node>, String),
    In(Box<Node>, Box<Node>),
    List(Vec<Node>),
    StartsWith(Box<Node>, Box<Node>),
    EndsWith(Box<Node>, Box<Node>),
    Contains(Box<Node>, Box<Node>),
    Matches(Box<Node>, Box<regex::Regex>),
    InCidr(Box<Node>, ipnet::IpNet),
    LowerAscii(Box<Node>),
    Size(Box<Node>),
    ToInt(Box<Node>),
    ToString(Box<Node>),
    NotStrictlyFalse(Box<Node>),
    Comprehension(Box<Comprehension>),
}

#[derive(Debug, Clone)]
pub struct Comprehension {
    pub range: Node,
    pub iter: u16,
    pub accu: u16,
    pub init: Node,
    pub cond: Node,
    pub step: Node,
    pub result: Node,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

#[derive(Debug, Clone)]
pub enum Const {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(String),
    Null,
    Timestamp(i64),
    Duration(i64),
}

/// A compile error at a node, with a suggested fix.
#[derive(Debug, Clone)]
pub struct CompileError {
    /// Byte offsets into the expression source.
    pub start: u32,
    pub end: u32,
    pub message: String,
    pub help: Option<String>,
}

/// A checked rule body: the tree and what it costs.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub root: Node,
    /// Facts the rule can read.
    pub reads: u32,
    /// Number of nodes, the size of a trace.
    pub nodes: u32,
    /// The static cost bound (node visits in the worst case).
    pub cost: u64,
    /// Byte offsets of each node in the source, by node id.
    pub offsets: Vec<(u32, u32)>,
}

/// The longest expression source accepted.
pub const MAX_SOURCE_BYTES: usize = 4096;
/// The largest static cost accepted for one rule.
pub const MAX_COST: u64 = 100_000;
/// The length a list fact (`args`) is assumed to have for cost bounding; the
/// enforcing layer refuses a request whose lists are longer.
pub const MAX_LIST_LEN: u64 = 256;

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
    let mut c = Checker {
        surface,
        errors: Vec::new(),
        locals: Vec::new(),
        next_slot: 0,
        next_id: 0,
        offsets: Vec::new(),
        info: &info,
        reads: 0,
    };
    let root = c.check(&ast);
    if let Some((_, ty)) = &root {
        if *ty != Ty::Bool {
            let (start, end) = c.span(&ast);
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
        offsets: c.offsets,
        root,
        cost,
    })
}

fn line_col_to_offset(source: &str, line: isize, col: isize) -> u32 {
    let mut off = 0usize;
    for (i, l) in source.split_inclusive('\n').enumerate() {
        if (i as isize) + 1 == line {
            return (off + (col.max(0) as usize).min(l.len())) as u32;
        }
        off += l.len();
    }
    0
}

fn cost(n: &Node) -> u64 {
    let mut total = 1u64;
    match &n.kind {
        Kind::Comprehension(c) => {
            let body = cost(&c.cond) + cost(&c.step);
            total += cost(&c.range) + cost(&c.init) + cost(&c.result);
            total = total.saturating_add(body.saturating_mul(MAX_LIST_LEN));
        }
        _ => children(n, &mut |c| total = total.saturating_add(cost(c))),
    }
    total
}

/// Calls `f` on each direct child of `n`.
pub fn children<'a>(n: &'a Node, f: &mut dyn FnMut(&'a Node)) {
    match &n.kind {
        Kind::Const(_) | Kind::Fact(_) | Kind::Local(_) => {}
        Kind::Not(a)
        | Kind::Neg(a)
        | Kind::Has(a, _)
        | Kind::Matches(a, _)
        | Kind::InCidr(a, _)
        | Kind::LowerAscii(a)
        | Kind::Size(a)
        | Kind::ToInt(a)
        | Kind::ToString(a)
        | Kind::NotStrictlyFalse(a) => f(a),
        Kind::And(a, b)
        | Kind::Or(a, b)
        | Kind::Eq(a, b)
        | Kind::Ne(a, b)
        | Kind::Cmp(_, a, b)
        | Kind::Arith(_, a, b)
        | Kind::Index(a, b)
        | Kind::In(a, b)
        | Kind::StartsWith(a, b)
        | Kind::EndsWith(a, b)
        | Kind::Contains(a, b) => {
            f(a);
            f(b)
        }
        Kind::Cond(a, b, c) => {
            f(a);
            f(b);
            f(c)
        }
        Kind::List(xs) => xs.iter().for_each(f),
        Kind::Comprehension(c) => {
            f(&c.range);
            f(&c.init);
            f(&c.cond);
            f(&c.step);
            f(&c.result)
        }
    }
}

struct Checker<'s> {
    surface: Surface,
    errors: Vec<CompileError>,
    locals: Vec<(String, u16, Ty)>,
    next_slot: u16,
    next_id: u32,
    offsets: Vec<(u32, u32)>,
    info: &'s cel::common::ast::SourceInfo,
    reads: u32,
}

type Checked = Option<(Node, Ty)>;

/// Methods and functions a rule may call, for "did you mean".
const FUNCTIONS: &[&str] = &[
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
        let mut range = self.info.offset_for(e.id).unwrap_or((u32::MAX, 0));
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

    fn node(&mut self, e: &IdedExpr, kind: Kind, ty: Ty) -> Checked {
        let id = self.next_id;
        self.next_id += 1;
        self.offsets.push(self.span(e));
        Some((Node { id, kind }, ty))
    }

    fn fact(&mut self, e: &IdedExpr, f: Fact) -> Checked {
        self.reads |= f.bit();
        self.node(e, Kind::Fact(f), f.ty())
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
            _ => return None,
        };
        match fields.iter().find(|(n, _)| *n == sel.field) {
            Some((_, f)) => Some(self.fact(e, *f)),
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
                self.node(e, Kind::Const(c), ty)
            }
            Expr::Ident(name) => {
                if let Some((_, slot, ty)) = self
                    .locals
                    .iter()
                    .rev()
                    .find(|(n, _, _)| n == name)
                    .cloned()
                {
                    return self.node(e, Kind::Local(slot), ty);
                }
                if name == "now" {
                    return self.fact(e, Fact::Now);
                }
                if let Some((_, f)) = vocab::surface_vars(self.surface)
                    .iter()
                    .find(|(n, _)| n == name)
                {
                    return self.fact(e, *f);
                }
                match name.as_str() {
                    "identity" | "env" | "secret"
                        if name != "secret" || self.surface == Surface::Secret =>
                    {
                        return self.err(
                            e,
                            format!("`{name}` is a record; read one of its fields"),
                            Some(format!("write e.g. `{name}.name`")),
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
            Expr::Select(sel) => {
                let (obj, ty) = self.check(&sel.operand)?;
                match ty {
                    Ty::Map(k, v) if *k == Ty::String => {
                        if sel.test {
                            return self.node(
                                e,
                                Kind::Has(Box::new(obj), sel.field.clone()),
                                Ty::Bool,
                            );
                        }
                        let key = Node {
                            id: self.next_id,
                            kind: Kind::Const(Const::Str(sel.field.clone())),
                        };
                        self.next_id += 1;
                        self.offsets.push(self.span(e));
                        self.node(e, Kind::Index(Box::new(obj), Box::new(key)), *v)
                    }
                    other => self.err(e, format!("a {other} has no field `{}`", sel.field), None),
                }
            }
            Expr::List(list) => {
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
                self.node(e, Kind::List(nodes), Ty::List(Box::new(elem)))
            }
            Expr::Map(_) | Expr::Struct(_) => self.err(
                e,
                "map and message literals are not part of the vocabulary".into(),
                None,
            ),
            Expr::Comprehension(comp) => {
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
                    let ids_before = (self.next_id, self.offsets.len(), self.reads);
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
                            e,
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
                    self.offsets.truncate(ids_before.1);
                    self.reads = ids_before.2;
                    accu_ty = sty;
                }
                None
            }
            Expr::Call(call) => self.call(e, call),
            Expr::Unspecified => self.err(e, "empty expression".into(), None),
        }
    }

    fn call(&mut self, e: &IdedExpr, call: &cel::common::ast::CallExpr) -> Checked {
        let name = call.func_name.as_str();
        let args = &call.args;
        let b = Box::new;
        // Logical operators first: their operands are checked even where an
        // evaluation would short-circuit around them.
        match (name, call.target.as_deref(), args.len()) {
            (operators::LOGICAL_AND | operators::LOGICAL_OR, None, 2) => {
                let l = self.expect_ty(&args[0], &Ty::Bool, name);
                let r = self.expect_ty(&args[1], &Ty::Bool, name);
                let (l, r) = (l?, r?);
                let k = if name == operators::LOGICAL_AND {
                    Kind::And(b(l), b(r))
                } else {
                    Kind::Or(b(l), b(r))
                };
                return self.node(e, k, Ty::Bool);
            }
            (operators::LOGICAL_NOT, None, 1) => {
                let a = self.expect_ty(&args[0], &Ty::Bool, "!")?;
                return self.node(e, Kind::Not(b(a)), Ty::Bool);
            }
            (operators::NOT_STRICTLY_FALSE, None, 1) => {
                let a = self.expect_ty(&args[0], &Ty::Bool, name)?;
                return self.node(e, Kind::NotStrictlyFalse(b(a)), Ty::Bool);
            }
            (operators::CONDITIONAL, None, 3) => {
                let c = self.expect_ty(&args[0], &Ty::Bool, "?:");
                let t = self.check(&args[1]);
                let f = self.check(&args[2]);
                let (c, (t, tt), (f, ft)) = (c?, t?, f?);
                if !tt.compatible(&ft) {
                    return self.err(e, format!("the branches of `?:` are {tt} and {ft}"), None);
                }
                let ty = tt.unify(&ft);
                return self.node(e, Kind::Cond(b(c), b(t), b(f)), ty);
            }
            _ => {}
        }
        // Everything else is strict: check the receiver and every argument.
        let target = call.target.as_deref().map(|t| self.check(t));
        let checked: Vec<Checked> = args.iter().map(|a| self.check(a)).collect();
        if matches!(target, Some(None)) || checked.iter().any(|c| c.is_none()) {
            return None;
        }
        let target = target.flatten();
        let mut argv: Vec<(Node, Ty)> = checked.into_iter().flatten().collect();
        match (name, target, argv.len()) {
            (operators::EQUALS | operators::NOT_EQUALS, None, 2) => {
                let (r, rt) = argv.remove(1);
                let (l, lt) = argv.remove(0);
                if !lt.compatible(&rt) {
                    return self.err(
                        e,
                        format!("cannot compare {} with {}", a_ty(&lt), a_ty(&rt)),
                        Some(equality_help(&lt, &rt)),
                    );
                }
                let k = if name == operators::EQUALS {
                    Kind::Eq(b(l), b(r))
                } else {
                    Kind::Ne(b(l), b(r))
                };
                self.node(e, k, Ty::Bool)
            }
            (
                operators::LESS
                | operators::LESS_EQUALS
                | operators::GREATER
                | operators::GREATER_EQUALS,
                None,
                2,
            ) => {
                let (r, rt) = argv.remove(1);
                let (l, lt) = argv.remove(0);
                let orderable = matches!(
                    lt,
                    Ty::Int | Ty::Uint | Ty::Double | Ty::String | Ty::Timestamp | Ty::Duration
                );
                if !orderable || lt != rt {
                    return self.err(
                        e,
                        format!("cannot order a {lt} against a {rt}"),
                        Some(equality_help(&lt, &rt)),
                    );
                }
                let op = match name {
                    operators::LESS => CmpOp::Lt,
                    operators::LESS_EQUALS => CmpOp::Le,
                    operators::GREATER => CmpOp::Gt,
                    _ => CmpOp::Ge,
                };
                self.node(e, Kind::Cmp(op, b(l), b(r)), Ty::Bool)
            }
            (
                operators::ADD
                | operators::SUBSTRACT
                | operators::MULTIPLY
                | operators::DIVIDE
                | operators::MODULO,
                None,
                2,
            ) => {
                let (r, rt) = argv.remove(1);
                let (l, lt) = argv.remove(0);
                let op = match name {
                    operators::ADD => ArithOp::Add,
                    operators::SUBSTRACT => ArithOp::Sub,
                    operators::MULTIPLY => ArithOp::Mul,
                    operators::DIVIDE => ArithOp::Div,
                    _ => ArithOp::Rem,
                };
                let ty = match (op, &lt, &rt) {
                    (_, Ty::Int, Ty::Int) | (_, Ty::Uint, Ty::Uint) => lt.clone(),
                    (ArithOp::Rem, Ty::Double, Ty::Double) => {
                        return self.err(e, "`%` is not defined on doubles".into(), None)
                    }
                    (_, Ty::Double, Ty::Double) => Ty::Double,
                    (ArithOp::Add, Ty::String, Ty::String) => Ty::String,
                    (ArithOp::Add, Ty::List(_), Ty::List(_)) if lt.compatible(&rt) => lt.unify(&rt),
                    (ArithOp::Add, Ty::Timestamp, Ty::Duration)
                    | (ArithOp::Sub, Ty::Timestamp, Ty::Duration) => Ty::Timestamp,
                    (ArithOp::Sub, Ty::Timestamp, Ty::Timestamp) => Ty::Duration,
                    (ArithOp::Add | ArithOp::Sub, Ty::Duration, Ty::Duration) => Ty::Duration,
                    _ => {
                        return self.err(
                            e,
                            format!(
                                "operator `{}` is not defined on {lt} and {rt}",
                                op_spelling(op)
                            ),
                            None,
                        )
                    }
                };
                self.node(e, Kind::Arith(op, b(l), b(r)), ty)
            }
            (operators::NEGATE, None, 1) => {
                let (a, t) = argv.remove(0);
                if !matches!(t, Ty::Int | Ty::Double | Ty::Duration) {
                    return self.err(e, format!("cannot negate a {t}"), None);
                }
                self.node(e, Kind::Neg(b(a)), t)
            }
            (operators::INDEX, None, 2) => {
                let (k, kt) = argv.remove(1);
                let (c, ct) = argv.remove(0);
                let ty = match (&ct, &kt) {
                    (Ty::List(t), Ty::Int) => (**t).clone(),
                    (Ty::Map(mk, v), k) if mk.compatible(k) => (**v).clone(),
                    _ => return self.err(e, format!("cannot index a {ct} with a {kt}"), None),
                };
                self.node(e, Kind::Index(b(c), b(k)), ty)
            }
            (operators::IN, None, 2) => {
                let (c, ct) = argv.remove(1);
                let (x, xt) = argv.remove(0);
                let ok = match &ct {
                    Ty::List(t) => t.compatible(&xt),
                    Ty::Map(k, _) => k.compatible(&xt),
                    _ => false,
                };
                if !ok {
                    return self.err(
                        e,
                        format!("`in` needs a list or map of {xt}, got a {ct}"),
                        None,
                    );
                }
                self.node(e, Kind::In(b(x), b(c)), Ty::Bool)
            }
            ("startsWith" | "endsWith" | "contains", Some((recv, Ty::String)), 1) => {
                let (a, at) = argv.remove(0);
                if at != Ty::String {
                    return self.err(e, format!("`{name}` takes a string, got a {at}"), None);
                }
                let k = match name {
                    "startsWith" => Kind::StartsWith(b(recv), b(a)),
                    "endsWith" => Kind::EndsWith(b(recv), b(a)),
                    _ => Kind::Contains(b(recv), b(a)),
                };
                self.node(e, k, Ty::Bool)
            }
            ("matches", Some((recv, Ty::String)), 1) => {
                let Some(pattern) = const_str(&argv[0].0) else {
                    return self.err(
                        e,
                        "`matches` takes a literal pattern".into(),
                        Some("write the regular expression as a string literal".into()),
                    );
                };
                match regex::RegexBuilder::new(&pattern)
                    .size_limit(1 << 20)
                    .build()
                {
                    Ok(re) => self.node(e, Kind::Matches(b(recv), Box::new(re)), Ty::Bool),
                    Err(err) => self.err(e, format!("invalid regular expression: {err}"), None),
                }
            }
            ("inCidr", Some((recv, Ty::String)), 1) => {
                let Some(cidr) = const_str(&argv[0].0) else {
                    return self.err(e, "`inCidr` takes a literal range".into(), None);
                };
                match cidr.parse::<ipnet::IpNet>() {
                    Ok(net) => self.node(e, Kind::InCidr(b(recv), net), Ty::Bool),
                    Err(_) => self.err(
                        e,
                        format!("`{cidr}` is not an address range"),
                        Some("write it like `10.0.0.0/8` or `fd00::/8`".into()),
                    ),
                }
            }
            ("lowerAscii", Some((recv, Ty::String)), 0) => {
                self.node(e, Kind::LowerAscii(b(recv)), Ty::String)
            }
            ("size", Some((recv, t)), 0) => {
                if !matches!(t, Ty::String | Ty::List(_) | Ty::Map(_, _)) {
                    return self.err(e, format!("`size` is not defined on a {t}"), None);
                }
                self.node(e, Kind::Size(b(recv)), Ty::Int)
            }
            ("size", None, 1) => {
                let (a, t) = argv.remove(0);
                if !matches!(t, Ty::String | Ty::List(_) | Ty::Map(_, _)) {
                    return self.err(e, format!("`size` is not defined on a {t}"), None);
                }
                self.node(e, Kind::Size(b(a)), Ty::Int)
            }
            ("int", None, 1) => {
                let (a, t) = argv.remove(0);
                if !matches!(
                    t,
                    Ty::Int | Ty::Uint | Ty::Double | Ty::String | Ty::Timestamp
                ) {
                    return self.err(e, format!("`int` is not defined on a {t}"), None);
                }
                self.node(e, Kind::ToInt(b(a)), Ty::Int)
            }
            ("string", None, 1) => {
                let (a, _) = argv.remove(0);
                self.node(e, Kind::ToString(b(a)), Ty::String)
            }
            ("timestamp" | "duration", None, 1) => {
                let Some(s) = const_str(&argv[0].0) else {
                    return self.err(e, format!("`{name}` takes a literal string"), None);
                };
                if name == "timestamp" {
                    match parse_timestamp(&s) {
                        Some(t) => self.node(e, Kind::Const(Const::Timestamp(t)), Ty::Timestamp),
                        None => self.err(
                            e,
                            format!("`{s}` is not a timestamp"),
                            Some("write it as `2026-01-31T12:00:00Z`".into()),
                        ),
                    }
                } else {
                    match parse_duration(&s) {
                        Some(d) => self.node(e, Kind::Const(Const::Duration(d)), Ty::Duration),
                        None => self.err(
                            e,
                            format!("`{s}` is not a duration"),
                            Some("write it as `90s`, `15m` or `2h`".into()),
                        ),
                    }
                }
            }
            (_, target, _) => {
                let shown = if target.is_some() {
                    format!(".{name}()")
                } else {
                    format!("{name}()")
                };
                let recv_ty = target
                    .map(|(_, t)| format!(" on a {t}"))
                    .unwrap_or_default();
                let known = FUNCTIONS.contains(&name);
                let help = if known {
                    Some(format!("see docs/policy.md for how `{name}` is called"))
                } else {
                    vocab::did_you_mean(name, FUNCTIONS.iter().copied())
                        .map(|s| format!("did you mean `{s}`?"))
                };
                self.err(
                    e,
                    if known {
                        format!(
                            "`{shown}` is not defined{recv_ty} with {} argument(s)",
                            args.len()
                        )
                    } else {
                        format!("unknown function `{shown}`")
                    },
                    help,
                )
            }
        }
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

fn equality_help(l: &Ty, r: &Ty) -> String {
    match (l, r) {
        (Ty::Int, Ty::String) | (Ty::String, Ty::Int) => {
            "write the number without quotes, e.g. `port == 443`".into()
        }
        _ => "both sides must have one type; convert with `int(...)` or `string(...)`".into(),
    }
}

/// `a string`, `an int`.
fn a_ty(t: &Ty) -> String {
    let s = t.to_string();
    if s.starts_with(['a', 'e', 'i', 'o', 'u']) {
        format!("an {s}")
    } else {
        format!("a {s}")
    }
}

fn op_spelling(op: ArithOp) -> &'static str {
    match op {
        ArithOp::Add => "+",
        ArithOp::Sub => "-",
        ArithOp::Mul => "*",
        ArithOp::Div => "/",
        ArithOp::Rem => "%",
    }
}

fn const_str(n: &Node) -> Option<String> {
    match &n.kind {
        Kind::Const(Const::Str(s)) => Some(s.clone()),
        _ => None,
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` to seconds since the epoch.
pub fn parse_timestamp(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'Z'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from civil (proleptic Gregorian), H. Hinnant's algorithm.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// `90s`, `15m`, `2h`, `1h30m` to seconds.
pub fn parse_duration(s: &str) -> Option<i64> {
    if s.is_empty() {
        return None;
    }
    let mut total: i64 = 0;
    let mut num = String::new();
    for ch in s.chars() {
        if ch.is_ascii_digit() {
            num.push(ch);
            continue;
        }
        let n: i64 = num.parse().ok()?;
        num.clear();
        let unit = match ch {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    if !num.is_empty() {
        return None;
    }
    Some(total)
}

// ---------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------

/// A value during evaluation. Strings and maps borrow from the facts.
#[derive(Debug, Clone, PartialEq)]
pub enum Val<'a> {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(Cow<'a, str>),
    Null,
    Timestamp(i64),
    Duration(i64),
    List(Vec<Val<'a>>),
    StrMap(&'a BTreeMap<String, String>),
}

impl std::fmt::Display for Val<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Val::Bool(b) => write!(f, "{b}"),
            Val::Int(i) => write!(f, "{i}"),
            Val::Uint(u) => write!(f, "{u}u"),
            Val::Double(d) => write!(f, "{d}"),
            Val::Str(s) => write!(f, "{s:?}"),
            Val::Null => f.write_str("null"),
            Val::Timestamp(t) => write!(f, "timestamp({t})"),
            Val::Duration(d) => write!(f, "duration({d}s)"),
            Val::List(xs) => {
                f.write_str("[")?;
                for (i, x) in xs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{x}")?;
                }
                f.write_str("]")
            }
            Val::StrMap(m) => {
                f.write_str("{")?;
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k:?}: {v:?}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// Why a value is not determined: facts that were unknown, and errors.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Open {
    pub unknown: u32,
    pub errors: Vec<String>,
}

impl Open {
    fn error(msg: impl Into<String>) -> Open {
        Open {
            unknown: 0,
            errors: vec![msg.into()],
        }
    }
    fn merge(mut self, other: Open) -> Open {
        self.unknown |= other.unknown;
        self.errors.extend(other.errors);
        self
    }
}

/// The result of evaluating a node: a value, or open.
pub type Res<'a> = Result<Val<'a>, Open>;

/// What a rule can read: facts by name, possibly unknown.
pub trait FactSource {
    /// The value of `f`, or `None` when it is unknown at this point.
    fn fact(&self, f: Fact) -> Option<Val<'_>>;
}

/// Records node values for explain; a no-op on the decision path.
pub trait Trace<'a> {
    fn record(&mut self, id: u32, r: &Res<'a>);
}

/// The tracer the decision path uses: records nothing, compiles to nothing.
pub struct NoTrace;

impl<'a> Trace<'a> for NoTrace {
    #[inline(always)]
    fn record(&mut self, _id: u32, _r: &Res<'a>) {}
}

/// A tracer that keeps every node's value.
#[derive(Debug, Default)]
pub struct FullTrace<'a> {
    pub values: Vec<Option<Res<'a>>>,
}

impl<'a> Trace<'a> for FullTrace<'a> {
    fn record(&mut self, id: u32, r: &Res<'a>) {
        let i = id as usize;
        if self.values.len() <= i {
            self.values.resize(i + 1, None);
        }
        self.values[i] = Some(r.clone());
    }
}

/// Evaluates a compiled rule against `facts`.
pub fn eval<'a, F: FactSource, T: Trace<'a>>(n: &'a Node, facts: &'a F, t: &mut T) -> Res<'a> {
    let mut locals: Vec<Val<'a>> = Vec::new();
    ev(n, facts, &mut locals, t)
}

fn ev<'a, F: FactSource, T: Trace<'a>>(
    n: &'a Node,
    facts: &'a F,
    locals: &mut Vec<Val<'a>>,
    t: &mut T,
) -> Res<'a> {
    let r = ev_inner(n, facts, locals, t);
    t.record(n.id, &r);
    r
}

fn as_bool(r: Res<'_>) -> Result<bool, Open> {
    match r? {
        Val::Bool(b) => Ok(b),
        other => Err(Open::error(format!("expected a bool, got {other}"))),
    }
}

fn as_str<'b>(v: &'b Val<'_>) -> Result<&'b str, Open> {
    match v {
        Val::Str(s) => Ok(s),
        other => Err(Open::error(format!("expected a string, got {other}"))),
    }
}

fn ev_inner<'a, F: FactSource, T: Trace<'a>>(
    n: &'a Node,
    facts: &'a F,
    locals: &mut Vec<Val<'a>>,
    t: &mut T,
) -> Res<'a> {
    match &n.kind {
        Kind::Const(c) => Ok(match c {
            Const::Bool(b) => Val::Bool(*b),
            Const::Int(i) => Val::Int(*i),
            Const::Uint(u) => Val::Uint(*u),
            Const::Double(d) => Val::Double(*d),
            Const::Str(s) => Val::Str(Cow::Borrowed(s)),
            Const::Null => Val::Null,
            Const::Timestamp(x) => Val::Timestamp(*x),
            Const::Duration(x) => Val::Duration(*x),
        }),
        Kind::Fact(f) => facts.fact(*f).ok_or(Open {
            unknown: f.bit(),
            errors: Vec::new(),
        }),
        Kind::Local(slot) => locals
            .get(*slot as usize)
            .cloned()
            .ok_or_else(|| Open::error("internal: unbound variable")),
        // CEL's logical operators are commutative over errors and unknowns:
        // a definite `false` (for `&&`) or `true` (for `||`) on either side
        // decides, whatever the other side is.
        Kind::And(a, b) => match as_bool(ev(a, facts, locals, t)) {
            Ok(false) => Ok(Val::Bool(false)),
            Ok(true) => as_bool(ev(b, facts, locals, t)).map(Val::Bool),
            Err(oa) => match as_bool(ev(b, facts, locals, t)) {
                Ok(false) => Ok(Val::Bool(false)),
                Ok(true) => Err(oa),
                Err(ob) => Err(oa.merge(ob)),
            },
        },
        Kind::Or(a, b) => match as_bool(ev(a, facts, locals, t)) {
            Ok(true) => Ok(Val::Bool(true)),
            Ok(false) => as_bool(ev(b, facts, locals, t)).map(Val::Bool),
            Err(oa) => match as_bool(ev(b, facts, locals, t)) {
                Ok(true) => Ok(Val::Bool(true)),
                Ok(false) => Err(oa),
                Err(ob) => Err(oa.merge(ob)),
            },
        },
        Kind::Not(a) => as_bool(ev(a, facts, locals, t)).map(|b| Val::Bool(!b)),
        Kind::NotStrictlyFalse(a) => Ok(Val::Bool(!matches!(
            ev(a, facts, locals, t),
            Ok(Val::Bool(false))
        ))),
        Kind::Cond(c, a, b) => {
            if as_bool(ev(c, facts, locals, t))? {
                ev(a, facts, locals, t)
            } else {
                ev(b, facts, locals, t)
            }
        }
        Kind::Eq(a, b) | Kind::Ne(a, b) => {
            let (x, y) = both(ev(a, facts, locals, t), ev(b, facts, locals, t))?;
            let eq = x == y;
            Ok(Val::Bool(if matches!(n.kind, Kind::Eq(..)) {
                eq
            } else {
                !eq
            }))
        }
        Kind::Cmp(op, a, b) => {
            let (x, y) = both(ev(a, facts, locals, t), ev(b, facts, locals, t))?;
            let ord = match (&x, &y) {
                (Val::Int(p), Val::Int(q)) => p.cmp(q),
                (Val::Uint(p), Val::Uint(q)) => p.cmp(q),
                (Val::Double(p), Val::Double(q)) => p
                    .partial_cmp(q)
                    .ok_or_else(|| Open::error("comparison with NaN"))?,
                (Val::Str(p), Val::Str(q)) => p.cmp(q),
                (Val::Timestamp(p), Val::Timestamp(q)) | (Val::Duration(p), Val::Duration(q)) => {
                    p.cmp(q)
                }
                _ => return Err(Open::error(format!("cannot order {x} against {y}"))),
            };
            use std::cmp::Ordering::*;
            Ok(Val::Bool(match op {
                CmpOp::Lt => ord == Less,
                CmpOp::Le => ord != Greater,
                CmpOp::Gt => ord == Greater,
                CmpOp::Ge => ord != Less,
            }))
        }
        Kind::Arith(op, a, b) => {
            let (x, y) = both(ev(a, facts, locals, t), ev(b, facts, locals, t))?;
            arith(*op, x, y)
        }
        Kind::Neg(a) => match ev(a, facts, locals, t)? {
            Val::Int(i) => i
                .checked_neg()
                .map(Val::Int)
                .ok_or_else(|| Open::error("integer overflow")),
            Val::Double(d) => Ok(Val::Double(-d)),
            Val::Duration(d) => Ok(Val::Duration(-d)),
            other => Err(Open::error(format!("cannot negate {other}"))),
        },
        Kind::Index(c, k) => {
            let (c, k) = both(ev(c, facts, locals, t), ev(k, facts, locals, t))?;
            match (c, k) {
                (Val::List(xs), Val::Int(i)) => usize::try_from(i)
                    .ok()
                    .and_then(|i| xs.get(i).cloned())
                    .ok_or_else(|| Open::error(format!("index {i} out of range"))),
                (Val::StrMap(m), Val::Str(k)) => m
                    .get(k.as_ref())
                    .map(|v| Val::Str(Cow::Borrowed(v.as_str())))
                    .ok_or_else(|| Open::error(format!("no such key: {k:?}"))),
                (c, k) => Err(Open::error(format!("cannot index {c} with {k}"))),
            }
        }
        Kind::Has(m, field) => match ev(m, facts, locals, t)? {
            Val::StrMap(m) => Ok(Val::Bool(m.contains_key(field))),
            other => Err(Open::error(format!("has() on {other}"))),
        },
        Kind::In(x, c) => {
            let (x, c) = both(ev(x, facts, locals, t), ev(c, facts, locals, t))?;
            match c {
                Val::List(xs) => Ok(Val::Bool(xs.contains(&x))),
                Val::StrMap(m) => Ok(Val::Bool(m.contains_key(as_str(&x)?))),
                other => Err(Open::error(format!("`in` on {other}"))),
            }
        }
        Kind::List(xs) => {
            let mut out = Vec::with_capacity(xs.len());
            let mut open: Option<Open> = None;
            for x in xs {
                match ev(x, facts, locals, t) {
                    Ok(v) => out.push(v),
                    Err(o) => open = Some(open.map_or(o.clone(), |p| p.merge(o))),
                }
            }
            match open {
                Some(o) => Err(o),
                None => Ok(Val::List(out)),
            }
        }
        Kind::StartsWith(a, b) | Kind::EndsWith(a, b) | Kind::Contains(a, b) => {
            let (x, y) = both(ev(a, facts, locals, t), ev(b, facts, locals, t))?;
            let (x, y) = (as_str(&x)?, as_str(&y)?);
            Ok(Val::Bool(match n.kind {
                Kind::StartsWith(..) => x.starts_with(y),
                Kind::EndsWith(..) => x.ends_with(y),
                _ => x.contains(y),
            }))
        }
        Kind::Matches(a, re) => {
            let x = ev(a, facts, locals, t)?;
            Ok(Val::Bool(re.is_match(as_str(&x)?)))
        }
        Kind::InCidr(a, net) => {
            let x = ev(a, facts, locals, t)?;
            let s = as_str(&x)?;
            let ip: std::net::IpAddr = s
                .parse()
                .map_err(|_| Open::error(format!("{s:?} is not an IP address")))?;
            Ok(Val::Bool(net.contains(&ip)))
        }
        Kind::LowerAscii(a) => {
            let x = ev(a, facts, locals, t)?;
            Ok(Val::Str(Cow::Owned(as_str(&x)?.to_ascii_lowercase())))
        }
        Kind::Size(a) => match ev(a, facts, locals, t)? {
            Val::Str(s) => Ok(Val::Int(s.chars().count() as i64)),
            Val::List(xs) => Ok(Val::Int(xs.len() as i64)),
            Val::StrMap(m) => Ok(Val::Int(m.len() as i64)),
            other => Err(Open::error(format!("size() of {other}"))),
        },
        Kind::ToInt(a) => match ev(a, facts, locals, t)? {
            Val::Int(i) => Ok(Val::Int(i)),
            Val::Uint(u) => i64::try_from(u)
                .map(Val::Int)
                .map_err(|_| Open::error("integer overflow")),
            Val::Double(d) if d.is_finite() && d.abs() < 9.2e18 => Ok(Val::Int(d as i64)),
            Val::Str(s) => s
                .parse::<i64>()
                .map(Val::Int)
                .map_err(|_| Open::error(format!("{s:?} is not an integer"))),
            Val::Timestamp(ts) => Ok(Val::Int(ts)),
            other => Err(Open::error(format!("int() of {other}"))),
        },
        Kind::ToString(a) => match ev(a, facts, locals, t)? {
            Val::Str(s) => Ok(Val::Str(s)),
            other => Ok(Val::Str(Cow::Owned(other.to_string()))),
        },
        Kind::Comprehension(c) => {
            let range = ev(&c.range, facts, locals, t)?;
            let items: Vec<Val<'a>> = match range {
                Val::List(xs) => xs,
                Val::StrMap(m) => m
                    .keys()
                    .map(|k| Val::Str(Cow::Borrowed(k.as_str())))
                    .collect(),
                other => return Err(Open::error(format!("cannot iterate over {other}"))),
            };
            let need = c.accu.max(c.iter) as usize + 1;
            if locals.len() < need {
                locals.resize(need, Val::Null);
            }
            // An open accumulator is carried as a value so that a later
            // definite step (`false` for `all`) can still decide.
            let mut accu: Res<'a> = ev(&c.init, facts, locals, t);
            for item in items {
                locals[c.iter as usize] = item;
                let cont = match &accu {
                    Ok(v) => {
                        locals[c.accu as usize] = v.clone();
                        ev(&c.cond, facts, locals, t)
                    }
                    Err(_) => Ok(Val::Bool(true)),
                };
                if !matches!(cont, Ok(Val::Bool(true))) {
                    break;
                }
                accu = step_with_open(c, accu, facts, locals, t);
            }
            match accu {
                Ok(v) => {
                    locals[c.accu as usize] = v;
                    ev(&c.result, facts, locals, t)
                }
                Err(o) => Err(o),
            }
        }
    }
}

/// One comprehension step. When the accumulator is open, the step is run with
/// `true` standing in for a boolean accumulator; only a definite result that
/// does not depend on it (`false` for `all`, `true` for `exists`) survives.
fn step_with_open<'a, F: FactSource, T: Trace<'a>>(
    c: &'a Comprehension,
    accu: Res<'a>,
    facts: &'a F,
    locals: &mut Vec<Val<'a>>,
    t: &mut T,
) -> Res<'a> {
    match accu {
        Ok(v) => {
            locals[c.accu as usize] = v;
            ev(&c.step, facts, locals, t)
        }
        Err(open) => {
            let mut agree: Option<Val<'a>> = None;
            for stand_in in [true, false] {
                locals[c.accu as usize] = Val::Bool(stand_in);
                match ev(&c.step, facts, locals, t) {
                    Ok(v) if agree.as_ref().is_none_or(|a| *a == v) => agree = Some(v),
                    Ok(_) => return Err(open),
                    Err(o) => return Err(open.merge(o)),
                }
            }
            agree.ok_or(open)
        }
    }
}

fn both<'a>(a: Res<'a>, b: Res<'a>) -> Result<(Val<'a>, Val<'a>), Open> {
    match (a, b) {
        (Ok(x), Ok(y)) => Ok((x, y)),
        (Err(o), Ok(_)) | (Ok(_), Err(o)) => Err(o),
        (Err(o), Err(p)) => Err(o.merge(p)),
    }
}

fn arith<'a>(op: ArithOp, x: Val<'a>, y: Val<'a>) -> Res<'a> {
    let overflow = || Open::error("integer overflow");
    match (op, x, y) {
        (_, Val::Int(_), Val::Int(0)) | (_, Val::Uint(_), Val::Uint(0))
            if matches!(op, ArithOp::Div | ArithOp::Rem) =>
        {
            Err(Open::error("division by zero"))
        }
        (op, Val::Int(a), Val::Int(b)) => match op {
            ArithOp::Add => a.checked_add(b),
            ArithOp::Sub => a.checked_sub(b),
            ArithOp::Mul => a.checked_mul(b),
            ArithOp::Div => a.checked_div(b),
            ArithOp::Rem => a.checked_rem(b),
        }
        .map(Val::Int)
        .ok_or_else(overflow),
        (op, Val::Uint(a), Val::Uint(b)) => match op {
            ArithOp::Add => a.checked_add(b),
            ArithOp::Sub => a.checked_sub(b),
            ArithOp::Mul => a.checked_mul(b),
            ArithOp::Div => a.checked_div(b),
            ArithOp::Rem => a.checked_rem(b),
        }
        .map(Val::Uint)
        .ok_or_else(overflow),
        (op, Val::Double(a), Val::Double(b)) => Ok(Val::Double(match op {
            ArithOp::Add => a + b,
            ArithOp::Sub => a - b,
            ArithOp::Mul => a * b,
            _ => a / b,
        })),
        (ArithOp::Add, Val::Str(a), Val::Str(b)) => Ok(Val::Str(Cow::Owned(format!("{a}{b}")))),
        (ArithOp::Add, Val::List(mut a), Val::List(b)) => {
            a.extend(b);
            Ok(Val::List(a))
        }
        (ArithOp::Add, Val::Timestamp(a), Val::Duration(b)) => {
            a.checked_add(b).map(Val::Timestamp).ok_or_else(overflow)
        }
        (ArithOp::Sub, Val::Timestamp(a), Val::Duration(b)) => {
            a.checked_sub(b).map(Val::Timestamp).ok_or_else(overflow)
        }
        (ArithOp::Sub, Val::Timestamp(a), Val::Timestamp(b)) => {
            a.checked_sub(b).map(Val::Duration).ok_or_else(overflow)
        }
        (ArithOp::Add, Val::Duration(a), Val::Duration(b)) => {
            a.checked_add(b).map(Val::Duration).ok_or_else(overflow)
        }
        (ArithOp::Sub, Val::Duration(a), Val::Duration(b)) => {
            a.checked_sub(b).map(Val::Duration).ok_or_else(overflow)
        }
        (_, x, y) => Err(Open::error(format!(
            "cannot apply {} to {x} and {y}",
            op_spelling(op)
        ))),
    }
}

/// If `n` is a conjunction with a conjunct `identity.namespace == "lit"`
/// (either side), the literal: the rule is false for every other namespace.
pub fn namespace_guard(n: &Node) -> Option<&str> {
    match &n.kind {
        Kind::And(a, b) => namespace_guard(a).or_else(|| namespace_guard(b)),
        Kind::Eq(a, b) => match (&a.kind, &b.kind) {
            (Kind::Fact(Fact::IdentityNamespace), Kind::Const(Const::Str(s)))
            | (Kind::Const(Const::Str(s)), Kind::Fact(Fact::IdentityNamespace)) => Some(s),
            _ => None,
        },
        _ => None,
    }
}
