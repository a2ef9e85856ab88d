//! Plain-text tables for terminal summaries (Markdown-compatible).

/// Renders rows under a header as a Markdown table with aligned columns.
pub fn markdown_table(header: &[&str], rows: &[Vec<String>]) -> String {
    // A '|' inside a cell (a composed setting's name, "easyspec lp4 | specdec K=4") would end
    // the cell: escape it.
    let escape = |c: &str| c.replace('|', "\\|");
    let header: Vec<String> = header.iter().map(|h| escape(h)).collect();
    let rows: Vec<Vec<String>> = rows.iter().map(|r| r.iter().map(|c| escape(c)).collect()).collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].len()).chain([header[c].len()]).max().unwrap_or(0))
        .collect();
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut s = line(header);
    s.push_str(&line(widths.iter().map(|w| "-".repeat(*w)).collect()));
    for r in rows {
        s.push_str(&line(r));
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn aligns_columns() {
        let t = super::markdown_table(&["a", "bb"], &[vec!["xyz".into(), "1".into()]]);
        assert_eq!(t, "| a   | bb |\n| --- | -- |\n| xyz | 1  |\n");
    }

    #[test]
    fn escapes_bars_inside_cells() {
        let t = super::markdown_table(&["setting"], &[vec!["easyspec lp4 | specdec K=4".into()]]);
        assert_eq!(t.lines().nth(2), Some("| easyspec lp4 \\| specdec K=4 |"));
    }
}
