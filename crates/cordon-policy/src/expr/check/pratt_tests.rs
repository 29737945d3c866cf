//! The fast path's claim, held: where `pratt_agrees` sends a rule body to
//! the Pratt parser and it parses, the ANTLR parser (the reference) parses
//! it too, to the same tree.

use super::{compile, pratt_agrees};
use crate::vocab::Surface;
use cel::common::ast::IdedExpr;

/// The tree without node ids: the two parsers number map entries in a
/// different order, and ids carry no meaning for the checker.
fn shape(e: &IdedExpr) -> String {
    let text = format!("{e:?}");
    let mut out = String::with_capacity(text.len());
    let mut parts = text.split("id: ");
    out.push_str(parts.next().unwrap_or_default());
    for part in parts {
        out.push_str(part.trim_start_matches(|c: char| c.is_ascii_digit()));
    }
    out
}

const ATOMS: &[&str] = &[
    "command",
    "path",
    "mode",
    "args",
    "host",
    "env.name",
    "identity.labels",
    "1",
    "2u",
    "1.5",
    "\"a\"",
    "'b'",
    "\"/etc/os-release\"",
    "'x-y'",
    "\"a'b\"",
    "'a\"b'",
    "r\"raw\"",
    "b\"z\"",
    "true",
    "false",
    "null",
    "x",
    "[1,2]",
    "[\"a\", \"b-c\"]",
    "{\"a\":1}",
    "{}",
    "[]",
    "0x1F",
    "1e3",
    "a.b.c",
    "f(1,2)",
    "size(x)",
    "has(a.b)",
    "é",
    "\"é\"",
    ".a",
    "07",
    "1.",
    ".5",
    "9223372036854775807",
    "18446744073709551615u",
    "x.all(y, y)",
    "x.map(y, y)",
    "x.filter(y, y)",
    "x.exists_one(y, y)",
    "1 // note\n",
    "\t\n",
    "[1,2,]",
    "a[1]",
];
const BINARY: &[&str] = &[
    "==", "!=", "<", "<=", ">", ">=", "&&", "||", "+", "-", "*", "/", "%", "in",
];
const JUNK: &[&str] = &[
    "", " ", ")", "(", ",", ".", "?", ":", "[", "]", "!", "&", "|", "=", "\"", "'", "{", "}", "#",
    "in", "-", "1", "\\",
];

struct Gen(u64);

impl Gen {
    fn pick(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn expr(&mut self, depth: u32) -> String {
        if depth == 0 {
            return ATOMS[self.pick(ATOMS.len())].to_string();
        }
        let d = depth - 1;
        match self.pick(13) {
            0..=2 => {
                let op = BINARY[self.pick(BINARY.len())];
                format!("{} {op} {}", self.expr(d), self.expr(d))
            }
            3 => format!("({})", self.expr(d)),
            4 => format!("!{}", self.expr(d)),
            5 => format!("-{}", self.expr(d)),
            6 => format!("{} ? {} : {}", self.expr(d), self.expr(d), self.expr(d)),
            7 => format!("{}.startsWith({})", self.expr(d), self.expr(d)),
            8 => format!("{}.exists(x, {})", self.expr(d), self.expr(d)),
            9 => format!("{}[{}]", self.expr(d), self.expr(d)),
            10 => format!("{}.size()", self.expr(d)),
            11 => format!("!!{}", self.expr(d)),
            _ => {
                let mut s = self.expr(d);
                let mut at = self.pick(s.len() + 1);
                while !s.is_char_boundary(at) {
                    at -= 1;
                }
                s.insert_str(at, JUNK[self.pick(JUNK.len())]);
                s
            }
        }
    }
}

#[test]
fn pratt_and_antlr_agree_where_the_fast_path_is_taken() {
    let cases: usize = std::env::var("CORDON_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(20_000, |n: usize| n.max(20_000));
    let mut g = Gen(0x2545_f491_4f6c_dd1d);
    let (mut fast, mut both_parse) = (0usize, 0usize);
    for _ in 0..cases {
        let depth = g.pick(5) as u32;
        let source = g.expr(depth);
        if !pratt_agrees(&source) {
            continue;
        }
        fast += 1;
        let Ok(pratt) = cel::parser::PrattParser::new()
            .max_recursion_depth(64)
            .parse(&source)
        else {
            continue; // the ANTLR parser decides these
        };
        let antlr = cel::parser::Parser::new()
            .max_recursion_depth(64)
            .parse(&source);
        let Ok(antlr) = antlr else {
            panic!("the Pratt parser accepts what the reference refuses: {source:?}");
        };
        assert_eq!(
            shape(&pratt),
            shape(&antlr),
            "the parsers differ on {source:?}"
        );
        both_parse += 1;
    }
    // Not vacuous: most sources take the fast path, and many parse.
    assert!(
        fast * 2 > cases,
        "only {fast} of {cases} took the fast path"
    );
    assert!(
        both_parse * 5 > cases,
        "only {both_parse} of {cases} parsed"
    );
}

#[test]
fn the_known_disagreements_take_the_reference_path() {
    // Each of these parses differently, or only, with the Pratt parser.
    for source in [
        "-!x",
        "!-x",
        "--!h",
        "!-3[\"a\"]",
        "-9223372036854775808.startsWith(\"a\")",
        "r\"\\\" == path",
        "\"\"\"a\"\"\" == path",
        "path == \"unterminated",
        // Two comments, a quote in each: the `-` between them is code.
        "x // \"\n-!y // \"\n",
    ] {
        assert!(!pratt_agrees(source), "{source:?} would take the fast path");
    }
    for source in [
        "command == \"/usr/bin/perl\"",
        "path in [\"/etc/os-release\", '/etc/x-y'] && mode == \"read\"",
        "!command.startsWith(\"/usr/\")",
    ] {
        assert!(
            pratt_agrees(source),
            "{source:?} would not take the fast path"
        );
    }
}

#[test]
fn an_error_on_the_fast_path_still_has_its_position() {
    // Parses with both; fails checking, so its span comes from the
    // reference parser's positions.
    let source = "command == \"a\" && path == 1";
    assert!(pratt_agrees(source));
    let errs = compile(Surface::Compute, source).expect_err("`path` is not a compute fact");
    assert!(
        errs.iter().all(|e| e.start > 0 && e.end > e.start),
        "{errs:?}"
    );
}
