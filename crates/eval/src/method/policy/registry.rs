//! The registry's expansion: from one line per family to the enum a results row records, the
//! `--policy` values, the grid's `policies` tables and the dispatch between them. Nothing in it
//! names a family: each line of the list in `policy/mod.rs` is all a family adds.

/// `Variant(module::Type) = "tag",`: the family `Type` in `module.rs`, recorded as
/// `{"kind": "tag", ...}` and listed in a grid as `policies.tag`.
macro_rules! policy_families {
    ($($variant:ident($module:ident :: $ty:ident) = $tag:literal,)*) => {
        $(pub mod $module;)*
        $(pub use $module::$ty;)*

        /// When drafting stops: one setting of a registered family. Recorded with the family's
        /// tag (`{"kind": "fixed", "k": 4}`).
        #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(tag = "kind")]
        pub enum PolicySpec {
            $(#[serde(rename = $tag)] $variant($ty),)*
        }

        $(impl From<$ty> for PolicySpec {
            fn from(p: $ty) -> Self {
                Self::$variant(p)
            }
        })*

        impl PolicySpec {
            /// The family's name (`--policy`'s value, the results' `policy` column).
            pub fn name(&self) -> &'static str {
                match self { $(Self::$variant(_) => <$ty as PolicyFamily>::NAME,)* }
            }
            /// The name each policy had as a method of its own (fixed K is SpecDec's).
            pub fn key(&self) -> String {
                match self { $(Self::$variant(p) => p.key(),)* }
            }
            /// The group its rows are summarised under.
            pub fn family(&self) -> &'static str {
                match self { $(Self::$variant(p) => p.family(),)* }
            }
            /// The most candidates a round may hold (DSI's block length).
            pub fn max_candidates(&self) -> usize {
                match self { $(Self::$variant(p) => p.max_candidates(),)* }
            }
            /// What it reads of a round.
            pub fn reads(&self) -> Reads {
                match self { $(Self::$variant(_) => <$ty as PolicyFamily>::READS,)* }
            }
            /// Whether it learns from the time its rounds took.
            pub fn learns_from_time(&self) -> bool {
                match self { $(Self::$variant(_) => <$ty as PolicyFamily>::LEARNS_FROM_TIME,)* }
            }
            /// Whether a real run can use it: one that reads the AR output in advance (the
            /// oracle) exists only in replays.
            pub fn runnable(&self) -> bool {
                self.reads() != Reads::ArOutput
            }
            /// Its parameters' ranges and the partners it refuses.
            pub fn check(&self, partners: Partners) -> anyhow::Result<()> {
                match self { $(Self::$variant(p) => p.check(partners),)* }
            }
            /// A fresh decoder policy.
            pub fn build(&self, heads: HeadBinding) -> anyhow::Result<Box<dyn StopPolicy>> {
                match self { $(Self::$variant(p) => p.build(heads),)* }
            }
            /// The acceptance head it stops with.
            pub fn head(&self) -> Option<&str> {
                match self { $(Self::$variant(p) => p.head(),)* }
            }
            /// The threshold of a head or confidence rule.
            pub fn threshold(&self) -> Option<f64> {
                match self { $(Self::$variant(p) => p.threshold(),)* }
            }
            /// `[min, max]` candidates of a bounded rule.
            pub fn bounds(&self) -> Option<[usize; 2]> {
                match self { $(Self::$variant(p) => p.bounds(),)* }
            }
        }

        /// `--policy`: a registered family.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum PolicyKind {
            $($variant,)*
        }

        impl PolicyKind {
            const ALL: &'static [PolicyKind] = &[$(PolicyKind::$variant,)*];

            pub fn name(self) -> &'static str {
                match self { $(Self::$variant => <$ty as PolicyFamily>::NAME,)* }
            }
            fn help(self) -> &'static str {
                match self { $(Self::$variant => <$ty as PolicyFamily>::HELP,)* }
            }
            fn runnable(self) -> bool {
                self.reads() != Reads::ArOutput
            }
            fn reads(self) -> Reads {
                match self { $(Self::$variant => <$ty as PolicyFamily>::READS,)* }
            }
            fn flags(self) -> &'static [Flag] {
                match self { $(Self::$variant => <$ty as PolicyFamily>::FLAGS,)* }
            }

            /// The setting `flags` describe under this family. A flag it does not take is
            /// refused, naming the families that do.
            pub fn from_flags(self, flags: &PolicyFlags) -> anyhow::Result<PolicySpec> {
                flags.refuse_unused(self.flags())?;
                match self {
                    $(Self::$variant => flags.reading::<$ty>().map(PolicySpec::from),)*
                }
            }

            /// The names of the families a real run can use whose reads pass `keep`.
            pub fn names_reading(keep: impl Fn(Reads) -> bool) -> Vec<&'static str> {
                Self::ALL.iter().filter(|k| k.runnable() && keep(k.reads())).map(|k| k.name()).collect()
            }

            /// The names of the families that take `flag`.
            pub fn names_taking(flag: Flag) -> Vec<&'static str> {
                Self::ALL.iter().filter(|k| k.runnable() && k.flags().contains(&flag)).map(|k| k.name()).collect()
            }
        }

        impl clap::ValueEnum for PolicyKind {
            fn value_variants<'a>() -> &'a [Self] {
                Self::ALL
            }
            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                Some(clap::builder::PossibleValue::new(self.name()).help(self.help()).hide(!self.runnable()))
            }
        }

        /// A grid's `policies` tables: one per family (`policies.fixed = { k = [2, 4] }`), and
        /// the stop rule that ships at its setting for each of `hardware`.
        #[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct PolicyAxis {
            $(#[serde(rename = $tag)] pub $module: Option<<$ty as PolicyFamily>::Grid>,)*
            /// The stop rule that ships (`checkpoints/adaptive/rule.json`), at its setting for
            /// each of `hardware` (`gpu`, `cpu`); the results name the setting it resolved to.
            pub adaptive: Option<shipped::AdaptivePolicies>,
        }

        impl PolicyAxis {
            /// Every tag a grid may list (`fixed, head, ...`).
            pub fn tables() -> Vec<&'static str> {
                vec![$($tag,)* "adaptive"]
            }

            /// Each table's name and keys (`("fixed", ["k"])`), for the config reference.
            pub fn table_keys() -> Vec<(&'static str, &'static [&'static str])> {
                let keys = specx_run::config_keys::struct_fields::<shipped::AdaptivePolicies>();
                vec![$(($tag, specx_run::config_keys::struct_fields::<<$ty as PolicyFamily>::Grid>()),)* ("adaptive", keys)]
            }

            /// Every setting, family by family in the registry's order, then the shipped rule's.
            pub fn expand(&self) -> anyhow::Result<Vec<PolicySpec>> {
                let mut out = Vec::new();
                $(if let Some(g) = &self.$module {
                    out.extend(<$ty as PolicyFamily>::settings(g)?.into_iter().map(PolicySpec::from));
                })*
                for &h in self.adaptive.iter().flat_map(|g| &g.hardware) {
                    out.push(shipped::shipped_policy(h)?);
                }
                Ok(out)
            }

            /// No table lists nothing, and the files they name are what they should be.
            pub fn validate(&self) -> anyhow::Result<()> {
                $(if let Some(g) = &self.$module {
                    check_lists(concat!("policies.", $tag), &<$ty as PolicyFamily>::grid_lists(g))?;
                    <$ty as PolicyFamily>::check_grid(g)?;
                })*
                if let Some(g) = &self.adaptive {
                    check_lists("policies.adaptive", &[("hardware", g.hardware.len())])?;
                }
                Ok(())
            }

            /// Every acceptance-head directory the tables name.
            pub fn head_dirs(&self) -> Vec<&std::path::PathBuf> {
                let mut out = Vec::new();
                $(out.extend(self.$module.iter().flat_map(<$ty as PolicyFamily>::grid_heads));)*
                out
            }

            /// Every path the tables name (resolved against the config's directory).
            pub fn paths_mut(&mut self) -> Vec<&mut std::path::PathBuf> {
                let mut out = Vec::new();
                $(out.extend(self.$module.iter_mut().flat_map(<$ty as PolicyFamily>::grid_paths_mut));)*
                out
            }
        }
    };
}

pub(super) use policy_families;
