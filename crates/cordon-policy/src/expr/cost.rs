//! The static cost bound of a compiled rule.

use super::node::{children, Kind, Node};
use super::MAX_LIST_LEN;

pub(super) fn cost(n: &Node) -> u64 {
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
