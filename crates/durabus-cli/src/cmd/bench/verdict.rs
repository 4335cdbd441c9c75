//! Whether a figure met its target, read from the table's own text: the target (`≥ 150,000`,
//! `< 10 (1M)`, `≥ 0.8`, `publish ≥ 0.9×`, `≥ −15 %`, `0`) against the figure as printed (its
//! first number, or the number the target's unit points at: the one before `×` or `%`). A
//! figure of 0 is one whose group did not run (`--only`, `--quick`): not measured, not failed.

/// A figure against its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Met,
    NotMet,
    NotMeasured,
}

impl Verdict {
    /// The word printed beside the target.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::NotMet => "NOT MET",
            Verdict::NotMeasured => "not measured",
        }
    }
}

/// The numbers in `text` (commas inside a number dropped; `−` read as a minus), each with the
/// character that follows it (after spaces).
fn numbers(text: &str) -> Vec<(f64, Option<char>)> {
    let text = text.replace('−', "-");
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i].is_ascii_digit()
            || ((chars[i] == '-' || chars[i] == '+')
                && chars.get(i + 1).is_some_and(char::is_ascii_digit));
        if !starts {
            i += 1;
            continue;
        }
        let mut s = String::new();
        s.push(chars[i]);
        i += 1;
        while i < chars.len()
            && (chars[i].is_ascii_digit()
                || chars[i] == '.'
                || (chars[i] == ',' && chars.get(i + 1).is_some_and(char::is_ascii_digit)))
        {
            if chars[i] != ',' {
                s.push(chars[i]);
            }
            i += 1;
        }
        let mut j = i;
        while j < chars.len() && chars[j] == ' ' {
            j += 1;
        }
        if let Ok(n) = s.parse::<f64>() {
            out.push((n, chars.get(j).copied()));
        }
    }
    out
}

/// `measured` (as printed) against `target` (as printed); `None` for a figure without a target
/// (`—`, `flat`).
pub fn verdict(measured: &str, target: &str) -> Option<Verdict> {
    let target = target.trim();
    if target == "0" {
        let n = numbers(measured).first()?.0;
        return Some(if n == 0.0 {
            Verdict::Met
        } else {
            Verdict::NotMet
        });
    }
    let (at, cmp) = target
        .char_indices()
        .find(|(_, c)| matches!(c, '≥' | '<' | '≤'))?;
    let (goal, unit) = *numbers(&target[at..]).first()?;
    if numbers(measured).first()?.0 == 0.0 {
        return Some(Verdict::NotMeasured);
    }
    let value = match unit {
        Some(u @ ('×' | '%')) => {
            numbers(measured)
                .into_iter()
                .find(|(_, after)| *after == Some(u))?
                .0
        }
        _ => numbers(measured).first()?.0,
    };
    let met = match cmp {
        '≥' => value >= goal,
        '<' => value < goal,
        _ => value <= goal,
    };
    Some(if met { Verdict::Met } else { Verdict::NotMet })
}

/// The figures that missed their targets, gathered while a table prints.
#[derive(Debug, Default)]
pub struct Misses(Vec<String>);

impl Misses {
    /// The target column for a row: the target and its verdict; a miss is remembered.
    pub fn mark(&mut self, name: &str, measured: &str, target: &str) -> String {
        match verdict(measured, target) {
            None => target.to_owned(),
            Some(v) => {
                if v == Verdict::NotMet {
                    self.0
                        .push(format!("{} ({measured}; target {target})", name.trim()));
                }
                format!("{target}  {}", v.word())
            }
        }
    }

    /// A ratio row (`with` / `without` against at least `goal`), remembered if it misses.
    pub fn ratio(&mut self, name: &str, with: f64, without: f64, goal: f64) -> &'static str {
        if with <= 0.0 || without <= 0.0 {
            return Verdict::NotMeasured.word();
        }
        let r = with / without;
        if r >= goal {
            Verdict::Met.word()
        } else {
            self.0.push(format!("{name} ({r:.2} ×; target ≥ {goal} ×)"));
            Verdict::NotMet.word()
        }
    }

    /// Says plainly which targets were missed (or that none was).
    pub fn print(&self) {
        outln!();
        if self.0.is_empty() {
            outln!("every target measured in this run was met");
        } else {
            outln!("targets NOT MET in this run ({}):", self.0.len());
            for m in &self.0 {
                outln!("  - {m}");
            }
        }
    }

    /// The misses.
    #[cfg(test)]
    pub fn into_vec(self) -> Vec<String> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_read_against_their_targets() {
        let cases = [
            ("273087", "≥ 150,000", Some(Verdict::Met)),
            ("120,000", "≥ 150,000", Some(Verdict::NotMet)),
            ("0", "≥ 150,000", Some(Verdict::NotMeasured)),
            ("0.00", "< 2", Some(Verdict::NotMeasured)),
            ("0.73 (49506 / 67501)", "≥ 0.8", Some(Verdict::NotMet)),
            ("0.84 (56673)", "≥ 0.8", Some(Verdict::Met)),
            ("3.03", "< 5", Some(Verdict::Met)),
            ("12.6", "< 10 (1M)", Some(Verdict::NotMet)),
            ("9.9", "< 10 (1M)", Some(Verdict::Met)),
            (
                "24570 (publish 0.46×)",
                "publish ≥ 0.9×",
                Some(Verdict::NotMet),
            ),
            (
                "24570 (publish 0.95×)",
                "publish ≥ 0.9×",
                Some(Verdict::Met),
            ),
            (
                "162167 (−15.5 %, 250 B/event)",
                "≥ −15 %",
                Some(Verdict::NotMet),
            ),
            (
                "162167 (−9.1 %, 250 B/event)",
                "≥ −15 %",
                Some(Verdict::Met),
            ),
            (
                "162167 (+2.0 %, 250 B/event)",
                "≥ −15 %",
                Some(Verdict::Met),
            ),
            (
                "0 (−100.0 %, 0 B/event)",
                "≥ −15 %",
                Some(Verdict::NotMeasured),
            ),
            (
                "1.91× (12.60 ms; before: 6.60 ms)",
                "< 2×",
                Some(Verdict::Met),
            ),
            (
                "2.35× (15.60 ms; before: 6.64 ms)",
                "< 2×",
                Some(Verdict::NotMet),
            ),
            ("0", "< 2×", Some(Verdict::NotMeasured)),
            ("0", "0", Some(Verdict::Met)),
            ("3", "0", Some(Verdict::NotMet)),
            ("12.0", "—", None),
            ("12.0", "flat", None),
        ];
        for (measured, target, want) in cases {
            assert_eq!(
                verdict(measured, target),
                want,
                "{measured} against {target}"
            );
        }
    }

    #[test]
    fn misses_are_gathered_and_ratios_judged() {
        let mut m = Misses::default();
        assert_eq!(m.mark("a", "5", "≥ 10"), "≥ 10  NOT MET");
        assert_eq!(m.mark("b", "50", "≥ 10"), "≥ 10  met");
        assert_eq!(m.mark("c", "50", "—"), "—");
        assert_eq!(m.ratio("d", 36.0, 100.0, 0.8), "NOT MET");
        assert_eq!(m.ratio("e", 95.0, 100.0, 0.9), "met");
        assert_eq!(m.ratio("f", 0.0, 100.0, 0.9), "not measured");
        let v = m.into_vec();
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].starts_with("a (5; target ≥ 10)"), "{v:?}");
        assert!(v[1].starts_with("d (0.36 ×"), "{v:?}");
    }
}
