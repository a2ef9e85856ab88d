//! The shape of a tree call: `n` new rows of one sequence, each the child of an earlier row of
//! the call or (a root) of the cache's last position. A row sits at the position of its depth
//! after the cache and attends to the cache and to its ancestors only, so its result is the one
//! a chain call of its root-to-row path would give ([`crate::Transformer::forward_tree`]).
//!
//! A chain is the tree where row i is the child of row i - 1.

use anyhow::{Result, ensure};

/// Parents, depths and root-to-row paths of a tree call's rows (rows in topological order:
/// a parent before its children).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeMask {
    parents: Vec<Option<usize>>,
    depths: Vec<usize>,
    /// Per row: its ancestors among the call's rows and itself, root first.
    paths: Vec<Vec<usize>>,
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
        Ok(Self { parents: parents.to_vec(), depths, paths })
    }

    /// `n` rows in a chain: what an ordinary forward of `n` tokens computes.
    pub fn chain(n: usize) -> Self {
        let parents: Vec<Option<usize>> = (0..n).map(|i| i.checked_sub(1)).collect();
        Self::new(&parents).expect("a chain's parents come first")
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.parents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parents.is_empty()
    }

    /// The row that row `i` follows (`None`: it follows the cache).
    pub fn parent(&self, i: usize) -> Option<usize> {
        self.parents[i]
    }

    /// Every row's parent.
    pub fn parents(&self) -> &[Option<usize>] {
        &self.parents
    }

    /// Row `i`'s depth: 0 for a root; its position is the cache's length plus its depth.
    pub fn depth(&self, i: usize) -> usize {
        self.depths[i]
    }

    /// Row `i`'s ancestors among the call's rows and itself, root first.
    pub fn path(&self, i: usize) -> &[usize] {
        &self.paths[i]
    }

    /// The children of row `i`, in row order (`None`: the roots).
    pub fn children(&self, i: Option<usize>) -> impl Iterator<Item = usize> + '_ {
        (0..self.len()).filter(move |&c| self.parents[c] == i)
    }

    /// Rows without children.
    pub fn leaves(&self) -> Vec<usize> {
        (0..self.len()).filter(|&i| self.children(Some(i)).next().is_none()).collect()
    }

    /// The deepest row's depth plus one (0 for an empty tree).
    pub fn height(&self) -> usize {
        self.depths.iter().max().map_or(0, |d| d + 1)
    }

    /// How many leading entries of row `i`'s path are rows `0, 1, 2, ...`: the part of its
    /// keys that lies contiguously after the cache (a chain's whole path).
    pub fn contiguous_prefix(&self, i: usize) -> usize {
        self.paths[i].iter().enumerate().take_while(|&(k, &row)| k == row).count()
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
    fn a_parent_after_its_child_is_refused() {
        let e = TreeMask::new(&[None, Some(2), Some(0)]).unwrap_err().to_string();
        assert!(e.contains("row 1 names row 2"), "{e}");
        assert!(TreeMask::new(&[Some(0)]).is_err(), "a row cannot be its own parent");
    }
}
