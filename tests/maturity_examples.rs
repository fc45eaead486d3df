//! The maturity scores docs/ARCHITECTURE.md ("Maturity", "Scores of the examples") gives
//! for the example manifests are the ones the code computes from their files (nothing seen
//! yet: no retry, no replay), and every example with a DeadLetterQueue is in that table.

use std::path::{Path, PathBuf};

use dlq_operator::maturity::{self, Weights};
use dlq_operator::status::maturity::file_facts;

/// The table's rows: (example file, retry, dead letters, monitoring, score).
fn documented() -> Vec<(String, [f64; 4])> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("read");
    doc.lines()
        .filter(|l| l.starts_with("| `examples/"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 5, "{l}");
            let file = cells[0].trim_matches('`').to_string();
            let n = |i: usize| -> f64 { cells[i].parse().unwrap_or_else(|_| panic!("{l}")) };
            (file, [n(1), n(2), n(3), n(4)])
        })
        .collect()
}

/// Every example file (examples/ and its subdirectories) with a RabbitMQ DeadLetterQueue.
fn examples_with_a_dead_letter_queue() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    let mut dirs = vec![root.join("examples")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml")
                && std::fs::read_to_string(&path).is_ok_and(|t| {
                    // The maturity score is not computed for Redis DeadLetterQueues yet
                    // (docs/REDIS.md, "Not yet"): their examples have no documented score.
                    t.contains("kind: DeadLetterQueue") && !t.contains("type: Redis")
                })
            {
                let rel = path.strip_prefix(root).expect("under the root");
                found.push(rel.display().to_string());
            }
        }
    }
    found.sort();
    found
}

#[test]
fn the_examples_give_the_documented_scores() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let table = documented();
    let mut files: Vec<String> = table.iter().map(|(f, _)| f.clone()).collect();
    files.sort();
    assert_eq!(
        files,
        examples_with_a_dead_letter_queue(),
        "every example with a DeadLetterQueue is in the table, and only those"
    );
    let w = Weights::default();
    for (file, [retry, dead_letter, monitoring, score]) in table {
        let paths: Vec<PathBuf> =
            vec![root.join(&file), root.join("examples/rabbitmq-secret.yaml")];
        let (_, planned) = dlq_operator::standalone::load_and_plan(&paths)
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(planned.len(), 1, "{file}: one DeadLetterQueue");
        let m = maturity::evaluate(&file_facts(&planned[0], None), &w);
        let s = m.status(&w, None);
        assert_eq!(
            (s.retry, s.dead_letter, s.monitoring, s.score),
            (retry, dead_letter, monitoring, score),
            "{file}: computed {s:?}"
        );
        // The score is the formula over the parts.
        let formula =
            w.retry * m.retry + w.dead_letter * m.dead_letter + w.monitoring * m.monitoring;
        assert!((m.score - formula).abs() < 1e-12, "{file}");
    }
}
