//! docs/reference/config.md against the config types: every key each table's `Deserialize`
//! accepts (read from the type itself, see `specx_run::config_keys`) has a row in the
//! reference's section of its command, and every `[[methods.grid]]` family with each of its
//! keys. A key added to the code without a line in the reference fails here.

mod common;
use common::repo;
use specx_run::config_keys::struct_fields as keys;

/// The reference's section whose heading starts with `heading`, up to the next `## `.
fn section(doc: &str, heading: &str) -> String {
    let start = doc.find(heading).unwrap_or_else(|| panic!("config.md has no section '{heading}'"));
    let rest = &doc[start + heading.len()..];
    rest[..rest.find("\n## ").unwrap_or(rest.len())].to_string()
}

/// Whether a table row of `section` names `key` of `table` (`""`: the top level): a row that
/// names the table (`[models]`, `[[prompts]]`, `drafters.lookup`) and the key, as `` `key` ``
/// or as the first key after the table (`` `[models] draft` ``).
fn documented(section: &str, table: &str, key: &str) -> bool {
    section.lines().filter(|l| l.starts_with('|')).any(|l| {
        if table.is_empty() && (l.contains(&format!("[{key}]")) || l.contains(&format!("[{key}."))) {
            return true; // a table of the top level, named in its rows (`[models] draft`)
        }
        let names_table = table.is_empty()
            || l.contains(&format!("[{table}]"))
            || l.contains(&format!("`{table}`"))
            || l.contains(&format!("`{table} "));
        names_table
            && (l.contains(&format!("`{key}`")) || l.contains(&format!("] {key}`")) || l.contains(&format!("`{key} =")))
    })
}

/// Adds to `gaps` each key of `tables` that the reference's section under `heading` lacks.
fn check(gaps: &mut Vec<String>, doc: &str, heading: &str, tables: &[(&str, &[&str])]) {
    let text = section(doc, heading);
    gaps.extend(missing(&text, tables).into_iter().map(|g| format!("{heading}: {g}")));
}

/// Every (table, key) of `tables` missing from `section`.
fn missing(section: &str, tables: &[(&str, &[&str])]) -> Vec<String> {
    let mut out = Vec::new();
    for (table, fields) in tables {
        assert!(!fields.is_empty() || table.is_empty(), "no keys read for [{table}]");
        out.extend(fields.iter().filter(|k| !documented(section, table, k)).map(|k| format!("[{table}] {k}")));
    }
    out
}

#[test]
fn every_config_key_has_a_row_in_the_reference() {
    use specx_eval::experiment::{axes, config as eval, methods};
    let doc = std::fs::read_to_string(repo().join("docs/reference/config.md")).unwrap();
    let mut gaps = Vec::new();

    let eval_section = section(&doc, "## `specx eval`");
    let mut tables: Vec<(&str, &[&str])> = vec![
        ("", keys::<eval::EvalConfig>()),
        ("models", keys::<eval::ModelsConfig>()),
        ("prompts", keys::<eval::PromptSetConfig>()),
        ("sampling", keys::<eval::SamplingSetting>()),
        ("budget", keys::<eval::BudgetConfig>()),
        ("methods", keys::<methods::MethodsConfig>()),
        ("methods.dsi", keys::<methods::DsiGrid>()),
        ("methods.easyspec", keys::<methods::EasySpecGrid>()),
        ("methods.grid", keys::<axes::MethodGrid>()),
        ("audit", keys::<eval::AuditConfig>()),
        ("output", keys::<eval::OutputConfig>()),
    ];
    let families: Vec<(String, &[&str])> = [
        ("drafters", axes::DrafterAxis::table_keys()),
        ("policies", axes::PolicyAxis::table_keys()),
        ("schedulers", axes::SchedulerAxis::table_keys()),
    ]
    .into_iter()
    .flat_map(|(axis, tables)| tables.into_iter().map(move |(name, fields)| (format!("{axis}.{name}"), fields)))
    .collect();
    for (name, fields) in &families {
        // A family without keys (`schedulers.sequential = {}`) needs its row only.
        if fields.is_empty() {
            if !eval_section.contains(&format!("`{name}`")) {
                gaps.push(format!("[methods.grid] {name}"));
            }
        } else {
            tables.push((name, fields));
        }
    }
    gaps.extend(missing(&eval_section, &tables).into_iter().map(|g| format!("## `specx eval`: {g}")));

    use specx_datagen::config as dg;
    let datagen: &[(&str, &[&str])] = &[
        ("", keys::<dg::DatagenConfig>()),
        ("models", keys::<dg::ModelsConfig>()),
        ("prompts", keys::<specx_prompts::PromptsConfig>()),
        ("generation", keys::<dg::GenerationConfig>()),
        ("labels", keys::<dg::LabelsConfig>()),
        ("mixing", keys::<dg::MixingConfig>()),
        ("output", keys::<dg::OutputConfig>()),
    ];
    check(&mut gaps, &doc, "## `specx datagen`", datagen);
    // `[slurm]`'s own table lists its keys without the table's name.
    check(&mut gaps, &doc, "### `[slurm]`", &[("", keys::<specx_run::slurm::SlurmConfig>())]);
    use specx_trainer::acceptance::config as tr;
    let train: &[(&str, &[&str])] = &[
        ("", keys::<tr::TrainConfig>()),
        ("data", keys::<tr::DataConfig>()),
        ("head", keys::<tr::HeadConfig>()),
        ("loss", keys::<tr::LossConfig>()),
        ("optim", keys::<tr::OptimConfig>()),
        ("output", keys::<tr::OutputConfig>()),
        ("sweep", keys::<tr::SweepConfig>()),
    ];
    check(&mut gaps, &doc, "## `specx train`", train);
    use specx_trainer::feature::config as fh;
    let feature: &[(&str, &[&str])] = &[
        ("", keys::<fh::FeatureHeadConfig>()),
        ("data", keys::<fh::FeatureDataConfig>()),
        ("model", keys::<fh::FeatureModelConfig>()),
        ("head", keys::<fh::FeatureHeadShape>()),
        ("optim", keys::<fh::FeatureOptimConfig>()),
        ("output", keys::<fh::FeatureOutputConfig>()),
    ];
    check(&mut gaps, &doc, "## `specx train-feature-head`", feature);

    assert!(gaps.is_empty(), "docs/reference/config.md lacks a row for:\n{}", gaps.join("\n"));
}

/// The check itself: a key the reference does not name is reported.
#[test]
fn a_key_without_a_row_is_reported() {
    let section = "| `[models] draft`, `target` | required | x |\n| `seeds` | `[0]` | y |\n";
    assert!(documented(section, "models", "draft") && documented(section, "models", "target"));
    assert!(documented(section, "", "seeds"));
    assert_eq!(missing(section, &[("models", &["draft", "device"])]), ["[models] device"]);
}
