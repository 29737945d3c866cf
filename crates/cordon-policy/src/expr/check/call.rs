//! Checking calls: methods, functions and macros (comprehensions).

use cel::common::ast::{operators, IdedExpr};

use super::super::node::{op_spelling, ArithOp, CmpOp, Const, Kind, Node};
use super::super::time::{parse_duration, parse_timestamp};
use super::{a_ty, const_str, equality_help, Checked, Checker, FUNCTIONS};
use crate::vocab::{self, Ty};

impl Checker<'_> {
    pub(super) fn call(&mut self, e: &IdedExpr, call: &cel::common::ast::CallExpr) -> Checked {
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
                return self.node(k, Ty::Bool);
            }
            (operators::LOGICAL_NOT, None, 1) => {
                let a = self.expect_ty(&args[0], &Ty::Bool, "!")?;
                return self.node(Kind::Not(b(a)), Ty::Bool);
            }
            (operators::NOT_STRICTLY_FALSE, None, 1) => {
                let a = self.expect_ty(&args[0], &Ty::Bool, name)?;
                return self.node(Kind::NotStrictlyFalse(b(a)), Ty::Bool);
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
                return self.node(Kind::Cond(b(c), b(t), b(f)), ty);
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
            (operators::EQUALS | operators::NOT_EQUALS, None, 2) => self.equality(e, name, argv),
            (
                operators::LESS
                | operators::LESS_EQUALS
                | operators::GREATER
                | operators::GREATER_EQUALS,
                None,
                2,
            ) => self.ordering(e, name, argv),
            (
                operators::ADD
                | operators::SUBSTRACT
                | operators::MULTIPLY
                | operators::DIVIDE
                | operators::MODULO,
                None,
                2,
            ) => self.arithmetic(e, name, argv),
            (operators::NEGATE, None, 1) => {
                let (a, t) = argv.remove(0);
                if !matches!(t, Ty::Int | Ty::Double | Ty::Duration) {
                    return self.err(e, format!("cannot negate a {t}"), None);
                }
                self.node(Kind::Neg(b(a)), t)
            }
            (operators::INDEX, None, 2) => {
                let (k, kt) = argv.remove(1);
                let (c, ct) = argv.remove(0);
                let ty = match (&ct, &kt) {
                    (Ty::List(t), Ty::Int) => (**t).clone(),
                    (Ty::Map(mk, v), k) if mk.compatible(k) => (**v).clone(),
                    _ => return self.err(e, format!("cannot index a {ct} with a {kt}"), None),
                };
                self.node(Kind::Index(b(c), b(k)), ty)
            }
            (operators::IN, None, 2) => self.membership(e, argv),
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
                self.node(k, Ty::Bool)
            }
            ("matches", Some((recv, Ty::String)), 1) => self.matches(e, recv, &argv),
            ("inCidr", Some((recv, Ty::String)), 1) => self.in_cidr(e, recv, &argv),
            ("lowerAscii", Some((recv, Ty::String)), 0) => {
                self.node(Kind::LowerAscii(b(recv)), Ty::String)
            }
            ("size", Some((recv, t)), 0) => {
                if !matches!(t, Ty::String | Ty::List(_) | Ty::Map(_, _)) {
                    return self.err(e, format!("`size` is not defined on a {t}"), None);
                }
                self.node(Kind::Size(b(recv)), Ty::Int)
            }
            ("size", None, 1) => {
                let (a, t) = argv.remove(0);
                if !matches!(t, Ty::String | Ty::List(_) | Ty::Map(_, _)) {
                    return self.err(e, format!("`size` is not defined on a {t}"), None);
                }
                self.node(Kind::Size(b(a)), Ty::Int)
            }
            ("int", None, 1) => {
                let (a, t) = argv.remove(0);
                if !matches!(
                    t,
                    Ty::Int | Ty::Uint | Ty::Double | Ty::String | Ty::Timestamp
                ) {
                    return self.err(e, format!("`int` is not defined on a {t}"), None);
                }
                self.node(Kind::ToInt(b(a)), Ty::Int)
            }
            ("string", None, 1) => {
                let (a, _) = argv.remove(0);
                self.node(Kind::ToString(b(a)), Ty::String)
            }
            ("timestamp" | "duration", None, 1) => self.time_literal(e, name, &argv),
            (_, target, _) => self.unknown_call(e, name, target, args.len()),
        }
    }

    /// `==` and `!=`: operands of compatible types.
    fn equality(&mut self, e: &IdedExpr, name: &str, mut argv: Vec<(Node, Ty)>) -> Checked {
        let b = Box::new;
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
        self.node(k, Ty::Bool)
    }

    /// `<`, `<=`, `>`, `>=`: operands of one orderable type.
    fn ordering(&mut self, e: &IdedExpr, name: &str, mut argv: Vec<(Node, Ty)>) -> Checked {
        let b = Box::new;
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
        self.node(Kind::Cmp(op, b(l), b(r)), Ty::Bool)
    }

    /// `+`, `-`, `*`, `/`, `%`: the result's type from the operands'.
    fn arithmetic(&mut self, e: &IdedExpr, name: &str, mut argv: Vec<(Node, Ty)>) -> Checked {
        let b = Box::new;
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
        self.node(Kind::Arith(op, b(l), b(r)), ty)
    }

    /// `in`: a list or map whose elements or keys are of the operand's type.
    fn membership(&mut self, e: &IdedExpr, mut argv: Vec<(Node, Ty)>) -> Checked {
        let b = Box::new;
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
        self.node(Kind::In(b(x), b(c)), Ty::Bool)
    }

    /// `.matches(...)`: a literal pattern, compiled once, with a bounded size.
    fn matches(&mut self, e: &IdedExpr, recv: Node, argv: &[(Node, Ty)]) -> Checked {
        let b = Box::new;
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
            Ok(re) => self.node(Kind::Matches(b(recv), Box::new(re)), Ty::Bool),
            Err(err) => self.err(e, format!("invalid regular expression: {err}"), None),
        }
    }

    /// `.inCidr(...)`: a literal address range.
    fn in_cidr(&mut self, e: &IdedExpr, recv: Node, argv: &[(Node, Ty)]) -> Checked {
        let b = Box::new;
        let Some(cidr) = const_str(&argv[0].0) else {
            return self.err(e, "`inCidr` takes a literal range".into(), None);
        };
        match cidr.parse::<ipnet::IpNet>() {
            Ok(net) => self.node(Kind::InCidr(b(recv), net), Ty::Bool),
            Err(_) => self.err(
                e,
                format!("`{cidr}` is not an address range"),
                Some("write it like `10.0.0.0/8` or `fd00::/8`".into()),
            ),
        }
    }

    /// `timestamp(...)` and `duration(...)`: literal strings, parsed now.
    fn time_literal(&mut self, e: &IdedExpr, name: &str, argv: &[(Node, Ty)]) -> Checked {
        let Some(s) = const_str(&argv[0].0) else {
            return self.err(e, format!("`{name}` takes a literal string"), None);
        };
        if name == "timestamp" {
            match parse_timestamp(&s) {
                Some(t) => self.node(Kind::Const(Const::Timestamp(t)), Ty::Timestamp),
                None => self.err(
                    e,
                    format!("`{s}` is not a timestamp"),
                    Some("write it as `2026-01-31T12:00:00Z`".into()),
                ),
            }
        } else {
            match parse_duration(&s) {
                Some(d) => self.node(Kind::Const(Const::Duration(d)), Ty::Duration),
                None => self.err(
                    e,
                    format!("`{s}` is not a duration"),
                    Some("write it as `90s`, `15m` or `2h`".into()),
                ),
            }
        }
    }

    /// A call no arm above accepts: unknown, or known with other arguments.
    fn unknown_call(
        &mut self,
        e: &IdedExpr,
        name: &str,
        target: Option<(Node, Ty)>,
        arity: usize,
    ) -> Checked {
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
                format!("`{shown}` is not defined{recv_ty} with {arity} argument(s)")
            } else {
                format!("unknown function `{shown}`")
            },
            help,
        )
    }
}
