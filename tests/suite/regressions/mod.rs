//! The mutants the tests were written to kill. The attack passes live beside the behaviour they
//! attack: `standing::attacks`, `browser::approver_attacks`, `browser::approval_attacks`,
//! `demo::signin_attacks`, `confirm_flow::protocol_attacks`, `grants::demo_attacks`,
//! `wiring::listing_attacks`.

mod mutants;
