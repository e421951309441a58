//! Hand edits recorded without a trigger (`mysql.history_hand_edits =
//! observe`, #62): a pass compares the rows changed since an instant with
//! their last history row and records the difference as actor `sql`, once,
//! and never a change tickler made itself.

use std::time::Duration;

use chrono::Duration as Span;
use tickler::config::{Engine, HandEdits};
use tickler::domain::job::{JobId, Status};
use tickler::store::{Actor, HandEditsChecked, HandEditsState, Store};
use tickler_testkit::store::Db;

/// `(actor, status)` of each of job `id`'s history rows, oldest first.
async fn steps(store: &Store, id: JobId) -> Vec<(String, Status)> {
    store
        .job_history(id)
        .await
        .unwrap()
        .into_iter()
        .map(|event| (event.actor, event.status))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_records_each_hand_edit_once_at_its_time_and_nothing_tickler_did() {
    let db = Db::new().await;
    let start = db.store.db_now().await.unwrap() - Span::seconds(1);
    // One memory across the passes, as the reconciler keeps: a row found
    // unedited is compared again once it changes.
    let mut checked = HandEditsChecked::default();
    let moved = db.job(3_600_000, 1).await;
    let killed = db.job(3_600_000, 1).await;
    let sent = db.job(-1_000, 1).await;
    let untouched = db.job(3_600_000, 1).await;
    // tickler's own changes: a claim and a mark, a cancel.
    db.dispatch(&[sent], 7).await;
    let cancelled = db.job(3_600_000, 1).await;
    db.store.job_cancel(cancelled).await.unwrap();
    assert_eq!(
        db.store
            .hand_edits_observe(start, start + Span::hours(1), &mut checked)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        checked.len(),
        2,
        "the sent and the cancelled job, as recorded"
    );

    // A person moves one job and kills another.
    db.edit(
        "UPDATE jobs SET schedule_time = schedule_time + INTERVAL 1 DAY WHERE id = ?",
        moved,
    )
    .await;
    db.edit(
        "UPDATE jobs SET status = 'dead', last_error = 'by hand' WHERE id = ?",
        killed,
    )
    .await;
    // And one edit changes nothing the history records.
    db.edit(
        "UPDATE jobs SET last_error = 'a note' WHERE id = ?",
        untouched,
    )
    .await;
    assert_eq!(
        db.store
            .hand_edits_observe(start, start + Span::hours(1), &mut checked)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        db.store
            .hand_edits_observe(start, start + Span::hours(1), &mut checked)
            .await
            .unwrap(),
        0,
        "a pass over the same rows records nothing again"
    );

    assert_eq!(
        steps(&db.store, moved).await,
        [
            ("dispatcher".to_owned(), Status::Pending),
            ("sql".to_owned(), Status::Pending)
        ]
    );
    let row = db.store.job_get(moved).await.unwrap();
    let history = db.store.job_history(moved).await.unwrap();
    assert_eq!(history[1].schedule_time, row.schedule_time, "the new time");
    assert_eq!(
        history[1].at, row.updated_at,
        "recorded at the edit's time, which the record keeps"
    );
    assert_eq!(
        steps(&db.store, killed).await,
        [
            ("dispatcher".to_owned(), Status::Pending),
            ("sql".to_owned(), Status::Dead)
        ]
    );
    assert_eq!(steps(&db.store, untouched).await.len(), 1);
    assert_eq!(
        steps(&db.store, sent).await,
        [
            ("dispatcher".to_owned(), Status::Pending),
            ("dispatcher".to_owned(), Status::Dispatched)
        ],
        "the claim is not a hand edit"
    );
    assert_eq!(steps(&db.store, cancelled).await.len(), 2);

    // A row inserted by hand has no history: it is recorded once read
    // changed.
    sqlx::query(
        "INSERT INTO jobs (topic, payload, payload_kind, schedule_time) \
         VALUES ('by-hand', '1', 'json', UTC_TIMESTAMP(3) + INTERVAL 1 HOUR)",
    )
    .execute(&db.sql)
    .await
    .unwrap();
    let (hand,): (JobId,) = sqlx::query_as("SELECT id FROM jobs WHERE topic = 'by-hand'")
        .fetch_one(&db.sql)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    db.edit(
        "UPDATE jobs SET schedule_time = schedule_time + INTERVAL 1 MINUTE WHERE id = ?",
        hand,
    )
    .await;
    assert_eq!(
        db.store
            .hand_edits_observe(start, start + Span::hours(1), &mut checked)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        steps(&db.store, hand).await,
        [("sql".to_owned(), Status::Pending)]
    );
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_passes_at_once_record_an_edit_once() {
    let db = Db::new().await;
    let start = db.store.db_now().await.unwrap() - Span::seconds(1);
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(db.job(3_600_000, 1).await);
    }
    sqlx::query("UPDATE jobs SET status = 'cancelled'")
        .execute(&db.sql)
        .await
        .unwrap();
    let other = db.store_as(Actor::Reconciler);
    let (mut one, mut two) = (HandEditsChecked::default(), HandEditsChecked::default());
    let (a, b) = tokio::join!(
        db.store
            .hand_edits_observe(start, start + Span::hours(1), &mut one),
        other.hand_edits_observe(start, start + Span::hours(1), &mut two)
    );
    assert_eq!(a.unwrap() + b.unwrap(), 20);
    for id in ids {
        assert_eq!(
            steps(&db.store, id).await,
            [
                ("dispatcher".to_owned(), Status::Pending),
                ("sql".to_owned(), Status::Cancelled)
            ]
        );
    }
    other.close().await;
    db.finish().await;
}

/// A pass held between its read and its record while tickler changes the
/// row: the record finds the row changed and leaves it, so the history
/// never says the hand edit came after tickler's change.
#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_tickler_changes_again_during_a_pass_is_left_to_tickler() {
    let db = Db::new().await;
    let start = db.store.db_now().await.unwrap() - Span::seconds(1);
    let id = db.job(3_600_000, 1).await;
    db.edit(
        "UPDATE jobs SET schedule_time = schedule_time + INTERVAL 1 DAY WHERE id = ?",
        id,
    )
    .await;
    fail::cfg("hand-edits-read", "1*return(600)").unwrap();
    let store = db.store.clone();
    let pass = tokio::spawn(async move {
        store
            .hand_edits_observe(
                start,
                start + Span::hours(1),
                &mut HandEditsChecked::default(),
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    db.store.job_cancel(id).await.unwrap();
    let recorded = pass.await.unwrap().unwrap();
    fail::remove("hand-edits-read");
    assert_eq!(recorded, 0);
    assert_eq!(
        steps(&db.store, id).await,
        [
            ("dispatcher".to_owned(), Status::Pending),
            ("dispatcher".to_owned(), Status::Cancelled)
        ]
    );
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_drops_the_triggers_and_a_portable_engine_refuses_them() {
    let db = Db::new().await;
    // MariaDB resolves `auto` to mysql; a TiDB or vtgate VERSION() to
    // portable.
    assert_eq!(db.store.engine(Engine::Auto).await.unwrap(), Engine::Mysql);
    assert_eq!(Engine::Auto.resolve("8.0.11-TiDB-v7.5.1"), Engine::Portable);
    assert_eq!(Engine::Auto.resolve("8.0.30-Vitess"), Engine::Portable);
    assert_eq!(
        Engine::Auto.resolve("10.11.6-MariaDB-0+deb12u1"),
        Engine::Mysql
    );
    let root = tickler_testkit::mysql_server_url();
    let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect(&root)
        .await
        .unwrap();
    sqlx::query("SET GLOBAL log_bin_trust_function_creators = 1")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        db.store.hand_edits_apply(HandEdits::Trigger).await.unwrap(),
        HandEditsState::Recorded
    );
    // A fleet in the middle of the move: the triggers of the old setting
    // still in place while an instance already observes. The trigger
    // records the edit; the pass finds the row as its history says.
    let start = db.store.db_now().await.unwrap() - Span::seconds(1);
    let id = db.job(3_600_000, 1).await;
    db.edit("UPDATE jobs SET status = 'dead' WHERE id = ?", id)
        .await;
    assert_eq!(
        db.store
            .hand_edits_observe(
                start,
                start + Span::hours(1),
                &mut HandEditsChecked::default()
            )
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        steps(&db.store, id).await,
        [
            ("dispatcher".to_owned(), Status::Pending),
            ("sql".to_owned(), Status::Dead)
        ],
        "recorded once, by the trigger"
    );
    assert_eq!(
        db.store.hand_edits_apply(HandEdits::Observe).await.unwrap(),
        HandEditsState::Observed
    );
    assert_eq!(
        db.store.hand_edits_state().await.unwrap(),
        HandEditsState::NotRecorded,
        "no trigger left"
    );
    // Configured portable, a trigger is refused before anything runs.
    let mut config = tickler_testkit::test_config(&db.url, "unused");
    config.mysql.history_hand_edits = HandEdits::Trigger;
    let refused = config.validate().unwrap_err().to_string();
    assert!(
        refused.contains("mysql.history_hand_edits") && refused.contains("observe"),
        "{refused}"
    );
    db.finish().await;
}

/// What the first review found: an edit to `expired` is read; an edit a
/// claim followed is recorded as the edit left it (`pending`); a row whose
/// values do not decode costs that row and not the pass; a pass reads
/// nothing changed at or after its own instant; an engine said portable
/// refuses the triggers on MariaDB too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_claimed_and_unreadable_rows_each_cost_only_themselves() {
    let db = Db::new().await;
    let start = db.store.db_now().await.unwrap() - Span::seconds(1);
    let mut checked = HandEditsChecked::default();
    let expired = db.job(3_600_000, 1).await;
    let claimed = db.job(3_600_000, 1).await;
    let broken = db.job(3_600_000, 1).await;
    db.edit("UPDATE jobs SET status = 'expired' WHERE id = ?", expired)
        .await;
    // Moved by hand to now, then claimed before a pass reads it.
    db.edit(
        "UPDATE jobs SET schedule_time = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND WHERE id = ?",
        claimed,
    )
    .await;
    let claim = db
        .store
        .job_claim_many(&[claimed], 9, tickler_testkit::store::LEASE, &db.fence)
        .await
        .unwrap();
    assert_eq!(claim.won.len(), 1);
    // A zero date, as a session with a lax sql_mode can write.
    let mut lax = db.sql.acquire().await.unwrap();
    sqlx::query("SET SESSION sql_mode = ''")
        .execute(&mut *lax)
        .await
        .unwrap();
    sqlx::query("UPDATE jobs SET schedule_time = '0000-00-00' WHERE id = ?")
        .bind(broken)
        .execute(&mut *lax)
        .await
        .unwrap();
    drop(lax);

    // Before the edits' instant: nothing read.
    assert_eq!(
        db.store
            .hand_edits_observe(start, start, &mut checked)
            .await
            .unwrap(),
        0
    );
    let until = db.store.db_now().await.unwrap() + Span::seconds(1);
    assert_eq!(
        db.store
            .hand_edits_observe(start, until, &mut checked)
            .await
            .unwrap(),
        2,
        "the expired and the claimed one; the unreadable one is left out"
    );
    assert_eq!(
        steps(&db.store, expired).await.last().unwrap(),
        &("sql".to_owned(), Status::Expired)
    );
    assert_eq!(
        steps(&db.store, claimed).await,
        [
            ("dispatcher".to_owned(), Status::Pending),
            ("sql".to_owned(), Status::Pending)
        ],
        "the history never says dispatching"
    );
    assert_eq!(steps(&db.store, broken).await.len(), 1);

    assert!(matches!(
        db.store
            .hand_edits_apply_on(HandEdits::Trigger, Engine::Portable)
            .await,
        Err(tickler::store::StoreError::MigrationRefused(_))
    ));
    assert_eq!(
        db.store.hand_edits_state().await.unwrap(),
        HandEditsState::NotRecorded
    );
    db.finish().await;
}
