//! The checker against hand-made histories, each with a known answer.

use super::*;

fn history(text: &str) -> Vec<Record> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| l.parse().unwrap())
        .collect()
}

const MS: u64 = 1_000_000;

/// A history with one of each broken promise planted in it is reported
/// as exactly that.
#[test]
fn a_planted_history_is_reported_exactly() {
    let text = format!(
        "
        0 1 invoke
        {g1} 1 grant 10 {far}
        {r1} 1 read 10 0
        30 1 write 10 1
        31 1 accepted
        40 1 release 0
        41 1 released
        50 2 invoke
        60 2 grant 11 500
        65 3 invoke
        70 2 read 11 1
        80 3 grant 12 600
        90 3 read 12 1
        100 3 write 12 2
        101 3 accepted
        110 3 release 0
        120 2 write 11 2
        121 2 accepted
        130 2 release 0
        131 2 release-failed not-held
        {f} 0 fault pause-holder
        {h} 0 healed pause-holder
        {i4} 4 invoke
        {g4} 4 grant 5 {far}
        {r4} 4 read-rejected 5
        {e4} 4 release 0
        {x} 5 invoke
        {x1} 5 fail timeout
        {x2} 0 final 2
        ",
        g1 = 10,
        r1 = 20,
        far = 1000,
        f = 140,
        h = 190,
        i4 = 200,
        g4 = 190 + 3 * MS,
        r4 = 190 + 3 * MS + 1,
        e4 = 190 + 3 * MS + 2,
        x = 190 + 4 * MS,
        x1 = 190 + 5 * MS,
        x2 = 190 + 6 * MS,
    );
    let figures = check(&history(&text));
    let expected = Figures {
        grants: 4,
        // Holder 3 granted while holder 2's lease (to 500) was valid.
        unsafe_overlaps: 1,
        // Holder 2 wrote after holder 3, granted later, had read.
        stale_writes_accepted: 1,
        stale_writes_rejected: 0,
        stale_reads_rejected: 1,
        // Holder 4 got token 5 after token 12 was granted.
        token_order_violations: 1,
        writes_accepted: 3,
        // Holders 2 and 3 both stored 2.
        lost_writes: 1,
        leaked_permits: 0,
        recovery_ms: Some(3),
        faults: 1,
        at_risk_signals: 0,
        lost_signals: 0,
        errors: [("acquire:timeout", 1), ("release:not-held", 1)]
            .map(|(k, v)| (k.to_owned(), v))
            .into(),
    };
    assert_eq!(figures, expected);
}

/// The same three holders one after another, with a stale holder the
/// fence stops, break no promise.
#[test]
fn a_clean_history_with_a_fenced_stale_holder_breaks_nothing() {
    let figures = check(&history(
        "
        0 1 invoke
        10 1 grant 1 50
        20 1 read 1 0
        60 2 invoke
        70 2 grant 2 500
        80 2 read 2 0
        90 2 write 2 1
        91 2 accepted
        100 2 release 0
        110 1 write 1 1
        111 1 rejected
        112 1 lost
        120 1 release 0
        121 1 release-failed lost
        130 0 final 1
        ",
    ));
    assert_eq!(figures.grants, 2);
    assert_eq!(figures.unsafe_overlaps, 0, "holder 1's lease ended at 50");
    assert_eq!(figures.stale_writes_accepted, 0);
    assert_eq!(figures.stale_writes_rejected, 1);
    assert_eq!(figures.token_order_violations, 0);
    assert_eq!(figures.lost_writes, 0);
    assert_eq!(figures.lost_signals, 1);
}

#[test]
fn a_killed_holder_is_promised_its_lease_to_the_end() {
    let figures = check(&history(
        "
        0 1 invoke
        10 1 grant 1 100
        20 2 invoke
        50 2 grant 2 900
        60 3 invoke
        150 3 grant 3 900
        ",
    ));
    // Holder 1 never released: 2 overlapped it, 3 came after its lease.
    // Holder 2 never released either, so 3 overlapped 2.
    assert_eq!(figures.unsafe_overlaps, 2);
}

#[test]
fn a_fault_never_followed_by_a_grant_has_no_recovery() {
    let figures = check(&history("0 0 fault x\n10 0 healed x\n"));
    assert_eq!(figures.recovery_ms, None);
}

/// Three holders of a semaphore of two permits, all with valid leases at
/// once: one broken promise. Then a third that comes after one lease ran
/// out, and one granted with its own lease already over: none.
#[test]
fn a_third_valid_holder_of_two_permits_is_an_unsafe_overlap() {
    let figures = check(&history(
        "
        0 1 invoke
        10 1 grant 1 1000 permit/2
        11 2 invoke
        20 2 grant 2 1000 permit/2
        21 3 invoke
        30 3 grant 3 1000 permit/2
        40 3 release 0
        41 3 released
        50 1 release 0
        51 2 release 0
        ",
    ));
    assert_eq!(figures.grants, 3);
    assert_eq!(figures.unsafe_overlaps, 1, "holder 3 was the third");
    assert_eq!(figures.token_order_violations, 0);

    let figures = check(&history(
        "
        10 1 grant 1 100 permit/2
        20 2 grant 2 1000 permit/2
        150 3 grant 3 1000 permit/2
        160 4 grant 4 140 permit/2
        ",
    ));
    assert_eq!(
        figures.unsafe_overlaps, 0,
        "holder 1's lease ended at 100; holder 4's own at 140, before its grant"
    );
}

/// A writer granted beside a reader whose lease runs is an unsafe
/// overlap, and so is a reader granted beside a writer; readers together,
/// or a writer after a reader's lease ran out, are not.
#[test]
fn a_writer_beside_a_valid_reader_is_an_unsafe_overlap() {
    let figures = check(&history(
        "
        10 1 grant 1 1000 read
        20 2 grant 2 1000 read
        30 3 grant 3 1000 write
        40 3 release 0
        41 1 release 0
        42 2 release 0
        50 4 grant 4 1000 write
        60 5 grant 5 1000 read
        ",
    ));
    assert_eq!(
        figures.unsafe_overlaps, 2,
        "writer 3 beside readers 1 and 2, reader 5 beside writer 4"
    );

    let figures = check(&history(
        "
        10 1 grant 1 1000 read
        20 2 grant 2 50 read
        30 1 release 0
        60 3 grant 3 1000 write
        ",
    ));
    assert_eq!(figures.unsafe_overlaps, 0, "reader 2's lease ended at 50");
}

/// A reader's read fences the writers granted before it: a late write of
/// an older writer after a newer reader read is a stale write, and the
/// writers' lost writes are counted as the mutex's are.
#[test]
fn a_reader_makes_an_older_writer_stale() {
    let figures = check(&history(
        "
        0 1 invoke
        10 1 grant 1 50 write
        20 1 read 1 0
        60 2 invoke
        70 2 grant 2 1000 read
        80 2 read 2 0
        90 2 release 0
        100 1 write 1 1
        101 1 accepted
        110 1 release 0
        120 0 final 1
        ",
    ));
    assert_eq!(figures.unsafe_overlaps, 0, "writer 1's lease ended at 50");
    assert_eq!(figures.stale_writes_accepted, 1);
    assert_eq!(figures.lost_writes, 0);
}

/// What the probe at the end could not take is counted; its own grants,
/// held together, are within the permits.
#[test]
fn permits_the_probe_could_not_take_are_leaked() {
    let figures = check(&history(
        "
        10 1 grant 1 100 permit/3
        200 9 invoke
        210 9 grant 2 5000 permit/3
        211 9 invoke
        220 9 grant 3 5000 permit/3
        221 9 invoke
        900 9 fail wait-timeout
        901 9 probe 2 3
        902 9 release 0
        903 9 released
        904 9 release 0
        905 9 released
        ",
    ));
    assert_eq!(figures.leaked_permits, 1);
    assert_eq!(figures.unsafe_overlaps, 0);
    assert_eq!(figures.grants, 3);
    assert_eq!(
        figures.errors,
        [("acquire:wait-timeout".to_owned(), 1)].into()
    );
}
