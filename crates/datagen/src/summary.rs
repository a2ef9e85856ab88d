//! The end-of-run summary: counts, the label distribution and the acceptance estimates.

use crate::labels::{HIST_BINS, LabelStats};
use crate::manifest::Manifest;
use specx_decoder::report::markdown_table;

/// Markdown tables describing a run directory's data.
pub fn summary_text(m: &Manifest) -> String {
    let s = &m.summary;
    let mut out = String::new();
    let part = m.part.map_or(String::new(), |p| format!(" (part {}/{})", p.index, p.count));
    out.push_str(&format!("datagen run{part}: {} of {} shards written\n\n", m.shards.len(), m.shard_count));
    let rows = vec![
        vec!["prompts".into(), s.prompts.to_string()],
        vec!["response tokens".into(), s.response_tokens.to_string()],
        vec!["labelled rows (Z from Y)".into(), s.labelled_rows.to_string()],
        vec!["mean acceptance label".into(), format!("{:.4}", s.mean_label())],
        vec![
            "greedy match rate (argmax q = X)".into(),
            format!("{:.4}", s.greedy_matches as f64 / s.response_tokens.max(1) as f64),
        ],
        vec!["mean exact-match run length".into(), format!("{:.2}", s.mean_match_run())],
        vec!["DSI acceptance estimate 1 - 1/(1+n)".into(), format!("{:.4}", s.dsi_acceptance())],
        vec!["same, first run per prompt only".into(), format!("{:.4}", s.dsi_prefix_acceptance())],
    ];
    out.push_str(&markdown_table(&["quantity", "value"], &rows));
    out.push('\n');
    out.push_str(&histogram_table(s));
    out
}

/// The label histogram with a bar per bin.
pub fn histogram_table(s: &LabelStats) -> String {
    let total = s.response_tokens.max(1) as f64;
    let rows: Vec<Vec<String>> = s
        .label_hist
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let range = if i == HIST_BINS {
                "= 1".to_string()
            } else {
                format!("[{:.1}, {:.1})", i as f64 / 10.0, (i + 1) as f64 / 10.0)
            };
            let share = c as f64 / total;
            vec![range, c.to_string(), format!("{:.3}", share), "#".repeat((share * 50.0).round() as usize)]
        })
        .collect();
    markdown_table(&["label", "positions", "share", ""], &rows)
}
