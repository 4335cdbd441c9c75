//! A claimed row that does not decode (its JSON written by hand, say) is left out of the claim;
//! the others are delivered.

use super::*;

#[tokio::test]
async fn a_claim_leaves_out_a_row_it_cannot_read_and_returns_the_others() {
    let (_dir, path) = temp();
    let store = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .unwrap();
    let good_a = insert_one(&store, "x.a").await;
    let bad = insert_one(&store, "x.b").await;
    let good_c = insert_one(&store, "x.c").await;
    let changed = Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE durabus_events SET metadata = 'not json' WHERE id = ?1",
            [bad.to_string()],
        )
        .unwrap();
    assert_eq!(changed, 1);
    let claimed = store
        .claim_due(Timestamp::now(), 10)
        .await
        .expect("one unreadable row does not fail the claim");
    let mut ids: Vec<_> = claimed.iter().map(|e| e.id).collect();
    ids.sort();
    let mut want = vec![good_a, good_c];
    want.sort();
    assert_eq!(ids, want);
    // The unreadable event is not lost: it stays claimed (recovered at the next start).
    let status: String = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT status FROM durabus_events WHERE id = ?1",
            [bad.to_string()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(status, "processing");
    store.close().await.unwrap();
}
