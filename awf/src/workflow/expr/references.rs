//! References: the member paths an expression reads (`states.x.Output`, `inputs.n`), for
//! validation.

use super::*;

pub(super) fn collect_refs(n: &Node, out: &mut Vec<Vec<String>>) {
    match &n.kind {
        Kind::Ident(_) | Kind::Member { .. } | Kind::Chain(_) => {
            // The links of the chain, from the root outwards.
            let mut props = Vec::new();
            let mut cur = n;
            loop {
                match &cur.kind {
                    Kind::Chain(inner) => cur = inner,
                    Kind::Member { obj, prop, .. } => {
                        props.push(&**prop);
                        cur = obj;
                    }
                    _ => break,
                }
            }
            props.reverse();
            match &cur.kind {
                Kind::Ident(name) => {
                    let mut path = Vec::new();
                    if name != "$env" {
                        path.push(name.clone());
                    }
                    for p in &props {
                        match &p.kind {
                            Kind::Str(s) => path.push(s.clone()),
                            _ => break,
                        }
                    }
                    if !path.is_empty() && !out.contains(&path) {
                        out.push(path);
                    }
                }
                _ => collect_refs(cur, out),
            }
            for p in props {
                if !matches!(p.kind, Kind::Str(_)) {
                    collect_refs(p, out);
                }
            }
        }
        _ => {
            for c in n.kind.children() {
                collect_refs(c, out);
            }
        }
    }
}
