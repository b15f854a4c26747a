//! `cachet demo --once` drives the scripted session and reports cache behaviour faithfully.

use std::process::Command;

#[test]
fn demo_shows_cache_hits_and_the_midnight_break() {
    let out = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args(["demo", "--once", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Rows: req turn step... cache_read cache_write uncached output hit%
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| {
            l.trim_start()
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit())
        })
        .map(|l| l.split_whitespace().collect())
        .filter(|cols: &Vec<&str>| cols.len() >= 8)
        .collect();
    assert_eq!(rows.len(), 9, "{text}");
    let num =
        |row: &Vec<&str>, from_end: usize| -> u64 { row[row.len() - from_end].parse().unwrap() };
    // The first request writes the prefix; the repeat within the turn reads it.
    assert_eq!(num(&rows[0], 5), 0);
    assert!(num(&rows[0], 4) > 1024);
    assert_eq!(
        num(&rows[1], 5),
        num(&rows[0], 4),
        "second request reads exactly what the first wrote"
    );
    // Requests after the first read from cache, except at the date change (row 8).
    for (i, row) in rows.iter().enumerate().skip(1) {
        if i == 7 {
            assert_eq!(num(row, 5), 0, "the date line breaks the prefix: {text}");
        } else {
            assert!(num(row, 5) > 0, "row {} reads from cache: {text}", i + 1);
        }
    }
    assert!(text.contains("caching saved $"), "{text}");
    assert!(text.contains("Request 8 shows a prefix break"));
    // With stabilize-volatile, the request after midnight reads from cache.
    let line = text
        .lines()
        .find(|l| l.starts_with("The same session with policies/stabilize-volatile.toml"))
        .expect("comparison printed");
    let reads: u64 = line
        .split("reads ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(reads > 4000, "{line}");
}
