//! Reads the figures a part's log carries: libtest's tallies, the tests' own
//! "N collectives ... 0 wrong" lines, skip lines and sanitizer summaries.

/// libtest's "test result:" lines, summed over every binary a part ran.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
    /// How many "test result:" lines there were.
    pub binaries: u64,
}

pub fn tally(log: &str) -> Tally {
    let mut t = Tally::default();
    for line in log.lines().filter(|l| l.starts_with("test result:")) {
        t.binaries += 1;
        t.passed += number_before(line, " passed");
        t.failed += number_before(line, " failed");
        t.ignored += number_before(line, " ignored");
    }
    t
}

/// The lines in which a GPU test said it skipped, and why.
pub fn skips(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains(": skipped: ")).collect()
}

/// The sum of the numbers that stand right before `word` in the log, as in
/// "4225 collectives" or "0 wrong" (thousands separators allowed).
pub fn sum_before(log: &str, word: &str) -> u64 {
    log.lines().map(|l| number_before(l, word)).sum()
}

fn number_before(line: &str, word: &str) -> u64 {
    let mut total = 0;
    let mut rest = line;
    while let Some(at) = rest.find(word) {
        let head = &rest[..at];
        let digits: String = head
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_digit() || *c == ',')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .filter(|c| c.is_ascii_digit())
            .collect();
        total += digits.parse::<u64>().unwrap_or(0);
        rest = &rest[at + word.len()..];
    }
    total
}

/// compute-sanitizer's count of reported errors or hazards, if it finished.
pub fn sanitizer_errors(log: &str) -> Option<u64> {
    log.lines().find_map(|l| {
        ["ERROR SUMMARY: ", "RACECHECK SUMMARY: "]
            .iter()
            .find_map(|tag| l.find(tag).map(|at| &l[at + tag.len()..]))
            .and_then(|rest| {
                rest.split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "running 4 tests\n\
        gpu matrix: 4225 collectives, 91,105,125 elements, 0 wrong\n\
        gpu back-to-back k=4: 1000 collectives, 1 elements, 2 wrong\n\
        test result: ok. 4 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out\n\
        test result: FAILED. 2 passed; 3 failed; 0 ignored; 0 measured\n";

    #[test]
    fn tallies_every_binary() {
        assert_eq!(
            tally(LOG),
            Tally {
                passed: 6,
                failed: 3,
                ignored: 1,
                binaries: 2
            }
        );
        assert_eq!(tally("nothing"), Tally::default());
    }

    #[test]
    fn sums_numbers_before_a_word() {
        assert_eq!(sum_before(LOG, " collectives"), 5225);
        assert_eq!(sum_before(LOG, " wrong"), 2);
        assert_eq!(sum_before(LOG, " elements"), 91_105_126);
    }

    #[test]
    fn finds_skips_and_sanitizer_summaries() {
        let log = "gpu_matrix: skipped: no CUDA driver\nok\n";
        assert_eq!(skips(log), vec!["gpu_matrix: skipped: no CUDA driver"]);
        assert_eq!(
            sanitizer_errors("========= ERROR SUMMARY: 0 errors"),
            Some(0)
        );
        assert_eq!(
            sanitizer_errors(
                "========= RACECHECK SUMMARY: 2 hazards displayed (1 errors, 1 warnings)"
            ),
            Some(2)
        );
        assert_eq!(sanitizer_errors("crashed"), None);
    }
}
