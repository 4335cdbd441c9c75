//! The dead-letter counts by type and status the metrics label: the types with the most open
//! dead letters each under their name, the rest summed as `other`, so the series stay bounded.

/// The dead-letter statuses, in the order of the counts [`by_type`] gives.
const STATUSES: [&str; 4] = ["pending", "retrying", "resolved", "abandoned"];

/// The `labelled` types with the most open (`pending` and `retrying`) dead letters, then the
/// most records, with their records in every status (0 included), and `other` with the sum of
/// the rest (always present, so the series do not come and go).
pub(crate) fn by_type(rows: &[(String, String, u64)], labelled: u32) -> Vec<(String, String, u64)> {
    let mut types: std::collections::BTreeMap<&str, [u64; 4]> = Default::default();
    for (ty, status, n) in rows {
        if let Some(i) = STATUSES.iter().position(|s| s == status) {
            let c = types.entry(ty.as_str()).or_default();
            c[i] = c[i].saturating_add(*n);
        }
    }
    let mut ranked: Vec<(&str, [u64; 4])> = types.into_iter().collect();
    let open = |c: &[u64; 4]| c[0].saturating_add(c[1]);
    let all = |c: &[u64; 4]| c.iter().fold(0u64, |a, n| a.saturating_add(*n));
    // Stable: equal types stay in name order.
    ranked.sort_by(|a, b| {
        open(&b.1)
            .cmp(&open(&a.1))
            .then_with(|| all(&b.1).cmp(&all(&a.1)))
    });
    let keep = usize::try_from(labelled).unwrap_or(usize::MAX);
    let mut other = [0u64; 4];
    let mut out = Vec::new();
    for (ty, c) in ranked {
        // A type named `other` is summed into the series of that name, taking no label.
        if out.len() < keep && ty != "other" {
            out.push((ty.to_owned(), c));
        } else {
            for (o, n) in other.iter_mut().zip(c) {
                *o = o.saturating_add(n);
            }
        }
    }
    out.push(("other".to_owned(), other));
    out.into_iter()
        .flat_map(|(ty, c)| {
            STATUSES
                .iter()
                .zip(c)
                .map(move |(status, n)| (ty.clone(), (*status).to_owned(), n))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ty: &str, status: &str, n: u64) -> (String, String, u64) {
        (ty.to_owned(), status.to_owned(), n)
    }

    #[test]
    fn the_most_open_types_are_labelled_and_the_rest_summed() {
        let rows = [
            row("a", "resolved", 50),
            row("b", "pending", 2),
            row("c", "pending", 2),
            row("c", "retrying", 1),
            row("d", "pending", 1),
            row("other", "pending", 4),
            row("e", "unknown", 9),
        ];
        let got = by_type(&rows, 2);
        // A type named "other" (4 open) is never a label of its own: the top two are c (3
        // open) and b (2 open); d (1 open) and a (none open) go to other.
        let types: Vec<&str> = got.iter().map(|(t, _, _)| t.as_str()).collect();
        assert_eq!(
            got.len(),
            12,
            "two types and other, four statuses each: {got:?}"
        );
        assert_eq!(&types[..4], ["c"; 4]);
        assert_eq!(&types[4..8], ["b"; 4]);
        assert_eq!(&types[8..], ["other"; 4]);
        let at = |t: &str, s: &str| {
            got.iter()
                .find(|(ty, st, _)| ty == t && st == s)
                .map(|(_, _, n)| *n)
        };
        assert_eq!(at("c", "pending"), Some(2));
        assert_eq!(at("c", "retrying"), Some(1));
        assert_eq!(at("c", "abandoned"), Some(0));
        // other: d's 1, a type named "other" 4, a's 50 resolved; an unknown status is left out.
        assert_eq!(at("other", "pending"), Some(5));
        assert_eq!(at("other", "resolved"), Some(50));
        assert_eq!(at("other", "retrying"), Some(0));
    }

    #[test]
    fn no_dead_letters_still_give_the_other_series() {
        let got = by_type(&[], 10);
        assert_eq!(got.len(), 4);
        assert!(
            got.iter().all(|(t, _, n)| t == "other" && *n == 0),
            "{got:?}"
        );
    }
}
