//! Text tables that stay aligned whatever their cells hold: widths are terminal columns (a wide
//! character counts two), each column is as wide as its widest cell up to its limit, and a
//! longer cell is clipped with `…`.

use unicode_width::UnicodeWidthStr;

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: padded on the right.
    Left,
    /// Numbers: padded on the left.
    Right,
}

/// A column: its heading, alignment and widest cell (in terminal columns).
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub heading: &'static str,
    pub align: Align,
    pub max: usize,
}

/// A text column at most `max` wide.
pub const fn text(heading: &'static str, max: usize) -> Column {
    Column {
        heading,
        align: Align::Left,
        max,
    }
}

/// A number column.
pub const fn number(heading: &'static str) -> Column {
    Column {
        heading,
        align: Align::Right,
        max: 24,
    }
}

/// Rows to print under headings.
#[derive(Debug)]
pub struct Table {
    columns: Vec<Column>,
    rows: Vec<Vec<String>>,
}

/// How many terminal columns `s` takes.
pub fn width(s: &str) -> usize {
    s.width()
}

/// `s` cut to at most `max` terminal columns, ending in `…` when cut.
pub fn clip(s: &str, max: usize) -> String {
    if width(s) <= max {
        return s.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used + w + 1 > max {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

impl Table {
    /// A table with these columns.
    pub fn new(columns: &[Column]) -> Table {
        Table {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row: one cell per column.
    pub fn row(&mut self, cells: Vec<String>) {
        let clipped = cells
            .into_iter()
            .zip(&self.columns)
            .map(|(cell, col)| clip(&cell.replace(['\n', '\t'], " "), col.max))
            .collect();
        self.rows.push(clipped);
    }

    /// The table as lines: headings, then the rows; no trailing spaces.
    pub fn lines(&self) -> Vec<String> {
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|cell| width(cell))
                    .chain([width(c.heading)])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: Vec<&str>| {
            let last = cells.len().saturating_sub(1);
            let mut out = String::new();
            for (i, cell) in cells.into_iter().enumerate() {
                let gap = widths[i].saturating_sub(width(cell));
                match self.columns[i].align {
                    Align::Right => {
                        out.push_str(&" ".repeat(gap));
                        out.push_str(cell);
                    }
                    Align::Left if i == last => out.push_str(cell),
                    Align::Left => {
                        out.push_str(cell);
                        out.push_str(&" ".repeat(gap));
                    }
                }
                if i < last {
                    out.push_str("  ");
                }
            }
            out
        };
        let mut lines = vec![line(self.columns.iter().map(|c| c.heading).collect())];
        for r in &self.rows {
            lines.push(line(r.iter().map(String::as_str).collect()));
        }
        lines
    }

    /// Prints the table.
    pub fn print(&self) {
        for l in self.lines() {
            outln!("{l}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The part of `line` from terminal column `from` up to `to` (exclusive).
    fn cols(line: &str, from: usize, to: usize) -> String {
        let mut out = String::new();
        let mut col = 0;
        for c in line.chars() {
            let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
            if col >= from && col + w <= to {
                out.push(c);
            }
            col += w;
        }
        out
    }

    #[test]
    fn columns_line_up_for_every_status_long_types_and_wide_characters() {
        let mut t = Table::new(&[
            text("TYPE", 24),
            text("STATUS", 10),
            number("RETRIES"),
            text("LAST ERROR", 20),
        ]);
        for (ty, status, n, err) in [
            ("order.paid", "pending", 0, "-"),
            (
                "a.very.long.event.type.name.indeed",
                "processing",
                12,
                "boom",
            ),
            ("x", "dlq", 3, "支払いが拒否されました：カード"),
            ("y", "done", 1234, "ok"),
        ] {
            t.row(vec![ty.into(), status.into(), n.to_string(), err.into()]);
        }
        let lines = t.lines();
        // TYPE is 24 wide (its longest cell, clipped), STATUS 10, RETRIES 7, two spaces between.
        for l in &lines {
            assert!(!l.ends_with(' '), "{l:?}");
            assert_eq!(cols(l, 24, 26), "  ", "{l:?} in {lines:#?}");
            assert_eq!(cols(l, 36, 38), "  ", "{l:?} in {lines:#?}");
            assert_eq!(cols(l, 45, 47), "  ", "{l:?} in {lines:#?}");
            let n = cols(l, 38, 45);
            assert!(!n.ends_with(' '), "numbers align right: {l:?}");
            assert!(width(l) <= 24 + 2 + 10 + 2 + 7 + 2 + 20, "{l:?}");
        }
        assert_eq!(cols(&lines[3], 47, 80), "支払いが拒否されま…");
        assert!(
            lines[2].starts_with("a.very.long.event.type.…  "),
            "{lines:#?}"
        );
        assert!(
            lines[4].contains(" 1234"),
            "numbers align right: {lines:#?}"
        );
    }

    #[test]
    fn clipping_counts_terminal_columns() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "ab…");
        assert_eq!(width(&clip("カードカード", 5)), 5);
        assert_eq!(clip("カードカード", 5), "カー…");
    }
}
