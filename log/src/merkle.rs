//! The Merkle tree of the decision log, hashed as RFC 9162 §2.1 says (so any transparency-log
//! tool can check it): a leaf is `SHA-256(0x00 || record)`, a node `SHA-256(0x01 || left ||
//! right)`, and a tree of `n` leaves splits at the largest power of two below `n`.
//!
//! - [`Frontier`]: what the writer keeps to compute the root as records are appended: one hash
//!   per set bit of the size, never the whole tree;
//! - [`root`], [`inclusion_proof`], [`consistency_proof`]: over the leaf hashes, for the verifier;
//! - [`verify_inclusion`], [`verify_consistency`]: RFC 9162 §2.1.3.2 and §2.1.4.2, which need only
//!   the proof, the sizes and the roots.

use sha2::{Digest, Sha256};

/// A SHA-256 hash: a leaf, a node or a root.
pub type Hash = [u8; 32];

/// The hash of a record, as a leaf.
pub fn leaf_hash(record: &[u8]) -> Hash {
    let mut hash = Sha256::new();
    hash.update([0x00]);
    hash.update(record);
    hash.finalize().into()
}

/// The hash of two subtrees.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut hash = Sha256::new();
    hash.update([0x01]);
    hash.update(left);
    hash.update(right);
    hash.finalize().into()
}

/// The root of the empty tree: the hash of nothing.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The right edge of a growing tree: for each set bit of its size, the root of the perfect
/// subtree of that size, largest first. Appending is O(log n) and so is the root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// Perfect subtree roots, largest (leftmost) first.
    peaks: Vec<Hash>,
}

impl Frontier {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many leaves.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Appends a leaf hash.
    pub fn push(&mut self, leaf: Hash) {
        let mut carry = leaf;
        let mut size = self.size;
        // Each trailing one of the old size is a perfect subtree of the new leaf's height:
        // merge them, as binary addition carries.
        while size & 1 == 1 {
            let Some(left) = self.peaks.pop() else { break };
            carry = node_hash(&left, &carry);
            size >>= 1;
        }
        self.peaks.push(carry);
        self.size += 1;
    }

    /// The tree's root (RFC 9162's MTH): the peaks folded right to left.
    pub fn root(&self) -> Hash {
        let mut peaks = self.peaks.iter().rev();
        let Some(last) = peaks.next() else {
            return empty_root();
        };
        peaks.fold(*last, |right, left| node_hash(left, &right))
    }
}

/// The largest power of two strictly below `n` (`n` ≥ 2).
fn split(n: usize) -> usize {
    debug_assert!(n >= 2);
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// The root over `leaves` (RFC 9162's MTH).
pub fn root(leaves: &[Hash]) -> Hash {
    match leaves {
        [] => empty_root(),
        [one] => *one,
        _ => {
            let k = split(leaves.len());
            node_hash(&root(&leaves[..k]), &root(&leaves[k..]))
        }
    }
}

/// The inclusion proof of leaf `index` in the tree over `leaves` (RFC 9162 §2.1.3.1, PATH);
/// `None` if `index` is out of range.
pub fn inclusion_proof(leaves: &[Hash], index: usize) -> Option<Vec<Hash>> {
    (index < leaves.len()).then(|| path(index, leaves))
}

fn path(m: usize, leaves: &[Hash]) -> Vec<Hash> {
    if leaves.len() <= 1 {
        return Vec::new();
    }
    let k = split(leaves.len());
    if m < k {
        let mut proof = path(m, &leaves[..k]);
        proof.push(root(&leaves[k..]));
        proof
    } else {
        let mut proof = path(m - k, &leaves[k..]);
        proof.push(root(&leaves[..k]));
        proof
    }
}

/// The consistency proof between the tree of the first `old` leaves and the tree over all of
/// `leaves` (RFC 9162 §2.1.4.1, PROOF); `None` unless `0 < old <= leaves.len()`.
pub fn consistency_proof(leaves: &[Hash], old: usize) -> Option<Vec<Hash>> {
    (old > 0 && old <= leaves.len()).then(|| subproof(old, leaves, true))
}

fn subproof(m: usize, leaves: &[Hash], complete: bool) -> Vec<Hash> {
    let n = leaves.len();
    if m == n {
        return if complete {
            Vec::new()
        } else {
            vec![root(leaves)]
        };
    }
    let k = split(n);
    if m <= k {
        let mut proof = subproof(m, &leaves[..k], complete);
        proof.push(root(&leaves[k..]));
        proof
    } else {
        let mut proof = subproof(m - k, &leaves[k..], false);
        proof.push(root(&leaves[..k]));
        proof
    }
}

impl Frontier {
    /// The consistency proof from this tree to the tree that adds `newer` leaves to it (as
    /// [`consistency_proof`] over all the leaves would answer), without the old leaves: every
    /// node of the old tree that a proof names is one of its peaks. `None` if this tree is
    /// empty or nothing is added.
    pub fn consistency_proof_to(&self, newer: &[Hash]) -> Option<Vec<Hash>> {
        let old = usize::try_from(self.size).ok()?;
        let new = old.checked_add(newer.len())?;
        (old > 0 && !newer.is_empty()).then(|| self.subproof_from(old, 0, new, newer, true))
    }

    /// The hash of the complete or right-edge node over leaves `start..end`, where leaves
    /// before `self.size` are known only through the peaks.
    fn node(&self, start: usize, end: usize, newer: &[Hash]) -> Hash {
        let old = self.size as usize;
        if start >= old {
            return root(&newer[start - old..end - old]);
        }
        if end <= old {
            // A node wholly in the old tree that a proof names is a peak: find it by its range.
            let mut at = 0usize;
            for (i, peak) in self.peaks.iter().enumerate() {
                let Some(width) = peak_width(self.size, i) else {
                    break;
                };
                if at == start && at + width == end {
                    return *peak;
                }
                at += width;
            }
        }
        let k = split(end - start);
        node_hash(
            &self.node(start, start + k, newer),
            &self.node(start + k, end, newer),
        )
    }

    fn subproof_from(
        &self,
        m: usize,
        start: usize,
        end: usize,
        newer: &[Hash],
        complete: bool,
    ) -> Vec<Hash> {
        let n = end - start;
        if m == n {
            return if complete {
                Vec::new()
            } else {
                vec![self.node(start, end, newer)]
            };
        }
        let k = split(n);
        if m <= k {
            let mut proof = self.subproof_from(m, start, start + k, newer, complete);
            proof.push(self.node(start + k, end, newer));
            proof
        } else {
            let mut proof = self.subproof_from(m - k, start + k, end, newer, false);
            proof.push(self.node(start, start + k, newer));
            proof
        }
    }
}

/// The number of leaves under peak `i` of a tree of `size` leaves: the `i`-th set bit of
/// `size`, highest first.
fn peak_width(size: u64, i: usize) -> Option<usize> {
    let mut bits = (0..64u32).rev().filter(|b| size >> b & 1 == 1);
    bits.nth(i).map(|b| 1usize << b)
}

/// Whether `proof` shows leaf `leaf` at `index` in the tree of `size` leaves with root `root`
/// (RFC 9162 §2.1.3.2).
pub fn verify_inclusion(index: u64, size: u64, leaf: &Hash, proof: &[Hash], root: &Hash) -> bool {
    if index >= size {
        return false;
    }
    let (mut f_n, mut s_n) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if s_n == 0 {
            return false;
        }
        if f_n & 1 == 1 || f_n == s_n {
            r = node_hash(p, &r);
            if f_n & 1 == 0 {
                while f_n & 1 == 0 && f_n != 0 {
                    f_n >>= 1;
                    s_n >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        f_n >>= 1;
        s_n >>= 1;
    }
    s_n == 0 && r == *root
}

/// Whether `proof` shows that the tree of `old` leaves with root `old_root` is a prefix of the
/// tree of `new` leaves with root `new_root` (RFC 9162 §2.1.4.2).
pub fn verify_consistency(
    old: u64,
    new: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> bool {
    if old > new {
        return false;
    }
    if old == new {
        return proof.is_empty() && old_root == new_root;
    }
    if old == 0 {
        // Everything extends the empty tree; RFC 9162 has no proof for it.
        return proof.is_empty();
    }
    // When the old size is a power of two, its root is the proof's implicit first element.
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if old.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let Some((first, rest)) = path.split_first() else {
        return false;
    };
    let (mut f_n, mut s_n) = (old - 1, new - 1);
    while f_n & 1 == 1 {
        f_n >>= 1;
        s_n >>= 1;
    }
    let (mut f_r, mut s_r) = (*first, *first);
    for c in rest {
        if s_n == 0 {
            return false;
        }
        if f_n & 1 == 1 || f_n == s_n {
            f_r = node_hash(c, &f_r);
            s_r = node_hash(c, &s_r);
            if f_n & 1 == 0 {
                while f_n & 1 == 0 && f_n != 0 {
                    f_n >>= 1;
                    s_n >>= 1;
                }
            }
        } else {
            s_r = node_hash(&s_r, c);
        }
        f_n >>= 1;
        s_n >>= 1;
    }
    s_n == 0 && f_r == *old_root && s_r == *new_root
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frontier_proves_consistency_without_the_old_leaves() {
        let all = leaves(70);
        for old in 1..=40usize {
            let mut frontier = Frontier::new();
            for leaf in &all[..old] {
                frontier.push(*leaf);
            }
            for new in old + 1..=70 {
                let proof = frontier.consistency_proof_to(&all[old..new]).unwrap();
                assert_eq!(
                    Some(&proof),
                    consistency_proof(&all[..new], old).as_ref(),
                    "{old}->{new}"
                );
                assert!(verify_consistency(
                    old as u64,
                    new as u64,
                    &frontier.root(),
                    &root(&all[..new]),
                    &proof
                ));
            }
            assert_eq!(frontier.consistency_proof_to(&[]), None);
        }
        assert_eq!(Frontier::new().consistency_proof_to(&all[..3]), None);
    }

    fn leaves(n: usize) -> Vec<Hash> {
        (0..n)
            .map(|i| leaf_hash(format!("record {i}").as_bytes()))
            .collect()
    }

    #[test]
    fn the_frontier_has_the_full_trees_root_at_every_size() {
        let all = leaves(70);
        let mut frontier = Frontier::new();
        assert_eq!(frontier.root(), empty_root());
        for (i, leaf) in all.iter().enumerate() {
            frontier.push(*leaf);
            assert_eq!(frontier.size(), i as u64 + 1);
            assert_eq!(frontier.root(), root(&all[..=i]), "size {}", i + 1);
            assert_eq!(frontier.peaks.len(), (i + 1).count_ones() as usize);
        }
    }

    #[test]
    fn every_inclusion_proof_verifies_and_nothing_else_does() {
        let all = leaves(21);
        for n in 1..=all.len() {
            let tree = &all[..n];
            let r = root(tree);
            for i in 0..n {
                let proof = inclusion_proof(tree, i).unwrap();
                assert!(verify_inclusion(i as u64, n as u64, &tree[i], &proof, &r));
                // Another leaf, index, size or root: no.
                assert!(!verify_inclusion(
                    i as u64,
                    n as u64,
                    &leaf_hash(b"x"),
                    &proof,
                    &r
                ));
                if n > 1 {
                    let other = (i + 1) % n;
                    assert!(!verify_inclusion(
                        other as u64,
                        n as u64,
                        &tree[i],
                        &proof,
                        &r
                    ));
                }
                // (The size is not checked here: it comes with the root, in the signed
                // checkpoint; a left subtree's proof also fits some larger trees' shapes.)
                assert!(!verify_inclusion(
                    i as u64,
                    n as u64,
                    &tree[i],
                    &proof,
                    &empty_root()
                ));
            }
            assert_eq!(inclusion_proof(tree, n), None);
        }
    }

    #[test]
    fn every_consistency_proof_verifies_and_a_fork_does_not() {
        let all = leaves(19);
        for n in 1..=all.len() {
            for m in 1..=n {
                let proof = consistency_proof(&all[..n], m).unwrap();
                let (old, new) = (root(&all[..m]), root(&all[..n]));
                assert!(
                    verify_consistency(m as u64, n as u64, &old, &new, &proof),
                    "{m} → {n}"
                );
                if m < n {
                    // A fork: the old tree with one leaf changed is not a prefix.
                    let mut forked = all[..m].to_vec();
                    forked[m - 1] = leaf_hash(b"forged");
                    assert!(!verify_consistency(
                        m as u64,
                        n as u64,
                        &root(&forked),
                        &new,
                        &proof
                    ));
                    assert!(!verify_consistency(n as u64, m as u64, &new, &old, &proof));
                }
            }
        }
    }
}
