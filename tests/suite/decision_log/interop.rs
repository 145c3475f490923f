//! The log's Merkle tree against an independent RFC 6962 implementation (`ct-merkle`): the same
//! roots, the same inclusion and consistency proofs, each verified by the other side. Third-party
//! transparency-log tools can therefore check this log's checkpoints and proofs.

use ct_merkle::mem_backed_tree::MemoryBackedTree;
use ct_merkle::{ConsistencyProof, InclusionProof};
use mcp_confirm_log::merkle;
use sha2::Sha256;

fn flat(proof: &[merkle::Hash]) -> Vec<u8> {
    proof.iter().flatten().copied().collect()
}

#[test]
fn roots_and_proofs_match_ct_merkle_byte_for_byte() {
    let records: Vec<Vec<u8>> = (0..40)
        .map(|i| format!("{{\"seq\":{i}}}").into_bytes())
        .collect();
    let mut theirs = MemoryBackedTree::<Sha256, Vec<u8>>::new();
    let mut leaves = Vec::new();
    for (n, record) in records.iter().enumerate() {
        theirs.push(record.clone());
        leaves.push(merkle::leaf_hash(record));
        let size = n + 1;
        let root = merkle::root(&leaves);
        let their_root = theirs.root();
        assert_eq!(
            their_root.as_bytes().as_slice(),
            root.as_slice(),
            "root of {size}"
        );
        for (i, record) in records.iter().enumerate().take(size) {
            let ours = merkle::inclusion_proof(&leaves, i).unwrap();
            let their_proof = theirs.prove_inclusion(i);
            assert_eq!(
                their_proof.as_bytes(),
                flat(&ours).as_slice(),
                "inclusion {i} of {size}"
            );
            their_root
                .verify_inclusion(
                    record,
                    i as u64,
                    &InclusionProof::<Sha256>::from_bytes(flat(&ours)),
                )
                .unwrap_or_else(|e| panic!("ct-merkle refuses our proof {i} of {size}: {e:?}"));
        }
        for old in 1..size {
            let ours = merkle::consistency_proof(&leaves, old).unwrap();
            let their_proof = theirs.prove_consistency(size - old);
            assert_eq!(
                their_proof.as_bytes(),
                flat(&ours).as_slice(),
                "consistency {old} → {size}"
            );
            let old_root =
                ct_merkle::RootHash::<Sha256>::new(merkle::root(&leaves[..old]).into(), old as u64);
            their_root
                .verify_consistency(
                    &old_root,
                    &ConsistencyProof::<Sha256>::try_from_bytes(flat(&ours)).unwrap(),
                )
                .unwrap_or_else(|e| panic!("ct-merkle refuses our proof {old} → {size}: {e:?}"));
            assert!(merkle::verify_consistency(
                old as u64,
                size as u64,
                &merkle::root(&leaves[..old]),
                &root,
                &flat_to_hashes(their_proof.as_bytes())
            ));
        }
    }
}

fn flat_to_hashes(bytes: &[u8]) -> Vec<merkle::Hash> {
    bytes.chunks(32).map(|c| c.try_into().unwrap()).collect()
}
