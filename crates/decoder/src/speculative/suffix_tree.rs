//! A suffix tree of token texts cut at `max_depth` tokens, with a count on every node: the
//! structure SuffixDecoding matches against (ArcticInference's `SuffixTree`). Every position
//! of every text starts one string (its next `max_depth` tokens, fewer at the text's end), and
//! a node's count is the number of strings that pass through or end at it, which is the
//! number of occurrences of the node's token string. Edges are compressed (an edge holds a
//! run of tokens as a reference into a text), so the tree has at most two nodes a position.
//!
//! Texts grow online: appending a token extends each string still shorter than `max_depth`
//! by one token (at most `max_depth` steps a token, whatever the corpus size), and a text can
//! be removed in any order (its strings' counts are taken back). A node's edge refers to the
//! last text that passed it, and a removed text's tokens are kept while a node still refers
//! to them; with texts removed oldest first, no node outlives its text's reference.
//!
//! Children are kept sorted by count, highest first (a count changes by swapping a child with
//! the first or last of its equal-count run), so the `n` likeliest continuations of a match
//! are its first `n` children: a speculation reads a bounded number of nodes, and its cost
//! does not grow with the corpus.

use rustc_hash::FxHashMap;
use std::collections::VecDeque;

const ROOT: u32 = 0;

/// A text's handle in a [`SuffixTree`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TextId(u32);

/// A position in the tree: `used` tokens into the edge leading to `node` (the root: 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    node: u32,
    used: u32,
}

/// One continuation of a cursor: where it leads, its token and the occurrences continuing so.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Continuation {
    pub cursor: Cursor,
    pub token: u32,
    pub count: u32,
}

struct Node {
    /// Strings passing through or ending at this node.
    count: u32,
    parent: u32,
    /// The index in the parent's children.
    slot: u32,
    /// Tokens from the root to the end of this node's edge.
    depth: u32,
    /// Tokens on the edge into this node: `texts[text].tokens[end - len..end]`.
    len: u32,
    text: u32,
    end: u32,
    /// Sorted by count, highest first.
    children: Vec<u32>,
}

struct Text {
    tokens: Vec<u32>,
    /// Nodes whose edge refers to these tokens.
    refs: u32,
    /// Removed from the corpus (kept only while `refs > 0`).
    removed: bool,
    /// Where each string still shorter than `max_depth` ends, oldest start first.
    open: VecDeque<u32>,
}

/// A depth-limited suffix tree over texts of tokens (see the module docs).
pub struct SuffixTree {
    max_depth: u32,
    nodes: Vec<Node>,
    free_nodes: Vec<u32>,
    child_by_token: FxHashMap<(u32, u32), u32>,
    texts: Vec<Option<Text>>,
    free_texts: Vec<u32>,
    live_texts: usize,
}

impl SuffixTree {
    /// An empty tree whose strings are at most `max_depth` tokens long.
    pub fn new(max_depth: usize) -> Self {
        assert!((1..=u32::MAX as usize).contains(&max_depth), "a suffix tree's depth must be at least 1");
        let root = Node { count: 0, parent: ROOT, slot: 0, depth: 0, len: 0, text: 0, end: 0, children: Vec::new() };
        Self {
            max_depth: max_depth as u32,
            nodes: vec![root],
            free_nodes: Vec::new(),
            child_by_token: FxHashMap::default(),
            texts: Vec::new(),
            free_texts: Vec::new(),
            live_texts: 0,
        }
    }

    pub fn max_depth(&self) -> usize {
        self.max_depth as usize
    }

    /// Texts in the corpus.
    pub fn texts(&self) -> usize {
        self.live_texts
    }

    /// Tokens of the texts in the corpus (the strings the root counts).
    pub fn tokens(&self) -> usize {
        self.nodes[ROOT as usize].count as usize
    }

    /// Nodes besides the root.
    pub fn nodes(&self) -> usize {
        self.nodes.len() - 1 - self.free_nodes.len()
    }

    /// A text's tokens so far.
    pub fn text(&self, id: TextId) -> &[u32] {
        &self.live(id).tokens
    }

    /// A new, empty text.
    pub fn start(&mut self) -> TextId {
        let text = Text { tokens: Vec::new(), refs: 0, removed: false, open: VecDeque::new() };
        self.live_texts += 1;
        match self.free_texts.pop() {
            Some(slot) => {
                self.texts[slot as usize] = Some(text);
                TextId(slot)
            }
            None => {
                self.texts.push(Some(text));
                TextId(self.texts.len() as u32 - 1)
            }
        }
    }

    /// A new text holding `tokens`.
    pub fn insert(&mut self, tokens: &[u32]) -> TextId {
        let id = self.start();
        self.extend(id, tokens);
        id
    }

    /// Appends `tokens` to text `id`.
    pub fn extend(&mut self, id: TextId, tokens: &[u32]) {
        for &t in tokens {
            self.append(id, t);
        }
    }

    /// Appends one token: every string of the text shorter than `max_depth` grows by it, and
    /// a new string starts with it.
    pub fn append(&mut self, id: TextId, token: u32) {
        let s = id.0;
        let text = self.live_mut(id);
        let p = text.tokens.len() as u32;
        text.tokens.push(token);
        let mut open = std::mem::take(&mut text.open);
        self.nodes[ROOT as usize].count += 1;
        open.push_back(ROOT);
        for _ in 0..open.len() {
            let v = open.pop_front().expect("one entry per string");
            let w = self.step(v, token, s, p);
            if self.nodes[w as usize].depth < self.max_depth {
                open.push_back(w);
            }
        }
        self.live_mut(id).open = open;
    }

    /// Takes text `id` out of the corpus: its strings no longer count.
    pub fn remove(&mut self, id: TextId) {
        let text = self.live_mut(id);
        text.removed = true;
        text.open.clear();
        let tokens = text.tokens.clone();
        self.live_texts -= 1;
        let n = tokens.len();
        for start in 0..n {
            let end = (start + self.max_depth as usize).min(n);
            self.nodes[ROOT as usize].count -= 1;
            let (mut node, mut pos) = (ROOT, start);
            while pos < end {
                let c = self.child_by_token[&(node, tokens[pos])];
                if self.decrement(c) {
                    break;
                }
                pos += self.nodes[c as usize].len as usize;
                node = c;
            }
        }
        self.free_if_unused(id.0);
    }

    /// Where `pattern` ends in the tree, if it occurs (at most `max_depth` tokens).
    pub fn find(&self, pattern: &[u32]) -> Option<Cursor> {
        let mut at = Cursor { node: ROOT, used: 0 };
        for &x in pattern {
            let n = &self.nodes[at.node as usize];
            if at.used == n.len {
                at = Cursor { node: *self.child_by_token.get(&(at.node, x))?, used: 1 };
            } else if self.token_at(at.node, at.used) == x {
                at.used += 1;
            } else {
                return None;
            }
        }
        Some(at)
    }

    /// Occurrences of the string ending at `at`.
    pub fn count(&self, at: Cursor) -> u32 {
        self.nodes[at.node as usize].count
    }

    /// Tokens from the root to `at`.
    pub fn depth(&self, at: Cursor) -> usize {
        let n = &self.nodes[at.node as usize];
        (n.depth - n.len + at.used) as usize
    }

    /// The first `limit` continuations of `at`, most occurrences first (ties: a fixed order).
    pub fn continuations(&self, at: Cursor, limit: usize, out: &mut Vec<Continuation>) {
        out.clear();
        let n = &self.nodes[at.node as usize];
        if at.used < n.len {
            if limit > 0 {
                let token = self.token_at(at.node, at.used);
                out.push(Continuation { cursor: Cursor { node: at.node, used: at.used + 1 }, token, count: n.count });
            }
            return;
        }
        out.extend(n.children.iter().take(limit).map(|&c| Continuation {
            cursor: Cursor { node: c, used: 1 },
            token: self.token_at(c, 0),
            count: self.nodes[c as usize].count,
        }));
    }

    /// Roughly the bytes the tree holds (nodes, the child index, the texts' tokens).
    pub fn bytes(&self) -> usize {
        let nodes: usize = self.nodes.iter().map(|n| size_of::<Node>() + n.children.capacity() * 4).sum();
        let texts: usize = self.texts.iter().flatten().map(|t| size_of::<Text>() + t.tokens.capacity() * 4).sum();
        nodes + texts + self.child_by_token.capacity() * 16
    }

    fn live(&self, id: TextId) -> &Text {
        match self.texts.get(id.0 as usize) {
            Some(Some(t)) if !t.removed => t,
            _ => panic!("suffix tree text {} is not in the corpus", id.0),
        }
    }

    fn live_mut(&mut self, id: TextId) -> &mut Text {
        match self.texts.get_mut(id.0 as usize) {
            Some(Some(t)) if !t.removed => t,
            _ => panic!("suffix tree text {} is not in the corpus", id.0),
        }
    }

    fn token_at(&self, node: u32, k: u32) -> u32 {
        let n = &self.nodes[node as usize];
        let text = self.texts[n.text as usize].as_ref().expect("a node's text is kept while it refers to it");
        text.tokens[(n.end - n.len + k) as usize]
    }

    /// Extends the string ending at `v` by `token` (position `p` of text `s`); returns where
    /// it now ends.
    fn step(&mut self, v: u32, token: u32, s: u32, p: u32) -> u32 {
        let n = &mut self.nodes[v as usize];
        if v != ROOT && n.children.is_empty() && n.count == 1 && n.text == s && n.end == p {
            // The string's own leaf: its edge grows along the text.
            n.len += 1;
            n.end += 1;
            n.depth += 1;
            return v;
        }
        let c = match self.child_by_token.get(&(v, token)) {
            Some(&c) if self.nodes[c as usize].len > 1 => self.split(c),
            Some(&c) => c,
            None => self.add_leaf(v, token, s, p),
        };
        self.increment(c);
        // The edge (one token) now refers to the newest text passing it.
        let old = self.nodes[c as usize].text;
        if old != s {
            self.hold_text(s);
            self.nodes[c as usize].text = s;
            self.release_text(old);
        }
        self.nodes[c as usize].end = p + 1;
        c
    }

    /// A leaf under `v` for `token` at position `p` of text `s`, with no strings yet (last of
    /// the children: count 0).
    fn add_leaf(&mut self, v: u32, token: u32, s: u32, p: u32) -> u32 {
        let slot = self.nodes[v as usize].children.len() as u32;
        let depth = self.nodes[v as usize].depth + 1;
        let node = Node { count: 0, parent: v, slot, depth, len: 1, text: s, end: p + 1, children: Vec::new() };
        self.hold_text(s);
        let c = self.alloc(node);
        self.nodes[v as usize].children.push(c);
        self.child_by_token.insert((v, token), c);
        c
    }

    fn alloc(&mut self, node: Node) -> u32 {
        match self.free_nodes.pop() {
            Some(c) => {
                self.nodes[c as usize] = node;
                c
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() as u32 - 1
            }
        }
    }

    /// Splits `c`'s edge after its first token: a new node takes that token and `c`'s place;
    /// `c` keeps the rest (so whatever pointed at `c`'s end still does).
    fn split(&mut self, c: u32) -> u32 {
        let first = self.token_at(c, 0);
        let second = self.token_at(c, 1);
        let n = &self.nodes[c as usize];
        let upper = Node {
            count: n.count,
            parent: n.parent,
            slot: n.slot,
            depth: n.depth - n.len + 1,
            len: 1,
            text: n.text,
            end: n.end - n.len + 1,
            children: vec![c],
        };
        let (parent, slot, text) = (n.parent, n.slot, n.text);
        self.hold_text(text);
        let u = self.alloc(upper);
        self.nodes[parent as usize].children[slot as usize] = u;
        self.child_by_token.insert((parent, first), u);
        let n = &mut self.nodes[c as usize];
        n.parent = u;
        n.slot = 0;
        n.len -= 1;
        self.child_by_token.insert((u, second), c);
        u
    }

    /// One more string through `c`: it swaps with the first child of its count, then counts it.
    fn increment(&mut self, c: u32) {
        let (parent, slot, count) = {
            let n = &self.nodes[c as usize];
            (n.parent, n.slot, n.count)
        };
        let mut kids = std::mem::take(&mut self.nodes[parent as usize].children);
        let first = kids.partition_point(|&x| self.nodes[x as usize].count > count);
        self.swap_children(&mut kids, slot as usize, first);
        self.nodes[parent as usize].children = kids;
        self.nodes[c as usize].count += 1;
    }

    /// One string fewer through `c`: it swaps with the last child of its count, then drops it;
    /// at zero `c` and everything under it go. Returns whether `c` went.
    fn decrement(&mut self, c: u32) -> bool {
        let (parent, slot, count) = {
            let n = &self.nodes[c as usize];
            (n.parent, n.slot, n.count)
        };
        let mut kids = std::mem::take(&mut self.nodes[parent as usize].children);
        let last = kids.partition_point(|&x| self.nodes[x as usize].count >= count) - 1;
        self.swap_children(&mut kids, slot as usize, last);
        self.nodes[c as usize].count -= 1;
        let gone = count == 1;
        if gone {
            // Counts of zero are dropped at once, so a child at zero is the last.
            debug_assert_eq!(kids.last(), Some(&c));
            kids.pop();
        }
        self.nodes[parent as usize].children = kids;
        if gone {
            self.drop_subtree(c);
        }
        gone
    }

    fn swap_children(&mut self, kids: &mut [u32], i: usize, j: usize) {
        if i != j {
            kids.swap(i, j);
            self.nodes[kids[i] as usize].slot = i as u32;
            self.nodes[kids[j] as usize].slot = j as u32;
        }
    }

    /// Frees `c` (already out of its parent's children) and its descendants.
    fn drop_subtree(&mut self, c: u32) {
        let mut stack = vec![c];
        while let Some(x) = stack.pop() {
            let first = self.token_at(x, 0);
            let n = &mut self.nodes[x as usize];
            let (parent, text) = (n.parent, n.text);
            stack.append(&mut n.children);
            self.child_by_token.remove(&(parent, first));
            self.release_text(text);
            self.free_nodes.push(x);
        }
    }

    fn hold_text(&mut self, slot: u32) {
        self.texts[slot as usize].as_mut().expect("a text a node refers to is kept").refs += 1;
    }

    /// One reference fewer to text `slot`; a removed text nothing refers to is freed.
    fn release_text(&mut self, slot: u32) {
        self.texts[slot as usize].as_mut().expect("a text a node refers to is kept").refs -= 1;
        self.free_if_unused(slot);
    }

    fn free_if_unused(&mut self, slot: u32) {
        if let Some(t) = &self.texts[slot as usize]
            && t.removed
            && t.refs == 0
        {
            self.texts[slot as usize] = None;
            self.free_texts.push(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    /// Occurrences of `w` in `texts`.
    fn occurrences(texts: &[Vec<u32>], w: &[u32]) -> u32 {
        texts.iter().map(|t| t.windows(w.len()).filter(|x| *x == w).count() as u32).sum()
    }

    /// Every string of at most `max_depth` tokens over the alphabet that occurs has its count,
    /// its continuations' counts (sorted, highest first) and depth; every other string has no
    /// place in the tree.
    fn check(tree: &SuffixTree, texts: &[Vec<u32>], alphabet: u32) {
        assert_eq!(tree.texts(), texts.len());
        assert_eq!(tree.tokens(), texts.iter().map(Vec::len).sum::<usize>());
        let mut frontier: Vec<Vec<u32>> = vec![Vec::new()];
        let mut out = Vec::new();
        while let Some(w) = frontier.pop() {
            if w.len() == tree.max_depth() {
                continue;
            }
            let at = if w.is_empty() { Cursor { node: ROOT, used: 0 } } else { tree.find(&w).unwrap() };
            tree.continuations(at, usize::MAX, &mut out);
            let mut want: Vec<(u32, u32)> = (0..alphabet)
                .map(|x| (x, occurrences(texts, &[w.as_slice(), &[x]].concat())))
                .filter(|&(_, n)| n > 0)
                .collect();
            let mut got: Vec<(u32, u32)> = out.iter().map(|c| (c.token, c.count)).collect();
            assert!(got.windows(2).all(|p| p[0].1 >= p[1].1), "continuations of {w:?} sorted: {got:?}");
            got.sort();
            want.sort();
            assert_eq!(got, want, "continuations of {w:?}");
            for x in 0..alphabet {
                let v = [w.as_slice(), &[x]].concat();
                let n = occurrences(texts, &v);
                match tree.find(&v) {
                    Some(c) => {
                        assert_eq!((tree.count(c), tree.depth(c)), (n, v.len()), "{v:?}");
                        frontier.push(v);
                    }
                    None => assert_eq!(n, 0, "{v:?} occurs but has no place"),
                }
            }
        }
    }

    #[test]
    fn counts_are_occurrences_as_texts_grow_interleaved_and_are_removed_in_any_order() {
        for seed in 0..40 {
            let mut rng = StdRng::seed_from_u64(seed);
            let alphabet = rng.random_range(2..4);
            let depth = rng.random_range(1..6);
            let mut tree = SuffixTree::new(depth);
            let mut texts: Vec<(TextId, Vec<u32>)> = Vec::new();
            for _ in 0..60 {
                match rng.random_range(0..10) {
                    0..=1 => texts.push((tree.start(), Vec::new())),
                    2 if !texts.is_empty() => {
                        // Oldest first, else any.
                        let i = if rng.random_bool(0.5) { 0 } else { rng.random_range(0..texts.len()) };
                        let (id, _) = texts.remove(i);
                        tree.remove(id);
                    }
                    _ if !texts.is_empty() => {
                        let i = rng.random_range(0..texts.len());
                        let n = rng.random_range(1..6);
                        for _ in 0..n {
                            // Runs of one token too: a text's strings then share its nodes.
                            let t = if rng.random_bool(0.3) { 0 } else { rng.random_range(0..alphabet) };
                            tree.append(texts[i].0, t);
                            texts[i].1.push(t);
                        }
                    }
                    _ => {}
                }
                let plain: Vec<Vec<u32>> = texts.iter().map(|(_, t)| t.clone()).collect();
                check(&tree, &plain, alphabet);
                for (id, t) in &texts {
                    assert_eq!(tree.text(*id), t.as_slice());
                }
            }
            for (id, _) in texts {
                tree.remove(id);
            }
            assert_eq!((tree.nodes(), tree.tokens(), tree.texts()), (0, 0, 0), "seed {seed}: everything freed");
            assert!(tree.texts.iter().all(Option::is_none), "seed {seed}: no removed text kept");
        }
    }

    #[test]
    fn a_text_with_nothing_repeated_takes_at_most_two_nodes_a_token() {
        let mut tree = SuffixTree::new(24);
        let text: Vec<u32> = (0..1000).collect();
        tree.insert(&text);
        assert_eq!(tree.nodes(), 1000, "one leaf a position, its edge grown along the text");
        let mut rng = StdRng::seed_from_u64(1);
        let text: Vec<u32> = (0..5000).map(|_| rng.random_range(0..50)).collect();
        tree.insert(&text);
        assert!(tree.nodes() <= 2 * 6000, "{} nodes", tree.nodes());
    }

    #[test]
    fn a_removed_text_is_forgotten_when_nothing_refers_to_it() {
        let mut tree = SuffixTree::new(4);
        let a = tree.insert(&[1, 2, 3, 4, 5]);
        let b = tree.insert(&[1, 2, 3, 9]);
        tree.remove(a);
        let at = tree.find(&[1, 2, 3]).unwrap();
        assert_eq!(tree.count(at), 1);
        assert!(tree.find(&[4]).is_none() && tree.find(&[3, 4]).is_none());
        tree.remove(b);
        assert_eq!(tree.nodes(), 0);
    }
}
