//! Evaluation: three-valued (a value, or open on an unknown fact or an
//! error), recording each node's value when asked.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::node::{op_spelling, ArithOp, CmpOp, Comprehension, Const, Kind, Node};
use crate::vocab::Fact;

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
    /// A map whose values are lists of strings (`query`).
    ListMap(&'a BTreeMap<String, Vec<String>>),
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
            Val::ListMap(m) => {
                f.write_str("{")?;
                for (i, (k, vs)) in m.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k:?}: {vs:?}")?;
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

pub(super) fn ev<'a, F: FactSource, T: Trace<'a>>(
    n: &'a Node,
    facts: &'a F,
    locals: &mut Vec<Val<'a>>,
    t: &mut T,
) -> Res<'a> {
    let r = ev_inner(n, facts, locals, t);
    t.record(n.id, &r);
    r
}

pub(super) fn as_bool(r: Res<'_>) -> Result<bool, Open> {
    match r? {
        Val::Bool(b) => Ok(b),
        other => Err(Open::error(format!("expected a bool, got {other}"))),
    }
}

pub(super) fn as_str<'b>(v: &'b Val<'_>) -> Result<&'b str, Open> {
    match v {
        Val::Str(s) => Ok(s),
        other => Err(Open::error(format!("expected a string, got {other}"))),
    }
}

pub(super) fn ev_inner<'a, F: FactSource, T: Trace<'a>>(
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
            compare(op, &x, &y)
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
            index(c, k)
        }
        Kind::Has(m, field) => match ev(m, facts, locals, t)? {
            Val::StrMap(m) => Ok(Val::Bool(m.contains_key(field))),
            Val::ListMap(m) => Ok(Val::Bool(m.contains_key(field))),
            other => Err(Open::error(format!("has() on {other}"))),
        },
        Kind::In(x, c) => {
            let (x, c) = both(ev(x, facts, locals, t), ev(c, facts, locals, t))?;
            match c {
                Val::List(xs) => Ok(Val::Bool(xs.contains(&x))),
                Val::StrMap(m) => Ok(Val::Bool(m.contains_key(as_str(&x)?))),
                Val::ListMap(m) => Ok(Val::Bool(m.contains_key(as_str(&x)?))),
                other => Err(Open::error(format!("`in` on {other}"))),
            }
        }
        Kind::List(xs) => list(xs, facts, locals, t),
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
            Val::ListMap(m) => Ok(Val::Int(m.len() as i64)),
            other => Err(Open::error(format!("size() of {other}"))),
        },
        Kind::ToInt(a) => to_int(ev(a, facts, locals, t)?),
        Kind::ToString(a) => match ev(a, facts, locals, t)? {
            Val::Str(s) => Ok(Val::Str(s)),
            other => Ok(Val::Str(Cow::Owned(other.to_string()))),
        },
        Kind::Comprehension(c) => comprehension(c, facts, locals, t),
    }
}

/// `<`, `<=`, `>`, `>=` over two values of one orderable type.
fn compare<'a>(op: &CmpOp, x: &Val<'a>, y: &Val<'a>) -> Res<'a> {
    let ord = match (x, y) {
        (Val::Int(p), Val::Int(q)) => p.cmp(q),
        (Val::Uint(p), Val::Uint(q)) => p.cmp(q),
        (Val::Double(p), Val::Double(q)) => p
            .partial_cmp(q)
            .ok_or_else(|| Open::error("comparison with NaN"))?,
        (Val::Str(p), Val::Str(q)) => p.cmp(q),
        (Val::Timestamp(p), Val::Timestamp(q)) | (Val::Duration(p), Val::Duration(q)) => p.cmp(q),
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

/// An element of a list, or a value of a map.
fn index<'a>(c: Val<'a>, k: Val<'a>) -> Res<'a> {
    match (c, k) {
        (Val::List(xs), Val::Int(i)) => usize::try_from(i)
            .ok()
            .and_then(|i| xs.get(i).cloned())
            .ok_or_else(|| Open::error(format!("index {i} out of range"))),
        (Val::StrMap(m), Val::Str(k)) => m
            .get(k.as_ref())
            .map(|v| Val::Str(Cow::Borrowed(v.as_str())))
            .ok_or_else(|| Open::error(format!("no such key: {k:?}"))),
        (Val::ListMap(m), Val::Str(k)) => m
            .get(k.as_ref())
            .map(|vs| {
                Val::List(
                    vs.iter()
                        .map(|v| Val::Str(Cow::Borrowed(v.as_str())))
                        .collect(),
                )
            })
            .ok_or_else(|| Open::error(format!("no such key: {k:?}"))),
        (c, k) => Err(Open::error(format!("cannot index {c} with {k}"))),
    }
}

/// A list literal: every element, or what left any open.
fn list<'a, F: FactSource, T: Trace<'a>>(
    xs: &'a [Node],
    facts: &'a F,
    locals: &mut Vec<Val<'a>>,
    t: &mut T,
) -> Res<'a> {
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

/// `int(...)`.
fn to_int(v: Val<'_>) -> Res<'_> {
    match v {
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
    }
}

/// A comprehension (`all`, `exists`, `map`, `filter`, ...): its range,
/// then each step while its condition holds, then its result.
fn comprehension<'a, F: FactSource, T: Trace<'a>>(
    c: &'a Comprehension,
    facts: &'a F,
    locals: &mut Vec<Val<'a>>,
    t: &mut T,
) -> Res<'a> {
    let range = ev(&c.range, facts, locals, t)?;
    let items: Vec<Val<'a>> = match range {
        Val::List(xs) => xs,
        Val::StrMap(m) => m
            .keys()
            .map(|k| Val::Str(Cow::Borrowed(k.as_str())))
            .collect(),
        Val::ListMap(m) => m
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

/// One comprehension step. When the accumulator is open, the step is run with
/// `true` standing in for a boolean accumulator; only a definite result that
/// does not depend on it (`false` for `all`, `true` for `exists`) survives.
pub(super) fn step_with_open<'a, F: FactSource, T: Trace<'a>>(
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

pub(super) fn both<'a>(a: Res<'a>, b: Res<'a>) -> Result<(Val<'a>, Val<'a>), Open> {
    match (a, b) {
        (Ok(x), Ok(y)) => Ok((x, y)),
        (Err(o), Ok(_)) | (Ok(_), Err(o)) => Err(o),
        (Err(o), Err(p)) => Err(o.merge(p)),
    }
}

pub(super) fn arith<'a>(op: ArithOp, x: Val<'a>, y: Val<'a>) -> Res<'a> {
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
