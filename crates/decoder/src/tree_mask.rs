//! The shape of a tree call: `n` new rows of one sequence, each the child of an earlier row of
//! the call or (a root) of the cache's last position. A row sits at the position of its depth
//! after the cache and attends to the cache and to its ancestors only, so its result is the one
//! a chain call of its root-to-row path would give ([`crate::Transformer::forward_tree`]).
//!
//! A chain is the tree where row i is the child of row i - 1.
//!
//! A call may also continue a tree whose first rows an earlier call put in the cache
//! ([`TreeMask::continuing`]): a draft that grows its tree level by level forwards each level
//! once, its rows attending to ancestors already cached.

use anyhow::{Result, ensure};

/// Parents, depths and root-to-row paths of a tree's rows (in topological order: a parent
/// before its children), of which a call computes the last [`TreeMask::len`]. Tree rows are
/// numbered from the first row the cache holds (none, unless [`TreeMask::continuing`]), and
/// tree row r sits in the cache at the position of the tree's first row plus r.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeMask {
    parents: Vec<Option<usize>>,
    depths: Vec<usize>,
    /// Per row: its ancestors and itself, root first.
    paths: Vec<Vec<usize>>,
    /// Leading rows already in the cache (its last positions), not computed by the call.
    cached: usize,
}

impl TreeMask {
    /// The tree of `parents` (`parents[i]`: the row that row i follows, `None` for a root).
    /// Refuses a parent that is not an earlier row.
    pub fn new(parents: &[Option<usize>]) -> Result<Self> {
        let mut depths = Vec::with_capacity(parents.len());
        let mut paths: Vec<Vec<usize>> = Vec::with_capacity(parents.len());
        for (i, parent) in parents.iter().enumerate() {
            let mut path = match *parent {
                None => Vec::new(),
                Some(p) => {
                    ensure!(p < i, "tree row {i} names row {p} as its parent: a parent must come before its children");
                    paths[p].clone()
                }
            };
            path.push(i);
            depths.push(path.len() - 1);
            paths.push(path);
        }
        Ok(Self { parents: parents.to_vec(), depths, paths, cached: 0 })
    }

    /// The tree of `parents` whose first `cached` rows an earlier call already put in the
    /// cache, as its last `cached` positions, in row order: the call computes the rest.
    pub fn continuing(parents: &[Option<usize>], cached: usize) -> Result<Self> {
        ensure!(cached <= parents.len(), "{cached} cached rows of a tree of {}", parents.len());
        Ok(Self { cached, ..Self::new(parents)? })
    }

    /// `n` rows in a chain: what an ordinary forward of `n` tokens computes.
    pub fn chain(n: usize) -> Self {
        let parents: Vec<Option<usize>> = (0..n).map(|i| i.checked_sub(1)).collect();
        Self::new(&parents).expect("a chain's parents come first")
    }

    /// Number of rows the call computes (the tree's rows after the cached ones).
    pub fn len(&self) -> usize {
        self.parents.len() - self.cached
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Leading tree rows already in the cache.
    pub fn cached(&self) -> usize {
        self.cached
    }

    /// The tree row that the call's row `i` follows (`None`: it follows the tree's prefix).
    pub fn parent(&self, i: usize) -> Option<usize> {
        self.parents[self.cached + i]
    }

    /// Every tree row's parent, cached rows included.
    pub fn parents(&self) -> &[Option<usize>] {
        &self.parents
    }

    /// The call's row `i`'s depth: 0 for a root; its position is that of the tree's first row
    /// (the cache's length before the tree) plus its depth.
    pub fn depth(&self, i: usize) -> usize {
        self.depths[self.cached + i]
    }

    /// The call's row `i`'s ancestors and itself as tree rows, root first.
    pub fn path(&self, i: usize) -> &[usize] {
        &self.paths[self.cached + i]
    }

    /// The children of tree row `i`, in row order (`None`: the roots).
    pub fn children(&self, i: Option<usize>) -> impl Iterator<Item = usize> + '_ {
        (0..self.parents.len()).filter(move |&c| self.parents[c] == i)
    }

    /// Tree rows without children.
    pub fn leaves(&self) -> Vec<usize> {
        (0..self.parents.len()).filter(|&i| self.children(Some(i)).next().is_none()).collect()
    }

    /// The deepest row's depth plus one (0 for an empty tree).
    pub fn height(&self) -> usize {
        self.depths.iter().max().map_or(0, |d| d + 1)
    }

    /// How many leading entries of the call's row `i`'s path are tree rows `0, 1, 2, ...`:
    /// the part of its keys that lies contiguously after the tree's prefix (a chain's whole
    /// path).
    pub fn contiguous_prefix(&self, i: usize) -> usize {
        self.path(i).iter().enumerate().take_while(|&(k, &row)| k == row).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_depths_and_leaves_follow_the_parents() {
        // 0 -> {1, 2}, 1 -> 3, 2 -> 4, 4 -> 5; and a second root 6.
        let t = TreeMask::new(&[None, Some(0), Some(0), Some(1), Some(2), Some(4), None]).unwrap();
        assert_eq!(t.path(5), &[0, 2, 4, 5]);
        assert_eq!((t.depth(0), t.depth(3), t.depth(5), t.depth(6)), (0, 2, 3, 0));
        assert_eq!(t.leaves(), vec![3, 5, 6]);
        assert_eq!(t.children(Some(0)).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(t.children(None).collect::<Vec<_>>(), vec![0, 6]);
        assert_eq!(t.height(), 4);
        assert_eq!((t.contiguous_prefix(3), t.contiguous_prefix(5), t.contiguous_prefix(6)), (2, 1, 0));
    }

    #[test]
    fn a_chain_is_one_contiguous_path() {
        let c = TreeMask::chain(4);
        assert_eq!(c.path(3), &[0, 1, 2, 3]);
        assert_eq!(c.contiguous_prefix(3), 4);
        assert_eq!(c.leaves(), vec![3]);
    }

    #[test]
    fn a_continuing_call_numbers_its_rows_after_the_cached_ones() {
        // Rows 0 and 1 (roots) cached; the call computes 2 (under 1) and 3 (under 2).
        let t = TreeMask::continuing(&[None, None, Some(1), Some(2)], 2).unwrap();
        assert_eq!((t.len(), t.cached()), (2, 2));
        assert_eq!((t.parent(0), t.depth(0), t.path(0)), (Some(1), 1, &[1, 2][..]));
        assert_eq!((t.depth(1), t.path(1)), (2, &[1, 2, 3][..]));
        assert_eq!(t.contiguous_prefix(1), 0, "row 0 is not on its path");
        assert!(TreeMask::continuing(&[None], 2).is_err());
    }

    #[test]
    fn a_parent_after_its_child_is_refused() {
        let e = TreeMask::new(&[None, Some(2), Some(0)]).unwrap_err().to_string();
        assert!(e.contains("row 1 names row 2"), "{e}");
        assert!(TreeMask::new(&[Some(0)]).is_err(), "a row cannot be its own parent");
    }
}
