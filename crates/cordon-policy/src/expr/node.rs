//! The compiled tree: what a checked rule is made of.

use crate::vocab::Fact;

/// A node of a compiled rule. `id` indexes the trace.
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

pub(super) fn op_spelling(op: ArithOp) -> &'static str {
    match op {
        ArithOp::Add => "+",
        ArithOp::Sub => "-",
        ArithOp::Mul => "*",
        ArithOp::Div => "/",
        ArithOp::Rem => "%",
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
