//! The drafter registry's expansion: from one line per family to the enum a results row
//! records, the `--drafter` values, the grid's `drafters` tables and the dispatch between them.

/// `Variant(module::Type) = "tag",`: the family `Type` in `module.rs`, recorded as
/// `{"kind": "tag", ...}` and listed in a grid as `drafters.tag`.
macro_rules! drafter_families {
    ($($variant:ident($module:ident :: $ty:ident) = $tag:literal,)*) => {
        $(pub mod $module;)*
        $(pub use $module::$ty;)*

        /// Who proposes the candidates: one setting of a registered family.
        #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(tag = "kind")]
        pub enum DrafterSpec {
            $(#[serde(rename = $tag)] $variant($ty),)*
        }

        $(impl From<$ty> for DrafterSpec {
            fn from(d: $ty) -> Self {
                Self::$variant(d)
            }
        })*

        impl DrafterSpec {
            pub fn name(&self) -> &'static str {
                match self { $(Self::$variant(_) => <$ty as DrafterFamily>::NAME,)* }
            }
            pub fn runs_draft_model(&self) -> bool {
                match self { $(Self::$variant(_) => <$ty as DrafterFamily>::RUNS_DRAFT_MODEL,)* }
            }
            /// A method's key from the policy and scheduler's part.
            pub fn key(&self, body: String) -> String {
                match self { $(Self::$variant(d) => d.key(body),)* }
            }
            pub fn family(&self) -> Option<&'static str> {
                match self { $(Self::$variant(d) => d.family(),)* }
            }
            pub fn check(&self, policy: &PolicySpec, draft: &DraftTransform) -> anyhow::Result<()> {
                match self { $(Self::$variant(d) => d.check(policy, draft),)* }
            }
            pub fn build<'m>(&self, models: DraftModels<'m>) -> anyhow::Result<Box<dyn Drafter + 'm>> {
                match self { $(Self::$variant(d) => d.build(models),)* }
            }
        }

        /// `--drafter`: a registered family.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum DrafterKind {
            $($variant,)*
        }

        impl DrafterKind {
            const ALL: &'static [DrafterKind] = &[$(DrafterKind::$variant,)*];

            pub fn name(self) -> &'static str {
                match self { $(Self::$variant => <$ty as DrafterFamily>::NAME,)* }
            }
            fn help(self) -> &'static str {
                match self { $(Self::$variant => <$ty as DrafterFamily>::HELP,)* }
            }
            fn flags(self) -> &'static [DrafterFlag] {
                match self { $(Self::$variant => <$ty as DrafterFamily>::FLAGS,)* }
            }

            /// The setting `flags` describe under this family; a flag it does not take is
            /// refused, naming the families that do.
            pub fn from_flags(self, flags: &DrafterFlags) -> anyhow::Result<DrafterSpec> {
                flags.refuse_unused(self.flags())?;
                match self { $(Self::$variant => <$ty as DrafterFamily>::from_flags(flags).map(DrafterSpec::from),)* }
            }

            /// Whether results group rows under `family` for their drafter: every drafter's
            /// but the plain chain's, whose rows go under their stop policy.
            pub fn names_a_drafter(family: &str) -> bool {
                family != "plain" && Self::ALL.iter().any(|k| k.name() == family)
            }

            /// The names of the families that take `flag`.
            pub fn names_taking(flag: DrafterFlag) -> Vec<&'static str> {
                Self::ALL.iter().filter(|k| k.flags().contains(&flag)).map(|k| k.name()).collect()
            }
        }

        impl clap::ValueEnum for DrafterKind {
            fn value_variants<'a>() -> &'a [Self] {
                Self::ALL
            }
            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                Some(clap::builder::PossibleValue::new(self.name()).help(self.help()))
            }
        }

        /// A grid's `drafters` tables, one per family (`drafters.lookup = { ngrams = [[1, 3]] }`);
        /// none listed: the first family's default (the plain drafter).
        #[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct DrafterAxis {
            $(#[serde(rename = $tag)] pub $module: Option<<$ty as DrafterFamily>::Grid>,)*
        }

        impl DrafterAxis {
            /// Each table's name and keys (`("lookup", ["ngrams"])`), for the config reference.
            pub fn table_keys() -> Vec<(&'static str, &'static [&'static str])> {
                vec![$(($tag, specx_run::config_keys::struct_fields::<<$ty as DrafterFamily>::Grid>()),)*]
            }

            /// Every setting, family by family in the registry's order.
            pub fn expand(&self) -> Vec<DrafterSpec> {
                let mut out = Vec::new();
                let mut listed = false;
                $(if let Some(g) = &self.$module {
                    listed = true;
                    out.extend(<$ty as DrafterFamily>::settings(g).into_iter().map(DrafterSpec::from));
                })*
                if !listed {
                    out.push(DrafterSpec::Plain(plain::Plain {}));
                }
                out
            }

            /// No table lists nothing, and the files they name are what they should be.
            pub fn validate(&self) -> anyhow::Result<()> {
                $(if let Some(g) = &self.$module {
                    check_lists(concat!("drafters.", $tag), &<$ty as DrafterFamily>::grid_lists(g))?;
                    <$ty as DrafterFamily>::check_grid(g)?;
                })*
                Ok(())
            }

            /// Every path the tables name (resolved against the config's directory).
            pub fn paths_mut(&mut self) -> Vec<&mut std::path::PathBuf> {
                let mut out = Vec::new();
                $(out.extend(self.$module.iter_mut().flat_map(<$ty as DrafterFamily>::grid_paths_mut));)*
                out
            }
        }
    };
}

pub(super) use drafter_families;
