//! Statements held out of the connection's cache for one run over many rows. Taking a
//! statement from rusqlite's cache hashes its text, and giving it back hashes it again and
//! resets it: about 1.3 k instructions a use, paid per row by a loop that takes it afresh for
//! each one (a batch of keyed publishes, a group of completions). A [`Prepared`] takes each
//! statement once and gives them all back when it is dropped.

use rusqlite::{CachedStatement, Connection};

use crate::error::Result;

/// The statements taken so far, by their text, on one connection.
pub(super) struct Prepared<'c, 's> {
    conn: &'c Connection,
    taken: Vec<(&'s str, CachedStatement<'c>)>,
}

impl<'c, 's> Prepared<'c, 's> {
    /// Nothing taken yet.
    pub(super) fn new(conn: &'c Connection) -> Self {
        Prepared {
            conn,
            taken: Vec::new(),
        }
    }

    /// The connection, for statements run once.
    pub(super) fn conn(&self) -> &'c Connection {
        self.conn
    }

    /// The statement for `sql`, taken from the connection's cache the first time. The texts
    /// come from the store's registry, so the same statement is the same string (compared by
    /// address first; by content, which only makes a miss cheaper to rule out, after).
    pub(super) fn get(&mut self, sql: &'s str) -> Result<&mut CachedStatement<'c>> {
        let at = self
            .taken
            .iter()
            .position(|(text, _)| std::ptr::eq(*text, sql) || *text == sql);
        let at = match at {
            Some(at) => at,
            None => {
                let stmt = self.conn.prepare_cached(sql)?;
                self.taken.push((sql, stmt));
                self.taken.len() - 1
            }
        };
        Ok(&mut self.taken[at].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_is_taken_once_and_runs_each_time() -> Result<()> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch("CREATE TABLE t (x INTEGER)")?;
        let insert = String::from("INSERT INTO t (x) VALUES (?1)");
        let count = String::from("SELECT count(*) FROM t");
        let mut p = Prepared::new(&conn);
        for x in 0..3 {
            p.get(&insert)?.execute([x])?;
        }
        // The same text at another address is the same statement.
        let copy = insert.clone();
        p.get(&copy)?.execute([3])?;
        assert_eq!(p.taken.len(), 1);
        let n: i64 = p.get(&count)?.query_row([], |r| r.get(0))?;
        assert_eq!(n, 4);
        assert_eq!(p.taken.len(), 2);
        drop(p);
        // Given back: the cache holds them again.
        let n: i64 = conn.prepare_cached(&count)?.query_row([], |r| r.get(0))?;
        assert_eq!(n, 4);
        Ok(())
    }
}
